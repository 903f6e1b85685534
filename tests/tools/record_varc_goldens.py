"""Record tests/data/models/golden_varc.pt, the golden of tests/unit/models/test_varc.py, by running upstream VARC's
own model code.

    PYTHONPATH=TIMM_DIR python tests/tools/record_varc_goldens.py --varc VARC_DIR [--output tests/data/models]

VARC_DIR is a tree of lillian039/VARC at the commit in UPSTREAM below (for example
`git --git-dir=<clone>/.git archive <commit> | tar -x -C VARC_DIR`); its src/ARC_ViT.py and utils/pos_embed.py are
imported from there at run time and never copied here. Upstream needs timm (for `PatchEmbed` only) and einops; timm
is not an arcpipe dependency, so install it beside the repository (`pip install --target TIMM_DIR timm==1.0.12
--no-deps`) and put it on PYTHONPATH for this script only. Only timm's layers/patch_embed.py (and the three small
modules it imports) is loaded, under a bare `timm` package, so timm's torchvision imports are never run.

The golden, in float64 on the CPU, for a small config that still takes every path (an embedding of 16 in two heads
of 8 channels, i.e. two RoPE frequencies per axis; two layers; an MLP of 12, so that its two matrices differ in
shape; a 16 x 16 canvas of 2 x 2 patches, 64 patch tokens):

* `init`: the tensors of upstream's initialisation under torch.manual_seed(INIT_SEED) that the golden then changes
  (fp32, as constructed); the others are unchanged in `weights`. arcpipe's constructor, in upstream's order, must
  draw the same numbers.
* `weights`: upstream's state dict (upstream's keys) after that init, with the embeddings scaled up and the
  LayerNorms and the head's bias drawn at random, so that each of them changes the result (at init the embeddings
  are ~0.02 and the LayerNorms the identity);
* `inputs`: four rows as upstream's loader makes them (grids of several sizes, some at odd offsets so that patches
  are partly on the grid, most patches fully off it; one row of random colours under a scattered mask), task ids
  with a repeat, and targets with the ignored background (10) and the border (11);
* `logits` of upstream's model in eval mode (no dropout), upstream's loss on them (per-pixel cross entropy,
  ignore_index 10, the mean over the other pixels), and every parameter's gradient of that loss.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib
import importlib.util
import sys
import types
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

UPSTREAM = ("lillian039/VARC", "537b01ed95944cfb080455b795f4888db8d0484b")
# upstream ARCViT's arguments (VARCConfig's field names), and the number of task tokens
CONFIG = dict(image_size=16, patch_size=2, embed_dim=16, depth=2, num_heads=2, mlp_dim=12, dropout=0.1, num_colors=12)
NUM_TASKS = 5
INIT_SEED = 0
DATA_SEED = 1
IGNORE_INDEX, BORDER = 10, 11
# (top, left, height, width) of each row's input grid, and its output's (height, width) at the same offset
GRIDS = [((1, 1, 3, 5), (4, 2)), ((3, 2, 9, 12), (7, 13)), ((1, 1, 14, 14), (14, 14))]
TASK_IDS = [0, 3, 4, 3]
MAX_BYTES = 300_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--varc", type=Path, required=True, help=f"{UPSTREAM[0]} at {UPSTREAM[1][:7]}")
    parser.add_argument("--output", type=Path, default=Path(__file__).parents[1] / "data" / "models")
    args = parser.parse_args()
    golden = record(args.varc)
    path = args.output / "golden_varc.pt"
    torch.save(golden, path)
    size = path.stat().st_size
    print(f"{path}: loss {golden['loss'].item():.6f}, {size // 1024} KiB")
    if size > MAX_BYTES:
        raise SystemExit(f"{path} is {size} bytes, over {MAX_BYTES}: make the config or the batch smaller")


def record(checkout: Path) -> dict[str, Any]:
    with _upstream_tree(checkout) as sources:
        arc_vit = importlib.import_module("src.ARC_ViT")
        torch.manual_seed(INIT_SEED)
        model = arc_vit.ARCViT(num_tasks=NUM_TASKS, **CONFIG)
    init = {k: v.clone() for k, v in model.state_dict().items()}

    g = torch.Generator().manual_seed(DATA_SEED)
    changed = {}
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name in ("color_embed.weight", "task_token_embed.weight", "positional_embed"):
                p.mul_(32)  # std 0.02 -> 0.64, exactly
            elif "norm" in name and name.endswith("weight"):
                p.copy_(1 + 0.3 * torch.randn(p.shape, generator=g))
            elif "norm" in name or name == "head.bias":
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
            else:
                continue
            changed[name] = init[name]
    model = model.double().eval()  # eval: every dropout off, in the forward and the gradient

    pixels, mask, targets = _inputs(g)
    task_ids = torch.tensor(TASK_IDS)
    logits = model(pixels, task_ids, attention_mask=mask)
    C = logits.shape[1]
    loss = F.cross_entropy(logits.permute(0, 2, 3, 1).reshape(-1, C), targets.view(-1), ignore_index=IGNORE_INDEX)
    loss.backward()
    return {
        "upstream": {
            "repo": UPSTREAM[0],
            "commit": UPSTREAM[1],
            "class": "src.ARC_ViT.ARCViT",
            "arguments": {**CONFIG, "num_tasks": NUM_TASKS},
            "sources_sha256": dict(sorted(sources.items())),
            "timm": version("timm"),
            "changes_to_init": "color_embed, task_token_embed, positional_embed x 32; LayerNorm weights 1 + "
            "0.3 N(0, 1), LayerNorm biases and head.bias 0.3 N(0, 1)",
        },
        "torch_version": str(torch.__version__),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "config": CONFIG,
        "num_tasks": NUM_TASKS,
        "init_seed": INIT_SEED,
        "init": changed,
        "weights": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "pixels": pixels,
        "task_ids": task_ids,
        "mask": mask,
        "targets": targets,
        "logits": logits.detach(),
        "loss": loss.detach(),
        "grads": {k: p.grad.clone() for k, p in model.named_parameters()},
    }


def _inputs(g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(pixels, mask, targets), each (B, S, S), as upstream's loader writes them (upstream-varc.md 2.3)."""
    S = CONFIG["image_size"]
    B = len(TASK_IDS)
    pixels = torch.full((B, S, S), IGNORE_INDEX)
    mask = torch.zeros((B, S, S), dtype=torch.bool)
    targets = torch.full((B, S, S), IGNORE_INDEX)
    for row, ((top, left, h, w), (oh, ow)) in enumerate(GRIDS):
        pixels[row, top : top + h, left : left + w] = torch.randint(0, 10, (h, w), generator=g)
        mask[row, top : top + h, left : left + w] = True
        targets[row, top : top + oh, left : left + ow] = torch.randint(0, 10, (oh, ow), generator=g)
        targets[row, top : top + oh + 1, left + ow] = BORDER  # right of the grid, down to the corner
        targets[row, top + oh, left : left + ow + 1] = BORDER  # below it
    # the last row: any token anywhere, a scattered mask (patches with 0 to 4 pixels on), targets with every class
    last = len(GRIDS)
    pixels[last] = torch.randint(0, 12, (S, S), generator=g)
    mask[last] = torch.rand((S, S), generator=g) < 0.2
    targets[last] = torch.randint(0, 12, (S, S), generator=g)
    return pixels, mask, targets


