"""`evaluation.ensemble_last: 2` on smoke, given as a --configfile overlay: Snakemake plans the averaged checkpoint,
its evaluation and the pooled last-2 votes, and a too large ensemble stops it before any job. The real run of smoke
with ensemble_last (and every other research feature) is tests/workflow/test_smoke_research.py.

Each test uses a scratch working directory with the repository's Snakefile and a copy of config/config.yaml
(scratch.py), as tests/workflow/test_config_errors.py does.
"""

from __future__ import annotations

import re
from functools import partial

from scratch import snakemake

ENSEMBLE = {"evaluation": {"ensemble_last": 2}}
_snakemake = partial(snakemake, name="ensemble.yaml")


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
