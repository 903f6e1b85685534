"""Votes pooled over a run's checkpoints (upstream's aggregated voting, docs/reference/upstream-recursive.md 10.4), from
their votes.npz.

    write_pooled_last(["results/eval/R/epoch_8/votes.npz", ...], "results/eval/R/pooled_last2/metrics.json", ks)
    write_pooled_evaluation([votes of each run], "results/eval/E/ensemble", ks, info)   # an ensemble of runs

Above the stages: reads what write.write_results wrote, pools with vote.pool and scores with score.score. Needs
no torch, so that the report (report/tables.py) can pool too.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from arcpipe.config import ArcpipeError
from arcpipe.eval.grids import Grids
from arcpipe.eval.puzzles import TestPuzzles
from arcpipe.eval.score import DEFAULT_KS, Scores, score
from arcpipe.eval.vote import Votes, pool
from arcpipe.eval.write import EvalResult, build_submission, load_votes, validate_submission, write_results
from arcpipe.files import atomic_write_many


def pool_votes(paths: Sequence[str | Path], ks: Sequence[int] = DEFAULT_KS) -> tuple[Scores, Votes, TestPuzzles]:
    """Pool the votes of several evaluations (vote.pool, taking files in the order given: evaluation order) and
    score them. All files must hold the same test inputs and labels."""
    if not paths:
        raise ArcpipeError("pool_votes: no votes.npz files given")
    loaded = [load_votes(p) for p in paths]
    test = loaded[0][1]
    for path, (_, other) in zip(paths[1:], loaded[1:], strict=True):
        if other.task_names != test.task_names or not _same_grids(other.labels, test.labels):
            raise ArcpipeError(f"{path}: scored on other test puzzles than {paths[0]}; pool one dataset at a time")
    pooled = pool([votes for votes, _ in loaded], test.num_pairs)
    return score(pooled, test, ks), pooled, test


def pooled_last_metrics(votes_paths: Sequence[str | Path], ks: Sequence[int] = DEFAULT_KS) -> dict[str, Any]:
    """pass@K with the votes of `votes_paths` (results/eval/{run}/epoch_{N}/votes.npz, oldest first) pooled."""
    scores, _, _ = pool_votes(votes_paths, ks)
    epochs = [_epoch_of(Path(p)) for p in votes_paths]
    return {
        **{f"pass@{k}": v for k, v in scores.pass_at.items()},
        "epoch": epochs[-1],
        "info": {"run": Path(votes_paths[-1]).parent.parent.name, "pooled_epochs": epochs},
    }


def write_pooled_last(votes_paths: Sequence[str | Path], out: str | Path, ks: Sequence[int] = DEFAULT_KS) -> None:
    """`pooled_last_metrics` written to `out` (a metrics.json), atomically."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(pooled_last_metrics(votes_paths, ks), indent=2) + "\n"
    atomic_write_many(out.parent, {out.name: text.encode()})


def write_pooled_evaluation(
    votes_paths: Sequence[str | Path],
    out_dir: str | Path,
    ks: Sequence[int] = DEFAULT_KS,
    info: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The votes of several runs' evaluations on one test set pooled and written as one evaluation (metrics.json,
    submission.json, per_puzzle.csv, votes.npz: write.write_results), as upstream VARC ensembles its ViT and U-Net
    by majority-voting every answer of both; the metrics, with `info` and the pooled files under info.pooled."""
    started = time.perf_counter()
    scores, pooled, test = pool_votes(votes_paths, ks)
    # votes.npz keeps the votes, not the predictions that voted for nothing: every pooled vote is a prediction used
    pooled = dataclasses.replace(pooled, num_used=int(pooled.count.sum()))
    submission, stats = build_submission(pooled, test)
    validate_submission(submission, test)
    result = EvalResult(test, pooled, scores, submission, stats, time.perf_counter() - started)
    protocol = {**(info or {}), "pooled": [str(p) for p in votes_paths]}
    return write_results(out_dir, result, wall_time_s=time.perf_counter() - started, info=protocol)


# --------------------------------------------------------------------------------------------------------------


def _epoch_of(votes: Path) -> int:
    name = votes.parent.name  # epoch_{N}
    if not name.startswith("epoch_") or not name[6:].isdigit():
        raise ArcpipeError(f"{votes}: expected results/eval/<run>/epoch_<N>/votes.npz")
    return int(name[6:])


def _same_grids(a: Grids, b: Grids) -> bool:
    return (
        np.array_equal(a.shapes, b.shapes) and np.array_equal(a.offsets, b.offsets) and np.array_equal(a.cells, b.cells)
    )
