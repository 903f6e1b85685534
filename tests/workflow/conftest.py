"""Fixtures shared by the workflow tests: the real runs that several test modules read, each made once per session.

`smoke_run`: `snakemake smoke` with the repository's config/config.yaml (W&B offline, a sentinel API key, its own
$HOME and $TMPDIR). tests/workflow/test_smoke.py checks what it left; tests/workflow/test_keep_checkpoints.py
starts from a copy of it. A test that changes files of a shared run works on a copy (`shutil.copytree(...,
symlinks=True)`), never on the shared directory.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from smoke_workdir import SENTINEL, smoke_snakemake, smoke_workdir


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess, float, list[Path]]:
    """(work, proc, seconds, roots): the working directory after `snakemake smoke`, its process, its wall time, and
    the directories the run may write to (work, $HOME, $TMPDIR). Read only: copy it before changing anything."""
    work = smoke_workdir(tmp_path_factory.mktemp("smoke"))
    home = tmp_path_factory.mktemp("home")
    tmpdir = tmp_path_factory.mktemp("tmpdir")
    env = {"WANDB_API_KEY": SENTINEL, "WANDB_MODE": "offline", "HOME": str(home), "TMPDIR": str(tmpdir)}
    started = time.monotonic()
    proc = smoke_snakemake(work, "smoke", env=env)
    return work, proc, time.monotonic() - started, [work, home, tmpdir]
