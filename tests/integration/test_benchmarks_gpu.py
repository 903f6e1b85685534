"""benchmarks/gpu.py without a GPU: the GPU rows are reported as skipped and the reduced CPU row runs end to end."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EAGER_ROW = re.compile(r"arcpipe\s+4\s+[\d.]+M\s+[\d.]+\s+[\d.]+\s+-")  # eager ex/s; no compiled step


def bench(*args: str) -> list[str]:
    """benchmarks/gpu.py ARGS with CUDA hidden, so that the same holds on a machine that has a GPU (the GPU rows are
    the benchmark's job, not a test's): its output lines."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu.py"), *args, "--cpu-steps", "1"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.splitlines()


def test_gpu_benchmark_runs_on_cpu_and_skips_the_gpu_rows() -> None:
    lines = bench("--cpu-archs", "trm")
    for run in ("trm-arc1", "hrm-arc1", "urm-arc1", "trm-arc2", "urm-arc2"):  # the full runs of config/config.yaml
        assert f"{run:<22} skipped (no CUDA)" in lines, lines
    (cpu_row,) = [line for line in lines if line.startswith("trm-arc1@tiny")]
    assert EAGER_ROW.search(cpu_row), cpu_row
    assert lines[-1].startswith("wall ")


def test_gpu_benchmark_measures_a_gated_run_alone() -> None:
    # urm-arc1 is gated on urm-arc1-validate; the benchmark measures the run's step in a one-run config, which must
    # not carry the gate (the first GPU session's urm row failed on it: "gate.run='urm-arc1-validate' is not a run")
    (cpu_row,) = [
        line for line in bench("--runs", "urm-arc1", "--cpu-archs", "urm") if line.startswith("urm-arc1@tiny")
    ]
    assert EAGER_ROW.search(cpu_row), cpu_row
