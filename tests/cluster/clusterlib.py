"""Helpers shared by the cluster tests: the root gate, Snakemake under a timeout, the sentinel W&B key.

Tests that bring up SLURM need root: they skip for a researcher without it, and fail instead of skipping when
CI=true. Every Snakemake call goes through `snakemake()` (SIGINT after a timeout: on SIGTERM Snakemake waits for
its jobs).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
FAKE_KUBECTL = Path(__file__).resolve().parent / "fake_kubectl.py"
SENTINEL = "wandb-sentinel-7f3c9e1d5b"  # a fake W&B key: must never land in a file we render
VENV_BIN = Path(sys.executable).parent
# How often the driver asks the scheduler about its jobs: the one setting the tests give on the command line beside
# the real profiles, since the profiles keep what suits a shared cluster and the lab's jobs take seconds. The SLURM
# plugin checks first after `slurm-init-seconds-before-status-checks` (profiles/slurm: 40 s) and then every 10 s
# longer while nothing finished (up to 180 s): on the lab most of a run was spent waiting for that. Snakemake asks
# the ICE status program every `seconds-between-status-checks` (10 s by default). A user can pass the same flags.
SLURM_POLL = ["--slurm-init-seconds-before-status-checks", "2"]
ICE_POLL = ["--seconds-between-status-checks", "5"]  # each check starts two Python programs: not faster


def require_root() -> None:
    """Skip without root, except under CI, where a skipped cluster test would hide a broken cluster path."""
    if os.geteuid() == 0:
        return
    if os.environ.get("CI") == "true":
        pytest.fail("cluster tests must run in CI, and they need root (SLURM daemons, packages)")
    pytest.skip("needs root: brings up a throwaway SLURM on this machine")


def snakemake(args: list[str], cwd: Path, env: dict[str, str], timeout_s: int) -> subprocess.CompletedProcess:
    """`timeout -s INT -k 30 N snakemake ...` in its own process group, output in cwd/snakemake.log.

    If the test is interrupted (pytest-timeout, Ctrl-C), the whole group gets SIGINT, then SIGKILL: Snakemake
    cancels its cluster jobs on SIGINT and must not outlive the test.
    """
    argv = ["timeout", "-s", "INT", "-k", "30", str(timeout_s), str(VENV_BIN / "snakemake"), *args]
    with open(cwd / "snakemake.log", "w") as log:
        proc = subprocess.Popen(
            argv, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=default_sigint,
        )  # fmt: skip
        try:
            returncode = proc.wait()
        except BaseException:
            _stop_group(proc)
            raise
    return subprocess.CompletedProcess(argv, returncode, (cwd / "snakemake.log").read_text())


def default_sigint() -> None:
    """Popen's preexec_fn: SIGINT as by default in the child. A test run started in the background of a
    non-interactive shell inherits SIGINT ignored, and a Python started so keeps ignoring it: Snakemake would never
    see the Ctrl-C these tests send (in one such CI run, two tests waited 120 s on a Snakemake that did not stop)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _stop_group(proc: subprocess.Popen) -> None:
    for sig, grace in ((signal.SIGINT, 30), (signal.SIGKILL, 5)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def base_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SNAKEMAKE", "SLURM_"))}
    env["PATH"] = f"{VENV_BIN}:{env.get('PATH', '')}"
    env.update(extra)
    return env


def write_runs(path: Path, runs: dict[str, dict], **extra: object) -> Path:
    path.write_text(json.dumps({"runs": runs, **extra}))
    return path


def files_containing(root: Path, needle: str) -> list[Path]:
    hits = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            try:
                if needle.encode() in path.read_bytes():
                    hits.append(path)
            except OSError:
                continue
    return hits
