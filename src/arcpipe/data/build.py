"""Build an augmented ARC dataset in upstream's on-disk format (docs/reference/upstream-recursive.md 1), fast and in
bounded memory.

    arcpipe data build --config config/config.yaml --dataset smoke --output-dir results/data/smoke

Two modes share one pipeline (load -> search views -> translation offsets -> render rows -> write):

* `upstream_exact` replays upstream's single legacy MT19937 stream call for call (subset shuffles, the
  `randint`/`permutation` trials of every task, then the write-phase draws), so the same input files and seed give
  byte-identical files. Only the stream is sequential; hashing, rendering and writing are not.
* `fast` gives every task its own counter-based stream keyed by (seed, task id), searches and translates all tasks
  in parallel, and never finds fewer distinct views than upstream. Its files do not depend on the worker count.

Rows are rendered by numba into bounded windows and appended to the `.npy` files with direct I/O, so resident
memory stays small whatever the dataset size. The build goes to a hidden sibling directory that is renamed into
place at the end: an interrupted build leaves nothing that looks complete.
"""

from __future__ import annotations

import concurrent.futures
import functools
import hashlib
import io
import json
import logging
import os
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

import arcpipe
from arcpipe.config import ArcpipeError, DatasetConfig, ReArcSource
from arcpipe.data import _kernels as K
from arcpipe.data._rowfile import RowFile
from arcpipe.data.arc import UNSOLVED_OUTPUT, Pair, Subset, Task, load_re_arc, load_sources
from arcpipe.data.augment import varc_ttt_views

log = logging.getLogger(__name__)

RETRIES_FACTOR = 5  # upstream's ARCAugmentRetriesFactor: at most 5 x num_aug trials per task
ENUMERATE_BELOW = 8 * 9 * 8 * 7 + 1  # fast mode visits every candidate view of tasks with <= 3 colours
WINDOW_ROWS = 16384  # rows rendered per write: 2 buffers x 2 arrays x 14.7 MB
BLANK = "<blank>"
SPLIT_FILES = tuple(
    f"all__{field}.npy" for field in ("inputs", "labels", "puzzle_identifiers", "puzzle_indices", "group_indices")
)
OUTPUT_NAMES = {"identifiers.json", "test_puzzles.json", "train", "test", "build.json", "verify.json"}


def build_dataset(cfg: DatasetConfig, output_dir: Path, *, workers: int | None = None) -> None:
    """Build the dataset `cfg` describes into `output_dir` (absent, empty, or an earlier arcpipe build)."""
    started = time.perf_counter()
    output_dir = Path(output_dir)
    _check_output_dir(output_dir)
    threads = _threads(cfg.workers if workers is None else workers)
    timings: dict[str, float] = {}

    tick = time.perf_counter()
    subsets, re_arc = add_re_arc(cfg, select_subsets(cfg, load_sources(cfg.sources, cfg.max_puzzles)))
    timings["load_s"] = time.perf_counter() - tick

    tick = time.perf_counter()
    plan = plan_dataset(cfg, subsets, threads=threads)
    timings["plan_s"] = time.perf_counter() - tick

    tmp = output_dir.parent / f".{output_dir.name}.building-{os.getpid()}"
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_builds(output_dir)
    try:
        tmp.mkdir()
        tick = time.perf_counter()
        counts = write_dataset(plan, tmp)
        timings["write_s"] = time.perf_counter() - tick
        timings["total_s"] = time.perf_counter() - started
        manifest = _manifest(cfg, subsets, re_arc, plan, tmp, counts, timings, threads)
        (tmp / "build.json").write_text(json.dumps(manifest, indent=2) + "\n")
        _move_into_place(tmp, output_dir)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    log.info(
        "built %s: %d train puzzles (%d rows), %d test puzzles (%d rows) in %.1f s [%s mode, %d threads]",
        output_dir,
        counts["train"]["puzzles"],
        counts["train"]["examples"],
        counts["test"]["puzzles"],
        counts["test"]["examples"],
        time.perf_counter() - started,
        cfg.mode,
        threads,
    )


