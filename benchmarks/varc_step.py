"""VARC-ViT's training step against upstream VARC's own (ARCViT), side by side in one invocation: offline and TTT.

    .venv/bin/python benchmarks/varc_step.py --varc VARC_DIR --timm TIMM_DIR                 # tiny and arc, CPU
    .venv/bin/python benchmarks/varc_step.py --varc VARC_DIR --preset arc --device cuda --compile

VARC_DIR is a tree of lillian039/VARC (537b01e, docs/reference/upstream-varc.md) outside this repository; its
src/ARC_ViT.py and utils/pos_embed.py are imported from there at run time, unmodified. Upstream imports timm for
`PatchEmbed` only: TIMM_DIR is a folder holding the `timm` package (`pip install --target TIMM_DIR timm==1.0.12
--no-deps`, as tests/tools/record_varc_goldens.py); only its layers/patch_embed.py is loaded, so timm's package init
(which needs torchvision) never runs. einops must be importable (upstream's pos_embed.py).

Two phases, each at upstream's batch per GPU: the offline step (`--batch`, upstream's 32; on CPU 2 by default, so
that `arc` runs in minutes on 2 cores) and the test-time-training step (`--ttt-batch`, upstream's 8), with upstream's
task-token tables (400 offline tasks; 51 pseudo-tasks at TTT). One training step on each side:

* `arcpipe`: arcpipe's own step as its trainer runs it, `head.step(carry, batch)` on an arcpipe batch (inputs and
  labels as (B, 900) tokens, puzzle ids, `canvas_draws` from train/sampler.canvas_draws), which places and encodes
  both grids on the canvas on the device, runs the ViT and upstream's loss, and computes its metrics; then
  (loss / B).backward() and torch.optim.AdamW from arcpipe.optim.make_optimizers (optimizer="adamw");
* `arcpipe-model`: the same model (models/varc.py) on ready canvases, with upstream's loss: what the `upstream` row
  runs, so the two compare the model code alone;
* `upstream`: upstream's ARCViT, its loss (F.cross_entropy over the flattened pixels, ignore_index 10, the mean)
  and torch.optim.AdamW, in the lines of its training loop (offline_train_ARC.py L190-225), on the same canvases.
  Its data loader encodes each canvas on the CPU, before the step: that part is not timed here, while arcpipe's
  `arcpipe` row includes the encoding it does on the device.

Left out of every row: the gradient clipping (clip_grad_norm_ 1.0 in upstream's loops, in arcpipe's test-time
training, eval/ttt.py, and in its offline trainer with `grad_clip: 1.0`), upstream's GradScaler and its per-row
exact-match loop and loss.item() (host syncs), the data loader and the schedule. `--published` adds
an `upstream-published` row that has them all but the loader and schedule: fp16 autocast and a GradScaler on CUDA
(disabled on CPU, as upstream disables it), the clip, the per-row loop and loss.item().

Same weights: upstream's ARCViT is built under torch.manual_seed(0) and its state dict is loaded, strict, into
arcpipe's model. Same inputs: synthetic ARC grids (sides 3-30, seeded) as arcpipe token maps; the canvases given to
`arcpipe-model` and `upstream` are made from them by arcpipe's canvas module (data/canvas.py, checked against
upstream's loader by tests/unit/data/test_canvas.py) with the placement `arcpipe`'s step draws, so every side sees the
same pixels. Before timing, a check in float64, eval mode (no dropout), on 2 rows: arcpipe's step, arcpipe's model
and upstream's model give the same loss (printed, not enforced).

Precision: fp32 on CPU; bf16 autocast on both sides on CUDA (upstream trains in fp16 autocast with a GradScaler:
the `upstream-published` row). Eager unless `--compile` (`torch.compile` of arcpipe's `head.step`, of arcpipe's
model and of upstream's model, default mode; upstream compiles with mode reduce-overhead). Each (preset, phase,
side) runs in its own process, so that its peak RSS (resource.getrusage) is its own; `--warmup` steps untimed, then
up to `--steps` timed one by one (fewer once a side's pass `--row-seconds`; synchronised on CUDA): the median step
gives examples/s, and the best step is printed too. On a shared CPU, load that comes and goes can slow a step many
times over (two threads on two cores wait for each other); for the presets in `--interleave` (default tiny) the
sides' processes are all started first and then step in turn, the order rotating each round, so that such load
falls on every side alike; the others run one process after another, so that only one holds memory (arc at the TTT
batch of 8 peaks near 12 GB on CPU, and a waiting process keeps about 4 GB). The load average when each row's timed
steps began and ended is printed. On CUDA also the peak of allocated GPU memory and MFU
= arcpipe.models.flops.train_flops_per_example x examples/s / the GPU's dense bf16 peak (arcpipe.gpus).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import io
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from arcpipe.data import canvas
from arcpipe.data.augment import to_canvas
from arcpipe.gpus import peak_bf16_flops
from arcpipe.models.flops import train_flops_per_example
from arcpipe.models.losses import IGNORE_LABEL_ID
from arcpipe.models.registry import build_model, make_arch_config
from arcpipe.models.varc import count_parameters_excluding_task_tokens
from arcpipe.optim import make_optimizers
from arcpipe.train.sampler import canvas_draws

UPSTREAM = ("lillian039/VARC", "537b01e")
SIDES = ("arcpipe", "arcpipe-model", "upstream")
PUBLISHED = "upstream-published"
PHASES = {"offline": 400, "ttt": 51}  # upstream's task tokens: ARC-1's 400 training tasks; 51 pseudo-task files
LR, WEIGHT_DECAY, MAX_GRAD_NORM = 3e-4, 0.0, 1.0  # upstream's scripts and argument defaults
CHECK_ROWS = 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--varc", type=Path, required=True, help=f"a tree of {UPSTREAM[0]} at {UPSTREAM[1]}")
    parser.add_argument("--timm", type=Path, help="a folder holding the timm package (when timm is not importable)")
    parser.add_argument("--preset", choices=("tiny", "arc", "both"), default="both")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per row, at most")
    parser.add_argument(
        "--row-seconds",
        type=float,
        default=20.0,
        help="no more timed steps once a side's have taken this long (at least one is timed)",
    )
    parser.add_argument("--warmup", type=int, default=None, help="untimed steps first (default 1 eager, 3 compiled)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch", type=int, default=None, help="offline batch (default: upstream's 32; CPU: 2)")
    parser.add_argument("--ttt-batch", type=int, default=8, help="test-time-training batch (upstream's 8)")
    parser.add_argument("--phases", nargs="+", choices=tuple(PHASES), default=list(PHASES))
    parser.add_argument(
        "--threads", type=int, default=None, help="torch.set_num_threads in every side (default torch's)"
    )
    parser.add_argument(
        "--sides",
        nargs="+",
        choices=SIDES,
        default=list(SIDES),
        help="the sides to run (default all; GPU: arcpipe upstream)",
    )
    parser.add_argument("--compile", action="store_true", help="torch.compile every side")
    parser.add_argument("--published", action="store_true", help=f"add the {PUBLISHED} row (module doc)")
    parser.add_argument(
        "--interleave",
        choices=("none", "tiny", "all"),
        default="tiny",
        help="presets whose sides step in turn, all their processes alive at once (module doc); default tiny",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)  # a child process: one side of one row (JSON spec)
    args = parser.parse_args()
    if args.timm is not None:
        sys.path.insert(0, str(args.timm.resolve()))
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.child is not None:
        _child(args, json.loads(args.child))
        return
    if not (args.varc / "src" / "ARC_ViT.py").is_file():
        raise SystemExit(f"--varc {args.varc}: no src/ARC_ViT.py; pass the root of an upstream VARC tree")

    started = time.perf_counter()
    batch = args.batch or (32 if args.device == "cuda" else 2)
    warmup = args.warmup if args.warmup is not None else (3 if args.compile else 1)
    presets = ["tiny", "arc"] if args.preset == "both" else [args.preset]
    sides = sorted(args.sides, key=lambda side: side != "upstream") + ([PUBLISHED] if args.published else [])
    dtype = "bf16 autocast on both sides" if args.device == "cuda" else "fp32"
    print(
        f"VARC training step, arcpipe against upstream {UPSTREAM[0]} {UPSTREAM[1]}: device {_device_name(args.device)}"
        f", torch {torch.__version__}, {torch.get_num_threads()} threads on {os.cpu_count()} cores, load average "
        f"{os.getloadavg()[0]:.2f}\n{'compiled' if args.compile else 'eager'}, {dtype}; each side in its own process"
        f" (interleaved: {args.interleave}); {warmup} warm-up step(s), then up to "
        f"{args.steps} timed steps (fewer once a side's pass {args.row_seconds:.0f} s), median; AdamW lr {LR}, weight "
        f"decay {WEIGHT_DECAY}; upstream's clip, GradScaler and host syncs left out"
        + (f" (kept in {PUBLISHED})" if args.published else "")
    )
    if args.device == "cuda":
        print("precision: bf16 on both sides, for a like-for-like kernel comparison (upstream trains in fp16 autocast")
        print(f"with a GradScaler{': the ' + PUBLISHED + ' row' if args.published else ''})")
    rows: list[dict[str, Any]] = []
    for preset in presets:
        check = _Child(args, {"task": "check", "preset": preset})
        print(check.reply(), flush=True)
        check.process.wait()
        for phase in args.phases:
            b = batch if phase == "offline" else args.ttt_batch
            specs = [{"task": "measure", "preset": preset, "phase": phase, "batch": b, "side": s} for s in sides]
            interleave = args.interleave == "all" or args.interleave == preset
            print(_header(args.device == "cuda"), flush=True)  # each row as it is measured, upstream's first
            for group in [specs] if interleave else [[spec] for spec in specs]:
                for r in _measure(args, group, warmup):
                    rows.append(r)
                    print(_line(r, rows, args.device == "cuda"), flush=True)
    order = [*SIDES, PUBLISHED]
    rows.sort(key=lambda r: (presets.index(r["preset"]), args.phases.index(r["phase"]), order.index(r["side"])))
    print("\n" + _header(args.device == "cuda"))
    print("\n".join(_line(r, rows, args.device == "cuda") for r in rows))
    print(
        "\nvs upstream: the row's median (best) step / the upstream row's (< 1: faster than upstream's); the best step"
        " is the one least disturbed by other work on a shared machine. ex/s: batch / median step. Peak RSS:"
        " the side's process (torch, the model built, the steps; arcpipe's rows also built upstream's model on the CPU"
        " for its weights first). Load: the 1-minute load average when the timed steps began and ended."
    )
    for r in rows:
        steps = " ".join(f"{t * 1000:.0f}" for t in r["times_s"])
        first = " ".join(f"{t * 1000:.0f}" for t in r["warmup_s"])
        print(f"{r['preset']} {r['phase']} {r['side']}: warm-up {first} ms, timed {steps} ms")
    print(f"wall {time.perf_counter() - started:.0f} s, load average {os.getloadavg()[0]:.2f} at the end")


# ------------------------------------------------------------------------------------------------------------------
# the parent: one process per side; those of an interleaved preset step in turn (load that comes and goes then falls
# on every side alike)


class _Child:
    """A child process (`--child SPEC`) answering one line per request, each answer prefixed "> "."""

    def __init__(self, args: argparse.Namespace, spec: dict[str, Any]) -> None:
        command = [sys.executable, __file__, "--varc", str(args.varc), "--device", args.device]
        command += ["--child", json.dumps(spec)] + (["--timm", str(args.timm)] if args.timm else [])
        command += ["--compile"] if args.compile else []
        command += ["--threads", str(args.threads)] if args.threads is not None else []
        self.spec = spec
        self.stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (the child's whole life; read if it fails)
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, text=True
        )

    def reply(self, request: str | None = None) -> str:
        assert self.process.stdin is not None and self.process.stdout is not None
        if request is not None:
            self.process.stdin.write(request + "\n")
            self.process.stdin.flush()
        for line in self.process.stdout:
            if line.startswith("> "):
                return line[2:].rstrip("\n")
        self.process.wait()
        self.stderr.seek(0)
        raise SystemExit(f"{self.spec} failed (exit {self.process.returncode}):\n{self.stderr.read()[-4000:]}")


def _measure(args: argparse.Namespace, specs: list[dict[str, Any]], warmup: int) -> list[dict[str, Any]]:
    """Start one child per spec, wait until each is ready, then step them in turn (the order rotating each round):
    `warmup` untimed rounds, then timed rounds until `--steps` or until a side's timed steps pass `--row-seconds`."""
    children = [_Child(args, spec) for spec in specs]
    for child in children:
        child.reply()  # ready: built, weights loaded, batch on the device
    warm: list[list[float]] = [[] for _ in children]
    times: list[list[float]] = [[] for _ in children]
    load = [os.getloadavg()[0]]
    for round_ in range(warmup + args.steps):
        if round_ > warmup and max(sum(t) for t in times) >= args.row_seconds:
            break
        for k in range(len(children)):
            i = (k + round_) % len(children)
            (warm if round_ < warmup else times)[i].append(float(children[i].reply("step")))
    load.append(os.getloadavg()[0])
    rows = []
    for child, w, t in zip(children, warm, times, strict=True):
        result = json.loads(child.reply("result"))
        child.process.wait()
        median = statistics.median(t)
        mfu = result["flops_per_example"] * result["batch"] / median / result["peak"] if result["peak"] else None
        rows.append({**result, "warmup_s": w, "times_s": t, "median_s": median, "mfu": mfu, "load": load})
    return rows


