"""Stop rules and the quick/full evaluation schedule: what to do at a run's evaluation boundary, from its scores so far.

    score = boundary_score(per_puzzle, epoch=4, metric="pass@2", selection_tasks=2, seed=0)
    decision = decide([*earlier_scores, score], run.stop, run.boundaries())   # Decision(stop=True, reason=...)
    full = full_evaluation_due(quick_scores, epoch=4, boundaries=run.boundaries(), schedule=quick, stops=False)

A stop rule (`runs.<run>.stop`, config/stop.py) reads one pass@K per evaluated boundary. When
evaluation.selection_tasks is set it is scored on the held-out selection tasks, drawn exactly as the report's
checkpoint selection draws them (report/selection.py: the run's dataset seed), never on the tasks the reported number
is scored on; with selection_tasks 0 it falls back to every test task, and each score and decision says so.

The rule fires at the first boundary where the metric reaches `target` (target 0: rises above 0), or where
`patience` evaluations have passed since the best one without a gain of more than `min_delta` (the first evaluation
sets the best). A decision at the run's last planned boundary never stops: there is nothing left to skip. Raising
the target or the patience later only changes the decisions, so training continues from the stopping boundary's
checkpoint.

Rule decide_boundary (rules/train.smk), a Snakemake checkpoint, calls `decide_at_boundary` at the end of each
training segment but the last: the record it writes (results/runs/{run}/decisions/epoch_{epoch}.json) decides which
of the run's later files the workflow asks for (arcpipe.rule_inputs asks arcpipe.plan).

Quick evaluations (evaluation.quick): every boundary is first evaluated on `quick_tasks`, a fixed subset of the test
tasks that holds the held-out selection tasks (so a stop rule reads its score from the quick evaluation); checkpoint
schedule_full (rules/eval.smk) calls `schedule_at_boundary`, whose record (results/eval/{run}/schedule/
epoch_{epoch}.json) says whether the full evaluation of that boundary is due (`full_evaluation_due`).

Nothing here reads torch or runs a model; `decide_at_boundary`, `schedule_at_boundary` and `write_quick_tasks` are
the only functions that read or write files.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from arcpipe.config import ArcpipeError, QuickEvalConfig, StopConfig
from arcpipe.files import atomic_write_many
from arcpipe.plan import read_decision
from arcpipe.report.quick import quick_full_gap as quick_full_gap  # the report prints it; tests import it here
from arcpipe.report.selection import held_out_tasks, subset_pass_at, task_scores

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Score:
    """One boundary's value of a stop rule's metric, and on which tasks it was scored."""

    epoch: int
    value: float  # a fraction, as metrics.json's pass@K
    tasks: str  # "2 held-out selection tasks", or the fall-back's "all 40 test tasks (fall-back: ...)"
    fallback: bool = False  # scored on the test tasks the reported number uses
    quick: bool = False  # from a quick evaluation (a subset of the test tasks)


@dataclass(frozen=True)
class Decision:
    """What a boundary's rule decided: stop (skip every later segment and evaluation) or continue, and why."""

    epoch: int
    stop: bool
    reason: str  # one line, as the log and the report print it
    metric: str
    fired: str | None  # "target" or "patience" when stop, else None
    best_epoch: int
    best_value: float
    fallback: bool  # scored on the test tasks: no held-out selection tasks
    planned_epochs: int
    scores: list[Score] = field(default_factory=list)

    @property
    def skipped_epochs(self) -> int:
        """Planned epochs that are never trained: after this boundary when it stops, else none."""
        return self.planned_epochs - self.epoch if self.stop else 0


