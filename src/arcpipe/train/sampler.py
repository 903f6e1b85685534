"""Training batches with upstream's sampling semantics and randomness that depends only on (seed, position).

Upstream (docs/reference/upstream-recursive.md 2.2): a pass of the loader covers `eval_interval` epochs; each epoch
visits every group once in a shuffled order; a visit picks one puzzle of the group uniformly and takes its examples in
random order, packed into global batches of exactly `global_batch_size` rows; a puzzle that does not fit is cut at the
batch end (the rest is dropped) and the last partial batch of the pass is dropped.

Deliberate departure, documented in docs/architecture.md ("Training"): upstream draws from per-worker generators that
differ per rank. Here every random choice is a counter-based hash of (seed, pass, epoch, visit, example) or (seed,
step, global row), so the global batch, and so the trained weights, do not depend on the number of processes or on
gradient accumulation. Rank r, micro-batch m takes rows [(r * accum + m) * micro, ... + micro) of the global batch.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numba
import numpy as np

if TYPE_CHECKING:
    from arcpipe.data.dataset import Split

IGNORE_LABEL_ID = -100

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


@dataclass(frozen=True)
class PassPlan:
    """Which puzzle each visit of one pass takes, and how many of its examples land in which batch."""

    puzzles: np.ndarray  # (V,) int64 puzzle index per group visit, in visit order
    taken: np.ndarray  # (V,) int64 examples taken from the visit (0 when it fell after the last full batch)
    row_start: np.ndarray  # (V,) int64 first global row (across the pass) the visit fills
    num_batches: int
    examples: np.ndarray | None = None  # (num_batches * G,) int64 the example of every row: plan_examples_pass only
    # (num_batches * G, 3) float64 each row's canvas_draws, when the sampler draws them itself (`sampler: upstream`,
    # train/upstream_order.py; until an epoch is drawn its rows hold -1 and these 0)
    draws: np.ndarray | None = None


def plan_pass(split: Split, seed: int, pass_index: int, epochs: int, global_batch_size: int) -> PassPlan:
    """Plan one pass of `epochs` epochs: group order, puzzle choice and the packing into full batches."""
    num_groups = len(split.group_indices) - 1
    orders = [_permutation(num_groups, seed, pass_index, epoch) for epoch in range(epochs)]
    groups = np.concatenate(orders)  # (V,)
    u = _uniform(_hash(np.uint64(seed), np.uint64(pass_index), np.uint64(1), np.arange(len(groups), dtype=np.uint64)))
    first = split.group_indices[groups].astype(np.int64)
    size = (split.group_indices[groups + 1] - split.group_indices[groups]).astype(np.int64)
    puzzles = first + np.minimum((u * size).astype(np.int64), size - 1)
    counts = (split.puzzle_indices[puzzles + 1] - split.puzzle_indices[puzzles]).astype(np.int64)
    taken, row_start, num_batches = _pack(counts, global_batch_size)
    return PassPlan(puzzles=puzzles, taken=taken, row_start=row_start, num_batches=num_batches)


def plan_examples_pass(split: Split, seed: int, pass_index: int, epochs: int, global_batch_size: int) -> PassPlan:
    """Upstream VARC's offline loader instead of the puzzle groups (run setting `sampler: examples`): every example
    of the split once per epoch, in a random order of its own per epoch, in full batches of `global_batch_size`. An
    epoch's short last batch is dropped (upstream's DataLoader keeps it: drop_last=False); the order is a
    counter-based hash of (seed, pass, epoch, example), so it does not depend on the number of processes."""
    n = int(split.puzzle_indices[-1])
    per_epoch = n // global_batch_size
    orders = []
    for epoch in range(epochs):
        keys = _hash(
            np.uint64(seed), np.uint64(pass_index), np.uint64(0xE7A40000 + epoch), np.arange(n, dtype=np.uint64)
        )
        orders.append(np.argsort(keys, kind="stable")[: per_epoch * global_batch_size])
    examples = np.concatenate(orders).astype(np.int64) if orders else np.zeros(0, np.int64)
    puzzles = np.searchsorted(split.puzzle_indices, examples, side="right").astype(np.int64) - 1
    return PassPlan(
        puzzles=puzzles,
        taken=np.ones_like(examples),
        row_start=np.arange(len(examples), dtype=np.int64),
        num_batches=per_epoch * epochs,
        examples=examples,
    )


def batch_rows(
    split: Split, plan: PassPlan, batch: int, global_batch_size: int, seed: int, pass_index: int
) -> tuple[np.ndarray, np.ndarray]:
    """(example index, puzzle index) of every row of global batch `batch` of the pass: (G,), (G,)."""
    lo, hi = batch * global_batch_size, (batch + 1) * global_batch_size
    if plan.examples is not None:  # plan_examples_pass: one example per row
        return plan.examples[lo:hi].copy(), plan.puzzles[lo:hi].copy()
    # row_start is non-decreasing: the visits overlapping [lo, hi) are a contiguous range
    first = max(int(np.searchsorted(plan.row_start, lo, side="right")) - 1, 0)
    last = int(np.searchsorted(plan.row_start, hi, side="left"))
    visits = [v for v in range(first, last) if plan.taken[v] > 0 and plan.row_start[v] + plan.taken[v] > lo]
    examples = np.empty(global_batch_size, dtype=np.int64)
    puzzles = np.empty(global_batch_size, dtype=np.int64)
    for visit in visits:
        puzzle = plan.puzzles[visit]
        start, end = split.puzzle_indices[puzzle], split.puzzle_indices[puzzle + 1]
        n = int(end - start)
        # a random order of the puzzle's examples; the first `taken` of them are used
        keys = _hash(np.uint64(seed), np.uint64(pass_index), np.uint64(2 + visit), np.arange(n, dtype=np.uint64))
        order = np.argsort(keys, kind="stable")[: plan.taken[visit]]
        rows = plan.row_start[visit] + np.arange(len(order)) - lo
        examples[rows] = start + order
        puzzles[rows] = puzzle
    return examples, puzzles


def collate(split: Split, examples: np.ndarray, puzzles: np.ndarray) -> dict[str, np.ndarray]:
    """Rows as the model takes them: int32 arrays, PAD labels (0) set to IGNORE_LABEL_ID."""
    order = np.argsort(examples, kind="stable")  # read the memory map in file order
    inputs = np.empty((len(examples), split.inputs.shape[1]), dtype=np.int32)
    labels = np.empty_like(inputs)
    inputs[order] = split.inputs[examples[order]]
    labels[order] = split.labels[examples[order]]
    labels[labels == 0] = IGNORE_LABEL_ID
    return {
        "inputs": inputs,
        "labels": labels,
        "puzzle_identifiers": split.puzzle_identifiers[puzzles].astype(np.int32),
    }


def halt_min_steps(seed: int, step: int, rows: np.ndarray, prob: float, max_steps: int) -> np.ndarray:
    """Per-row exploration of ACT halting: with probability `prob` a row may not halt before U{2..max_steps}."""
    base = _hash(np.uint64(seed), np.uint64(step), np.uint64(0xE), rows.astype(np.uint64))
    explore = _uniform(base) < prob
    span = max(max_steps - 1, 1)
    minimum = 2 + (_uniform(_mix(base ^ _GOLDEN)) * span).astype(np.int64)
    return np.where(explore, np.minimum(minimum, max_steps), 0).astype(np.int32)


def canvas_draws(seed: int, stream: int, positions: np.ndarray) -> np.ndarray:
    """(n, 3) float64 uniforms in [0, 1) placing each row on a canvas model's canvas (data/canvas.draw_placement:
    scale, row offset, column offset). Training draws with stream = the optimizer step and positions = the rows'
    places in the global batch; evaluation with stream 0 and the rows' places in the evaluated list, so the draws
    never depend on the number of processes."""
    base = _hash(np.uint64(seed), np.uint64(stream), np.uint64(0xCA7A5), positions.astype(np.uint64))
    return np.stack([_uniform(_mix(base ^ np.uint64(k + 1))) for k in range(3)], axis=1)


# ------------------------------------------------------------------------------------------------------------------


def _permutation(n: int, seed: int, pass_index: int, epoch: int) -> np.ndarray:
    keys = _hash(np.uint64(seed), np.uint64(pass_index), np.uint64(0x5EED0000 + epoch), np.arange(n, dtype=np.uint64))
    return np.argsort(keys, kind="stable").astype(np.int64)


def _hash(a: np.uint64, b: np.uint64, c: np.uint64, x: np.ndarray) -> np.ndarray:
    """A splitmix64-style hash of four counters: independent uniform 64-bit values for any inputs."""
    with np.errstate(over="ignore"):
        h = _mix(a * _GOLDEN + np.uint64(0x632BE59BD9B4E019))
        h = _mix(h ^ (b + _GOLDEN))
        h = _mix(h ^ (c + _GOLDEN * np.uint64(3)))
        return _mix(h ^ (x.astype(np.uint64) + _GOLDEN * np.uint64(5)))


def _mix(z):
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def _uniform(h: np.ndarray) -> np.ndarray:
    return (h >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


@numba.njit(cache=True)
def _pack(counts: np.ndarray, batch_size: int) -> tuple[np.ndarray, np.ndarray, int]:
    # sequential by nature: a visit that overflows the batch is cut, and the next visit starts a new batch
    taken = np.zeros_like(counts)
    row_start = np.zeros_like(counts)
    row = 0
    for i in range(len(counts)):
        space = batch_size - row % batch_size
        take = min(counts[i], space)
        taken[i] = take
        row_start[i] = row
        row += take
    num_batches = row // batch_size
    limit = num_batches * batch_size
    for i in range(len(counts)):  # the last partial batch is dropped
        if row_start[i] >= limit:
            taken[i] = 0
    return taken, row_start, num_batches


def plan_upstream_pass(
    split: Split, seed: int, pass_index: int, epochs: int, global_batch_size: int, world_size: int = 1
) -> PassPlan:
    """`sampler: upstream` (train/upstream_order.py): the pass's shape, its rows not drawn yet: upstream's draws
    depend on generator states, so the trainer draws each epoch at its first batch (UpstreamOrder.fill)."""
    rows = epochs * upstream_full_batches(int(split.puzzle_indices[-1]), global_batch_size, world_size)
    rows *= global_batch_size
    return PassPlan(
        puzzles=np.full(rows, -1, dtype=np.int64),
        taken=np.ones(rows, dtype=np.int64),
        row_start=np.arange(rows, dtype=np.int64),
        num_batches=rows // global_batch_size,
        examples=np.full(rows, -1, dtype=np.int64),
        draws=np.zeros((rows, 3), dtype=np.float64),
    )


def upstream_full_batches(n: int, global_batch_size: int, world_size: int) -> int:
    """Full global batches in an epoch of `n` examples under upstream VARC's loader with `world_size` processes
    (more than one: DistributedSampler's padding to a multiple of the processes, each taking its share)."""
    per_rank_examples = -(-n // world_size)
    return per_rank_examples // (global_batch_size // world_size)


def plan_for(sampler: str | None, world_size: int = 1):
    """The pass planner of a run's `sampler` setting: None (the puzzle groups), "examples" or "upstream" (whose
    passes depend on the run's number of processes, `world_size`)."""
    if sampler == "upstream":
        return functools.partial(plan_upstream_pass, world_size=world_size)
    return plan_examples_pass if sampler == "examples" else plan_pass
