"""LoopViT's training step against upstream LoopViT's own (LoopARCViT), side by side in one invocation, on CPU.

    .venv/bin/python benchmarks/loopvit_step.py --loopvit LOOPVIT_DIR --timm TIMM_DIR [--presets tiny large]

LOOPVIT_DIR is a tree of WenjieShu/LoopViT (4cdbdf4) outside this repository; its src/ARC_LoopViT.py, src/ARC_ViT.py,
src/ARC_ViT1.py and utils/pos_embed.py are imported from there at run time, unmodified (timm and einops as for
benchmarks/varc_step.py: only timm's layers/patch_embed.py is loaded).

One row per (preset, side), each in its own process (so that its peak RSS is its own), on the same weights (upstream's
model built under torch.manual_seed(0), its state dict loaded strict into arcpipe's) and the same synthetic canvases
(a grid of side 3-30 per row at offset 1, seeded): the step of upstream's offline trainer, dynamic exit on as its
published recipe, its loss (pixel cross entropy + gate_entropy_weight x negative gate entropy + loop_penalty_weight x
loop penalty), backward, gradient clipping at 1 and AdamW (lr 3e-4, no weight decay):

* `upstream`: LoopARCViT(..., dynamic_exit=True) and `_compute_gate_regularizers` compiled from the text of its
  offline_train_loop_ARC.py;
* `arcpipe`: models/loopvit.LoopViT(..., dynamic_exit=True) and loop_regularizers.

Both run every loop step here (the preset's min_loop_steps = max_loop_steps, as upstream's published run: no row
can exit before the last). fp32, eager, `--threads` threads. `--warmup` untimed steps, then `--steps` timed: the
median step, examples/s and the ratio arcpipe / upstream (< 1: arcpipe faster).
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from arcpipe.models.loopvit import LoopViT, loop_regularizers
from arcpipe.models.registry import make_arch_config

UPSTREAM = ("WenjieShu/LoopViT", "4cdbdf4")
LAYERS = {"vit": "src.ARC_ViT", "hybrid": "src.ARC_ViT1"}
BATCH = {"tiny": 8, "small": 2, "script": 1, "large": 1}
NUM_TASKS = 400
IGNORE_INDEX = 10


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--loopvit", type=Path, required=True, help=f"a tree of {UPSTREAM[0]} at {UPSTREAM[1]}")
    parser.add_argument("--timm", type=Path, help="a folder holding the timm package (when timm is not importable)")
    parser.add_argument("--presets", nargs="+", default=["tiny", "large"], choices=tuple(BATCH))
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.timm is not None:
        sys.path.insert(0, str(args.timm.resolve()))
    torch.set_num_threads(args.threads)
    if args.child:
        print(json.dumps(_child(args, json.loads(args.child))))
        return
    started = time.perf_counter()
    print(
        f"LoopViT training step, arcpipe against upstream {UPSTREAM[0]} {UPSTREAM[1]}: CPU, torch {torch.__version__}, "
        f"{args.threads} thread(s) on {os.cpu_count()} cores, fp32 eager, {args.warmup} warm-up + {args.steps} timed "
        f"steps (median), each side in its own process; load average {os.getloadavg()[0]:.2f}"
    )
    print(
        f"{'preset':<8} {'side':<9} {'batch':>5} {'params':>11} {'step ms':>9} {'ex/s':>7} {'RSS MB':>8} {'ratio':>6}"
    )
    for preset in args.presets:
        base = None
        for side in ("upstream", "arcpipe"):
            spec = {"preset": preset, "side": side}
            argv = [sys.executable, __file__, "--loopvit", str(args.loopvit), "--child", json.dumps(spec)]
            argv += ["--steps", str(args.steps), "--warmup", str(args.warmup), "--threads", str(args.threads)]
            if args.timm is not None:
                argv += ["--timm", str(args.timm)]
            out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
            r = json.loads(out)
            median = statistics.median(r["times_s"])
            base = base or median
            print(
                f"{preset:<8} {side:<9} {r['batch']:>5} {r['params']:>11,} {median * 1000:>9.0f} "
                f"{r['batch'] / median:>7.2f} {r['rss_mb']:>8.0f} {median / base:>6.2f}"
                f"   steps {' '.join(f'{t * 1000:.0f}' for t in r['times_s'])} ms, loss {r['loss']:.6f}",
                flush=True,
            )
    print(f"wall {time.perf_counter() - started:.0f} s, load average {os.getloadavg()[0]:.2f} at the end")


def _child(args: argparse.Namespace, spec: dict[str, Any]) -> dict[str, Any]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "tools"))
    import record_varc_goldens as importer  # the upstream importer (src, utils and timm's PatchEmbed)

    cfg = make_arch_config("loopvit", spec["preset"], {})
    cfg = cfg.model_copy(update={"min_loop_steps": cfg.max_loop_steps})  # as the published run: every step runs
    batch = BATCH[spec["preset"]]
    with importer._upstream_tree(args.loopvit.resolve()):
        loop = importlib.import_module("src.ARC_LoopViT")
        layer = importlib.import_module(LAYERS[cfg.block]).ARCTransformerEncoderLayer
        torch.manual_seed(0)
        upstream = loop.LoopARCViT(
            num_tasks=NUM_TASKS,
            image_size=cfg.image_size,
            num_colors=cfg.num_colors,
            embed_dim=cfg.embed_dim,
            loop_core_depth=cfg.loop_core_depth,
            max_loop_steps=cfg.max_loop_steps,
            min_loop_steps=cfg.min_loop_steps,
            num_heads=cfg.num_heads,
            mlp_dim=cfg.mlp_dim,
            dropout=cfg.dropout,
            patch_size=cfg.patch_size,
            layer_class=layer,
        )
    source = args.loopvit / "offline_train_loop_ARC.py"
    tree = ast.parse(source.read_text())
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_compute_gate_regularizers")
    namespace: dict[str, Any] = {"torch": torch, "Tuple": tuple}
    exec(compile(ast.Module(body=[node], type_ignores=[]), str(source), "exec"), namespace)
    regularizers = namespace["_compute_gate_regularizers"]
    if spec["side"] == "arcpipe":
        model: torch.nn.Module = LoopViT(cfg, num_tasks=NUM_TASKS)
        model.load_state_dict(upstream.state_dict(), strict=True)
        del upstream
    else:
        model = upstream
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.0)
    g = torch.Generator().manual_seed(1)
    S = cfg.image_size
    pixels = torch.full((batch, S, S), IGNORE_INDEX)
    mask = torch.zeros((batch, S, S), dtype=torch.bool)
    targets = torch.full((batch, S, S), IGNORE_INDEX)
    for row in range(batch):
        side = int(torch.randint(3, 31, (), generator=g))
        pixels[row, 1 : 1 + side, 1 : 1 + side] = torch.randint(0, 10, (side, side), generator=g)
        mask[row, 1 : 1 + side, 1 : 1 + side] = True
        targets[row, 1 : 1 + side, 1 : 1 + side] = torch.randint(0, 10, (side, side), generator=g)
    task_ids = torch.randint(0, NUM_TASKS, (batch,), generator=g)
    weights = (cfg.gate_entropy_weight, cfg.loop_penalty_weight)

    def step() -> float:
        opt.zero_grad(set_to_none=True)
        if spec["side"] == "arcpipe":
            out = model(pixels, task_ids, mask, dynamic_exit=True)
            logits = out.logits
            neg_entropy, penalty = loop_regularizers(out, cfg.max_loop_steps)
        else:
            logits, meta = model(
                pixels, task_ids, attention_mask=mask, dynamic_exit=True, gate_threshold=cfg.exit_gate_threshold
            )
            neg_entropy, penalty = regularizers(meta, argparse.Namespace(disable_exit_gate=False))
        C = logits.shape[1]
        loss = F.cross_entropy(logits.permute(0, 2, 3, 1).reshape(-1, C), targets.view(-1), ignore_index=IGNORE_INDEX)
        loss = loss + weights[0] * neg_entropy + weights[1] * penalty
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return float(loss)

    torch.manual_seed(2)
    first = 0.0
    for i in range(args.warmup):
        value = step()
        first = value if i == 0 else first
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    params = sum(p.numel() for k, p in model.named_parameters() if "task_token" not in k)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"times_s": times, "batch": batch, "params": params, "rss_mb": rss_mb, "loss": first}


if __name__ == "__main__":
    main()
