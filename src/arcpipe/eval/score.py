"""Stage 3 of an evaluation, score: ranked candidates -> pass@K, each test pair's label rank, each task's score.

pass@K (docs/reference/upstream-recursive.md 10.3): a test pair is solved at K when its true output is among its K best
candidates; a task scores the fraction of its test pairs solved (fractional credit); pass@K is the mean over every task
of test_puzzles.json, so a pair without any prediction counts as wrong.

Cell accuracy, the dense companion of pass@K (for stop rules and halving rungs early in training, when every arm
still scores pass@2 = 0): per test pair, the share of the true output's cells that the best candidate (attempt 1)
gets right, 0 where its shape differs from the true output's or it has no candidate; per task, the mean over its
test pairs; the evaluation's, the mean over tasks. It measures how close attempt 1 is, not whether it is right.

    scores = score(votes, test, ks)                            # vote.vote's candidates: the evaluation's pass@K
    scores.cell_accuracy                                       # and each test pair's cell accuracy (see below)
    by_step = score_by_depth(vote_by_depth(...), test, ks)     # pass@K after every ACT step (accuracy vs depth)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from arcpipe.config import ArcpipeError
from arcpipe.eval.grids import grid_keys, match_grids
from arcpipe.eval.puzzles import TestPuzzles
from arcpipe.eval.vote import KeyVotes, Votes

DEFAULT_KS = (1, 2, 5, 10, 100, 1000)


@dataclass(frozen=True)
class Scores:
    """pass@K of one vote, with each test pair's label rank and each task's score.

    Made by `score` and `score_ranks` (one vote) and `score_by_depth` (one per ACT step); read by write
    (metrics.json, per_puzzle.csv) and the callers that report pass@K (evaluate.py, pool.py).
    """

    ks: tuple[int, ...]
    label_rank: np.ndarray  # (P,) int64 0-based rank of the true output among the candidates, -1 if absent
    task_score: np.ndarray  # (T, len(ks)) fraction of the task's test pairs solved at each K
    pass_at: dict[int, float] = field(default_factory=dict)  # K -> mean task score
    # (P,) float64 share of the true output's cells attempt 1 gets right (module docstring); None when the scores
    # were made from label ranks alone (score_ranks, score_by_depth: no candidate grids to compare)
    cell_accuracy: np.ndarray | None = None
    task_cell_accuracy: np.ndarray | None = None  # (T,) the mean over each task's test pairs
    mean_cell_accuracy: float | None = None  # the mean over tasks

    def solved(self, k: int) -> np.ndarray:
        """(P,) bool: the pair's true output is among its k best candidates."""
        return (self.label_rank >= 0) & (self.label_rank < k)


def score(votes: Votes, test: TestPuzzles, ks: Sequence[int] = DEFAULT_KS) -> Scores:
    """pass@K for each K in `ks`: per test pair, averaged per task, then over all tasks of `test`."""
    scores = score_ranks(_label_ranks(votes, test), test, ks)
    cells = _cell_accuracy(votes, test)
    per_task = np.add.reduceat(cells, test.task_pair_start[:-1]) / np.diff(test.task_pair_start)
    return replace(
        scores,
        cell_accuracy=cells,
        task_cell_accuracy=per_task,
        mean_cell_accuracy=float(per_task.sum() / test.num_tasks),
    )


def score_ranks(label_rank: np.ndarray, test: TestPuzzles, ks: Sequence[int] = DEFAULT_KS) -> Scores:
    """pass@K from each test pair's 0-based label rank among its ranked candidates ((P,) int64, -1: absent)."""
    ks = tuple(int(k) for k in ks)
    if not ks or min(ks) < 1:
        raise ArcpipeError(f"evaluation.pass_ks: {list(ks)} must be positive integers")
    solved = (label_rank[:, None] >= 0) & (label_rank[:, None] < np.array(ks)[None, :])  # (P, len(ks))
    per_task_sum = np.add.reduceat(solved.astype(np.float64), test.task_pair_start[:-1], axis=0)
    task_score = per_task_sum / np.diff(test.task_pair_start)[:, None]
    means = task_score.sum(axis=0) / test.num_tasks
    return Scores(ks, label_rank, task_score, {k: float(m) for k, m in zip(ks, means, strict=True)})


def score_by_depth(votes: Sequence[KeyVotes], test: TestPuzzles, ks: Sequence[int] = DEFAULT_KS) -> dict[int, Scores]:
    """ACT step d (1-based) -> pass@K of the vote over every row's answer after d steps (vote.vote_by_depth).

    The last step's numbers are the evaluation's pass@K: its vote is over the same answers and q_halt as `vote`'s.
    """
    label_keys = grid_keys(test.labels)
    return {d: score_ranks(_key_label_ranks(v, label_keys, test), test, ks) for d, v in enumerate(votes, start=1)}


# --------------------------------------------------------------------------------------------------------------


def _label_ranks(votes: Votes, test: TestPuzzles) -> np.ndarray:
    # each pair's label is a query; its "bucket" is the pair's own candidate range
    found = match_grids(
        test.labels,
        np.where(test.has_label, np.arange(test.num_pairs), -1),
        votes.grids,
        votes.start[:-1],
        votes.start[1:],
    )
    return np.where(found >= 0, found - votes.start[:-1], -1).astype(np.int64)


def _cell_accuracy(votes: Votes, test: TestPuzzles) -> np.ndarray:
    # per pair: attempt 1 (the pair's first candidate) against the true output, cell by cell; 0 where the shapes
    # differ, the pair has no candidate or no known output
    out = np.zeros(test.num_pairs, dtype=np.float64)
    for p in np.flatnonzero(test.has_label & (votes.start[1:] > votes.start[:-1])):
        label, best = test.labels[p], votes.grids[int(votes.start[p])]
        if best.shape == label.shape and label.size:
            out[p] = float((best == label).mean())
    return out


def _key_label_ranks(votes: KeyVotes, label_keys: np.ndarray, test: TestPuzzles) -> np.ndarray:
    # a test pair's label is found among its group's candidates by key; candidates are distinct inside a group
    label_rank = np.full(test.num_pairs, -1, dtype=np.int64)
    for p in np.flatnonzero(test.has_label):
        g = test.pair_group[p]
        lo, hi = votes.start[g], votes.start[g + 1]
        match = np.flatnonzero((votes.keys[lo:hi] == label_keys[p]).all(axis=1))
        if len(match):
            label_rank[p] = match[0]
    return label_rank