def select_subsets(cfg: DatasetConfig, subsets: list[Subset]) -> list[Subset]:
    """Check the test set and apply `max_puzzles` (the first N tasks of each subset, in file order)."""
    names = [subset.name for subset in subsets]
    if cfg.test_set not in names:
        raise ArcpipeError(f"test_set {cfg.test_set!r} is not among the subsets ({', '.join(names)}); name one of them")
    for subset in subsets:
        if subset.name != cfg.test_set and not subset.solved:
            raise ArcpipeError(
                f"subset {subset.name!r} has no solutions ({', '.join(subset.origin.get('files', {}))}): "
                f"only the test set ({cfg.test_set!r}) may be prediction-only; add its solutions file"
            )
    if not cfg.test_demos_in_train and set(names) == {cfg.test_set}:
        raise ArcpipeError(
            f"test_demos_in_train: false leaves the train split empty: the test set {cfg.test_set!r} is the only "
            "subset; add a training subset, or set test_demos_in_train: true"
        )
    if cfg.mode == "upstream_exact" and names[0] == cfg.test_set and len(names) > 1:
        log.warning(
            "the test set %r is the first subset: upstream's split order (and so its ids) then depends on Python's "
            "string hashing; arcpipe writes the train split first",
            cfg.test_set,
        )
    if cfg.max_puzzles is None:
        return subsets
    return [Subset(s.name, dict(list(s.tasks.items())[: cfg.max_puzzles]), s.origin) for s in subsets]


def add_re_arc(cfg: DatasetConfig, subsets: list[Subset]) -> tuple[list[Subset], dict[str, Any] | None]:
    """The subsets with RE-ARC's pairs as extra training examples of the tasks of the same id, and the source's
    record for build.json (None without a RE-ARC source).

    Only tasks that the train split holds get them (a test-set task does only with `test_demos_in_train`). A
    generated pair equal to one of its test-set task's own test pairs is dropped and counted: it would put the
    answer in training (the leak verify.py refuses).
    """
    source = next((s for s in cfg.sources if isinstance(s, ReArcSource)), None)
    if source is None:
        return subsets, None
    trained = {
        task_id
        for subset in subsets
        if subset.name != cfg.test_set or cfg.test_demos_in_train
        for task_id in subset.tasks
    }
    extra, origin = load_re_arc(source, trained, cfg.seed)
    dropped = 0
    joined = []
    for subset in subsets:
        tasks = {}
        for task_id, task in subset.tasks.items():
            pairs = extra.get(task_id, ())
            if pairs and subset.name == cfg.test_set:
                answers = {_pair_key(pair) for pair in task.test if pair.output is not None}
                kept = tuple(pair for pair in pairs if _pair_key(pair) not in answers)
                dropped += len(pairs) - len(kept)
                pairs = kept
            tasks[task_id] = replace(task, extra=pairs) if pairs else task
        joined.append(Subset(subset.name, tasks, subset.origin))
    if dropped:
        log.warning("RE-ARC: dropped %d generated pairs equal to a test pair of their own test-set task", dropped)
    return joined, {**origin, "num_examples": origin["num_examples"] - dropped, "dropped_test_pairs": dropped}


# --------------------------------------------------------------------------------------------------------------
# Planning: every decision of the build, before anything is written


@dataclass
class Grids:
    """All grids of all tasks, flat: grid g is cells[off[g]: off[g] + h[g] * w[g]] in row-major order."""

    cells: np.ndarray  # (sum of h*w,) uint8
    off: np.ndarray  # (G,) int64
    h: np.ndarray  # (G,) int64
    w: np.ndarray  # (G,) int64


@dataclass
class Examples:
    """Per task, the (input, output) grid ids of its examples in one split, CSR-indexed by task."""

    ptr: np.ndarray  # (T + 1,) int64
    inp: np.ndarray  # (E,) int64
    out: np.ndarray  # (E,) int64


