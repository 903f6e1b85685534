"""passk_vs_loop_steps.png: a looped model's test inputs grouped by the loop steps their answers took (per_puzzle.csv's
mean_loop_steps), pass@K per group, at each run's last evaluation that records them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from arcpipe.report.load import RunInfo, load_report_inputs
from arcpipe.report.render import render_report
from arcpipe.report.tables import loop_step_curves

HEADER = "puzzle,test_index,pass@1,pass@2,num_votes,num_candidates,winner_votes,winner_mean_q,label_rank,"
HEADER += "label_among_candidates"
# (puzzle, pass@1, pass@2, mean loop steps or None: no row answered it)
LAST = [
    ("a", 1, 1, 2.0),
    ("b", 0, 1, 2.4),  # rounds to 2
    ("c", 0, 0, 2.6),  # rounds to 3
    ("d", 1, 1, 3.0),
    ("e", 0, 0, 3.0),
    ("f", 0, 0, 6.0),
    ("g", 1, 1, None),  # answered by no row: left out
]
EARLIER = [("a", 0, 0, 6.0), ("b", 0, 0, 6.0)]


def _evaluation(root: Path, run: str, epoch: int, rows: list, loop_column: bool) -> Path:
    folder = root / "eval" / run / f"epoch_{epoch}"
    folder.mkdir(parents=True)
    lines = [HEADER + (",mean_loop_steps" if loop_column else "")]
    for puzzle, p1, p2, steps in rows:
        line = f"{puzzle},0,{p1},{p2},10,2,6,0.5,1,1"
        lines.append(line + ("," + ("" if steps is None else f"{steps:.6f}") if loop_column else ""))
    (folder / "per_puzzle.csv").write_text("\n".join(lines) + "\n")
    mean = {k: sum(r[i] for r in rows) / len(rows) for k, i in (("pass@1", 1), ("pass@2", 2))}
    (folder / "metrics.json").write_text(json.dumps({"epoch": epoch, "step": 10 * epoch, **mean}))
    return folder / "metrics.json"


@pytest.fixture(scope="module")
def metrics_paths(tmp_path_factory) -> list[Path]:
    root = tmp_path_factory.mktemp("results")
    return [
        _evaluation(root, "lv", 10, EARLIER, True),
        _evaluation(root, "lv", 20, LAST, True),
        _evaluation(root, "lv-old", 10, EARLIER, True),
        _evaluation(root, "lv-old", 20, LAST, False),  # written before evaluations recorded loop steps
        _evaluation(root, "trm", 20, LAST, False),  # no loop: not drawn
    ]


def test_inputs_grouped_by_rounded_loop_steps_at_each_runs_last_evaluation_that_has_them(metrics_paths):
    curves = loop_step_curves(load_report_inputs(metrics_paths).evals)
    assert sorted(set(curves["run"])) == ["lv", "lv-old"]
    lv = curves[curves["run"] == "lv"]
    assert (lv["epoch"].unique().tolist(), lv["checkpoint"].unique().tolist()) == ([20], ["epoch_20"])
    assert lv["loop_steps"].tolist() == [2, 3, 6]
    assert lv["inputs"].tolist() == [2, 3, 1]  # g, answered by no row, is in no group
    assert lv["pass@1"].tolist() == pytest.approx([1 / 2, 1 / 3, 0.0])
    assert lv["pass@2"].tolist() == pytest.approx([1.0, 1 / 3, 0.0])
    old = curves[curves["run"] == "lv-old"]
    assert old[["epoch", "loop_steps", "inputs", "pass@2"]].values.tolist() == [[10, 6, 2, 0.0]]


def test_the_report_draws_each_looped_run_and_labels_each_point_with_its_inputs(metrics_paths, tmp_path, kept_figures):
    runs = {name: RunInfo("loopvit" if name.startswith("lv") else "trm", "ARC-AGI-1", 20) for name in ("lv", "lv-old")}
    written = render_report(tmp_path, metrics_paths, [], None, runs, main_k=2)
    assert tmp_path / "passk_vs_loop_steps.png" in written
    axes = kept_figures["passk_vs_loop_steps.png"].axes
    assert [ax.get_ylabel() for ax in axes] == ["pass@1 (%)", "pass@2 (%)"]
    pass2 = axes[1]
    assert [line.get_label() for line in pass2.get_lines()] == ["lv (epoch_20)", "lv-old (epoch_10)"]
    lv = pass2.get_lines()[0]
    assert lv.get_xdata().tolist() == [2, 3, 6] and lv.get_ydata().tolist() == pytest.approx([100, 100 / 3, 0])
    assert [text.get_text() for text in pass2.texts][:3] == ["2", "3", "1"]
    bottom, top = pass2.get_ylim()
    assert bottom == 0 and top <= 100


def test_without_a_looped_run_the_plot_says_so(metrics_paths, tmp_path, kept_figures):
    render_report(tmp_path, [p for p in metrics_paths if "/trm/" in str(p)], [], None, None)
    (ax,) = kept_figures["passk_vs_loop_steps.png"].axes[:1]
    assert not ax.get_lines() and "no evaluations of a looped model" in ax.texts[0].get_text()
