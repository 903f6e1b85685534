"""LoopViT's training steps against upstream LoopViT's own (LoopARCViT), side by side in one invocation, CPU or GPU.

    .venv/bin/python benchmarks/loopvit_step.py --loopvit LOOPVIT_DIR --timm TIMM_DIR [--presets tiny large]
    python3 benchmarks/loopvit_step.py --loopvit LOOPVIT_DIR --presets large --device cuda --compile \
        --phases offline ttt --exits on off          # the GPU checklist's row set (benchmarks/gpu_checks.sh loopvit)

LOOPVIT_DIR is a tree of WenjieShu/LoopViT (4cdbdf4) outside this repository; its src/ARC_LoopViT.py, src/ARC_ViT.py,
src/ARC_ViT1.py and utils/pos_embed.py are imported from there at run time, unmodified (timm and einops as for
benchmarks/varc_step.py: only timm's layers/patch_embed.py is loaded).

One row per (preset, phase, exit, side), each in its own process (so that its peak RSS and GPU memory are its own),
on the same weights (upstream's model built under torch.manual_seed(0), its state dict loaded strict into arcpipe's)
and the same synthetic canvases (a grid of side 3-30 per row at offset 1, seeded). Phases:

* `offline`: the step of upstream's offline trainer (offline_train_loop_ARC.py): its loss (pixel cross entropy +
  gate_entropy_weight x negative gate entropy + loop_penalty_weight x loop penalty), backward, gradient clipping at
  1 and AdamW (lr 3e-4, no weight decay); batch: the published script's 32 on CUDA, BATCH on CPU;
* `ttt`: the step of its test-time trainer (test_time_train_ARC.py, VARC's): the pixel loss alone, batch 8.

Exit `on`: dynamic exit in the forward (the published offline recipe); `off`: every loop step, no exit test. With
`on` and the preset's min_loop_steps raised to max_loop_steps (as upstream's published run: `--min-exit` keeps every
row to the last step) the exit test runs without cutting a step, so `on` and `off` differ by the test's own cost;
`--early` keeps the preset's min_loop_steps (rows may exit early: the steps then depend on the weights).

Sides: `upstream`: LoopARCViT(..., dynamic_exit=...) and `_compute_gate_regularizers` compiled from the text of its
offline_train_loop_ARC.py; `arcpipe`: models/loopvit.LoopViT(..., dynamic_exit=...) and loop_regularizers.

Precision: fp32 on CPU; bf16 autocast on both sides on CUDA, a like-for-like kernel comparison (upstream's trainers
run fp16 autocast with a GradScaler; arcpipe's trainer runs bf16, docs/loopvit.md). Eager unless `--compile`
(torch.compile of each side's model, default mode). `--warmup` untimed steps (default 1 eager, 3 compiled: the
compilation), then `--steps` timed: the median step, examples/s and the ratio arcpipe / upstream (< 1: arcpipe
faster). On CUDA also the peak of allocated GPU memory and MFU = arcpipe.models.flops.train_flops_per_example (every
loop step: the planned maximum) x examples/s / the GPU's dense bf16 peak (arcpipe.gpus).
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


CUDA_BATCH = {"offline": 32, "ttt": 8}  # the published scripts' --batch-size (offline; test-time training)
TTT_BATCH = 8


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--loopvit", type=Path, required=True, help=f"a tree of {UPSTREAM[0]} at {UPSTREAM[1]}")
    parser.add_argument("--timm", type=Path, help="a folder holding the timm package (when timm is not importable)")
    parser.add_argument("--presets", nargs="+", default=["tiny", "large"], choices=tuple(BATCH))
    parser.add_argument("--phases", nargs="+", default=["offline"], choices=("offline", "ttt"))
    parser.add_argument("--exits", nargs="+", default=["on"], choices=("on", "off"), help="dynamic exit (offline)")
    parser.add_argument("--early", action="store_true", help="keep the preset's min_loop_steps (rows may exit early)")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--compile", action="store_true", help="torch.compile each side's model")
    parser.add_argument("--batch", type=int, help="rows per step (default: BATCH on CPU, the scripts' on CUDA)")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=None, help="untimed steps first (default 1 eager, 3 compiled)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.timm is not None:
        sys.path.insert(0, str(args.timm.resolve()))
    if args.warmup is None:
        args.warmup = 3 if args.compile else 1
    torch.set_num_threads(args.threads)
    if args.child:
        print(json.dumps(_child(args, json.loads(args.child))))
        return
    started = time.perf_counter()
    cuda = args.device == "cuda"
    where = torch.cuda.get_device_name(0) if cuda else f"CPU, {args.threads} thread(s) on {os.cpu_count()} cores"
    print(
        f"LoopViT training steps, arcpipe against upstream {UPSTREAM[0]} {UPSTREAM[1]}: {where}, torch "
        f"{torch.__version__}, {'bf16 autocast' if cuda else 'fp32'}, {'compiled' if args.compile else 'eager'}, "
        f"{args.warmup} warm-up + {args.steps} timed steps (median), each side in its own process; load average "
        f"{os.getloadavg()[0]:.2f}"
    )
    head = f"{'preset':<7} {'phase':<8} {'exit':<5} {'side':<9} {'batch':>5} {'params':>11} {'step ms':>9} {'ex/s':>8}"
    head += f" {'RSS MB':>7}" + (f" {'GPU GiB':>8} {'MFU':>6}" if cuda else "") + f" {'ratio':>6}"
    print(head)
    for preset in args.presets:
        for phase in args.phases:
            for exit_on in args.exits if phase == "offline" else ["off"]:
                base = None
                for side in ("upstream", "arcpipe"):
                    spec = {"preset": preset, "side": side, "phase": phase, "exit": exit_on == "on"}
                    try:
                        r = _spawn(args, spec)
                    except subprocess.CalledProcessError as err:
                        print(f"{preset:<7} {phase:<8} {exit_on:<5} {side:<9} failed:\n{err.stderr.strip()[-1500:]}")
                        continue
                    median = statistics.median(r["times_s"])
                    base = base or median
                    line = f"{preset:<7} {phase:<8} {exit_on:<5} {side:<9} {r['batch']:>5} {r['params']:>11,} "
                    line += f"{median * 1000:>9.1f} {r['batch'] / median:>8.1f} {r['rss_mb']:>7.0f}"
                    if cuda:
                        mfu = r["flops_per_example"] * r["batch"] / median / r["peak"] if r["peak"] else None
                        line += f" {r['gpu_peak_gib']:>8.2f} " + ("-" if mfu is None else f"{100 * mfu:>5.1f}%")
                    line += f" {median / base:>6.2f}   warm-up {r['warmup_s']:.1f} s, steps "
                    line += " ".join(f"{t * 1000:.1f}" for t in r["times_s"]) + f" ms, loss {r['loss']:.6f}"
                    print(line, flush=True)
    print(f"wall {time.perf_counter() - started:.0f} s, load average {os.getloadavg()[0]:.2f} at the end")


def _spawn(args: argparse.Namespace, spec: dict[str, Any]) -> dict[str, Any]:
    argv = [sys.executable, __file__, "--loopvit", str(args.loopvit), "--child", json.dumps(spec)]
    argv += ["--steps", str(args.steps), "--warmup", str(args.warmup), "--threads", str(args.threads)]
    argv += ["--device", args.device] + (["--compile"] if args.compile else []) + (["--early"] if args.early else [])
    argv += ["--batch", str(args.batch)] if args.batch else []
    argv += ["--timm", str(args.timm)] if args.timm is not None else []
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
    return json.loads(out)


def _child(args: argparse.Namespace, spec: dict[str, Any]) -> dict[str, Any]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "tools"))
    import record_varc_goldens as importer  # the upstream importer (src, utils and timm's PatchEmbed)

    from arcpipe.gpus import peak_bf16_flops
    from arcpipe.models.flops import train_flops_per_example

    device = torch.device(args.device)
    cfg = make_arch_config("loopvit", spec["preset"], {})
    if not args.early:
        cfg = cfg.model_copy(update={"min_loop_steps": cfg.max_loop_steps})  # as the published run
    ttt = spec["phase"] == "ttt"
    batch = args.batch or (CUDA_BATCH[spec["phase"]] if device.type == "cuda" else TTT_BATCH if ttt else None)
    batch = batch or BATCH[spec["preset"]]
    # Upstream's modules stay imported for the process's life (a process of its own): the compiler imports them
    # again by name while it traces (held in a name of its own: a collected generator would close the tree).
    upstream_tree = importer._upstream_tree(args.loopvit.resolve())
    upstream_tree.__enter__()
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
    arcpipe_side = spec["side"] == "arcpipe"
    if arcpipe_side:
        model: torch.nn.Module = LoopViT(cfg, num_tasks=NUM_TASKS)
        model.load_state_dict(upstream.state_dict(), strict=True)
        del upstream
    else:
        model = upstream
    model.to(device).train()
    forward = torch.compile(model) if args.compile else model
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
    pixels, mask, targets, task_ids = (t.to(device) for t in (pixels, mask, targets, task_ids))
    weights = (cfg.gate_entropy_weight, cfg.loop_penalty_weight)
    dynamic = spec["exit"] and not ttt
    cuda = device.type == "cuda"

    def step() -> float:
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
            if arcpipe_side:
                out = forward(pixels, task_ids, mask, dynamic_exit=dynamic)
                logits = out.logits
                terms = None if ttt else loop_regularizers(out, cfg.max_loop_steps)
            else:
                logits, meta = forward(
                    pixels, task_ids, attention_mask=mask, dynamic_exit=dynamic, gate_threshold=cfg.exit_gate_threshold
                )
                terms = None if ttt else regularizers(meta, argparse.Namespace(disable_exit_gate=False))
            C = logits.shape[1]
            flat = logits.float().permute(0, 2, 3, 1).reshape(-1, C)
            loss = F.cross_entropy(flat, targets.view(-1), ignore_index=IGNORE_INDEX)
            if terms is not None:
                loss = loss + weights[0] * terms[0] + weights[1] * terms[1]
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.detach()

    torch.manual_seed(2)
    t0 = time.perf_counter()
    first = torch.zeros(())
    for i in range(args.warmup):
        value = step()
        first = value if i == 0 else first
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    warmup_s = time.perf_counter() - t0
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        step()
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    params = sum(p.numel() for k, p in model.named_parameters() if "task_token" not in k)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "times_s": times,
        "warmup_s": warmup_s,
        "batch": batch,
        "params": params,
        "rss_mb": rss_mb,
        "loss": float(first),
        "gpu_peak_gib": torch.cuda.max_memory_allocated(device) / 2**30 if cuda else None,
        "flops_per_example": train_flops_per_example(cfg, seq_len=900).total,
        "peak": peak_bf16_flops(torch.cuda.get_device_name(device)) if cuda else None,
    }


if __name__ == "__main__":
    main()
