"""Crop 30x30 token canvases back to grids and undo augmentations, for all predictions at once (numba).

The bottom of eval/: every stage uses these helpers and this module imports none of them.

Upstream's evaluator (docs/reference/upstream-recursive.md 10.2) crops and inverts one row at a time in Python; here
every step runs over the whole prediction set: `crop_shapes` finds each row's crop, `invert_crops` writes the
de-augmented grids of the chosen rows into one flat buffer (`Grids`), `Grids.hashes` keys them, and `match_grids` finds
each row's grid among a few candidates with an exact cell-by-cell comparison (the hash only narrows the search).
`grid_keys` gives each grid a 128-bit key instead, for the per-step answers that are kept only as keys
(infer.CandidateKeys).

Tokens: PAD 0, EOS 1, colour c is token c + 2 (docs/reference/upstream-recursive.md 1.6). An answer may also hold
tokens 12 and 13: a canvas model's (VARC) pixel ids 10 and 11 (its background and border) inside the grid it drew,
which upstream's evaluator keeps in the answer as values 10 and 11 (data/canvas.decode). They crop and transform as
colours, keep their values through the colour inverse, and are never in a task's grids, so such an answer is a
candidate of its own that is never right.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numba
import numpy as np

log = logging.getLogger(__name__)

CANVAS = 30  # the canvas is CANVAS x CANVAS tokens, row-major
SEQ_LEN = CANVAS * CANVAS
PAD, EOS, COLOUR_OFFSET = 0, 1, 2
NUM_COLOURS = 10
VOCAB_SIZE = COLOUR_OFFSET + NUM_COLOURS
ANSWER_VOCAB_SIZE = VOCAB_SIZE + 2  # an answer's tokens: + a canvas model's pixel ids 10 and 11 (module docstring)
# dihedral id -> the id that undoes it (numpy semantics, docs/reference/upstream-recursive.md 1.8)
DIHEDRAL_INVERSE = np.array([0, 3, 2, 1, 4, 5, 6, 7], dtype=np.int8)
KEY_BYTES = 16  # a grid key (`grid_keys`): two int64

Grid = np.ndarray  # (H, W) uint8, colours 0..9 (an answer's: 0..11)


@dataclass(frozen=True)
class Grids:
    """Grids of different shapes in one flat buffer: grid i is `cells[offsets[i]:offsets[i + 1]]` as `shapes[i]`."""

    shapes: np.ndarray  # (G, 2) int32, (rows, cols); (0, 0) is the empty grid
    offsets: np.ndarray  # (G + 1,) int64
    cells: np.ndarray  # (offsets[-1],) uint8

    def __len__(self) -> int:
        return len(self.shapes)

    def __getitem__(self, i: int) -> Grid:
        rows, cols = self.shapes[i]
        return self.cells[self.offsets[i] : self.offsets[i + 1]].reshape(rows, cols)

    @classmethod
    def from_list(cls, grids: Sequence[np.ndarray]) -> Grids:
        shapes = np.array([g.shape for g in grids], dtype=np.int32).reshape(-1, 2)
        offsets = np.zeros(len(grids) + 1, dtype=np.int64)
        np.cumsum(shapes[:, 0].astype(np.int64) * shapes[:, 1], out=offsets[1:])
        cells = (
            np.concatenate([np.asarray(g, dtype=np.uint8).ravel() for g in grids]) if grids else np.zeros(0, np.uint8)
        )
        return cls(shapes, offsets, cells.astype(np.uint8, copy=False))

    @classmethod
    def concat(cls, parts: Sequence[Grids]) -> Grids:
        starts = np.cumsum([0] + [len(p.cells) for p in parts[:-1]])
        offsets = np.concatenate([[0]] + [p.offsets[1:] + s for p, s in zip(parts, starts, strict=True)])
        return cls(
            np.concatenate([p.shapes for p in parts]).astype(np.int32),
            offsets.astype(np.int64),
            np.concatenate([p.cells for p in parts]).astype(np.uint8),
        )

    def take(self, index: np.ndarray) -> Grids:
        """The grids at `index`, in that order, as a new compact buffer."""
        index = np.asarray(index, dtype=np.int64)
        shapes = self.shapes[index]
        offsets = np.zeros(len(index) + 1, dtype=np.int64)
        np.cumsum(shapes[:, 0].astype(np.int64) * shapes[:, 1], out=offsets[1:])
        cells = np.empty(offsets[-1], dtype=np.uint8)
        _gather(self.offsets, self.cells, index, offsets, cells)
        return Grids(shapes, offsets, cells)

    def hashes(self) -> np.ndarray:
        """(G,) uint64 FNV-1a over (rows, cols, cells): equal grids hash equal; equality is still checked."""
        return _hash_grids(self.shapes, self.offsets, self.cells)

    def tolist(self, i: int) -> list[list[int]]:
        return self[i].tolist()


def crop(canvas: np.ndarray) -> Grid:
    """A canvas (900,) or (30, 30) of tokens -> its grid: upstream's crop, docs/reference/upstream-recursive.md 10.2."""
    tokens = np.ascontiguousarray(canvas, dtype=np.uint8).reshape(SEQ_LEN)
    rows, cols = _crop_shape(tokens)
    return (tokens.reshape(CANVAS, CANVAS)[:rows, :cols] - COLOUR_OFFSET).astype(np.uint8)


