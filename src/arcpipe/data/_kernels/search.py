"""Augmentation search: the distinct views (dihedral transform and colour permutation) of each task, by upstream's
sequential random trials (`search_exact`) or from per-task streams (`search_fast`)."""

from __future__ import annotations

import numba as nb
import numpy as np

from arcpipe.data._kernels.hashing import view_key
from arcpipe.data._kernels.keyset import insert_key, table_size
from arcpipe.data._kernels.mt19937 import mt_bounded
from arcpipe.data._kernels.splitmix import stream_below


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
    (docs/reference/upstream-recursive.md 1.8). Writes aug_tid[task, k], aug_col[task, k] (k = 0 is the original) and
    aug_count[task].
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
        ka, kb = view_key(0, col, pin, pout, wa, wb, fa, fb)
        insert_key(table_a, table_b, used, ka, kb)
        aug_tid[task, 0] = 0
        aug_col[task, 0, :] = col
        count = 1
        done = 0
        if num_aug > 0:
            for _ in range(max_trials):
                done += 1
                t = mt_bounded(st, 7)
                for c in range(10):
                    col[c] = c
                for i in range(9, 1, -1):  # permutation of the 9 values 1..9: positions 1..9 of col
                    j = 1 + mt_bounded(st, i - 1)
                    col[i], col[j] = col[j], col[i]
                ka, kb = view_key(t, col, pin, pout, wa, wb, fa, fb)
                if insert_key(table_a, table_b, used, ka, kb):
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
        ka, kb = view_key(0, col, pin, pout, wa, wb, fa, fb)
        insert_key(table_a, table_b, used, ka, kb)
        aug_tid[task, 0] = 0
        aug_col[task, 0, :] = col
        count = 1
        done = 0
        target = num_aug + 1
        if num_aug > 0 and space < enumerate_below:
            order = np.arange(space)
            for i in range(space - 1, 0, -1):
                j = stream_below(keys[task], counter, i + 1)
                order[i], order[j] = order[j], order[i]
            for index in order:
                done += 1
                t = _decode(index, present, k, col)
                ka, kb = view_key(t, col, pin, pout, wa, wb, fa, fb)
                if insert_key(table_a, table_b, used, ka, kb):
                    aug_tid[task, count] = t
                    aug_col[task, count, :] = col
                    count += 1
                    if count >= target:
                        break
        elif num_aug > 0:
            limit = 20 * num_aug + 1000
            while count < target and done < limit:
                done += 1
                t = stream_below(keys[task], counter, 8)
                for c in range(10):
                    col[c] = c
                for i in range(9, 1, -1):
                    j = 1 + stream_below(keys[task], counter, i)
                    col[i], col[j] = col[j], col[i]
                ka, kb = view_key(t, col, pin, pout, wa, wb, fa, fb)
                if insert_key(table_a, table_b, used, ka, kb):
                    aug_tid[task, count] = t
                    aug_col[task, count, :] = col
                    count += 1
            index = 0
            while count < target and index < space:
                done += 1
                t = _decode(index, present, k, col)
                index += 1
                ka, kb = view_key(t, col, pin, pout, wa, wb, fa, fb)
                if insert_key(table_a, table_b, used, ka, kb):
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