@dataclass
class SplitPlan:
    tasks: np.ndarray  # (groups,) task indices in group order
    examples: Examples
    row_start: np.ndarray  # (groups,) first row of each group
    row_in: np.ndarray  # (rows,) int32 grid id of each row's input
    row_out: np.ndarray  # (rows,) int32 grid id of each row's output
    row_aug: np.ndarray  # (rows,) int32 flat view index task * (num_aug + 1) + k
    row_r: np.ndarray  # (rows,) uint8 translation offsets
    row_c: np.ndarray
    puzzle_indices: np.ndarray  # (puzzles + 1,) int32
    group_indices: np.ndarray  # (groups + 1,) int32
    puzzle_identifiers: np.ndarray  # (puzzles,) int32

    @property
    def num_rows(self) -> int:
        return len(self.row_in)


@dataclass
class Plan:
    tasks: list[Task]
    grids: Grids
    aug_tid: np.ndarray  # (T, num_aug + 1) uint8, view k of task i (k = 0: the original)
    aug_col: np.ndarray  # (T, num_aug + 1, 10) uint8
    aug_count: np.ndarray  # (T,) int64 views per task, original included
    trials: np.ndarray  # (T,) int64
    train: SplitPlan
    test: SplitPlan
    identifiers_json: bytes  # identifiers.json exactly as upstream's json.dump writes the list of names
    num_identifiers: int
    test_puzzles: dict[str, Any]
    num_aug: int
    threads: int


