"""An offline Kaggle bundle: a directory that installs and answers ARC tasks without internet, as it is.

    make_bundle(checkpoint, identifiers, out_dir, KaggleConfig())    # `snakemake kaggle` (rule bundle_kaggle)

ARC Prize scores tasks the model has never seen, on Kaggle, offline. The bundle holds:

    checkpoint.pt, identifiers.json, config.yaml   the checkpoint, the identifiers it was trained with, its run config
    lib/arcpipe/                                    the arcpipe package, run from here (PYTHONPATH), not installed:
                                                    installing arcpipe would pull the workflow's dependencies
                                                    (snakemake, wandb, pandas, matplotlib), which predicting never uses
    requirements.txt                                what `arcpipe predict` imports beyond the Kaggle image, pinned to
                                                    the versions tested here
    wheels/                                         the wheels of requirements.txt and of their dependencies, for the
                                                    Kaggle image's Python (`kaggle.python`) on x86-64 Linux
    expects.txt                                     what the bundle expects the image to have instead of shipping it:
                                                    torch, numpy, numba (the image's scientific stack; a CUDA torch)
    run.sh CHALLENGES OUT [--minutes M] [...]       adapts the unseen tasks for `kaggle.adapt_share` of M minutes
                                                    (mode `kaggle.adapt_mode`), then predicts
    bundle.json, README.md                          the manifest (sha256 of every file) and how to run it

The wheels come from the package index at bundle time (`pip download`), or from a folder of wheels
(`kaggle.wheelhouse`) with the index switched off. Install on Kaggle:
`pip install --no-index --find-links wheels -r requirements.txt`.
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

import arcpipe
from arcpipe.config import ArcpipeError, KaggleConfig
from arcpipe.files import file_sha256
from arcpipe.models.io import read_weights

log = logging.getLogger(__name__)

# what `arcpipe predict` imports at run time beyond the image's scientific stack (their dependencies come along)
SHIPPED = ("pydantic", "pyyaml", "jsonschema")
# what the bundle expects the Kaggle image to provide, with arcpipe's floor (pyproject.toml)
EXPECTED = {"torch": ">=2.5,<3", "numpy": ">=1.26", "numba": ">=0.60"}
# x86-64 Linux wheel tags, newest first: Kaggle's image is glibc-based
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "linux_x86_64")


def make_bundle(
    checkpoint: str | Path, identifiers: str | Path, out_dir: str | Path, settings: KaggleConfig | None = None
) -> Path:
    """Write the bundle into out_dir (created; must not exist yet) and return it. Nothing is left at out_dir when
    a step fails (the bundle is assembled beside it and renamed into place)."""
    settings = settings or KaggleConfig()
    checkpoint, identifiers, out_dir = Path(checkpoint), Path(identifiers), Path(out_dir)
    if out_dir.exists():
        raise ArcpipeError(f"{out_dir}: already exists; remove it or choose another bundle directory")
    meta = {k: v for k, v in read_weights(checkpoint).items() if k != "model"}
    tmp = out_dir.with_name(f".{out_dir.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        shutil.copyfile(checkpoint, tmp / "checkpoint.pt")
        shutil.copyfile(identifiers, tmp / "identifiers.json")
        (tmp / "config.yaml").write_text(yaml.safe_dump(meta.get("run_config") or {}, sort_keys=False))
        package = Path(arcpipe.__file__).parent
        shutil.copytree(package, tmp / "lib" / "arcpipe", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        requirements = [f"{name}=={_version(name)}" for name in SHIPPED]
        (tmp / "requirements.txt").write_text("\n".join(requirements) + "\n")
        expects = [f"{name}{floor}  # tested with {_version(name)}" for name, floor in EXPECTED.items()]
        (tmp / "expects.txt").write_text("\n".join(expects) + "\n")
        wheels = download_wheels(tmp / "requirements.txt", tmp / "wheels", settings)
        (tmp / "run.sh").write_text(_run_sh(settings))
        (tmp / "run.sh").chmod(0o755)
        (tmp / "README.md").write_text(_readme(meta, settings, wheels))
        manifest = {
            "arch": meta.get("arch"),
            "epoch": meta.get("epoch"),
            "step": meta.get("step"),
            "identifiers_sha256": meta.get("identifiers_sha256"),
            "python": settings.python,
            "adapt_mode": settings.adapt_mode,
            "adapt_share": settings.adapt_share,
            "files": {str(p.relative_to(tmp)): file_sha256(p) for p in sorted(tmp.rglob("*")) if p.is_file()},
        }
        (tmp / "bundle.json").write_text(json.dumps(manifest, indent=1) + "\n")
        tmp.rename(out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log.info("Kaggle bundle written to %s (%d wheels)", out_dir, len(wheels))
    return out_dir


def download_wheels(requirements: Path, dest: Path, settings: KaggleConfig) -> list[str]:
    """`pip download` the requirements and their dependencies as wheels for the Kaggle image's Python on x86-64
    Linux into dest; from settings.wheelhouse with the index off, when given. The names of the wheels."""
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:", "--dest", str(dest)]
    cmd += ["--python-version", settings.python, "--implementation", "cp"]
    cmd += [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    if settings.wheelhouse is not None:
        if not Path(settings.wheelhouse).is_dir():
            raise ArcpipeError(f"kaggle.wheelhouse={settings.wheelhouse}: not a folder of wheels; fix the path")
        cmd += ["--no-index", "--find-links", str(settings.wheelhouse)]
    cmd += ["-r", str(requirements)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        where = f"the wheelhouse {settings.wheelhouse}" if settings.wheelhouse else "the package index"
        raise ArcpipeError(
            f"{requirements}: pip download from {where} failed ({last}); give a folder of wheels for Python "
            f"{settings.python} on x86-64 Linux as kaggle.wheelhouse, or run where the index is reachable"
        )
    names = sorted(p.name for p in dest.glob("*.whl"))
    expected = [name for name in names if _project(name) in EXPECTED]
    if expected:
        log.warning("the bundle's wheels include %s, which the Kaggle image should provide", ", ".join(expected))
    return names


def _run_sh(settings: KaggleConfig) -> str:
    share = settings.adapt_share
    return f"""#!/usr/bin/env bash
