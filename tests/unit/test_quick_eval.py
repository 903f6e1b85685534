"""Quick evaluations (evaluation.quick): the subset draw, the schedule record and the report's marking and gap."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from arcpipe.config import QuickEvalConfig
from arcpipe.report.quick import quick_full_pairs, quick_notes
from arcpipe.report.selection import held_out_tasks
from arcpipe.report.tables import passk_table
from arcpipe.stopping import quick_tasks, schedule_at_boundary

NAMES = [f"task{i:02d}" for i in range(40)]


def test_the_quick_subset_is_deterministic_sorted_and_rounds_the_share_up():
    first = quick_tasks(NAMES, QuickEvalConfig(share=0.1), 0, seed=3)
    assert first == quick_tasks(list(reversed(NAMES)), QuickEvalConfig(share=0.1), 0, seed=3)
    assert len(first["tasks"]) == 4 and first["tasks"] == sorted(first["tasks"]) and first["test_tasks"] == 40
    assert len(quick_tasks(NAMES, QuickEvalConfig(share=0.26), 0, seed=3)["tasks"]) == 11  # ceil(10.4)
    assert quick_tasks(NAMES, QuickEvalConfig(share=0.1), 0, seed=4)["sha256"] != first["sha256"]


@pytest.mark.parametrize(("share", "size"), [(0.05, 5), (0.25, 10)])
def test_the_quick_subset_contains_the_held_out_selection_tasks(share, size):
    record = quick_tasks(NAMES, QuickEvalConfig(share=share), 5, seed=7)
    assert record["held_out"] == held_out_tasks(NAMES, 5, 7)
    assert set(record["held_out"]) <= set(record["tasks"]) and len(record["tasks"]) == size


def _quick_metrics(tmp_path, values):
    paths = []
    for epoch, value in zip([2, 4, 6, 8], values, strict=False):
        path = tmp_path / f"epoch_{epoch}/quick/metrics.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({"pass@2": value}))
        paths.append(path)
    return paths


@pytest.mark.parametrize(
    ("values", "full_every", "stop", "full"),
    [
        ([0.1, 0.2], None, False, True),  # a new best
        ([0.2, 0.1, 0.1], None, False, False),
        ([0.2, 0.1, 0.1], 3, False, True),  # the 3rd boundary
        ([0.2, 0.1, 0.1], None, True, True),  # the stopping one
        ([0.2, 0.1, 0.1, 0.1], None, False, True),  # the last
    ],
)
def test_the_schedule_record_says_whether_the_full_evaluation_is_due(tmp_path, values, full_every, stop, full):
    paths = _quick_metrics(tmp_path, values)
    decision = tmp_path / "decision.json"
    decision.write_text(json.dumps({"stop": stop}))
    out = tmp_path / "schedule.json"
    epochs = [2, 4, 6, 8][: len(values)]
    settings = {"boundaries": [2, 4, 6, 8], "schedule": QuickEvalConfig(full_every=full_every), "metric": "pass@2"}
    record = schedule_at_boundary("r", paths, epochs, decision, out, **settings)
    assert record["full"] is full and json.loads(out.read_text())["full"] is full
    assert record["reason"].startswith("due: ") if full else record["reason"] == "not due"


def _frame(epochs, values, quick=False):
    folder = "/quick" if quick else ""
    return pd.DataFrame(
        {
            "run": "r",
            "epoch": epochs,
            "step": epochs,
            "pass@2": values,
            "num_tasks": 4 if quick else 16,
            "path": [f"results/eval/r/epoch_{e}{folder}/metrics.json" for e in epochs],
        }
    )


def test_quick_rows_are_marked_only_where_no_full_evaluation_exists():
    evals, quick = _frame([2, 8], [0.25, 0.5]), _frame([2, 4, 8], [0.5, 0.25, 0.5], quick=True)
    table = passk_table(evals, quick=quick)
    assert list(table["checkpoint"]) == ["epoch_2", "epoch_4", "epoch_8"]
    assert list(table["evaluation"]) == ["full", "quick", "full"]
    assert list(table["pass@2"]) == [25.0, 25.0, 50.0]
    assert "evaluation" not in passk_table(evals).columns  # no quick evaluations: the table as before


def test_the_gap_is_measured_on_checkpoints_with_both():
    evals, quick = _frame([2, 8], [0.25, 0.5]), _frame([2, 4, 8], [0.5, 0.25, 0.5], quick=True)
    assert quick_full_pairs(evals, quick, "pass@2") == {"r": [(2, 0.5, 0.25), (8, 0.5, 0.5)]}
    notes = quick_notes(evals, quick, 2)
    assert "(evaluation.quick: 4 tasks)" in notes[0]
    assert notes[1] == (
        "r: quick vs full pass@2 on 2 checkpoint(s): mean |quick - full| 12.5 points, mean quick - full +12.5, "
        "largest +25.0 at epoch 2"
    )
