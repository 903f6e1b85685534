"""Translation offsets: where each example's grids sit on the canvas, drawn as upstream does (`offsets_exact`) or from
per-task streams (`offsets_fast`)."""

from __future__ import annotations

import numba as nb
import numpy as np

from arcpipe.data._kernels.canvas import CANVAS
from arcpipe.data._kernels.mt19937 import mt_bounded
from arcpipe.data._kernels.splitmix import stream_below


@nb.njit(cache=True)
def offsets_exact(
    st: np.ndarray,
    tasks: np.ndarray,
    row_start: np.ndarray,
    ex_ptr: np.ndarray,
    ex_in: np.ndarray,
    ex_out: np.ndarray,
    gh: np.ndarray,
    gw: np.ndarray,
    aug_tid: np.ndarray,
    aug_count: np.ndarray,
    translate: bool,
    row_r: np.ndarray,
    row_c: np.ndarray,
) -> None:
    """Upstream's write-phase draws for one split: per puzzle `randint(0, n_examples)`, then (train split only) a
    row and a column offset for every example but that one. Tasks in split order; row_start[i] is the first row
    of tasks[i]; the examples of a task are ex_ptr-indexed (grids ex_in/ex_out)."""
    for i in range(tasks.shape[0]):
        task = tasks[i]
        n = ex_ptr[task + 1] - ex_ptr[task]
        row = row_start[i]
        for a in range(aug_count[task]):
            keep = mt_bounded(st, n - 1)
            transposed = aug_tid[task, a] in (1, 3, 6, 7)
            for e in range(n):
                if translate and e != keep:
                    gi = ex_in[ex_ptr[task] + e]
                    go = ex_out[ex_ptr[task] + e]
                    mh = max(gh[gi], gh[go])
                    mw = max(gw[gi], gw[go])
                    if transposed:
                        mh, mw = mw, mh
                    row_r[row] = mt_bounded(st, CANVAS - mh)
                    row_c[row] = mt_bounded(st, CANVAS - mw)
                else:
                    row_r[row] = 0
                    row_c[row] = 0
                row += 1


@nb.njit(cache=True, nogil=True)
def offsets_fast(
    keys: np.ndarray,
    tasks: np.ndarray,
    row_start: np.ndarray,
    ex_ptr: np.ndarray,
    ex_in: np.ndarray,
    ex_out: np.ndarray,
    gh: np.ndarray,
    gw: np.ndarray,
    aug_tid: np.ndarray,
    aug_count: np.ndarray,
    row_r: np.ndarray,
    row_c: np.ndarray,
) -> None:
    """Train-split offsets with upstream's semantics (one untranslated example per puzzle), per-task streams."""
    for i in range(tasks.shape[0]):
        task = tasks[i]
        counter = np.zeros(1, dtype=np.int64)
        n = ex_ptr[task + 1] - ex_ptr[task]
        row = row_start[i]
        for a in range(aug_count[task]):
            keep = stream_below(keys[task], counter, n)
            transposed = aug_tid[task, a] in (1, 3, 6, 7)
            for e in range(n):
                if e != keep:
                    gi = ex_in[ex_ptr[task] + e]
                    go = ex_out[ex_ptr[task] + e]
                    mh = max(gh[gi], gh[go])
                    mw = max(gw[gi], gw[go])
                    if transposed:
                        mh, mw = mw, mh
                    row_r[row] = stream_below(keys[task], counter, CANVAS - mh + 1)
                    row_c[row] = stream_below(keys[task], counter, CANVAS - mw + 1)
                else:
                    row_r[row] = 0
                    row_c[row] = 0
                row += 1
