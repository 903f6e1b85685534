"""Measured on this device with synthetic batches of an ARC dataset's shape: one training step and one evaluation
pass (examples/s, peak memory), and on CUDA the largest micro-batch that fits the GPU and the `micro_batch_size`
that reaches the run's global batch with it. Running out of memory is a result here (`OutOfMemory`), not a crash.
The synthetic batches and the device helpers at the end also time test-time training's step (eval/ttt_measure.py:
that step is evaluation's, a layer above this one)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from arcpipe.config import ArcpipeError, ReArcSource, RunConfig, WorkflowConfig

FIT_HEADROOM = 0.9  # the largest micro-batch may use this share of the GPU's memory


ARC_SEQ_LEN, ARC_VOCAB = 900, 12  # every arcpipe dataset: 30 x 30 canvas, PAD EOS and 10 colours


def fitting_micro_batch(run: RunConfig, fit: int) -> int:
    """The largest micro-batch <= `fit` that divides the global batch over the run's devices."""
    per_device = run.global_batch_size // run.num_devices
    return max(m for m in range(1, min(fit, per_device) + 1) if per_device % m == 0)


def puzzle_identifiers(cfg: WorkflowConfig, run: RunConfig, results: Path) -> tuple[int, str]:
    """The dataset's puzzle-embedding rows (its metadata when built, else an estimate) and a note saying which."""
    import json

    meta = results / "data" / run.dataset / "train" / "dataset.json"
    if meta.is_file():
        ids = json.loads(meta.read_text()).get("num_puzzle_identifiers")
        if ids is not None:
            return int(ids), ""
    dataset = cfg.datasets[run.dataset]
    per_source = dataset.max_puzzles or 1000  # ARC subsets hold 100-1000 puzzles
    subsets = sum(not isinstance(source, ReArcSource) for source in dataset.sources)  # RE-ARC adds no puzzles
    return 1 + subsets * per_source * (dataset.num_aug + 1), ", estimated: dataset not built"


class OutOfMemory(Exception):
    pass


def _model(run: RunConfig, arch_cfg: Any, device: Any, batch: int, ids: int):  # noqa: ANN202
    from arcpipe.models.registry import build_model
    from arcpipe.optim import make_optimizers

    head = build_model(
        arch_cfg, vocab_size=ARC_VOCAB, seq_len=ARC_SEQ_LEN, num_puzzle_identifiers=ids, batch_size=batch, device=device
    )
    optimizers = make_optimizers(
        head,
        lr=run.lr,
        puzzle_emb_lr=run.puzzle_emb_lr,
        weight_decay=run.weight_decay,
        puzzle_emb_weight_decay=run.puzzle_emb_weight_decay,
        betas=(run.beta1, run.beta2),
        optimizer=run.optimizer,
    )
    return head, optimizers


def synthetic_batch(batch: int, ids: int, device: Any, seed: int = 0) -> dict[str, Any]:
    """`batch` random rows of the ARC shape with puzzle ids 1..ids - 1, as a training step and a canvas model take."""
    import torch

    g = torch.Generator().manual_seed(seed)
    inputs = torch.randint(2, ARC_VOCAB, (batch, ARC_SEQ_LEN), generator=g, dtype=torch.int32)
    return {
        "inputs": inputs.to(device),
        "labels": torch.randint(2, ARC_VOCAB, (batch, ARC_SEQ_LEN), generator=g, dtype=torch.int32).to(device),
        "puzzle_identifiers": torch.randint(1, max(ids, 2), (batch,), generator=g, dtype=torch.int32).to(device),
        # a canvas model's placements (train/sampler.canvas_draws); the other models ignore the key
        "canvas_draws": torch.rand((batch, 3), generator=g, dtype=torch.float64).to(device),
    }


