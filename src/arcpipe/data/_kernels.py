"""Numba kernels of the dataset builder: upstream's RNG stream, view hashing, augmentation search, translation
offsets and canvas rendering.

Every kernel is serial and releases the GIL (`nogil`); callers run them on disjoint ranges in a thread pool
(`in_threads`), so a result never depends on the number of threads and nothing pays numba's parallel compile.

Grids live in one flat uint8 array `cells` with per-grid offset/height/width. A view of a grid is a dihedral
transform id `t` and a colour table `col` (10 entries, col[0] == 0); views are compared through two 64-bit
hashes of their content, which are linear in the per-colour sums `W[g, t, c]` of random position weights, so a
candidate view of a task costs O(pairs x 10) to hash instead of O(cells).

Upstream draws every random number from one legacy `np.random` MT19937 stream (upstream.md 1.10). Every call it
makes, `randint(0, n)`, `shuffle` and `permutation`, reduces to `_mt_bounded`: a masked rejection loop over 32-bit
outputs that draws nothing when the range is a single value. The state is an int64 array of 625 entries: the
624 MT words and the position, taken from `RandomState.get_state()`.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable

import numba as nb
import numpy as np

CANVAS = 30
PAD, EOS, COLOUR_OFFSET = 0, 1, 2

_U64 = np.uint64
_GOLDEN = _U64(0x9E3779B97F4A7C15)
_MIX1 = _U64(0xBF58476D1CE4E5B9)
_MIX2 = _U64(0x94D049BB133111EB)
_S27, _S30, _S31, _S32 = _U64(27), _U64(30), _U64(31), _U64(32)

# salts of the two hash families and of the fast mode's streams
SALT_A = 0x243F6A8885A308D3
SALT_B = 0x13198A2E03707344
_COLOUR_SALT = _U64(0xA4093822299F31D0)


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


# --------------------------------------------------------------------------------------------------------------
# Upstream's legacy MT19937 stream


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
def _mt_bounded(st: np.ndarray, highest: int) -> int:
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
        j = _mt_bounded(st, i)
        order[i], order[j] = order[j], order[i]
    return order


@nb.njit(cache=True)
def mt_draws(st: np.ndarray, highest: np.ndarray) -> np.ndarray:
    """Draw `_mt_bounded(highest[i])` in order (for tests against numpy)."""
    out = np.empty(highest.shape[0], dtype=np.int64)
    for i in range(highest.shape[0]):
        out[i] = _mt_bounded(st, highest[i])
    return out


# --------------------------------------------------------------------------------------------------------------
# Counter-based stream of the fast mode: value i of stream `key` is splitmix64(key + i * golden)


@nb.njit(cache=True, inline="always")
def _splitmix(x: np.uint64) -> np.uint64:
    z = x + _GOLDEN
    z = (z ^ (z >> _S30)) * _MIX1
    z = (z ^ (z >> _S27)) * _MIX2
    return z ^ (z >> _S31)


@nb.njit(cache=True, inline="always")
def _stream_below(key: np.uint64, counter: np.ndarray, n: int) -> int:
    """Uniform in [0, n) from the next value of the stream (multiply-shift; the bias is below 2**-32)."""
    counter[0] += 1
    x = _splitmix(key + _U64(counter[0]) * _GOLDEN) >> _S32
    return int((x * _U64(n)) >> _S32)


def stream_key(seed: int, name: str, salt: int) -> np.uint64:
    """A 64-bit stream key from the dataset seed and a task id: independent of order and worker count."""
    import hashlib

    digest = hashlib.sha256(f"{seed}\0{salt}\0{name}".encode()).digest()
    return np.uint64(int.from_bytes(digest[:8], "little"))


# --------------------------------------------------------------------------------------------------------------
# Dihedral transforms as strided reads: D_t(X)[r, c] = X.flat[base + r * sr + c * sc]


@nb.njit(cache=True, inline="always")
def _strides(t: int, h: int, w: int) -> tuple[int, int, int, int, int]:
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
    h2, w2, base, sr, sc = _strides(t, h, w)
    out = np.empty((h2, w2), dtype=np.uint8)
    for r in range(h2):
        for c in range(w2):
            out[r, c] = col[cells[off + base + r * sr + c * sc]]
    return out


# --------------------------------------------------------------------------------------------------------------
# View hashing


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
            h2, w2, base, sr, sc = _strides(t, gh[g], gw[g])
            for r in range(h2):
                for c in range(w2):
                    v = cells[goff[g] + base + r * sr + c * sc]
                    pos = _U64(((h2 * 32 + w2) * 32 + r) * 32 + c)
                    out[g, t, v] += _splitmix(salt ^ _splitmix(pos))
    return out


@nb.njit(cache=True, inline="always")
def _view_key(
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
    ka = _U64(0)
    kb = _U64(0)
    for p in range(pair_in.shape[0]):
        ia = _U64(0)
        oa = _U64(0)
        ib = _U64(0)
        ob = _U64(0)
        for c in range(10):
            ia += fa[col[c]] * wa[pair_in[p], t, c]
            oa += fa[col[c]] * wa[pair_out[p], t, c]
            ib += fb[col[c]] * wb[pair_in[p], t, c]
            ob += fb[col[c]] * wb[pair_out[p], t, c]
        ka += _splitmix(ia ^ _splitmix(oa))
        kb += _splitmix(ib ^ _splitmix(ob + _GOLDEN))
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


# --------------------------------------------------------------------------------------------------------------
# Open-addressing set of 128-bit keys (one per task)


@nb.njit(cache=True, inline="always")
def _insert(table_a: np.ndarray, table_b: np.ndarray, used: np.ndarray, ka: np.uint64, kb: np.uint64) -> bool:
    """Add (ka, kb); False when it was already there."""
    mask = used.shape[0] - 1
    i = np.int64(ka & _U64(mask))
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


# --------------------------------------------------------------------------------------------------------------
# Augmentation search


@nb.njit(cache=True)
def search_exact(
    st: np.ndarray,
    order: np.ndarray,
    tp_ptr: np.ndarray,
    tp_in: np.ndarray,
    tp_out: np.ndarray,
    wa: np.ndarray,
    wb: np.ndarray,
    fa: np.ndarray,
    fb: np.ndarray,
    num_aug: int,
    max_trials: int,
    aug_tid: np.ndarray,
    aug_col: np.ndarray,
    aug_count: np.ndarray,
    trials: np.ndarray,
) -> None:
    """Upstream's sequential search for the tasks `order` (task indices), drawing from `st`.

    Each trial draws `randint(0, 8)` and `[0] + permutation(1..9)`; a view is kept when its content is new
    (upstream.md 1.8). Writes aug_tid[task, k], aug_col[task, k] (k = 0 is the original) and aug_count[task].
    """
    size = table_size(num_aug + 1)
    table_a = np.zeros(size, dtype=np.uint64)
    table_b = np.zeros(size, dtype=np.uint64)
    used = np.zeros(size, dtype=np.uint8)
    col = np.arange(10).astype(np.uint8)
    for task in order:
        used[:] = 0
        pin = tp_in[tp_ptr[task] : tp_ptr[task + 1]]
        pout = tp_out[tp_ptr[task] : tp_ptr[task + 1]]
        for c in range(10):
            col[c] = c
        ka, kb = _view_key(0, col, pin, pout, wa, wb, fa, fb)
        _insert(table_a, table_b, used, ka, kb)
        aug_tid[task, 0] = 0
        aug_col[task, 0, :] = col
        count = 1
        done = 0
        if num_aug > 0:
            for _ in range(max_trials):
                done += 1
                t = _mt_bounded(st, 7)
                for c in range(10):
                    col[c] = c
                for i in range(9, 1, -1):  # permutation of the 9 values 1..9: positions 1..9 of col
                    j = 1 + _mt_bounded(st, i - 1)
                    col[i], col[j] = col[j], col[i]
                ka, kb = _view_key(t, col, pin, pout, wa, wb, fa, fb)
                if _insert(table_a, table_b, used, ka, kb):
                    aug_tid[task, count] = t
                    aug_col[task, count, :] = col
                    count += 1
                if count >= num_aug + 1:
                    break
        aug_count[task] = count
        trials[task] = done


@nb.njit(cache=True, nogil=True)
def search_fast(
    first: int,
    step: int,
    keys: np.ndarray,
    tp_ptr: np.ndarray,
    tp_in: np.ndarray,
    tp_out: np.ndarray,
    task_colours: np.ndarray,
    wa: np.ndarray,
    wb: np.ndarray,
    fa: np.ndarray,
    fb: np.ndarray,
    num_aug: int,
    enumerate_below: int,
    aug_tid: np.ndarray,
    aug_col: np.ndarray,
    aug_count: np.ndarray,
    trials: np.ndarray,
) -> None:
    """Up to num_aug distinct views for tasks first, first + step, ..., each from its own stream `keys[task]`.

    Threads take interleaved task sets; each task depends only on its stream, so the result does not depend on
    how tasks are shared out.

    `task_colours[task]` is a bitmask of the non-zero colours the task uses; only their images change a view,
    so the space of candidate views is t (8) x injective maps of those k colours into 1..9. When the space is
    smaller than `enumerate_below`, every candidate is visited in a random order; otherwise random candidates are
    drawn, and if that ever stalls (after 20 x num_aug + 1000 draws) the whole space is enumerated in index order.
    Either way a task gets min(num_aug, distinct views - 1) augmentations: never fewer than upstream's 5 x num_aug
    random trials find.
    """
    size = table_size(num_aug + 1)
    for task in range(first, keys.shape[0], step):
        table_a = np.zeros(size, dtype=np.uint64)
        table_b = np.zeros(size, dtype=np.uint64)
        used = np.zeros(size, dtype=np.uint8)
        counter = np.zeros(1, dtype=np.int64)
        col = np.arange(10).astype(np.uint8)
        present = np.zeros(9, dtype=np.int64)  # the task's non-zero colours, ascending
        k = 0
        for c in range(1, 10):
            if task_colours[task] >> c & 1:
                present[k] = c
                k += 1
        space = 8
        for i in range(k):
            space *= 9 - i
        pin = tp_in[tp_ptr[task] : tp_ptr[task + 1]]
        pout = tp_out[tp_ptr[task] : tp_ptr[task + 1]]
        ka, kb = _view_key(0, col, pin, pout, wa, wb, fa, fb)
        _insert(table_a, table_b, used, ka, kb)
        aug_tid[task, 0] = 0
        aug_col[task, 0, :] = col
        count = 1
        done = 0
        target = num_aug + 1
        if num_aug > 0 and space < enumerate_below:
            order = np.arange(space)
            for i in range(space - 1, 0, -1):
                j = _stream_below(keys[task], counter, i + 1)
                order[i], order[j] = order[j], order[i]
            for index in order:
                done += 1
                t = _decode(index, present, k, col)
                ka, kb = _view_key(t, col, pin, pout, wa, wb, fa, fb)
                if _insert(table_a, table_b, used, ka, kb):
                    aug_tid[task, count] = t
                    aug_col[task, count, :] = col
                    count += 1
                    if count >= target:
                        break
        elif num_aug > 0:
            limit = 20 * num_aug + 1000
            while count < target and done < limit:
                done += 1
                t = _stream_below(keys[task], counter, 8)
                for c in range(10):
                    col[c] = c
                for i in range(9, 1, -1):
                    j = 1 + _stream_below(keys[task], counter, i)
                    col[i], col[j] = col[j], col[i]
                ka, kb = _view_key(t, col, pin, pout, wa, wb, fa, fb)
                if _insert(table_a, table_b, used, ka, kb):
                    aug_tid[task, count] = t
                    aug_col[task, count, :] = col
                    count += 1
            index = 0
            while count < target and index < space:
                done += 1
                t = _decode(index, present, k, col)
                index += 1
                ka, kb = _view_key(t, col, pin, pout, wa, wb, fa, fb)
                if _insert(table_a, table_b, used, ka, kb):
                    aug_tid[task, count] = t
                    aug_col[task, count, :] = col
                    count += 1
        aug_count[task] = count
        trials[task] = done


@nb.njit(cache=True, inline="always")
def _decode(index: int, present: np.ndarray, k: int, col: np.ndarray) -> int:
    """Candidate `index` of the space t x injective maps present[:k] -> 1..9; fills col, returns t.

    Colours the task does not use get the unused new colours in ascending order (they do not change the view,
    only its name).
    """
    t = index % 8
    index //= 8
    taken = np.zeros(10, dtype=np.bool_)
    taken[0] = True
    for c in range(10):
        col[c] = 0
    mapped = np.zeros(10, dtype=np.bool_)
    mapped[0] = True
    for i in range(k):
        choice = index % (9 - i)
        index //= 9 - i
        new = 0
        for candidate in range(1, 10):  # the choice-th colour not taken yet
            if not taken[candidate]:
                if choice == 0:
                    new = candidate
                    break
                choice -= 1
        taken[new] = True
        col[present[i]] = new
        mapped[present[i]] = True
    free = 1
    for c in range(1, 10):
        if not mapped[c]:
            while taken[free]:
                free += 1
            col[c] = free
            taken[free] = True
    return t


# --------------------------------------------------------------------------------------------------------------
# Translation offsets


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
            keep = _mt_bounded(st, n - 1)
            transposed = aug_tid[task, a] in (1, 3, 6, 7)
            for e in range(n):
                if translate and e != keep:
                    gi = ex_in[ex_ptr[task] + e]
                    go = ex_out[ex_ptr[task] + e]
                    mh = max(gh[gi], gh[go])
                    mw = max(gw[gi], gw[go])
                    if transposed:
                        mh, mw = mw, mh
                    row_r[row] = _mt_bounded(st, CANVAS - mh)
                    row_c[row] = _mt_bounded(st, CANVAS - mw)
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
            keep = _stream_below(keys[task], counter, n)
            transposed = aug_tid[task, a] in (1, 3, 6, 7)
            for e in range(n):
                if e != keep:
                    gi = ex_in[ex_ptr[task] + e]
                    go = ex_out[ex_ptr[task] + e]
                    mh = max(gh[gi], gh[go])
                    mw = max(gw[gi], gw[go])
                    if transposed:
                        mh, mw = mw, mh
                    row_r[row] = _stream_below(keys[task], counter, CANVAS - mh + 1)
                    row_c[row] = _stream_below(keys[task], counter, CANVAS - mw + 1)
                else:
                    row_r[row] = 0
                    row_c[row] = 0
                row += 1


# --------------------------------------------------------------------------------------------------------------
# Rows and rendering


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
    h2, w2, base, sr, sc = _strides(t, h, w)
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


# --------------------------------------------------------------------------------------------------------------
# Verification: decode canvases back into grids and hash them with family A (comparable with `view_hashes`)

BAD_TOKEN, BAD_CANVAS, BAD_OFFSET = 1, 2, 3  # scan_canvases codes; 0 is a valid row


@nb.njit(cache=True, inline="always")
def _position_weight(salt: np.uint64, h: int, w: int, r: int, c: int) -> np.uint64:
    return _splitmix(salt ^ _splitmix(_U64(((h * 32 + w) * 32 + r) * 32 + c)))


@nb.njit(cache=True, nogil=True)
def position_table(salt: np.uint64) -> np.ndarray:
    """(31, 31, 30, 30) table of `_position_weight(salt, h, w, r, c)`, so decoding need not hash per cell."""
    out = np.zeros((31, 31, 30, 30), dtype=np.uint64)
    for h in range(1, 31):
        for w in range(1, 31):
            for r in range(h):
                for c in range(w):
                    out[h, w, r, c] = _position_weight(salt, h, w, r, c)
    return out


@nb.njit(cache=True)
def _decode_canvas(row: np.ndarray, vocab: int, fa: np.ndarray, weights: np.ndarray) -> tuple[int, int, int, np.uint64]:
    """(code, r0, c0, hash) of one (900,) canvas: a colour rectangle with its EOS edges and PAD elsewhere."""
    first = -1
    for i in range(CANVAS * CANVAS):
        if row[i] >= vocab:
            return BAD_TOKEN, 0, 0, _U64(0)
        if first < 0 and row[i] >= COLOUR_OFFSET:
            first = i
    if first < 0:
        return BAD_CANVAS, 0, 0, _U64(0)
    r0, c0 = first // CANVAS, first % CANVAS
    w = 0
    while c0 + w < CANVAS and row[r0 * CANVAS + c0 + w] >= COLOUR_OFFSET:
        w += 1
    h = 0
    while r0 + h < CANVAS and row[(r0 + h) * CANVAS + c0] >= COLOUR_OFFSET:
        h += 1
    key = _U64(0)
    for r in range(CANVAS):
        for c in range(CANVAS):
            v = row[r * CANVAS + c]
            inside_r = r0 <= r < r0 + h
            inside_c = c0 <= c < c0 + w
            if inside_r and inside_c:
                if v < COLOUR_OFFSET:
                    return BAD_CANVAS, r0, c0, _U64(0)
                key += fa[v - COLOUR_OFFSET] * weights[h, w, r - r0, c - c0]
            elif (r == r0 + h and inside_c) or (c == c0 + w and inside_r):
                if v != EOS:
                    return BAD_CANVAS, r0, c0, _U64(0)
            elif v != PAD:
                return BAD_CANVAS, r0, c0, _U64(0)
    return 0, r0, c0, key


@nb.njit(cache=True, nogil=True)
def scan_canvases(
    inputs: np.ndarray,
    labels: np.ndarray,
    vocab: int,
    fa: np.ndarray,
    weights: np.ndarray,
    code: np.ndarray,
    offset: np.ndarray,
    in_hash: np.ndarray,
    out_hash: np.ndarray,
) -> None:
    """Per row of a chunk: validity code, the shared offset r0 * 30 + c0, and the content hash of both grids."""
    for i in range(inputs.shape[0]):
        ci, ri, ki, hi = _decode_canvas(inputs[i], vocab, fa, weights)
        co, ro, ko, ho = _decode_canvas(labels[i], vocab, fa, weights)
        code[i] = ci if ci else co
        if code[i] == 0 and (ri != ro or ki != ko):
            code[i] = BAD_OFFSET
        offset[i] = ri * CANVAS + ki
        in_hash[i] = hi
        out_hash[i] = ho


@nb.njit(cache=True, nogil=True)
def view_hashes(grids: np.ndarray, tids: np.ndarray, cols: np.ndarray, wa: np.ndarray, fa: np.ndarray) -> np.ndarray:
    """Family-A content hash of view (tids[i], cols[i]) of grid grids[i], for i in range(len(grids))."""
    out = np.zeros(grids.shape[0], dtype=np.uint64)
    for i in range(grids.shape[0]):
        key = _U64(0)
        for c in range(10):
            key += fa[cols[i, c]] * wa[grids[i], tids[i], c]
        out[i] = key
    return out


@nb.njit(cache=True, inline="always")
def pair_key(a: np.uint64, b: np.uint64) -> np.uint64:
    return _splitmix(a ^ _splitmix(b))


@nb.njit(cache=True, nogil=True)
def pair_keys(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out = np.empty(a.shape[0], dtype=np.uint64)
    for i in range(a.shape[0]):
        out[i] = pair_key(a[i], b[i])
    return out