def crop_shapes(tokens: np.ndarray) -> np.ndarray:
    """(N, 900) uint8 tokens -> (N, 2) int32 crop shapes.

    The crop is the largest top-left rectangle free of non-colour tokens, found row by row with a column bound that
    only shrinks (docs/reference/upstream-recursive.md 10.2): a canvas whose first cell is PAD or EOS crops to the empty
    (0, 0) grid, and of two rectangles with the same area the one with fewer rows wins.
    """
    assert tokens.dtype == np.uint8 and tokens.ndim == 2 and tokens.shape[1] == SEQ_LEN, tokens.shape
    return _crop_shapes(tokens)


def invert_crops(
    tokens: np.ndarray,
    rows: np.ndarray,
    shapes: np.ndarray,
    tids: np.ndarray,
    colour_inverse: np.ndarray,
) -> Grids:
    """Crop rows `rows` of `tokens` and map each back to the original task's frame.

    tokens: (N, 900) uint8; rows: (R,) int64 indices into tokens; shapes: (N, 2) from `crop_shapes`;
    tids: (N,) int8 dihedral id each row was augmented with; colour_inverse: (N, 10) uint8, augmented colour ->
    original colour. The dihedral transform is undone first, then the colours (docs/reference/upstream-recursive.md
    1.8).
    """
    rows = np.asarray(rows, dtype=np.int64)
    out_shapes = shapes[rows].copy()
    swap = np.isin(tids[rows], (1, 3, 6, 7))  # these transforms exchange rows and columns
    out_shapes[swap] = out_shapes[swap][:, ::-1]
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(out_shapes[:, 0].astype(np.int64) * out_shapes[:, 1], out=offsets[1:])
    cells = np.empty(offsets[-1], dtype=np.uint8)
    _invert_rows(tokens, rows, shapes, tids, colour_inverse, offsets, cells)
    return Grids(out_shapes.astype(np.int32), offsets, cells)


def match_grids(
    queries: Grids, query_bucket: np.ndarray, targets: Grids, bucket_start: np.ndarray, bucket_end: np.ndarray
) -> np.ndarray:
    """For each query grid, the index of the first equal target in its bucket's range, else -1.

    query_bucket: (Q,) int64, -1 for queries to skip; targets of bucket b are `bucket_start[b]:bucket_end[b]`.
    Buckets are small (the test inputs of one task), so this compares cells directly.
    """
    return _match(
        queries.shapes,
        queries.offsets,
        queries.cells,
        np.asarray(query_bucket, dtype=np.int64),
        targets.shapes,
        targets.offsets,
        targets.cells,
        np.asarray(bucket_start, dtype=np.int64),
        np.asarray(bucket_end, dtype=np.int64),
    )


