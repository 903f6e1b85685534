"""The workflow's small jobs start cheaply: a shim that only reads and writes configs, records or tables imports no
torch (1.0-1.5 s of CPU per process; a `full` plan runs dozens of these jobs, the test suite hundreds)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "workflow/scripts"
# the shims whose job is torch's: averaging checkpoints, bundling a checkpoint with the library for Kaggle
NEED_TORCH = {"average_checkpoints.py", "bundle_kaggle.py"}
LIGHT = sorted(p.name for p in SCRIPTS.glob("*.py") if p.name not in NEED_TORCH)


def test_every_shim_is_sorted_into_light_or_torch() -> None:
    assert len(LIGHT) >= 10 and {p.name for p in SCRIPTS.glob("*.py")} >= NEED_TORCH


@pytest.mark.parametrize("name", LIGHT)
def test_a_shim_that_moves_no_tensor_imports_no_torch(name: str) -> None:
    source = (SCRIPTS / name).read_text()
    imports = source.split("\nsnakemake = snakemake")[0]  # what the shim imports before Snakemake's object is used
    assert imports != source, f"{name}: no `snakemake = snakemake` line"
    code = f"{imports}\nimport sys\nprint(sorted(m for m in ('torch', 'wandb') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", f"{name} imports {done.stdout.strip()}"
