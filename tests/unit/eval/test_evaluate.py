"""A checkpoint's whole evaluation on a tiny real dataset and an untrained tiny TRM: outputs, refusals, controls,
prediction from a challenges file, torchrun equivalence."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from arcpipe.cli import main
from arcpipe.config import ArcpipeError, EvaluationConfig
from arcpipe.data.dataset import identifiers_sha256, load_split
from arcpipe.eval.evaluate import evaluate_checkpoint, predict_challenges
from arcpipe.eval.write import load_votes
from arcpipe.models.io import core_of
from arcpipe.report.selection import subset_pass_at, task_scores

FILES = ["metrics.json", "per_puzzle.csv", "submission.json", "votes.npz"]
CONFIG = EvaluationConfig(batch_size=4, pass_ks=[1, 2, 10])


@pytest.fixture(scope="module")
def checkpoint(tiny_dataset, tiny_checkpoint, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("runs") / "tiny-run" / "ckpt" / "epoch_2.pt"
    return tiny_checkpoint(path, tiny_dataset, step=7, epoch=2)


def test_evaluation_writes_all_files_with_model_metrics(checkpoint, tiny_dataset, tmp_path):
    metrics = evaluate_checkpoint(checkpoint, tiny_dataset, tmp_path / "out", CONFIG, device="cpu")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == FILES
    assert metrics == json.loads((tmp_path / "out" / "metrics.json").read_text())
    test_puzzles = json.loads((tiny_dataset / "test_puzzles.json").read_text())
    split = load_split(tiny_dataset, "test")
    assert (metrics["step"], metrics["epoch"], metrics["info"]["run"]) == (7, 2, "tiny-run")
    assert metrics["num_tasks"] == len(test_puzzles) and metrics["num_predictions"] == len(split.inputs)
    assert metrics["num_predictions_unmatched"] == 0  # every test example's input maps back to a test input
    assert metrics["eval/steps"] == 2.0  # tiny preset: halt_max_steps 2, every row runs all of them
    assert 0 <= metrics["eval/accuracy"] <= 1 and metrics["eval/lm_loss"] > 0
    submission = json.loads((tmp_path / "out" / "submission.json").read_text())
    assert [len(v) for v in submission.values()] == [len(t["test"]) for t in test_puzzles.values()]


@pytest.mark.numeric
def test_pass_at_k_after_the_last_act_step_is_the_evaluations_pass_at_k(tiny_dataset, tiny_checkpoint, tmp_path):
    # an untrained q_head gives every row the same q_halt (weights 0, bias -5): random weights, so that mean q
    # ranks the candidates, which each have one vote here
    checkpoint = tiny_checkpoint(tmp_path / "ckpt.pt", tiny_dataset, seed=1, q_head="random")
    # an untrained model solves nothing, so its own answers become the truth: the first test input's best
    # candidate and the second one's runner-up, which makes pass@1 and pass@2 differ from 0 and from each other
    evaluate_checkpoint(checkpoint, tiny_dataset, tmp_path / "first", CONFIG, device="cpu")
    votes, _ = load_votes(tmp_path / "first" / "votes.npz")
    dataset = _copy_dataset(tiny_dataset, tmp_path)
    puzzles = json.loads((dataset / "test_puzzles.json").read_text())
    pairs = [pair for task in puzzles.values() for pair in task["test"]]
    for p, rank in ((0, 0), (1, 1)):
        pairs[p]["output"] = votes.grids.tolist(int(votes.start[p]) + rank)
    (dataset / "test_puzzles.json").write_text(json.dumps(puzzles))
    metrics = evaluate_checkpoint(checkpoint, dataset, tmp_path / "out", CONFIG, device="cpu")
    assert 0 < metrics["pass@1"] < metrics["pass@2"]
    assert list(metrics["depth"]) == ["1", "2"]  # tiny preset: halt_max_steps 2
    assert metrics["depth"]["2"] == {f"pass@{k}": metrics[f"pass@{k}"] for k in CONFIG.pass_ks}
    assert list(metrics["depth"]["1"]) == [f"pass@{k}" for k in CONFIG.pass_ks]
    assert all(0 <= v <= 1 for v in metrics["depth"]["1"].values())


def test_quick_mode_scores_the_first_tasks_only(checkpoint, tiny_dataset, tmp_path):
    assert main(["evaluate", str(checkpoint), str(tiny_dataset), "--out", str(tmp_path), "--quick", "1"]) == 0
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    first = next(iter(json.loads((tiny_dataset / "test_puzzles.json").read_text())))
    assert metrics["num_tasks"] == 1 and metrics["info"]["quick_tasks"] == 1
    assert json.loads((tmp_path / "submission.json").read_text()).keys() == {first}
    assert metrics["num_predictions_unmatched"] == metrics["num_predictions"] - metrics["num_predictions_used"] == 0


def _copy_dataset(tiny_dataset: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "copy"
    shutil.copytree(tiny_dataset, copy)
    return copy


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: (d / "verify.json").unlink(), "verify.json: missing"),
        (lambda d: (d / "verify.json").write_text(json.dumps({"ok": False, "failures": ["x"]})), "failed verif"),
        (lambda d: (d / "identifiers.json").write_text(json.dumps(["<blank>", "other"])), "identifiers.json sha256"),
    ],
)
def test_a_dataset_that_is_unverified_or_not_the_checkpoints_is_refused(
    checkpoint, tiny_dataset, tmp_path, change, message, capsys
):
    dataset = _copy_dataset(tiny_dataset, tmp_path)
    change(dataset)
    out = tmp_path / "out"
    assert main(["evaluate", str(checkpoint), str(dataset), "--out", str(out)]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists() or not any(out.iterdir())  # nothing partial left behind


def test_a_checkpoint_with_other_sizes_is_refused(tiny_dataset, tiny_checkpoint, tmp_path):
    split = load_split(tiny_dataset, "test")
    meta = {"vocab_size": 12, "seq_len": 900, "num_puzzle_identifiers": split.metadata.num_puzzle_identifiers + 1}
    path = tiny_checkpoint(tmp_path / "ckpt.pt", meta, identifiers_sha256=identifiers_sha256(tiny_dataset))
    with pytest.raises(ArcpipeError, match="num_puzzle_identifiers"):
        evaluate_checkpoint(path, tiny_dataset, tmp_path / "out", CONFIG, device="cpu")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_two_gloo_processes_give_the_same_results_as_one(checkpoint, tiny_dataset, tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("evaluation:\n  batch_size: 4\n  pass_ks: [1, 2, 10]\n  controls: [blank_puzzle_id]\n")
    args = ["-m", "arcpipe", "evaluate", str(checkpoint), str(tiny_dataset), "--config", str(config), "--device", "cpu"]
    torchrun = Path(sys.executable).with_name("torchrun")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for name, prefix in (("one", [sys.executable]), ("two", [str(torchrun), "--standalone", "--nproc-per-node=2"])):
        proc = subprocess.run(
            [*prefix, *args, "--out", str(tmp_path / name)], capture_output=True, text=True, timeout=600, env=env
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
    one, two = (json.loads((tmp_path / n / "metrics.json").read_text()) for n in ("one", "two"))
    assert two["info"]["processes"] == 2
    assert one["info"]["model_step"] == two["info"]["model_step"] == "eager"  # compiled on CUDA only
    for key in ("pass@1", "pass@2", "pass@10", "num_predictions_used", "eval/accuracy", "eval/exact_accuracy", "depth"):
        assert one[key] == two[key], key
    assert one["controls"] == two["controls"]
    assert list(one["controls"]["blank_puzzle_id"]) == ["pass@1", "pass@2", "pass@10"]
    assert one["eval/lm_loss"] == pytest.approx(two["eval/lm_loss"], rel=1e-6)
    for name in ("submission.json", "per_puzzle.csv"):
        assert (tmp_path / "one" / name).read_text() == (tmp_path / "two" / name).read_text(), name
    with np.load(tmp_path / "one" / "votes.npz") as a, np.load(tmp_path / "two" / "votes.npz") as b:
        for key in ("count", "first", "candidate_cells", "candidate_shapes"):
            assert np.array_equal(a[key], b[key]), key
        np.testing.assert_allclose(a["q_sum"], b["q_sum"], rtol=1e-6)


@pytest.mark.numeric
def test_predict_from_challenges_matches_evaluating_the_built_test_split(checkpoint, tiny_dataset, tmp_path):
    # test_puzzles.json is a challenges file with the solutions inside; the views are the checkpoint's identifiers
    metrics = evaluate_checkpoint(checkpoint, tiny_dataset, tmp_path / "eval", CONFIG, device="cpu")
    passk = predict_challenges(
        tiny_dataset / "test_puzzles.json",
        checkpoint,
        tiny_dataset / "identifiers.json",
        tmp_path / "submission.json",
        solutions=None,
        config=CONFIG,
        device="cpu",
    )
    assert passk is not None and passk.pass_at is None and passk.adaptation is None
    predicted = json.loads((tmp_path / "submission.json").read_text())
    assert predicted == json.loads((tmp_path / "eval" / "submission.json").read_text())
    solutions = {
        k: [p["output"] for p in t["test"]]
        for k, t in json.loads((tiny_dataset / "test_puzzles.json").read_text()).items()
    }
    (tmp_path / "solutions.json").write_text(json.dumps(solutions))
    challenges = tmp_path / "challenges.json"
    challenges.write_text(
        json.dumps(
            {
                k: {"test": [{"input": p["input"]} for p in t["test"]]}
                for k, t in json.loads((tiny_dataset / "test_puzzles.json").read_text()).items()
            }
        )
    )
    passk = predict_challenges(
        challenges,
        checkpoint,
        tiny_dataset / "identifiers.json",
        tmp_path / "s2.json",
        tmp_path / "solutions.json",
        CONFIG,
        "cpu",
    )
    assert passk is not None and passk.pass_at == {k: metrics[f"pass@{k}"] for k in CONFIG.pass_ks}


def test_predict_refuses_tasks_the_checkpoint_has_no_embedding_for(checkpoint, tiny_dataset, tmp_path, capsys):
    challenges = tmp_path / "challenges.json"
    challenges.write_text(json.dumps({"ffffffff": {"test": [{"input": [[1, 2]]}], "train": []}}))
    args = ["predict", str(challenges), str(checkpoint), "--identifiers", str(tiny_dataset / "identifiers.json")]
    assert main([*args, "--out", str(tmp_path / "submission.json")]) == 2
    assert "ffffffff" in capsys.readouterr().err and not (tmp_path / "submission.json").exists()


def test_predict_refuses_malformed_challenge_grids(checkpoint, tiny_dataset, tmp_path):
    challenges = tmp_path / "challenges.json"
    challenges.write_text(json.dumps({"t": {"test": [{"input": [[1, 2], [3]]}]}}))
    with pytest.raises(ArcpipeError, match="task t test 0 input"):
        predict_challenges(challenges, checkpoint, tiny_dataset / "identifiers.json", tmp_path / "s.json")


@pytest.mark.numeric
def test_the_blank_id_control_is_a_second_pass_with_every_puzzle_embedding_blank(
    tiny_dataset, tiny_checkpoint, tmp_path
):
    # checkpoint A has random puzzle embeddings; B is A with every row replaced by the blank row 0 by hand, so B's
    # normal pass is what A's control must be: the model asked with the blank identifier for every test row
    split = load_split(tiny_dataset, "test")

    def blank_rows(head):
        table = core_of(head).puzzle_emb.weights
        table.copy_(table[split.metadata.blank_identifier_id].expand_as(table).clone())

    same = {"seed": 2, "table": 1.0, "q_head": "random"}
    tiny_checkpoint(tmp_path / "a.pt", tiny_dataset, **same)
    tiny_checkpoint(tmp_path / "b.pt", tiny_dataset, **same, edit=blank_rows)
    # B solves nothing, so its own answers become the truth (as in the depth test): the control's pass@K is not 0
    evaluate_checkpoint(tmp_path / "b.pt", tiny_dataset, tmp_path / "first", CONFIG, device="cpu")
    votes, _ = load_votes(tmp_path / "first" / "votes.npz")
    dataset = _copy_dataset(tiny_dataset, tmp_path)
    puzzles = json.loads((dataset / "test_puzzles.json").read_text())
    pairs = [pair for task in puzzles.values() for pair in task["test"]]
    for p, rank in ((0, 0), (1, 1)):
        pairs[p]["output"] = votes.grids.tolist(int(votes.start[p]) + rank)
    (dataset / "test_puzzles.json").write_text(json.dumps(puzzles))
    with_control = CONFIG.model_copy(update={"controls": ["blank_puzzle_id"]})
    a = evaluate_checkpoint(tmp_path / "a.pt", dataset, tmp_path / "a", with_control, device="cpu")
    b = evaluate_checkpoint(tmp_path / "b.pt", dataset, tmp_path / "b", CONFIG, device="cpu")
    control = a["controls"]["blank_puzzle_id"]
    assert control == {f"pass@{k}": b[f"pass@{k}"] for k in CONFIG.pass_ks}
    assert 0 < control["pass@1"] < control["pass@2"]
    # A's own rows change its answers, which the truth was taken from B: the normal pass@K is another number
    assert a["pass@2"] != control["pass@2"]
    assert "controls" not in b
    # the report's pass@K over a subset of tasks (report/selection.py), over all of them, is the evaluation's
    by_task = task_scores(pd.read_csv(tmp_path / "a" / "per_puzzle.csv", dtype={"puzzle": str}))
    assert subset_pass_at(by_task, list(puzzles)).to_dict() == pytest.approx(
        {f"pass@{k}": a[f"pass@{k}"] for k in CONFIG.pass_ks} | {"cell_accuracy": a["cell_accuracy"]}, abs=1e-6
    )
    assert json.loads((tmp_path / "a" / "metrics.json").read_text())["controls"] == a["controls"]