def distinct_in_groups(group: np.ndarray, grids: Grids) -> tuple[np.ndarray, np.ndarray]:
    """Number the distinct grids inside each group: (candidate of each item (R,), first item of each candidate).

    Candidates are numbered in order of (group, hash); equality is exact (a hash collision only costs a
    comparison). Items are visited in index order inside a hash, so a candidate's first item is its first
    occurrence.
    """
    hashes = grids.hashes()
    order = np.lexsort((np.arange(len(group)), hashes, group))
    return _number_distinct(order, group, hashes, grids.shapes, grids.offsets, grids.cells)


def equal_grids(a: Grids, i: int, b: Grids, j: int) -> bool:
    return bool(_equal(a.shapes, a.offsets, a.cells, i, b.shapes, b.offsets, b.cells, j))


def grid_keys(grids: Grids) -> np.ndarray:
    """(G, 2) int64: BLAKE2b-128 of each grid's (rows, cols) as int32 and its cells as uint8.

    The same grid always gets the same key; two different grids share one with probability 2^-128.
    """
    header = grids.shapes.astype("<i4").tobytes()
    cells = memoryview(grids.cells.tobytes())
    offsets = grids.offsets.tolist()
    out = bytearray()
    for i in range(len(grids)):
        digest = hashlib.blake2b(header[8 * i : 8 * i + 8], digest_size=KEY_BYTES)
        digest.update(cells[offsets[i] : offsets[i + 1]])
        out += digest.digest()
    return np.frombuffer(bytes(out), dtype="<i8").reshape(len(grids), 2).astype(np.int64)


# --------------------------------------------------------------------------------------------------------------
# numba kernels


@numba.njit(cache=True, nogil=True)
def _crop_shape(row: np.ndarray) -> tuple[int, int]:
    best_area, best_rows, best_cols = 0, 0, 0
    num_c = CANVAS
    for r in range(1, CANVAS + 1):
        for c in range(1, num_c + 1):
            x = row[(r - 1) * CANVAS + c - 1]
            if x < COLOUR_OFFSET or x >= ANSWER_VOCAB_SIZE:
                num_c = c - 1
                break
        if num_c == 0:
            break  # every further rectangle has area 0
        area = r * num_c
        if area > best_area:
            best_area, best_rows, best_cols = area, r, num_c
    return best_rows, best_cols


@numba.njit(cache=True, nogil=True)
def _crop_shapes(tokens: np.ndarray) -> np.ndarray:
    out = np.empty((tokens.shape[0], 2), dtype=np.int32)
    for i in range(tokens.shape[0]):
        out[i, 0], out[i, 1] = _crop_shape(tokens[i])
    return out


@numba.njit(cache=True, nogil=True, inline="always")
def _walk(s: int, h: int, w: int) -> tuple[int, int, int]:
    # D_s(A)[a, b] = A[r, c] with r * CANVAS + c = start + a * step_a + b * step_b, for an (h, w) grid A on the
    # canvas (numpy's rot90 turns counter-clockwise; 7 is fliplr(rot90(A)), the anti-transpose)
    last_row, last_col = (h - 1) * CANVAS, w - 1
    if s == 0:
        return 0, CANVAS, 1
    if s == 1:  # rot90 k=1: A[b, w-1-a]
        return last_col, -1, CANVAS
    if s == 2:  # rot90 k=2: A[h-1-a, w-1-b]
        return last_row + last_col, -CANVAS, -1
    if s == 3:  # rot90 k=3: A[h-1-b, a]
        return last_row, 1, -CANVAS
    if s == 4:  # fliplr: A[a, w-1-b]
        return last_col, CANVAS, -1
    if s == 5:  # flipud: A[h-1-a, b]
        return last_row, -CANVAS, 1
    if s == 6:  # transpose: A[b, a]
        return 0, 1, CANVAS
    return last_row + last_col, -1, -CANVAS  # 7: A[h-1-b, w-1-a]


