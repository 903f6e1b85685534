"""Stop rules in the real workflow, and the ICE team's scenario: a validation run with a stop rule and quick
evaluation gates a main run (validate, stop early, then launch).

smoke-trm has 4 boundaries (epochs 8, eval_interval 2), quick evaluations (session_runs.QUICK) and a stop rule
whose outcome is known on CPU, a plateau of patience 1 with min_delta 1.0 (pass@K cannot rise by more than 1): it
fires at the 2nd boundary (epoch 4). Two runs are gated on it at its last epoch, which it never reaches: their gates
read epoch 4, where it stopped (arcpipe.plan), whose full evaluation is due. smoke-main (min 0) trains;
smoke-closed (min 1) never starts, and the driver's last lines say why.

Epochs 5-8 of smoke-trm are then never trained nor evaluated (no checkpoint, evaluation, decision or log of them),
the decision records and the driver's output say at which epoch and why, and Snakemake exits 0. Raising the
patience and running the same command again decides again and continues from epoch 4 without re-training it; the
final weights equal, bitwise, those of a run that never had a stop rule (the rule is no part of what training
computes): the session's `quick_run` (conftest.py), the same 8 epochs with quick evaluations and no stop rule.

The first call asks for `kaggle` too: its bundle of smoke-trm is made at epoch 4, where the run stopped (the plan
decides it on the first call, waiting on the decisions).

Scratch working directories with the repository's Snakefile and a copy of config/config.yaml (scratch.py), the
smoke dataset with 2 augmentations and a smaller model (session_runs.LONG_SMOKE, as quick_run).
"""

from __future__ import annotations

import json
import re

import pytest
import torch
from scratch import snakemake
from session_runs import QUICK, SMALL_TRM, long_smoke_with_stop_rule

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

RUN = "results/runs/smoke-trm"
MAIN = {  # smoke-trm's recipe for 4 epochs (2 segments), gated on smoke-trm, with its small model here
    "target": "smoke", "dataset": "smoke", "arch": "trm", "preset": "tiny", "epochs": 4, "eval_interval": 2,
    "global_batch_size": 32, "lr": 1.0e-3, "lr_warmup_steps": 4, "puzzle_emb_lr": 1.0e-2, "ema": True,
    "arch_overrides": SMALL_TRM,
}  # fmt: skip


def scenario(**stop) -> dict:
    """smoke-trm with the stop rule and quick evaluation, and the two runs gated on it."""
    overlay = long_smoke_with_stop_rule(**stop)
    gate = {"run": "smoke-trm", "metric": "pass@2"}
    overlay["evaluation"] = {"quick": QUICK, "kaggle_run": "smoke-trm"}  # `snakemake kaggle` bundles smoke-trm
    overlay["runs"] = {
        **overlay["runs"],
        "smoke-main": {**MAIN, "gate": {**gate, "min": 0.0}},
        "smoke-closed": {**MAIN, "gate": {**gate, "min": 1.0}},
    }
    return overlay


STOP = scenario(target=1.0, patience=1, min_delta=1.0)  # the target (every quick task solved) never fires here
GO_ON = scenario(target=1.0, patience=5, min_delta=1.0)
FALLBACK = (
    "the 4 quick-evaluation tasks (fall-back: evaluation.selection_tasks is 0, so the rule reads the tasks the "
    "reported number is scored on)"
)


def _weights(path):
    return torch.load(path, map_location="cpu", weights_only=True)["model"]


@pytest.fixture(scope="module")
def stopped(tmp_path_factory):
    work = tmp_path_factory.mktemp("stop")
    # `kaggle` in the same first call: the bundle of smoke-trm waits on its stop decisions
    proc = snakemake(work, STOP, "-j2", "smoke", "kaggle", name="stop.yaml", timeout=1200)
    return work, proc


def test_a_plateau_at_the_second_of_four_boundaries_ends_the_run_there(stopped):
    work, proc = stopped
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for epoch in (2, 4):
        assert (work / f"{RUN}/ckpt/epoch_{epoch}.pt").exists()
        assert (work / f"results/eval/smoke-trm/epoch_{epoch}/metrics.json").exists()
    for epoch in (6, 8):  # never trained nor evaluated, and nothing stands in for them
        assert not list(work.glob(f"results/**/*epoch_{epoch}*")), epoch
        assert not list(work.glob(f"logs/**/*epoch_{epoch}*")), epoch
    first = json.loads((work / f"{RUN}/decisions/epoch_2.json").read_text())
    assert not first["stop"] and first["fallback"]
    record = json.loads((work / f"{RUN}/decisions/epoch_4.json").read_text())
    assert record["stop"] and record["fired"] == "patience"
    assert (record["epoch"], record["planned_epochs"], record["skipped_epochs"]) == (4, 8, 4)
    assert [s["epoch"] for s in record["scores"]] == [2, 4]
    line = (
        f"arcpipe: stop rule: smoke-trm stop at epoch 4 of 8: pass@2 = {record['scores'][1]['value']:.3f} on "
        f"{FALLBACK} at epoch 4: 1 evaluation(s) without a gain above min_delta 1 over the best, "
        f"{record['best_value']:.3f} at epoch 2 (patience 1) (record {RUN}/decisions/epoch_4.json)"
    )
    assert line in proc.stderr.splitlines()
    assert not (work / f"{RUN}/state/epoch_4.pt").exists()  # temp: gone; its kept copy is what a continuation reads
    assert (work / f"{RUN}/resume/boundaries/state_epoch_4.pt").exists()


