"""passk_vs_depth.png: pass@K against ACT step of each run's last checkpoint, from old and new evaluations."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from arcpipe.report.load import RunInfo, load_report_inputs
from arcpipe.report.render import render_report
from arcpipe.report.tables import depth_curves

RUNS = {"trm-a": RunInfo("trm", "ARC-AGI-1", 20), "urm-b": RunInfo("urm", "ARC-AGI-1", 20)}
RUNS |= {"hrm-c": RunInfo("hrm", "ARC-AGI-1", 20)}
# (run, epoch) -> whether its metrics.json has "depth" (False: written before evaluations recorded it)
CHECKPOINTS = {
    ("trm-a", 10): True,
    ("trm-a", 20): True,
    ("urm-b", 10): False,
    ("urm-b", 20): False,
    ("hrm-c", 10): True,
    ("hrm-c", 20): False,
}
KS = (1, 2, 10)
DEPTHS = (1, 2, 3)  # ACT steps; the evaluation's own pass@K is the last one's


def _pass_at(checkpoint: int, depth: int, k: int) -> float:
    # better with depth and K, and a little different for each checkpoint
    return 0.05 * depth + 0.01 * checkpoint + 0.02 * k


@pytest.fixture(scope="module")
def metrics_paths(tmp_path_factory) -> list[Path]:
    """metrics.json as evaluations write them (eval/write.py): pass@K, and "depth" {"<d>": {"pass@K": x}}."""
    root = tmp_path_factory.mktemp("results")
    paths = []
    for i, ((run, epoch), with_depth) in enumerate(CHECKPOINTS.items()):
        metrics = {"epoch": epoch, "step": 100 * epoch} | {f"pass@{k}": _pass_at(i, DEPTHS[-1], k) for k in KS}
        if with_depth:
            metrics["depth"] = {str(d): {f"pass@{k}": _pass_at(i, d, k) for k in KS} for d in DEPTHS}
        path = root / "eval" / run / f"epoch_{epoch}" / "metrics.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(metrics))
        paths.append(path)
    return paths


def test_each_run_is_drawn_at_its_last_checkpoint_with_depth_and_old_metrics_are_skipped(metrics_paths):
    inputs = load_report_inputs(metrics_paths)
    evals = inputs.evals
    curves = depth_curves(evals, inputs.metrics)
    assert curves.groupby("run")["epoch"].first().to_dict() == {"hrm-c": 10, "trm-a": 20}  # urm-b: no depth at all
    assert curves.groupby("run")["depth"].apply(list).to_dict() == {"hrm-c": [1, 2, 3], "trm-a": [1, 2, 3]}
    last = evals[(evals["run"] == "trm-a") & (evals["epoch"] == 20)].iloc[0]
    at_last_depth = curves[(curves["run"] == "trm-a") & (curves["depth"] == 3)].iloc[0]
    assert all(at_last_depth[f"pass@{k}"] == last[f"pass@{k}"] for k in KS)


def test_report_draws_passk_against_depth_within_0_to_100_percent(metrics_paths, tmp_path, kept_figures):
    written = render_report(tmp_path, metrics_paths, [], None, RUNS, main_k=2)
    assert tmp_path / "passk_vs_depth.png" in written
    assert (tmp_path / "passk_vs_depth.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    axes = kept_figures["passk_vs_depth.png"].axes
    assert [ax.get_ylabel() for ax in axes] == ["pass@1 (%)", "pass@2 (%)"]
    for ax in axes:
        bottom, top = ax.get_ylim()
        highest = max(line.get_ydata().max() for line in ax.get_lines())
        assert bottom == 0 and max(10, highest) <= top <= 100
        assert [line.get_label() for line in ax.get_lines()] == ["hrm-c (epoch 10)", "trm-a (epoch 20)"]
        for ticks, (lo, hi) in ((ax.get_xticks(), ax.get_xlim()), (ax.get_yticks(), ax.get_ylim())):
            shown = ticks[(ticks >= lo) & (ticks <= hi)]
            assert len(shown) and shown.min() >= 0
        assert all(line.get_ydata().min() >= 0 and line.get_ydata().max() <= 100 for line in ax.get_lines())


def test_a_report_without_any_depth_still_draws_the_plot(metrics_paths, tmp_path):
    old = [p for p in metrics_paths if "urm-b" in str(p)]
    render_report(tmp_path, old, [], None, RUNS)
    assert (tmp_path / "passk_vs_depth.png").stat().st_size > 0
    render_report(tmp_path / "empty", [], [], None, None)
    assert (tmp_path / "empty" / "passk_vs_depth.png").stat().st_size > 0