@numba.njit(cache=True, nogil=True)
def _invert_rows(
    tokens: np.ndarray,
    rows: np.ndarray,
    shapes: np.ndarray,
    tids: np.ndarray,
    colour_inverse: np.ndarray,
    offsets: np.ndarray,
    cells: np.ndarray,
) -> None:
    inverse = np.array([0, 3, 2, 1, 4, 5, 6, 7])
    for k in range(rows.shape[0]):
        i = rows[k]
        h, w = shapes[i, 0], shapes[i, 1]
        if h == 0:
            continue
        s = inverse[tids[i]]
        oh, ow = (w, h) if (s == 1 or s == 3 or s == 6 or s == 7) else (h, w)
        start, step_a, step_b = _walk(s, h, w)
        row = tokens[i]
        colours = colour_inverse[i]
        o = offsets[k]
        for a in range(oh):
            src = start + a * step_a
            for _ in range(ow):
                c = row[src] - COLOUR_OFFSET
                cells[o] = colours[c] if c < NUM_COLOURS else c  # a canvas model's 10 and 11 keep their values
                o += 1
                src += step_b


@numba.njit(cache=True, nogil=True)
def _hash_grids(shapes: np.ndarray, offsets: np.ndarray, cells: np.ndarray) -> np.ndarray:
    prime = np.uint64(1099511628211)
    out = np.empty(shapes.shape[0], dtype=np.uint64)
    for i in range(shapes.shape[0]):
        h = np.uint64(14695981039346656037)
        h = (h ^ np.uint64(shapes[i, 0])) * prime
        h = (h ^ np.uint64(shapes[i, 1])) * prime
        for j in range(offsets[i], offsets[i + 1]):
            h = (h ^ np.uint64(cells[j])) * prime
        out[i] = h
    return out


@numba.njit(cache=True, nogil=True)
def _gather(src_offsets: np.ndarray, src_cells: np.ndarray, index: np.ndarray, offsets: np.ndarray, cells: np.ndarray):
    for k in range(index.shape[0]):
        s = src_offsets[index[k]]
        for j in range(offsets[k], offsets[k + 1]):
            cells[j] = src_cells[s]
            s += 1


@numba.njit(cache=True, nogil=True, inline="always")
def _equal(a_shapes, a_offsets, a_cells, i, b_shapes, b_offsets, b_cells, j) -> bool:
    if a_shapes[i, 0] != b_shapes[j, 0] or a_shapes[i, 1] != b_shapes[j, 1]:
        return False
    n = a_offsets[i + 1] - a_offsets[i]
    sa, sb = a_offsets[i], b_offsets[j]
    for k in range(n):  # noqa: SIM110 (numba compiles loops, not generators)
        if a_cells[sa + k] != b_cells[sb + k]:
            return False
    return True


@numba.njit(cache=True, nogil=True)
def _match(q_shapes, q_offsets, q_cells, q_bucket, t_shapes, t_offsets, t_cells, start, end) -> np.ndarray:
    out = np.full(q_shapes.shape[0], -1, dtype=np.int64)
    for i in range(q_shapes.shape[0]):
        b = q_bucket[i]
        if b < 0:
            continue
        for j in range(start[b], end[b]):
            if _equal(q_shapes, q_offsets, q_cells, i, t_shapes, t_offsets, t_cells, j):
                out[i] = j
                break
    return out


@numba.njit(cache=True, nogil=True)
def _number_distinct(order, group, hashes, shapes, offsets, cells) -> tuple[np.ndarray, np.ndarray]:
    n = order.shape[0]
    candidate = np.empty(n, dtype=np.int64)
    first = np.empty(n, dtype=np.int64)
    num = 0
    run_start = 0  # first candidate number of the current (group, hash) run
    for k in range(n):
        i = order[k]
        if k == 0 or group[i] != group[order[k - 1]] or hashes[i] != hashes[order[k - 1]]:
            run_start = num
        found = -1
        for c in range(run_start, num):  # almost always one candidate per run; more only on a collision
            if _equal(shapes, offsets, cells, i, shapes, offsets, cells, first[c]):
                found = c
                break
        if found < 0:
            found = num
            first[num] = i
            num += 1
        candidate[i] = found
    return candidate, first[:num].copy()