def plan_dataset(cfg: DatasetConfig, subsets: list[Subset], *, threads: int = 1) -> Plan:
    """Choose the views of every task, the group order, the identifiers and the translation offsets."""
    tasks = [task for subset in subsets for task in subset.tasks.values()]
    is_test = np.array([subset.name == cfg.test_set for subset in subsets for _ in subset.tasks], dtype=bool)
    grids, all_pairs, train_ex, test_ex = _flatten(tasks, is_test, cfg.test_demos_in_train)
    wa = K.colour_weights(grids.cells, grids.off, grids.h, grids.w, np.uint64(K.SALT_A))
    wb = K.colour_weights(grids.cells, grids.off, grids.h, grids.w, np.uint64(K.SALT_B))
    fa, fb = K.colour_factors(K.SALT_A), K.colour_factors(K.SALT_B)

    num_tasks, cols = len(tasks), cfg.num_aug + 1
    aug_tid = np.zeros((num_tasks, cols), dtype=np.uint8)
    aug_col = np.zeros((num_tasks, cols, 10), dtype=np.uint8)
    aug_count = np.zeros(num_tasks, dtype=np.int64)
    trials = np.zeros(num_tasks, dtype=np.int64)
    search_args = (all_pairs.ptr, all_pairs.inp, all_pairs.out)

    starts = np.cumsum([0] + [len(s.tasks) for s in subsets])
    if cfg.views == "varc":  # upstream VARC's fixed test-time views: nothing to search
        aug_tid[:], aug_col[:] = varc_ttt_views([t.id for t in tasks], cfg.seed)
        aug_count[:] = trials[:] = cols
        group_order = np.arange(num_tasks)
    elif cfg.mode == "upstream_exact":
        if not 0 <= cfg.seed < 2**32:
            raise ArcpipeError(f"seed={cfg.seed}: upstream_exact mode needs 0 <= seed < 2**32 (numpy's legacy seed)")
        state = np.random.RandomState(cfg.seed).get_state()
        st = np.empty(625, dtype=np.int64)
        st[:624] = state[1]
        st[624] = state[2]
        orders = []
        for i in range(len(subsets)):
            order = starts[i] + K.mt_shuffled(st, starts[i + 1] - starts[i])
            K.search_exact(
                st, order, *search_args, wa, wb, fa, fb, cfg.num_aug, RETRIES_FACTOR * cfg.num_aug,
                aug_tid, aug_col, aug_count, trials,
            )  # fmt: skip
            orders.append(order)
        group_order = np.concatenate(orders)
    else:
        keys = np.array([K.stream_key(cfg.seed, t.id, 1) for t in tasks], dtype=np.uint64)
        colours = np.array([_colour_mask(t) for t in tasks], dtype=np.int64)
        search_fast = functools.partial(
            K.search_fast, step=threads, keys=keys, tp_ptr=all_pairs.ptr, tp_in=all_pairs.inp,
            tp_out=all_pairs.out, task_colours=colours, wa=wa, wb=wb, fa=fa, fb=fb, num_aug=cfg.num_aug,
            enumerate_below=ENUMERATE_BELOW, aug_tid=aug_tid, aug_col=aug_col, aug_count=aug_count, trials=trials,
        )  # fmt: skip
        with concurrent.futures.ThreadPoolExecutor(threads) as pool:
            K.in_threads(pool, [functools.partial(search_fast, first) for first in range(threads)])
        group_order = np.arange(num_tasks)

    test_tasks = group_order[is_test[group_order]]
    # without the test set's demonstrations, its tasks are numbered after the trained ones (test split only)
    train_tasks = group_order if cfg.test_demos_in_train else group_order[~is_test[group_order]]
    untrained = np.zeros(0, dtype=np.int64) if cfg.test_demos_in_train else test_tasks
    named = np.concatenate([train_tasks, untrained])
    train = _split_layout(train_tasks, train_ex, aug_count, cols)
    test = _split_layout(test_tasks, test_ex, aug_count, cols)

    translate_args = (grids.h, grids.w, aug_tid, aug_count)
    if cfg.mode == "upstream_exact":
        for split, translate in ((train, True), (test, False)):
            ex = split.examples
            K.offsets_exact(
                st, split.tasks, split.row_start, ex.ptr, ex.inp, ex.out, *translate_args, translate,
                split.row_r, split.row_c,
            )  # fmt: skip
    else:
        keys = np.array([K.stream_key(cfg.seed, t.id, 2) for t in tasks], dtype=np.uint64)
        ex = train.examples
        K.offsets_fast(
            keys, train.tasks, train.row_start, ex.ptr, ex.inp, ex.out, *translate_args, train.row_r, train.row_c
        )

    # ids: train puzzles are numbered 1..N in storage order, then untrained test tasks' views; test puzzles reuse the
    # id of the same name
    first_id = np.zeros(num_tasks, dtype=np.int64)
    first_id[named] = 1 + np.concatenate([[0], np.cumsum(aug_count[named])[:-1]])
    train.puzzle_identifiers = np.arange(1, 1 + aug_count[train_tasks].sum(), dtype=np.int32)
    test.puzzle_identifiers = np.concatenate(
        [np.arange(first_id[t], first_id[t] + aug_count[t]) for t in test_tasks] or [np.zeros(0)]
    ).astype(np.int32)
    identifiers_json = _identifiers_json(tasks, named, aug_tid, aug_col, aug_count)
    test_puzzles = {tasks[t].id: tasks[t].to_json() for t in test_tasks}
    short = int((aug_count < cols).sum())
    if short:
        log.info("%d of %d tasks have fewer than %d distinct views (few colours or symmetric)", short, num_tasks, cols)
    return Plan(
        tasks, grids, aug_tid, aug_col, aug_count, trials, train, test, identifiers_json,
        1 + int(aug_count.sum()), test_puzzles, cfg.num_aug, threads,
    )  # fmt: skip


