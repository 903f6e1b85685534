"""LoopViT's loop steps through an evaluation: infer.predict keeps each row's, per_puzzle.csv gets their mean per test
input (`mean_loop_steps`), from `arcpipe evaluate` and from a test-time training collection, and only for a model
that reports loop steps (a VARC or TRM table stays as it was)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from arcpipe.config import EvaluationConfig
from arcpipe.data.dataset import example_puzzle_ids, load_split
from arcpipe.eval import evaluate as evaluate_module
from arcpipe.eval.evaluate import evaluate_checkpoint, loop_steps_per_input
from arcpipe.eval.infer import example_views, predict
from arcpipe.eval.puzzles import load_identifiers, load_test_puzzles
from arcpipe.eval.vote import assign_rows
from arcpipe.models.io import load_weights
from arcpipe.train.distributed import DistEnv

CONFIG = EvaluationConfig(batch_size=8, pass_ks=[1, 2], canvas_attempts=1)
ENV = DistEnv(0, 0, 1)


def _mixed_gate(head: torch.nn.Module) -> None:
    # an untrained gate sits at sigmoid(0) = 0.5 < 0.6 and never exits; a louder last layer and distinct task tokens
    # make rows of one task exit at step 2 and others run to 3 (tiny: 3 steps, exit allowed from the 2nd)
    inner = head.model.inner
    inner.task_token_embed.weight.normal_(std=1.0)
    inner.exit_gate[-1].weight.normal_(std=3.0)
    inner.exit_gate[-1].bias.fill_(0.3)


@pytest.fixture(scope="module")
def loopvit(tiny_dataset, tiny_checkpoint, tmp_path_factory) -> Path:
    torch.set_num_threads(1)
    path = tmp_path_factory.mktemp("runs") / "loopvit-tiny" / "ckpt" / "epoch_1.pt"
    return tiny_checkpoint(path, tiny_dataset, arch="loopvit", step=1, epoch=1, edit=_mixed_gate)


def _rows_of(dataset: Path):
    split = load_split(dataset, "test")
    ids = example_puzzle_ids(split)
    return split, ids, load_identifiers(dataset / "identifiers.json"), load_test_puzzles(dataset / "test_puzzles.json")


@pytest.mark.numeric
def test_predict_keeps_each_rows_loop_steps_summing_to_the_steps_metric(loopvit, tiny_dataset):
    split, ids, identifiers, _ = _rows_of(tiny_dataset)
    head, _ = load_weights(loopvit, "cpu", batch_size=CONFIG.batch_size)
    rows = np.arange(len(ids), dtype=np.int64)
    views = example_views(ids, identifiers)
    got = predict(head, split.inputs, split.labels, ids, rows, CONFIG.batch_size, ENV, views=views)
    assert got.loop_steps is not None and got.loop_steps.shape == (len(rows),)
    assert set(np.unique(got.loop_steps)) == {2, 3}, "the planted gate should make rows exit at different steps"
    # the per-row figures add up to the sum the step's metrics already keep
    assert got.metric_sums["steps"] == got.loop_steps.sum()


@pytest.mark.numeric
def test_per_puzzle_csv_has_each_inputs_mean_loop_steps(loopvit, tiny_dataset, tmp_path, monkeypatch):
    split, ids, identifiers, test = _rows_of(tiny_dataset)
    kept: list[np.ndarray] = []
    real = evaluate_module.predict

    def spy(*args, **kwargs):
        out = real(*args, **kwargs)
        kept.append(out.loop_steps)
        return out

    monkeypatch.setattr(evaluate_module, "predict", spy)
    evaluate_checkpoint(loopvit, tiny_dataset, tmp_path / "out", CONFIG, device="cpu")
    table = pd.read_csv(tmp_path / "out" / "per_puzzle.csv")
    assert list(table.columns)[-1] == "mean_loop_steps"
    rows_steps = kept[0]

    # by hand: each row's test input from its task and its de-augmented input, then the mean of its rows' steps
    rows = assign_rows(split.inputs, ids, identifiers, test)
    expected = []
    for p in range(test.num_pairs):
        mine = rows.group == test.pair_group[p]
        expected.append(rows_steps[rows.used[mine]].mean())
    np.testing.assert_allclose(table["mean_loop_steps"].to_numpy(), np.round(expected, 6), atol=1e-6)
    # the planted gate mixes exits inside a test input, so a mean is not the max (nor the min) of its rows
    assert any(
        rows_steps[rows.used[rows.group == g]].min() < rows_steps[rows.used[rows.group == g]].max()
        for g in np.unique(test.pair_group)
    )


def test_loop_steps_per_input_is_the_mean_not_the_max_of_the_rows(tiny_dataset):
    split, ids, identifiers, test = _rows_of(tiny_dataset)
    rng = np.random.default_rng(0)
    steps = rng.integers(1, 7, size=len(ids))
    got = loop_steps_per_input(split.inputs, steps, ids, identifiers, test)
    rows = assign_rows(split.inputs, ids, identifiers, test)
    for p in range(test.num_pairs):
        answered = steps[rows.used[rows.group == test.pair_group[p]]]
        assert len(answered) > 1
        assert got[p] == pytest.approx(answered.mean())
        assert got[p] < answered.max()  # draws from 1..6 over several rows: a max would be caught
    # an input that no row answers (its rows' puzzle ids blanked) is NaN, written as an empty cell
    row_group = np.full(len(ids), -1)
    row_group[rows.used] = rows.group
    blanked = np.where(row_group == test.pair_group[0], 0, ids)
    after = loop_steps_per_input(split.inputs, steps, blanked, identifiers, test)
    assert np.isnan(after[test.pair_group == test.pair_group[0]]).all()
    assert not np.isnan(after[test.pair_group != test.pair_group[0]]).any()


def test_a_model_without_loop_steps_writes_the_table_as_before(tiny_dataset, tiny_checkpoint, tmp_path):
    # VARC's head answers `loop_steps` when asked (ones) but does not report them: no column, same bytes
    path = tiny_checkpoint(tmp_path / "varc" / "ckpt" / "epoch_1.pt", tiny_dataset, arch="varc", step=1, epoch=1)
    head, _ = load_weights(path, "cpu", batch_size=4)
    assert not getattr(head, "reports_loop_steps", False)
    evaluate_checkpoint(path, tiny_dataset, tmp_path / "out", CONFIG, device="cpu")
    header = (tmp_path / "out" / "per_puzzle.csv").read_text().splitlines()[0]
    assert header.endswith("label_rank,label_among_candidates")


@pytest.mark.numeric
def test_a_test_time_training_collection_writes_each_inputs_mean_loop_steps(tiny_dataset, tiny_checkpoint, tmp_path):
    # LoopViT's published protocol: a ttt job keeps each answer's loop steps in its file, collect averages them per
    # test input as arcpipe evaluate does. The fitted tasks' fresh task tokens move the gate: at bias -0.8 the
    # answers exit at mixed steps (7 rows at 2, 5 at 3, measured), so a mean is told from a max or a shuffled row
    from arcpipe.config.runs import TTTConfig
    from arcpipe.eval import ttt

    def gate(head: torch.nn.Module) -> None:
        _mixed_gate(head)
        head.model.inner.exit_gate[-1].bias.fill_(-0.8)

    path = tiny_checkpoint(tmp_path / "loopvit.pt", tiny_dataset, arch="loopvit", edit=gate)
    split, ids, identifiers, test = _rows_of(tiny_dataset)
    cfg = TTTConfig(epochs=2, warmup_epochs=1, jobs=1)
    job = tmp_path / "job_0.npz"
    ttt.run_job(path, tiny_dataset, job, 0, cfg, CONFIG, device="cpu")
    with np.load(job) as part:
        job_rows, job_steps = part["rows"], part["loop_steps"]
    assert job_steps.shape == job_rows.shape and set(np.unique(job_steps)) == {2, 3}
    ttt.collect([job], tiny_dataset, tmp_path / "out", CONFIG)
    table = pd.read_csv(tmp_path / "out" / "per_puzzle.csv")
    assert list(table.columns)[-1] == "mean_loop_steps"
    rows = assign_rows(split.inputs[job_rows], ids[job_rows], identifiers, test)
    expected = [job_steps[rows.used[rows.group == test.pair_group[p]]].mean() for p in range(test.num_pairs)]
    np.testing.assert_allclose(table["mean_loop_steps"].to_numpy(), expected, atol=1e-6)
