"""VARC's canvas (data/canvas.py) against upstream VARC's own loader and decoder, and its round trip and fit.

The golden (tests/data/canvas_golden.npz) comes from upstream's `ARCDataset.process_per_example` and
`generate_predictions` (lillian039/VARC 537b01e), run by `tests/tools/record_canvas_goldens.py`: canvases, masks and
targets for given scales and offsets, the range of every draw, and upstream's decoded grids of targets and of
perturbed canvases. Here the grids sit at varied places in arcpipe's 30x30 map, as translated examples do.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from arcpipe.data.augment import to_canvas
from arcpipe.data.canvas import (
    BACKGROUND,
    BORDER,
    Placement,
    decode,
    draw_placement,
    encode_inputs,
    encode_targets,
    grid_boxes,
)
from arcpipe.eval.grids import crop_shapes

GOLDEN = Path(__file__).parents[2] / "data" / "canvas_golden.npz"
BELOW_ONE = float(np.nextafter(np.float32(1), np.float32(0)))  # the largest float32 u < 1


@pytest.fixture(scope="module")
def golden() -> dict[str, np.ndarray]:
    with np.load(GOLDEN) as data:
        return {k: data[k] for k in data.files}


def _at_place(grid: np.ndarray, i: int, ignore: bool = False) -> np.ndarray:
    """The grid as arcpipe's (900,) tokens, translated in the map by an amount that varies with i; PAD as -100 when
    `ignore` (labels)."""
    h, w = grid.shape
    row, col = (7 * i) % (31 - h), (11 * i + 3) % (31 - w)
    tokens = to_canvas(grid.astype(np.uint8), row, col).astype(np.int64)
    if ignore:
        tokens[tokens == 0] = -100
    return tokens


def _batch(golden: dict[str, np.ndarray], canvas: int) -> tuple[np.ndarray, torch.Tensor, torch.Tensor]:
    rows = np.flatnonzero(golden["enc_canvas"] == canvas)
    inputs, labels = [], []
    for i in rows:
        (h, w), (oh, ow) = golden["enc_in_hw"][i], golden["enc_out_hw"][i]
        inputs.append(_at_place(golden["enc_in_grid"][i, :h, :w], i))
        labels.append(_at_place(golden["enc_out_grid"][i, :oh, :ow], i + 5, ignore=i % 2 == 1))
    return rows, torch.tensor(np.stack(inputs)), torch.tensor(np.stack(labels))


def _placement(golden: dict[str, np.ndarray], rows: np.ndarray, prefix: str) -> Placement:
    def column(name: str) -> torch.Tensor:
        return torch.tensor(golden[f"{prefix}_{name}"][rows].astype(np.int64))

    return Placement(column("scale"), column("y"), column("x"))


@pytest.mark.parametrize("canvas", [64, 32])
def test_canvases_match_upstreams_loader(golden: dict[str, np.ndarray], canvas: int) -> None:
    rows, inputs, labels = _batch(golden, canvas)
    placement = _placement(golden, rows, "enc")
    pixels, mask = encode_inputs(inputs, placement, canvas)
    targets = encode_targets(labels, placement, canvas)
    assert pixels.dtype == targets.dtype == torch.long and mask.dtype == torch.bool
    np.testing.assert_array_equal(pixels.numpy(), golden["enc_inputs"][rows, :canvas, :canvas])
    np.testing.assert_array_equal(mask.numpy(), golden["enc_mask"][rows, :canvas, :canvas].astype(bool))
    np.testing.assert_array_equal(targets.numpy(), golden["enc_targets"][rows, :canvas, :canvas])


def test_draws_span_upstreams_ranges(golden: dict[str, np.ndarray]) -> None:
    """For each of upstream's draws (scale, then x and y given that scale), u = 0 gives the bottom of upstream's
    range, u just below 1 its top, and u in the middle of the bin of upstream's choice that choice."""
    for i in range(len(golden["enc_canvas"])):
        ranges = {k: golden[f"enc_{k}_range"][i].astype(int) for k in ("scale", "x", "y")}
        chosen = {k: int(golden[f"enc_{k}"][i]) for k in ("scale", "x", "y")}
        middle = {k: (chosen[k] - lo + 0.5) / (hi - lo + 1) for k, (lo, hi) in ranges.items()}
        s = chosen["scale"]
        assert _draw(golden, i, 0.0, 0.0, 0.0)[0] == ranges["scale"][0], i
        assert _draw(golden, i, BELOW_ONE, 0.0, 0.0)[0] == ranges["scale"][1], i
        assert _draw(golden, i, middle["scale"], 0.0, 0.0) == (s, ranges["x"][0], ranges["y"][0]), i
        assert _draw(golden, i, middle["scale"], BELOW_ONE, BELOW_ONE) == (s, ranges["x"][1], ranges["y"][1]), i
        assert _draw(golden, i, middle["scale"], middle["x"], middle["y"]) == (s, chosen["x"], chosen["y"]), i


