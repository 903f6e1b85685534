"""Record tests/data/models/golden_varc_unet.pt, the golden of tests/unit/models/test_varc_unet.py, by running
upstream VARC's own U-Net code.

    PYTHONPATH=DIFFUSERS_DIR python tests/tools/record_varc_unet_goldens.py --varc VARC_DIR [--output tests/data/models]

VARC_DIR is a tree of lillian039/VARC at the commit in UPSTREAM below; its src/ARC_UNet.py is imported from there at
run time and never copied here. It needs diffusers (arcpipe's `unet` extra: `pip install 'arcpipe[unet]'`, or
`pip install --target DIFFUSERS_DIR diffusers==<the pin in pyproject.toml>` beside the repository).

Two records:

* `published`: upstream's ARCUNet(size="big", image_size=64, num_colors=12) as upstream's offline script builds it
  (on the meta device): the arguments it gives diffusers' UNet2DConditionModel, and its parameter count without the
  task tokens (upstream's `count_parameters`), which arcpipe's `arc` preset must reproduce;
* the golden, in float64 on the CPU: upstream's ARCUNet(size="big") on a 16 x 16 canvas, with only the widths of
  its UNet2DConditionModel scaled down (WIDTHS: channels 8, 16, 16, two heads, four norm groups, a task token of 16;
  the block types, two layers per block, the mid block and every other argument are upstream's own, intercepted at
  the call) and its task-token table rebuilt at that width (trunc-normal 0.02, as upstream's init):

  - `weights`: the state dict (upstream's keys) after init, with the two embeddings scaled up (x 32) and every
    GroupNorm/LayerNorm weight and bias drawn at random (at init they are the identity), in float32;
  - `inputs`: VARC-ViT's golden rows (record_varc_goldens._inputs: grids of several sizes at odd offsets, one row of
    random colours), task ids with a repeat, targets with the ignored background (10) and the border (11);
  - `logits` of upstream's model in eval mode, upstream's loss on them (per-pixel cross entropy, ignore_index 10,
    the mean over the other pixels), and every parameter's gradient of that loss (float32, to keep the file small).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).parent))
from record_varc_goldens import _inputs  # noqa: E402  (VARC-ViT's golden rows, on the same 16 x 16 canvas)

UPSTREAM = ("lillian039/VARC", "537b01ed95944cfb080455b795f4888db8d0484b")
PUBLISHED = dict(num_tasks=400, image_size=64, num_colors=12, size="big")  # offline_train_VARC_Unet.sh
IMAGE_SIZE = 16
EMBED_DIM = 16
# the only arguments of upstream's UNet2DConditionModel call that the golden changes (upstream: 160/320/320, 320, 8, 32)
WIDTHS = dict(
    block_out_channels=(EMBED_DIM // 2, EMBED_DIM, EMBED_DIM),
    cross_attention_dim=EMBED_DIM,
    attention_head_dim=2,
    norm_num_groups=4,
)
# the same model as arcpipe's config (VARCUNetConfig's fields)
CONFIG = dict(image_size=IMAGE_SIZE, embed_dim=EMBED_DIM, layers_per_block=2, mid_block=True, num_heads=2,
              norm_num_groups=4, num_colors=12)  # fmt: skip
NUM_TASKS = 5
INIT_SEED = 0
DATA_SEED = 1
IGNORE_INDEX = 10
TASK_IDS = [0, 3, 4, 3]
MAX_BYTES = 1_700_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--varc", type=Path, required=True, help=f"{UPSTREAM[0]} at {UPSTREAM[1][:7]}")
    parser.add_argument("--output", type=Path, default=Path(__file__).parents[1] / "data" / "models")
    args = parser.parse_args()
    golden = record(args.varc)
    path = args.output / "golden_varc_unet.pt"
    torch.save(golden, path)
    size = path.stat().st_size
    print(
        f"{path}: loss {golden['loss'].item():.6f}, published {golden['published']['parameters']:,}, {size // 1024} KiB"
    )
    if size > MAX_BYTES:
        raise SystemExit(f"{path} is {size} bytes, over {MAX_BYTES}: make the config or the batch smaller")


def record(checkout: Path) -> dict[str, Any]:
    source = checkout.resolve() / "src" / "ARC_UNet.py"
    if not source.is_file():
        raise SystemExit(f"{checkout}: no src/ARC_UNet.py; pass the root of an upstream VARC tree")
    spec = importlib.util.spec_from_file_location("upstream_ARC_UNet", source)
    assert spec is not None and spec.loader is not None
    arc_unet = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(arc_unet)
    unet = arc_unet.UNet2DConditionModel
    calls: list[dict[str, Any]] = []

    def published_unet(**kwargs: Any) -> nn.Module:
        calls.append(kwargs)
        return unet(**kwargs)

    arc_unet.UNet2DConditionModel = published_unet
    with torch.device("meta"):
        big = arc_unet.ARCUNet(**PUBLISHED)
    published = {
        "arguments": PUBLISHED,
        "unet_kwargs": calls[-1],
        "parameters": sum(p.numel() for n, p in big.named_parameters() if "task_token" not in n),
    }

    def golden_unet(**kwargs: Any) -> nn.Module:
        calls.append(kwargs)
        return unet(**{**kwargs, **WIDTHS})

    arc_unet.UNet2DConditionModel = golden_unet
    torch.manual_seed(INIT_SEED)
    model = arc_unet.ARCUNet(num_tasks=NUM_TASKS, image_size=IMAGE_SIZE, num_colors=12, size="big")
    model.task_token_embed = nn.Embedding(NUM_TASKS, EMBED_DIM)  # upstream's is 320 wide: the only width it sets
    nn.init.trunc_normal_(model.task_token_embed.weight, std=0.02)

    g = torch.Generator().manual_seed(DATA_SEED)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name in ("color_embed.weight", "task_token_embed.weight"):
                p.mul_(32)  # std 0.02 -> 0.64, exactly
            elif "norm" in name and name.endswith("weight"):
                p.copy_(1 + 0.3 * torch.randn(p.shape, generator=g))
            elif "norm" in name and name.endswith("bias"):
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
    weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
    model = model.double().eval()

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
            "class": "src.ARC_UNet.ARCUNet",
            "arguments": {"num_tasks": NUM_TASKS, "image_size": IMAGE_SIZE, "num_colors": 12, "size": "big"},
            "unet_kwargs": {**calls[-1], **WIDTHS},
            "sources_sha256": {"src/ARC_UNet.py": hashlib.sha256(source.read_bytes()).hexdigest()},
            "diffusers": version("diffusers"),
            "changes": f"UNet2DConditionModel widths {WIDTHS}; task_token_embed rebuilt {NUM_TASKS} x {EMBED_DIM}; "
            "color_embed, task_token_embed x 32; norm weights 1 + 0.3 N(0, 1), norm biases 0.3 N(0, 1)",
        },
        "published": published,
        "torch_version": str(torch.__version__),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "config": CONFIG,
        "num_tasks": NUM_TASKS,
        "weights": weights,
        "pixels": pixels,
        "task_ids": task_ids,
        "mask": mask,
        "targets": targets,
        "logits": logits.detach(),
        "loss": loss.detach(),
        "grads": {k: p.grad.float() for k, p in model.named_parameters()},
    }


if __name__ == "__main__":
    main()
