"""The splitmix64 mixer (of the view hashes too) and the fast mode's counter-based stream: value i of stream `key`
is splitmix64(key + i * golden)."""

from __future__ import annotations

import numba as nb
import numpy as np

U64 = np.uint64
GOLDEN = U64(0x9E3779B97F4A7C15)
_MIX1 = U64(0xBF58476D1CE4E5B9)
_MIX2 = U64(0x94D049BB133111EB)
_S27, _S30, _S31, _S32 = U64(27), U64(30), U64(31), U64(32)


@nb.njit(cache=True, inline="always")
def splitmix(x: np.uint64) -> np.uint64:
    z = x + GOLDEN
    z = (z ^ (z >> _S30)) * _MIX1
    z = (z ^ (z >> _S27)) * _MIX2
    return z ^ (z >> _S31)


@nb.njit(cache=True, inline="always")
def stream_below(key: np.uint64, counter: np.ndarray, n: int) -> int:
    """Uniform in [0, n) from the next value of the stream (multiply-shift; the bias is below 2**-32)."""
    counter[0] += 1
    x = splitmix(key + U64(counter[0]) * GOLDEN) >> _S32
    return int((x * U64(n)) >> _S32)


def stream_key(seed: int, name: str, salt: int) -> np.uint64:
    """A 64-bit stream key from the dataset seed and a task id: independent of order and worker count."""
    import hashlib

    digest = hashlib.sha256(f"{seed}\0{salt}\0{name}".encode()).digest()
    return np.uint64(int.from_bytes(digest[:8], "little"))
