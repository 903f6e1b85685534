"""`evaluation.ensemble_last: 2` on smoke, given as a --configfile overlay: Snakemake plans and runs the averaged
checkpoint, its evaluation and the pooled last-2 votes, and passk.csv holds both rows.

Each test uses a scratch working directory with the repository's Snakefile and a copy of config/config.yaml, as
tests/workflow/test_config_errors.py does.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
ENSEMBLE = {"evaluation": {"ensemble_last": 2}}


def _snakemake(work: Path, overlay: dict, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    (work / "config").mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "config/config.yaml", work / "config/config.yaml")
    (work / "ensemble.yaml").write_text(yaml.safe_dump(overlay))
    cmd = [str(BIN / "snakemake"), "-s", str(ROOT / "Snakefile"), "--directory", str(work), *args]
    cmd += ["--configfile", "ensemble.yaml"]  # last: --configfile takes every path after it
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "WANDB_MODE": "disabled"}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=work)


def test_dry_run_of_smoke_plans_the_average_its_evaluation_and_the_pooled_votes(tmp_path):
    proc = _snakemake(tmp_path, ENSEMBLE, "-n", "smoke")
    assert proc.returncode == 0, proc.stderr
    jobs = dict(re.findall(r"^(\w+)\s+(\d+)$", proc.stdout, re.MULTILINE))
    assert (jobs["average_checkpoints"], jobs["evaluate_average"], jobs["pool_last_votes"]) == ("1", "1", "1")
    average = re.search(r"rule average_checkpoints:\n\s+input: ([^\n]+)\n\s+output: ([^\n]+)", proc.stdout)
    assert average is not None
    assert average[1] == "results/runs/smoke-trm/ckpt/epoch_2.pt, results/runs/smoke-trm/ckpt/epoch_4.pt"
    assert average[2] == "results/runs/smoke-trm/ckpt/avg_last2.pt"
    report = re.search(r"rule render_report:\n\s+input: ([^\n]+)", proc.stdout)
    assert report is not None
    assert "results/eval/smoke-trm/avg_last2/metrics.json" in report[1]
    assert "results/eval/smoke-trm/pooled_last2/metrics.json" in report[1]
    assert not (tmp_path / "results").exists()


def test_without_ensemble_last_nothing_more_is_planned(tmp_path):
    proc = _snakemake(tmp_path, {}, "-n", "smoke")
    assert proc.returncode == 0, proc.stderr
    assert "avg_last" not in proc.stdout and "pooled_last" not in proc.stdout


def test_more_than_a_runs_checkpoints_stops_snakemake_in_one_line(tmp_path):
    proc = _snakemake(tmp_path, {"evaluation": {"ensemble_last": 3}}, "-n", "smoke")
    assert proc.returncode != 0
    assert (
        "config/config.yaml + ensemble.yaml: evaluation.ensemble_last=3 is more than the checkpoints of run "
        "smoke-trm (2) (epochs / eval_interval); lower ensemble_last" in proc.stderr.splitlines()
    )
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "results").exists()


@pytest.mark.slow
def test_smoke_with_ensemble_last_2_evaluates_the_average_and_reports_both_rows(tmp_path):
    import torch

    from arcpipe.eval.results import pool_votes
    from arcpipe.models.io import read_weights

    proc = _snakemake(tmp_path, ENSEMBLE, "smoke", "--cores", "2", timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    ckpt = tmp_path / "results/runs/smoke-trm/ckpt"
    averaged, a, b = (read_weights(ckpt / name)["model"] for name in ("avg_last2.pt", "epoch_2.pt", "epoch_4.pt"))
    for key, value in averaged.items():
        assert torch.equal(value, ((a[key].double() + b[key].double()) / 2).to(value.dtype)), key
    evals = tmp_path / "results/eval/smoke-trm"
    pooled = json.loads((evals / "pooled_last2/metrics.json").read_text())
    scores = pool_votes([evals / "epoch_2/votes.npz", evals / "epoch_4/votes.npz"], (1, 2))[0]
    assert (pooled["pass@1"], pooled["pass@2"]) == (scores.pass_at[1], scores.pass_at[2])
    avg = json.loads((evals / "avg_last2/metrics.json").read_text())
    passk = pd.read_csv(tmp_path / "results/report/passk.csv")
    assert list(passk["checkpoint"]) == ["epoch_2", "epoch_4", "avg_last2", "pooled_last2"]
    assert list(passk["pass@2"])[2:] == [100 * avg["pass@2"], 100 * pooled["pass@2"]]