def _header(cuda: bool) -> str:
    head = ["preset", "phase", "batch", "side", "params", "steps", "median step (ms)", "ex/s", "vs upstream"]
    head += ["best step (ms)", "best vs upstream", "peak RSS (MiB)"]
    head += (["GPU peak (GiB)", "MFU"] if cuda else []) + ["load"]
    return "| " + " | ".join(head) + " |\n|" + "---|" * len(head)


def _line(r: dict[str, Any], rows: list[dict[str, Any]], cuda: bool) -> str:
    """A table row; the ratios against the upstream row of the same preset and phase ("-" where none ran)."""
    key = (r["preset"], r["phase"], "upstream")
    base = next((u for u in rows if (u["preset"], u["phase"], u["side"]) == key), None)
    best = min(r["times_s"])
    ratio = "-" if base is None else f"{r['median_s'] / base['median_s']:.2f}x"
    best_ratio = "-" if base is None else f"{best / min(base['times_s']):.2f}x"
    cells = [r["preset"], r["phase"], str(r["batch"]), r["side"], f"{r['params'] / 1e6:.2f}M"]
    cells += [str(len(r["times_s"])), f"{r['median_s'] * 1000:.1f}", f"{r['batch'] / r['median_s']:.2f}"]
    cells += [ratio, f"{best * 1000:.1f}", best_ratio]
    cells.append(f"{r['rss_mib']:.0f}")
    if cuda:
        mfu = "-" if r["mfu"] is None else f"{100 * r['mfu']:.1f}%"
        cells += [f"{r['gpu_peak_gib']:.2f}", mfu]
    cells.append("-".join(f"{x:.1f}" for x in r["load"]))
    return "| " + " | ".join(cells) + " |"


