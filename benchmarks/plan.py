"""How long `snakemake -n full` takes to plan every full job, with no profile and through each cluster profile.

    .venv/bin/python benchmarks/plan.py [--repeats 3] [--profiles slurm,ice]

Each plan runs in a fresh working directory holding only the repository's config/ (nothing built, so the plan is
every segment, evaluation and report job). Baseline, in the same invocation: `snakemake --version`, which pays
Snakemake's own start-up (the import of every installed plugin) and nothing of ours. Prints, per variant, the best
of --repeats: wall time, CPU time of snakemake and its children, peak RSS, jobs planned per CPU second, and the
ratio of wall and CPU against the plain plan.

The SLURM executor plugin runs `scontrol show config` (timeout 10 s) when Snakemake imports it, on every
`snakemake` command, profile or not. Where scontrol is installed but its controller does not answer, that wait
lands on every command's wall clock and not on its CPU; the line `scontrol show config` shows it.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def measure(cmd: list[str], cwd: Path) -> tuple[float, float, float, str]:
    """(wall s, CPU s of the command and its children, peak RSS MB of the command or its largest child, stdout)."""
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=err, text=True, env=env)
        _, status, usage = os.wait4(proc.pid, 0)  # this command's own rusage, not the sum over earlier ones
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0), err.seek(0)
        if proc.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed (exit {proc.returncode}): {err.read().strip().splitlines()[-1:]}")
        return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, out.read()


def jobs_planned(stdout: str) -> int:
    table = stdout.split("Job stats:")[1].split("\n\n")[0]
    return int(re.search(r"^total\s+(\d+)$", table, re.M)[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--profiles", default="slurm,ice")
    args = parser.parse_args()
    snakemake = str(BIN / "snakemake")
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, 1-min load {os.getloadavg()[0]:.1f}")
    if shutil.which("scontrol"):
        started = time.perf_counter()
        code = subprocess.run(["scontrol", "show", "config"], capture_output=True, timeout=30).returncode
        print(f"scontrol show config: {time.perf_counter() - started:.2f} s wall, exit {code}")
    else:
        print("scontrol show config: no scontrol on PATH")
    variants = {"snakemake --version (baseline)": ([snakemake, "--version"], False), "plan, no profile": ([], True)}
    for name in filter(None, args.profiles.split(",")):
        variants[f"plan, --profile profiles/{name}"] = (["--profile", str(ROOT / "profiles" / name)], True)
    rows: dict[str, tuple[float, float, float, int]] = {}
    for label, (extra, is_plan) in variants.items():
        best = None
        for _ in range(args.repeats):
            with tempfile.TemporaryDirectory(prefix="arcpipe-plan-") as tmp:
                shutil.copytree(ROOT / "config", Path(tmp) / "config")
                cmd = [snakemake, "-s", str(ROOT / "Snakefile"), "-n", "full", *extra] if is_plan else extra
                wall, cpu, rss, out = measure(cmd, Path(tmp))
            jobs = jobs_planned(out) if is_plan else 0
            if best is None or wall < best[0]:
                best = (wall, cpu, rss, jobs)
        rows[label] = best
    plain = rows["plan, no profile"]
    heads = ("wall s", "CPU s", "RSS MB", "jobs", "jobs/CPU s", "wall x", "CPU x")
    print(f"\n{'variant':<36} " + " ".join(f"{h:>{w}}" for h, w in zip(heads, (7, 7, 7, 6, 10, 7, 6), strict=True)))
    for label, (wall, cpu, rss, jobs) in rows.items():
        rate = f"{jobs / cpu:.0f}" if jobs else "-"
        print(
            f"{label:<36} {wall:7.2f} {cpu:7.2f} {rss:7.0f} {jobs or '-':>6} {rate:>10} "
            f"{wall / plain[0]:7.2f} {cpu / plain[1]:6.2f}"
        )


if __name__ == "__main__":
    main()
