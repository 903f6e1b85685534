"""Running kernels on a thread pool: every kernel is serial and releases the GIL (`nogil`); callers run them on
disjoint ranges (`ranges`) in a pool (`in_threads`), so a result never depends on the number of threads and
nothing pays numba's parallel compile."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable


def in_threads(pool: concurrent.futures.ThreadPoolExecutor | None, calls: list[Callable[[], None]]) -> None:
    """Run independent kernel calls on the pool (or inline without one) and re-raise the first error."""
    if pool is None or len(calls) == 1:
        for call in calls:
            call()
        return
    for future in [pool.submit(call) for call in calls]:
        future.result()


def ranges(n: int, parts: int) -> list[tuple[int, int]]:
    """[0, n) cut into at most `parts` contiguous, nearly equal, non-empty ranges."""
    parts = max(1, min(parts, n))
    bounds = [n * k // parts for k in range(parts + 1)]
    return [(bounds[k], bounds[k + 1]) for k in range(parts)]
