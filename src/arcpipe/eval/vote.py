"""Stage 2 of an evaluation, vote: the answers of every view -> ranked candidates per test input (`Votes`).

Upstream semantics (docs/reference/upstream-recursive.md 10.2-10.5): a row's puzzle name gives its task and
augmentation; the cropped, de-augmented *input* says which test input of the task it answers (a row whose input
matches none is unused); the cropped, de-augmented *prediction* is a candidate. Candidates are ranked by vote count,
then mean sigmoid(q_halt) (float64), then first-seen order (global example index).

    votes = vote(inputs, preds, puzzle_identifiers, q_halt_logits, identifiers, test)         # the last ACT step
    by_step = vote_by_depth(inputs, step_keys, step_q_halt, puzzle_identifiers, identifiers, test)  # every step
    pooled = pool([votes_of_epoch_8, votes_of_epoch_10], test.num_pairs)    # several checkpoints' votes at once

`vote_by_depth` votes on the answers after every ACT step, kept as keys (infer.CandidateKeys) instead of grids:
the ranking is `rank`'s, on keys; voting the 16 steps of 10k rows took 0.14 s (some 5 s for ARC-AGI-1 aug-1000).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from arcpipe.config import ArcpipeError
from arcpipe.eval.grids import (
    ANSWER_VOCAB_SIZE,
    VOCAB_SIZE,
    Grids,
    crop_shapes,
    distinct_in_groups,
    invert_crops,
    match_grids,
)
from arcpipe.eval.puzzles import TestPuzzles, parse_identifiers

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Votes:
    """Ranked candidates of every test pair; candidates of pair p are `start[p]:start[p + 1]`, best first.

    Made by `vote` and `pool` (this stage) and by write.load_votes (a votes.npz read back); read by score.score
    (pass@K), write (submission.json, per_puzzle.csv, votes.npz) and pool.
    """

    start: np.ndarray  # (P + 1,) int64
    grids: Grids  # (C,) candidate grids in the original frame
    count: np.ndarray  # (C,) int64 votes
    q_sum: np.ndarray  # (C,) float64 sum of sigmoid(q_halt) over the votes
    first: np.ndarray  # (C,) int64 position of the candidate's first vote in the order the votes came
    num_used: int = 0  # predictions matched to a test input
    num_unmatched: int = 0  # predictions of a test task whose input matched none of its test inputs
    num_other: int = 0  # predictions of a puzzle that is not in test_puzzles.json (or padding rows)

    @property
    def num_pairs(self) -> int:
        return len(self.start) - 1

    def of_pair(self, p: int) -> slice:
        return slice(int(self.start[p]), int(self.start[p + 1]))


@dataclass(frozen=True)
class KeyVotes:
    """Ranked candidate keys of every test input group after one ACT step: group g's are `start[g]:start[g + 1]`.

    The candidates of `vote_by_depth`, as keys (grids.grid_keys) instead of grids, ranked as `rank` ranks; made by
    `vote_by_depth` (one per ACT step), read by score.score_by_depth. Groups, not pairs: test pairs of one task with
    identical inputs share one group (TestPuzzles.pair_group).
    """

    start: np.ndarray  # (G + 1,) int64
    keys: np.ndarray  # (C, 2) int64 candidate keys, best first inside each group


@dataclass(frozen=True)
class RowAssignment:
    """The rows that vote, and for every row how to map its answer back to the original frame."""

    used: np.ndarray  # (U,) int64 rows matched to a test input, in row order
    group: np.ndarray  # (U,) int64 the test input (index into test.group_inputs) each used row answers
    tid: np.ndarray  # (N,) int8 dihedral id of every row
    colours: np.ndarray  # (N, 10) uint8 augmented -> original colour of every row
    num_unmatched: int  # rows of a test task whose input matched none of its test inputs
    num_other: int  # rows of a puzzle that is not in test_puzzles.json (or padding rows)


def vote(
    inputs: np.ndarray,
    preds: np.ndarray,
    puzzle_identifiers: np.ndarray,
    q_halt_logits: np.ndarray,
    identifiers: Sequence[str],
    test: TestPuzzles,
) -> Votes:
    """Votes of one set of predictions (one checkpoint) for every test pair of `test`.

    inputs, preds: (N, 900) integer tokens; puzzle_identifiers: (N,) ids into `identifiers` (0 = padding);
    q_halt_logits: (N,) float. Rows are in global example order (their order breaks full ties).
    """
    preds = _tokens(preds, "preds")
    if preds.shape[0] != len(q_halt_logits):
        raise ArcpipeError(
            f"predictions: preds {preds.shape} and q_halt_logits ({len(q_halt_logits)},) must have the same number "
            "of rows"
        )
    rows = assign_rows(inputs, puzzle_identifiers, identifiers, test, what=f"preds {preds.shape}")
    used, group = rows.used, rows.group
    q = sigmoid64(np.asarray(q_halt_logits)[used])
    candidates = invert_crops(preds, used, crop_shapes(preds), rows.tid, rows.colours)

    votes = rank(group, candidates, np.ones(len(used), dtype=np.int64), q, test.num_groups)
    votes = _expand_to_pairs(votes, test.pair_group)
    return Votes(
        votes.start,
        votes.grids,
        votes.count,
        votes.q_sum,
        votes.first,
        num_used=len(used),
        num_unmatched=rows.num_unmatched,
        num_other=rows.num_other,
    )


def vote_by_depth(
    inputs: np.ndarray,
    step_keys: np.ndarray,
    step_q_halt: np.ndarray,
    puzzle_identifiers: np.ndarray,
    identifiers: Sequence[str],
    test: TestPuzzles,
) -> list[KeyVotes]:
    """The vote after each ACT step d = 1..D (element d - 1), on the answers' keys.

    inputs: (N, 900) tokens; step_keys: (N, D, 2) int64 from infer.CandidateKeys; step_q_halt: (N, D) float32 q_halt
    logits; puzzle_identifiers: (N,) ids into `identifiers`. Rows are in global example order, as for `vote`.
    """
    assert step_keys.shape[:2] == step_q_halt.shape and step_keys.shape[2] == 2, (step_keys.shape, step_q_halt.shape)
    rows = assign_rows(inputs, puzzle_identifiers, identifiers, test, what=f"step_keys {step_keys.shape}")
    out = []
    for d in range(step_keys.shape[1]):
        q = sigmoid64(step_q_halt[rows.used, d])
        out.append(_rank_keys(rows.group, step_keys[rows.used, d], q, test.num_groups))
    return out


def pool(votes: Sequence[Votes], num_pairs: int) -> Votes:
    """The votes of several evaluations of the same test pairs pooled (upstream's aggregated voting,
    docs/reference/upstream-recursive.md 10.4).

    Per test input, equal candidates' counts are summed and their q sums added; the mean q is the pooled sum over
    the pooled count; full ties go to the candidate seen first, taking the evaluations in the order given and
    candidates in each one's first-seen order.
    """
    # items: each evaluation's candidates in first-seen order, evaluations in the given order
    parts = [
        (v, np.repeat(np.arange(v.num_pairs), np.diff(v.start)), np.argsort(v.first, kind="stable")) for v in votes
    ]
    group = np.concatenate([g[o] for v, g, o in parts])
    grids = Grids.concat([v.grids.take(o) for v, g, o in parts])
    count = np.concatenate([v.count[o] for v, g, o in parts])
    q_sum = np.concatenate([v.q_sum[o] for v, g, o in parts])
    return rank(group, grids, count, q_sum, num_pairs)


def assign_rows(
    inputs: np.ndarray,
    puzzle_identifiers: np.ndarray,
    identifiers: Sequence[str],
    test: TestPuzzles,
    what: str = "",
) -> RowAssignment:
    """Which test input (group) each row answers, from its puzzle name and its de-augmented input (see `vote`).

    `what` names the other per-row arrays of the caller in the row-count error.
    """
    inputs = _tokens(inputs, "inputs")
    ids = np.asarray(puzzle_identifiers, dtype=np.int64)
    num_rows = len(ids)
    if inputs.shape[0] != num_rows:
        raise ArcpipeError(
            f"predictions: inputs {inputs.shape}, {what + ', ' if what else ''}puzzle_identifiers ({num_rows},) "
            "must have the same number of rows"
        )
    if num_rows and (ids.min() < 0 or ids.max() >= len(identifiers)):
        raise ArcpipeError(
            f"predictions: puzzle_identifiers span {ids.min()}..{ids.max()} but identifiers.json has "
            f"{len(identifiers)} entries; evaluate with the dataset the predictions were made on"
        )

    # one parse per distinct puzzle, then per row by index: (U,) -> (N,)
    unique_ids, row_unique = np.unique(ids, return_inverse=True)
    task_names, tids, colour_inverse = parse_identifiers([identifiers[i] for i in unique_ids.tolist()])
    task_index = {name: t for t, name in enumerate(test.task_names)}
    unique_task = np.array([task_index.get(name, -1) for name in task_names], dtype=np.int64)
    unique_task[unique_ids == 0] = -1  # id 0 is the blank identifier of padding rows
    row_task = unique_task[row_unique]
    row_tid = tids[row_unique]
    row_colours = colour_inverse[row_unique]

    # which test input each row answers: (N,) index into test.input_groups, or -1
    rows = np.flatnonzero(row_task >= 0)
    row_inputs = invert_crops(inputs, rows, crop_shapes(inputs), row_tid, row_colours)
    group_of_row = match_grids(
        row_inputs, row_task[rows], test.group_inputs, test.task_group_start[:-1], test.task_group_start[1:]
    )
    used = rows[group_of_row >= 0]
    return RowAssignment(
        used=used,
        group=group_of_row[group_of_row >= 0],
        tid=row_tid,
        colours=row_colours,
        num_unmatched=len(rows) - len(used),
        num_other=num_rows - len(rows),
    )


def rank(group: np.ndarray, grids: Grids, count: np.ndarray, q_sum: np.ndarray, num_groups: int) -> Votes:
    """Merge equal grids inside each group and rank them: votes, then mean q, then first occurrence.

    Items are in first-seen order; an item carries `count` votes whose sigmoid(q_halt) values sum to `q_sum` (one
    prediction: count 1; a candidate of an earlier vote: its totals, which is how votes are pooled).
    """
    candidate, first = distinct_in_groups(group, grids)
    num = len(first)
    # bincount adds in item order, so each q sum accumulates in first-seen order like upstream's loop
    total_count = np.bincount(candidate, weights=count, minlength=num).astype(np.int64)
    total_q = np.bincount(candidate, weights=q_sum, minlength=num)
    mean_q = total_q / total_count
    cand_group = group[first]
    order = np.lexsort((first, -mean_q, -total_count, cand_group))
    start = np.searchsorted(cand_group[order], np.arange(num_groups + 1)).astype(np.int64)
    return Votes(start, grids.take(first[order]), total_count[order], total_q[order], first[order])


def sigmoid64(logits: np.ndarray) -> np.ndarray:
    """sigmoid in float64 with torch's kernel, as upstream computes it (numpy's differs in the last bit)."""
    import torch

    return torch.from_numpy(np.ascontiguousarray(logits, dtype=np.float64)).sigmoid().numpy()


def _tokens(tokens: np.ndarray, what: str) -> np.ndarray:
    tokens = np.asarray(tokens)
    if tokens.ndim != 2 or tokens.shape[1] != 900:
        raise ArcpipeError(f"predictions: {what} has shape {tokens.shape}, expected (N, 900) tokens")
    # answers may hold a canvas model's pixel ids 10 and 11 (tokens 12, 13: grids.py); inputs only PAD, EOS, colours
    vocab = ANSWER_VOCAB_SIZE if what.startswith("preds") else VOCAB_SIZE
    extra = ", a canvas model's pixel ids 10-11" if vocab > VOCAB_SIZE else ""
    if tokens.dtype != np.uint8:
        if tokens.size and (tokens.min() < 0 or tokens.max() >= vocab):
            raise ArcpipeError(
                f"predictions: {what} holds token {tokens.min() if tokens.min() < 0 else tokens.max()}, outside "
                f"the vocabulary 0..{vocab - 1} (PAD, EOS, colours 0-9{extra})"
            )
        tokens = tokens.astype(np.uint8)
    elif tokens.size and tokens.max() >= vocab:
        raise ArcpipeError(f"predictions: {what} holds token {tokens.max()}, outside the vocabulary 0..{vocab - 1}")
    return np.ascontiguousarray(tokens)


def _rank_keys(group: np.ndarray, keys: np.ndarray, q: np.ndarray, num_groups: int) -> KeyVotes:
    # `rank` on keys. items: the voting rows in row order, each (group, key, q); candidates: distinct (group, key),
    # numbered in sorted (group, key) order; a stable sort makes each candidate's first sorted item its first
    # occurrence
    n = len(group)
    order = np.lexsort((np.arange(n), keys[:, 1], keys[:, 0], group))
    g, k = group[order], keys[order]
    new = np.ones(n, dtype=bool)
    new[1:] = (g[1:] != g[:-1]) | (k[1:] != k[:-1]).any(axis=1)
    candidate = np.empty(n, dtype=np.int64)
    candidate[order] = np.cumsum(new) - 1
    first = order[new]  # (C,)
    cand_group, cand_key = g[new], k[new]
    count = np.bincount(candidate, minlength=len(first))
    q_sum = np.bincount(candidate, weights=q, minlength=len(first))  # adds in item order, as `rank` does
    ranked = np.lexsort((first, -(q_sum / count), -count, cand_group))
    start = np.searchsorted(cand_group[ranked], np.arange(num_groups + 1)).astype(np.int64)
    return KeyVotes(start, cand_key[ranked])


def _expand_to_pairs(votes: Votes, pair_group: np.ndarray) -> Votes:
    # test pairs of one task with identical inputs share one group (upstream keys by the input's hash)
    if np.array_equal(pair_group, np.arange(votes.num_pairs)):
        return votes
    sizes = np.diff(votes.start)[pair_group]
    index = np.concatenate([np.arange(votes.start[g], votes.start[g + 1]) for g in pair_group] + [np.zeros(0, int)])
    start = np.zeros(len(pair_group) + 1, dtype=np.int64)
    np.cumsum(sizes, out=start[1:])
    return Votes(start, votes.grids.take(index), votes.count[index], votes.q_sum[index], votes.first[index])
