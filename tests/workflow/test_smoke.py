"""The workflow as researchers run it: `snakemake -n full` plans, `snakemake smoke` runs end to end on CPU.

The smoke run uses a scratch working directory (the repository's Snakefile, a copy of its config), W&B in offline
mode and a sentinel WANDB_API_KEY that must not appear in any file the run creates.
"""

from __future__ import annotations

import json
import re
import shutil

import pandas as pd
import pytest
import yaml
from smoke_workdir import ROOT, SENTINEL
from smoke_workdir import smoke_snakemake as _snakemake
from smoke_workdir import smoke_workdir as _workdir

from arcpipe.report.load import read_train_curves
from arcpipe.report.tables import N_STEPS, accuracy_curves, learning_table


def test_dry_run_of_full_plans_every_segment_without_touching_data(tmp_path):
    work = _workdir(tmp_path)
    proc = _snakemake(work, "-n", "full", "--quiet", "rules")  # how long it takes: benchmarks/plan.py
    assert proc.returncode == 0, proc.stderr
    cfg = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    # a gated run's segments are planned once its gate passed (tests/workflow/test_gates.py)
    runs = [r for r in cfg["runs"].values() if r["target"] == "full" and "gate" not in r]
    segments = sum(r["epochs"] // r["eval_interval"] for r in runs)
    assert f"train_segment{' ' * 8}{segments}" in proc.stdout.replace("\t", " ") or str(segments) in proc.stdout
    assert not (work / "results").exists()


# smoke_run: the session's shared `snakemake smoke` (tests/workflow/conftest.py)


def test_smoke_runs_end_to_end(smoke_run):
    work, proc, elapsed, _ = smoke_run
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    verify = json.loads((work / "results/data/smoke/verify.json").read_text())
    assert verify["ok"]
    cfg = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    run = cfg["runs"]["smoke-trm"]
    for epoch in range(run["eval_interval"], run["epochs"] + 1, run["eval_interval"]):
        assert (work / f"results/runs/smoke-trm/ckpt/epoch_{epoch}.pt").stat().st_size > 0
        lines = (work / f"results/runs/smoke-trm/metrics/epoch_{epoch}.jsonl").read_text().splitlines()
        assert lines and all("train/lm_loss" in json.loads(line) for line in lines)
    print(f"snakemake smoke took {elapsed:.0f} s")


# smoke-trm's training token accuracy (%), its first counted step vs the mean of its last N_STEPS (learning.md).
# benchmarks/learning_smoke.py, seeds 0-5 (benchmarks/RESULTS.md, "Smoke learning", 2026-11-23): first 2.1-16.8,
# last 40.8-52.0, rise 32.2-48.7 points. Thresholds: the lowest measured minus 10 points (about the spread of the
# last steps over seeds), for seeds, thread counts and CPUs not measured; an untrained model stays near the first.
MIN_LAST_ACCURACY = 30.0
MIN_RISE = 22.0


def test_an_ensemble_added_to_a_finished_smoke_pools_its_runs_without_retraining(smoke_run, tmp_path):
    # config `ensembles:`: smoke-trm's last checkpoint and smoke-varc's test-time training in one vote
    shared, done, _, _ = smoke_run
    assert done.returncode == 0
    work = tmp_path / "work"
    shutil.copytree(shared, work, symlinks=True)
    (work / "ensemble.yaml").write_text(yaml.safe_dump({"ensembles": {"both": {"runs": ["smoke-trm", "smoke-varc"]}}}))
    proc = _snakemake(
        work, "smoke", "--cores", "2", "--configfile", str(work / "ensemble.yaml"), env={"WANDB_MODE": "disabled"}
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    jobs = set(re.findall(r"^(\w+) +\d+$", proc.stdout + proc.stderr, flags=re.M)) - {"total"}  # "Job stats:"
    assert jobs == {"pool_ensemble", "render_report", "smoke"}, jobs  # nothing trained or evaluated again
    epochs = yaml.safe_load((ROOT / "config/config.yaml").read_text())["runs"]["smoke-trm"]["epochs"]
    members = [f"results/eval/smoke-trm/epoch_{epochs}", f"results/eval/smoke-varc/ttt_epoch_{epochs}"]
    ensemble = json.loads((work / "results/eval/both/ensemble/metrics.json").read_text())
    used = [json.loads((work / m / "metrics.json").read_text())["num_predictions_used"] for m in members]
    assert ensemble["info"]["ensemble"] == ["smoke-trm", "smoke-varc"] and ensemble["num_predictions_used"] == sum(used)
    submission = json.loads((work / "results/eval/both/ensemble/submission.json").read_text())
    assert submission.keys() == json.loads((work / members[0] / "submission.json").read_text()).keys()
    passk = pd.read_csv(work / "results/report/passk.csv")
    assert ("both", "ensemble") in set(zip(passk["run"], passk["checkpoint"], strict=True))


def test_smoke_training_accuracy_rises(smoke_run):
    work, proc, _, _ = smoke_run
    assert proc.returncode == 0
    curves = accuracy_curves(read_train_curves(sorted((work / "results/runs/smoke-trm/metrics").glob("epoch_*.jsonl"))))
    row = learning_table(curves).set_index("run").loc["smoke-trm"]
    first, last = row["first_accuracy"], row[f"last_{N_STEPS}_accuracy"]
    print(f"smoke-trm train/accuracy: first counted step {first:.1f}%, last {N_STEPS} {last:.1f}%")
    assert last >= MIN_LAST_ACCURACY and last - first >= MIN_RISE
    report = pd.read_csv(work / "results/report/learning.csv").set_index("run")
    assert report.loc["smoke-trm", "rise"] == pytest.approx(last - first)
    assert (work / "results/report/accuracy_vs_step.png").stat().st_size > 0


def test_smoke_ends_on_its_results_and_where_the_report_is(smoke_run):
    # arcpipe.outcome (the Snakefile's onsuccess): the run's line from the report's own tables, then the report
    work, proc, _, _ = smoke_run
    assert proc.returncode == 0
    summary = pd.read_csv(work / "results/report/summary.csv").set_index("run")
    learning = pd.read_csv(work / "results/report/learning.csv").set_index("run")

    runs = ["smoke-loopvit", "smoke-trm", "smoke-varc"]  # the smoke target's runs, in the summary's order
    width = max(map(len, runs))

    def expected(run: str) -> str:  # CPU: no GPU-hours
        last = f"{summary.loc[run, 'last pass@2']:.2f} ({summary.loc[run, 'epoch']})"
        accuracy = learning.loc[run, f"last_{N_STEPS}_accuracy"]
        return f"arcpipe:   {run:<{width}}  last {last}  train acc {accuracy:.1f}%  GPU-h 0.00"

    lines = [line for line in proc.stderr.splitlines() if line.startswith("arcpipe:")]
    assert lines[-(4 + len(runs)) :] == [
        "arcpipe: pass@2 in % of the last checkpoint (epoch), training token accuracy (mean of the last 3 counted "
        "steps), GPU-hours:",
        *map(expected, runs),
        "arcpipe: no checkpoint selected: evaluation.selection_tasks is 0",
        "arcpipe: report: results/report/summary.md (every table beside it as .md, .csv, .html)",
        "arcpipe: as one HTML file: snakemake --report report.html report",
    ], proc.stderr[-3000:]


def test_smoke_rerun_has_nothing_to_do(smoke_run):
    work, proc, _, _ = smoke_run
    assert proc.returncode == 0
    again = _snakemake(work, "-n", "smoke")
    assert again.returncode == 0, again.stderr
    assert "Nothing to be done" in again.stdout + again.stderr


def test_api_key_appears_in_no_file_the_run_created(smoke_run):
    _, proc, _, roots = smoke_run  # the work tree (results, logs, .snakemake, wandb), $HOME (.netrc), $TMPDIR
    assert proc.returncode == 0
    leaks = [
        str(path)
        for root in roots
        for path in root.rglob("*")
        if path.is_file() and SENTINEL.encode() in path.read_bytes()
    ]
    assert not leaks