def write_dataset(plan: Plan, out: Path) -> dict[str, dict[str, int]]:
    """Write identifiers.json, test_puzzles.json and both splits under `out`; returns per-split counts."""
    num_ids = plan.num_identifiers
    counts = {}
    for name, split in (("train", plan.train), ("test", plan.test)):
        folder = out / name
        folder.mkdir()
        _write_rows(plan, split, folder)
        _save(folder / "all__puzzle_identifiers.npy", split.puzzle_identifiers)
        _save(folder / "all__puzzle_indices.npy", split.puzzle_indices)
        _save(folder / "all__group_indices.npy", split.group_indices)
        puzzles = len(split.puzzle_identifiers)
        metadata = {
            "pad_id": 0,
            "ignore_label_id": 0,
            "blank_identifier_id": 0,
            "vocab_size": 12,
            "seq_len": K.CANVAS * K.CANVAS,
            "num_puzzle_identifiers": num_ids,
            "total_groups": len(split.tasks),
            "mean_puzzle_examples": split.num_rows / puzzles if puzzles else 0.0,
            "total_puzzles": puzzles,
            "sets": ["all"],
        }
        (folder / "dataset.json").write_text(json.dumps(metadata))
        counts[name] = {"groups": len(split.tasks), "puzzles": puzzles, "examples": split.num_rows}
    (out / "identifiers.json").write_bytes(plan.identifiers_json)
    (out / "test_puzzles.json").write_text(json.dumps(plan.test_puzzles))
    return counts


# --------------------------------------------------------------------------------------------------------------
# Helpers


def _flatten(
    tasks: list[Task], is_test: np.ndarray, test_demos_in_train: bool
) -> tuple[Grids, Examples, Examples, Examples]:
    """Grids of all tasks plus three example lists per task: its file's pairs (for hashing), train split, test split.

    A non-test task's train-split examples are all its pairs in its file's key order (ARC-AGI-1 files list
    `test` first); a test-set task contributes its train pairs to train (none without `test_demos_in_train`) and
    its test pairs to test. A task's extra pairs (RE-ARC's) follow its train-split examples; they take no part in
    choosing its views, which stay those of the task as its file states it.
    """
    chunks, shapes = [], []
    pair_grids: list[list[tuple[int, int]]] = []  # per task: (input id, output id) of train, test then extra pairs
    for task in tasks:
        ids = []
        for pair in (*task.train, *task.test, *task.extra):
            output = UNSOLVED_OUTPUT if pair.output is None else pair.output
            ids.append((len(shapes), len(shapes) + 1))
            for grid in (pair.input, output):
                chunks.append(grid.ravel())
                shapes.append(grid.shape)
        pair_grids.append(ids)
    sizes = np.array([h * w for h, w in shapes], dtype=np.int64)
    grids = Grids(
        cells=np.concatenate(chunks).astype(np.uint8),
        off=np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64),
        h=np.array([h for h, _ in shapes], dtype=np.int64),
        w=np.array([w for _, w in shapes], dtype=np.int64),
    )
    everything, train, test = [], [], []
    for task, ids, in_test in zip(tasks, pair_grids, is_test, strict=True):
        n_train, n_file = len(task.train), len(task.train) + len(task.test)
        train_ids, test_ids, extra_ids = ids[:n_train], ids[n_train:n_file], ids[n_file:]
        everything.append(ids[:n_file])
        if in_test:
            train.append(train_ids + extra_ids if test_demos_in_train else [])
            test.append(test_ids)
        else:
            train.append((test_ids + train_ids if task.test_first else train_ids + test_ids) + extra_ids)
            test.append([])
    return grids, _csr(everything), _csr(train), _csr(test)


def _csr(per_task: list[list[tuple[int, int]]]) -> Examples:
    flat = [pair for pairs in per_task for pair in pairs]
    return Examples(
        ptr=np.cumsum([0] + [len(p) for p in per_task]).astype(np.int64),
        inp=np.array([p[0] for p in flat], dtype=np.int64),
        out=np.array([p[1] for p in flat], dtype=np.int64),
    )


