"""View hashing: views are compared through two 64-bit hashes of their content (families A and B), which are
linear in the per-colour sums `W[g, t, c]` of random position weights, so a candidate view of a task costs
O(pairs x 10) to hash instead of O(cells)."""

from __future__ import annotations

import numba as nb
import numpy as np

from arcpipe.data._kernels.dihedral import strides
from arcpipe.data._kernels.splitmix import GOLDEN, U64, splitmix

# salts of the two hash families and of the fast mode's streams
SALT_A = 0x243F6A8885A308D3
SALT_B = 0x13198A2E03707344
_COLOUR_SALT = U64(0xA4093822299F31D0)


@nb.njit(cache=True, nogil=True)
def colour_weights(cells: np.ndarray, goff: np.ndarray, gh: np.ndarray, gw: np.ndarray, salt: np.uint64) -> np.ndarray:
    """W[g, t, c]: sum of the position weights of the cells of colour c in view t of grid g, (G, 8, 10) uint64.

    A position weight depends on the view's shape and the cell's position in it, so two views with equal
    content have equal sums whatever the task they came from.
    """
    num = goff.shape[0]
    out = np.zeros((num, 8, 10), dtype=np.uint64)
    for g in range(num):
        for t in range(8):
            h2, w2, base, sr, sc = strides(t, gh[g], gw[g])
            for r in range(h2):
                for c in range(w2):
                    v = cells[goff[g] + base + r * sr + c * sc]
                    pos = U64(((h2 * 32 + w2) * 32 + r) * 32 + c)
                    out[g, t, v] += splitmix(salt ^ splitmix(pos))
    return out


@nb.njit(cache=True, inline="always")
def view_key(
    t: int,
    col: np.ndarray,
    pair_in: np.ndarray,
    pair_out: np.ndarray,
    wa: np.ndarray,
    wb: np.ndarray,
    fa: np.ndarray,
    fb: np.ndarray,
) -> tuple[np.uint64, np.uint64]:
    """Two 64-bit hashes of the multiset of (input, output) pairs of one view of a task (order-free, as upstream)."""
    ka = U64(0)
    kb = U64(0)
    for p in range(pair_in.shape[0]):
        ia = U64(0)
        oa = U64(0)
        ib = U64(0)
        ob = U64(0)
        for c in range(10):
            ia += fa[col[c]] * wa[pair_in[p], t, c]
            oa += fa[col[c]] * wa[pair_out[p], t, c]
            ib += fb[col[c]] * wb[pair_in[p], t, c]
            ob += fb[col[c]] * wb[pair_out[p], t, c]
        ka += splitmix(ia ^ splitmix(oa))
        kb += splitmix(ib ^ splitmix(ob + GOLDEN))
    return ka, kb


def colour_factors(salt: int) -> np.ndarray:
    """Per-colour random factors (10,) uint64 of one hash family."""
    return np.array([_py_splitmix(salt ^ (0xA4093822299F31D0 + c)) | 1 for c in range(10)], dtype=np.uint64)


def _py_splitmix(x: int) -> int:
    m = (1 << 64) - 1
    z = (x + 0x9E3779B97F4A7C15) & m
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
    return z ^ (z >> 31)
