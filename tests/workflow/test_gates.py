"""Gates in the real workflow: `snakemake smoke` with two gated runs behind smoke-trm's evaluation, one gate that
falls short (min 1.0, at a named epoch) and one that passes (min 0, at smoke-trm's last checkpoint).

The run that falls short must never start (no training job, checkpoint, config or log of it), with one line
saying why and the record kept, while every other run completes and Snakemake exits 0; the run that passes must
train. Dry runs must show the gates: smoke with the overlay, `full` with the shipped recipe, and `full` with the
rehearsal overlay (config/rehearsal.yaml) through both cluster profiles.

Each test uses a scratch working directory with the repository's Snakefile and a copy of config/config.yaml
(scratch.py), as tests/workflow/test_smoke_seeds.py does; the gated run starts from a copy of the session's smoke
run (fixture `gated_smoke`).
"""

from __future__ import annotations

import json
import re
import shutil

import pandas as pd
import pytest
import yaml
from scratch import ROOT, snakemake
from session_runs import SMALL_TRM

from arcpipe.gates import gate_status

RUN = {
    "target": "smoke",
    "dataset": "smoke",
    "arch": "trm",
    "preset": "tiny",
    "epochs": 2,
    "eval_interval": 2,  # one segment
    "global_batch_size": 32,
    "lr": 1.0e-3,
    "lr_warmup_steps": 4,
    "puzzle_emb_lr": 1.0e-2,
    "arch_overrides": SMALL_TRM,  # what a gated run learns is no part of these tests
}
GATES = {
    "runs": {
        "smoke-blocked": {**RUN, "gate": {"run": "smoke-trm", "metric": "pass@2", "min": 1.0, "epoch": 2}},
        "smoke-passed": {**RUN, "gate": {"run": "smoke-trm", "metric": "pass@1", "min": 0.0}},
    }
}
pytestmark = pytest.mark.slow  # gated_smoke: about a minute

SHORT = (
    "arcpipe: gate: smoke-blocked not started: smoke-trm pass@2 = {value:.4g} at epoch 2 < min 1 "
    "(record results/gates/smoke-blocked.json)"
)


@pytest.fixture(scope="module")
def gated_smoke(smoke_run, tmp_path_factory):
    """`snakemake smoke` with the two gated runs added to a copy of the session's smoke run (tests/workflow/
    conftest.py: smoke-trm trained and evaluated with the same config), as a researcher adds gated runs behind a run
    they have: the gates decide from smoke-trm's evaluations in this call, then the run that passed trains."""
    shared, done, _, _ = smoke_run
    assert done.returncode == 0, done.stderr[-4000:]
    work = tmp_path_factory.mktemp("gates") / "work"
    shutil.copytree(shared, work, symlinks=True)
    proc = snakemake(work, GATES, "smoke", name="gates.yaml", timeout=1200)
    return work, proc, shared


def test_a_gate_that_falls_short_never_starts_its_run(gated_smoke):
    work, proc, _ = gated_smoke
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    record = json.loads((work / "results/gates/smoke-blocked.json").read_text())
    assert record["passed"] is False and record["gate_run"] == "smoke-trm" and record["epoch"] == 2
    assert record["value"] < 1.0 and record["min"] == 1.0
    # no training job started: nothing of the run in results/runs or results/eval, no log of any job of it
    assert not (work / "results/runs/smoke-blocked").exists()
    assert not (work / "results/eval/smoke-blocked").exists()
    assert [p.parent.name for p in (work / "logs").glob("*/smoke-blocked*")] == ["check_gate"]
    assert "results/runs/smoke-blocked/" not in proc.stdout + proc.stderr  # no job of the run was even planned
    # one line says why, printed once, also in the gate job's log
    line = SHORT.format(value=record["value"])
    assert (proc.stdout + proc.stderr).splitlines().count(line) == 1
    assert line.removeprefix("arcpipe: ") in (work / "logs/check_gate/smoke-blocked.log").read_text()
    assert gate_status(work / "results", "smoke-blocked") == (
        f"not started: gate smoke-trm pass@2 = {record['value']:.4g} at epoch 2 < min 1"
    )


def test_the_other_runs_complete_and_the_report_leaves_the_stopped_run_out(gated_smoke):
    work, proc, shared = gated_smoke
    assert proc.returncode == 0
    for path in sorted((shared / "results/runs/smoke-trm/ckpt").glob("*.pt")):  # the gate run was not retrained
        assert (work / path.relative_to(shared)).read_bytes() == path.read_bytes(), path.name
    for run, epochs in (("smoke-trm", (2, 4)), ("smoke-passed", (2,))):
        for epoch in epochs:
            assert (work / f"results/runs/{run}/ckpt/epoch_{epoch}.pt").stat().st_size > 0
            assert json.loads((work / f"results/eval/{run}/epoch_{epoch}/metrics.json").read_text())["epoch"] == epoch
    passk = pd.read_csv(work / "results/report/passk.csv")
    assert {"smoke-trm", "smoke-passed"} <= set(passk["run"]) and "smoke-blocked" not in set(passk["run"])


