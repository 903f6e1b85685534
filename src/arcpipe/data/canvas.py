"""arcpipe's 30x30 token maps <-> upstream VARC's image canvas (lillian039/VARC 537b01e), batched and on any device.

VARC (upstream-varc.md 2.3) puts each grid on a C x C canvas (C = 64 published) of pixel ids: colours 0-9,
BACKGROUND (10) around the grid, and in the target a one-pixel BORDER (11) right of and below the output grid, which
is how the model says the output's shape. The grid is upscaled by an integer s (each cell an s x s block) and
translated; input and output share s and the offset. This module is that mapping for whole batches, with upstream's
semantics to the pixel, and no host syncs (no data-dependent shapes or Python branches: it runs under
torch.compile(fullgraph=True)):

    _, _, h, w = grid_boxes(inputs)                                  # inputs, labels: (B, 900) arcpipe tokens
    _, _, oh, ow = grid_boxes(labels)
    where = draw_placement((h, w), (oh, ow), torch.rand(B, 3, generator=g), 64)
    pixels, mask = encode_inputs(inputs, where, 64)                  # (B, 64, 64) long, (B, 64, 64) bool
    targets = encode_targets(labels, where, 64)                      # (B, 64, 64) long, 10 = ignored
    tokens = decode(logits.argmax(1), where)                         # (B, 900) arcpipe tokens

Upstream, file:line at 537b01e:

* `draw_placement`: src/ARC_loader.py `process_per_example` L219-243 and `resolution_augmentation` L74-88. The scale
  and translation ranges come from the largest side over input *and* output (L219-223); x (the column offset) pairs
  with widths, y (the row offset) with heights; each `rng.randint(a, b)` becomes `a + floor(u * (b - a + 1))` of the
  caller's uniform u, drawn in upstream's order (scale, x, y) from u[:, 0], u[:, 1], u[:, 2].
* `encode_inputs`, `encode_targets`: `pad_grid_with_translation` L45-72 (targets with output_shape=True) and the
  reset of everything outside grid + border to 10 (L255-256).
* `decode`: utils/eval_utils_ttt.py `generate_predictions` L229-262: crop at the offset; width = cells before the
  first 11 along the crop's first row, height = cells before the first 11 down its first column (to the canvas edge
  if there is none); then upstream undoes the view (its flip or rotation) on that crop and, if s > 1, each s x s block
  from the top left of the original frame (cut short at its right and bottom edges when the crop is not a multiple of
  s: upstream keeps these partial blocks, so the grid is ceil(height / s) x ceil(width / s)) becomes its most
  frequent id, ties to the smallest id (np.bincount + argmax). A 10 or 11 inside the crop stays as it is. Here the
  answer stays in the view's frame (the vote undoes the view on tokens), and the blocks are cut from the corner where
  the view put the original's top left: the same blocks, so the same answer once the view is undone.

A grid holding 10 or 11 is kept, with tokens 12 and 13 for them (eval/grids.py), so it is a candidate of its own in
the vote, as upstream's is, and never right. Where arcpipe's map cannot hold upstream's answer, `decode` writes an
all-PAD map, which arcpipe's evaluator crops to the empty grid: an empty crop (an 11 at the offset itself, which ends
both the first row and the first column: upstream's `[]`, the same one candidate there), and a grid over 30 rows or
columns (a missing border makes the crop run to the canvas edge), which upstream keeps as a candidate of its own and
here joins the empty one; neither is ever right. A crop with rows but no columns (an 11 right of the offset but none
below it) is upstream's list of empty rows, a candidate per height; here it is the empty grid too.

What upstream leaves undefined, and what happens here instead of its exception: a grid with no colour tokens counts
as side 1 for the scale range (upstream divides by zero) and gets an all-10 target, as upstream's example without an
output would (L249-253); a grid that does not fit at its scale (only with a fixed scale, or grids over C - 2) is cut
at the canvas edge (upstream raises, L56-59). The caller keeps grids within 30 and C >= 32, where neither happens.

`draw_placement(..., out_hw=None, ...)` sizes the ranges from the input alone. Upstream has no such path: its
example without an output fails where it is scaled (L86 and L232 read the output) before L249, so its inference
always sizes them from the true output as well (upstream-varc.md 7.1); out_hw=None is arcpipe's choice for not
looking at the answer.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

BACKGROUND = 10  # upstream's IGNORE_INDEX: the input's background and the loss's ignore_index
BORDER = 11  # upstream's PAD_INDEX: the target's right column and bottom row around the output grid
NUM_CLASSES = 12  # pixel ids 0..11, the model's output classes

# arcpipe's token map (data/augment.py, eval/grids.py; constants repeated here since data/ sits below eval/)
SIDE = 30  # the map is SIDE x SIDE tokens, row-major, (B, 900)
PAD, EOS, COLOUR_OFFSET = 0, 1, 2  # colour c is token c + 2; labels may hold -100 where they are ignored


class Placement(NamedTuple):
    """Where each grid of a batch sits on the canvas: all (B,) long, pixels of the canvas, upstream's (s, y, x)."""

    scale: Tensor  # s >= 1: each grid cell is an s x s block
    row0: Tensor  # upstream's y_offset: the canvas row of the grid's top row
    col0: Tensor  # upstream's x_offset: the canvas column of the grid's left column


