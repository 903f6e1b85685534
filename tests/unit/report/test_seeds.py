"""pass@K over seeds: mean, sample sd, min, max and the Student-t 95% interval, against hand computations."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from arcpipe.report.load import RunInfo
from arcpipe.report.render import render_report
from arcpipe.report.seeds import COLUMNS, seed_groups, seed_table, t_critical

# t_{0.975, df} from a printed table (NIST/SEMATECH e-Handbook 1.3.6.7.2), to its 9 decimals
T_975 = {1: 12.706204736, 2: 4.302652730, 3: 3.182446305, 4: 2.776445105, 9: 2.262157163, 29: 2.045229642}

# three seeds of group "trm" (seed 2 has no epoch 4 yet), and "solo", a run without seeds
EVALS = pd.DataFrame(
    [
        ("trm-s0", 2, 10, 0.10, 0.25),
        ("trm-s1", 2, 10, 0.20, 0.50),
        ("trm-s2", 2, 10, 0.30, 0.75),
        ("trm-s0", 4, 20, 0.25, 0.40),
        ("trm-s1", 4, 20, 0.50, 0.40),
        ("solo", 2, 10, 0.05, 0.15),
    ],
    columns=["run", "epoch", "step", "pass@1", "pass@2"],
)
GROUPS = {"trm-s0": ("trm", 0), "trm-s1": ("trm", 1), "trm-s2": ("trm", 2), "solo": ("solo", 0)}


def _row(table: pd.DataFrame, group: str, epoch: int, metric: str) -> pd.Series:
    rows = table[(table["seed_group"] == group) & (table["epoch"] == epoch) & (table["metric"] == metric)]
    assert len(rows) == 1
    return rows.iloc[0]


@pytest.mark.parametrize("df", sorted(T_975))
def test_t_critical_matches_the_printed_table(df):
    assert t_critical(df) == pytest.approx(T_975[df], abs=1e-8)


def test_three_seeds_give_mean_sample_sd_range_and_t_interval():
    row = _row(seed_table(EVALS, GROUPS), "trm", 2, "pass@1")  # 10, 20, 30 %
    assert (row["num_seeds"], row["seeds"]) == (3, "0 1 2")
    assert row["mean"] == pytest.approx(20.0)
    assert row["sd"] == pytest.approx(10.0)  # sqrt((100 + 0 + 100) / (3 - 1)): ddof=1
    assert (row["min"], row["max"]) == (pytest.approx(10.0), pytest.approx(30.0))
    half = 4.302652730 * 10.0 / math.sqrt(3)  # t_{0.975, 2} * sd / sqrt(n) = 24.8414...
    assert row["ci95_low"] == pytest.approx(20.0 - half, abs=1e-6)
    assert row["ci95_high"] == pytest.approx(20.0 + half, abs=1e-6)


def test_a_checkpoint_only_some_seeds_reached_counts_those_seeds():
    row = _row(seed_table(EVALS, GROUPS), "trm", 4, "pass@1")  # 25, 50 %
    assert (row["num_seeds"], row["seeds"]) == (2, "0 1")
    assert row["mean"] == pytest.approx(37.5)
    assert row["sd"] == pytest.approx(12.5 * math.sqrt(2))
    half = 12.706204736 * 12.5 * math.sqrt(2) / math.sqrt(2)
    assert (row["ci95_low"], row["ci95_high"]) == (pytest.approx(37.5 - half), pytest.approx(37.5 + half))


def test_equal_seeds_have_zero_spread():
    row = _row(seed_table(EVALS, GROUPS), "trm", 4, "pass@2")  # 40, 40 %
    assert (row["sd"], row["ci95_low"], row["ci95_high"]) == (0.0, pytest.approx(40.0), pytest.approx(40.0))


def test_one_seed_has_no_sd_and_no_interval():
    table = seed_table(EVALS, GROUPS)
    row = _row(table, "solo", 2, "pass@2")
    assert (row["num_seeds"], row["mean"], row["min"], row["max"]) == (1, pytest.approx(15.0), 15.0, 15.0)
    assert math.isnan(row["sd"]) and math.isnan(row["ci95_low"]) and math.isnan(row["ci95_high"])


def test_rows_are_sorted_by_group_epoch_and_k_and_runs_without_a_group_stand_alone():
    table = seed_table(EVALS)  # no groups: every run is a group of its own
    assert list(table.columns) == COLUMNS
    assert set(table["num_seeds"]) == {1}
    assert list(table["seed_group"].unique()) == ["solo", "trm-s0", "trm-s1", "trm-s2"]
    trm = seed_table(EVALS, GROUPS).query("seed_group == 'trm'")
    assert list(zip(trm["epoch"], trm["metric"], strict=True)) == [
        (2, "pass@1"),
        (2, "pass@2"),
        (4, "pass@1"),
        (4, "pass@2"),
    ]


def test_no_evaluations_give_an_empty_table():
    assert list(seed_table(EVALS.iloc[:0], GROUPS).columns) == COLUMNS


def test_seed_groups_come_from_run_infos():
    runs = {"a-s3": RunInfo("trm", None, 4, 3, "a"), "b": RunInfo("trm", None, 4)}
    assert seed_groups(runs) == {"a-s3": ("a", 3), "b": ("b", None)}


def test_report_writes_seeds_table_and_plot(tmp_path: Path):
    paths = []
    for run, epoch, step, p1, p2 in EVALS.itertuples(index=False):
        path = tmp_path / "eval" / run / f"epoch_{epoch}" / "metrics.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({"epoch": epoch, "step": step, "pass@1": p1, "pass@2": p2}))
        paths.append(path)
    runs = {run: RunInfo("trm", None, 4, seed, group) for run, (group, seed) in GROUPS.items()}
    written = render_report(tmp_path / "report", paths, runs=runs)
    assert {tmp_path / "report" / n for n in ("seeds.csv", "seeds.md", "passk_vs_step.png")} <= set(written)
    table = pd.read_csv(tmp_path / "report" / "seeds.csv", dtype={"seeds": str})
    row = _row(table, "trm", 2, "pass@1")
    assert (row["num_seeds"], row["seeds"], row["mean"]) == (3, "0 1 2", pytest.approx(20.0))
    assert math.isnan(_row(table, "solo", 2, "pass@1")["ci95_low"])
    markdown = (tmp_path / "report" / "seeds.md").read_text()
    assert "| trm | 2 | pass@1 | 3 | 0 1 2 | 20.00 | 10.00 | 10.00 | 30.00 | -4.84 | 44.84 |" in markdown
    assert (tmp_path / "report" / "passk_vs_step.png").stat().st_size > 0
