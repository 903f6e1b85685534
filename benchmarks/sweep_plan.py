"""How long a sweep of ARMS arms x SEEDS seeds takes to expand and validate, to check (`arcpipe config check`, with
its forecast of every arm) and to plan (`snakemake -n sweep_bench`): the issue asks 200 arms x 3 seeds to plan in
seconds.

    .venv/bin/python benchmarks/sweep_plan.py [--arms 200] [--seeds 3] [--base trm-arc1] [--repeats 1]

The sweep `bench`, an overlay merged over config/config.yaml as `--configfile` merges it, crosses the base run's
arch_overrides.H_cycles (ARMS / 20 values) with lr (20 values). Each command runs in a fresh working directory
holding only config/ and the overlay (nothing built: the plan is every segment, evaluation and report job of every
arm). Prints, per step, the best of --repeats: wall time, CPU time, peak RSS and, for the plan, jobs planned; for
the expansion also the time of `validate_config` alone, imports left out.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import yaml
from plan import BIN, ROOT, jobs_planned, measure

LRS = 20  # lr values; ARMS / LRS values of H_cycles


def overlay(arms: int, seeds: int, base: str) -> dict:
    if arms % LRS:
        sys.exit(f"--arms={arms} is not a multiple of {LRS} (lr values); pick a multiple")
    grid = {"arch_overrides.H_cycles": list(range(1, arms // LRS + 1)), "lr": [k * 1e-5 for k in range(1, LRS + 1)]}
    return {"sweeps": {"bench": {"base": base, "grid": grid, "seeds": list(range(seeds))}}}


def expand_only(paths: list[str]) -> None:
    """The child of the expansion step: read, merge, expand and validate the files, timed without the imports."""
    from arcpipe.config import load_configs

    started = time.perf_counter()
    cfg = load_configs(paths)
    print(f"{time.perf_counter() - started:.3f} s to load {len(cfg.runs)} runs, {len(cfg.arms_of('bench'))} of bench")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--arms", type=int, default=200)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--base", default="trm-arc1")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--expand-only", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.expand_only:
        expand_only(args.expand_only)
        return
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, 1-min load {os.getloadavg()[0]:.1f}")
    print(f"sweep bench: {args.arms} arms x {args.seeds} seeds of {args.base}")
    files = ["config/config.yaml", "bench.yaml"]
    python, snakemake = sys.executable, str(BIN / "snakemake")
    steps = {
        "expand + validate (python)": [python, str(Path(__file__).resolve()), "--expand-only", *files],
        "arcpipe config check": [python, "-m", "arcpipe", "config", "check", *files],
        "snakemake -n sweep_bench": [snakemake, "-s", str(ROOT / "Snakefile"), "-n", "sweep_bench"]
        + ["--configfile", "bench.yaml"],
    }
    print(f"\n{'step':<28} {'wall s':>7} {'CPU s':>7} {'RSS MB':>7} {'jobs':>6}  note")
    for label, cmd in steps.items():
        best = None
        for _ in range(args.repeats):
            with tempfile.TemporaryDirectory(prefix="arcpipe-sweep-") as tmp:
                shutil.copytree(ROOT / "config", Path(tmp) / "config")
                (Path(tmp) / "bench.yaml").write_text(yaml.safe_dump(overlay(args.arms, args.seeds, args.base)))
                wall, cpu, rss, out = measure(cmd, Path(tmp))
            if best is None or wall < best[0]:
                best = (wall, cpu, rss, out)
        wall, cpu, rss, out = best
        jobs = jobs_planned(out) if "snakemake" in label else "-"
        note = out.strip().splitlines()[-1] if "python" in label else ""
        print(f"{label:<28} {wall:7.2f} {cpu:7.2f} {rss:7.0f} {jobs:>6}  {note}")


if __name__ == "__main__":
    main()
