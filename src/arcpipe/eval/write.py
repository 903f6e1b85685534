"""Stage 4 of an evaluation, write: the files an evaluation leaves in its directory, written all-or-nothing.

    submission, stats = build_submission(votes, test)          # evaluate.evaluate_predictions builds it
    write_results(out_dir, result, step=..., epoch=..., extra_metrics={"eval/lm_loss": ...})

DIR/metrics.json      pass@K, counts, step, epoch, wall time, the loss/accuracy metrics passed in, and pass@K
                      after every ACT step ("depth", score.score_by_depth) and of control passes ("controls") when
                      given
DIR/submission.json   ARC Prize layout, an entry for every test input (see `build_submission`), checked against
                      submission.schema.json (`validate_submission`)
DIR/per_puzzle.csv    one row per test input: correct at each K, candidates, winner's votes, label's rank
DIR/votes.npz         ranked candidates with vote counts and q sums per test input; `load_votes` reads it back

metrics.json is renamed into place last, so its presence means the other three are complete.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from arcpipe.config import ArcpipeError
from arcpipe.eval.grids import Grids
from arcpipe.eval.puzzles import TestPuzzles
from arcpipe.eval.score import Scores
from arcpipe.eval.vote import Votes
from arcpipe.files import atomic_write_many

SCHEMA_PATH = Path(__file__).with_name("submission.schema.json")
FALLBACK_GRID: list[list[int]] = [[0]]  # the attempt written when a test input has no (non-empty) candidate
VOTES_FORMAT = 1  # bump when votes.npz changes layout


@dataclass(frozen=True)
class EvalResult:
    """One set of predictions voted on, scored and written as a submission: what `write_results` writes.

    Made by evaluate.evaluate_predictions (vote.vote -> score.score -> `build_submission`); read by
    `write_results` and by the callers that report pass@K.
    """

    test: TestPuzzles
    votes: Votes
    scores: Scores
    submission: dict[str, Any]
    submission_stats: SubmissionStats
    seconds: float  # post-processing wall time


@dataclass(frozen=True)
class SubmissionStats:
    """How `build_submission` filled submission.json; read by `metrics_of`."""

    num_entries: int  # one per test input of every task
    pairs_without_candidates: int  # entries written entirely with the fallback grid
    empty_attempts: int  # attempts whose candidate was the empty grid (or held a 10 or 11), written as the fallback


def build_submission(
    votes: Votes, test: TestPuzzles, attempts: int = 2
) -> tuple[dict[str, list[dict[str, list[list[int]]]]], SubmissionStats]:
    """`{task: [{"attempt_1": grid, ..., "attempt_<attempts>": grid} for every test input]}` (ARC Prize layout).

    The attempts are the best `attempts` candidates; with fewer candidates the first is repeated (upstream). A test
    input without any candidate, and any empty-grid candidate or one holding a canvas model's pixel id 10 or 11
    (eval/grids.py; never a valid answer, and outside the ARC Prize format's colours), is written as FALLBACK_GRID
    so that every test input of every task has an entry; these cases are counted in the stats.
    """
    submission: dict[str, list[dict[str, list[list[int]]]]] = {}
    without, empty = 0, 0
    for t, name in enumerate(test.task_names):
        entries = []
        for p in range(test.task_pair_start[t], test.task_pair_start[t + 1]):
            cands = range(votes.start[p], min(votes.start[p] + attempts, votes.start[p + 1]))
            grids = [votes.grids.tolist(c) for c in cands]
            if not grids:
                without += 1
                grids = [FALLBACK_GRID]
            grids += [grids[0]] * (attempts - len(grids))
            for i, grid in enumerate(grids):
                if not grid or any(v > 9 for row in grid for v in row):
                    empty += 1
                    grids[i] = FALLBACK_GRID
            entries.append({f"attempt_{i + 1}": grid for i, grid in enumerate(grids)})
        submission[name] = entries
    return submission, SubmissionStats(test.num_pairs, without, empty)


def validate_submission(submission: Mapping[str, Any], test: TestPuzzles | None = None) -> None:
    """Check `submission` against the stored JSON schema, rectangular grids and, given `test`, full coverage."""
    import jsonschema

    schema = json.loads(SCHEMA_PATH.read_text())
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(submission), key=lambda e: list(e.path))
    problems = [f"{'/'.join(str(x) for x in e.path) or '(root)'}: {e.message[:200]}" for e in errors[:3]]
    for name, entries in submission.items() if isinstance(submission, Mapping) else ():
        for j, entry in enumerate(entries if isinstance(entries, list) else []):
            for key, grid in entry.items() if isinstance(entry, dict) else ():
                if isinstance(grid, list) and len({len(row) for row in grid if isinstance(row, list)}) > 1:
                    problems.append(f"{name}/{j}/{key}: rows of different lengths")
    if test is not None:
        sizes = np.diff(test.task_pair_start)
        for name, size in zip(test.task_names, sizes, strict=True):
            got = len(submission.get(name, []))
            if got != size:
                problems.append(f"{name}: {got} entries for {size} test inputs")
        extra = set(submission) - set(test.task_names)
        if extra:
            problems.append(f"tasks not in {test.source}: {sorted(extra)[:3]}")
    if problems:
        raise ArcpipeError(f"submission.json does not match {SCHEMA_PATH.name}: {'; '.join(problems[:5])}")


def depth_metrics(scores: Mapping[int, Scores]) -> dict[str, dict[str, float]]:
    """metrics.json's "depth" from score.score_by_depth: {"<d>": {"pass@<K>": value}}, string keys as JSON has them."""
    return {str(d): {f"pass@{k}": v for k, v in s.pass_at.items()} for d, s in sorted(scores.items())}


def write_results(
    out_dir: str | Path,
    result: EvalResult,
    *,
    step: int | None = None,
    epoch: int | None = None,
    wall_time_s: float | None = None,
    extra_metrics: Mapping[str, float] | None = None,
    depth: Mapping[str, Mapping[str, float]] | None = None,
    info: Mapping[str, Any] | None = None,
    controls: Mapping[str, Mapping[str, float]] | None = None,
    loop_steps: np.ndarray | None = None,
) -> dict[str, Any]:
    """Write metrics.json, submission.json, per_puzzle.csv and votes.npz into out_dir; returns the metrics.

    depth: {"<ACT step>": {"pass@<K>": value}} (`depth_metrics`), written as metrics["depth"]; controls:
    {"<control>": {"pass@<K>": value}} of the control passes (`evaluate.blank_id_control`), as metrics["controls"]
    when there are any; loop_steps: (P,) mean loop steps of each test input's rows (a looped model's,
    evaluate.loop_steps_per_input), per_puzzle.csv's last column, absent without it. Every file is
    first written to a temporary name in out_dir; an error before the renames leaves nothing new behind, and
    metrics.json is renamed last.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    metrics = metrics_of(result, step=step, epoch=epoch, wall_time_s=wall_time_s, extra_metrics=extra_metrics)
    if depth is not None:
        metrics["depth"] = {d: dict(by_k) for d, by_k in depth.items()}
    if controls:
        metrics["controls"] = {name: dict(by_k) for name, by_k in controls.items()}
    if info:
        metrics["info"] = dict(info)
    contents: dict[str, bytes] = {
        "submission.json": json.dumps(result.submission, separators=(",", ":")).encode(),
        "per_puzzle.csv": per_puzzle_csv(result, loop_steps).encode(),
        "votes.npz": _votes_npz(result.votes, result.test),
        "metrics.json": (json.dumps(metrics, indent=2) + "\n").encode(),  # last: marks completion
    }
    atomic_write_many(out_dir, contents)
    return metrics


def metrics_of(
    result: EvalResult,
    *,
    step: int | None = None,
    epoch: int | None = None,
    wall_time_s: float | None = None,
    extra_metrics: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    votes, stats = result.votes, result.submission_stats
    metrics: dict[str, Any] = {
        "step": step,
        "epoch": epoch,
        "voting": "single-checkpoint",
        **{f"pass@{k}": v for k, v in result.scores.pass_at.items()},
        **({} if result.scores.mean_cell_accuracy is None else {"cell_accuracy": result.scores.mean_cell_accuracy}),
        "num_tasks": result.test.num_tasks,
        "num_test_inputs": result.test.num_pairs,
        "num_predictions": votes.num_used + votes.num_unmatched + votes.num_other,
        "num_predictions_used": votes.num_used,
        "num_predictions_unmatched": votes.num_unmatched,
        "num_test_inputs_without_predictions": int((np.diff(votes.start) == 0).sum()),
        "submission_fallback_entries": stats.pairs_without_candidates,
        "submission_empty_attempts": stats.empty_attempts,
        "postprocess_seconds": round(result.seconds, 3),
        "wall_time_s": None if wall_time_s is None else round(wall_time_s, 3),
    }
    for key, value in (extra_metrics or {}).items():
        metrics[key] = float(value)
    return metrics


def per_puzzle_csv(result: EvalResult, loop_steps: np.ndarray | None = None) -> str:
    """One row per test input: puzzle, test_index, pass@K columns (0/1), cell_accuracy (attempt 1's share of right
    cells, score.py), candidates, winner's votes, label's rank; with `loop_steps` ((P,) float, NaN for an input no row
    answered) a last column mean_loop_steps, empty where NaN."""
    test, votes, scores = result.test, result.votes, result.scores
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(
        ["puzzle", "test_index", *(f"pass@{k}" for k in scores.ks)]
        + (["cell_accuracy"] if scores.cell_accuracy is not None else [])
        + ["num_votes", "num_candidates"]
        + ["winner_votes", "winner_mean_q", "label_rank", "label_among_candidates"]
        + (["mean_loop_steps"] if loop_steps is not None else [])
    )
    pair_task, pair_index = test.pair_task, test.pair_index
    for p in range(test.num_pairs):
        cands = votes.of_pair(p)
        count = votes.count[cands]
        rank_ = int(scores.label_rank[p])
        writer.writerow(
            [test.task_names[pair_task[p]], int(pair_index[p])]
            + [int(0 <= rank_ < k) for k in scores.ks]
            + ([f"{scores.cell_accuracy[p]:.6f}"] if scores.cell_accuracy is not None else [])
            + [int(count.sum()), len(count)]
            + ([int(count[0]), f"{votes.q_sum[cands][0] / count[0]:.6f}"] if len(count) else [0, ""])
            + [rank_ + 1 if rank_ >= 0 else "", int(rank_ >= 0)]
            + ([_mean_or_empty(loop_steps[p])] if loop_steps is not None else [])
        )
    return buffer.getvalue()


def _mean_or_empty(value: float) -> str:
    return "" if np.isnan(value) else f"{value:.6f}"


def load_votes(path: str | Path) -> tuple[Votes, TestPuzzles]:
    """Read a votes.npz written by `write_results`: the ranked votes and the ground truth they were scored on
    (pool.pool_votes pools several)."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as z:
            if int(z["format"]) != VOTES_FORMAT:
                raise ArcpipeError(f"{path}: votes format {int(z['format'])}, expected {VOTES_FORMAT}; re-evaluate")
            data = {k: z[k] for k in z.files}
    except (OSError, ValueError, KeyError) as err:
        if isinstance(err, ArcpipeError):
            raise
        raise ArcpipeError(f"{path}: not a votes.npz written by arcpipe evaluate ({err}); re-evaluate") from err
    test = TestPuzzles(
        task_names=[str(n) for n in data["task_names"]],
        task_pair_start=data["task_pair_start"],
        pair_group=np.arange(len(data["has_label"]), dtype=np.int64),
        group_inputs=_grids(data, "input"),
        task_group_start=data["task_pair_start"],
        labels=_grids(data, "label"),
        has_label=data["has_label"],
        source=str(path),
    )
    votes = Votes(data["start"], _grids(data, "candidate"), data["count"], data["q_sum"], data["first"])
    return votes, test


# --------------------------------------------------------------------------------------------------------------


def _votes_npz(votes: Votes, test: TestPuzzles) -> bytes:
    # candidates in ranked order with each one's first-seen position, so pooling can restore first-seen order
    inputs = test.group_inputs.take(test.pair_group)
    arrays: dict[str, np.ndarray] = {
        "format": np.array(VOTES_FORMAT),
        "task_names": np.array(test.task_names, dtype=str),
        "task_pair_start": test.task_pair_start,
        "has_label": test.has_label,
        "start": votes.start,
        "count": votes.count,
        "q_sum": votes.q_sum,
        "first": votes.first,
    }
    for prefix, grids in (("candidate", votes.grids), ("label", test.labels), ("input", inputs)):
        arrays[f"{prefix}_shapes"], arrays[f"{prefix}_offsets"], arrays[f"{prefix}_cells"] = (
            grids.shapes,
            grids.offsets,
            grids.cells,
        )
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    return buffer.getvalue()


def _grids(data: Mapping[str, np.ndarray], prefix: str) -> Grids:
    return Grids(data[f"{prefix}_shapes"], data[f"{prefix}_offsets"], data[f"{prefix}_cells"])
