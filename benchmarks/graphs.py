"""Graph breaks, recompilations and host syncs of the training and evaluation steps, per arch (issue 21).

    .venv/bin/python benchmarks/graphs.py [--archs trm hrm urm transformer] [--preset tiny] [--batch 2] [--seq-len 16]
    .venv/bin/python benchmarks/graphs.py --preset arc --width-per-head 8   # a published preset's structure, narrow

Per arch at the preset, on CPU:
* breaks: `torch._dynamo.explain` graph breaks of the training step (`head.step` in train mode: one ACT segment's
  forward and loss) and of the evaluation step (`head.step` in eval mode); `eval fwd` is the same for `head(...)`,
  the forward that also returns `bool(halted.all())` (what evaluation called once per ACT step before);
* recompiles: compilations beyond the first of `torch.compile(head.step, backend="aot_eager")` over 4 training
  steps (carry kept, ACT halting included, new data from the third) and 2 batches x halt_max_steps eval steps;
* syncs/step: ops that read a tensor on the host or have a data-dependent size (`.item()`, `bool(t)`, `.tolist()`,
  `nonzero`, `unique`, bool-mask index), per training step (forward, loss, backward, SparseSignSGD, AdamATan2
  uncompiled, EMA; the metric logging excluded) and per evaluation step, with the ops named;
* ms/step: eager wall time of a training step and an evaluation step (median of --repeats), and of
  SparseSignSGD's row update alone (the sum per puzzle id, which used `unique` and so a host sync until
  2026-11-25; now a sort and fixed-size segment sums).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch._dynamo.testing import CompileCounterWithBackend

from arcpipe.models.registry import PRESETS, build_model, make_arch_config
from arcpipe.models.syncs import HostSyncGuard
from arcpipe.optim import EMA, make_optimizers
from arcpipe.optim.signsgd import sparse_sign_update_


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--archs", nargs="+", default=list(PRESETS))
    parser.add_argument("--preset", default="tiny")
    parser.add_argument(
        "--width-per-head", type=int, default=0, help="hidden_size = this x the preset's num_heads (0: the preset's)"
    )
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq-len", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    started = time.perf_counter()
    width = f"hidden {args.width_per_head} x heads" if args.width_per_head else "the preset's width"
    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, preset {args.preset} ({width}), "
        f"batch {args.batch}, seq {args.seq_len}"
    )
    print(
        f"{'arch':<12} {'breaks train/eval/eval fwd':>27} {'recompiles train/eval':>22} "
        f"{'syncs/step train/eval/eval fwd':>31} {'ms train/eval/signsgd':>20}  sync ops (train)"
    )
    for arch in args.archs:
        row = _measure(arch, args)
        print(
            f"{arch:<12} {row['breaks']:>27} {row['recompiles']:>22} {row['syncs']:>31} {row['ms']:>20}  {row['ops']}"
        )
    print(f"wall {time.perf_counter() - started:.1f} s")


def _head(arch: str, args: argparse.Namespace):  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    heads = PRESETS[arch][args.preset]["num_heads"]
    cfg = make_arch_config(
        arch, args.preset, {"hidden_size": args.width_per_head * heads} if args.width_per_head else {}
    )
    return build_model(
        cfg, vocab_size=12, seq_len=args.seq_len, num_puzzle_identifiers=10, batch_size=args.batch, device="cpu"
    )


def _batch(args: argparse.Namespace, seed: int, train: bool) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    shape = (args.batch, args.seq_len)
    batch = {
        "inputs": torch.randint(0, 12, shape, generator=g, dtype=torch.int32),
        "labels": torch.randint(0, 12, shape, generator=g, dtype=torch.int32),
        "puzzle_identifiers": torch.randint(1, 10, (args.batch,), generator=g, dtype=torch.int32),
    }
    if train:
        batch["halt_min_steps"] = torch.zeros(args.batch, dtype=torch.int32)
    return batch


def _breaks(fn, *a) -> int:  # type: ignore[no-untyped-def]
    explained = torch._dynamo.explain(fn)(*a)
    return max(explained.graph_break_count, len(explained.break_reasons))


def _measure(arch: str, args: argparse.Namespace) -> dict[str, str]:
    torch._dynamo.reset()
    head = _head(arch, args)
    tb, eb = _batch(args, 0, True), _batch(args, 0, False)
    head.train()
    breaks_train = _breaks(head.step, head.initial_carry(tb), tb)
    head.eval()
    breaks_eval = _breaks(head.step, head.initial_carry(eb), eb)
    breaks_fwd = _breaks(head, head.initial_carry(eb), eb)

    torch._dynamo.reset()
    head = _head(arch, args).train()
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(head.step, backend=counter)
    carry = head.initial_carry(tb)
    for seed in (0, 0, 1, 2):
        carry, loss, _, _ = compiled(carry, _batch(args, seed, True))
        loss.backward()
    recompiles_train = counter.frame_count - 1
    head.eval()
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(head.step, backend=counter)
    with torch.no_grad():
        for seed in (0, 1):
            batch = _batch(args, seed, False)
            carry = head.initial_carry(batch)
            for _ in range(head.model.max_steps):
                carry, *_ = compiled(carry, batch)
    recompiles_eval = counter.frame_count - 1
    torch._dynamo.reset()

    head = _head(arch, args).train()
    optimizers = make_optimizers(
        head, lr=1e-3, puzzle_emb_lr=1e-2, weight_decay=0.1, puzzle_emb_weight_decay=0.1, compile=False
    )
    ema = EMA(head, 0.999)
    carry = head.initial_carry(tb)

    def train_step() -> None:
        nonlocal carry
        carry, loss, _, _ = head.step(carry, tb)
        loss.backward()
        for optimizer, _ in optimizers:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        ema.update()

    train_step()  # warm-up
    with HostSyncGuard().active() as guard:
        train_step()
    train_ops = guard.named()
    train_ms = _median_ms(train_step, args.repeats)

    head.eval()
    ecarry = head.initial_carry(eb)

    def eval_step() -> None:
        nonlocal ecarry
        ecarry, *_ = head.step(ecarry, eb)

    with torch.no_grad():
        with HostSyncGuard().active() as guard:
            eval_step()
        eval_syncs = len(guard.seen)
        with HostSyncGuard().active() as guard:
            head(head.initial_carry(eb), eb)
        fwd_syncs = len(guard.seen)
        eval_ms = _median_ms(eval_step, args.repeats)

    table = torch.zeros(10, 64)
    ids, grads = tb["puzzle_identifiers"].clone(), torch.randn(args.batch, 64)
    sync_ms = _median_ms(lambda: sparse_sign_update_(table, ids, grads, lr=1e-2, weight_decay=0.1), args.repeats)
    return {
        "breaks": f"{breaks_train}/{breaks_eval}/{breaks_fwd}",
        "recompiles": f"{recompiles_train}/{recompiles_eval}",
        "syncs": f"{len(train_ops)}/{eval_syncs}/{fwd_syncs}",
        "ms": f"{train_ms:.1f}/{eval_ms:.1f}/{sync_ms:.2f}",
        "ops": ", ".join(train_ops) or "-",
    }


def _median_ms(fn, repeats: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


if __name__ == "__main__":
    main()
