"""Run the repository's Snakefile in a scratch working directory with a --configfile overlay.

    proc = snakemake(tmp_path, {"evaluation": {"ensemble_last": 2}}, "-n", "smoke", name="ensemble.yaml")

The directory gets a copy of config/config.yaml (the Snakefile's own configfile) and the overlay as YAML under
`name`; Snakemake merges the overlay over the copy, and its error lines name both files
("config/config.yaml + ensemble.yaml: ..."). Test modules in tests/workflow import it as `from scratch import
snakemake`: pytest puts a test file's directory (no __init__.py here) on sys.path, as tests/cluster does for
clusterlib.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


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
    shutil.copy(ROOT / "config/config.yaml", work / "config/config.yaml")
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
