"""Stop rules and the quick/full evaluation schedule: what to do at a run's evaluation boundary, from its scores so far.

    score = boundary_score(per_puzzle, epoch=4, metric="pass@2", selection_tasks=2, seed=0)
    decision = decide([*earlier_scores, score], run.stop, run.boundaries())   # Decision(stop=True, reason=...)
    full = full_evaluation_due(quick_scores, epoch=4, boundaries=run.boundaries(), schedule=quick, stops=False)

A stop rule (`runs.<run>.stop`, config/stop.py) reads one pass@K per evaluated boundary. When
evaluation.selection_tasks is set it is scored on the held-out selection tasks, drawn exactly as the report's
checkpoint selection draws them (report/selection.py: the run's dataset seed), never on the tasks the reported number
is scored on; with selection_tasks 0 it falls back to every test task, and each score and decision says so.

The rule fires at the first boundary where the metric reaches `target`, or where `patience` evaluations have passed
since the best one without a gain of more than `min_delta` (the first evaluation sets the best). A decision at the
run's last planned boundary never stops: there is nothing left to skip. Raising the target or the patience later only
changes the decisions, so training continues from the stopping boundary's checkpoint.

Rule decide_boundary (rules/train.smk), a Snakemake checkpoint, calls `decide_at_boundary` at the end of each
training segment but the last: the record it writes (results/runs/{run}/decisions/epoch_{epoch}.json) decides which
of the run's later files the workflow asks for (rules/common.smk: `planned_epochs`). Nothing here reads torch or runs
a model; `decide_at_boundary` is the only function that reads or writes files.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from arcpipe.config import ArcpipeError, QuickEvalConfig, StopConfig
from arcpipe.files import atomic_write_many
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
    `seed`: the held-out draw's, the run's dataset seed as the report's selection uses it."""
    history = read_history(json.loads(Path(previous).read_text())) if previous else []
    for epoch, path in zip(epochs, metrics, strict=True):
        csv = Path(path).with_name("per_puzzle.csv")
        try:
            per_puzzle = pd.read_csv(csv, dtype={"puzzle": str})
        except (OSError, pd.errors.ParserError) as err:
            raise ArcpipeError(f"{csv}: cannot read per-puzzle results ({err}); re-run its evaluation") from err
        history.append(boundary_score(per_puzzle, epoch, rule.metric, selection_tasks, seed))
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
    elif rule.target is not None and current.value >= rule.target:
        fired, why = "target", f"{reading} >= target {rule.target:g}"
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
    index = list(boundaries).index(epoch) + 1  # 1-based: the full_every-th boundary is index full_every
    earlier = [s.value for s in quick_history[:-1]]
    return (
        not earlier
        or quick_history[-1].value > max(earlier)
        or epoch == boundaries[-1]
        or stops
        or (schedule.full_every is not None and index % schedule.full_every == 0)
    )


def quick_full_gap(pairs: Sequence[tuple[int, float, float]], metric: str = "pass@2") -> str:
    """How far quick scores lie from full ones on the checkpoints that got both: (epoch, quick, full) fractions ->
    one line for the report, in percentage points."""
    if not pairs:
        return f"quick vs full {metric}: no checkpoint has both"
    gaps = [100 * (quick - full) for _, quick, full in pairs]
    worst = max(range(len(gaps)), key=lambda i: abs(gaps[i]))
    return (
        f"quick vs full {metric} on {len(gaps)} checkpoint(s): mean |quick - full| "
        f"{sum(abs(g) for g in gaps) / len(gaps):.1f} points, mean quick - full {sum(gaps) / len(gaps):+.1f}, "
        f"largest {gaps[worst]:+.1f} at epoch {pairs[worst][0]}"
    )


def boundary_score(
    per_puzzle: pd.DataFrame, epoch: int, metric: str, selection_tasks: int, seed: int, quick: bool = False
) -> Score:
    """A boundary's score from its evaluation's per_puzzle.csv (load.read_per_puzzle's frame): on the held-out
    selection tasks (report/selection.py's draw with the run's dataset seed), else on every task, said so."""
    scores = task_scores(per_puzzle)
    if metric not in scores.columns:
        have = ", ".join(c for c in scores.columns)
        raise ArcpipeError(
            f"the evaluation at epoch {epoch} has no {metric} (it has {have}); set the stop rule's metric to one of "
            "them, or evaluation.pass_ks to include it"
        )
    tasks = list(scores.index)
    if selection_tasks == 0:
        return Score(
            epoch,
            float(scores[metric].mean()),
            f"all {len(tasks)} test tasks (fall-back: evaluation.selection_tasks is 0, so the rule reads the tasks "
            "the reported number is scored on)",
            fallback=True,
            quick=quick,
        )
    held = held_out_tasks(tasks, selection_tasks, seed, source=f"the evaluation at epoch {epoch}")
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


def _best_index(history: Sequence[Score], min_delta: float) -> int:
    # the best moves only on a gain of more than min_delta; a smaller rise does not reset the patience
    best = 0
    for i, score in enumerate(history[1:], start=1):
        if score.value - history[best].value > min_delta:
            best = i
    return best
