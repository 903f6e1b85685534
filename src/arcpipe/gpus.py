"""GPUs by name: dense bf16 peak and memory, the one table behind MFU (arcpipe.models.flops), the forecast
(arcpipe.forecast, a run's `gpu`) and `arcpipe doctor --gpu`; and the doctor's record of one run's throughput on
one of them, which the forecast prefers to an assumed MFU. Torch-free: the workflow plans with it.

    peak_bf16_flops("NVIDIA H100 80GB HBM3")                 # 989e12, from torch.cuda.get_device_name()
    GPUS["L4-24GB"].bf16_flops, GPUS["L4-24GB"].memory_gb    # 121e12, 24
    gpu_of_device("NVIDIA A100-SXM4-40GB", 39.4)              # GPUS["A100-40GB"]
    record = doctor_record("trm-arc1", run, device_name, memory_gb, train_examples_per_s, eval_examples_per_s)
    record = doctor_record("varc-vit-arc1", run, ..., ttt=figures)  # with its test-time-training step's ttt_* fields
    path = doctor_record_path(results, "trm-arc1", record["gpu"])   # results/doctor/trm-arc1/H100-80GB.json
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, get_args

# Dense bf16 tensor-core peaks (no sparsity) from NVIDIA's datasheets, in FLOP/s, by torch.cuda.get_device_name().
# The GeForce figures are the ones with fp32 accumulation, which is what PyTorch's bf16 matmuls use. First match
# wins: specific names come first.
PEAK_BF16_FLOPS: list[tuple[str, float]] = [
    (r"gh200", 989e12),
    (r"h100.*(pcie)", 756e12),
    (r"h100.*nvl", 835e12),
    (r"h100", 989e12),  # SXM ("NVIDIA H100 80GB HBM3")
    (r"h200.*nvl", 835e12),
    (r"h200", 989e12),
    (r"b200", 2250e12),
    (r"a100", 312e12),
    (r"l40s", 362e12),
    (r"l40\b", 181e12),
    (r"\bl4\b", 121e12),
    (r"\ba10\b", 125e12),
    # no datasheet figure: 76 SMs x 2.04 GHz boost x 512 bf16 FLOP per SM per clock (the desktop card's rate with
    # fp32 accumulation, 165e12 / (128 SMs x 2.52 GHz)); a laptop rarely holds its boost clock
    (r"rtx 4090 laptop", 79e12),
    (r"rtx 4090", 165e12),
    (r"rtx 6000 ada", 364e12),
]


@dataclass(frozen=True)
class GPU:
    """A GPU model as configs (`runs.<run>.gpu`) and `--gpu` name it."""

    name: str  # "H100-80GB"
    device: str  # what torch.cuda.get_device_name() calls it: its peak comes from PEAK_BF16_FLOPS
    memory_gb: float  # as sold (GB); torch reports GiB, a little less

    @property
    def bf16_flops(self) -> float:
        peak = peak_bf16_flops(self.device)
        assert peak is not None, self.device
        return peak


# the names a run's `gpu` and `arcpipe doctor --gpu` take
GPUName = Literal["H100-80GB", "H200-141GB", "A100-40GB", "A100-80GB", "L4-24GB", "RTX4090-24GB", "RTX4090-16GB"]
GPUS: dict[str, GPU] = {
    gpu.name: gpu
    for gpu in (
        GPU("H100-80GB", "NVIDIA H100 80GB HBM3", 80),
        GPU("H200-141GB", "NVIDIA H200", 141),  # torch reports 139.8 GB (2026-11-26)
        GPU("A100-40GB", "NVIDIA A100-SXM4-40GB", 40),
        GPU("A100-80GB", "NVIDIA A100-SXM4-80GB", 80),
        GPU("L4-24GB", "NVIDIA L4", 24),
        GPU("RTX4090-24GB", "NVIDIA GeForce RTX 4090", 24),
        GPU("RTX4090-16GB", "NVIDIA GeForce RTX 4090 Laptop GPU", 16),
    )
}
assert list(GPUS) == list(get_args(GPUName))
# what a GPU run without `gpu` is planned on: the GPU of the ICE profile, and one the cluster image is built for
DEFAULT_GPU: GPUName = "H100-80GB"


def peak_bf16_flops(device_name: str) -> float | None:
    """Dense bf16 peak of a GPU from its `torch.cuda.get_device_name()`, in FLOP/s; None when unknown."""
    index = _peak_index(device_name)
    return None if index is None else PEAK_BF16_FLOPS[index][1]


def gpu_of_device(device_name: str, memory_gb: float) -> GPU | None:
    """The named GPU a device is (same datasheet entry, the nearest memory size); None when none is."""
    index = _peak_index(device_name)
    same = [gpu for gpu in GPUS.values() if index is not None and _peak_index(gpu.device) == index]
    return min(same, key=lambda gpu: abs(gpu.memory_gb - memory_gb), default=None)


def doctor_record_path(results: Path, run_name: str, gpu: str) -> Path:
    """Where the doctor records a run's throughput on a named GPU, and where the forecast reads it."""
    return results / "doctor" / run_name / f"{gpu}.json"


def doctor_record(
    run_name: str,
    run: Any,
    device_name: str,
    memory_gb: float,
    train_examples_per_s: float,
    eval_examples_per_s: float,
    measured: datetime | None = None,
    *,
    ttt: Mapping[str, Any] | None = None,
) -> dict[str, Any] | None:
    """What `arcpipe doctor` measured of a run (a RunConfig) on one GPU, as the JSON record the forecast reads; None
    when the device is not a named GPU. train: rows per second through one training step at the run's micro-batch;
    eval: rows per second through every ACT step of an evaluation; both on one GPU. ttt: a `ttt:` run's test-time
    training step as its jobs step it (eval/ttt_measure.ttt_step_figures), recorded with the shape it was measured
    at (K tasks a step of batch_size rows, compiled or eager): the `ttt_*` fields, absent without it."""
    gpu = gpu_of_device(device_name, memory_gb)
    if gpu is None:
        return None
    record = {
        "run": run_name,
        "gpu": gpu.name,
        "device": device_name,
        "measured": (measured or datetime.now(UTC)).isoformat(timespec="seconds"),
        **record_shape(run),
        "train_examples_per_s": train_examples_per_s,
        "eval_examples_per_s": eval_examples_per_s,
    }
    if ttt is not None:
        record |= {
            "ttt_examples_per_s": ttt["examples_per_s"],  # K x batch_size rows a step
            "ttt_tasks_per_step": ttt["tasks_per_step"],
            "ttt_batch_size": ttt["batch_size"],
            "ttt_step": ttt["step"],  # "compiled" or "eager"
            "ttt_step_s": ttt["step_s"],
            "ttt_peak_gb": ttt["peak_gb"],
        }
    return record


def record_shape(run: Any) -> dict[str, Any]:
    """What a measured throughput depends on beyond the GPU: a record of another shape does not apply to the run."""
    return {
        "arch": run.arch,
        "preset": run.preset,
        "arch_overrides": run.arch_overrides,
        "micro_batch": run.micro_batch,
    }


def _peak_index(device_name: str) -> int | None:
    name = device_name.lower()
    return next((i for i, (pattern, _) in enumerate(PEAK_BF16_FLOPS) if re.search(pattern, name)), None)
