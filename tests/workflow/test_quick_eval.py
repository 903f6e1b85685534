"""Quick, then full evaluation in the real workflow: smoke-trm with 4 boundaries (epochs 8, eval_interval 2) and
evaluation.quick {share: 0.25, full_every: 2}: every boundary gets a quick evaluation of 4 of the 16 test tasks; the
full one only where `arcpipe.stopping.full_evaluation_due`, recomputed here from the quick records, says so.

The run is the session's `quick_run` (conftest.py): a scratch working directory with the repository's Snakefile
and a copy of config/config.yaml (scratch.py), made once per session; test_stop_rules.py reads it too.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
from session_runs import QUICK

from arcpipe.config import QuickEvalConfig
from arcpipe.stopping import Score, full_evaluation_due

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

EVAL = "results/eval/smoke-trm"
BOUNDARIES = [2, 4, 6, 8]


def test_full_evaluations_follow_the_schedule_of_the_quick_scores(quick_run):
    work = quick_run
    tasks = json.loads((work / f"{EVAL}/quick_tasks.json").read_text())
    assert len(tasks["tasks"]) == 4 and tasks["test_tasks"] == 16
    history, expected = [], []
    for epoch in BOUNDARIES:
        quick = json.loads((work / f"{EVAL}/epoch_{epoch}/quick/metrics.json").read_text())
        assert quick["num_tasks"] == 4 and quick["info"]["quick"]["sha256"] == tasks["sha256"]
        history.append(Score(epoch, quick["pass@2"], "quick", quick=True))
        if full_evaluation_due(history, epoch, BOUNDARIES, QuickEvalConfig(**QUICK)):
            expected.append(epoch)
        record = json.loads((work / f"{EVAL}/schedule/epoch_{epoch}.json").read_text())
        assert record["full"] == (epoch in expected), record
    got = [e for e in BOUNDARIES if (work / f"{EVAL}/epoch_{e}/metrics.json").exists()]
    assert got == expected
    assert {2, 4, 8} <= set(got)  # the first, every 2nd, the last, whatever the scores
    for epoch in got:
        assert json.loads((work / f"{EVAL}/epoch_{epoch}/metrics.json").read_text())["num_tasks"] == 16


def test_the_passk_table_marks_quick_rows_and_prints_the_gap(quick_run):
    work = quick_run
    table = pd.read_csv(work / "results/report/passk.csv")
    rows = table[table["run"] == "smoke-trm"]
    full = [e for e in BOUNDARIES if (work / f"{EVAL}/epoch_{e}/metrics.json").exists()]
    assert list(rows["epoch"]) == BOUNDARIES
    assert list(rows["evaluation"]) == ["full" if e in full else "quick" for e in BOUNDARIES]
    notes = (work / "results/report/passk.md").read_text()
    assert f"smoke-trm: quick vs full pass@2 on {len(full)} checkpoint(s): mean |quick - full| " in notes
