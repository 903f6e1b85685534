"""`arcpipe doctor` and the preflight's record of the same backends, on this machine as it is (CPU here: the
GPU rows say "no CUDA"; on a CUDA machine the same tests check the GPU rows)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from arcpipe.config import load_config
from arcpipe.doctor.measure import fitting_micro_batch

ROOT = Path(__file__).resolve().parents[2]
SENTINEL = "arcpipe-doctor-sentinel-key-0123456789"


def doctor(*args: str, env: dict | None = None, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*prefix, sys.executable, "-m", "arcpipe", "doctor", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})},
        timeout=600,
    )


def test_a_cpu_run_is_measured_and_every_row_says_what_runs_and_why() -> None:
    done = doctor("--run", "smoke-trm", env={"WANDB_API_KEY": SENTINEL})
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert f"torch {torch.__version__}" in out
    if not torch.cuda.is_available():
        assert "GPUs               no CUDA" in out and "NCCL no CUDA" in out
    assert "attention          SDPA" in out and "flash-attn" in out  # the path and the reason
    assert "AdamATan2" in out
    assert "WANDB_API_KEY present (not shown)" in out and SENTINEL not in out + done.stderr
    train = next(line for line in out.splitlines() if line.strip().startswith("train step"))
    assert float(train.split()[2]) > 0 and "micro-batch 32" in train  # examples/s at the run's micro-batch
    assert "eval step" in out and out.rstrip().endswith("ok: 1 run(s) can run here")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA verdict")
def test_every_full_run_is_refused_on_a_machine_without_cuda_one_line_each() -> None:
    done = doctor("--no-steps")
    assert done.returncode == 1
    full = load_config(ROOT / "config/config.yaml").runs_for("full")
    errors = [line for line in done.stdout.splitlines() if line.startswith("arcpipe: error: ")]
    assert len(errors) == len(full) > 0
    for name, line in zip(full, errors, strict=True):
        assert line.startswith(f"arcpipe: error: run {name} trains on") and "CUDA is not available" in line


def test_an_unknown_run_is_one_line_and_status_2() -> None:
    done = doctor("--run", "trm-arc9", "--no-steps")
    assert done.returncode == 2
    runs = ", ".join(sorted(load_config(ROOT / "config/config.yaml").runs))
    assert done.stderr.strip().splitlines() == [f"arcpipe: error: --run trm-arc9: no such run (runs: {runs})"]


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="mounts a small /dev/shm (root)")
def test_a_small_dev_shm_stops_doctor_and_the_training_launch_in_one_line(tmp_path: Path) -> None:
    """A container's default 64 MB /dev/shm (a real tmpfs of that size, in a mount namespace of its own)."""
    small = ("unshare", "--mount", "sh", "-c", 'mount -t tmpfs -o size=64m tmpfs /dev/shm && exec "$@"', "sh")
    done = doctor("--run", "trm-arc1", "--no-steps", prefix=small)
    assert done.returncode == 1
    shm = [line for line in done.stdout.splitlines() if "/dev/shm has" in line]
    assert shm == [
        "arcpipe: error: run trm-arc1: /dev/shm has 64 MB free, NCCL between 4 GPU processes needs 2048 MB; "
        "give the container more (docker run --shm-size=2g; ICE jobs get shm_mb)"
    ]
    # the training job's launcher refuses before torchrun starts its processes
    launch = [sys.executable, "-m", "arcpipe.launch", "--config", "config/config.yaml", "--run", "trm-arc1"]
    done = subprocess.run([*small, *launch, "--", "true"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "/dev/shm has 64 MB free" in done.stderr, done.stderr
    # with the default /dev/shm the same launch goes ahead (the dry run prints the torchrun command)
    done = subprocess.run([*launch, "--dry-run", "--", "true"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "torchrun" in done.stdout, done.stderr


def test_the_suggested_micro_batch_divides_the_global_batch() -> None:
    run = load_config(ROOT / "config/config.yaml").runs["trm-arc1"]  # 768 over 4 GPUs: 192 per device
    assert fitting_micro_batch(run, 1000) == 192
    assert fitting_micro_batch(run, 100) == 96  # 2 accumulation steps
    assert fitting_micro_batch(run, 50) == 48
    assert fitting_micro_batch(run, 7) == 6
    assert fitting_micro_batch(run, 1) == 1


def test_preflight_records_the_backends_doctor_reports(tiny_dataset: Path, tmp_path: Path, write_config) -> None:
    config = write_config(tmp_path / "config.yaml", {"r": {}})
    report = tmp_path / "preflight.json"
    done = subprocess.run(
        [sys.executable, "-m", "arcpipe", "train", "--config", str(config), "--run", "r", "--data", str(tiny_dataset),
         "--out", str(tmp_path / "run"), "--preflight", str(report)],
        capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    got = json.loads(report.read_text())
    assert got["ok"] and got["train_examples_per_s"] > 0
    backends = got["backends"]
    assert backends["device"] == "cpu" and backends["dtype"] == "float32" and backends["compile"] == "off"
    assert backends["attention"].startswith("SDPA") and "flash-attn" in backends["attention_why"]
    assert backends["optimizer"].startswith("AdamATan2 torch") and backends["optimizer_why"]