def decide_at_boundary(
    run: str,
    rule: StopConfig,
    metrics: Sequence[str | Path],
    previous: str | Path | None,
    out: str | Path,
    *,
    boundaries: Sequence[int],
    epochs: Sequence[int],
    selection_tasks: int,
    seed: int,
) -> dict[str, Any]:
    """Rule decide_boundary: score the segment's evaluations (metrics.json at each of `epochs`; per_puzzle.csv lies
    beside it), add them to the previous decision's history, decide, write the record to `out` and log its line.
    `seed`: the held-out draw's, the run's dataset seed as the report's selection uses it. A quick evaluation's
    metrics.json names its held-out tasks (drawn from every test task, not from its subset): the score uses them."""
    history = read_history(_record(previous)) if previous else []
    for epoch, path in zip(epochs, metrics, strict=True):
        csv = Path(path).with_name("per_puzzle.csv")
        try:
            per_puzzle = pd.read_csv(csv, dtype={"puzzle": str})
        except (OSError, pd.errors.ParserError) as err:
            raise ArcpipeError(f"{csv}: cannot read per-puzzle results ({err}); re-run its evaluation") from err
        quick = _quick_info(path)
        held_out = quick["held_out"] if quick else None
        history.append(boundary_score(per_puzzle, epoch, rule.metric, selection_tasks, seed, bool(quick), held_out))
    decision = decide(history, rule, boundaries)
    record = decision_record(decision, run, rule)
    write_decision(out, record)
    log.info("%s", decision_line(record, out))
    return record


def decision_line(record: Mapping[str, Any], path: str | Path) -> str:
    """`stop rule: smoke-trm stop at epoch 2 of 4: ... (record PATH)`, the line the log and the driver print."""
    return f"stop rule: {record['run']} {record['reason']} (record {path})"


def decide(history: Sequence[Score], rule: StopConfig, boundaries: Sequence[int]) -> Decision:
    """The rule's decision at the last boundary of `history` (one score per evaluated boundary, in epoch order)."""
    assert history and [s.epoch for s in history] == sorted({s.epoch for s in history}), history
    current = history[-1]
    best_i = _best_index(history, rule.min_delta)
    best = history[best_i]
    since_best = len(history) - 1 - best_i
    reading = f"{rule.metric} = {current.value:.3f} on {current.tasks} at epoch {current.epoch}"
    fired, why = None, ""
    if current.epoch == boundaries[-1]:
        why = f"{reading}; the planned last epoch"
    elif rule.min_epoch is not None and current.epoch < rule.min_epoch:
        why = f"{reading}; no stop before min_epoch {rule.min_epoch}"
    elif rule.target is not None and reached(current.value, rule.target):
        fired, why = "target", f"{reading} {'>' if rule.target == 0 else '>='} target {rule.target:g}"
    elif rule.patience is not None and since_best >= rule.patience:
        fired = "patience"
        why = (
            f"{reading}: {since_best} evaluation(s) without a gain above min_delta {rule.min_delta:g} over the best, "
            f"{best.value:.3f} at epoch {best.epoch} (patience {rule.patience})"
        )
    else:
        left = [] if rule.patience is None else [f"{since_best} of patience {rule.patience} without a gain"]
        why = "; ".join([reading, f"best {best.value:.3f} at epoch {best.epoch}", *left])
    verb = f"stop at epoch {current.epoch} of {boundaries[-1]}" if fired else "continue"
    return Decision(
        epoch=current.epoch,
        stop=fired is not None,
        reason=f"{verb}: {why}",
        metric=rule.metric,
        fired=fired,
        best_epoch=best.epoch,
        best_value=best.value,
        fallback=current.fallback,
        planned_epochs=boundaries[-1],
        scores=list(history),
    )


def reached(value: float, target: float) -> bool:
    """Whether a score reaches a stop rule's target: at or above it; target 0 means above 0 (anything learned)."""
    return value > 0 if target == 0 else value >= target


def full_evaluation_due(
    quick_history: Sequence[Score],
    epoch: int,
    boundaries: Sequence[int],
    schedule: QuickEvalConfig,
    stops: bool = False,
) -> bool:
    """Whether boundary `epoch`, whose quick score is the last of `quick_history`, also gets the full evaluation:
    its quick score is the best so far (above every earlier one; the first boundary's is), it is the run's last
    planned boundary or the one its stop rule fired at (`stops`), or it is every `schedule.full_every`-th boundary."""
    assert quick_history and quick_history[-1].epoch == epoch, (quick_history, epoch)
    earlier = [s.value for s in quick_history[:-1]]
    return not earlier or quick_history[-1].value > max(earlier) or stops or schedule.always_full(epoch, boundaries)


