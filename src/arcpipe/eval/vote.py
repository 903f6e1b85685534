"""Vote across augmented views: every prediction is mapped back to its task's frame and counted per test input.

Upstream semantics (upstream.md 5.2-5.5): a row's puzzle name gives its task and augmentation; the cropped, de-augmented
*input* says which test input of the task it answers (a row whose input matches none is unused); the cropped,
de-augmented *prediction* is a candidate. Candidates are ranked by vote count, then mean sigmoid(q_halt) (float64),
then first-seen order (global example index).

    votes = vote(inputs, preds, puzzle_identifiers, q_halt_logits, identifiers, test)
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from arcpipe.config import ArcpipeError
from arcpipe.eval.grids import (
    VOCAB_SIZE,
    Grids,
    crop_shapes,
    distinct_in_groups,
    invert_crops,
    match_grids,
)
from arcpipe.eval.passk import TestPuzzles

log = logging.getLogger(__name__)

SEPARATOR = "|||"  # TRM/URM name grammar: "<task>|||t<tid>|||<10 colour digits>" (upstream.md 1.8)


@dataclass(frozen=True)
class Votes:
    """Ranked candidates of every test pair; candidates of pair p are `start[p]:start[p + 1]`, best first."""

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


def parse_identifiers(names: Sequence[str]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Puzzle names -> (task names, (U,) int8 dihedral ids, (U, 10) uint8 augmented -> original colour).

    A name without "|||" is an original task (identity). Otherwise the first field is the task and the last two
    are "t<tid>" and the 10 colour digits, where digit c is the new colour of original colour c (upstream.md 1.8).
    """
    # the builder's names end in the fixed-width "|||t<d>|||<10 digits>": read every name's last 18 characters
    # out of one joined buffer as a (U, 18) array; for a shorter name the window holds a newline and fails
    suffix_len = len(SEPARATOR) * 2 + 12
    joined = "\n".join(names)
    encoded = joined.encode("utf-8")
    if len(encoded) == len(joined):
        chars = np.frombuffer(encoded, dtype=np.uint8)
    else:  # non-ASCII names: one code point per element
        chars = np.frombuffer(joined.encode("utf-32-le"), dtype=np.uint32)
    chars = np.concatenate([np.full(suffix_len, ord("\n"), chars.dtype), chars])
    ends = np.cumsum(np.fromiter(map(len, names), dtype=np.int64, count=len(names)) + 1) - 1
    window = chars[ends[:, None] + np.arange(suffix_len)].astype(np.int64)  # (U, 18): the last 18 characters
    digits = window - ord("0")
    augmented = (
        (window[:, 0:3] == ord("|")).all(1)
        & (window[:, 3] == ord("t"))
        & (window[:, 5:8] == ord("|")).all(1)
        & (digits[:, 4] >= 0)
        & (digits[:, 4] <= 7)
        & ((digits[:, 8:] >= 0) & (digits[:, 8:] <= 9)).all(1)
    )
    forward = np.where(augmented[:, None], digits[:, 8:], np.arange(10))  # (U, 10) new colour of each colour
    tids = np.where(augmented, digits[:, 4], 0).astype(np.int8)
    tasks = [name[:-suffix_len] if aug else name for name, aug in zip(names, augmented.tolist(), strict=True)]
    bad = [names[u] for u in np.flatnonzero((np.sort(forward, axis=1) != np.arange(10)).any(axis=1))]
    bad += [task for task in set(tasks) if SEPARATOR in task]  # a separator anywhere else: not this grammar
    if bad:
        raise ArcpipeError(
            f"identifiers.json: {len(bad)} puzzle name(s) do not follow '<task>|||t<0-7>|||<permutation of "
            f"0123456789>', e.g. {bad[0]!r}; rebuild the dataset with arcpipe data build"
        )
    colour_inverse = np.argsort(forward, axis=1).astype(np.uint8).reshape(-1, 10)
    return tasks, tids, colour_inverse


def sigmoid64(logits: np.ndarray) -> np.ndarray:
    """sigmoid in float64 with torch's kernel, as upstream computes it (numpy's differs in the last bit)."""
    import torch

    return torch.from_numpy(np.ascontiguousarray(logits, dtype=np.float64)).sigmoid().numpy()


def _tokens(tokens: np.ndarray, what: str) -> np.ndarray:
    tokens = np.asarray(tokens)
    if tokens.ndim != 2 or tokens.shape[1] != 900:
        raise ArcpipeError(f"predictions: {what} has shape {tokens.shape}, expected (N, 900) tokens")
    if tokens.dtype != np.uint8:
        if tokens.size and (tokens.min() < 0 or tokens.max() >= VOCAB_SIZE):
            raise ArcpipeError(
                f"predictions: {what} holds token {tokens.min() if tokens.min() < 0 else tokens.max()}, outside "
                f"the vocabulary 0..{VOCAB_SIZE - 1} (PAD, EOS, colours 0-9)"
            )
        tokens = tokens.astype(np.uint8)
    elif tokens.size and tokens.max() >= VOCAB_SIZE:
        raise ArcpipeError(
            f"predictions: {what} holds token {tokens.max()}, outside the vocabulary 0..{VOCAB_SIZE - 1}"
        )
    return np.ascontiguousarray(tokens)


def _expand_to_pairs(votes: Votes, pair_group: np.ndarray) -> Votes:
    # test pairs of one task with identical inputs share one group (upstream keys by the input's hash)
    if np.array_equal(pair_group, np.arange(votes.num_pairs)):
        return votes
    sizes = np.diff(votes.start)[pair_group]
    index = np.concatenate([np.arange(votes.start[g], votes.start[g + 1]) for g in pair_group] + [np.zeros(0, int)])
    start = np.zeros(len(pair_group) + 1, dtype=np.int64)
    np.cumsum(sizes, out=start[1:])
    return Votes(start, votes.grids.take(index), votes.count[index], votes.q_sum[index], votes.first[index])