def _device_name(device: str) -> str:
    return torch.cuda.get_device_name(0) if device == "cuda" else f"cpu ({torch.backends.cpu.get_cpu_capability()})"


# ------------------------------------------------------------------------------------------------------------------
# a child: one side of one row, or the check


def _child(args: argparse.Namespace, spec: dict[str, Any]) -> None:
    device = torch.device(args.device)
    arc_vit = _import_upstream(args.varc)
    if spec["task"] == "check":
        print("> " + _check(arc_vit, spec["preset"]), flush=True)
        return
    step, params = _setup(arc_vit, spec, device, args.compile)
    cfg = make_arch_config("varc", spec["preset"], {})
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    print("> ready", flush=True)
    for line in sys.stdin:
        if line.strip() == "step":
            print(f"> {_timed(step, device)!r}", flush=True)
            continue
        result = {
            **{k: spec[k] for k in ("preset", "phase", "batch", "side")},
            "params": params,
            "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "gpu_peak_gib": torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None,
            "flops_per_example": train_flops_per_example(cfg, seq_len=900).total,
            "peak": peak_bf16_flops(torch.cuda.get_device_name(device)) if device.type == "cuda" else None,
        }
        print("> " + json.dumps(result), flush=True)
        return


def _setup(
    arc_vit: types.ModuleType, spec: dict[str, Any], device: torch.device, compiled: bool
) -> tuple[Callable[[], None], int]:
    """(one training step of the side, its parameters without task tokens)."""
    preset, phase, B, side = spec["preset"], spec["phase"], spec["batch"], spec["side"]
    cfg = make_arch_config("varc", preset, {})
    num_tasks = PHASES[phase]
    upstream = _upstream_model(arc_vit, cfg, num_tasks)
    batch = {k: v.to(device) for k, v in _arcpipe_batch(B, num_tasks, cfg.image_size).items()}
    if side.startswith("upstream"):
        model = upstream.to(device).train()
        step = _upstream_step(model, batch, cfg, device, compiled=compiled, published=side == PUBLISHED)
        return step, count_parameters_excluding_task_tokens(model)
    head = build_model(cfg, vocab_size=12, seq_len=900, num_puzzle_identifiers=num_tasks, batch_size=B, device=device)
    head.model.inner.load_state_dict(upstream.state_dict(), strict=True)
    del upstream
    assert head.forward_dtype == (torch.bfloat16 if device.type == "cuda" else torch.float32), head.forward_dtype
    head.train()
    optimizers = make_optimizers(
        head,
        lr=LR,
        puzzle_emb_lr=LR,
        weight_decay=WEIGHT_DECAY,
        puzzle_emb_weight_decay=WEIGHT_DECAY,
        betas=(0.9, 0.999),  # torch's AdamW default, which upstream keeps
        optimizer="adamw",
    )
    assert len(optimizers) == 1 and isinstance(optimizers[0][0], torch.optim.AdamW), optimizers
    if side == "arcpipe":
        step = _arcpipe_step(head, optimizers[0][0], batch, compiled=compiled)
    else:
        step = _arcpipe_model_step(head, optimizers[0][0], batch, cfg, compiled=compiled)
    return step, count_parameters_excluding_task_tokens(head.model.inner)


