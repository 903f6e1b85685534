"""AdamATan2's torch backend: the old per-parameter loop against the foreach path, on a preset's parameters.

    .venv/bin/python benchmarks/optimizer_step.py [--arch trm] [--preset arc] [--steps 20] [--repeats 5]
    .venv/bin/python benchmarks/optimizer_step.py --device cuda        # adds the compiled variants, syncs counted

Each variant runs in child processes of its own (`--rounds` of them, old and new alternating), so each peak RSS is
its own and load from other processes hits both alike. A child builds the preset's model on CPU
(`build_model(make_arch_config(arch, preset, {}))`, seed 0), moves its parameters to --device, gives them fixed
random gradients (seed 1), steps the optimizer twice (state, compilation, allocator), then times `--repeats` runs of
`--steps` steps (one device sync after each run); its figure is the median run, a variant's the median child. Variants:

  old   tests/unit/optim/adam_atan2_per_parameter.py, the torch backend before the foreach rewrite: per parameter
        and step, `float(step)` (a device-to-host sync on GPU) and a scalars tensor copied to the device
  new   arcpipe.optim.AdamATan2 with the torch backend: foreach ops over each device/dtype list, bias corrections
        computed on the device from the step tensors

both eager; with `--compile` (the default on CUDA) also both with their update compiled, which is what arcpipe runs
on CUDA. On CUDA each child also counts the synchronizing calls of one step (torch.cuda.set_sync_debug_mode) and
the peak CUDA memory. Prints ms per step, steps/s, peak RSS and what the optimizer added to it, the ratio new/old
per mode, and whether the new variant's parameters equal the old's bit for bit after the same steps.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

from arcpipe.models.registry import build_model, count_parameters, make_arch_config
from arcpipe.optim import AdamATan2

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "unit" / "optim"))
from adam_atan2_per_parameter import PerParameterAdamATan2  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--arch", default="trm")
    parser.add_argument("--preset", default="arc")
    parser.add_argument("--steps", type=int, default=20, help="optimizer steps per timed run")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per child; its median is its figure")
    parser.add_argument("--rounds", type=int, default=3, help="children per variant; the median is reported")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None, help="default: on CUDA")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_measure(args, args.child)))
        return
    started = time.perf_counter()
    compiled = args.compile if args.compile is not None else args.device.startswith("cuda")
    modes = ["eager", "compiled"] if compiled else ["eager"]
    print(
        f"machine: {platform.node()} {_cpu_name()}, {os.cpu_count()} cores, torch {torch.__version__}, "
        f"{args.threads} threads, device {args.device}"
        + (f" ({torch.cuda.get_device_name(args.device)})" if args.device.startswith("cuda") else "")
    )
    print(
        f"{args.arch}/{args.preset}: {args.rounds} processes per variant, each {args.repeats} runs of {args.steps} "
        "steps after 2 warm-up steps; ms/step: median over processes of each one's median run"
    )
    print(
        f"{'variant':<14} {'params':>10} {'ms/step':>9} {'range ms':>11} {'steps/s':>8} {'peak RSS MiB':>13} "
        f"{'optimizer MiB':>14} {'syncs/step':>11} {'CUDA peak MiB':>14}"
    )
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        args.out = tmp
        _run_all(args, modes, results)
    print(f"wall {time.perf_counter() - started:.1f} s")


def _run_all(args: argparse.Namespace, modes: list[str], results: dict) -> None:
    variants = [(kind, mode) for mode in modes for kind in ("old", "new")]
    rounds: dict[tuple[str, str], list[dict]] = {v: [] for v in variants}
    for r in range(args.rounds):  # old and new alternate, so load from other processes hits both alike
        for kind, mode in variants if r % 2 == 0 else variants[::-1]:
            rounds[kind, mode].append(_child(args, f"{kind}-{mode}"))
    for kind, mode in variants:
        runs = rounds[kind, mode]
        r = results[kind, mode] = {**runs[-1], "ms_per_step": statistics.median(x["ms_per_step"] for x in runs)}
        spread = f"{min(x['ms_per_step'] for x in runs):.0f}-{max(x['ms_per_step'] for x in runs):.0f}"
        print(
            f"{kind + '-' + mode:<14} {r['params']:>10,} {r['ms_per_step']:9.2f} {spread:>11} "
            f"{1000 / r['ms_per_step']:8.2f} {max(x['peak_rss_mib'] for x in runs):13.0f} "
            f"{max(x['peak_rss_mib'] - x['rss_before_mib'] for x in runs):14.0f} "
            f"{_or_dash(r['syncs_per_step']):>11} {_or_dash(r['cuda_peak_mib']):>14}"
        )
    for mode in modes:
        old, new = results["old", mode], results["new", mode]
        a, b = (torch.load(Path(args.out) / f"{kind}-{mode}.pt", weights_only=True) for kind in ("old", "new"))
        same = "bitwise equal" if torch.equal(a, b) else f"differ, max |new - old| {(b - a).abs().max():.3g}"
        print(
            f"{mode}: new/old time {new['ms_per_step'] / old['ms_per_step']:.2f}x "
            f"(speed-up {old['ms_per_step'] / new['ms_per_step']:.2f}x); parameters after "
            f"{2 + args.steps * args.repeats} steps: {same}"
        )


def _child(args: argparse.Namespace, variant: str) -> dict:
    cmd = [sys.executable, __file__, "--child", variant, "--arch", args.arch, "--preset", args.preset]
    cmd += ["--steps", str(args.steps), "--repeats", str(args.repeats), "--device", args.device]
    cmd += ["--threads", str(args.threads), "--out", args.out]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def _measure(args: argparse.Namespace, variant: str) -> dict:
    kind, mode = variant.split("-")
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    torch.manual_seed(0)
    head = build_model(
        make_arch_config(args.arch, args.preset, {}),
        vocab_size=12,
        seq_len=900,
        num_puzzle_identifiers=16,  # the puzzle-embedding table is a buffer: not an AdamATan2 parameter
        batch_size=1,
        device="cpu",
    )
    params = [torch.nn.Parameter(p.detach().to(device)) for p in head.parameters()]
    n_params = count_parameters(head)
    del head
    g = torch.Generator().manual_seed(1)
    for p in params:
        p.grad = (torch.randn(p.shape, generator=g) * 1e-3).to(device=device, dtype=p.dtype)
    cls = PerParameterAdamATan2 if kind == "old" else AdamATan2
    opt = cls(params, lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1, compile=mode == "compiled")
    if kind == "new":
        opt.backend = "torch"  # also where the CUDA extension is installed: this measures the PyTorch path
    rss_before = _rss_mib()
    opt.step()
    opt.step()
    _sync(device)
    runs = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        for _ in range(args.steps):
            opt.step()
        _sync(device)
        runs.append((time.perf_counter() - start) / args.steps * 1000)
    torch.save(torch.cat([p.detach().float().flatten().cpu() for p in params]), Path(args.out) / f"{variant}.pt")
    syncs = _syncs_in_one_step(opt) if device.type == "cuda" else None  # one more step, after the comparison
    return {
        "params": n_params,
        "ms_per_step": statistics.median(runs),
        "runs_ms": runs,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "rss_before_mib": rss_before,
        "syncs_per_step": syncs,
        "cuda_peak_mib": torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None,
    }


def _syncs_in_one_step(opt: torch.optim.Optimizer) -> int:
    """Synchronizing CUDA calls (device-to-host reads, blocking host-to-device copies) in one optimizer step."""
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            opt.step()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in caught)


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _cpu_name() -> str:
    with open("/proc/cpuinfo") as f:
        names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
    return names[0] if names else platform.processor()


def _or_dash(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


if __name__ == "__main__":
    main()
