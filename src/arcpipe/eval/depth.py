"""pass@K after every ACT step of one evaluation pass: accuracy against recursion depth, with no extra model calls.

`predict` runs every test row for the full halt_max_steps anyway; after each step d = 1..D it hands the step's
argmax tokens to `CandidateKeys`, which reduces every row's answer to a 16-byte key, and keeps the step's q_halt
logit. `score_by_depth` then votes over the augmented views once per step, as `vote.vote` votes on the last step,
and scores pass@K per step; the last step's numbers are the evaluation's pass@K.

    keys = CandidateKeys(example_ids, identifiers, rows)          # predict() calls keys(rows, preds) per step
    scores = score_by_depth(inputs, step_keys, step_q_halt, puzzle_identifiers, identifiers, test, ks)

Memory. Keeping every step's tokens takes rows x steps x 900 bytes: 5.6 GB for the ~386k rows x 16 steps of the
ARC-AGI-1 aug-1000 test split, on every process (the torchrun gather sends every shard to every rank). A row's
answer only matters to the vote as a grid in its task's original frame, so each step's tokens are cropped,
de-augmented and hashed as soon as the step is computed (BLAKE2b, 128 bits, over rows, cols and cells: the same
grid always gets the same key; two different grids share one with probability 2^-128). What is kept is 16 bytes of
key + 4 bytes of q_halt per row and step, 124 MB for that split, in dense fixed-size arrays: the torchrun gather
stays an all_gather, and one process and several compute the same keys for the same rows. The other way,
accumulating each step's votes batch by batch as real grids, grows with the number of distinct answers (for an
untrained model, about one per row and step: the same order as the tokens), and merging the shards of several
processes would add each candidate's q values in another order than one process does, so full ties could break
differently. The price of the keys is CPU time in the prediction loop: cropping, inverting and hashing cost about
4 us per row and step on a loaded 2-core CPU, some 25 s over the whole ARC-AGI-1 test split (shared by the
processes); voting and scoring the 16 steps on rank 0 took 0.14 s for 10k rows, so some 5 s for that split.

Ranking on keys is `vote.rank`'s: most votes, then mean sigmoid(q_halt) (float64, summed in row order), then first
seen; a test pair's label is found among its candidates by key.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from arcpipe.eval.grids import Grids, crop_shapes, invert_crops
from arcpipe.eval.passk import DEFAULT_KS, Scores, TestPuzzles, score_ranks
from arcpipe.eval.vote import assign_rows, parse_identifiers, sigmoid64

KEY_BYTES = 16  # two int64 per key


class CandidateKeys:
    """`keys(rows, preds)`: the key of each row's answer in its task's original frame, (n, 2) int64."""

    def __init__(self, example_ids: np.ndarray, identifiers: Sequence[str], rows: np.ndarray) -> None:
        # example_ids: (N_ex,) puzzle id of every example of the split; rows: the examples that will be asked for
        self._example_ids = np.asarray(example_ids, dtype=np.int64)
        self._unique = np.unique(self._example_ids[rows])
        _, self._tid, self._colours = parse_identifiers([identifiers[i] for i in self._unique.tolist()])

    def __call__(self, rows: np.ndarray, preds: np.ndarray) -> np.ndarray:
        """rows: (n,) example indices; preds: (n, 900) uint8 argmax tokens of those rows at one ACT step."""
        u = np.searchsorted(self._unique, self._example_ids[rows])
        grids = invert_crops(preds, np.arange(len(rows)), crop_shapes(preds), self._tid[u], self._colours[u])
        return grid_keys(grids)


def grid_keys(grids: Grids) -> np.ndarray:
    """(G, 2) int64: BLAKE2b-128 of each grid's (rows, cols) as int32 and its cells as uint8."""
    header = grids.shapes.astype("<i4").tobytes()
    cells = memoryview(grids.cells.tobytes())
    offsets = grids.offsets.tolist()
    out = bytearray()
    for i in range(len(grids)):
        digest = hashlib.blake2b(header[8 * i : 8 * i + 8], digest_size=KEY_BYTES)
        digest.update(cells[offsets[i] : offsets[i + 1]])
        out += digest.digest()
    return np.frombuffer(bytes(out), dtype="<i8").reshape(len(grids), 2).astype(np.int64)


def score_by_depth(
    inputs: np.ndarray,
    step_keys: np.ndarray,
    step_q_halt: np.ndarray,
    puzzle_identifiers: np.ndarray,
    identifiers: Sequence[str],
    test: TestPuzzles,
    ks: Sequence[int] = DEFAULT_KS,
) -> dict[int, Scores]:
    """ACT step d (1-based) -> pass@K of the vote over every row's answer after d steps.

    inputs: (N, 900) tokens; step_keys: (N, D, 2) int64 from `CandidateKeys`; step_q_halt: (N, D) float32 q_halt
    logits; puzzle_identifiers: (N,) ids into `identifiers`. Rows are in global example order, as for `vote.vote`.
    """
    assert step_keys.shape[:2] == step_q_halt.shape and step_keys.shape[2] == 2, (step_keys.shape, step_q_halt.shape)
    rows = assign_rows(inputs, puzzle_identifiers, identifiers, test, what=f"step_keys {step_keys.shape}")
    label_keys = grid_keys(test.labels)
    out = {}
    for d in range(step_keys.shape[1]):
        q = sigmoid64(step_q_halt[rows.used, d])
        label_rank = _label_ranks(rows.group, step_keys[rows.used, d], q, label_keys, test)
        out[d + 1] = score_ranks(label_rank, test, ks)
    return out


def depth_metrics(scores: dict[int, Scores]) -> dict[str, dict[str, float]]:
    """metrics.json's "depth": {"<d>": {"pass@<K>": value}}, string keys as JSON has them."""
    return {str(d): {f"pass@{k}": v for k, v in s.pass_at.items()} for d, s in sorted(scores.items())}


# --------------------------------------------------------------------------------------------------------------


def _label_ranks(
    group: np.ndarray, keys: np.ndarray, q: np.ndarray, label_keys: np.ndarray, test: TestPuzzles
) -> np.ndarray:
    # items: the voting rows in row order, each (group, key, q); candidates: distinct (group, key), numbered in
    # sorted (group, key) order; a stable sort makes each candidate's first sorted item its first occurrence
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
    q_sum = np.bincount(candidate, weights=q, minlength=len(first))  # adds in item order, as vote.rank does
    ranked = np.lexsort((first, -(q_sum / count), -count, cand_group))
    group_start = np.searchsorted(cand_group[ranked], np.arange(test.num_groups + 1))
    position = np.empty(len(first), dtype=np.int64)  # 0-based rank of each candidate inside its group
    position[ranked] = np.arange(len(first)) - group_start[cand_group[ranked]]

    label_rank = np.full(test.num_pairs, -1, dtype=np.int64)
    bounds = np.searchsorted(cand_group, np.stack([test.pair_group, test.pair_group + 1]))  # (2, P)
    for p in np.flatnonzero(test.has_label):
        lo, hi = bounds[:, p]
        match = np.flatnonzero((cand_key[lo:hi] == label_keys[p]).all(axis=1))
        if len(match):
            label_rank[p] = position[lo + match[0]]
    return label_rank
