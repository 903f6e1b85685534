"""K tasks' test-time training in one batched step (eval/batched.py) against the same K tasks fitted one by one
(eval/ttt.fit_task, a job's fit at tasks_per_step 1): wall time, peak RSS, examples/s, and whether the answers agree.

    .venv/bin/python benchmarks/ttt_batched.py                       # CPU, tiny VARC-ViT: K = 1, 2, 4, 8
    python benchmarks/ttt_batched.py --preset arc --device cuda --compile --epochs 4 --ks 1 4 8 16 32 --separate-ks 1

Each (K, mode) runs in a process of its own, so that its peak RSS is its own: K synthetic tasks (random grids of
2 x 2 to 6 x 6, 4 views each, 8 to 24 demonstrations: tasks of different lengths, as ARC's), fitted from one
untrained model for --epochs epochs (ttt's recipe otherwise: AdamW 3e-4, batch 8, clip 1) either one after the
other (`separate`) or K a step (`batched`); then each fitted model answers its task's test rows (one per view).
Dropout is off, so that the two modes' answers can be compared: they must agree (every task's argmax canvas
identical). Timed: the fits alone (model building and answering aside). examples/s counts the demonstration rows
trained (each task's rows x its epochs), not the blank rows that pad a short batch or an empty slot. On CUDA the
fits are synchronised before the clock stops; --compile compiles the steps as a job does; MFU counts the
demonstration rows' training FLOPs (models/flops.py) against the GPU's dense bf16 peak (arcpipe.gpus).

Speed-up: the seconds K tasks take fitted one by one (measured at that K, or at the last K in --separate-ks: a
task's seconds alone times K) over the row's; on CPU the process's CPU time (one thread: on a shared machine the
steadier figure), on CUDA the wall time. Same answers: of the tasks also fitted alone, how many answer alike (task t
is the same task at every K).
"""

from __future__ import annotations

import argparse
import copy
import json
import resource
import subprocess
import sys
import time
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from arcpipe.config.arch import make_arch_config
from arcpipe.config.runs import TTTConfig
from arcpipe.data.augment import to_canvas
from arcpipe.eval import batched, ttt
from arcpipe.gpus import peak_bf16_flops
from arcpipe.models.flops import train_flops_per_example
from arcpipe.models.registry import build_model

VIEWS, SEED = 4, 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--ks", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument(
        "--separate-ks", type=int, nargs="*", default=None, help="the Ks also fitted one by one (default: every K)"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads on CPU")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--child", nargs=2, metavar=("K", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args, int(args.child[0]), args.child[1])))
        return
    separate_ks = args.ks if args.separate_ks is None else args.separate_ks
    cpu = args.device == "cpu"
    print(f"{args.preset} VARC-ViT on {args.device}, {args.epochs} epochs, {args.threads} thread(s), dropout off")
    print(
        f"{'K':>3} {'mode':>9} {'wall s':>8} {'CPU s':>8} {'steps':>6} {'examples/s':>11} {'peak RSS MiB':>13} "
        f"{'speed-up':>9}  same answers" + ("" if cpu else "  MFU  peak GPU MiB")
    )
    reference: dict[str, Any] = {}  # task -> its answers fitted alone (task t is the same task whatever K)
    base = None  # seconds per task fitted alone
    for K in args.ks:
        for mode in ("separate", "batched") if K in separate_ks else ("batched",):
            cmd = [sys.executable, __file__, "--child", str(K), mode, "--preset", args.preset]
            cmd += ["--device", args.device, "--epochs", str(args.epochs), "--threads", str(args.threads)]
            cmd += ["--compile"] if args.compile else []
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode:  # the row says why, and the other rows still run
                print(f"{K:>3} {mode:>9} failed (exit {done.returncode}):\n{done.stderr[-3000:]}", flush=True)
                continue
            r = json.loads(done.stdout)
            seconds = r["cpu_seconds"] if cpu else r["seconds"]  # one thread: its CPU time is its own work
            if mode == "separate":
                reference.update(r["answers"])
                base = seconds / K
            common = [t for t in r["answers"] if t in reference]
            same = sum(r["answers"][t] == reference[t] for t in common)
            speedup = f"{base * K / seconds:>8.2f}x" if base else f"{'':>9}"
            print(
                f"{K:>3} {mode:>9} {r['seconds']:>8.2f} {r['cpu_seconds']:>8.2f} {r['steps']:>6} "
                f"{r['examples'] / seconds:>11.1f} {r['peak_rss_mib']:>13.0f} {speedup}  {same}/{len(common)}"
                + ("" if cpu else f"  {r['mfu']:.1%}  {r['peak_gpu_mib']:.0f}")
            )


