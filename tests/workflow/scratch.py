"""Run the repository's Snakefile in a scratch working directory with a --configfile overlay.

    proc = snakemake(tmp_path, {"evaluation": {"ensemble_last": 2}}, "-n", "smoke", name="ensemble.yaml")

The directory gets a copy of config/config.yaml (the Snakefile's own configfile, without SHARED_RUN_ONLY and the
ensembles that pool them) and the
overlay as YAML under `name`; Snakemake merges the overlay over the copy, and its error lines name both files
("config/config.yaml + ensemble.yaml: ..."). Test modules in tests/workflow import it as `from scratch import
snakemake`: pytest puts a test file's directory (no __init__.py here) on sys.path, as tests/cluster does for
clusterlib.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
# Runs of config/config.yaml left out of these scratch copies: the feature tests (gates, stop rules, seeds, ...) are
# about smoke-trm, and each of their `snakemake smoke` runs would train and evaluate these too, a CPU minute apiece.
# The shared smoke run (conftest.py, `smoke_run`) runs config/config.yaml as it is, these included.
SHARED_RUN_ONLY = ("smoke-varc", "smoke-loopvit")


def drop_runs(raw: dict, names: tuple[str, ...]) -> list[str]:
    """Take runs out of a raw config, with the ensembles that pool any of them (config `ensembles:`); those."""
    for name in names:
        raw["runs"].pop(name)
    ensembles = raw.get("ensembles") or {}
    dropped = [e for e, body in ensembles.items() if set(body["runs"]) & set(names)]
    for ensemble in dropped:
        del ensembles[ensemble]
    return dropped


def snakemake(
    work: Path, overlay: dict, *args: str, name: str = "overlay.yaml", timeout: int = 300, threads: int = 1
) -> subprocess.CompletedProcess:
    """`snakemake -s <repo>/Snakefile --directory work --max-threads threads *args --configfile name` run in `work`,
    output captured.

    One thread per job by default (Snakemake sets OMP_NUM_THREADS to a job's threads): the suite keeps more
    processes busy than the machine has cores, and a torch process of two threads then spends 10-14% more CPU on
    the same steps (an evaluation 7.8 -> 6.8 CPU-s, a smoke segment 13.5 -> 12.1). The weights are bitwise the
    same; evaluation losses may differ in their last bits (a sum's order follows the threads)."""
    (work / "config").mkdir(parents=True, exist_ok=True)
    raw = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    drop_runs(raw, SHARED_RUN_ONLY)
    (work / "config/config.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    (work / name).write_text(yaml.safe_dump(overlay))
    cmd = [
        str(BIN / "snakemake"),
        "-s",
        str(ROOT / "Snakefile"),
        "--directory",
        str(work),
        "--max-threads",
        str(threads),
        *args,
    ]
    cmd += ["--configfile", name]  # last: --configfile takes every path after it
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "WANDB_MODE": "disabled"}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=work)