def test_the_kaggle_bundle_of_the_stopped_run_is_made_where_it_stopped_on_the_first_call(stopped):
    """The issue's reproduction: `snakemake kaggle` with nothing on disk once named the run's last epoch (8) from
    the records on disk when the workflow started, and the call failed in train_segment once the decision at epoch
    4 said stop. The target now asks the plan, which waits on that decision: the same call bundles epoch 4."""
    work, proc = stopped
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert [p.name for p in (work / "results/kaggle/smoke-trm").iterdir()] == ["epoch_4"]
    assert json.loads((work / "results/kaggle/smoke-trm/epoch_4/bundle.json").read_text())["epoch"] == 4


def test_a_gate_on_a_run_that_stopped_early_decides_where_it_stopped(stopped):
    """Validate, stop early, launch: both gates read smoke-trm's epoch 4, where it stopped (its last planned epoch,
    8, never comes), from that boundary's full evaluation; smoke-main trains, smoke-closed never starts, and the
    driver's last lines say why."""
    work, proc = stopped
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    value = json.loads((work / "results/eval/smoke-trm/epoch_4/metrics.json").read_text())["pass@2"]
    for run, passed in (("smoke-main", True), ("smoke-closed", False)):
        record = json.loads((work / f"results/gates/{run}.json").read_text())
        assert (record["gate_run"], record["epoch"], record["passed"], record["value"]) == (
            "smoke-trm", 4, passed, value
        )  # fmt: skip
    for epoch in (2, 4):
        assert (work / f"results/runs/smoke-main/ckpt/epoch_{epoch}.pt").exists()
        assert (work / f"results/eval/smoke-main/epoch_{epoch}/quick/metrics.json").exists()
    assert not (work / "results/runs/smoke-closed").exists() and not (work / "results/eval/smoke-closed").exists()
    lines = proc.stderr.splitlines()
    why = f"not started: gate smoke-trm pass@2 = {value:.4g} at epoch 4 < min 1"
    assert any(line.startswith("arcpipe:   smoke-closed") and line.endswith(why) for line in lines), lines[-12:]
    assert any(re.match(r"arcpipe: +smoke-main +last ", line) for line in lines), lines[-12:]


def test_a_raised_patience_continues_from_the_stopping_checkpoint_bitwise(stopped, quick_run):
    work, first = stopped
    assert first.returncode == 0, first.stderr[-3000:]
    kept = {e: (work / f"{RUN}/ckpt/epoch_{e}.pt").read_bytes() for e in (2, 4)}
    logs = {e: (work / f"logs/train_segment/smoke-trm/epoch_{e}.log").read_bytes() for e in (2, 4)}

    proc = snakemake(work, GO_ON, "-j2", "smoke", name="stop.yaml", timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for epoch in (2, 4):  # not trained again: the same bytes, the same training log
        assert (work / f"{RUN}/ckpt/epoch_{epoch}.pt").read_bytes() == kept[epoch]
        assert (work / f"logs/train_segment/smoke-trm/epoch_{epoch}.log").read_bytes() == logs[epoch]
    for epoch in (6, 8):  # quick evaluations at both; the full one where the schedule says (the last: always)
        assert (work / f"results/eval/smoke-trm/epoch_{epoch}/quick/metrics.json").exists()
    assert (work / "results/eval/smoke-trm/epoch_8/metrics.json").exists()
    assert "resume/boundaries/state_epoch_4.pt" in (work / "logs/train_segment/smoke-trm/epoch_6.log").read_text()
    decisions = {e: json.loads((work / f"{RUN}/decisions/epoch_{e}.json").read_text()) for e in (2, 4, 6)}
    assert [d["stop"] for d in decisions.values()] == [False, False, False]
    assert decisions[4]["rule"]["patience"] == 5

    # the same run without a stop rule, the static chain uninterrupted: the session's quick_run (conftest.py), whose
    # training config is this one (quick evaluation, like the stop rule, is no part of it)
    straight = quick_run
    target = "results/runs/smoke-trm/ckpt/epoch_8.pt"
    assert (straight / f"{RUN}/config.yaml").read_text() == (work / f"{RUN}/config.yaml").read_text()
    assert not (straight / f"{RUN}/decisions").exists()
    ours, theirs = _weights(work / target), _weights(straight / target)
    assert ours.keys() == theirs.keys()
    for key in ours:
        assert torch.equal(ours[key], theirs[key]), key
