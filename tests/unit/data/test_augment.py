"""Augmentations invert exactly, names round-trip, and the conventions match upstream's
(docs/reference/upstream-recursive.md 1.8)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from arcpipe.config import ArcpipeError
from arcpipe.data.augment import (
    ALL_DIHEDRALS,
    DIHEDRAL_INVERSE,
    IDENTITY,
    Augmentation,
    dihedral,
    grid_hash,
    parse_identifier,
)

grids = st.tuples(st.integers(1, 30), st.integers(1, 30)).flatmap(
    lambda shape: arrays(np.uint8, shape, elements=st.integers(0, 9))
)
colour_tables = st.permutations(list(range(1, 10))).map(lambda p: (0, *p))
augmentations = st.builds(Augmentation, st.sampled_from(ALL_DIHEDRALS), colour_tables)

EXAMPLE = np.array([[1, 2, 3], [4, 5, 6]], dtype=np.uint8)
# docs/reference/upstream-recursive.md 1.8: what each transform makes of [[1,2,3],[4,5,6]]
EXPECTED = {
    0: [[1, 2, 3], [4, 5, 6]],
    1: [[3, 6], [2, 5], [1, 4]],
    2: [[6, 5, 4], [3, 2, 1]],
    3: [[4, 1], [5, 2], [6, 3]],
    4: [[3, 2, 1], [6, 5, 4]],
    5: [[4, 5, 6], [1, 2, 3]],
    6: [[1, 4], [2, 5], [3, 6]],
    7: [[6, 3], [5, 2], [4, 1]],
}


@pytest.mark.parametrize("tid", ALL_DIHEDRALS)
def test_dihedral_matches_upstream_table(tid):
    assert dihedral(EXAMPLE, tid).tolist() == EXPECTED[tid]
    assert dihedral(dihedral(EXAMPLE, tid), DIHEDRAL_INVERSE[tid]).tolist() == EXAMPLE.tolist()


@settings(max_examples=150, deadline=None)
@given(grid=grids, augmentation=augmentations)
def test_every_augmentation_inverts_exactly(grid, augmentation):
    view = augmentation.apply(grid)
    assert view.dtype == np.uint8
    assert np.array_equal(augmentation.invert(view), grid)


@settings(max_examples=100, deadline=None)
@given(grid=grids, augmentation=augmentations)
def test_colour_zero_stays_zero_and_colours_map_before_the_transform(grid, augmentation):
    view = augmentation.apply(grid)
    table = np.asarray(augmentation.colours, dtype=np.uint8)
    assert np.array_equal(view, dihedral(table[grid], augmentation.tid))
    assert np.array_equal(view == 0, dihedral(grid == 0, augmentation.tid))


@settings(max_examples=100, deadline=None)
@given(augmentation=augmentations, task=st.from_regex(r"[0-9a-f]{8}|[A-Z][a-zA-Z]+[0-9]{1,2}", fullmatch=True))
def test_identifier_round_trip(augmentation, task):
    name = augmentation.name(task)
    assert parse_identifier(name) == (task, augmentation)
    if not augmentation.is_identity:
        assert name == f"{task}|||t{augmentation.tid}|||{''.join(map(str, augmentation.colours))}"


def test_identity_is_named_by_the_bare_task_id():
    assert IDENTITY.name("8be77c9e") == "8be77c9e"
    assert parse_identifier("8be77c9e") == ("8be77c9e", IDENTITY)


def test_appendix_a_colour_string_example():
    task, augmentation = parse_identifier("abc|||t4|||0832597416")
    grid = np.array([[0, 1, 2], [3, 4, 5]], dtype=np.uint8)
    assert task == "abc"
    assert augmentation.apply(grid).tolist() == [[3, 8, 0], [9, 5, 2]]
    assert augmentation.invert(augmentation.apply(grid)).tolist() == grid.tolist()


def test_appendix_a_grid_hash():
    grid = np.array([[0, 1, 2], [3, 4, 5]], dtype=np.uint8)
    assert grid_hash(grid) == "ab9cb75e0fc8851387cceea2ca1eb5eaebad6285055146bf55cd20bcbc33c3b4"


@pytest.mark.parametrize(
    "name", ["abc|||t8|||0123456789", "abc|||4|||0123456789", "abc|||t1|||1023456789", "abc|||t1|||012345678"]
)
def test_malformed_identifiers_are_rejected(name):
    with pytest.raises(ArcpipeError, match="is not 'task"):
        parse_identifier(name)


def test_a_geometrys_varc_colourings_are_distinct_where_the_first_draws_repeat():
    """Task 00000c6f at seed 0: its ninth view's first draw repeats an earlier colouring of Rotate(90), which would
    name two views alike; it is drawn again, and every other view keeps its first draw."""
    import hashlib

    from arcpipe.data.augment import VARC_TTT_VIEWS, varc_ttt_views

    tids, colours = varc_ttt_views(["00000c6f"], seed=0)
    stream = int.from_bytes(hashlib.sha256(b"00000c6f").digest()[:4], "little")
    first = [(0, *(1 + np.random.default_rng([0, stream, v]).permutation(9)).tolist()) for v in range(VARC_TTT_VIEWS)]
    views = [(int(tids[0, v]), tuple(colours[0, v].tolist())) for v in range(VARC_TTT_VIEWS)]
    assert first[9] in first[2:9]  # the repeat this task was picked for
    assert len(set(views)) == VARC_TTT_VIEWS  # every view distinct, the original included
    redrawn = [v for v in range(VARC_TTT_VIEWS) if v % 10 != 1 and v and views[v][1] != first[v]]
    assert redrawn == [9]
