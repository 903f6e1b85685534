"""The inference runner on a tiny real dataset and an untrained tiny TRM: outputs, refusals, torchrun equivalence."""

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
import torch

from arcpipe.cli import main
from arcpipe.config import ArcpipeError, EvaluationConfig
from arcpipe.data.dataset import identifiers_sha256, load_split
from arcpipe.eval.predict import evaluate_checkpoint, predict, predict_challenges
from arcpipe.eval.results import load_votes
from arcpipe.models.io import core_of, save_weights
from arcpipe.models.registry import build_model, make_arch_config
from arcpipe.optim import make_optimizers
from arcpipe.report.selection import subset_pass_at, task_scores
from arcpipe.train.distributed import DistEnv

FILES = ["metrics.json", "per_puzzle.csv", "submission.json", "votes.npz"]
CONFIG = EvaluationConfig(batch_size=4, pass_ks=[1, 2, 10])


def _head(split, seed: int = 0):
    torch.manual_seed(seed)
    cfg = make_arch_config("trm", "tiny", {})
    meta = split.metadata
    head = build_model(
        cfg,
        vocab_size=meta.vocab_size,
        seq_len=meta.seq_len,
        num_puzzle_identifiers=meta.num_puzzle_identifiers,
        batch_size=4,
        device="cpu",
    )
    return head, cfg


@pytest.fixture(scope="module")
def checkpoint(tiny_dataset, tmp_path_factory) -> Path:
    split = load_split(tiny_dataset, "test")
    head, cfg = _head(split)
    path = tmp_path_factory.mktemp("runs") / "tiny-run" / "ckpt" / "epoch_2.pt"
    sha = identifiers_sha256(tiny_dataset)
    save_weights(path, head, arch="trm", arch_cfg=cfg, dataset=split.metadata, identifiers_sha256=sha, step=7, epoch=2)
    return path


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


def test_pass_at_k_after_the_last_act_step_is_the_evaluations_pass_at_k(tiny_dataset, tmp_path):
    # an untrained q_head gives every row the same q_halt (weights 0, bias -5): random weights, so that mean q
    # ranks the candidates, which each have one vote here
    split = load_split(tiny_dataset, "test")
    head, cfg = _head(split, seed=1)
    with torch.no_grad():
        next(m for name, m in head.named_modules() if name.endswith("q_head")).weight.normal_()
    checkpoint = tmp_path / "ckpt.pt"
    sha = identifiers_sha256(tiny_dataset)
    save_weights(checkpoint, head, arch="trm", arch_cfg=cfg, dataset=split.metadata, identifiers_sha256=sha)
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


def test_a_checkpoint_with_other_sizes_is_refused(tiny_dataset, tmp_path):
    split = load_split(tiny_dataset, "test")
    head, cfg = _head(split)
    path = tmp_path / "ckpt.pt"
    meta = {"vocab_size": 12, "seq_len": 900, "num_puzzle_identifiers": split.metadata.num_puzzle_identifiers + 1}
    save_weights(
        path, head, arch="trm", arch_cfg=cfg, dataset=meta, identifiers_sha256=identifiers_sha256(tiny_dataset)
    )
    with pytest.raises(ArcpipeError, match="num_puzzle_identifiers"):
        evaluate_checkpoint(path, tiny_dataset, tmp_path / "out", CONFIG, device="cpu")
    assert not (tmp_path / "out").exists()


def test_train_evaluate_train_in_one_process(tiny_dataset):
    # evaluation tensors must never poison a later in-place update (upstream.md 5.7 item 2)
    train, test = load_split(tiny_dataset, "train"), load_split(tiny_dataset, "test")
    head, _ = _head(test)
    optimizers = make_optimizers(
        head, lr=1e-3, puzzle_emb_lr=1e-2, weight_decay=0.1, puzzle_emb_weight_decay=0.1, compile=False
    )
    ids = np.repeat(train.puzzle_identifiers, np.diff(train.puzzle_indices))
    batch = {
        "inputs": torch.from_numpy(train.inputs[:4].astype(np.int32)),
        "labels": torch.from_numpy(np.where(train.labels[:4] == 0, -100, train.labels[:4].astype(np.int32))),
        "puzzle_identifiers": torch.from_numpy(ids[:4].astype(np.int32)),
    }

    def train_step(carry):
        head.train()
        carry, loss, _, _, _ = head(carry, batch)
        loss.backward()
        for opt, _ in optimizers:
            opt.step()
            opt.zero_grad()
        return carry

    carry = train_step(head.initial_carry(batch))
    test_ids = np.repeat(test.puzzle_identifiers, np.diff(test.puzzle_indices))
    env = DistEnv(0, 0, 1)
    first = predict(head, test.inputs, test.labels, test_ids, np.arange(len(test_ids)), 4, env)
    assert head.training  # restored
    before = {k: v.clone() for k, v in head.state_dict().items()}
    carry = train_step(carry)  # the carry and weights after an evaluation still take in-place updates
    assert any(not torch.equal(before[k], v) for k, v in head.state_dict().items())
    second = predict(head, test.inputs, test.labels, test_ids, np.arange(len(test_ids)), 4, env)
    assert first.preds.shape == second.preds.shape == (len(test_ids), 900)


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


def test_the_blank_id_control_is_a_second_pass_with_every_puzzle_embedding_blank(tiny_dataset, tmp_path):
    # checkpoint A has random puzzle embeddings; B is A with every row replaced by the blank row 0 by hand, so B's
    # normal pass is what A's control must be: the model asked with the blank identifier for every test row
    split = load_split(tiny_dataset, "test")
    head, cfg = _head(split, seed=2)
    table = core_of(head).puzzle_emb.weights
    with torch.no_grad():
        next(m for name, m in head.named_modules() if name.endswith("q_head")).weight.normal_()
        table.normal_()
    sha = identifiers_sha256(tiny_dataset)
    meta = {"arch": "trm", "arch_cfg": cfg, "dataset": split.metadata, "identifiers_sha256": sha}
    save_weights(tmp_path / "a.pt", head, **meta)
    with torch.no_grad():
        table.copy_(table[split.metadata.blank_identifier_id].expand_as(table).clone())
    save_weights(tmp_path / "b.pt", head, **meta)
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
        {f"pass@{k}": a[f"pass@{k}"] for k in CONFIG.pass_ks}
    )
    assert json.loads((tmp_path / "a" / "metrics.json").read_text())["controls"] == a["controls"]
