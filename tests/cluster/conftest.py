"""Fixtures for the cluster tests: a kubectl stand-in on PATH and a real single-machine SLURM (clusterlib.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from clusterlib import FAKE_KUBECTL, ROOT, SENTINEL, base_env, require_root


@pytest.fixture
def fake_ice(tmp_path: Path) -> Iterator[dict[str, str]]:
    """An environment whose `kubectl` is the stand-in, with the W&B Secret holding SENTINEL; pods killed after."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "kubectl").symlink_to(FAKE_KUBECTL)
    state = tmp_path / "k8s"
    secrets = tmp_path / "secrets.json"  # the stand-in for `kubectl create secret generic wandb ...`
    secrets.write_text(json.dumps({"wandb": {"api-key": SENTINEL}}))
    env = base_env(FAKE_KUBECTL_STATE=str(state), FAKE_KUBECTL_SECRETS=str(secrets), WANDB_API_KEY=SENTINEL)
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    yield env
    # whatever the test did: no pod process outlives it
    subprocess.run([sys.executable, str(FAKE_KUBECTL), "_kill-all"], env=env, check=False, capture_output=True)


@pytest.fixture(scope="session")
def slurm_lab() -> Iterator[None]:
    """cluster/slurm/lab-up.sh with 2 virtual nodes x 2 fake GPUs; torn down whatever the tests did."""
    require_root()
    env = base_env(SLURM_LAB_NODES="2", SLURM_LAB_GPUS="2")
    try:
        subprocess.run(["bash", str(ROOT / "cluster/slurm/lab-up.sh")], env=env, check=True, timeout=600)
        yield
    finally:
        subprocess.run(["bash", str(ROOT / "cluster/slurm/lab-down.sh")], env=env, check=False, timeout=120)