def _arcpipe_step(head: Any, optimizer: torch.optim.Optimizer, batch: dict[str, torch.Tensor], compiled: bool):
    """arcpipe's trainer, for one micro-batch that is the whole batch (train/loop.py Trainer.train_step)."""
    step_fn = torch.compile(head.step) if compiled else head.step
    carry = head.initial_carry(batch)
    B = batch["inputs"].shape[0]

    def one() -> None:
        _, loss, _, _ = step_fn(carry, batch)
        (loss / B).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return one


def _arcpipe_model_step(
    head: Any, optimizer: torch.optim.Optimizer, batch: dict[str, torch.Tensor], cfg: Any, compiled: bool
):
    """arcpipe's ViT on ready canvases with upstream's loss."""
    pixels, mask, targets = _canvases(batch, cfg.image_size)
    task_ids = batch["puzzle_identifiers"].long()
    model = torch.compile(head.model.inner) if compiled else head.model.inner
    device_type, dtype = pixels.device.type, head.forward_dtype

    def one() -> None:
        with torch.autocast(device_type, dtype=dtype, enabled=dtype != torch.float32):
            logits = model(pixels, task_ids, mask)
        F.cross_entropy(logits.float(), targets, ignore_index=canvas.BACKGROUND).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return one


def _upstream_step(
    model: torch.nn.Module,
    batch: dict[str, torch.Tensor],
    cfg: Any,
    device: torch.device,
    compiled: bool,
    published: bool,
) -> Callable[[], None]:
    """Upstream's training loop body (offline_train_ARC.py L190-228; test_time_train_ARC.py L60-98 is the same), on
    the canvases its loader would give (its mask is long, as the loader's)."""
    inputs, mask, targets = _canvases(batch, cfg.image_size)
    attention_mask = mask.long()
    task_ids = batch["puzzle_identifiers"].long()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    forward = torch.compile(model) if compiled else model
    # published: upstream's fp16 autocast and GradScaler, both enabled on CUDA only (utils/load_model.py L132)
    scaler = torch.amp.GradScaler(enabled=published and device.type == "cuda")
    autocast_dtype = torch.float16 if published else torch.bfloat16
    autocast_on = device.type == "cuda"

    def one() -> None:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=autocast_dtype, enabled=autocast_on):
            logits = forward(inputs, task_ids, attention_mask=attention_mask)
            num_colors = logits.size(1)
            logits_flat = logits.permute(0, 2, 3, 1).reshape(-1, num_colors)
            loss = F.cross_entropy(logits_flat, targets.view(-1), ignore_index=canvas.BACKGROUND)
        if not published:
            loss.backward()
            optimizer.step()
            return
        predictions = logits.argmax(dim=1)
        for idx in range(inputs.size(0)):
            valid = targets[idx] != canvas.BACKGROUND
            if valid.any():
                bool(torch.equal(predictions[idx][valid], targets[idx][valid]))
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)
        scaler.step(optimizer)
        scaler.update()
        loss.item()

    return one


