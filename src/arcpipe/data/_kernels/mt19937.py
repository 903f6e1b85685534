"""Upstream's legacy MT19937 stream.

Upstream draws every random number from one legacy `np.random` MT19937 stream (docs/reference/upstream-recursive.md
1.10). Every call it makes, `randint(0, n)`, `shuffle` and `permutation`, reduces to `mt_bounded`: a masked rejection
loop over 32-bit outputs that draws nothing when the range is a single value. The state is an int64 array of 625
entries: the 624 MT words and the position, taken from `RandomState.get_state()`.
"""

from __future__ import annotations

import numba as nb
import numpy as np


@nb.njit(cache=True)
def _mt_refill(st: np.ndarray) -> None:
    for i in range(624):
        y = (st[i] & 0x80000000) | (st[(i + 1) % 624] & 0x7FFFFFFF)
        v = st[(i + 397) % 624] ^ (y >> 1)
        if y & 1:
            v ^= 0x9908B0DF
        st[i] = v
    st[624] = 0


@nb.njit(cache=True)
def _mt_next(st: np.ndarray) -> int:
    if st[624] >= 624:
        _mt_refill(st)
    y = st[st[624]]
    st[624] += 1
    y ^= y >> 11
    y ^= (y << 7) & 0x9D2C5680
    y ^= (y << 15) & 0xEFC60000
    y ^= y >> 18
    return y


@nb.njit(cache=True)
def mt_bounded(st: np.ndarray, highest: int) -> int:
    """Legacy `randint(0, highest + 1)` and `random_interval(highest)`: uniform in [0, highest]."""
    if highest == 0:
        return 0
    mask = highest
    mask |= mask >> 1
    mask |= mask >> 2
    mask |= mask >> 4
    mask |= mask >> 8
    mask |= mask >> 16
    while True:
        value = _mt_next(st) & mask
        if value <= highest:
            return value


@nb.njit(cache=True)
def mt_shuffled(st: np.ndarray, n: int) -> np.ndarray:
    """The permutation legacy `shuffle` applies to a list of n items: result[i] = original index now at i."""
    order = np.arange(n)
    for i in range(n - 1, 0, -1):
        j = mt_bounded(st, i)
        order[i], order[j] = order[j], order[i]
    return order


@nb.njit(cache=True)
def mt_draws(st: np.ndarray, highest: np.ndarray) -> np.ndarray:
    """Draw `mt_bounded(highest[i])` in order (for tests against numpy)."""
    out = np.empty(highest.shape[0], dtype=np.int64)
    for i in range(highest.shape[0]):
        out[i] = mt_bounded(st, highest[i])
    return out
