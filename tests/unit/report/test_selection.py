"""Checkpoint selection on held-out test tasks: hand-built per-puzzle results with known answers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from arcpipe.config import ArcpipeError
from arcpipe.eval.puzzles import load_tasks_from_json
from arcpipe.eval.score import score_ranks
from arcpipe.report.format import SELECTED_ON_TEST
from arcpipe.report.load import load_report_inputs
from arcpipe.report.render import write_selection
from arcpipe.report.selection import held_out_tasks, selection_table, subset_pass_at, task_scores

# (puzzle, test_index) -> (pass@1, pass@2) per epoch; task a has two test inputs, b, c and d one each
CHECKPOINTS = {
    2: {("a", 0): (0, 1), ("a", 1): (0, 0), ("b", 0): (1, 1), ("c", 0): (0, 0), ("d", 0): (0, 0)},
    4: {("a", 0): (1, 1), ("a", 1): (1, 1), ("b", 0): (0, 0), ("c", 0): (1, 1), ("d", 0): (0, 0)},
    6: {("a", 0): (0, 0), ("a", 1): (1, 1), ("b", 0): (0, 0), ("c", 0): (0, 0), ("d", 0): (0, 1)},
}
SEED = 1  # default_rng(1) holds out task b of a, b, c, d (asserted below)


def _write_run(root: Path, run: str, checkpoints: dict[int, dict]) -> list[Path]:
    paths = []
    for epoch, cells in checkpoints.items():
        directory = root / run / f"epoch_{epoch}"
        directory.mkdir(parents=True)
        rows = [{"puzzle": p, "test_index": i, "pass@1": one, "pass@2": two} for (p, i), (one, two) in cells.items()]
        pd.DataFrame(rows).to_csv(directory / "per_puzzle.csv", index=False)
        scores = task_scores(pd.DataFrame(rows))
        metrics = {"epoch": epoch, "step": epoch * 10, **scores.mean().to_dict(), "info": {"run": run}}
        (directory / "metrics.json").write_text(json.dumps(metrics))
        paths.append(directory / "metrics.json")
    return paths


def test_held_out_tasks_are_drawn_from_the_seed_and_sorted():
    assert held_out_tasks(list("dcba"), 1, SEED) == held_out_tasks(list("abcd"), 1, SEED) == ["b"]
    assert len(held_out_tasks([f"t{i}" for i in range(20)], 5, 0)) == 5
    assert held_out_tasks([f"t{i}" for i in range(20)], 5, 0) != held_out_tasks([f"t{i}" for i in range(20)], 5, 1)


def test_holding_out_every_task_is_one_line_naming_the_field():
    with pytest.raises(ArcpipeError, match=r"^evaluation.selection_tasks=4 leaves no task to report on: run r has 4"):
        held_out_tasks(list("abcd"), 4, 0, source="run r")


def test_the_checkpoint_is_selected_on_the_held_out_task_and_scored_on_the_others(tmp_path):
    inputs = load_report_inputs(_write_run(tmp_path, "r", CHECKPOINTS), per_puzzle=True)
    table, chosen = selection_table(inputs.evals, inputs.per_puzzle, 1, {"r": SEED}, main_k=2)
    assert chosen == {"r": {"seed": SEED, "held_out": ["b"], "num_other_tasks": 3}}
    got = {r["checkpoint"]: (r["epoch"], r["held_out_pass@2"], r["pass@1"], r["pass@2"]) for _, r in table.iterrows()}
    # on the other tasks a, c, d: epoch 2 solves a's first input at K=2 only; epoch 4 all of a and c; epoch 6 a's
    # second input, and d at K=2; only epoch 2 solves the held-out task b; epoch 4 is best on all tasks (2 of 4)
    expected = {
        "selected on 1 held-out tasks": (2, 100.0, 0.0, 100 * 0.5 / 3),
        "last": (6, 0.0, 100 * 0.5 / 3, 100 * 1.5 / 3),
        SELECTED_ON_TEST: (4, 0.0, 100 * 2 / 3, 100 * 2 / 3),
    }
    assert list(table.columns) == ["run", "checkpoint", "epoch", "held_out_pass@2", "pass@1", "pass@2"]
    assert got.keys() == expected.keys()
    for label, values in expected.items():
        assert got[label] == pytest.approx(values), label


def test_ties_go_to_the_later_checkpoint_on_held_out_tasks_and_the_earlier_on_the_test_set(tmp_path):
    paths = _write_run(tmp_path, "r", {2: CHECKPOINTS[4], 4: CHECKPOINTS[4], 6: CHECKPOINTS[6]})
    inputs = load_report_inputs(paths, per_puzzle=True)
    table, _ = selection_table(inputs.evals, inputs.per_puzzle, 1, {"r": SEED}, main_k=2)
    # b is unsolved everywhere: all three tie on the held-out task; epochs 2 and 4 tie on the whole test set
    assert dict(zip(table["checkpoint"], table["epoch"], strict=True)) == {
        "selected on 1 held-out tasks": 6,
        "last": 6,
        SELECTED_ON_TEST: 2,
    }


def test_subset_scores_over_every_task_are_the_top_level_pass_at_k():
    # the evaluation's own weighting (eval/score.py): fractional credit per task, then the mean over tasks
    pairs = {"a": [[[1]], [[2]], [[3]]], "b": [[[4]]], "c": [[[5]]]}
    test = load_tasks_from_json(
        {t: {"test": [{"input": g, "output": g} for g in grids]} for t, grids in pairs.items()}, "x"
    )
    label_rank = np.array([0, 1, -1, 4, 0])  # a: one input at K=1, two at K=2; b at K=5 only; c at K=1
    scores = score_ranks(label_rank, test, (1, 2, 5))
    per_puzzle = pd.DataFrame(
        {"puzzle": [test.task_names[t] for t in test.pair_task], "test_index": test.pair_index}
        | {f"pass@{k}": scores.solved(k).astype(int) for k in scores.ks}
    )
    overall = subset_pass_at(task_scores(per_puzzle), test.task_names)
    assert overall.to_dict() == pytest.approx({f"pass@{k}": v for k, v in scores.pass_at.items()})
    assert scores.pass_at[2] == pytest.approx((2 / 3 + 0 + 1) / 3)  # not the 3 of 5 inputs a mean over inputs gives


def test_the_report_files_name_the_held_out_tasks_and_the_test_set_choice(tmp_path):
    inputs = load_report_inputs(_write_run(tmp_path / "eval", "r", CHECKPOINTS), per_puzzle=True)
    table, chosen = selection_table(inputs.evals, inputs.per_puzzle, 1, {"r": SEED})
    written = write_selection(tmp_path / "report", table, chosen, 1)
    assert [p.name for p in written] == ["selection.csv", "selection.md", "selection.html", "selection_tasks.json"]
    assert all(p.is_file() for p in written)
    assert json.loads((tmp_path / "report" / "selection_tasks.json").read_text()) == {
        "selection_tasks": 1,
        "runs": {"r": {"seed": SEED, "held_out": ["b"], "num_other_tasks": 3}},
    }
    md = (tmp_path / "report" / "selection.md").read_text()
    assert "| r | selected on the test set | 4 |" in md and "Held out for r: b." in md
    assert pd.read_csv(tmp_path / "report" / "selection.csv")["epoch"].tolist() == [2, 6, 4]
    write_selection(tmp_path / "none", *selection_table(inputs.evals, {}, 0), 0)
    assert "selection_tasks is 0" in (tmp_path / "none" / "selection.md").read_text()
