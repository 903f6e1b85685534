"""Peak training memory per micro-batch without a GPU, the largest micro-batch that fits a named GPU, and the
throughput assumed there: what `arcpipe doctor --gpu`, `arcpipe config check` and the forecast plan with.

    mem = step_memory(make_arch_config("trm", "arc", {}))      # fake tensors: nothing allocated, ~3 s per arch
    mem.peak_bytes(micro=96, per_device=192)                   # one slot of 96 rows, another slot's carry held
    plan = gpu_plan(mem, "H100-80GB", per_device=192)          # largest micro-batch, its accumulation
    assumed_throughput("H100-80GB", train_row_flops, eval_row_flops)   # (train, eval) rows/s and where from

What is counted, in the dtype the GPU path uses (fp32 parameters, bf16 forward: the per-layer casts of
models/layers.py, as upstream's):

* measured, by one ACT step's forward (loss included) and backward on fake tensors (torch's FakeTensorMode, under
  torch.distributed._tools.mem_tracker.MemTracker, which follows every storage as it is created and freed): the
  peak of parameters, buffers (the puzzle-embedding table), the gradients alive at that moment, the activations
  saved for backward and the temporaries of both passes. Taken at micro-batch 1 and 2: the difference is the
  bytes per example, the rest is fixed (memory is affine in the micro-batch);
* counted from the parameters' shapes: every gradient (as when accumulating: a later micro-batch runs with the
  earlier ones' gradients held), the optimizer's states (AdamATan2: exp_avg and exp_avg_sq, fp32; Muon: one buffer
  per 2-D parameter, two for the rest; the puzzle embedding's SignSGD keeps none) and the EMA copy when `ema`;
* the recursion carries of the other accumulation slots (train/loop.py keeps one carry per slot).

Attention is the CPU's SDPA path under fake tensors (flash-style: an fp32 logsumexp per row and head, no S x S
scores), the same O(S) saved state as flash-attn or cuDNN SDPA on a GPU. The model's figure is checked against the
CPU allocator's measured peak of the same step (`measured_peak`: torch.profiler's memory events) within 15%
(tests/unit/test_memory.py; benchmarks/memory.py prints the ratios). On a real GPU `arcpipe doctor` prints the
measured peak beside the model's figure.

Fit rule: a micro-batch fits when (model's peak) x (1 + MARGIN) + CONTEXT_BYTES <= the GPU's memory as sold
(arcpipe.gpus, in 10^9 bytes: a little below what the card reports in GiB).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from arcpipe.files import atomic_write_many
from arcpipe.gpus import DEFAULT_GPU, GPUS

MARGIN = 0.10  # over the model's peak: the model is within 15% of the measured one, typically 0-7% under
CONTEXT_BYTES = 1.5 * 2**30  # CUDA context, cuBLAS and attention workspaces, allocator fragmentation
TABLE = Path(__file__).with_name("memory_table.json")  # run_memory's shipped figures
ARC_SEQ_LEN, ARC_VOCAB = 900, 12  # every arcpipe dataset: 30 x 30 canvas, PAD EOS and 10 colours

# TRM's README: trm-arc2 (722,098 steps of 768 rows, docs/reference/upstream-recursive.md 2.4 and 11.2) took about 3
# days on 4 x H100. At 3.98e11 FLOPs per row-step (trm/arc, models.flops) that is 2.2e20 FLOPs in 4 x 72 h at 989
# TFLOP/s: 21.5% of the bf16 peak. Upstream's 3 days include its 10 evaluations (3% more FLOPs), and the README gives
# the same 3 days for ARC-AGI-1's 518,226 steps (15.5%): a forecast from it can be that much short, never padded.
ASSUMED_MFU = 0.215
MFU_SOURCE = "TRM README's ~3 days on 4 x H100 for trm-arc2"


def assumed_throughput(gpu: str, train_row_flops: float, eval_row_flops: float) -> tuple[float, float, str]:
    """Rows/s through one training step and through one evaluation step's rows on a named GPU, at its bf16 peak
    x ASSUMED_MFU, and a sentence saying so. The forecast's throughput when no doctor record exists."""
    flops = GPUS[gpu].bf16_flops * ASSUMED_MFU
    source = (
        f"assumed: {gpu} bf16 peak {GPUS[gpu].bf16_flops / 1e12:.0f} TFLOP/s x MFU {ASSUMED_MFU:.1%} from {MFU_SOURCE}"
    )
    return flops / train_row_flops, flops / eval_row_flops, source


