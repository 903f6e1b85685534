"""An offline Kaggle bundle: a checkpoint with its config, identifiers, the predict entry point and a wheel list.

    python -c "from arcpipe.eval.kaggle import make_bundle; make_bundle('results/runs/R/ckpt/epoch_N.pt',
               'results/data/D/identifiers.json', 'results/kaggle/R')"

The bundle directory holds checkpoint.pt, identifiers.json, config.yaml (the run's resolved config saved in the
checkpoint), run.sh and requirements.txt (the packages `arcpipe predict` imports, pinned to the versions installed
here; the wheels/ folder is filled on a machine with internet). Its README says how to run it without internet.
"""

from __future__ import annotations

import importlib.metadata
import logging
import shutil
from pathlib import Path

import yaml

from arcpipe.config import ArcpipeError

log = logging.getLogger(__name__)

# what `arcpipe predict` imports at run time (not snakemake, pandas, matplotlib or wandb)
RUNTIME_PACKAGES = (
    "torch",
    "numpy",
    "numba",
    "llvmlite",
    "pydantic",
    "pydantic-core",
    "pyyaml",
    "jsonschema",
    "einops",
)


def make_bundle(checkpoint: str | Path, identifiers: str | Path, out_dir: str | Path) -> Path:
    """Write the bundle into out_dir (created; must not exist yet) and return it."""
    from arcpipe.models.io import read_weights

    checkpoint, identifiers, out_dir = Path(checkpoint), Path(identifiers), Path(out_dir)
    meta = read_weights(checkpoint)
    if out_dir.exists():
        raise ArcpipeError(f"{out_dir}: already exists; remove it or choose another bundle directory")
    tmp = out_dir.with_name(f".{out_dir.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "wheels").mkdir(parents=True)
    shutil.copyfile(checkpoint, tmp / "checkpoint.pt")
    shutil.copyfile(identifiers, tmp / "identifiers.json")
    (tmp / "config.yaml").write_text(yaml.safe_dump(meta.get("run_config") or {}, sort_keys=False))
    (tmp / "requirements.txt").write_text("\n".join(_pins()) + "\n")
    (tmp / "run.sh").write_text(RUN_SH)
    (tmp / "run.sh").chmod(0o755)
    (tmp / "README.md").write_text(_readme(meta))
    tmp.rename(out_dir)
    log.info("Kaggle bundle written to %s", out_dir)
    return out_dir


RUN_SH = """#!/usr/bin/env bash
# usage: ./run.sh CHALLENGES.json [SUBMISSION.json] [--solutions SOLUTIONS.json]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
challenges="$1"; out="${2:-submission.json}"; shift $(( $# > 1 ? 2 : 1 ))
arcpipe predict "$challenges" "$here/checkpoint.pt" --identifiers "$here/identifiers.json" --out "$out" "$@"
"""


def _pins() -> list[str]:
    pins = []
    for name in RUNTIME_PACKAGES:
        try:
            # a local build tag (torch's "+cpu") would not resolve on another platform
            pins.append(f"{name}=={importlib.metadata.version(name).split('+')[0]}")
        except importlib.metadata.PackageNotFoundError:
            continue
    return pins


def _readme(meta: dict) -> str:
    return f"""# arcpipe Kaggle bundle

Checkpoint: {meta.get("arch")} at epoch {meta.get("epoch")}, step {meta.get("step")}; identifiers.json sha256
{meta.get("identifiers_sha256")}. The model answers only tasks whose puzzle embeddings it was trained with (the
tasks named in identifiers.json); `arcpipe predict` refuses any other task.

## Prepare the wheels (on a machine with internet, same Python version and platform as the Kaggle image)

    pip download -r requirements.txt -d wheels/
    pip wheel --no-deps -w wheels/ /path/to/arcpipe/checkout     # the arcpipe wheel itself

For a CUDA build of torch add `--index-url https://download.pytorch.org/whl/cu121` (or the Kaggle image's CUDA)
to the first command. Upload this directory as a Kaggle dataset.

## Run without internet

    pip install --no-index --find-links wheels/ -r requirements.txt wheels/arcpipe-*.whl
    ./run.sh /kaggle/input/arc-prize-2025/arc-agi_test_challenges.json /kaggle/working/submission.json

`run.sh` calls `arcpipe predict CHALLENGES checkpoint.pt --identifiers identifiers.json --out SUBMISSION`; add
`--solutions SOLUTIONS.json` to print pass@K. Every test input of every task gets `attempt_1` and `attempt_2`.
"""
