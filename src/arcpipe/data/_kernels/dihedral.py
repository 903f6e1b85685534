"""Dihedral transforms as strided reads: D_t(X)[r, c] = X.flat[base + r * sr + c * sc].

A view of a grid is a dihedral transform id `t` (0-7) and a colour table `col` (10 entries, col[0] == 0)."""

from __future__ import annotations

import numba as nb
import numpy as np


@nb.njit(cache=True, inline="always")
def strides(t: int, h: int, w: int) -> tuple[int, int, int, int, int]:
    """(height, width, base, row stride, column stride) of view t of an h x w grid, in numpy's conventions."""
    if t == 0:
        return h, w, 0, w, 1
    if t == 1:  # rot90: X[c, w-1-r]
        return w, h, w - 1, -1, w
    if t == 2:  # rot180: X[h-1-r, w-1-c]
        return h, w, (h - 1) * w + w - 1, -w, -1
    if t == 3:  # rot270: X[h-1-c, r]
        return w, h, (h - 1) * w, 1, -w
    if t == 4:  # fliplr: X[r, w-1-c]
        return h, w, w - 1, w, -1
    if t == 5:  # flipud: X[h-1-r, c]
        return h, w, (h - 1) * w, -w, 1
    if t == 6:  # transpose: X[c, r]
        return w, h, 0, 1, w
    # t == 7, anti-transpose fliplr(rot90(X)): X[h-1-c, w-1-r]
    return w, h, (h - 1) * w + w - 1, -1, -w


@nb.njit(cache=True)
def view_of(cells: np.ndarray, off: int, h: int, w: int, t: int, col: np.ndarray) -> np.ndarray:
    """The (H', W') grid of one view (for tests and rendering checks)."""
    h2, w2, base, sr, sc = strides(t, h, w)
    out = np.empty((h2, w2), dtype=np.uint8)
    for r in range(h2):
        for c in range(w2):
            out[r, c] = col[cells[off + base + r * sr + c * sc]]
    return out
