"""The 30 x 30 token canvas (PAD, EOS, colours from COLOUR_OFFSET): the rows of a split (`layout_rows`) and their
grids, under each row's view and offset, painted into canvases (`render`)."""

from __future__ import annotations

import numba as nb
import numpy as np

from arcpipe.data._kernels.dihedral import strides

CANVAS = 30
PAD, EOS, COLOUR_OFFSET = 0, 1, 2


@nb.njit(cache=True)
def layout_rows(
    tasks: np.ndarray,
    ex_ptr: np.ndarray,
    ex_in: np.ndarray,
    ex_out: np.ndarray,
    aug_count: np.ndarray,
    num_cols: int,
    row_in: np.ndarray,
    row_out: np.ndarray,
    row_aug: np.ndarray,
    puzzle_indices: np.ndarray,
    group_indices: np.ndarray,
) -> None:
    """Fill per-row grids and flat augmentation index (task * num_cols + k), and the split's CSR indices."""
    row = 0
    puzzle = 0
    group_indices[0] = 0
    puzzle_indices[0] = 0
    for i in range(tasks.shape[0]):
        task = tasks[i]
        for a in range(aug_count[task]):
            for e in range(ex_ptr[task], ex_ptr[task + 1]):
                row_in[row] = ex_in[e]
                row_out[row] = ex_out[e]
                row_aug[row] = task * num_cols + a
                row += 1
            puzzle += 1
            puzzle_indices[puzzle] = row
        group_indices[i + 1] = puzzle


@nb.njit(cache=True, nogil=True)
def render(
    start: int,
    stop: int,
    row_in: np.ndarray,
    row_out: np.ndarray,
    row_aug: np.ndarray,
    row_r: np.ndarray,
    row_c: np.ndarray,
    cells: np.ndarray,
    goff: np.ndarray,
    gh: np.ndarray,
    gw: np.ndarray,
    aug_tid: np.ndarray,
    aug_col: np.ndarray,
    inputs: np.ndarray,
    labels: np.ndarray,
) -> None:
    """Rows [start, stop) of a split as 30x30 token canvases into inputs/labels[: stop - start] (each (B, 900))."""
    for i in range(stop - start):
        row = start + i
        a = row_aug[row]
        t = aug_tid[a]
        col = aug_col[a]
        _paint(inputs[i], cells, goff[row_in[row]], gh[row_in[row]], gw[row_in[row]], t, col, row_r[row], row_c[row])
        _paint(labels[i], cells, goff[row_out[row]], gh[row_out[row]], gw[row_out[row]], t, col, row_r[row], row_c[row])


@nb.njit(cache=True, inline="always")
def _paint(out: np.ndarray, cells: np.ndarray, off: int, h: int, w: int, t: int, col: np.ndarray, r0: int, c0: int):
    out[:] = PAD
    h2, w2, base, sr, sc = strides(t, h, w)
    for r in range(h2):
        o = (r0 + r) * CANVAS + c0
        s = off + base + r * sr
        for c in range(w2):
            out[o + c] = col[cells[s + c * sc]] + COLOUR_OFFSET
        if c0 + w2 < CANVAS:  # EOS right of the grid, not in the corner below it
            out[o + w2] = EOS
    if r0 + h2 < CANVAS:
        o = (r0 + h2) * CANVAS + c0
        for c in range(w2):
            out[o + c] = EOS