@contextlib.contextmanager
def _upstream_tree(checkout: Path) -> Iterator[dict[str, str]]:
    """Import upstream's `src` and `utils` (namespace packages there) from `checkout`, and timm's PatchEmbed as
    `timm.models.vision_transformer.PatchEmbed`; yields {file: sha256} of the files imported, filled on exit."""
    checkout = checkout.resolve()
    if not (checkout / "src" / "ARC_ViT.py").is_file():
        raise SystemExit(f"{checkout}: no src/ARC_ViT.py; pass the root of an upstream VARC tree")
    timm_spec = importlib.util.find_spec("timm")
    if timm_spec is None or timm_spec.submodule_search_locations is None:
        raise SystemExit("timm is not importable: install it beside the repository and put it on PYTHONPATH")
    timm_dir = Path(next(iter(timm_spec.submodule_search_locations)))
    names = ("src", "utils", "timm", "timm.layers", "timm.models", "timm.models.vision_transformer")
    saved = {k: sys.modules.pop(k) for k in list(sys.modules) if _is_ours(k, names)}
    for name, path in (("src", checkout / "src"), ("utils", checkout / "utils"), ("timm", timm_dir)):
        sys.modules[name] = _package(name, path)
    sys.modules["timm.layers"] = _package("timm.layers", timm_dir / "layers")
    patch_embed = importlib.import_module("timm.layers.patch_embed")
    vision_transformer = types.ModuleType("timm.models.vision_transformer")
    vision_transformer.PatchEmbed = patch_embed.PatchEmbed  # type: ignore[attr-defined]  # what timm's re-exports
    sys.modules["timm.models"] = types.ModuleType("timm.models")
    sys.modules["timm.models.vision_transformer"] = vision_transformer
    sources: dict[str, str] = {}
    try:
        yield sources
    finally:
        for name in [k for k in sys.modules if _is_ours(k, names)]:
            file = getattr(sys.modules.pop(name), "__file__", None)
            if file and Path(file).is_file():
                root = checkout if Path(file).is_relative_to(checkout) else timm_dir.parent  # timm/layers/...
                sources[Path(file).relative_to(root).as_posix()] = hashlib.sha256(Path(file).read_bytes()).hexdigest()
        sys.modules.update(saved)


def _package(name: str, path: Path) -> types.ModuleType:
    """A bare package module: its submodules import from `path`, its own __init__.py is not run."""
    module = types.ModuleType(name)
    module.__path__ = [str(path)]
    return module


def _is_ours(name: str, names: tuple[str, ...]) -> bool:
    return any(name == n or name.startswith(n + ".") for n in names)


if __name__ == "__main__":
    main()