@dataclass(frozen=True)
class StepMemory:
    """One training step's peak bytes on one device as an affine function of the micro-batch."""

    fixed_bytes: float  # parameters, gradients, optimizer states, EMA, buffers, the batch-independent activations
    per_example_bytes: float  # activations saved for backward and temporaries, per row of the micro-batch
    carry_bytes: float = 0.0  # one row's recursion carry, held per row of the other accumulation slots
    parts: tuple[tuple[str, float], ...] = ()  # what fixed_bytes is made of, for the reader

    def peak_bytes(self, micro: int, per_device: int | None = None) -> float:
        """Peak at micro-batch `micro` when each device's share of the global batch is `per_device` rows."""
        held = max((per_device or micro) - micro, 0) * self.carry_bytes
        return self.fixed_bytes + micro * self.per_example_bytes + held

    def largest_micro_batch(self, capacity_bytes: float, per_device: int | None = None) -> int:
        """The largest micro-batch whose peak x (1 + MARGIN) + CONTEXT_BYTES fits `capacity_bytes` (0: none)."""
        budget = (capacity_bytes - CONTEXT_BYTES) / (1 + MARGIN)
        if per_device is None:
            return max(int((budget - self.fixed_bytes) // self.per_example_bytes), 0)
        # the carries of the other slots are per_device - micro rows: each row moved into the micro-batch costs
        # per_example_bytes - carry_bytes more
        room = budget - self.fixed_bytes - per_device * self.carry_bytes
        slope = self.per_example_bytes - self.carry_bytes
        return min(max(int(room // slope), 0), per_device)


@dataclass(frozen=True)
class GPUPlan:
    gpu: str
    capacity_bytes: float
    largest: int  # the largest micro-batch that fits with the margin (0: none)
    micro_batch: int  # the largest one <= largest that divides the device's share of the global batch
    accumulation: int  # micro-batches per optimizer step: per_device / micro_batch
    peak_bytes: float  # the model's peak at micro_batch


def gpu_plan(memory: StepMemory, gpu: str, per_device: int) -> GPUPlan:
    """The micro-batch and accumulation that keep a device's share of the global batch on a named GPU."""
    capacity = GPUS[gpu].memory_gb * 1e9
    largest = memory.largest_micro_batch(capacity, per_device)
    micro = max((m for m in range(1, min(largest, per_device) + 1) if per_device % m == 0), default=0)
    return GPUPlan(
        gpu=gpu,
        capacity_bytes=capacity,
        largest=largest,
        micro_batch=micro,
        accumulation=per_device // micro if micro else 0,
        peak_bytes=memory.peak_bytes(micro, per_device) if micro else memory.peak_bytes(1, per_device),
    )


def fit_problem(name: str, run: Any, memory: StepMemory, gpu: str) -> str | None:
    """A line when the run's micro-batch will not fit its GPU by the model (with its margin), else None."""
    per_device = run.global_batch_size // run.num_devices
    plan = gpu_plan(memory, gpu, per_device)
    if run.micro_batch <= plan.largest:
        return None
    need = memory.peak_bytes(run.micro_batch, per_device) * (1 + MARGIN) + CONTEXT_BYTES
    fix = (
        f"set runs.{name}.micro_batch_size: {plan.micro_batch} ({plan.accumulation} accumulation steps keep "
        f"global_batch_size {run.global_batch_size})"
        if plan.micro_batch
        else "not even a micro-batch of 1 fits: use a larger GPU"
    )
    return (
        f"run {name}: micro-batch {run.micro_batch} will not fit {gpu} ({need / 1e9:.1f} GB with the memory "
        f"model's margin, the GPU has {GPUS[gpu].memory_gb:g} GB; at most {plan.largest}); {fix}"
    )


def run_memory(run: Any, num_puzzle_identifiers: int, cache: Path | None = None) -> StepMemory:
    """`step_memory` of a RunConfig: its arch, preset and overrides, optimizer and EMA.

    The fake-tensor pass takes 10-30 s per published preset on a CPU, too long for `arcpipe config check`: its
    figures are looked up first in TABLE (shipped: the runs of config/config.yaml, written by
    `python -m arcpipe.doctor.memory --write-table`), then in `cache` (a JSON file, e.g. results/.cache/memory.json,
    where a computed figure is kept for the next call), and computed only when neither has them.
    """
    known = known_memory(run, num_puzzle_identifiers, cache)
    if known is not None:
        return known
    key = memory_key(run, num_puzzle_identifiers)
    memory = step_memory_cached(
        run.arch,
        run.preset,
        json.dumps(run.arch_overrides, sort_keys=True),
        num_puzzle_identifiers,
        run.optimizer,
        run.ema,
    )
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_many(cache.parent, {cache.name: _dump({**_table(cache), key: memory_dict(memory)})})
    return memory


def cache_path(results: Path) -> Path:
    """Where figures the shipped TABLE lacks are kept once computed (`arcpipe doctor --gpu`), for every later check."""
    return results / ".cache" / "memory.json"


def fit_problems(cfg: Any, names: Iterable[str], results: Path) -> tuple[list[str], list[str]]:
    """For the GPU runs among `names`: a line for each whose micro-batch will not fit its GPU, and the runs without
    figures; from the shipped or cached figures only, nothing computed (what `config check` and every plan print)."""
    from arcpipe.doctor.measure import puzzle_identifiers

    problems, unknown = [], []
    for name in names:
        run = cfg.runs[name]
        if not run.uses_gpus:
            continue
        memory = known_memory(run, puzzle_identifiers(cfg, run, results)[0], cache_path(results))
        if memory is None:
            unknown.append(name)
        elif problem := fit_problem(name, run, memory, run.gpu or DEFAULT_GPU):
            problems.append(problem)
    return problems, unknown


def known_memory(run: Any, num_puzzle_identifiers: int, cache: Path | None = None) -> StepMemory | None:
    """`run_memory`'s figures when TABLE or `cache` has them, else None: nothing computed, cheap enough to plan."""
    key = memory_key(run, num_puzzle_identifiers)
    known = {**_table(TABLE), **(_table(cache) if cache else {})}
    return _from_dict(known[key]) if key in known else None


def memory_key(run: Any, num_puzzle_identifiers: int) -> str:
    """What a step's memory depends on, as one string: arch, preset, overrides, puzzle ids, optimizer, EMA, torch."""
    from importlib.metadata import version  # not torch itself: planning must not pay for importing it

    fields = [run.arch, run.preset, run.arch_overrides, num_puzzle_identifiers, run.optimizer, run.ema]
    return json.dumps([*fields, ".".join(version("torch").split(".")[:2])], sort_keys=True)


@functools.lru_cache(maxsize=64)
def step_memory_cached(arch: str, preset: str, overrides_json: str, ids: int, optimizer: str, ema: bool) -> StepMemory:
    from arcpipe.config.arch import make_arch_config

    arch_cfg = make_arch_config(arch, preset, json.loads(overrides_json))
    return step_memory(arch_cfg, num_puzzle_identifiers=ids, optimizer=optimizer, ema=ema)


def write_table(config: Path, results: Path = Path("results")) -> dict[str, Any]:
    """TABLE for every GPU run of a config (computed afresh, a minute or two): what `--write-table` ships."""
    from arcpipe.config import load_config
    from arcpipe.doctor.measure import puzzle_identifiers

    cfg = load_config(config)
    table = {}
    for run in cfg.runs.values():
        if run.uses_gpus:
            ids = puzzle_identifiers(cfg, run, results)[0]
            table[memory_key(run, ids)] = memory_dict(
                step_memory_cached(
                    run.arch, run.preset, json.dumps(run.arch_overrides, sort_keys=True), ids, run.optimizer, run.ema
                )
            )
    TABLE.write_bytes(_dump(table))
    return table


def _table(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return {}


def _dump(table: dict[str, Any]) -> bytes:
    return (json.dumps(table, indent=1, sort_keys=True) + "\n").encode()


def _from_dict(data: dict[str, Any]) -> StepMemory:
    return StepMemory(**{**data, "parts": tuple(tuple(part) for part in data.get("parts", ()))})


def step_memory(
    arch_cfg: Any,
    *,
    num_puzzle_identifiers: int = 1000,
    optimizer: str = "adam_atan2",
    ema: bool = False,
    seq_len: int = ARC_SEQ_LEN,
    vocab_size: int = ARC_VOCAB,
) -> StepMemory:
    """The model of one training step's peak (see the module's docstring), from fake tensors at micro-batch 1, 2."""
    one = _fake_step(arch_cfg, 1, num_puzzle_identifiers, seq_len, vocab_size)
    two = _fake_step(arch_cfg, 2, num_puzzle_identifiers, seq_len, vocab_size)
    per_example = two["peak"] - one["peak"]
    shapes = one["shapes"]
    params = sum(n for n, _ in shapes) * 4
    grads_missing = params - one["grad_at_peak"]
    if optimizer == "muon":
        states = sum(n * (1 if ndim == 2 else 2) for n, ndim in shapes) * 4
    else:
        states = 2 * params + 4 * len(shapes)  # exp_avg, exp_avg_sq and a step scalar per parameter
    ema_bytes = params if ema else 0
    step_peak = one["peak"] - per_example
    parts = (
        ("step peak at micro-batch 0 (parameters, buffers, fixed activations)", step_peak),
        ("gradients not alive at the step's peak", grads_missing),
        (f"optimizer states ({optimizer})", states),
        ("EMA copy", ema_bytes),
    )
    return StepMemory(
        fixed_bytes=step_peak + grads_missing + states + ema_bytes,
        per_example_bytes=per_example,
        carry_bytes=one["carry"],
        parts=parts,
    )


def _fake_step(arch_cfg: Any, batch: int, ids: int, seq_len: int, vocab_size: int) -> dict[str, Any]:
    """One ACT step's forward and backward on fake tensors at `batch` rows: the tracker's peak and its parts."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker

    from arcpipe.models.registry import build_model

    # the parameters are real (fake ones cannot be cast by nn.Module.to: URM's bf16 conv), the puzzle-embedding table
    # of 2 rows: its other rows are counted from its shape; everything the step creates is fake
    head = build_model(
        arch_cfg,
        vocab_size=vocab_size,
        seq_len=seq_len,
        num_puzzle_identifiers=2,
        batch_size=batch,
        device="cpu",
        forward_dtype=torch.bfloat16,
    )
    table = getattr(head.model.inner, "puzzle_emb", None)
    table_bytes = (max(ids, 2) - 2) * table.weights.shape[1] * 4 if table is not None else 0
    shapes = [(p.numel(), p.ndim) for p in head.parameters() if p.requires_grad]
    with FakeTensorMode(allow_non_fake_inputs=True):
        data = _batch(batch, seq_len, vocab_size, 2, "cpu", fake=True)
        carry = head.initial_carry(data)
        carry_bytes = sum(t.numel() * t.element_size() for t in carry.inner) / batch
        tracker = MemTracker()
        tracker.track_external(head)
        with tracker:
            carry, loss, _, _ = head.step(carry, data)
            (loss / batch).backward()
        peak = tracker.get_tracker_snapshot("peak")
    (device_peak,) = peak.values()
    by_kind = {str(kind).rsplit(".", 1)[-1]: float(n) for kind, n in device_peak.items()}
    return {
        "peak": by_kind["Total"] + table_bytes,
        "grad_at_peak": by_kind.get("GRAD", 0.0),
        "carry": carry_bytes,
        "shapes": shapes,
    }


def _batch(batch: int, seq_len: int, vocab: int, ids: int, device: Any, fake: bool = False) -> dict[str, Any]:
    import torch

    if fake:  # no generator under fake tensors: the values do not matter, only the shapes
        fill = torch.full((batch, seq_len), 3, dtype=torch.int32, device=device)
        return {
            "inputs": fill,
            "labels": fill.clone(),
            "puzzle_identifiers": torch.ones(batch, dtype=torch.int32, device=device),
            "canvas_draws": torch.zeros((batch, 3), dtype=torch.float64, device=device),  # a canvas model's
        }
    g = torch.Generator().manual_seed(0)
    return {
        "inputs": torch.randint(2, vocab, (batch, seq_len), generator=g, dtype=torch.int32),
        "labels": torch.randint(2, vocab, (batch, seq_len), generator=g, dtype=torch.int32),
        "puzzle_identifiers": torch.randint(1, ids, (batch,), generator=g, dtype=torch.int32),
        "canvas_draws": torch.rand((batch, 3), generator=g, dtype=torch.float64),  # a canvas model's placements
    }


def measured_peak(
    arch_cfg: Any,
    batch: int,
    *,
    num_puzzle_identifiers: int = 1000,
    optimizer: str = "adam_atan2",
    seq_len: int = ARC_SEQ_LEN,
    vocab_size: int = ARC_VOCAB,
    steps: int = 2,
) -> float:
    """The CPU allocator's peak bytes over building the model (bf16 forward, as on a GPU) and `steps` real training
    steps (forward of one ACT step with loss, backward, optimizer step), from torch.profiler's memory events: the
    running sum of every allocation and free, in order. No EMA (its copy is counted, not measured)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from arcpipe.models.registry import build_model
    from arcpipe.optim import make_optimizers

    ids = max(num_puzzle_identifiers, 2)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        head = build_model(
            arch_cfg,
            vocab_size=vocab_size,
            seq_len=seq_len,
            num_puzzle_identifiers=ids,
            batch_size=batch,
            device="cpu",
            forward_dtype=torch.bfloat16,
        )
        optimizers = make_optimizers(
            head,
            lr=1e-4,
            puzzle_emb_lr=1e-2,
            weight_decay=0.1,
            puzzle_emb_weight_decay=0.1,
            optimizer=optimizer,
            compile=False,
        )
        data = _batch(batch, seq_len, vocab_size, ids, "cpu")
        carry = head.initial_carry(data)
        for _ in range(steps):
            carry, loss, _, _ = head.step(carry, data)
            (loss / batch).backward()
            for opt, _ in optimizers:
                opt.step()
                opt.zero_grad(set_to_none=True)
        del head, optimizers, carry, loss
    events = sorted(
        (e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]" and e.device_type().name == "CPU"),
        key=lambda e: e.start_ns(),
    )
    live = peak = 0
    for event in events:
        live += event.nbytes()
        peak = max(peak, live)
    return float(peak)


def memory_dict(memory: StepMemory) -> dict[str, Any]:
    return asdict(memory)


if __name__ == "__main__":
    # python -m arcpipe.doctor.memory --write-table [CONFIG]: refresh TABLE after a preset or a shipped run changes
    import sys

    if sys.argv[1:2] != ["--write-table"]:
        raise SystemExit("usage: python -m arcpipe.doctor.memory --write-table [config/config.yaml]")
    written = write_table(Path(sys.argv[2] if len(sys.argv) > 2 else "config/config.yaml"))
    print(f"{TABLE}: {len(written)} entries")