def _draw(golden: dict[str, np.ndarray], i: int, u_scale: float, u_x: float, u_y: float) -> tuple[int, int, int]:
    # draw_placement for golden case i, as upstream's (scale, x, y)
    (h, w), (oh, ow) = ([torch.tensor([int(v)]) for v in golden[k][i]] for k in ("enc_in_hw", "enc_out_hw"))
    where = draw_placement(
        (h, w),
        (oh, ow),
        torch.tensor([[u_scale, u_x, u_y]], dtype=torch.float32),
        int(golden["enc_canvas"][i]),
        scale=bool(golden["enc_scaled"][i]),
        translate=bool(golden["enc_translated"][i]),
        fixed_scale=int(golden["enc_fixed_scale"][i]),
    )
    return int(where.scale), int(where.col0), int(where.row0)


@pytest.mark.parametrize("canvas", [64, 32])
def test_decoding_matches_upstreams_and_the_evaluator_reads_it(golden: dict[str, np.ndarray], canvas: int) -> None:
    """Upstream's grid at the map's top-left where the map can hold it, a 10 or 11 inside as tokens 12 and 13 (a
    candidate of its own, never right); else a map the evaluator crops to the empty grid: an empty crop, a grid
    over 30."""
    rows = np.flatnonzero(golden["dec_canvas"] == canvas)
    preds = torch.tensor(golden["dec_preds"][rows, :canvas, :canvas].astype(np.int64))
    tokens = decode(preds, _placement(golden, rows, "dec"))
    assert tokens.shape == (len(rows), 900) and tokens.dtype == torch.long
    expected, shapes, num_valid, num_pixel_ids = [], [], 0, 0
    for i in rows:
        h, w = golden["dec_hw"][i]
        grid = golden["dec_grid"][i, :h, :w]
        valid = 1 <= h <= 30 and 1 <= w <= 30
        num_valid += valid
        num_pixel_ids += valid and not bool((grid < BACKGROUND).all())
        expected.append(to_canvas(grid.astype(np.uint8)) if valid else np.zeros(900, np.uint8))
        shapes.append((h, w) if valid else (0, 0))
    for k, i in enumerate(rows):
        np.testing.assert_array_equal(tokens[k].numpy(), expected[k], err_msg=f"{golden['dec_kind'][i]} (row {i})")
    np.testing.assert_array_equal(crop_shapes(tokens.numpy().astype(np.uint8)), np.array(shapes))
    assert 0 < num_valid < len(rows) and num_pixel_ids > 0  # the golden holds every kind


def test_golden_covers_the_edge_cases(golden: dict[str, np.ndarray]) -> None:
    hw, grid = golden["dec_hw"], golden["dec_grid"]
    holds = [set(np.unique(grid[i, : hw[i, 0], : hw[i, 1]]).tolist()) for i in range(len(hw))]
    assert (hw == 0).all(axis=1).any()  # an empty crop
    assert any(max(hw[i]) > 30 and max(holds[i]) < BACKGROUND for i in range(len(hw)))  # colours only, over 30
    assert any(BACKGROUND in h for h in holds) and any(BORDER in h for h in holds)
    assert {"ties", "crop past a multiple of s", "a 10 inside", "no right border", "no bottom border"} <= set(
        golden["dec_kind"].tolist()
    )
    assert set(golden["enc_canvas"].tolist()) == {32, 64} and golden["enc_scale"].max() == 62


