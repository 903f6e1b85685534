"""The ablation table on a fixture whose every number is worked out by hand below."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from arcpipe.config import ArcpipeError
from arcpipe.report.ablation import ablation_table

# pass@2 per test input; t3 has two test inputs (its task score is their mean), t0 is held out (selection tasks):
# it scores 1 for the base and 0 for the arm, so counting it would move every number below
PASS2 = {
    "base-s0": {"t0": [1], "t1": [0], "t2": [1], "t3": [0, 1], "t4": [0]},  # reported mean (0 + 1 + .5 + 0)/4 = 37.5%
    "base-s1": {"t0": [1], "t1": [0], "t2": [0], "t3": [0, 0], "t4": [1]},  # 25%
    "ema-s0": {"t0": [0], "t1": [1], "t2": [1], "t3": [1, 1], "t4": [0]},  # 75%
    "ema-s1": {"t0": [0], "t1": [1], "t2": [0], "t3": [1, 0], "t4": [0]},  # 37.5%
}
ARMS = {"base": {0: "base-s0", 1: "base-s1"}, "ema": {0: "ema-s0", 1: "ema-s1"}}
T_975_1 = 12.706204736174698  # Student's t_{0.975} with 1 degree of freedom


def _fixture() -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    rows, per_puzzle = [], {}
    for run, tasks in PASS2.items():
        for epoch in (2, 4):  # the table reads the last checkpoint; epoch 2's results are all zero
            path = f"results/eval/{run}/epoch_{epoch}/metrics.json"
            records = [
                {"puzzle": task, "test_index": i, "pass@1": 0 if run.startswith("base") else v, "pass@2": v}
                for task, values in tasks.items()
                for i, v in enumerate(values)
            ]
            frame = pd.DataFrame(records)
            if epoch == 2:
                frame[["pass@1", "pass@2"]] = 0
            per_puzzle[path] = frame
            rows.append({"run": run, "epoch": epoch, "path": path})
    return pd.DataFrame(rows), per_puzzle


def test_every_number_of_the_table_equals_the_hand_computation() -> None:
    evals, per_puzzle = _fixture()
    hours = pd.Series([1.5, 2.5, 3.25, 4.25], index=pd.Index(["base-s0", "base-s1", "ema-s0", "ema-s1"], name="run"))
    table = ablation_table(evals, per_puzzle, ARMS, "base", hours=hours, held_out={"t0"}).set_index("arm")
    base, ema = table.loc["base"], table.loc["ema"]
    assert list(table.index) == ["base", "ema"] and bool(base["base"]) and not bool(ema["base"])
    assert base["seeds"] == 2 and base["runs"] == "base-s0, base-s1"
    # base pass@2: 37.5 and 25, mean 31.25, sd 12.5/sqrt 2, half-width t_{.975,1} * sd / sqrt 2 = 6.25 t
    assert base["pass@2"] == pytest.approx(31.25)
    assert (base["pass@2_ci95_low"], base["pass@2_ci95_high"]) == pytest.approx(
        (31.25 - 6.25 * T_975_1, 31.25 + 6.25 * T_975_1)
    )
    assert base["pass@1"] == 0 and base["pass@1_ci95_low"] == 0 and base["pass@1_ci95_high"] == 0
    assert ema["pass@2"] == pytest.approx(56.25) and ema["pass@1"] == pytest.approx(56.25)
    # over seeds: differences 75 - 37.5 = 37.5 and 37.5 - 25 = 12.5: mean 25, sd 12.5 sqrt 2, t = 25 / 12.5 = 2;
    # one degree of freedom: p = 1 - 2/pi atan 2; the interval 25 +- t_{.975,1} * 12.5
    assert ema["diff_pass@2"] == pytest.approx(25.0)
    assert (ema["diff_ci95_low"], ema["diff_ci95_high"]) == pytest.approx((25 - 12.5 * T_975_1, 25 + 12.5 * T_975_1))
    assert ema["p_seeds"] == pytest.approx(1 - 2 / math.pi * math.atan(2), abs=1e-10)
    # over tasks, each averaged over the two seeds (base: t1 0, t2 50, t3 25, t4 50; ema: 100, 50, 75, 0):
    # wins t1 and t3, a loss at t4, a tie at t2: p = 2 P(X <= 1 | n = 3) = 2 * 4/8, capped at 1
    assert (ema["task_wins"], ema["task_losses"], ema["p_sign"]) == (2, 1, 1.0)
    d = np.array([100.0, 0.0, 50.0, -50.0])  # the per-task differences, in the tasks' order
    rng = np.random.default_rng(0)
    means = d[rng.integers(0, 4, size=(10_000, 4))].mean(axis=1)
    assert (ema["task_bootstrap_low"], ema["task_bootstrap_high"]) == pytest.approx(
        tuple(np.quantile(means, [0.025, 0.975]))
    )
    assert base["gpu_hours"] == pytest.approx(4.0) and ema["gpu_hours"] == pytest.approx(7.5)
    assert math.isnan(base["diff_pass@2"])  # the base is not compared with itself


def test_an_arm_not_evaluated_yet_counts_the_seeds_it_has_and_the_base_must_be_an_arm() -> None:
    evals, per_puzzle = _fixture()
    evals = evals[evals["run"] != "ema-s1"]
    table = ablation_table(evals, per_puzzle, ARMS, "base", held_out={"t0"}).set_index("arm")
    assert table.loc["ema", "seeds"] == 1 and table.loc["ema", "pass@2"] == pytest.approx(75.0)
    assert table.loc["ema", "diff_pass@2"] == pytest.approx(37.5) and math.isnan(table.loc["ema", "p_seeds"])
    with pytest.raises(ArcpipeError, match="base arm 'nope' is not an arm"):
        ablation_table(evals, per_puzzle, ARMS, "nope")


def test_a_row_scored_under_another_protocol_than_the_base_is_marked_with_each_difference() -> None:
    """Like with like: the base read at its test-time training's evaluation, the arm at a plain one (as halving once
    left an arm it stopped), and a checkpoint chosen otherwise; each part that differs is named beside the base's
    way. Rows scored as the base are not marked."""
    evals, per_puzzle = _fixture()
    evals = evals.copy()
    for run in ("base-s0", "base-s1"):  # the base's last evaluation is its test-time training's
        old = f"results/eval/{run}/epoch_4/metrics.json"
        new = f"results/eval/{run}/ttt_epoch_4/metrics.json"
        per_puzzle[new] = per_puzzle.pop(old)
        evals.loc[evals["path"] == old, "path"] = new
    given = {run: {"checkpoint": "last"} for run in PASS2}
    table = ablation_table(evals, per_puzzle, ARMS, "base", held_out={"t0"}, protocols=given).set_index("arm")
    assert table.loc["base", "protocol"] == "test-time training: yes; checkpoint: last"
    assert table.loc["base", "protocol_vs_base"] == ""
    assert table.loc["ema", "protocol_vs_base"] == "test-time training: no (base: yes)"
    given["ema-s1"] = {"checkpoint": "where halving stopped it"}
    table = ablation_table(evals, per_puzzle, ARMS, "base", held_out={"t0"}, protocols=given).set_index("arm")
    assert table.loc["ema", "protocol_vs_base"] == (
        "test-time training: no (base: yes); checkpoint: last | where halving stopped it (base: last)"
    )
    alike = ablation_table(*_fixture(), ARMS, "base", held_out={"t0"}).set_index("arm")
    assert list(alike["protocol_vs_base"]) == ["", ""] and alike.loc["ema", "protocol"] == "test-time training: no"
