"""Every Snakemake call that plans shows the bill first: the forecast of each run of the named target (arcpipe.forecast,
the lines `arcpipe config check` prints), and the sum, before any job runs."""

from __future__ import annotations

import re

from scratch import ROOT, snakemake

from arcpipe.config import load_config


def test_a_dry_run_of_full_prints_each_full_runs_forecast_and_the_sum(tmp_path):
    proc = snakemake(tmp_path, {}, "-n", "full", name="none.yaml")
    assert proc.returncode == 0, proc.stderr[-3000:]
    cfg = load_config(ROOT / "config/config.yaml")
    full = cfg.runs_for("full")
    lines = [line.removeprefix("arcpipe: ") for line in proc.stderr.splitlines() if line.startswith("arcpipe: ")]
    forecast = {line.split(":")[0]: line for line in lines if line.split(":")[0] in cfg.runs}
    assert sorted(forecast) == sorted(full)  # the full runs, not the smoke runs
    hours = 0.0
    for run in full:
        found = re.search(r"(\d[\d,.]*) GPU-h train \([^)]*\) \+ (\d[\d,.]*) eval", forecast[run])
        assert found, forecast[run]
        hours += sum(float(x.replace(",", "")) for x in found.groups())
    total = next(line for line in lines if line.startswith("forecast in all: "))
    stated = float(re.search(r"all: ([\d,]+) GPU-h", total)[1].replace(",", ""))
    assert abs(stated - hours) <= 0.01 * hours + len(full)  # the sum of the rounded per-run figures
