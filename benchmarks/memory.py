"""The memory model (arcpipe.doctor.memory) against the CPU allocator's measured peak of the same training step, per
arch at the tiny preset, and the largest micro-batch of each published preset on each named GPU.

    python benchmarks/memory.py            # tiny: model, measured, ratio at micro-batch 1 and 4; arc: per GPU
"""

from __future__ import annotations

from arcpipe.config.arch import make_arch_config
from arcpipe.doctor.memory import gpu_plan, measured_peak, step_memory
from arcpipe.gpus import GPUS

ARCHS = ["trm", "hrm", "urm", "transformer"]
IDS_TINY, IDS_ARC = 10, 960_001  # ARC-AGI-1 with 1000 augmentations: ~960k puzzle-embedding rows


def main() -> None:
    print("tiny preset, bf16 forward, AdamATan2: model vs measured peak (MiB)")
    for arch in ARCHS:
        cfg = make_arch_config(arch, "tiny", {})
        model = step_memory(cfg, num_puzzle_identifiers=IDS_TINY)
        for batch in (1, 4):
            measured = measured_peak(cfg, batch, num_puzzle_identifiers=IDS_TINY)
            got = model.peak_bytes(batch)
            print(f"  {arch:<12} batch {batch}: model {got / 2**20:7.2f}  measured {measured / 2**20:7.2f}  "
                  f"ratio {got / measured:.3f}")  # fmt: skip
    print(f"arc preset, {IDS_ARC:,} puzzle ids, one slot (micro-batch = per-device batch): largest micro-batch")
    for arch in ARCHS:
        model = step_memory(make_arch_config(arch, "arc", {}), num_puzzle_identifiers=IDS_ARC)
        plans = ", ".join(f"{gpu} {gpu_plan(model, gpu, 4096).largest}" for gpu in GPUS)
        row = f"{model.fixed_bytes / 2**30:.2f} GiB + {model.per_example_bytes / 2**20:.0f} MiB/row"
        print(f"  {arch:<12} {row}: {plans}")


if __name__ == "__main__":
    main()