# Answer ARC tasks offline: tasks the checkpoint has not seen get new puzzle embeddings first (adaptation).
#   ./run.sh CHALLENGES.json SUBMISSION.json [--minutes M] [--adapt-mode MODE] [other `arcpipe predict` flags]
# --minutes M (default 720, Kaggle's 12 hours): adaptation gets {share:g} of it, the rest covers start-up and the
# prediction itself. Python: $PYTHON, else python3 (with torch, numpy and numba: expects.txt).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
[ $# -ge 2 ] || {{ echo "usage: $0 CHALLENGES.json SUBMISSION.json [--minutes M] [predict flags]" >&2; exit 2; }}
challenges="$1"; out="$2"; shift 2
minutes=720 mode={settings.adapt_mode} extra=()
while [ $# -gt 0 ]; do
    case "$1" in
        --minutes) minutes="$2"; shift 2 ;;
        --adapt-mode) mode="$2"; shift 2 ;;
        *) extra+=("$1"); shift ;;
    esac
done
python="${{PYTHON:-python3}}"
"$python" -c 'import torch, numpy, numba' 2> /dev/null || {{
    echo "run.sh: $python lacks torch, numpy or numba, which the bundle expects from the image (expects.txt)" >&2
    exit 1
}}
adapt=$("$python" -c "import sys; print(round(float(sys.argv[1]) * {share!r}, 3))" "$minutes")
PYTHONPATH="$here/lib${{PYTHONPATH:+:$PYTHONPATH}}" exec "$python" -m arcpipe predict "$challenges" \\
    "$here/checkpoint.pt" --identifiers "$here/identifiers.json" --config "$here/config.yaml" --out "$out" \\
    --adapt "$adapt" --adapt-mode "$mode" "${{extra[@]}}"
"""


def _readme(meta: dict, settings: KaggleConfig, wheels: list[str]) -> str:
    expects = ", ".join(f"{name} {floor}" for name, floor in EXPECTED.items())
    return f"""# arcpipe Kaggle bundle

Checkpoint: {meta.get("arch")} at epoch {meta.get("epoch")}, step {meta.get("step")}; identifiers.json sha256
{meta.get("identifiers_sha256")}. Everything here works without internet.

## Install (offline)

    pip install --no-index --find-links wheels -r requirements.txt

`wheels/` holds {len(wheels)} wheels for Python {settings.python} on x86-64 Linux: what `arcpipe predict` needs beyond
the Kaggle image. The image must provide {expects} (expects.txt; a CUDA torch on a GPU machine): they are not
shipped. arcpipe itself runs from `lib/` (run.sh sets PYTHONPATH); nothing else is installed.

## Run

    ./run.sh /kaggle/input/arc-prize-2025/arc-agi_test_challenges.json /kaggle/working/submission.json --minutes 600

Tasks the checkpoint was not trained on (every hidden Kaggle task) get new puzzle-embedding rows fitted on their
demonstrations first: adaptation mode `{settings.adapt_mode}` (`--adapt-mode rows|rows+full|full|lora`) for
{settings.adapt_share:g} of `--minutes` (default 720), then every test input gets `attempt_1` and `attempt_2`.
Under several GPUs: `PYTHONPATH=lib torchrun --nproc-per-node=4 -m arcpipe predict ...` with run.sh's flags.
Any other `arcpipe predict` flag passes through (`--solutions FILE` prints pass@K, `--seed N`, `--device cpu`).
bundle.json lists the sha256 of every file.
"""


def _version(name: str) -> str:
    # a local build tag (torch's "+cpu") would not resolve on another platform
    return importlib.metadata.version(name).split("+")[0]


def _project(wheel: str) -> str:
    return wheel.split("-")[0].lower().replace("_", "-")
