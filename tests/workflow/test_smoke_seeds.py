"""`seeds: [0, 1]` on smoke-trm, given as a --configfile overlay: Snakemake plans, runs and reports both seeds.

Each test uses a scratch working directory with the repository's Snakefile and a copy of config/config.yaml, as
tests/workflow/test_config_errors.py does.
"""

from __future__ import annotations

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


def _snakemake(work: Path, overlay: dict, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    (work / "config").mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "config/config.yaml", work / "config/config.yaml")
    (work / "seeds.yaml").write_text(yaml.safe_dump(overlay))
    cmd = [str(BIN / "snakemake"), "-s", str(ROOT / "Snakefile"), "--directory", str(work), *args]
    cmd += ["--configfile", "seeds.yaml"]  # last: --configfile takes every path after it
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "WANDB_MODE": "disabled"}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=work)


def test_dry_run_of_smoke_plans_one_run_per_seed(tmp_path):
    proc = _snakemake(tmp_path, {"runs": {"smoke-trm": {"seeds": [0, 1]}}}, "-n", "smoke")
    assert proc.returncode == 0, proc.stderr
    checkpoints = set(re.findall(r"results/runs/([^/\s]+)/ckpt/epoch_(\d+)\.pt", proc.stdout))
    assert checkpoints == {(run, epoch) for run in ("smoke-trm-s0", "smoke-trm-s1") for epoch in ("2", "4")}
    evaluations = set(re.findall(r"results/eval/([^/\s]+)/epoch_\d+/metrics\.json", proc.stdout))
    assert evaluations == {"smoke-trm-s0", "smoke-trm-s1"}
    assert "results/report/seeds.csv" in proc.stdout
    assert not (tmp_path / "results").exists()


def test_a_seeds_mistake_stops_snakemake_before_any_job(tmp_path):
    proc = _snakemake(tmp_path, {"runs": {"smoke-trm": {"seeds": [1, 1]}}}, "-n", "smoke")
    assert proc.returncode != 0
    assert (
        "config/config.yaml + seeds.yaml: runs.smoke-trm.seeds=[1, 1]: seed 1 is listed twice; list each seed once"
        in proc.stderr.splitlines()
    )
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "results").exists()


@pytest.mark.slow
def test_smoke_with_two_seeds_reports_them_together(tmp_path):
    # one checkpoint per seed (epochs = eval_interval) halves the training of this test
    overlay = {"runs": {"smoke-trm": {"seeds": [0, 1], "epochs": 2}}}
    proc = _snakemake(tmp_path, overlay, "smoke", "--cores", "2", timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    for run, seed in (("smoke-trm-s0", 0), ("smoke-trm-s1", 1)):
        resolved = yaml.safe_load((tmp_path / f"results/runs/{run}/config.yaml").read_text())
        assert resolved["runs"][run]["seed"] == seed and resolved["runs"][run]["seed_group"] == "smoke-trm"
        assert (tmp_path / f"results/eval/{run}/epoch_2/metrics.json").is_file()
    seeds = pd.read_csv(tmp_path / "results/report/seeds.csv", dtype={"seeds": str})
    assert set(seeds["seed_group"]) == {"smoke-trm"} and set(seeds["epoch"]) == {2}
    assert set(seeds["num_seeds"]) == {2} and set(seeds["seeds"]) == {"0 1"}
    assert (seeds["min"] <= seeds["mean"]).all() and (seeds["mean"] <= seeds["max"]).all()
    assert "| smoke-trm | 2 | pass@1 | 2 | 0 1 |" in (tmp_path / "results/report/seeds.md").read_text()
    passk = pd.read_csv(tmp_path / "results/report/passk.csv")
    assert set(passk["run"]) == {"smoke-trm-s0", "smoke-trm-s1"}
    assert (tmp_path / "results/report/passk_vs_step.png").stat().st_size > 0