def quick_tasks(
    task_names: Sequence[str], schedule: QuickEvalConfig, selection_tasks: int, seed: int
) -> dict[str, Any]:
    """The quick evaluation's tasks: the held-out selection tasks (report/selection.py's draw, `selection_tasks` of
    them, seed `seed`) and a draw with numpy's default_rng(seed) from the other task names in sorted order, up to
    `schedule.num_tasks` in all (never fewer than the held-out ones); sorted. Returns the record `write_quick_tasks`
    writes: tasks, held_out, test_tasks (how many there are) and sha256 (of the task list, the subset's identity)."""
    held = held_out_tasks(task_names, selection_tasks, seed) if selection_tasks else []
    others = sorted(set(task_names) - set(held))
    wanted = max(schedule.num_tasks(len(task_names)) - len(held), 0)
    drawn = np.random.default_rng(seed).choice(len(others), size=min(wanted, len(others)), replace=False)
    tasks = sorted([*held, *(others[i] for i in drawn)])
    return {
        "tasks": tasks,
        "held_out": held,
        "test_tasks": len(task_names),
        "sha256": hashlib.sha256("\n".join(tasks).encode()).hexdigest(),
    }


def write_quick_tasks(
    test_puzzles: str | Path, out: str | Path, schedule: QuickEvalConfig, selection_tasks: int, seed: int
) -> dict[str, Any]:
    """Rule draw_quick_tasks: `quick_tasks` of a dataset's test_puzzles.json, written to `out` (JSON)."""
    names = list(json.loads(Path(test_puzzles).read_text()))
    record = quick_tasks(names, schedule, selection_tasks, seed)
    atomic_write_many(Path(out).parent, {Path(out).name: (json.dumps(record, indent=2) + "\n").encode()})
    log.info("quick evaluation: %d of %d test tasks (sha256 %s)", len(record["tasks"]), len(names), record["sha256"])
    return record


def schedule_at_boundary(
    run: str,
    metrics: Sequence[str | Path],
    epochs: Sequence[int],
    decision: str | Path | None,
    out: str | Path,
    *,
    boundaries: Sequence[int],
    schedule: QuickEvalConfig,
    metric: str,
) -> dict[str, Any]:
    """Checkpoint schedule_full: whether the full evaluation of the last of `epochs` is due (`full_evaluation_due`),
    from the quick evaluations' metrics.json at `epochs` (every boundary up to it) and, at a segment end of a run with
    a stop rule, its decision record (a stop there is the run's stopping checkpoint). Writes the record to `out`."""
    history = [
        Score(epoch, float(json.loads(Path(path).read_text())[metric]), "quick evaluation", quick=True)
        for epoch, path in zip(epochs, metrics, strict=True)
    ]
    stops = bool(decision) and bool(_record(decision)["stop"])
    epoch = epochs[-1]
    full = full_evaluation_due(history, epoch, boundaries, schedule, stops)
    record = {
        "run": run,
        "epoch": epoch,
        "full": full,
        "reason": _schedule_reason(history, epoch, boundaries, schedule, stops) if full else "not due",
        "metric": metric,
        "schedule": schedule.model_dump(),
        "scores": [asdict(s) for s in history],
    }
    atomic_write_many(Path(out).parent, {Path(out).name: (json.dumps(record, indent=2) + "\n").encode()})
    log.info("quick/full schedule: %s epoch %d: full evaluation %s", run, epoch, record["reason"])
    return record