def _split_layout(tasks: np.ndarray, examples: Examples, aug_count: np.ndarray, cols: int) -> SplitPlan:
    per_group = aug_count[tasks] * np.diff(examples.ptr)[tasks]
    num_rows = int(per_group.sum())
    split = SplitPlan(
        tasks=tasks.astype(np.int64),
        examples=examples,
        row_start=np.concatenate([[0], np.cumsum(per_group)[:-1]]).astype(np.int64),
        row_in=np.empty(num_rows, dtype=np.int32),
        row_out=np.empty(num_rows, dtype=np.int32),
        row_aug=np.empty(num_rows, dtype=np.int32),
        row_r=np.zeros(num_rows, dtype=np.uint8),
        row_c=np.zeros(num_rows, dtype=np.uint8),
        puzzle_indices=np.empty(int(aug_count[tasks].sum()) + 1, dtype=np.int32),
        group_indices=np.empty(len(tasks) + 1, dtype=np.int32),
        puzzle_identifiers=np.zeros(0, dtype=np.int32),
    )
    K.layout_rows(
        split.tasks, examples.ptr, examples.inp, examples.out, aug_count, cols,
        split.row_in, split.row_out, split.row_aug, split.puzzle_indices, split.group_indices,
    )  # fmt: skip
    return split


def _pair_key(pair: Pair) -> bytes:
    # shapes are part of the key: a 2x3 and a 3x2 grid can have identical bytes
    assert pair.output is not None
    grids = (pair.input, pair.output)
    return b"".join(np.asarray(g.shape, dtype=np.int64).tobytes() + g.tobytes() for g in grids)


def _colour_mask(task: Task) -> int:
    mask = 0
    for pair in (*task.train, *task.test):
        for grid in (pair.input, pair.output):
            if grid is not None:
                for colour in np.unique(grid):
                    mask |= 1 << int(colour)
    return mask & ~1


def _identifiers_json(
    tasks: list[Task], order: np.ndarray, aug_tid: np.ndarray, aug_col: np.ndarray, aug_count: np.ndarray
) -> bytes:
    """`json.dumps` of upstream's name list ("<blank>", then per group the task id and `id|||t{tid}|||{digits}`
    per view), assembled from per-task byte templates instead of 876k Python strings."""
    parts = [b'["<blank>"']
    for t in order:
        task_id = tasks[t].id
        encoded = json.dumps(task_id).encode()
        parts.append(b", " + encoded)
        count = int(aug_count[t]) - 1
        if count == 0:
            continue
        # template row `, "<id>|||t0|||0000000000"`: the tid digit is 15 bytes from its end, the colours 11
        template = np.frombuffer(b", " + encoded[:-1] + b"|||t0|||0000000000" + b'"', dtype=np.uint8)
        rows = np.tile(template, (count, 1))
        tid_at = len(template) - 15
        rows[:, tid_at] = aug_tid[t, 1 : count + 1] + ord("0")
        rows[:, tid_at + 4 : tid_at + 14] = aug_col[t, 1 : count + 1] + ord("0")
        parts.append(rows.tobytes())
    parts.append(b"]")
    return b"".join(parts)


def _write_rows(plan: Plan, split: SplitPlan, folder: Path) -> None:
    """Render the split's rows window by window and append them to all__inputs.npy / all__labels.npy.

    Rendering of window k + 1 (`threads` threads, GIL released) overlaps the writes of window k (two more). The
    files are written with direct I/O where the filesystem allows (data/_rowfile.py).
    """
    n = split.num_rows
    tids = plan.aug_tid.reshape(-1)
    colours = plan.aug_col.reshape(-1, 10)
    g = plan.grids
    row_bytes = K.CANVAS * K.CANVAS
    header = _npy_header((n, row_bytes), np.uint8)
    files = [
        RowFile(folder / name, header, row_bytes=row_bytes, window_rows=WINDOW_ROWS)
        for name in ("all__inputs.npy", "all__labels.npy")
    ]
    try:
        with (
            concurrent.futures.ThreadPoolExecutor(2) as writers,
            concurrent.futures.ThreadPoolExecutor(plan.threads) as renderers,
        ):
            pending: list[concurrent.futures.Future] = []
            for k, start in enumerate(range(0, n, WINDOW_ROWS)):
                stop = min(start + WINDOW_ROWS, n)
                inputs, labels = (f.buffer(k) for f in files)
                calls = [
                    functools.partial(
                        K.render,
                        start + a,
                        start + b,
                        split.row_in,
                        split.row_out,
                        split.row_aug,
                        split.row_r,
                        split.row_c,
                        g.cells,
                        g.off,
                        g.h,
                        g.w,
                        tids,
                        colours,
                        inputs[a:b],
                        labels[a:b],
                    )  # fmt: skip
                    for a, b in K.ranges(stop - start, plan.threads)
                ]
                K.in_threads(renderers, calls)
                for future in pending:  # the other buffer's writes: it is rendered into next
                    future.result()
                pending = [writers.submit(f.write, k, stop - start) for f in files]
            for future in pending:
                future.result()
    finally:
        for f in files:
            f.close()