def measure(args: argparse.Namespace, K: int, mode: str) -> dict[str, Any]:
    """Fit K tasks one way (a process of its own); {seconds, cpu_seconds, steps, examples, peak_rss_mib, answers}.
    First, untimed, the same fit of one epoch (a job's first task pays once: imports, allocations, compilation)."""
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    cfg = TTTConfig(epochs=args.epochs, warmup_epochs=min(args.epochs // 5, 10), jobs=1, tasks_per_step=K)
    head, data = synthetic(args.preset, K, device)
    fit = fit_separately if mode == "separate" else fit_batched
    fit(head, data, TTTConfig(epochs=1, warmup_epochs=0, jobs=1), K, args.compile, device)
    _sync(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    started, cpu_started = time.perf_counter(), time.process_time()
    fitted, steps = fit(head, data, cfg, K, args.compile, device)
    _sync(device)
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
    examples = sum(len(d[0]) for d in data.demonstrations.values()) * (cfg.epochs + 1)
    out = {
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "steps": steps,
        "examples": examples,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "answers": {task: answers(fitted[task], data, task, device) for task in data.demonstrations},
    }
    if device.type == "cuda":
        out["peak_gpu_mib"] = torch.cuda.max_memory_allocated() / 2**20
        out["mfu"] = mfu(args.preset, examples, seconds, torch.cuda.get_device_name())
    return out


def mfu(preset: str, examples: int, seconds: float, gpu_name: str) -> float:
    """The share of the GPU's dense bf16 peak that `examples` demonstration rows trained in `seconds` reach: each
    row's training FLOPs (forward and backward, models/flops.py) at the canvas's 900 positions."""
    flops = train_flops_per_example(make_arch_config("varc", preset, {}), 900).total
    return examples * flops / seconds / peak_bf16_flops(gpu_name)


def fit_separately(
    head: torch.nn.Module, data: SimpleNamespace, cfg: TTTConfig, K: int, compiled: bool, device: torch.device
) -> tuple[dict[str, torch.nn.Module], int]:
    """Each task fitted alone (a job at tasks_per_step 1): the fitted models, the steps."""
    loss_fn = torch.compile(ttt.step_loss) if compiled else ttt.step_loss
    fitted, steps = {}, 0
    for task, demos in data.demonstrations.items():
        mine = copy.deepcopy(head)
        steps += ttt.fit_task(mine, data.split, data.ids, demos, task, cfg, SEED, device, loss_fn)["steps"]
        fitted[task] = mine
    return fitted, steps


def fit_batched(
    head: torch.nn.Module, data: SimpleNamespace, cfg: TTTConfig, K: int, compiled: bool, device: torch.device
) -> tuple[dict[str, torch.nn.Module], int]:
    """The tasks fitted K a step (a job at tasks_per_step K): the fitted models, the batched steps."""
    width = head.model.inner.task_token_embed.weight.shape[1]
    fitted: dict[str, torch.nn.Module] = {}

    def done(fit: batched.TaskFit, weights: dict[str, torch.Tensor], stats: dict[str, Any]) -> None:
        mine = copy.deepcopy(head)
        inner = mine.model.inner
        old = inner.task_token_embed.weight
        inner.task_token_embed = torch.nn.Embedding(len(fit.table), width, device=device, dtype=old.dtype)
        with torch.no_grad():
            for name, p in inner.named_parameters():
                p.copy_(weights[name])
        fitted[fit.name] = mine

    fits = []
    for task, demos in data.demonstrations.items():
        table, epochs = ttt.task_batches(width, data.split, data.ids, demos, task, cfg, SEED, device)
        fits.append(batched.TaskFit(task, table, ttt.task_steps(epochs, cfg)))
    loss_fn = torch.compile(batched.batched_loss, fullgraph=True) if compiled else None
    update_fn = torch.compile(batched.adamw_update, fullgraph=True) if compiled else None
    template = copy.deepcopy(head).train()
    steps = batched.fit_tasks(template, fits, cfg, K, done, loss_fn, update_fn, max_views=VIEWS)
    return fitted, steps


def synthetic(preset: str, K: int, device: torch.device) -> tuple[torch.nn.Module, SimpleNamespace]:
    """An untrained VARC-ViT of `preset` without dropout, and K tasks of VIEWS views: demonstrations, test rows."""
    torch.manual_seed(SEED)
    head = build_model(
        make_arch_config("varc", preset, {"dropout": 0.0}),
        vocab_size=12,
        seq_len=900,
        num_puzzle_identifiers=K * VIEWS + 1,
        batch_size=8,
        device=device,
    )
    rng = np.random.default_rng(SEED)
    inputs, labels, ids, demonstrations, tests = [], [], [], {}, {}
    for t in range(K):
        task_ids = np.arange(1 + t * VIEWS, 1 + (t + 1) * VIEWS)
        demos = int(rng.integers(8, 25))
        rows = []
        for i in range(demos + VIEWS):  # the last VIEWS rows: a test row per view
            h, w = rng.integers(2, 7, size=2)
            inputs.append(to_canvas(rng.integers(0, 10, size=(h, w), dtype=np.uint8)))
            labels.append(to_canvas(rng.integers(0, 10, size=(h, w), dtype=np.uint8)))
            ids.append(task_ids[i % VIEWS])
            rows.append(len(inputs) - 1)
        demonstrations[f"task{t}"] = (np.array(rows[:demos]), task_ids)
        tests[f"task{t}"] = np.array(rows[demos:])
    split = SimpleNamespace(inputs=np.stack(inputs), labels=np.stack(labels))
    return head, SimpleNamespace(split=split, ids=np.array(ids), demonstrations=demonstrations, tests=tests)


def answers(head: torch.nn.Module, data: SimpleNamespace, task: str, device: torch.device) -> list[list[int]]:
    """The fitted model's argmax canvases decoded, for the task's test rows (one per view), at a fixed placement."""
    rows, views = data.tests[task], data.demonstrations[task][1]
    local = ttt.local_ids(data.ids, rows, views, task)
    batch = ttt.make_batch(data.split.inputs, data.split.labels, local, rows, len(rows), device)
    batch["canvas_draws"] = torch.full((len(rows), 3), 0.5, dtype=torch.float64, device=device)
    head.eval()
    with torch.no_grad():
        _, _, _, outputs = head.step(head.initial_carry(batch), batch, ("preds",))
    return outputs["preds"].cpu().tolist()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