def _check(arc_vit: types.ModuleType, preset: str) -> str:
    """Both models on the same rows in float64, eval mode: arcpipe's step, arcpipe's model, upstream's model."""
    cfg = make_arch_config("varc", preset, {})
    upstream = _upstream_model(arc_vit, cfg, PHASES["ttt"]).double().eval()
    head = build_model(
        cfg, vocab_size=12, seq_len=900, num_puzzle_identifiers=PHASES["ttt"], batch_size=CHECK_ROWS, device="cpu"
    )
    head.model.inner.load_state_dict(upstream.state_dict(), strict=True)
    head = head.double().eval()
    head.forward_dtype = torch.float32  # autocast off: the model runs in its own dtype, float64
    batch = _arcpipe_batch(CHECK_ROWS, PHASES["ttt"], cfg.image_size)
    pixels, mask, targets = _canvases(batch, cfg.image_size)
    ids = batch["puzzle_identifiers"].long()
    with torch.no_grad():
        placed = head.place(batch)
        same_canvas = all(
            torch.equal(a, b)
            for a, b in zip(
                (*placed, *canvas.encode_inputs(batch["inputs"], placed, cfg.image_size)),
                (*_placement(batch, cfg.image_size), pixels, mask),
                strict=True,
            )
        )
        _, step_loss, _, _ = head.step(head.initial_carry(batch), batch)
        ours = head.model.inner(pixels, ids, mask)
        theirs = upstream(pixels, ids, attention_mask=mask.long())
        model_loss = F.cross_entropy(ours, targets, ignore_index=canvas.BACKGROUND)
        upstream_loss = F.cross_entropy(
            theirs.permute(0, 2, 3, 1).reshape(-1, 12), targets.view(-1), ignore_index=canvas.BACKGROUND
        )
    return (
        f"check {preset} (float64 weights, eval, {CHECK_ROWS} rows; arcpipe's step takes its loss from float32 "
        f"logits): loss arcpipe step {step_loss.item() / CHECK_ROWS:.12f}, "
        f"arcpipe model {model_loss.item():.12f}, upstream {upstream_loss.item():.12f}; max |logit difference| "
        f"{(ours - theirs).abs().max().item():.2e}; the step's canvases equal the given ones: {same_canvas}"
    )


