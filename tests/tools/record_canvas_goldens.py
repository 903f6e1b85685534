"""Record tests/data/canvas_golden.npz, the golden of tests/unit/data/test_canvas.py, by running upstream VARC's own
canvas and decoding code.

    python tests/tools/record_canvas_goldens.py --varc VARC_DIR [--output tests/data/canvas_golden.npz]

VARC_DIR is a tree of lillian039/VARC at the commit in UPSTREAM below (for example
`git --git-dir=<clone>/.git archive <commit> | tar -x -C VARC_DIR`); its src/ARC_loader.py and
utils/eval_utils_ttt.py are imported from there at run time and never copied here. Two modules that
eval_utils_ttt.py imports for other work are stubbed: `tqdm` (a progress bar around the loader) and
`utils.analyze_prediction` (the scoring that runs after decoding, which reads the ARC evaluation files).

What is recorded (upstream-varc.md 2.3, 2.9):

* `enc_*`, one row per case (CASES): two grids of sizes from 1x1 to 30x30 (non-square, input larger or smaller than
  output), the canvas (64 or 32), and how the scale and each offset are picked. Upstream's
  `ARCDataset.process_per_example` runs with a scripted rng: each `rng.randint(lo, hi)` is named by the source line
  that calls it (scale, x or y), its (lo, hi) is recorded, and it returns lo, hi or a seeded value between them.
  Recorded: upstream's input canvas, attention mask and target canvas, the scale and offset it used, and the range
  of each draw (the scale's and the offsets' given that scale). A few cases turn the scale draw off (a fixed scale)
  or the translation off (offset (1, 1)).
* `dec_*`, one row per decoded canvas: upstream's target canvases, and perturbed ones (a border pixel missing, tied
  or 10/11-holding s x s blocks, a crop that is not a multiple of s, an empty crop, a crop of colours over 30 wide,
  noise), decoded by upstream's `generate_predictions` (a stand-in model whose argmax is the canvas, a one-batch
  loader) into grids: (rows, cols) and cells, which may hold 10 or 11 or exceed 30.

Arrays are int8 and padded with -1 (canvases to 64 x 64, grids to 30 x 30, decoded grids to 64 x 64).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib
import json
import linecache
import sys
import tempfile
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

UPSTREAM = ("lillian039/VARC", "537b01ed95944cfb080455b795f4888db8d0484b")
SEED = 0
BIG = 64  # every canvas is padded to BIG x BIG
MAX_BYTES = 200_000
BACKGROUND, BORDER = 10, 11


@dataclass(frozen=True)
class Case:
    canvas: int
    in_hw: tuple[int, int]
    out_hw: tuple[int, int]
    scale: str  # "min", "max", "rand", or "fixed<k>" (upstream's resolution augmentation off, fix_scale_factor=k)
    x: str  # "min", "max", "rand", or "off" (upstream's translation off: offset (1, 1))
    y: str


# sizes chosen to hit the edges (1, 30, one side of each, input larger than output and the other way round);
# the random ones below add the rest
FIXED_CASES = [
    Case(64, (1, 1), (1, 1), "max", "max", "max"),
    Case(64, (1, 1), (1, 1), "min", "max", "min"),
    Case(64, (30, 30), (30, 30), "max", "max", "max"),
    Case(64, (30, 30), (30, 30), "min", "max", "rand"),
    Case(64, (1, 30), (30, 1), "max", "min", "max"),
    Case(64, (30, 1), (2, 2), "rand", "max", "max"),
    Case(64, (3, 7), (9, 2), "max", "rand", "max"),
    Case(64, (2, 3), (5, 4), "rand", "min", "min"),
    Case(64, (16, 5), (4, 21), "max", "max", "min"),
    Case(64, (21, 21), (20, 20), "max", "min", "max"),
    Case(32, (1, 1), (1, 1), "max", "max", "max"),
    Case(32, (30, 30), (30, 30), "max", "max", "max"),
    Case(32, (15, 4), (3, 15), "max", "rand", "max"),
    Case(32, (7, 9), (9, 7), "min", "max", "max"),
    Case(32, (1, 29), (28, 1), "max", "max", "rand"),
    Case(64, (5, 6), (6, 5), "fixed2", "rand", "max"),
    Case(64, (30, 30), (12, 30), "fixed2", "max", "max"),
    Case(64, (4, 4), (8, 3), "fixed1", "max", "min"),
    Case(32, (3, 3), (3, 3), "fixed3", "max", "max"),
    Case(64, (9, 3), (3, 9), "max", "off", "off"),
    Case(64, (1, 2), (2, 1), "rand", "off", "off"),
    Case(32, (10, 10), (10, 10), "fixed2", "off", "off"),
]
NUM_RANDOM_CASES = 22


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--varc", type=Path, required=True, help=f"{UPSTREAM[0]} at {UPSTREAM[1][:7]}")
    parser.add_argument("--output", type=Path, default=Path(__file__).parents[1] / "data" / "canvas_golden.npz")
    args = parser.parse_args()
    golden = record(args.varc)
    np.savez_compressed(args.output, **golden)
    size = args.output.stat().st_size
    print(f"{args.output}: {len(golden['enc_canvas'])} canvases, {len(golden['dec_canvas'])} decodes, {size} bytes")
    if size > MAX_BYTES:
        raise SystemExit(f"{args.output} is {size} bytes, over {MAX_BYTES}: record fewer cases")


def record(checkout: Path) -> dict[str, np.ndarray]:
    rng = np.random.RandomState(SEED)
    cases = FIXED_CASES + [_random_case(rng) for _ in range(NUM_RANDOM_CASES)]
    with _upstream_tree(checkout) as sources:
        loader = importlib.import_module("src.ARC_loader")
        eval_ttt = importlib.import_module("utils.eval_utils_ttt")
        encoded = [_encode(loader, case, rng) for case in cases]
        decodes = _decode_cases(encoded, rng)
        decoded = _decode(eval_ttt, decodes)
    upstream = {"repo": UPSTREAM[0], "commit": UPSTREAM[1], "sources_sha256": dict(sorted(sources.items()))}
    enc = {k: np.stack([e[k] for e in encoded]) for k in encoded[0]}
    return {
        "upstream": np.array(json.dumps(upstream)),
        "torch_version": np.array(str(torch.__version__)),
        **{f"enc_{k}": v for k, v in enc.items()},
        "dec_canvas": np.array([d["canvas"] for d in decodes], dtype=np.int16),
        "dec_scale": np.array([d["scale"] for d in decodes], dtype=np.int16),
        "dec_x": np.array([d["x"] for d in decodes], dtype=np.int16),
        "dec_y": np.array([d["y"] for d in decodes], dtype=np.int16),
        "dec_preds": np.stack([_pad(d["preds"], BIG) for d in decodes]),
        "dec_kind": np.array([d["kind"] for d in decodes]),
        "dec_hw": np.array([g.shape for g in decoded], dtype=np.int16),
        "dec_grid": np.stack([_pad(g, BIG) for g in decoded]),
    }


def _random_case(rng: np.random.RandomState) -> Case:
    canvas = int(rng.choice([64, 64, 64, 32]))
    sizes = rng.randint(1, 31, size=4)
    modes = ["min", "max", "rand", "rand"]
    return Case(canvas, (int(sizes[0]), int(sizes[1])), (int(sizes[2]), int(sizes[3])), *rng.choice(modes, size=3))


class _ScriptedRng:
    """Upstream's rng, answering each `randint(lo, hi)` by the case's mode for the draw that calls it."""

    def __init__(self, case: Case, rng: np.random.RandomState) -> None:
        self.modes = {"scale": case.scale, "x": case.x, "y": case.y}
        self.rng = rng
        self.ranges: dict[str, tuple[int, int]] = {}

    def randint(self, lo: int, hi: int) -> int:
        caller = sys._getframe(1)
        line = linecache.getline(caller.f_code.co_filename, caller.f_lineno)
        names = [name for name in ("scale_factor", "x_offset", "y_offset") if f"{name} = rng.randint" in line]
        assert len(names) == 1, f"an rng draw we do not know: {line.strip()!r}"
        kind = {"scale_factor": "scale", "x_offset": "x", "y_offset": "y"}[names[0]]
        assert kind not in self.ranges, kind
        self.ranges[kind] = (lo, hi)
        mode = self.modes[kind]
        return lo if mode == "min" else hi if mode == "max" else int(self.rng.randint(lo, hi + 1))


def _encode(loader: Any, case: Case, rng: np.random.RandomState) -> dict[str, np.ndarray]:
    inp = rng.randint(0, 10, size=case.in_hw)
    out = rng.randint(0, 10, size=case.out_hw)
    dataset = loader.ARCDataset.__new__(loader.ARCDataset)  # its __init__ reads task files; only these three are used
    dataset.max_size = case.canvas
    dataset.resolution_enabled = not case.scale.startswith("fixed")
    dataset.fix_scale_factor = int(case.scale[5:]) if case.scale.startswith("fixed") else 2
    scripted = _ScriptedRng(case, rng)
    item = dataset.process_per_example(
        example={"input": inp.tolist(), "output": out.tolist()},
        task_index=0,
        task_name="golden",
        example_index=0,
        rng=scripted,
        if_translation=case.x != "off",
    )
    x, y = item["offset"]
    s = item["scale_factor"]
    ranges = scripted.ranges
    return {
        "canvas": np.int16(case.canvas),
        "in_hw": np.array(case.in_hw, dtype=np.int16),
        "out_hw": np.array(case.out_hw, dtype=np.int16),
        "in_grid": _pad(inp, 30),
        "out_grid": _pad(out, 30),
        "scaled": np.bool_(dataset.resolution_enabled),
        "translated": np.bool_(case.x != "off"),
        "fixed_scale": np.int16(dataset.fix_scale_factor),
        "scale": np.int16(s),
        "x": np.int16(x),
        "y": np.int16(y),
        # a draw upstream does not make is recorded as the one value it takes
        "scale_range": np.array(ranges.get("scale", (s, s)), dtype=np.int16),
        "x_range": np.array(ranges.get("x", (1, 1)), dtype=np.int16),
        "y_range": np.array(ranges.get("y", (1, 1)), dtype=np.int16),
        "inputs": _pad(item["inputs"].numpy(), BIG),
        "mask": _pad(item["attention_mask"].numpy(), BIG),
        "targets": _pad(item["targets"].numpy(), BIG),
    }


def _decode_cases(encoded: list[dict[str, np.ndarray]], rng: np.random.RandomState) -> list[dict[str, Any]]:
    """Canvases to decode: every case's target, then perturbed targets and noise."""
    out = []

    def add(kind: str, e: dict[str, np.ndarray], preds: np.ndarray, scale: int | None = None) -> None:
        s = int(e["scale"]) if scale is None else scale
        out.append(
            {"kind": kind, "canvas": int(e["canvas"]), "scale": s, "x": int(e["x"]), "y": int(e["y"]), "preds": preds}
        )

    for e in encoded:
        add("target", e, _unpad(e["targets"], int(e["canvas"])))
    for i, e in enumerate(encoded):
        C, s, x, y = int(e["canvas"]), int(e["scale"]), int(e["x"]), int(e["y"])
        h, w = (int(v) * s for v in e["out_hw"])
        target = _unpad(e["targets"], C)
        if i % 3 == 0:  # the right border missing on the first row: the width runs to the canvas edge
            p = target.copy()
            p[y, x + w] = BACKGROUND
            add("no right border", e, p)
        if i % 3 == 1:  # the bottom border missing on the first column
            p = target.copy()
            p[y + h, x] = int(rng.randint(0, 10))
            add("no bottom border", e, p)
        if (
            i % 4 == 0 and x + w + 1 < C and y + h + 1 < C
        ):  # the border one further out, the cell between them coloured: a crop one past a multiple of s
            p = target.copy()
            p[y : y + h, x + w] = rng.randint(0, 10, size=h)
            p[y, x + w + 1] = BORDER
            p[y + h, x : x + w + 1] = rng.randint(0, 10, size=w + 1)
            p[y + h + 1, x] = BORDER
            add("crop past a multiple of s", e, p)
        if i % 5 == 2:  # a 10 inside the grid: kept at s = 1, outvoted in a larger block
            p = target.copy()
            p[y + h // 2, x + w // 2] = BACKGROUND
            add("a 10 inside", e, p)
        if s > 1 and i % 2 == 0:  # ties in every block: two or more ids, each as often; some ties with 10 or 11
            add("ties", e, _tied_blocks(target, s, x, y, h, w, rng))
    for C in (64, 32):
        e = {"canvas": C, "scale": 1, "x": 1, "y": 1}
        p = rng.randint(0, 10, size=(C, C))
        p[1, 1] = BORDER
        add("empty crop", e, p)
        for s, x, y in ((1, 1, 1), (1, 20, 3), (2, 5, 7), (3, 1, 1)):
            e = {"canvas": C, "scale": s, "x": x, "y": y}
            add("colours to the edge", e, rng.randint(0, 10, size=(C, C)))
            noise = rng.choice(12, size=(C, C), p=[0.08] * 10 + [0.1, 0.1])
            add("noise", e, noise)
    e = {"canvas": 64, "scale": 1, "x": 2, "y": 3}
    p = rng.randint(0, 10, size=(64, 64))
    p[3, 2 + 35] = p[3 + 33, 2] = BORDER
    add("33 x 35 colours", e, p)
    for (h, w), kind in (((59, 61), "30 x 31 blocks, partial"), ((59, 59), "30 x 30 blocks, partial")):
        e = {"canvas": 64, "scale": 2, "x": 1, "y": 2}
        p = rng.randint(0, 10, size=(64, 64))
        p[2, 1 + w] = p[2 + h, 1] = BORDER
        add(kind, e, p)
    return out


def _tied_blocks(target: np.ndarray, s: int, x: int, y: int, h: int, w: int, rng: np.random.RandomState) -> np.ndarray:
    p = target.copy()
    ways = [m for m in range(2, 11) if (s * s) % m == 0]  # m ids, s * s / m times each
    for r in range(y, y + h, s):
        for c in range(x, x + w, s):
            m = int(rng.choice(ways)) if ways else 1
            ids = rng.choice(12 if rng.rand() < 0.2 else 10, size=m, replace=False)
            p[r : r + s, c : c + s] = rng.permutation(np.repeat(ids, s * s // m)).reshape(s, s)
    return p


def _decode(eval_ttt: Any, decodes: list[dict[str, Any]]) -> list[np.ndarray]:
    """Upstream's decoded grid of each canvas, as an int array of its (rows, cols) (cols 0 for `[[], ...]`)."""
    grids: list[np.ndarray | None] = [None] * len(decodes)
    for C in sorted({d["canvas"] for d in decodes}):
        rows = [i for i, d in enumerate(decodes) if d["canvas"] == C]
        preds = torch.tensor(np.stack([decodes[i]["preds"] for i in rows]))
        batch = {
            "inputs": preds,  # the stand-in model's answer
            "attention_mask": torch.ones_like(preds),
            "task_ids": torch.zeros(len(rows), dtype=torch.long),
            "offset": torch.tensor([[decodes[i]["x"], decodes[i]["y"]] for i in rows]),
            "scale_factors": torch.tensor([decodes[i]["scale"] for i in rows]),
            "example_indices": torch.arange(len(rows)),
            "task_names": ["golden"] * len(rows),
        }
        with tempfile.TemporaryDirectory() as tmp, contextlib.chdir(tmp):  # it writes outputs/<save_name>/
            eval_ttt.generate_predictions(
                _ArgmaxIs(), [batch], torch.device("cpu"), img_size=C, eval_split="", attempt_nums=1, save_name="g"
            )
            answers = json.loads(Path("outputs/g/golden_predictions.json").read_text())
        for k, i in enumerate(rows):
            (grid,) = answers[str(k)]
            shape = (len(grid), len(grid[0]) if grid else 0)
            grids[i] = np.array(grid, dtype=np.int64).reshape(shape)
    return grids  # type: ignore[return-value]


class _ArgmaxIs(torch.nn.Module):
    """A stand-in model: logits (B, 12, C, C) whose argmax over the 12 ids is its input canvas."""

    def forward(self, inputs: torch.Tensor, task_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.one_hot(inputs, 12).permute(0, 3, 1, 2).float()


def _pad(a: np.ndarray, side: int) -> np.ndarray:
    out = np.full((side, side), -1, dtype=np.int8)
    out[: a.shape[0], : a.shape[1]] = a
    return out


def _unpad(a: np.ndarray, side: int) -> np.ndarray:
    return a[:side, :side].astype(np.int64)


@contextlib.contextmanager
def _upstream_tree(checkout: Path) -> Iterator[dict[str, str]]:
    """Import upstream's `src` and `utils` (namespace packages there) from `checkout`, with `tqdm` and
    `utils.analyze_prediction` stubbed; yields {file: sha256} of upstream's files imported, filled on exit."""
    checkout = checkout.resolve()
    if not (checkout / "src" / "ARC_loader.py").is_file():
        raise SystemExit(f"{checkout}: no src/ARC_loader.py; pass the root of an upstream VARC tree")
    names = ("src", "utils", "tqdm")
    saved = {k: sys.modules.pop(k) for k in list(sys.modules) if _is_ours(k, names)}
    for name, path in (("src", checkout / "src"), ("utils", checkout / "utils")):
        module = types.ModuleType(name)
        module.__path__ = [str(path)]  # a bare package: its own __init__.py (if any) is not run
        sys.modules[name] = module
    tqdm = types.ModuleType("tqdm")
    tqdm.tqdm = lambda iterable, *args, **kwargs: iterable  # type: ignore[attr-defined]
    sys.modules["tqdm"] = tqdm
    analyze = types.ModuleType("utils.analyze_prediction")
    analyze.analyze_data = lambda *args, **kwargs: None  # type: ignore[attr-defined]
    sys.modules["utils.analyze_prediction"] = analyze
    sources: dict[str, str] = {}
    try:
        yield sources
    finally:
        for name in [k for k in sys.modules if _is_ours(k, names)]:
            file = getattr(sys.modules.pop(name), "__file__", None)
            if file and Path(file).is_file() and Path(file).is_relative_to(checkout):
                sources[Path(file).relative_to(checkout).as_posix()] = hashlib.sha256(
                    Path(file).read_bytes()
                ).hexdigest()
        sys.modules.update(saved)


def _is_ours(name: str, names: tuple[str, ...]) -> bool:
    return any(name == n or name.startswith(n + ".") for n in names)


if __name__ == "__main__":
    main()
