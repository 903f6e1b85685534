"""Cropping canvases, undoing augmentations and exact grid identity, against hand-built cases and the reference."""

from __future__ import annotations

import numpy as np
import pytest

from arcpipe.eval.grids import (
    DIHEDRAL_INVERSE,
    Grids,
    _number_distinct,
    crop,
    crop_shapes,
    distinct_in_groups,
    invert_crops,
    match_grids,
)
from arcpipe.eval.puzzles import parse_identifiers
from arcpipe.eval.reference import DIHEDRAL, reference_crop
from arcpipe.eval.synthetic import encode


def _canvas(rows: list[str]) -> np.ndarray:
    """Rows of characters: digits are colours, 'E' is EOS, '.' is PAD; the rest of the canvas is PAD."""
    canvas = np.zeros((30, 30), dtype=np.uint8)
    for r, row in enumerate(rows):
        for c, ch in enumerate(row):
            canvas[r, c] = {"E": 1, ".": 0}.get(ch, int(ch) + 2 if ch.isdigit() else 0)
    return canvas.reshape(900)


def test_crop_stops_at_the_eos_border():
    grid = crop(_canvas(["123E", "456E", "EEE."]))
    assert grid.tolist() == [[1, 2, 3], [4, 5, 6]]


def test_crop_column_bound_only_shrinks():
    # row 2 is short, so the wider rows 3 and 4 cannot widen the rectangle again: 4 x 2 beats 1 x 4
    canvas = _canvas(["1111E", "11E", "1111E", "1111E", "EEEE"])
    assert crop(canvas).tolist() == [[1, 1]] * 4


def test_crop_tie_in_area_keeps_the_shorter_rectangle():
    assert crop(_canvas(["12E", "3E", "EE"])).tolist() == [[1, 2]]  # 1 x 2 and 2 x 1 have the same area


def test_crop_ignores_colours_after_the_first_non_colour_token():
    assert crop(_canvas(["12.45", "12.45", "....."])).tolist() == [[1, 2], [1, 2]]


def test_crop_of_a_canvas_starting_with_pad_or_eos_is_empty():
    assert crop(_canvas(["E1"])).shape == (0, 0)
    assert crop(np.zeros(900, np.uint8)).shape == (0, 0)


def test_crop_of_a_full_canvas_is_30_by_30():
    full = np.full(900, 5, np.uint8)
    assert crop(full).shape == (30, 30) and (crop(full) == 3).all()


def test_crop_shapes_match_the_reference_on_random_canvases():
    rng = np.random.default_rng(0)
    # mostly colours with sparse non-colour tokens, so crops have all kinds of shapes
    tokens = np.where(rng.random((3000, 900)) < 0.02, rng.integers(0, 2, (3000, 900)), rng.integers(2, 12, (3000, 900)))
    tokens = tokens.astype(np.uint8)
    tokens[:100, 0] = 0  # some empty crops
    shapes = crop_shapes(tokens)
    for i in range(len(tokens)):
        assert tuple(shapes[i]) == reference_crop(tokens[i]).shape, i


@pytest.mark.parametrize("tid", range(8))
def test_inverting_an_augmented_prediction_restores_the_original(tid):
    rng = np.random.default_rng(tid)
    original = rng.integers(0, 10, (3, 5)).astype(np.uint8)
    colours = np.concatenate([[0], rng.permutation(np.arange(1, 10))])
    name = f"task|||t{tid}|||{''.join(map(str, colours))}"
    augmented = DIHEDRAL[tid](colours[original])
    _, tids, colour_inverse = parse_identifiers([name])
    tokens = encode(np.ascontiguousarray(augmented))[None]
    grids = invert_crops(tokens, np.array([0]), crop_shapes(tokens), tids, colour_inverse)
    assert grids[0].tolist() == original.tolist()


def test_dihedral_inverse_table_undoes_each_transform():
    grid = np.arange(6).reshape(2, 3)
    for tid in range(8):
        assert DIHEDRAL[DIHEDRAL_INVERSE[tid]](DIHEDRAL[tid](grid)).tolist() == grid.tolist()


def test_appendix_a_colour_string_example():
    # docs/reference/upstream-recursive.md A: abc|||t4|||0832597416 maps [[0,1,2],[3,4,5]] to [[3,8,0],[9,5,2]]
    tasks, tids, colour_inverse = parse_identifiers(["abc|||t4|||0832597416"])
    tokens = encode(np.array([[3, 8, 0], [9, 5, 2]], np.uint8))[None]
    grids = invert_crops(tokens, np.array([0]), crop_shapes(tokens), tids, colour_inverse)
    assert tasks == ["abc"] and grids[0].tolist() == [[0, 1, 2], [3, 4, 5]]


def test_inversion_matches_the_data_package_when_present():
    augment = pytest.importorskip("arcpipe.data.augment")
    rng = np.random.default_rng(1)
    for tid in range(8):
        colours = np.concatenate([[0], rng.permutation(np.arange(1, 10))])
        name = f"t|||t{tid}|||{''.join(map(str, colours))}"
        grid = rng.integers(0, 10, (4, 7)).astype(np.uint8)
        task, aug = augment.parse_identifier(name)
        _, tids, colour_inverse = parse_identifiers([name])
        tokens = encode(np.ascontiguousarray(grid))[None]
        ours = invert_crops(tokens, np.array([0]), crop_shapes(tokens), tids, colour_inverse)[0]
        assert task == "t" and ours.tolist() == np.asarray(aug.invert(grid)).tolist()


def test_equal_hashes_are_not_enough_to_merge_grids():
    grids = Grids.from_list([np.array([[1]]), np.array([[2]]), np.array([[1]]), np.zeros((0, 0))])
    group = np.zeros(4, np.int64)
    colliding = np.zeros(4, np.uint64)  # pretend every grid hashes the same
    candidate, first = _number_distinct(np.arange(4), group, colliding, grids.shapes, grids.offsets, grids.cells)
    assert candidate.tolist() == [0, 1, 0, 2] and first.tolist() == [0, 1, 3]


def test_distinct_grids_are_counted_per_group():
    grids = Grids.from_list([np.array([[1]]), np.array([[1]]), np.array([[1]]), np.array([[1, 1]])])
    candidate, first = distinct_in_groups(np.array([0, 1, 0, 0]), grids)
    assert candidate[0] == candidate[2] != candidate[1] and len(first) == 3


def test_match_grids_compares_shape_and_cells_within_the_bucket():
    targets = Grids.from_list([np.array([[1, 2]]), np.array([[1], [2]]), np.array([[1, 2]])])
    queries = Grids.from_list([np.array([[1], [2]]), np.array([[1, 2]]), np.array([[1, 2]]), np.array([[3]])])
    found = match_grids(queries, np.array([0, 0, 1, 0]), targets, np.array([0, 2]), np.array([2, 3]))
    assert found.tolist() == [1, 0, 2, -1]


def test_grids_take_and_concat_keep_cells():
    a = Grids.from_list([np.array([[1, 2], [3, 4]]), np.zeros((0, 0)), np.array([[5]])])
    b = Grids.concat([a, a.take(np.array([2, 0]))])
    assert [b[i].tolist() for i in range(len(b))] == [[[1, 2], [3, 4]], [], [[5]], [[5]], [[1, 2], [3, 4]]]