# ------------------------------------------------------------------------------------------------------------------
# inputs


def _arcpipe_batch(B: int, num_tasks: int, image_size: int) -> dict[str, torch.Tensor]:
    """B rows of arcpipe's training batch: random grids (sides 3-30; half the outputs the input's shape) as (B, 900)
    token maps at the map's corner, labels with PAD ignored, task ids, and the canvas draws of step 1."""
    rng = np.random.default_rng(0)
    inputs, labels = [], []
    for _ in range(B):
        h, w = rng.integers(3, 31, size=2)
        oh, ow = (h, w) if rng.random() < 0.5 else rng.integers(3, 31, size=2)
        inputs.append(to_canvas(rng.integers(0, 10, (h, w)).astype(np.uint8)))
        label = to_canvas(rng.integers(0, 10, (oh, ow)).astype(np.uint8)).astype(np.int32)
        label[label == 0] = IGNORE_LABEL_ID
        labels.append(label)
    assert image_size >= canvas.SIDE + 2
    return {
        "inputs": torch.from_numpy(np.stack(inputs).astype(np.int32)),
        "labels": torch.from_numpy(np.stack(labels)),
        "puzzle_identifiers": torch.from_numpy(rng.integers(0, num_tasks, B).astype(np.int32)),
        "canvas_draws": torch.from_numpy(canvas_draws(0, 1, np.arange(B))),
    }


