"""The builder's numba kernels agree with numpy: upstream's RNG stream, dihedral views, canvases, view search."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from arcpipe.data import _kernels as K
from arcpipe.data.augment import ALL_DIHEDRALS, Augmentation, dihedral, to_canvas
from arcpipe.data.build import ENUMERATE_BELOW

grids = st.tuples(st.integers(1, 30), st.integers(1, 30)).flatmap(
    lambda shape: arrays(np.uint8, shape, elements=st.integers(0, 9))
)


def _state(seed: int) -> tuple[np.random.RandomState, np.ndarray]:
    rs = np.random.RandomState(seed)
    _, key, pos, *_ = rs.get_state()
    st_ = np.empty(625, dtype=np.int64)
    st_[:624] = key
    st_[624] = pos
    return rs, st_


@pytest.mark.parametrize("seed", [0, 42, 2**32 - 1])
def test_bounded_draws_replay_legacy_randint(seed):
    rs, stream = _state(seed)
    highest = np.random.default_rng(seed).integers(0, 31, size=3000)  # includes 0: randint(0, 1) draws nothing
    assert K.mt_draws(stream, highest).tolist() == [rs.randint(0, h + 1) for h in highest]
    assert K.mt_draws(stream, np.array([7])).tolist() == [rs.randint(0, 8)]  # the streams are still in step


def test_shuffle_and_permutation_replay_legacy_calls():
    rs, stream = _state(42)
    items = list(range(400))
    rs.shuffle(items)
    assert K.mt_shuffled(stream, 400).tolist() == items
    permutation = rs.permutation(np.arange(1, 10, dtype=np.uint8))
    assert (np.arange(1, 10)[K.mt_shuffled(stream, 9)]).tolist() == permutation.tolist()


@settings(max_examples=60, deadline=None)
@given(grid=grids)
def test_strided_views_equal_numpy_dihedral(grid):
    identity = np.arange(10, dtype=np.uint8)
    for tid in ALL_DIHEDRALS:
        view = K.view_of(grid.ravel(), 0, grid.shape[0], grid.shape[1], tid, identity)
        assert np.array_equal(view, dihedral(grid, tid))


@pytest.mark.parametrize(("h", "w", "row", "col"), [(2, 3, 0, 0), (2, 3, 5, 7), (30, 4, 0, 26), (4, 30, 26, 0)])
def test_translation_keeps_content_and_eos_placement(h, w, row, col):
    grid = (np.arange(h * w).reshape(h, w) % 10).astype(np.uint8)
    canvas = to_canvas(grid, row, col).reshape(30, 30)
    assert np.array_equal(canvas[row : row + h, col : col + w], grid + 2)
    below, right = row + h, col + w
    if below < 30:
        assert (canvas[below, col:right] == 1).all()
    if right < 30:
        assert (canvas[row:below, right] == 1).all()
    if below < 30 and right < 30:
        assert canvas[below, right] == 0  # the corner stays PAD
    content = np.zeros((30, 30), dtype=bool)
    content[row:below, col:right] = True
    eos = canvas == 1
    assert eos.sum() == (w if below < 30 else 0) + (h if right < 30 else 0)
    assert (canvas[~content & ~eos] == 0).all()


def test_upstream_small_example_canvas():
    canvas = to_canvas(np.zeros((2, 3), dtype=np.uint8)).reshape(30, 30)
    assert canvas[:3, :6].tolist() == [[2, 2, 2, 1, 0, 0], [2, 2, 2, 1, 0, 0], [1, 1, 1, 0, 0, 0]]


@settings(max_examples=60, deadline=None)
@given(
    inp=grids,
    out=grids,
    tid=st.sampled_from(ALL_DIHEDRALS),
    perm=st.permutations(list(range(1, 10))),
    data=st.data(),
)
def test_render_equals_augment_then_canvas(inp, out, tid, perm, data):
    augmentation = Augmentation(tid, (0, *perm))
    a, b = augmentation.apply(inp), augmentation.apply(out)
    row = data.draw(st.integers(0, 30 - max(a.shape[0], b.shape[0])))
    col = data.draw(st.integers(0, 30 - max(a.shape[1], b.shape[1])))
    cells = np.concatenate([inp.ravel(), out.ravel()])
    inputs, labels = np.empty((1, 900), np.uint8), np.empty((1, 900), np.uint8)
    K.render(
        0, 1, np.array([0], np.int32), np.array([1], np.int32), np.array([0], np.int32),
        np.array([row], np.uint8), np.array([col], np.uint8), cells, np.array([0, inp.size]),
        np.array([inp.shape[0], out.shape[0]]), np.array([inp.shape[1], out.shape[1]]),
        np.array([tid], np.uint8), np.array([augmentation.colours], np.uint8), inputs, labels,
    )  # fmt: skip
    assert np.array_equal(inputs[0], to_canvas(a, row, col))
    assert np.array_equal(labels[0], to_canvas(b, row, col))


def test_fast_search_finds_every_view_of_a_one_colour_task():
    # one colour on a grid without symmetry: 8 transforms x 9 colours = 72 distinct views
    grid = np.array([[1, 0, 0], [1, 1, 0]], dtype=np.uint8)
    cells = np.concatenate([grid.ravel(), grid.ravel()])
    off, h, w = np.array([0, 6]), np.array([2, 2]), np.array([3, 3])
    wa = K.colour_weights(cells, off, h, w, np.uint64(K.SALT_A))
    wb = K.colour_weights(cells, off, h, w, np.uint64(K.SALT_B))
    fa, fb = K.colour_factors(K.SALT_A), K.colour_factors(K.SALT_B)
    num_aug = 100
    tid = np.zeros((1, num_aug + 1), np.uint8)
    col = np.zeros((1, num_aug + 1, 10), np.uint8)
    count, trials = np.zeros(1, np.int64), np.zeros(1, np.int64)
    K.search_fast(
        0, 1, np.array([np.uint64(7)]), np.array([0, 1]), np.array([0]), np.array([1]), np.array([0b10]),
        wa, wb, fa, fb, num_aug, ENUMERATE_BELOW, tid, col, count, trials,
    )  # fmt: skip
    assert count[0] == 72
    views = [Augmentation(int(t), tuple(c.tolist())).apply(grid) for t, c in zip(tid[0, :72], col[0, :72], strict=True)]
    assert len({bytes(v.shape) + v.tobytes() for v in views}) == 72