def grid_boxes(seq: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(B, 900) tokens -> (top, left, height, width), each (B,) long: the bounding box of the colour tokens (>= 2) in
    the 30x30 map; all four 0 where there are none."""
    colour = seq.view(-1, SIDE, SIDE) >= COLOUR_OFFSET  # (B, 30, 30)
    top, height = _span(colour.any(dim=2))
    left, width = _span(colour.any(dim=1))
    return top, left, height, width


def draw_placement(
    in_hw: tuple[Tensor, Tensor],
    out_hw: tuple[Tensor, Tensor] | None,
    u: Tensor,
    canvas: int,
    *,
    scale: bool = True,
    translate: bool = True,
    fixed_scale: int = 1,
) -> Placement:
    """Upstream's random scale and offset for each example, from the caller's uniform draws.

    in_hw, out_hw: (height, width) of the input and output grids, each (B,) long (`grid_boxes`). Upstream sizes the
    ranges from both; out_hw=None sizes them from the input alone (at inference on a hidden test set, where upstream
    would use the true output's size, a leak). u: (B, 3) floats in [0, 1): u[:, 0] draws the scale, u[:, 1] the
    column offset x, u[:, 2] the row offset y; columns not needed are ignored.

    s is uniform in [1, (canvas - 2) // max_side] (scale=False: fixed_scale); x uniform in [1, canvas - 2 - s * W]
    and y in [1, canvas - 2 - s * H], W and H the widths and heights of both grids at their largest, and 1 where the
    range is empty (translate=False: x = y = 1). The grid and the target's border then fit inside the canvas.
    """
    height, width = in_hw
    if out_hw is not None:
        height, width = torch.maximum(height, out_hw[0]), torch.maximum(width, out_hw[1])
    interior = canvas - 2  # upstream's max_img_size: row and column 0 and C - 1 are left free
    if scale:
        max_side = torch.maximum(height, width).clamp(min=1)
        s = 1 + _randint0(u[:, 0], (interior // max_side).clamp(min=1))
    else:
        s = torch.full_like(height, fixed_scale)
    if translate:
        col0 = 1 + _randint0(u[:, 1], (interior - s * width).clamp(min=1))
        row0 = 1 + _randint0(u[:, 2], (interior - s * height).clamp(min=1))
    else:
        col0 = row0 = torch.ones_like(s)
    return Placement(s, row0, col0)


def placement_draws(scale: int, col0: int, row0: int, height: int, width: int, canvas: int) -> tuple[float, ...]:
    """The inverse of `draw_placement` for one pair whose grids are at most `height` x `width`: the three uniforms
    (scale, column offset, row offset) from which it picks exactly `scale`, `col0` and `row0`, each integer's
    interval's midpoint. For placements drawn elsewhere and replayed (upstream's loader: train/upstream_order.py and
    the parity tests)."""
    interior = canvas - 2
    return (
        (scale - 0.5) / max(interior // max(height, width, 1), 1),
        (col0 - 0.5) / max(interior - scale * width, 1),
        (row0 - 0.5) / max(interior - scale * height, 1),
    )


def encode_inputs(inputs: Tensor, placement: Placement, canvas: int) -> tuple[Tensor, Tensor]:
    """(B, 900) input tokens -> (pixels (B, C, C) long, mask (B, C, C) bool): the grid scaled by s at the offset on a
    background of 10; the mask (upstream's attention_mask) is True exactly on the grid's pixels."""
    pixels, inside, *_ = _place(inputs, placement, canvas)
    return pixels, inside


def encode_targets(labels: Tensor, placement: Placement, canvas: int) -> Tensor:
    """(B, 900) label tokens -> (B, C, C) long targets: the output grid scaled by s at the offset, 11 in the column
    right of it and the row below it (with the corner between them), 10 (ignored by the loss) everywhere else."""
    pixels, _, dy, dx, bottom, right = _place(labels, placement, canvas)  # the border's row and column: dy == bottom
    in_rows, in_cols = (dy >= 0) & (dy <= bottom), (dx >= 0) & (dx <= right)  # (B, C), grid and border
    border = (in_rows[:, :, None] & (dx == right)[:, None, :]) | ((dy == bottom)[:, :, None] & in_cols[:, None, :])
    border &= (bottom > 0)[:, :, None]  # no output grid: no target at all (upstream L249-253)
    return torch.where(border, BORDER, pixels)


def decode(preds: Tensor, placement: Placement, views: Tensor | None = None) -> Tensor:
    """(B, C, C) predicted pixel ids (0..11, e.g. logits.argmax(1)) -> (B, 900) long arcpipe tokens.

    Upstream's crop, shape and block majority (module docstring); the grid goes to the top-left of the map with EOS
    below its last row and right of its last column where they fit (data/augment.py `to_canvas`), PAD elsewhere. A
    10 or 11 inside the grid becomes token 12 or 13 (eval/grids.py: the evaluator keeps them, as upstream's answer
    does). An answer the map cannot hold (empty, or over 30) gives an all-PAD map.

    views: (B,) dihedral id of each row's view (data/augment.py `dihedral`; None: all 0). Upstream undoes the view on
    the pixel crop and then cuts the s x s blocks from the top left of the original frame; the answer stays in the
    view's frame here (the vote undoes the view on the tokens), so the blocks are cut from the corner of the crop
    where the view put the original's top left (`view_corners`). Where the crop is a multiple of s both are the
    same blocks; elsewhere the partial blocks fall on the sides upstream's do.
    """
    B, C = preds.shape[0], preds.shape[-1]
    preds = preds.long()
    s, row0, col0 = placement
    at = torch.arange(C, device=preds.device)
    first_row = preds.gather(1, row0.view(B, 1, 1).expand(B, 1, C)).view(B, C)  # canvas row y
    first_col = preds.gather(2, col0.view(B, 1, 1).expand(B, C, 1)).view(B, C)  # canvas column x
    width = _first(first_row, col0, at) - col0  # cells before the first 11 at or right of x
    height = _first(first_col, row0, at) - row0
    out_h, out_w = -(-height // s), -(-width // s)  # partial blocks at the edges count
    # blocks cut from the bottom (right) edge: the first block row (column) is the partial one, short by `shift`
    views = views.long() if views is not None else torch.zeros(B, dtype=torch.long, device=preds.device)
    far = _VIEW_CORNERS.to(preds.device)[views]  # (B, 2)
    shift_h = torch.where(far[:, 0], out_h * s - height, 0)
    shift_w = torch.where(far[:, 1], out_w * s - width, 0)

    # the ids' counts in every s x s block of the crop, from per-id integral images (B, 12, C + 1, C + 1)
    ids = torch.arange(NUM_CLASSES, device=preds.device)
    onehot = (preds[:, None] == ids[None, :, None, None]).to(torch.int32)
    integral = torch.nn.functional.pad(onehot.cumsum(2, dtype=torch.int32).cumsum(3, dtype=torch.int32), (1, 0, 1, 0))
    cells = torch.arange(SIDE, device=preds.device)
    top, bottom = _block_edges(cells, s, row0, height, shift_h)  # (B, 30): canvas rows [top, bottom) of block row a
    left, right = _block_edges(cells, s, col0, width, shift_w)
    counts = (
        _corner(integral, bottom, right)
        - _corner(integral, top, right)
        - _corner(integral, bottom, left)
        + _corner(integral, top, left)
    )  # (B, 12, 30, 30)
    # the most frequent id, ties to the smallest: the largest count * 12 + (11 - id) names both (a max, not an
    # argmax, so nothing rests on which of equal values an argmax returns)
    key = (counts * NUM_CLASSES + (NUM_CLASSES - 1 - ids)[None, :, None, None]).amax(dim=1)
    cell = NUM_CLASSES - 1 - key % NUM_CLASSES  # (B, 30, 30)

    in_rows, in_cols = cells[None, :] < out_h[:, None], cells[None, :] < out_w[:, None]  # (B, 30)
    grid = in_rows[:, :, None] & in_cols[:, None, :]
    eos = ((cells[None, :] == out_h[:, None])[:, :, None] & in_cols[:, None, :]) | (
        in_rows[:, :, None] & (cells[None, :] == out_w[:, None])[:, None, :]
    )
    fits = (out_h >= 1) & (out_h <= SIDE) & (out_w >= 1) & (out_w <= SIDE)
    tokens = torch.where(grid, cell + COLOUR_OFFSET, torch.where(eos, EOS, PAD))  # 10, 11 -> tokens 12, 13
    return torch.where(fits[:, None, None], tokens, PAD).view(B, SIDE * SIDE)


# --------------------------------------------------------------------------------------------------------------


def _span(present: Tensor) -> tuple[Tensor, Tensor]:
    # (B, 30) bool -> (first index, number from the first to the last True), (0, 0) where none
    at = torch.arange(present.shape[1], device=present.device)
    first = torch.where(present, at, present.shape[1]).amin(dim=1)
    last = torch.where(present, at, -1).amax(dim=1)
    length = (last - first + 1).clamp(min=0)
    return torch.where(length > 0, first, 0), length


def _randint0(u: Tensor, n: Tensor) -> Tensor:
    # uniform in [0, n - 1]; the clamp keeps a u that rounds u * n up to n (u just below 1) in range
    return torch.minimum((u * n).floor().long(), n - 1)


def _place(seq: Tensor, placement: Placement, canvas: int) -> tuple[Tensor, ...]:
    # the grid of `seq` scaled and placed: pixels (B, C, C) long with 10 off the grid, the on-grid mask (B, C, C),
    # dy, dx (B, C): each canvas row's and column's distance below / right of the offset, and the scaled grid's
    # height and width (B, 1)
    B = seq.shape[0]
    top, left, height, width = grid_boxes(seq)
    s, row0, col0 = placement
    at = torch.arange(canvas, device=seq.device)
    dy, dx = at[None, :] - row0[:, None], at[None, :] - col0[:, None]
    scaled_h, scaled_w = (s * height)[:, None], (s * width)[:, None]
    in_rows, in_cols = (dy >= 0) & (dy < scaled_h), (dx >= 0) & (dx < scaled_w)
    # the map cell each pixel repeats; off the grid any valid index, overwritten below
    src_row = (top[:, None] + torch.div(dy, s[:, None], rounding_mode="floor")).clamp(0, SIDE - 1)
    src_col = (left[:, None] + torch.div(dx, s[:, None], rounding_mode="floor")).clamp(0, SIDE - 1)
    index = (src_row[:, :, None] * SIDE + src_col[:, None, :]).view(B, canvas * canvas)
    values = seq.view(B, SIDE * SIDE).gather(1, index).view(B, canvas, canvas).long() - COLOUR_OFFSET
    inside = in_rows[:, :, None] & in_cols[:, None, :]
    return torch.where(inside, values, BACKGROUND), inside, dy, dx, scaled_h, scaled_w


def _first(line: Tensor, start: Tensor, at: Tensor) -> Tensor:
    # (B, C) ids along a canvas row or column -> (B,) the index of the first 11 at or after `start`, else C
    return torch.where((line == BORDER) & (at[None, :] >= start[:, None]), at, line.shape[1]).amin(dim=1)


def _block_edges(cells: Tensor, s: Tensor, origin: Tensor, length: Tensor, shift: Tensor) -> tuple[Tensor, Tensor]:
    # block a covers crop cells [a * s - shift, (a + 1) * s - shift) cut to [0, length), as canvas indices [lo, hi);
    # (B, 30) each. shift 0: blocks from the crop's start, the last one partial; shift = blocks * s - length: blocks
    # from its end, the first one partial
    lo = (cells[None, :] * s[:, None] - shift[:, None]).clamp(min=0)
    hi = ((cells[None, :] + 1) * s[:, None] - shift[:, None]).clamp(min=0)
    return origin[:, None] + torch.minimum(lo, length[:, None]), origin[:, None] + torch.minimum(hi, length[:, None])


def view_corners() -> Tensor:
    """(8, 2) bool: for each dihedral id (data/augment.py `dihedral`), whether the view puts the original grid's
    top-left cell in the last row, and in the last column, of the view."""
    from arcpipe.data.augment import dihedral

    marker = np.zeros((2, 2), dtype=np.int8)
    marker[0, 0] = 1
    corners = [np.argwhere(dihedral(marker, tid))[0] == 1 for tid in range(8)]
    return torch.from_numpy(np.stack(corners))


_VIEW_CORNERS = view_corners()


def _corner(integral: Tensor, rows: Tensor, cols: Tensor) -> Tensor:
    # integral (B, 12, C + 1, C + 1) at [rows[a], cols[b]] for every (a, b): (B, 12, 30, 30)
    B, K, side = integral.shape[0], integral.shape[1], integral.shape[-1]
    index = (rows[:, :, None] * side + cols[:, None, :]).view(B, 1, SIDE * SIDE).expand(B, K, SIDE * SIDE)
    return integral.view(B, K, side * side).gather(2, index).view(B, K, SIDE, SIDE)