def _npy_header(shape: tuple[int, ...], dtype: type) -> bytes:
    """The header np.save writes for a C-order array of this shape and dtype."""
    out = io.BytesIO()
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": shape}
    np.lib.format.write_array_header_1_0(out, header)
    return out.getvalue()


def _save(path: Path, array: np.ndarray) -> None:
    with open(path, "wb") as f:
        np.save(f, array)


def _threads(workers: int) -> int:
    available = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return available if workers == 0 else workers


def _check_output_dir(path: Path) -> None:
    if path.exists() and not path.is_dir():
        raise ArcpipeError(f"{path}: exists and is not a directory; choose another --output-dir")
    if not path.exists():
        return
    entries = {p.name for p in path.iterdir()}
    if not entries:
        return
    if entries <= OUTPUT_NAMES and entries & {"build.json", "verify.json"}:
        return
    foreign = sorted(entries - OUTPUT_NAMES) or sorted(entries)
    raise ArcpipeError(
        f"{path}: output directory exists and holds files that are not an arcpipe dataset "
        f"({', '.join(foreign[:3])}{', ...' if len(foreign) > 3 else ''}); choose another --output-dir or empty it"
    )


def _remove_stale_builds(output_dir: Path) -> None:
    for stale in output_dir.parent.glob(f".{output_dir.name}.building-*"):
        pid = stale.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not _alive(int(pid)):
            log.info("removing %s, left by an interrupted build", stale)
            shutil.rmtree(stale, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _move_into_place(tmp: Path, output_dir: Path) -> None:
    if output_dir.exists() and any(output_dir.iterdir()):
        old = output_dir.parent / f".{output_dir.name}.old-{os.getpid()}"
        os.rename(output_dir, old)
        os.rename(tmp, output_dir)
        shutil.rmtree(old)
    else:
        if output_dir.exists():
            output_dir.rmdir()
        os.rename(tmp, output_dir)


def _manifest(
    cfg: DatasetConfig,
    subsets: list[Subset],
    re_arc: dict[str, Any] | None,
    plan: Plan,
    folder: Path,
    counts: dict[str, dict[str, int]],
    timings: dict[str, float],
    threads: int,
) -> dict[str, Any]:
    small = ["identifiers.json", "test_puzzles.json", "train/dataset.json", "test/dataset.json"]
    cols = plan.num_aug + 1
    return {
        "arcpipe_version": arcpipe.__version__,
        "numpy_version": np.__version__,
        "config": cfg.model_dump(mode="json"),
        "sources": [{"subset": s.name, "num_tasks": len(s.tasks), "solved": s.solved, **s.origin} for s in subsets]
        + ([re_arc] if re_arc else []),
        "test_set": cfg.test_set,
        "tasks": {s.name: list(s.tasks) for s in subsets},
        "prediction_only": not next(s.solved for s in subsets if s.name == cfg.test_set),
        "identifiers_sha256": hashlib.sha256((folder / "identifiers.json").read_bytes()).hexdigest(),
        "small_files_sha256": {name: hashlib.sha256((folder / name).read_bytes()).hexdigest() for name in small},
        "counts": counts,
        "augmentation": {
            "num_aug": plan.num_aug,
            "trials": int(plan.trials.sum()),
            "short_groups": {plan.tasks[t].id: int(plan.aug_count[t]) for t in np.flatnonzero(plan.aug_count < cols)},
        },
        "threads": threads,
        "timings": {k: round(v, 3) for k, v in timings.items()},
    }