def _expected_canvas(grid: np.ndarray, s: int, row0: int, col0: int, canvas: int, border: bool) -> np.ndarray:
    # upstream-varc.md 2.3, written out independently: 10 around, the grid's s x s blocks, the border if asked
    out = np.full((canvas, canvas), BACKGROUND, dtype=np.int64)
    h, w = grid.shape
    out[row0 : row0 + s * h, col0 : col0 + s * w] = np.kron(grid, np.ones((s, s), dtype=np.int64))
    if border:
        out[row0 : row0 + s * h + 1, col0 + s * w] = BORDER
        out[row0 + s * h, col0 : col0 + s * w + 1] = BORDER
    return out


@st.composite
def examples(draw: st.DrawFn) -> tuple[int, list[np.ndarray], list[np.ndarray], torch.Tensor]:
    """A canvas side and a batch of (input grid, output grid) with uniform draws u, the last ones near 0 and 1."""
    canvas = draw(st.sampled_from([64, 32]))
    num = draw(st.integers(1, 4))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    shape = st.tuples(st.integers(1, 30), st.integers(1, 30))
    ins = [rng.integers(0, 10, size=draw(shape)) for _ in range(num)]
    outs = [rng.integers(0, 10, size=draw(shape)) for _ in range(num)]
    unit = st.one_of(st.floats(0, 1, exclude_max=True, width=32), st.sampled_from([0.0, BELOW_ONE]))
    u = torch.tensor([[draw(unit) for _ in range(3)] for _ in range(num)], dtype=torch.float32)
    return canvas, ins, outs, u


@settings(max_examples=40, deadline=None)
@given(examples(), st.integers(0, 100))
def test_encoded_grids_fit_and_decode_to_the_label(example, shift: int) -> None:
    canvas, ins, outs, u = example
    inputs = torch.tensor(np.stack([_at_place(g, shift + i) for i, g in enumerate(ins)]))
    labels = torch.tensor(np.stack([_at_place(g, shift + 3 * i + 1, ignore=i % 2 == 0) for i, g in enumerate(outs)]))
    _, _, h, w = grid_boxes(inputs)
    _, _, oh, ow = grid_boxes(labels)
    assert h.tolist() == [g.shape[0] for g in ins] and ow.tolist() == [g.shape[1] for g in outs]
    where = draw_placement((h, w), (oh, ow), u, canvas)
    pixels, mask = encode_inputs(inputs, where, canvas)
    targets = encode_targets(labels, where, canvas)
    for i, (a, b) in enumerate(zip(ins, outs, strict=True)):
        s, row0, col0 = int(where.scale[i]), int(where.row0[i]), int(where.col0[i])
        assert 1 <= s <= (canvas - 2) // max(*a.shape, *b.shape)
        # grid and border inside the canvas, row and column 0 free (upstream leaves them as room)
        assert row0 >= 1 and col0 >= 1
        assert (
            row0 + s * max(a.shape[0], b.shape[0]) <= canvas - 1
            and col0 + s * max(a.shape[1], b.shape[1]) <= canvas - 1
        )
        expected = _expected_canvas(a, s, row0, col0, canvas, border=False)
        np.testing.assert_array_equal(pixels[i].numpy(), expected)
        np.testing.assert_array_equal(mask[i].numpy(), expected != BACKGROUND)
        np.testing.assert_array_equal(targets[i].numpy(), _expected_canvas(b, s, row0, col0, canvas, border=True))
    decoded = decode(targets, where).numpy()
    np.testing.assert_array_equal(decoded, np.stack([to_canvas(g.astype(np.uint8)) for g in outs]))


