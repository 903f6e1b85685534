"""`arcpipe predict --adapt [--adapt-mode MODE]`: unseen tasks get embedding rows, fitted on their demonstrations
with the rows alone, the rows then every weight, every weight, or low-rank adapters."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from arcpipe.cli import main
from arcpipe.config import ArcpipeError, EvaluationConfig
from arcpipe.data.arc import load_challenges
from arcpipe.eval.adapt import (
    EMBEDDING_KEY,
    MODES,
    Hyperparameters,
    add_lora,
    demonstrations,
    extend_checkpoint,
    extend_table,
    fit,
    fit_rows,
    views_per_task,
)
from arcpipe.eval.evaluate import predict_challenges
from arcpipe.models.io import core_of, model_from_checkpoint, read_weights
from arcpipe.train.distributed import DistEnv

CONFIG = EvaluationConfig(batch_size=8, pass_ks=[1, 2])


@pytest.fixture(scope="module")
def checkpoint(tiny_dataset, tiny_checkpoint, tmp_path_factory) -> Path:
    # an untrained tiny TRM whose table rows differ (a trained table is not all zeros)
    run_config = {"global_batch_size": 8, "puzzle_emb_lr": 0.01, "puzzle_emb_weight_decay": 0.1, "lr": 1e-3}
    path = tmp_path_factory.mktemp("adapt") / "epoch_2.pt"
    return tiny_checkpoint(path, tiny_dataset, table=0.1, run_config=run_config, step=7, epoch=2)


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
    assert {name.split("|||")[0] for name in demos.names} == set(json.loads(challenges.read_text()))
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
    assert stats.steps == 60 and stats.new_rows == len(demos.names) and stats.mode == "rows"
    assert [(p.name, p.steps) for p in stats.phases] == [("rows", 60)]
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


def test_predict_refuses_unseen_tasks_without_adapt(checkpoint, unseen, tiny_dataset, tmp_path):
    challenges, _ = unseen
    with pytest.raises(ArcpipeError, match="--adapt MINUTES"):
        predict_challenges(
            challenges, checkpoint, tiny_dataset / "identifiers.json", tmp_path / "r.json", config=CONFIG
        )
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_answers_unseen_tasks_reproducibly_and_leaves_the_checkpoint_unchanged(
    mode, checkpoint, unseen, tiny_dataset, tmp_path
):
    challenges, solutions = unseen
    identifiers = tiny_dataset / "identifiers.json"
    digest = hashlib.sha256(checkpoint.read_bytes()).hexdigest()
    outs = []
    for name in ("a.json", "b.json"):
        summary = predict_challenges(
            challenges, checkpoint, identifiers, tmp_path / name, solutions, CONFIG, "cpu", adapt_minutes=5,
            adapt_steps=6, adapt_mode=mode, seed=3,
        )  # fmt: skip
        assert summary is not None and summary.adaptation.steps == 6 and summary.adaptation.mode == mode
        assert sum(p.steps for p in summary.adaptation.phases) == 6
        assert set(summary.pass_at) == {1, 2}
        outs.append((tmp_path / name).read_bytes())
    expected = {"rows": [("rows", 6)], "rows+full": [("rows", 3), ("full", 3)], "full": [("full", 6)]}
    expected["lora"] = [("lora", 6)]
    assert [(p.name, p.steps) for p in summary.adaptation.phases] == expected[mode]
    submission = json.loads(outs[0])
    assert set(submission) == set(json.loads(challenges.read_text()))
    assert all(
        len(submission[t]) == len(json.loads(solutions.read_text())[t]) for t in json.loads(challenges.read_text())
    )
    assert outs[0] == outs[1]  # the same seed gives byte-identical answers
    assert hashlib.sha256(checkpoint.read_bytes()).hexdigest() == digest  # the checkpoint is never written


def _grown_head(checkpoint, unseen, tiny_dataset):
    challenges, _ = unseen
    identifiers = json.loads((tiny_dataset / "identifiers.json").read_text())
    demos = demonstrations(load_challenges(challenges), len(identifiers), 3, seed=0)
    grown = extend_checkpoint(read_weights(checkpoint), len(demos.names), source=checkpoint)
    head, _ = model_from_checkpoint(grown, "cpu", source=checkpoint, batch_size=8)
    return head, demos, len(identifiers)


@pytest.mark.parametrize("mode", ["full", "rows+full", "lora"])
def test_modes_that_train_weights_move_them_and_keep_the_trained_rows(mode, checkpoint, unseen, tiny_dataset):
    head, demos, n = _grown_head(checkpoint, unseen, tiny_dataset)
    before = {k: v.clone() for k, v in core_of(head).state_dict().items()}
    env = DistEnv(0, 0, 1, torch.device("cpu"))
    hyper = Hyperparameters.of_run({"lr": 1e-3})
    stats = fit(head, demos, mode=mode, hyper=hyper, batch_size=8, minutes=5, max_steps=8, seed=0, env=env)
    assert stats.steps == 8
    after = core_of(head).state_dict()
    assert set(after) == set(before)  # lora's adapters are merged back: the plain model's keys
    assert torch.equal(after[EMBEDDING_KEY][:n], before[EMBEDDING_KEY][:n])
    assert not torch.equal(after[EMBEDDING_KEY][n:], before[EMBEDDING_KEY][n:])
    moved = [k for k in before if k != EMBEDDING_KEY and not torch.equal(after[k], before[k])]
    assert moved, f"{mode}: no network weight moved"
    if mode == "lora":  # only the projections inside the blocks
        assert all(
            k.endswith(("qkv_proj.weight", "o_proj.weight", "gate_up_proj.weight", "down_proj.weight")) for k in moved
        )
    assert all(p.requires_grad and p.grad is None for p in head.parameters())


def test_lora_starts_equal_to_the_original_model(checkpoint, unseen, tiny_dataset):
    head, demos, _ = _grown_head(checkpoint, unseen, tiny_dataset)
    batch = {
        "inputs": torch.from_numpy(demos.inputs[:8].astype(np.int32)),
        "labels": torch.from_numpy(demos.labels[:8].astype(np.int32)),
        "puzzle_identifiers": torch.from_numpy(demos.example_ids[:8].astype(np.int32)),
    }
    head.eval()
    with torch.no_grad():
        plain = head(head.initial_carry(batch), batch, return_keys=("logits",))[3]["logits"]
        torch.manual_seed(0)
        adapters = add_lora(head, rank=4, alpha=8.0)
        assert adapters and all(torch.count_nonzero(a.lora_A) > 0 and not a.lora_B.any() for a in adapters)
        wrapped = head(head.initial_carry(batch), batch, return_keys=("logits",))[3]["logits"]
    assert torch.equal(plain, wrapped)


class StepClock:
    """The clock `fit` reads (arcpipe.eval.adapt's `time.monotonic`), moved only by the model's steps: step i takes
    durations[i] seconds. fit's budget rules run as they are; only how long each step takes is set, so the test
    checks them exactly, whatever else the machine is doing (on the real clock, a CI run beside busy processes took
    two steps of about 0.9 s in a 1.8 s budget and ended 0.02 s past it: a step longer than the one before)."""

    def __init__(self, durations: list[float]) -> None:
        self.now, self.durations, self.steps = 0.0, durations, 0

    def monotonic(self) -> float:
        return self.now

    def tick(self) -> None:
        self.now += self.durations[self.steps]
        self.steps += 1


@pytest.mark.parametrize(
    ("mode", "durations", "phases", "seconds"),
    [
        # 6 s budget, margin 0.6 s: the last step starts before 5.4 s and only if the longest step so far ends by 6 s
        ("rows", [0.5] * 20, (11,), 5.5),
        # rows until 2.7 s (half of 5.4 s), then every weight, its first step expected at twice the longest (1 s)
        ("rows+full", [0.5] * 6 + [1.0] * 10, (6, 3), 6.0),
        # the limit the module names: a step slower than any before it ends past the budget (by 2.0 - 0.5 - 0.5 s),
        # and none starts after it
        ("rows", [0.5] * 10 + [2.0] + [0.5] * 5, (11,), 7.0),
    ],
    ids=["rows", "rows+full", "one-slow-step"],
)
def test_adaptation_keeps_its_budget_by_the_steps_it_measured(
    mode, durations, phases, seconds, checkpoint, unseen, tiny_dataset, monkeypatch
):
    import types

    from arcpipe.eval import adapt

    head, demos, _ = _grown_head(checkpoint, unseen, tiny_dataset)
    clock = StepClock(durations)
    monkeypatch.setattr(adapt, "time", types.SimpleNamespace(monotonic=clock.monotonic))
    real_step = head.step

    def step(*args, **kwargs):
        out = real_step(*args, **kwargs)
        clock.tick()
        return out

    monkeypatch.setattr(head, "step", step)
    env = DistEnv(0, 0, 1, torch.device("cpu"))
    hyper = Hyperparameters.of_run({"lr": 1e-3})
    stats = fit(head, demos, mode=mode, hyper=hyper, batch_size=8, minutes=0.1, seed=0, env=env)
    assert stats.budget_seconds == 6.0
    assert tuple(p.steps for p in stats.phases) == phases and stats.steps == sum(phases) == clock.steps
    assert stats.seconds == seconds


RANKS_SCRIPT = """
import hashlib, json, sys
import torch
from arcpipe.data.arc import load_challenges
from arcpipe.eval.adapt import Hyperparameters, demonstrations, extend_checkpoint, fit
from arcpipe.models.io import core_of, model_from_checkpoint, read_weights
from arcpipe.train import distributed

checkpoint, challenges, identifiers, mode, out = sys.argv[1:]
env = distributed.setup(None, gpus=0)
n = len(json.loads(open(identifiers).read()))
demos = demonstrations(load_challenges(challenges), n, 3, seed=0)
grown = extend_checkpoint(read_weights(checkpoint), len(demos.names), source=checkpoint)
head, _ = model_from_checkpoint(grown, env.device, source=checkpoint, batch_size=4)
fit(head, demos, mode=mode, hyper=Hyperparameters.of_run({"lr": 1e-3}), batch_size=8, minutes=5, max_steps=4,
    env=env)
digest = hashlib.sha256()
for key, value in sorted(core_of(head).state_dict().items()):
    digest.update(key.encode() + value.numpy().tobytes())
open(f"{out}.{env.rank}", "w").write(digest.hexdigest())
distributed.teardown(env)
"""


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["rows+full", "lora"])
def test_under_torchrun_every_rank_ends_with_the_same_weights(mode, checkpoint, unseen, tiny_dataset, tmp_path):
    challenges, _ = unseen
    script = tmp_path / "ranks.py"
    script.write_text(RANKS_SCRIPT)
    torchrun = Path(sys.executable).with_name("torchrun")
    args = [str(checkpoint), str(challenges), str(tiny_dataset / "identifiers.json"), mode, str(tmp_path / "w")]
    proc = subprocess.run(
        [str(torchrun), "--standalone", "--nproc-per-node=2", str(script), *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "w.0").read_text() == (tmp_path / "w.1").read_text()


def test_cli_adapt_runs_and_rejects_a_negative_budget(checkpoint, unseen, tiny_dataset, tmp_path, capsys):
    challenges, _ = unseen
    args = ["predict", str(challenges), str(checkpoint), "--identifiers", str(tiny_dataset / "identifiers.json")]
    assert main([*args, "--out", str(tmp_path / "s.json"), "--adapt", "-1"]) == 2
    assert "--adapt" in capsys.readouterr().err
    assert main([*args, "--out", str(tmp_path / "s.json"), "--adapt", "0.01", "--adapt-steps", "2"]) == 0
    assert set(json.loads((tmp_path / "s.json").read_text())) == set(json.loads(challenges.read_text()))
    assert (
        main(
            [*args, "--out", str(tmp_path / "t.json"), "--adapt", "0.01", "--adapt-mode", "lora", "--adapt-steps", "2"]
        )
        == 0
    )
    with pytest.raises(SystemExit):
        main([*args, "--out", str(tmp_path / "u.json"), "--adapt", "1", "--adapt-mode", "everything"])
    err = capsys.readouterr().err
    assert "--adapt-mode" in err and all(mode in err for mode in MODES)
