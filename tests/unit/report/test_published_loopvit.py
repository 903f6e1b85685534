"""LoopViT's published ARC-AGI-1 figures beside arcpipe's rows: LoopViT-Large's 65.8% pass@2 for the large model (the
`large`/`arc` presets, the loopvit-arc1 run) and LoopViT-Small's 60.1% for the `small` preset; the other archs keep
theirs."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from arcpipe.config import load_configs
from arcpipe.report.load import RunInfo, runs_from_config
from arcpipe.report.tables import comparison_table, published_figure

ROOT = Path(__file__).resolve().parents[3]


def _evals(runs: dict[str, RunInfo]) -> pd.DataFrame:
    rows = [
        {"run": run, "epoch": epoch, "pass@1": 0.1 * i + 0.01 * epoch, "pass@2": 0.2 * i + 0.01 * epoch}
        for i, run in enumerate(runs)
        for epoch in (5, 10)
    ]
    return pd.DataFrame(rows)


def test_each_loopvit_size_gets_its_own_published_figure_beside_its_row():
    runs = {
        "loopvit-large": RunInfo("loopvit", "ARC-AGI-1", 10, preset="arc"),
        "loopvit-small": RunInfo("loopvit", "ARC-AGI-1", 10, preset="small"),
        "loopvit-other-set": RunInfo("loopvit", None, 10, preset="small"),
        "varc-vit": RunInfo("varc", "ARC-AGI-1", 10, preset="arc"),
        "trm": RunInfo("trm", "ARC-AGI-1", 10, preset="tiny"),
    }
    table = comparison_table(_evals(runs), runs, main_k=2).set_index("run")
    assert (table.loc["loopvit-large", "published"], table.loc["loopvit-large", "published_metric"]) == (65.8, "pass@2")
    assert (table.loc["loopvit-small", "published"], table.loc["loopvit-small", "published_metric"]) == (60.1, "pass@2")
    assert math.isnan(table.loc["loopvit-other-set", "published"])  # not a benchmark's test set: nothing beside it
    assert table.loc["varc-vit", "published"] == 54.5 and table.loc["trm", "published"] == 44.6
    # ours on the published metric: the last checkpoint's pass@2, in percent, beside the published figure
    assert table.loc["loopvit-small", "ours_on_published_metric"] == pytest.approx(100 * (0.2 + 0.1))


def test_the_configured_loopvit_runs_test_time_training_is_compared_with_loopvit_large():
    # loopvit-arc1 trains offline on the training tasks (no benchmark) and its test-time training answers the
    # evaluation tasks: that row, `loopvit-arc1@varc-ttt-arc1`, is the one beside the published figure; VARC's alike
    cfg = load_configs([ROOT / "config/config.yaml", ROOT / "config/varc.yaml"])
    runs = runs_from_config(cfg)
    assert published_figure(runs["loopvit-arc1"]) is None and runs["loopvit-arc1"].benchmark is None
    info = runs["loopvit-arc1@varc-ttt-arc1"]
    assert (info.arch, info.preset, info.benchmark, info.seed_group) == ("loopvit", "arc", "ARC-AGI-1", None)
    figure = published_figure(info)
    assert figure is not None and (figure.value, figure.metric) == (65.8, "pass@2") and "Large" in figure.source
    assert published_figure(runs["varc-vit-arc1@varc-ttt-arc1"]).value == 54.5
    evals = _evals({"loopvit-arc1@varc-ttt-arc1": info})
    table = comparison_table(evals, runs, main_k=2).set_index("run")
    assert table.loc["loopvit-arc1@varc-ttt-arc1", ["arch", "benchmark", "published"]].tolist() == [
        "loopvit",
        "ARC-AGI-1",
        65.8,
    ]