def boundary_score(
    per_puzzle: pd.DataFrame,
    epoch: int,
    metric: str,
    selection_tasks: int,
    seed: int,
    quick: bool = False,
    held_out: Sequence[str] | None = None,
) -> Score:
    """A boundary's score from its evaluation's per_puzzle.csv (load.read_per_puzzle's frame): on the held-out
    selection tasks (report/selection.py's draw with the run's dataset seed), else on every task, said so.
    held_out: the held-out tasks as drawn from every test task, for a quick evaluation's subset (`quick_tasks`)."""
    scores = task_scores(per_puzzle)
    if metric not in scores.columns:
        have = ", ".join(c for c in scores.columns)
        raise ArcpipeError(
            f"the evaluation at epoch {epoch} has no {metric} (it has {have}); set the metric to one of them, or "
            + (
                "re-evaluate (evaluations before arcpipe scored cell_accuracy lack it)"
                if metric == "cell_accuracy"
                else "evaluation.pass_ks to include it"
            )
        )
    tasks = list(scores.index)
    if selection_tasks == 0:
        return Score(
            epoch,
            float(scores[metric].mean()),
            (f"the {len(tasks)} quick-evaluation tasks" if quick else f"all {len(tasks)} test tasks")
            + " (fall-back: evaluation.selection_tasks is 0, so the rule reads the tasks the reported number is "
            "scored on)",
            fallback=True,
            quick=quick,
        )
    if held_out is None:
        held = held_out_tasks(tasks, selection_tasks, seed, source=f"the evaluation at epoch {epoch}")
    else:
        held = list(held_out)
    value = float(subset_pass_at(scores, held)[metric])
    return Score(epoch, value, f"{len(held)} held-out selection tasks", quick=quick)


def saved_gpu_hours(decision: Decision, gpu_hours_trained: float) -> float:
    """GPU-hours the skipped epochs would have cost, at the trained epochs' rate (0 when the run did not stop)."""
    return gpu_hours_trained * decision.skipped_epochs / decision.epoch


def decision_record(decision: Decision, run: str, rule: StopConfig) -> dict[str, Any]:
    """The JSON record of a decision (results/runs/{run}/decisions/epoch_{epoch}.json)."""
    return {
        "run": run,
        **{k: v for k, v in asdict(decision).items() if k != "scores"},
        "skipped_epochs": decision.skipped_epochs,
        "rule": rule.model_dump(),
        "scores": [asdict(s) for s in decision.scores],
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def read_history(record: Mapping[str, Any]) -> list[Score]:
    """The scores a decision record was made from (the next boundary's decision adds its own)."""
    return [Score(**s) for s in record["scores"]]


def write_decision(path: str | Path, record: Mapping[str, Any]) -> None:
    atomic_write_many(Path(path).parent, {Path(path).name: (json.dumps(record, indent=2) + "\n").encode()})


def _record(path: str | Path) -> dict[str, Any]:
    """A decision record this job reads as an input (arcpipe.plan's reader: the one reader of decision records)."""
    record = read_decision(path)
    if record is None:
        raise ArcpipeError(f"{path}: the decision record is missing; re-run its decide_boundary job")
    return record


def _quick_info(metrics: str | Path) -> dict[str, Any] | None:
    # a quick evaluation's metrics.json names its subset (eval/evaluate.py: info.quick)
    try:
        return (json.loads(Path(metrics).read_text()).get("info") or {}).get("quick")
    except (OSError, json.JSONDecodeError) as err:
        raise ArcpipeError(f"{metrics}: cannot read evaluation metrics ({err}); re-run its evaluation") from err


def _schedule_reason(
    history: Sequence[Score], epoch: int, boundaries: Sequence[int], schedule: QuickEvalConfig, stops: bool
) -> str:
    index = list(boundaries).index(epoch) + 1
    earlier = [s.value for s in history[:-1]]
    reasons = [
        "the best quick score so far" if not earlier or history[-1].value > max(earlier) else "",
        "the last planned boundary" if epoch == boundaries[-1] else "",
        "the stopping boundary" if stops else "",
        f"every {schedule.full_every}th boundary" if schedule.full_every and index % schedule.full_every == 0 else "",
    ]
    return "due: " + ", ".join(r for r in reasons if r)


def _best_index(history: Sequence[Score], min_delta: float) -> int:
    # the best moves only on a gain of more than min_delta; a smaller rise does not reset the patience
    best = 0
    for i, score in enumerate(history[1:], start=1):
        if score.value - history[best].value > min_delta:
            best = i
    return best
