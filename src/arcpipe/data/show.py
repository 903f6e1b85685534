"""Inspect a built dataset: statistics per split and subset, or one task and some of its augmented views.

arcpipe data show results/data/arc1
arcpipe data show results/data/arc1 007bbfb7 --num-views 4 [--png views.png]
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from pathlib import Path

import numpy as np

from arcpipe.config import ArcpipeError
from arcpipe.data.augment import SEPARATOR, Grid, parse_identifier
from arcpipe.data.dataset import load_identifiers, load_split

log = logging.getLogger(__name__)

# the usual ARC palette, colours 0..9
PALETTE = (
    "#000000", "#0074D9", "#FF4136", "#2ECC40", "#FFDC00", "#AAAAAA", "#F012BE", "#FF851B", "#7FDBFF", "#870C25",
)  # fmt: skip


def show_dataset(path: Path, puzzle: str | None, *, png: Path | None, num_views: int) -> None:
    """Print the statistics of the dataset at `path`, or render task `puzzle` (text, or a PNG when `png`)."""
    path = Path(path)
    if puzzle is None:
        print(statistics_text(path))
        return
    views = task_views(path, puzzle, num_views)
    if png is None:
        print(_views_text(views))
    else:
        _views_png(views, png)
        print(f"wrote {png}")


def statistics_text(path: Path) -> str:
    """Puzzles, groups and examples per split and subset, and how full the augmentation groups are."""
    identifiers = load_identifiers(path)
    build = _read_json(path / "build.json")
    subset_of: dict[str, str] = {}
    for subset, tasks in (build or {}).get("tasks", {}).items():
        subset_of.update(dict.fromkeys(tasks, subset))
    lines = [f"{path}: {len(identifiers) - 1} puzzle identifiers"]
    if build:
        cfg = build["config"]
        lines.append(
            f"  built by arcpipe {build['arcpipe_version']}: mode {cfg['mode']}, num_aug {cfg['num_aug']}, "
            f"seed {cfg['seed']}, test set {cfg['test_set']}"
        )
    num_aug = build["config"]["num_aug"] if build else None
    for split in ("train", "test"):
        data = load_split(path, split)
        groups = data.group_indices
        sizes = np.diff(groups)
        examples = np.diff(data.puzzle_indices)
        num_aug = int(sizes.max()) - 1 if num_aug is None else num_aug
        per_subset: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
        for g in range(len(sizes)):
            task = identifiers[data.puzzle_identifiers[groups[g]]].split(SEPARATOR, 1)[0]
            counts = per_subset[subset_of.get(task, "?")]
            counts[0] += 1
            counts[1] += int(sizes[g])
            counts[2] += int(examples[groups[g] : groups[g + 1]].sum())
        lines.append(
            f"  {split}: {len(sizes)} groups, {len(data.puzzle_identifiers)} puzzles, {len(data.inputs)} examples "
            f"(mean {data.metadata.mean_puzzle_examples:.4f} per puzzle)"
        )
        for subset, (g, p, e) in sorted(per_subset.items()):
            lines.append(f"    {subset:>14}: {g} groups, {p} puzzles, {e} examples")
        if len(sizes):
            full = num_aug + 1
            short = int((sizes < full).sum())
            lines.append(
                f"    augmentation fill: {sizes.sum() / (len(sizes) * full):.1%} of {full} views per group; "
                f"{short} groups short (smallest {int(sizes.min())})"
            )
    return "\n".join(lines)


def task_views(path: Path, task: str, num_views: int) -> list[tuple[str, str, list[tuple[Grid, Grid]]]]:
    """(split, puzzle name, [(input, output)]) for the original and the first `num_views` augmented views."""
    identifiers = load_identifiers(path)
    out = []
    for split in ("train", "test"):
        data = load_split(path, split)
        groups = data.group_indices
        firsts = data.puzzle_identifiers[groups[:-1]]
        matches = [g for g, pid in enumerate(firsts) if identifiers[pid].split(SEPARATOR, 1)[0] == task]
        for g in matches:
            for p in range(groups[g], min(groups[g + 1], groups[g] + num_views + 1)):
                name = identifiers[data.puzzle_identifiers[p]]
                pairs = [
                    (decode_canvas(data.inputs[r]), decode_canvas(data.labels[r]))
                    for r in range(data.puzzle_indices[p], data.puzzle_indices[p + 1])
                ]
                out.append((split, name, pairs))
    if not out:
        raise ArcpipeError(f"{path}: no task {task!r} in this dataset; `arcpipe data show {path}` lists the counts")
    return out


def decode_canvas(row: np.ndarray) -> Grid:
    """The grid in one (900,) token row: the colour rectangle whose top-left is the first colour token."""
    canvas = np.asarray(row).reshape(30, 30)
    colour = canvas >= 2
    if not colour.any():
        return np.zeros((0, 0), dtype=np.uint8)
    r0, c0 = np.argwhere(colour)[0]
    w = int(np.argmin(np.append(colour[r0, c0:], False)))
    h = int(np.argmin(np.append(colour[r0:, c0], False)))
    return (canvas[r0 : r0 + h, c0 : c0 + w] - 2).astype(np.uint8)


def _views_text(views: list[tuple[str, str, list[tuple[Grid, Grid]]]]) -> str:
    blocks = []
    for split, name, pairs in views:
        _, augmentation = parse_identifier(name)
        blocks.append(f"== {split}: {name}  (t{augmentation.tid}, colours {''.join(map(str, augmentation.colours))})")
        for i, (inp, out) in enumerate(pairs):
            left, right = _grid_lines(inp), _grid_lines(out)
            width = max((len(line) for line in left), default=0)
            blocks.append(f"  example {i}: {inp.shape[0]}x{inp.shape[1]} -> {out.shape[0]}x{out.shape[1]}")
            for k in range(max(len(left), len(right))):
                a = left[k] if k < len(left) else ""
                b = right[k] if k < len(right) else ""
                blocks.append(f"    {a:<{width}}   {'->' if k == 0 else '  '}   {b}")
    return "\n".join(blocks)


def _grid_lines(grid: Grid) -> list[str]:
    return ["".join("." if v == 0 else str(v) for v in row) for row in grid]


def _views_png(views: list[tuple[str, str, list[tuple[Grid, Grid]]]], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    cmap = ListedColormap(PALETTE)
    cols = 2 * max(len(pairs) for _, _, pairs in views)
    fig, axes = plt.subplots(len(views), cols, figsize=(1.6 * cols, 1.8 * len(views)), squeeze=False)
    for row, (split, name, pairs) in enumerate(views):
        for ax in axes[row]:
            ax.axis("off")
        for i, (inp, out) in enumerate(pairs):
            for j, grid in enumerate((inp, out)):
                ax = axes[row, 2 * i + j]
                ax.imshow(grid, cmap=cmap, vmin=0, vmax=9, interpolation="nearest")
                ax.set_title(f"{'in' if j == 0 else 'out'} {i}", fontsize=7)
        axes[row, 0].text(
            -0.1, 0.5, f"{split}\n{name}", transform=axes[row, 0].transAxes, ha="right", va="center", fontsize=7
        )
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=100)
    plt.close(fig)


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