def test_a_gate_that_passes_trains_its_run_after_the_decision(gated_smoke):
    work, proc, _ = gated_smoke
    assert proc.returncode == 0
    record_path = work / "results/gates/smoke-passed.json"
    record = json.loads(record_path.read_text())
    assert record["passed"] is True and record["epoch"] == 4  # smoke-trm's last checkpoint: no epoch named
    assert gate_status(work / "results", "smoke-passed") is None
    assert "arcpipe: gate: smoke-passed may train: smoke-trm pass@1 = " in proc.stderr
    first = work / "results/runs/smoke-passed/ckpt/epoch_2.pt"
    assert first.stat().st_mtime >= record_path.stat().st_mtime
    assert (work / "logs/train_segment/smoke-passed/epoch_2.log").is_file()


def test_after_the_run_nothing_is_left_to_do_and_a_lowered_threshold_checks_again(gated_smoke, tmp_path):
    work, proc, _ = gated_smoke
    assert proc.returncode == 0
    again = snakemake(work, GATES, "-n", "smoke", name="gates.yaml")
    assert again.returncode == 0, again.stderr
    assert "Nothing to be done" in again.stdout + again.stderr
    lowered = {"runs": {**GATES["runs"], "smoke-blocked": {**GATES["runs"]["smoke-blocked"]}}}
    lowered["runs"]["smoke-blocked"]["gate"] = {**lowered["runs"]["smoke-blocked"]["gate"], "min": 0.0}
    plan = snakemake(work, lowered, "-n", "smoke", name="lowered.yaml")
    assert plan.returncode == 0, plan.stderr
    assert re.findall(r"checkpoint check_gate:\n.*\n\s+output: (\S+)", plan.stdout) == [
        "results/gates/smoke-blocked.json"
    ]


def _job_counts(stdout: str) -> dict[str, int]:
    table = stdout.split("Job stats:")[1].split("\n\n")[0]
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M)}


def test_a_dry_run_shows_every_gate_in_the_plan(tmp_path):
    proc = snakemake(tmp_path, GATES, "-n", "smoke", name="gates.yaml")
    assert proc.returncode == 0, proc.stderr
    outputs = re.findall(r"checkpoint check_gate:\n.*\n\s+output: (\S+)", proc.stdout)
    assert sorted(outputs) == ["results/gates/smoke-blocked.json", "results/gates/smoke-passed.json"]
    # the gated runs' own jobs are planned once their gate decided; the gate run's are planned now
    assert "results/runs/smoke-trm/ckpt/epoch_4.pt" in proc.stdout
    assert "results/runs/smoke-passed/" not in proc.stdout and "results/runs/smoke-blocked/" not in proc.stdout
    dag = snakemake(tmp_path, GATES, "--dag", "dot", "smoke", name="gates.yaml")
    assert dag.returncode == 0, dag.stderr
    assert len(re.findall(r'label = "check_gate\\nrun: smoke-(?:blocked|passed)"', dag.stdout)) == 2
    assert not (tmp_path / "results").exists()


def test_the_shipped_recipe_plans_its_gate_in_the_full_dry_run(tmp_path):
    proc = snakemake(tmp_path, {}, "-n", "full", "--quiet", "rules")
    assert proc.returncode == 0, proc.stderr
    counts = _job_counts(proc.stdout)
    assert counts["check_gate"] == 1
    assert "checkpoint jobs" in proc.stdout  # Snakemake: the DAG grows once the gate decided


@pytest.mark.parametrize("profile", [None, "slurm", "ice"])
def test_the_rehearsal_of_full_plans_with_its_gate(tmp_path, profile):
    """config/rehearsal.yaml carries a gate (urm-arc1's, at min 0) on a run with a stop rule: `full` plans through
    both cluster profiles, the stop decision first (the gate reads the boundary where the validation run stops, so
    check_gate joins the plan once the decision is made)."""
    (tmp_path / "tests/data").mkdir(parents=True)
    for path in (ROOT / "tests/data").glob("arc-tiny_*"):
        shutil.copy(path, tmp_path / "tests/data" / path.name)  # the overlay's ConceptARC
    rehearsal = yaml.safe_load((ROOT / "config/rehearsal.yaml").read_text())
    assert rehearsal["runs"]["urm-arc1"]["gate"] == {"min": 0.0}
    args = ["--profile", str(ROOT / "profiles" / profile)] if profile else []
    proc = snakemake(tmp_path, rehearsal, "-n", "full", "--quiet", "rules", *args, name="rehearsal.yaml")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    counts = _job_counts(proc.stdout)
    assert counts["decide_boundary"] == 1 and counts["train_segment"] > 0 and counts["render_full_report"] == 1
    assert "check_gate" not in counts and "checkpoint jobs" in proc.stdout
    assert not (tmp_path / "results").exists()
