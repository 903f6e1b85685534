"""The files an evaluation leaves in its directory, written all-or-nothing, and pooled votes across checkpoints.

    result = evaluate_predictions(inputs, preds, puzzle_identifiers, q_halt_logits, dataset_dir)
    write_results(out_dir, result, step=..., epoch=..., extra_metrics={"eval/lm_loss": ...})

DIR/metrics.json      pass@K, counts, step, epoch, wall time, the loss/accuracy metrics passed in, and pass@K
                      after every ACT step ("depth", eval/depth.py) and of control passes ("controls") when given
DIR/submission.json   ARC Prize layout, an entry for every test input (see passk.build_submission)
DIR/per_puzzle.csv    one row per test input: correct at each K, candidates, winner's votes, label's rank
DIR/votes.npz         ranked candidates with vote counts and q sums per test input; `pool_votes` pools them

metrics.json is renamed into place last, so its presence means the other three are complete.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from arcpipe.config import ArcpipeError
from arcpipe.eval.grids import Grids
from arcpipe.eval.passk import (
    DEFAULT_KS,
    Scores,
    SubmissionStats,
    TestPuzzles,
    build_submission,
    load_test_puzzles,
    score,
    validate_submission,
)
from arcpipe.eval.vote import Votes, rank, vote
from arcpipe.files import atomic_write_many

log = logging.getLogger(__name__)

VOTES_FORMAT = 1  # bump when votes.npz changes layout


@dataclass(frozen=True)
class EvalResult:
    test: TestPuzzles
    votes: Votes
    scores: Scores
    submission: dict[str, Any]
    submission_stats: SubmissionStats
    seconds: float  # post-processing wall time


def evaluate_predictions(
    inputs: np.ndarray,
    preds: np.ndarray,
    puzzle_identifiers: np.ndarray,
    q_halt_logits: np.ndarray,
    identifiers: Sequence[str] | str | Path,
    test: TestPuzzles | str | Path,
    ks: Sequence[int] = DEFAULT_KS,
) -> EvalResult:
    """Vote, score and build the submission for one set of predictions (fresh votes: one checkpoint).

    identifiers: the dataset's identifiers.json (path or loaded list); test: its test_puzzles.json (path or loaded).
    """
    start = time.perf_counter()
    if not isinstance(identifiers, Sequence) or isinstance(identifiers, str):
        identifiers = load_identifiers(identifiers)
    if not isinstance(test, TestPuzzles):
        test = load_test_puzzles(test)
    votes = vote(inputs, preds, puzzle_identifiers, q_halt_logits, identifiers, test)
    scores = score(votes, test, ks)
    submission, stats = build_submission(votes, test)
    validate_submission(submission, test)
    seconds = time.perf_counter() - start
    log.info(
        "%d predictions (%d used, %d unmatched, %d other) -> %s in %.2f s",
        votes.num_used + votes.num_unmatched + votes.num_other,
        votes.num_used,
        votes.num_unmatched,
        votes.num_other,
        ", ".join(f"pass@{k} {v:.4f}" for k, v in scores.pass_at.items()),
        seconds,
    )
    return EvalResult(test, votes, scores, submission, stats, seconds)


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
) -> dict[str, Any]:
    """Write metrics.json, submission.json, per_puzzle.csv and votes.npz into out_dir; returns the metrics.

    depth: {"<ACT step>": {"pass@<K>": value}} (`depth.depth_metrics`), written as metrics["depth"]; controls:
    {"<control>": {"pass@<K>": value}} of the control passes (`predict.blank_id_control`), as metrics["controls"]
    when there are any. Every file is
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
        "per_puzzle.csv": per_puzzle_csv(result).encode(),
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


def per_puzzle_csv(result: EvalResult) -> str:
    """One row per test input: puzzle, test_index, pass@K columns (0/1), candidates, winner's votes, label's rank."""
    test, votes, scores = result.test, result.votes, result.scores
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(
        ["puzzle", "test_index", *(f"pass@{k}" for k in scores.ks), "num_votes", "num_candidates"]
        + ["winner_votes", "winner_mean_q", "label_rank", "label_among_candidates"]
    )
    pair_task, pair_index = test.pair_task, test.pair_index
    for p in range(test.num_pairs):
        cands = votes.of_pair(p)
        count = votes.count[cands]
        rank_ = int(scores.label_rank[p])
        writer.writerow(
            [test.task_names[pair_task[p]], int(pair_index[p])]
            + [int(0 <= rank_ < k) for k in scores.ks]
            + [int(count.sum()), len(count)]
            + ([int(count[0]), f"{votes.q_sum[cands][0] / count[0]:.6f}"] if len(count) else [0, ""])
            + [rank_ + 1 if rank_ >= 0 else "", int(rank_ >= 0)]
        )
    return buffer.getvalue()


def load_identifiers(path: str | Path) -> list[str]:
    path = Path(path)
    try:
        names = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ArcpipeError(f"{path}: cannot read identifiers ({err}); rebuild the dataset") from err
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ArcpipeError(f"{path}: expected a JSON list of puzzle names; rebuild the dataset")
    return names


def load_votes(path: str | Path) -> tuple[Votes, TestPuzzles]:
    """Read a votes.npz written by `write_results`: the ranked votes and the ground truth they were scored on."""
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


def pool_votes(paths: Sequence[str | Path], ks: Sequence[int] = DEFAULT_KS) -> tuple[Scores, Votes, TestPuzzles]:
    """Pool the votes of several evaluations (upstream's aggregated voting, upstream.md 5.4) and score them.

    Per test input, equal candidates' counts are summed and their q sums added; the mean q is the pooled sum over
    the pooled count; full ties go to the candidate seen first, taking files in the order given (evaluation
    order) and candidates in each file's order. All files must hold the same test inputs and labels.
    """
    if not paths:
        raise ArcpipeError("pool_votes: no votes.npz files given")
    loaded = [load_votes(p) for p in paths]
    test = loaded[0][1]
    for path, (_, other) in zip(paths[1:], loaded[1:], strict=True):
        if other.task_names != test.task_names or not _same_grids(other.labels, test.labels):
            raise ArcpipeError(f"{path}: scored on other test puzzles than {paths[0]}; pool one dataset at a time")
    # items: each file's candidates in first-seen order, files in the given order
    parts = [
        (v, np.repeat(np.arange(v.num_pairs), np.diff(v.start)), np.argsort(v.first, kind="stable")) for v, _ in loaded
    ]
    group = np.concatenate([g[o] for v, g, o in parts])
    grids = Grids.concat([v.grids.take(o) for v, g, o in parts])
    count = np.concatenate([v.count[o] for v, g, o in parts])
    q_sum = np.concatenate([v.q_sum[o] for v, g, o in parts])
    pooled = rank(group, grids, count, q_sum, test.num_pairs)
    return score(pooled, test, ks), pooled, test


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


def _same_grids(a: Grids, b: Grids) -> bool:
    return (
        np.array_equal(a.shapes, b.shapes) and np.array_equal(a.offsets, b.offsets) and np.array_equal(a.cells, b.cells)
    )
