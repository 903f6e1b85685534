"""Training batches: upstream's sampling semantics, with randomness that depends only on (seed, position)."""

from types import SimpleNamespace

import numpy as np
import pytest

from arcpipe.train.sampler import IGNORE_LABEL_ID, batch_rows, collate, halt_min_steps, plan_pass


def _split(examples_per_puzzle, puzzles_per_group):
    """A tiny split: example row e of puzzle p holds p in column 0 and e in column 1 (as tokens)."""
    counts = np.asarray(examples_per_puzzle)
    puzzle_indices = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    group_indices = np.concatenate([[0], np.cumsum(puzzles_per_group)]).astype(np.int32)
    n = int(puzzle_indices[-1])
    inputs = np.zeros((n, 8), dtype=np.uint8)
    labels = np.zeros((n, 8), dtype=np.uint8)
    inputs[:, 0] = np.repeat(np.arange(len(counts)), counts)
    inputs[:, 1] = np.arange(n) % 256
    labels[:, :3] = 5
    return SimpleNamespace(
        inputs=inputs,
        labels=labels,
        puzzle_indices=puzzle_indices,
        group_indices=group_indices,
        puzzle_identifiers=np.arange(1, len(counts) + 1, dtype=np.int32),
    )


SPLIT = _split([3, 4, 2, 5, 3, 3, 6, 1, 2, 4], [3, 2, 4, 1])  # 10 puzzles in 4 groups


def _all_batches(seed=0, pass_index=0, epochs=3, batch=4):
    plan = plan_pass(SPLIT, seed, pass_index, epochs, batch)
    return plan, [batch_rows(SPLIT, plan, b, batch, seed, pass_index) for b in range(plan.num_batches)]


def test_each_epoch_visits_every_group_once_with_one_puzzle_of_it():
    plan = plan_pass(SPLIT, seed=3, pass_index=0, epochs=5, global_batch_size=4)
    groups = np.searchsorted(SPLIT.group_indices, plan.puzzles, side="right") - 1
    for epoch in range(5):
        assert sorted(groups[epoch * 4 : (epoch + 1) * 4]) == [0, 1, 2, 3]


def test_batches_are_full_visits_are_cut_at_batch_ends_and_the_partial_tail_is_dropped():
    plan, batches = _all_batches(epochs=4, batch=4)
    assert plan.num_batches == sum(plan.taken) // 4
    seen = []
    for examples, puzzles in batches:
        assert len(examples) == 4
        for e, p in zip(examples, puzzles, strict=True):
            assert SPLIT.puzzle_indices[p] <= e < SPLIT.puzzle_indices[p + 1]
        seen.extend(examples.tolist())
    # a visit never continues into the next batch: each visit's examples are distinct and in one batch
    for v in np.nonzero(plan.taken)[0]:
        assert plan.row_start[v] // 4 == (plan.row_start[v] + plan.taken[v] - 1) // 4
    assert all(t <= c for t, c in zip(plan.taken, np.diff(SPLIT.puzzle_indices)[plan.puzzles], strict=True))


def test_same_seed_and_position_give_the_same_batches_and_passes_differ():
    _, a = _all_batches(seed=7, pass_index=2)
    _, b = _all_batches(seed=7, pass_index=2)
    _, c = _all_batches(seed=7, pass_index=3)
    assert all(np.array_equal(x[0], y[0]) for x, y in zip(a, b, strict=True))
    assert not all(np.array_equal(x[0], y[0]) for x, y in zip(a, c, strict=False))


def test_examples_within_a_visit_come_in_random_order():
    plan = plan_pass(SPLIT, 0, 0, 200, 6)
    orders = set()
    for b in range(plan.num_batches):
        examples, puzzles = batch_rows(SPLIT, plan, b, 6, 0, 0)
        for p in np.unique(puzzles):
            if np.diff(SPLIT.puzzle_indices)[p] == 3 and (puzzles == p).sum() == 3:
                orders.add(tuple(examples[puzzles == p] - SPLIT.puzzle_indices[p]))
    assert len(orders) == 6  # all 3! orders of a 3-example puzzle occur


def test_collate_casts_and_masks_pad_labels():
    examples, puzzles = np.array([4, 0]), np.array([1, 0])
    batch = collate(SPLIT, examples, puzzles)
    assert batch["inputs"].dtype == np.int32 and batch["inputs"][0, 1] == 4
    assert (batch["labels"][:, :3] == 5).all() and (batch["labels"][:, 3:] == IGNORE_LABEL_ID).all()
    assert batch["puzzle_identifiers"].tolist() == [2, 1]


@pytest.mark.parametrize("max_steps", [2, 16])
def test_exploration_minimum_is_zero_or_between_two_and_max_with_its_probability(max_steps):
    rows = np.arange(200_000)
    m = halt_min_steps(seed=1, step=5, rows=rows, prob=0.1, max_steps=max_steps)
    explored = m > 0
    assert abs(explored.mean() - 0.1) < 0.005
    assert m[explored].min() == 2 and m[explored].max() == max_steps
    assert np.array_equal(m[100:200], halt_min_steps(1, 5, rows[100:200], 0.1, max_steps))
    assert not np.array_equal(m, halt_min_steps(1, 6, rows, 0.1, max_steps))