def step_figures(
    run: RunConfig, arch_cfg: Any, device: Any, batch: int, ids: int, steps: int = 2, compiled: bool = False
) -> dict[str, float]:
    """Training steps (forward, backward, optimizer) at micro-batch `batch`: examples/s after one warm-up (where a
    `compiled` step compiles), peak memory. Running out of memory raises OutOfMemory, with the probe's memory freed."""
    import torch

    free_memory(device)  # start from an empty allocator: what an earlier probe left must not count in this peak
    reset_peak(device)
    out_of_memory = False
    try:
        head, optimizers = _model(run, arch_cfg, device, batch, ids)
        step = torch.compile(head.step) if compiled else head.step
        data = synthetic_batch(batch, ids, device)
        carry = head.initial_carry(data)
        times = []
        for _ in range(steps + 1):
            sync_device(device)
            t0 = time.perf_counter()
            carry, loss, _, _ = step(carry, data)
            (loss / batch).backward()
            for optimizer, _ in optimizers:
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            sync_device(device)
            times.append(time.perf_counter() - t0)
        if not torch.isfinite(loss).item():
            raise ArcpipeError(f"{run.arch}/{run.preset}: the training loss is not finite on {device}")
    except torch.OutOfMemoryError:
        # not raised from here: the error's traceback holds the failed step's activations until this handler ends,
        # and the allocator can give back only what nothing holds
        out_of_memory = True
    finally:
        head = optimizers = carry = step = data = loss = None  # noqa: F841  (free before the next probe)
    free_memory(device)
    if out_of_memory:
        raise OutOfMemory
    step_s = sum(times[1:]) / steps
    return {"examples_per_s": batch / step_s, "step_s": step_s, "peak_gb": peak_gb(device), "batch": batch}


def eval_figures(run: RunConfig, arch_cfg: Any, device: Any, ids: int, compiled: bool = False) -> dict[str, float]:
    """One evaluation pass (no grad, every ACT step to halt_max_steps) at the run's evaluation batch, after a
    warm-up pass (where a `compiled` step compiles, as the evaluator compiles it on CUDA)."""
    import torch

    from arcpipe.models.registry import build_model

    batch = min(run.eval_batch_size or run.micro_batch, run.micro_batch)
    free_memory(device)
    reset_peak(device)
    head = build_model(
        arch_cfg, vocab_size=ARC_VOCAB, seq_len=ARC_SEQ_LEN, num_puzzle_identifiers=ids, batch_size=batch, device=device
    )
    head.eval()
    step = torch.compile(head.step, dynamic=False) if compiled else head.step
    data = synthetic_batch(batch, ids, device)
    with torch.no_grad():
        for _ in range(2):  # a warm-up pass, then the timed one
            carry = head.initial_carry(data)
            sync_device(device)
            t0 = time.perf_counter()
            act_steps = 0
            for _ in range(head.model.max_steps):
                carry, _, _, _ = step(carry, data, ("preds", "q_halt_logits"))
                act_steps += 1
            sync_device(device)
            seconds = time.perf_counter() - t0
    del head, carry, step
    free_memory(device)
    return {"examples_per_s": batch / seconds, "batch": batch, "act_steps": act_steps, "peak_gb": peak_gb(device)}


def largest_micro_batch(run: RunConfig, arch_cfg: Any, device: Any, ids: int) -> tuple[int, list[tuple[int, float]]]:
    """The largest training micro-batch whose step fits FIT_HEADROOM of this GPU's memory (0: none), and the probes
    that found it: (micro-batch, peak GiB; inf when it ran out of memory)."""
    import torch

    total = torch.cuda.get_device_properties(device).total_memory / 2**30 * FIT_HEADROOM

    def peak(batch: int) -> float:
        try:
            return step_figures(run, arch_cfg, device, batch, ids, steps=1)["peak_gb"]
        except OutOfMemory:
            return float("inf")

    return search_micro_batch(peak, total)


def search_micro_batch(peak: Callable[[int], float], total: float) -> tuple[int, list[tuple[int, float]]]:
    """The largest micro-batch b with peak(b) <= total, from peak(1) and peak(2) (memory is affine in the
    micro-batch), then shrinking the guess by 10% until it fits; and every probe made, in order."""
    probes: list[tuple[int, float]] = []

    def fits(batch: int) -> bool:
        probes.append((batch, peak(batch)))
        return probes[-1][1] <= total

    if not fits(1):
        return 0, probes
    if not fits(2):
        return 1, probes
    peak1, peak2 = probes[0][1], probes[1][1]
    per_example = max(peak2 - peak1, 1e-6)
    guess = max(2, int((total - (peak1 - per_example)) / per_example))
    while guess > 2 and not fits(guess):
        guess = int(guess * 0.9)
    return guess, probes


def sync_device(device: Any) -> None:
    """Wait for the device's queued work (CUDA), so that a clock read after it counts that work."""
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak(device: Any) -> None:
    """Start the device's peak-memory count afresh (CUDA)."""
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_gb(device: Any) -> float | None:
    """The device's peak allocated memory since `reset_peak`, GiB; None on a CPU."""
    import torch

    return torch.cuda.max_memory_allocated(device) / 2**30 if torch.device(device).type == "cuda" else None


def free_memory(device: Any) -> None:
    """Collect what nothing holds and give the CUDA allocator's cache back: the next probe starts empty."""
    import gc

    import torch

    gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()
