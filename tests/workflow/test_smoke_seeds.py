"""`seeds: [0, 1]` on smoke-trm, given as a --configfile overlay: Snakemake plans both seeds, and a seeds mistake
stops it before any job. The real run of smoke with seeds (and every other research feature) is
tests/workflow/test_smoke_research.py.

Each test uses a scratch working directory with the repository's Snakefile and a copy of config/config.yaml
(scratch.py), as tests/workflow/test_config_errors.py does.
"""

from __future__ import annotations

import re
from functools import partial

from scratch import snakemake

_snakemake = partial(snakemake, name="seeds.yaml")


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