@pytest.mark.parametrize("canvas", [64, 32])
def test_targets_decode_to_the_label_at_every_scale(canvas: int) -> None:
    """Every scale each grid allows, at the four extreme offsets."""
    rng = np.random.default_rng(canvas)
    grids, rows = [rng.integers(0, 10, size=hw) for hw in ((1, 1), (2, 3), (7, 5), (1, 30), (30, 30))], []
    for g, grid in enumerate(grids):
        h, w = grid.shape
        for s in range(1, (canvas - 2) // max(h, w) + 1):
            for row0 in {1, canvas - 2 - s * h if s * h < canvas - 2 else 1}:
                for col0 in {1, canvas - 2 - s * w if s * w < canvas - 2 else 1}:
                    rows.append((g, s, row0, col0))
    labels = torch.tensor(np.stack([_at_place(grids[g], k) for k, (g, *_) in enumerate(rows)]))
    where = Placement(*(torch.tensor([r[k] for r in rows]) for k in (1, 2, 3)))
    decoded = decode(encode_targets(labels, where, canvas), where).numpy()
    np.testing.assert_array_equal(decoded, np.stack([to_canvas(grids[g].astype(np.uint8)) for g, *_ in rows]))


@pytest.mark.parametrize("canvas", [64, 32])
def test_draws_reach_every_allowed_scale_and_offset(canvas: int) -> None:
    """u in the middle of bin k gives value k + 1 of each range: the scale for every largest side 1..30, and x (from
    the width) and y (from the height) for every scale; the grids are not square, so a swap of x and y shows."""
    interior = canvas - 2
    for height, width in ((1, 1), (3, 5), (5, 3), (30, 2), (11, 30), (30, 30)):
        n_scales = interior // max(height, width)
        scales = torch.arange(1, n_scales + 1)
        u_scale = (scales - 0.5) / n_scales
        rows = []  # (s, k_x, k_y): every x at the bottom y, every y at the bottom x
        for s in range(1, n_scales + 1):
            n_x, n_y = max(interior - s * width, 1), max(interior - s * height, 1)
            rows += [(s, k, -1) for k in range(n_x)] + [(s, -1, k) for k in range(n_y)]
        s, k_x, k_y = (torch.tensor(c) for c in zip(*rows, strict=True))
        n_x, n_y = (interior - s * width).clamp(min=1), (interior - s * height).clamp(min=1)
        u = torch.stack([u_scale[s - 1], ((k_x + 0.5) / n_x).clamp(min=0), ((k_y + 0.5) / n_y).clamp(min=0)], 1)
        hw = (torch.full_like(s, height), torch.full_like(s, width))
        where = draw_placement(hw, None, u.float(), canvas)
        assert torch.equal(where.scale, s)
        assert torch.equal(where.col0, (k_x + 1).clamp(min=1)) and torch.equal(where.row0, (k_y + 1).clamp(min=1))


def test_without_an_output_the_ranges_come_from_the_input() -> None:
    u = torch.tensor([[BELOW_ONE, BELOW_ONE, BELOW_ONE]])
    one, thirty = torch.tensor([1]), torch.tensor([30])
    assert tuple(map(int, draw_placement((one, one), None, u, 64))) == (62, 1, 1)
    assert tuple(map(int, draw_placement((one, one), (thirty, one), u, 64))) == (2, 2, 60)  # (s, y, x)
    assert tuple(map(int, draw_placement((one, one), None, u, 64, scale=False, fixed_scale=3))) == (3, 59, 59)
    assert tuple(map(int, draw_placement((one, one), None, u, 64, translate=False))) == (62, 1, 1)


def test_a_label_without_colours_gives_no_target() -> None:
    labels = torch.full((2, 900), -100)
    labels[1] = 0
    assert [t.tolist() for t in grid_boxes(labels)] == [[0, 0]] * 4
    where = Placement(torch.tensor([2, 1]), torch.tensor([1, 5]), torch.tensor([3, 1]))
    assert (encode_targets(labels, where, 32) == BACKGROUND).all()
    pixels, mask = encode_inputs(labels, where, 32)
    assert (pixels == BACKGROUND).all() and not mask.any()


def test_compiled_fullgraph_gives_the_same_arrays() -> None:
    """No host syncs or data-dependent shapes: one graph, for any batch size, and the same arrays as eager. Traced
    by dynamo and AOTAutograd without inductor's code generation (22 s on 2 cores, the GPU test compiles fully):
    a graph break or a host sync fails here as it would there."""
    compiled = torch.compile(_pipeline, fullgraph=True, dynamic=True, backend="aot_eager")
    for batch in (_random_batch(16, seed=0), _random_batch(5, seed=1)):
        for a, b in zip(compiled(*batch), _pipeline(*batch), strict=True):
            assert a.dtype == b.dtype and torch.equal(a, b)


@pytest.mark.gpu
def test_on_cuda_it_gives_the_cpu_arrays() -> None:
    batch = _random_batch(16, seed=2)
    on_cpu = _pipeline(*batch)
    on_cuda = torch.compile(_pipeline, fullgraph=True)(*(t.cuda() for t in batch))
    for a, b in zip(on_cuda, on_cpu, strict=True):
        assert a.device.type == "cuda" and torch.equal(a.cpu(), b)


def _pipeline(inputs: torch.Tensor, labels: torch.Tensor, u: torch.Tensor, preds: torch.Tensor) -> list[torch.Tensor]:
    _, _, h, w = grid_boxes(inputs)
    _, _, oh, ow = grid_boxes(labels)
    where = draw_placement((h, w), (oh, ow), u, 64)
    pixels, mask = encode_inputs(inputs, where, 64)
    targets = encode_targets(labels, where, 64)
    noisy = torch.where(preds < 12, preds, targets)  # the targets with a fifth of the pixels changed
    return [*where, pixels, mask, targets, decode(targets, where), decode(noisy, where)]


def _random_batch(num: int, seed: int) -> tuple[torch.Tensor, ...]:
    rng = np.random.default_rng(seed)
    shapes = rng.integers(1, 31, size=(num, 2, 2))
    inputs = np.stack([_at_place(rng.integers(0, 10, size=s[0]), i) for i, s in enumerate(shapes)])
    labels = np.stack([_at_place(rng.integers(0, 10, size=s[1]), i + 1, ignore=True) for i, s in enumerate(shapes)])
    u = torch.rand(num, 3, generator=torch.Generator().manual_seed(seed))
    preds = torch.randint(0, 60, (num, 64, 64), generator=torch.Generator().manual_seed(seed))
    return torch.tensor(inputs), torch.tensor(labels), u, preds


def _blocks_from_top_left(pixels: np.ndarray, s: int) -> np.ndarray:
    """Upstream's block majority on a pixel crop in the original frame: s x s blocks from the top left, partial ones
    at the right and bottom, each its most frequent id, ties to the smallest."""
    h, w = pixels.shape
    out = np.zeros((-(-h // s), -(-w // s)), dtype=np.int64)
    for a in range(out.shape[0]):
        for b in range(out.shape[1]):
            out[a, b] = np.bincount(pixels[a * s : (a + 1) * s, b * s : (b + 1) * s].ravel()).argmax()
    return out


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 7), st.integers(2, 4), st.integers(1, 12), st.integers(1, 12), st.integers(0, 2**31 - 1))
def test_blocks_are_cut_in_the_original_frame_as_upstreams(tid: int, s: int, h: int, w: int, seed: int) -> None:
    """A view's answer, decoded with its dihedral id and then undone, is upstream's: the view undone on the pixel crop
    first, then the blocks from the original's top left (crops that are not a multiple of s included)."""
    from arcpipe.data.augment import DIHEDRAL_INVERSE, dihedral

    rng = np.random.default_rng(seed)
    original = rng.integers(0, 3, size=(h, w))  # few colours: many ties and mixed blocks
    view = np.ascontiguousarray(dihedral(original, tid))
    side, row0, col0 = 64, 3, 2
    pixels = np.full((side, side), BACKGROUND)
    vh, vw = view.shape
    pixels[row0 : row0 + vh, col0 : col0 + vw] = view
    pixels[row0 + vh, col0 : col0 + vw + 1] = BORDER
    pixels[row0 : row0 + vh + 1, col0 + vw] = BORDER
    where = Placement(torch.tensor([s]), torch.tensor([row0]), torch.tensor([col0]))
    tokens = decode(torch.tensor(pixels[None]), where, torch.tensor([tid])).view(30, 30).numpy()
    oh, ow = -(-vh // s), -(-vw // s)
    answer = tokens[:oh, :ow] - 2  # the view's answer, colours
    assert (tokens[:oh, :ow] >= 2).all()
    np.testing.assert_array_equal(dihedral(answer, int(DIHEDRAL_INVERSE[tid])), _blocks_from_top_left(original, s))
