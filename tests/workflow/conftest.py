"""Fixtures shared by the workflow tests: the real runs that several test modules read, each made once per session
(tests/once.py: once, whatever the number of xdist workers).

`smoke_run`: `snakemake smoke` with the repository's config/config.yaml (W&B offline, a sentinel API key, its own
$HOME and $TMPDIR). tests/workflow/test_smoke.py checks what it left; tests/workflow/test_keep_checkpoints.py
starts from a copy of it.

`quick_run`: `snakemake -j2 smoke` with smoke-trm at 8 epochs (4 boundaries) and quick evaluations
(session_runs.QUICK_OVERLAY). tests/workflow/test_quick_eval.py checks its schedule; tests/workflow/test_stop_rules.py
reads its last checkpoint as that of an uninterrupted 8-epoch run without a stop rule (what to evaluate is no part of
training: the run's training config, results/runs/smoke-trm/config.yaml, is the same).

A test that changes files of a shared run works on a copy (`shutil.copytree(..., symlinks=True)`), never on the
shared directory.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from once import once_per_session
from scratch import snakemake
from session_runs import QUICK_OVERLAY
from smoke_workdir import SENTINEL, smoke_snakemake, smoke_workdir


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory, worker_id) -> tuple[Path, subprocess.CompletedProcess, float, list[Path]]:
    """(work, proc, seconds, roots): the working directory after `snakemake smoke`, its process, its wall time, and
    the directories the run may write to (work, $HOME, $TMPDIR). Read only: copy it before changing anything."""

    def make() -> dict:
        work = smoke_workdir(tmp_path_factory.mktemp("smoke"))
        home = tmp_path_factory.mktemp("home")
        tmpdir = tmp_path_factory.mktemp("tmpdir")
        env = {"WANDB_API_KEY": SENTINEL, "WANDB_MODE": "offline", "HOME": str(home), "TMPDIR": str(tmpdir)}
        started = time.monotonic()
        proc = smoke_snakemake(work, "smoke", env=env)
        seconds = time.monotonic() - started
        process = {"args": proc.args, "returncode": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}
        return {"work": str(work), "process": process, "seconds": seconds, "roots": [str(work), str(home), str(tmpdir)]}

    made = once_per_session(tmp_path_factory, worker_id, "smoke_run", make)
    proc = subprocess.CompletedProcess(**made["process"])
    return Path(made["work"]), proc, made["seconds"], [Path(root) for root in made["roots"]]


@pytest.fixture(scope="session")
def quick_run(tmp_path_factory, worker_id) -> Path:
    """The working directory after `snakemake -j2 smoke` with session_runs.QUICK_OVERLAY. Read only."""

    def make() -> dict:
        work = tmp_path_factory.mktemp("quick")
        proc = snakemake(work, QUICK_OVERLAY, "-j2", "smoke", name="quick.yaml", timeout=800)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return {"work": str(work)}

    return Path(once_per_session(tmp_path_factory, worker_id, "quick_run", make)["work"])
