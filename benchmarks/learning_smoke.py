"""Does the smoke run learn? Training token accuracy of smoke-trm's first and last counted steps, per seed.

    python benchmarks/learning_smoke.py [--seeds 0 1 2 3] [--cores 2] [--work DIR]

Trains smoke-trm (config/config.yaml, unchanged but for `seeds:`) through Snakemake in a scratch working directory,
only up to its last training segment (no evaluation, no report), and prints per seed `train/accuracy` at every
counted step (at least one row halted), at the first one and averaged over the last `N_STEPS`, with
`report.tables.learning_table`: the same numbers as the report's learning.md. The thresholds of
tests/workflow/test_smoke.py::test_smoke_training_accuracy_rises come from these numbers (benchmarks/RESULTS.md).
With `--work` on a directory it already trained in, Snakemake has nothing to do and the numbers are read again.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from arcpipe.report.load import read_train_curves
from arcpipe.report.tables import N_STEPS, accuracy_curves, learning_table

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--work", type=Path, help="scratch working directory to keep (default: a temporary one)")
    args = parser.parse_args()
    if args.work:
        measure(args.work, args.seeds, args.cores)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            measure(Path(tmp), args.seeds, args.cores)


def measure(work: Path, seeds: list[int], cores: int) -> None:
    (work / "config").mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "config/config.yaml", work / "config/config.yaml")
    shutil.copy(ROOT / "config/schema.json", work / "config/schema.json")
    (work / "seeds.yaml").write_text(yaml.safe_dump({"runs": {"smoke-trm": {"seeds": seeds}}}))
    epochs = yaml.safe_load((ROOT / "config/config.yaml").read_text())["runs"]["smoke-trm"]["epochs"]
    targets = [f"results/runs/smoke-trm-s{seed}/metrics/epoch_{epochs}.jsonl" for seed in seeds]
    cmd = [str(BIN / "snakemake"), "-s", str(ROOT / "Snakefile"), "--directory", str(work), "--cores", str(cores)]
    cmd += [*targets, "--configfile", "seeds.yaml"]  # last: --configfile takes every path after it
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "WANDB_MODE": "disabled"}
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=work)
    if proc.returncode:
        sys.exit(proc.stderr[-4000:])
    print(f"{len(seeds)} seeds trained in {time.monotonic() - started:.0f} s (--cores {cores})")
    paths = sorted((work / "results/runs").glob("smoke-trm-s*/metrics/epoch_*.jsonl"))
    curves = accuracy_curves(read_train_curves(paths))
    print("train/accuracy (%) at the counted steps:")
    for run, group in curves.groupby("run", sort=True):
        steps = ", ".join(f"{s}: {100 * a:.1f}" for s, a in zip(group["step"], group["train/accuracy"], strict=True))
        print(f"  {run}: {steps}")
    table = learning_table(curves)
    print(f"train/accuracy (%) at the first counted step and over the last {N_STEPS}:")
    print(table.to_string(index=False, float_format="%.1f"))
    print(f"lowest last: {table[f'last_{N_STEPS}_accuracy'].min():.1f}%, lowest rise: {table['rise'].min():.1f} pts")


if __name__ == "__main__":
    main()