def _placement(batch: dict[str, torch.Tensor], image_size: int) -> canvas.Placement:
    # upstream's rule, as arcpipe's step applies it to a row with a label: ranges from the larger of both grids
    _, _, h, w = canvas.grid_boxes(batch["inputs"])
    _, _, oh, ow = canvas.grid_boxes(batch["labels"])
    return canvas.draw_placement((h, w), (oh, ow), batch["canvas_draws"], image_size)


def _canvases(batch: dict[str, torch.Tensor], image_size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(pixels, mask, targets), each (B, S, S), as upstream's loader makes them (pixels and targets long)."""
    placement = _placement(batch, image_size)
    pixels, mask = canvas.encode_inputs(batch["inputs"], placement, image_size)
    return pixels, mask, canvas.encode_targets(batch["labels"], placement, image_size)


# ------------------------------------------------------------------------------------------------------------------
# upstream's code


def _upstream_model(arc_vit: types.ModuleType, cfg: Any, num_tasks: int) -> torch.nn.Module:
    """Upstream's ARCViT as its load_model.get_model_arch builds it, under torch.manual_seed(0), on the CPU."""
    torch.manual_seed(0)
    with contextlib.redirect_stdout(io.StringIO()):  # its constructor prints the patch size
        return arc_vit.ARCViT(
            num_tasks=num_tasks,
            image_size=cfg.image_size,
            num_colors=cfg.num_colors,
            embed_dim=cfg.embed_dim,
            depth=cfg.depth,
            num_heads=cfg.num_heads,
            mlp_dim=cfg.mlp_dim,
            dropout=cfg.dropout,
            patch_size=cfg.patch_size,
        )


def _import_upstream(checkout: Path) -> types.ModuleType:
    """Upstream's src/ARC_ViT.py, with `src` and `utils` as bare packages of the checkout and timm's PatchEmbed as
    `timm.models.vision_transformer.PatchEmbed`, timm's own __init__ not run (it imports torchvision). A child
    process only: the modules stay in sys.modules."""
    checkout = checkout.resolve()
    timm_spec = importlib.util.find_spec("timm")
    if timm_spec is None or timm_spec.submodule_search_locations is None:
        raise SystemExit("timm is not importable: pass --timm TIMM_DIR (module doc)")
    timm_dir = Path(next(iter(timm_spec.submodule_search_locations)))
    for name, path in (("src", checkout / "src"), ("utils", checkout / "utils"), ("timm", timm_dir)):
        sys.modules[name] = _package(name, path)
    sys.modules["timm.layers"] = _package("timm.layers", timm_dir / "layers")
    vision_transformer = types.ModuleType("timm.models.vision_transformer")
    patch_embed = importlib.import_module("timm.layers.patch_embed")
    vision_transformer.PatchEmbed = patch_embed.PatchEmbed  # type: ignore[attr-defined]  # what timm re-exports
    sys.modules["timm.models"] = types.ModuleType("timm.models")
    sys.modules["timm.models.vision_transformer"] = vision_transformer
    return importlib.import_module("src.ARC_ViT")


def _package(name: str, path: Path) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__path__ = [str(path)]
    return module


def _timed(step: Callable[[], None], device: torch.device) -> float:
    _sync(device)
    t0 = time.perf_counter()
    step()
    _sync(device)
    return time.perf_counter() - t0


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


if __name__ == "__main__":
    main()
