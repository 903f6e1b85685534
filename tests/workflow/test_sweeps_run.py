"""A sweep through the real workflow (`snakemake sweep_<name>`): its base run and arms trained on two seeds each, its
ablation table written from their evaluations, and a value added later training only the new arm.

Smoke scale, and smaller: smoke-trm for 2 epochs (one checkpoint) on the smoke dataset's 16 evaluation tasks alone
with 1 augmentation (session_runs.TEST_TASKS_ONLY: the ablation's statistics are over the test tasks, and do not
depend on how many examples train) and session_runs.SMALL_TRM's model (nor on how wide it is); the grid sweeps lr
over two values. Beside it, in the same Snakemake call, a halved sweep of a copy of smoke-trm (4 epochs, a rung at
epoch 2): the lower-ranked arm gets nothing after its rung.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml
from scratch import ROOT, snakemake
from session_runs import SMALL_TRM, TEST_TASKS_ONLY

from arcpipe.config import load_configs
from arcpipe.report.ablation import ablation_table
from arcpipe.report.load import load_report_inputs

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

SHIPPED = yaml.safe_load((ROOT / "config/config.yaml").read_text())
# successive halving: smoke-trm for 4 epochs in segments of one checkpoint, a rung at epoch 2 keeping the best half
HALVED_BASE = {**SHIPPED["runs"]["smoke-trm"], "epochs": 4, "segment_evals": 1, "arch_overrides": SMALL_TRM}
HALVED = {"base": "smoke-h", "grid": {"lr": [3.0e-4, 3.0e-3]}, "halving": {"rungs": [2], "eta": 2}}
SWEEP = {"base": "smoke-trm", "grid": {"lr": [3.0e-4, 3.0e-3]}}
# both sweeps in one Snakemake call (one dataset build, both cores busy): `snakemake sweep_lr sweep_h`
OVERLAY = {
    "datasets": {"smoke": {**TEST_TASKS_ONLY, "num_aug": 1}},
    "runs": {"smoke-trm": {"epochs": 2, "seeds": [0, 1], "arch_overrides": SMALL_TRM}, "smoke-h": HALVED_BASE},
    "sweeps": {"lr": SWEEP, "h": HALVED},
}
ARMS = ["lr-lr_0.0003", "lr-lr_0.003"]
REFERENCE = ["smoke-trm-s0", "smoke-trm-s1"]


@pytest.fixture(scope="module")
def swept(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("sweep")
    proc = snakemake(work, OVERLAY, "sweep_lr", "sweep_h", "--cores", "2", name="sweep.yaml", timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-4000:]
    assert "arcpipe: halving: sweep h rung at epoch 2" in proc.stderr
    return work


def test_the_sweep_trains_its_reference_and_arms_and_tables_them_against_the_reference(swept: Path) -> None:
    runs = REFERENCE + [f"{arm}-s{seed}" for arm in ARMS for seed in (0, 1)]
    for run in runs:
        assert (swept / f"results/eval/{run}/epoch_2/per_puzzle.csv").is_file(), run
    out = swept / "results/report/sweeps/lr"
    table = pd.read_csv(out / "ablation.csv")
    assert list(table["arm"]) == ["smoke-trm", *ARMS] and list(table["seeds"]) == [2, 2, 2]
    assert list(table["values"].fillna("")) == ["", "lr=0.0003", "lr=0.003"]
    assert (out / "ablation.png").stat().st_size > 0 and "Ablation: sweep lr" in (out / "ablation.md").read_text()
    # the same numbers from the evaluations on disk through the library: the rule computed what it says
    cfg = load_configs([swept / "config/config.yaml", swept / "sweep.yaml"])
    metrics = [swept / f"results/eval/{run}/epoch_2/metrics.json" for run in runs]
    inputs = load_report_inputs([str(m) for m in metrics], per_puzzle=True)
    again = ablation_table(inputs.evals, inputs.per_puzzle, cfg.arm_seeds("lr"), "smoke-trm", bootstrap_draws=10_000)
    for column in ("pass@2", "pass@2_ci95_low", "diff_pass@2", "p_seeds", "task_wins", "p_sign"):
        assert list(table[column]) == pytest.approx(list(again[column]), nan_ok=True), column
    assert (table["gpu_hours"] == 0).all()  # CPU runs hold no GPU (RunConfig.gpu_hours, as the forecast says)
    assert table["protocol_vs_base"].isna().all()  # every arm scored as the reference (empty cells)


def test_adding_a_value_later_trains_only_the_new_arm(swept: Path) -> None:
    wider = {**OVERLAY, "sweeps": {**OVERLAY["sweeps"], "lr": {**SWEEP, "grid": {"lr": [3.0e-4, 3.0e-3, 1.0e-2]}}}}
    proc = snakemake(swept, wider, "sweep_lr", "--cores", "2", name="wider.yaml", timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-4000:]
    trained = sorted(set(re.findall(r"wildcards: run=([\w.-]+), epoch=\d+", proc.stdout + proc.stderr)))
    assert trained == ["lr-lr_0.01-s0", "lr-lr_0.01-s1"]
    table = pd.read_csv(swept / "results/report/sweeps/lr/ablation.csv")
    assert list(table["arm"]) == ["smoke-trm", *ARMS, "lr-lr_0.01"]


def test_halving_stops_the_lower_ranked_half_at_the_rung_and_the_rest_go_on(swept: Path) -> None:
    record = json.loads((swept / "results/sweeps/h/rungs/epoch_2.json").read_text())
    (kept,), (stopped,) = record["kept"], record["stopped"]
    assert {kept, stopped} == {"h-lr_0.0003", "h-lr_0.003"} and record["arms"][stopped]["rank"] == 2
    for run, last in ((kept, 4), (stopped, 2), ("smoke-h", 4)):  # the reference is no arm: it trains to its end
        assert (swept / f"results/runs/{run}/ckpt/epoch_{last}.pt").is_file(), run
        assert (swept / f"results/eval/{run}/epoch_{last}/metrics.json").is_file(), run
    # nothing of the stopped arm after its rung: no checkpoint, no evaluation, no training log
    assert not (swept / f"results/runs/{stopped}/ckpt/epoch_4.pt").exists()
    assert not (swept / f"results/eval/{stopped}/epoch_4").exists()
    assert not list((swept / "logs").rglob(f"*{stopped}*epoch_4*"))
    table = pd.read_csv(swept / "results/report/sweeps/h/ablation.csv").set_index("arm")
    assert table.loc[stopped, "stopped_at_rung"] == 2 and pd.isna(table.loc[kept, "stopped_at_rung"])
    # read at its rung, not at its last epoch as the reference is: marked, not compared silently
    assert table.loc[stopped, "protocol_vs_base"] == "checkpoint: where halving stopped it (base: last)"
    assert pd.isna(table.loc[kept, "protocol_vs_base"])
    assert "halving saved about" in (swept / "results/report/sweeps/h/ablation.md").read_text()
