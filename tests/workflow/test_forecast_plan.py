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
    lines = [
        line.removeprefix("arcpipe forecast: ")
        for line in proc.stderr.splitlines()
        if line.startswith("arcpipe forecast: ")
    ]
    forecast = {line.split(":")[0]: line for line in lines if line.split(":")[0] in cfg.runs}
    assert sorted(forecast) == sorted(full)  # the full runs, not the smoke runs
    hours = 0.0
    for run in full:
        found = re.search(r"(\d[\d,.]*) GPU-h train \([^)]*\) \+ (\d[\d,.]*) eval", forecast[run])
        assert found, forecast[run]
        hours += sum(float(x.replace(",", "")) for x in found.groups())
    # the sum of the rounded per-run figures, planned; a staged run (urm-arc1's gate) makes the total a range whose
    # cheapest end leaves that run out (its gate may close)
    total = next(line for line in lines if line.startswith("in all: "))
    low, high = (float(x.replace(",", "")) for x in re.search(r"all: ([\d,]+)-([\d,]+) GPU-h", total).groups())
    assert abs(high - hours) <= 0.01 * hours + len(full)
    gated = re.search(r"staged: ([\d,.]+)-([\d,.]+) GPU-h", forecast["urm-arc1"])
    assert gated and float(gated[1]) == 0 and "cheapest: the gate closes" in forecast["urm-arc1"]
    assert abs(high - low - float(gated[2].replace(",", ""))) <= 0.01 * hours + len(full)


def test_a_dry_run_warns_when_a_runs_micro_batch_will_not_fit_its_gpu(tmp_path):
    """trm-arc1's 192 rows per device on an A100-40GB: the memory model (its shipped figures, nothing computed while
    planning) says at most about 130 fit, and the plan says so with the micro-batch that keeps the global batch."""
    proc = snakemake(tmp_path, {"runs": {"trm-arc1": {"gpu": "A100-40GB"}}}, "-n", "full", name="a100.yaml")
    assert proc.returncode == 0, proc.stderr[-3000:]
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("arcpipe: warning: ")]
    assert len(warnings) == 1 and "run trm-arc1: micro-batch 192 will not fit A100-40GB" in warnings[0], warnings
    assert "set runs.trm-arc1.micro_batch_size: 96 (2 accumulation steps" in warnings[0]
