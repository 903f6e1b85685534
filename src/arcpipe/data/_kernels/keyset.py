"""Open-addressing set of 128-bit keys (one per task): which views of a task the augmentation search has seen."""

from __future__ import annotations

import numba as nb
import numpy as np

from arcpipe.data._kernels.splitmix import U64


@nb.njit(cache=True, inline="always")
def insert_key(table_a: np.ndarray, table_b: np.ndarray, used: np.ndarray, ka: np.uint64, kb: np.uint64) -> bool:
    """Add (ka, kb); False when it was already there."""
    mask = used.shape[0] - 1
    i = np.int64(ka & U64(mask))
    while used[i]:
        if table_a[i] == ka and table_b[i] == kb:
            return False
        i = (i + 1) & mask
    used[i] = 1
    table_a[i] = ka
    table_b[i] = kb
    return True


@nb.njit(cache=True)
def table_size(capacity: int) -> int:
    """A power of two at least twice `capacity` (so probes stay short)."""
    size = 16
    while size < 2 * capacity:
        size *= 2
    return size
