"""Training-step and optimizer throughput of each preset: forward + backward + optimizer steps per second.

    .venv/bin/python benchmarks/model_step.py [--presets tiny] [--batch 2] [--steps 3] [--device cpu]
    .venv/bin/python benchmarks/model_step.py --presets arc --optimizer-only   # the <= 2x AdamW target

Per preset: eager and compiled (`torch.compile(head.step)`) steps/s at a small batch (on CUDA: bf16, flash-attn
when installed); then AdamATan2 alone (`backend` shown) against torch.optim.AdamW (fused when supported on the
device, else foreach) on the same parameters, with the ratio (target <= 2x). Prints wall time and peak RSS.
"""

from __future__ import annotations

import argparse
import resource
import time

import torch

from arcpipe.models.registry import PRESETS, build_model, count_parameters, make_arch_config
from arcpipe.optim import AdamATan2, make_optimizers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--presets", nargs="+", default=["tiny"], help="preset names (each arch that has them)")
    parser.add_argument("--archs", nargs="+", default=list(PRESETS))
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--optimizer-only", action="store_true", help="skip the training-step table")
    args = parser.parse_args()
    device = torch.device(args.device)
    started = time.perf_counter()
    print(f"device {device}, torch {torch.__version__}, threads {torch.get_num_threads()}, batch {args.batch}")
    print(f"{'arch/preset':<18} {'params':>11} {'eager step/s':>13} {'compiled step/s':>16} {'speed-up':>9}")
    for arch in args.archs if not args.optimizer_only else []:
        for preset in args.presets:
            if preset not in PRESETS[arch]:
                continue
            eager = _steps_per_second(arch, preset, args, device, compiled=False)
            comp = None if args.no_compile else _steps_per_second(arch, preset, args, device, compiled=True)
            n = count_parameters(_head(arch, preset, args.batch, device))
            comp_s = f"{comp:16.2f}" if comp else f"{'-':>16}"
            ratio = f"{comp / eager:8.2f}x" if comp else f"{'-':>9}"
            print(f"{arch + '/' + preset:<18} {n:>11,} {eager:13.2f} {comp_s} {ratio}")
    print()
    print(f"{'optimizer on':<18} {'AdamATan2 ms':>13} {'backend':>9} {'AdamW ms':>10} {'AdamW kind':>11} {'ratio':>7}")
    fused = _fused_supported(device)
    for arch in args.archs:
        preset = "arc" if "arc" in args.presets else args.presets[0]
        params = [p for p in _head(arch, preset, 1, device).parameters()]
        ours, backend = _optimizer_ms(lambda ps: AdamATan2(ps, lr=1e-4), params)
        base, _ = _optimizer_ms(
            lambda ps, f=fused: torch.optim.AdamW(ps, lr=1e-4, fused=f, foreach=None if f else True), params
        )
        kind = "fused" if fused else "foreach"
        print(f"{arch + '/' + preset:<18} {ours:13.2f} {backend:>9} {base:10.2f} {kind:>11} {ours / base:6.2f}x")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\nwall {time.perf_counter() - started:.1f} s, peak RSS {rss:.0f} MiB")


def _head(arch: str, preset: str, batch: int, device: torch.device):
    return build_model(
        make_arch_config(arch, preset, {}),
        vocab_size=12,
        seq_len=900,
        num_puzzle_identifiers=1000,
        batch_size=batch,
        device=device,
    )


def _batch(batch: int, device: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    out = {
        "inputs": torch.randint(0, 12, (batch, 900), generator=g, dtype=torch.int32),
        "labels": torch.randint(0, 12, (batch, 900), generator=g, dtype=torch.int32),
        "puzzle_identifiers": torch.randint(1, 1000, (batch,), generator=g, dtype=torch.int32),
        "halt_min_steps": torch.zeros(batch, dtype=torch.int32),
    }
    return {k: v.to(device) for k, v in out.items()}


def _steps_per_second(arch: str, preset: str, args: argparse.Namespace, device: torch.device, compiled: bool) -> float:
    torch.manual_seed(0)
    head = _head(arch, preset, args.batch, device)
    head.train()
    optimizers = make_optimizers(head, lr=1e-4, puzzle_emb_lr=1e-2, weight_decay=0.1, puzzle_emb_weight_decay=0.1)
    step = torch.compile(head.step) if compiled else head.step
    batch = _batch(args.batch, device)
    carry = head.initial_carry(batch)

    def one() -> None:
        nonlocal carry
        carry, loss, _, _ = step(carry, batch)
        (loss / args.batch).backward()
        for opt, _ in optimizers:
            opt.step()
            opt.zero_grad()

    one()  # warm-up (compilation, allocator)
    _sync(device)
    start = time.perf_counter()
    for _ in range(args.steps):
        one()
    _sync(device)
    return args.steps / (time.perf_counter() - start)


def _optimizer_ms(make, params: list[torch.nn.Parameter], repeats: int = 10) -> tuple[float, str]:
    params = [torch.nn.Parameter(p.detach().clone()) for p in params]
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3
    opt = make(params)
    opt.step()  # warm-up and compilation
    opt.step()
    _sync(params[0].device)
    start = time.perf_counter()
    for _ in range(repeats):
        opt.step()
    _sync(params[0].device)
    return (time.perf_counter() - start) / repeats * 1000, getattr(opt, "backend", "-")


def _fused_supported(device: torch.device) -> bool:
    try:
        p = torch.nn.Parameter(torch.zeros(2, device=device))
        p.grad = torch.zeros_like(p)
        torch.optim.AdamW([p], fused=True).step()
        return True
    except RuntimeError:
        return False


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


if __name__ == "__main__":
    main()
