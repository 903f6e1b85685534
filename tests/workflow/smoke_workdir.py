"""The working directory of the shared smoke run (tests/workflow/conftest.py, fixture `smoke_run`) and the
Snakemake call that runs in it: the repository's Snakefile (`-s`) on a copy of config/ (config.yaml, schema.json)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SENTINEL = "arcpipe-sentinel-" + "0123456789abcdef" * 2  # a fake W&B key: must appear in no file the run creates


def smoke_snakemake(
    workdir: Path, *args: str, env: dict | None = None, timeout: int = 900
) -> subprocess.CompletedProcess:
    """`snakemake -s <repo>/Snakefile --directory workdir *args`, output captured."""
    cmd = [str(BIN / "snakemake"), "-s", str(ROOT / "Snakefile"), "--directory", str(workdir), *args]
    full_env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", **(env or {})}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full_env)


def smoke_workdir(tmp: Path, config: dict | None = None) -> Path:
    """tmp with config/schema.json and config/config.yaml (the repository's, or `config`)."""
    (tmp / "config").mkdir(parents=True)
    shutil.copy(ROOT / "config/schema.json", tmp / "config/schema.json")
    raw = config or yaml.safe_load((ROOT / "config/config.yaml").read_text())
    (tmp / "config/config.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    return tmp
