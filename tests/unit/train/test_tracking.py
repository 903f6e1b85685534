"""W&B mode selection (`wandb: auto`) and the evaluation's writer, without going online (wandb.init is faked)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import wandb

from arcpipe.train import tracking
from arcpipe.train.tracking import (
    evaluation_record,
    evaluation_settings,
    log_evaluation,
    wandb_grouping,
    wandb_mode,
    wandb_run_id,
)

METRICS = {
    "step": 120,
    "epoch": 4,
    "voting": "single-checkpoint",
    "pass@1": 0.25,
    "pass@2": 0.5,
    "num_tasks": 4,
    "eval/lm_loss": 1.5,
    "depth": {"1": {"pass@1": 0.0, "pass@2": 0.25}, "2": {"pass@1": 0.25, "pass@2": 0.5}},
}


@pytest.mark.parametrize(
    ("environ", "mode"),
    [
        ({"WANDB_API_KEY": "k"}, "online"),
        ({}, "offline"),
        ({"WANDB_API_KEY": ""}, "offline"),
        ({"WANDB_API_KEY": "k", "WANDB_MODE": "offline"}, "offline"),
        ({"WANDB_MODE": "disabled"}, "disabled"),
    ],
)
def test_auto_is_online_with_a_key_and_offline_without(environ: dict[str, str], mode: str) -> None:
    assert wandb_mode("auto", environ) == mode


@pytest.mark.parametrize("setting", ["online", "offline", "disabled"])
def test_an_explicit_mode_is_kept_unless_wandb_mode_is_set(setting: str) -> None:
    assert wandb_mode(setting, {"WANDB_API_KEY": "k"}) == setting
    assert wandb_mode(setting, {"WANDB_MODE": "disabled"}) == "disabled"


def test_evaluation_record_puts_pass_at_k_and_depth_at_the_checkpoint_step() -> None:
    assert evaluation_record(METRICS) == {
        "eval/step": 120,
        "eval/epoch": 4,
        "eval/pass@1": 0.25,
        "eval/pass@2": 0.5,
        "eval/lm_loss": 1.5,
        "eval/depth/1/pass@1": 0.0,
        "eval/depth/1/pass@2": 0.25,
        "eval/depth/2/pass@1": 0.25,
        "eval/depth/2/pass@2": 0.5,
    }


def test_the_evaluation_writer_is_a_secondary_writer_in_shared_mode() -> None:
    settings = wandb.Settings(**evaluation_settings(4))  # validated by wandb itself, offline
    assert settings.mode == "shared" and settings.x_label == "eval-epoch_4"
    assert settings.x_primary is False and settings.x_update_finish_state is False


class _FakeRun:
    def __init__(self, calls: list[tuple[str, Any]]) -> None:
        self.calls = calls

    def __enter__(self) -> _FakeRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.calls.append(("finish", None))

    def define_metric(self, name: str, **kwargs: Any) -> None:
        self.calls.append(("define_metric", (name, kwargs)))

    def log(self, record: dict[str, Any], step: int | None = None) -> None:
        self.calls.append(("log", (record, step)))


@pytest.fixture
def fake_init(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    calls: list[tuple[str, Any]] = []

    def init(**kwargs: Any) -> _FakeRun:
        calls.append(("init", kwargs))
        return _FakeRun(calls)

    monkeypatch.setattr(wandb, "init", init)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    return calls


def test_an_online_evaluation_logs_into_the_training_run(
    fake_init: list, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("WANDB_API_KEY", "k")
    config = {"wandb": "auto", "wandb_project": "proj", "seed_group": "trm"}
    assert log_evaluation(config, "trm-s1", METRICS, tmp_path)
    (_, init), *rest = fake_init
    assert init["id"] == wandb_run_id("trm-s1") and init["project"] == "proj" and init["group"] == "trm"
    assert init["settings"].mode == "shared" and init["settings"].x_primary is False
    assert "resume" not in init  # a shared-mode writer attaches to the run; the training job resumes it
    assert ("define_metric", ("eval/*", {"step_metric": "eval/step"})) in rest
    assert ("log", (evaluation_record(METRICS), None)) in rest  # no step=: shared mode ignores it
    assert rest[-1] == ("finish", None)


@pytest.mark.parametrize(("setting", "key"), [("auto", None), ("offline", "k"), ("disabled", "k")])
def test_an_evaluation_is_not_mirrored_unless_online(
    fake_init: list, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, setting: str, key: str | None
) -> None:
    if key is None:
        monkeypatch.delenv("WANDB_API_KEY", raising=False)
    else:
        monkeypatch.setenv("WANDB_API_KEY", key)
    assert not log_evaluation({"wandb": setting}, "trm", METRICS, tmp_path)
    assert fake_init == [] and list(tmp_path.iterdir()) == []


def test_training_groups_by_seed_group_else_run_name(fake_init: list, monkeypatch: pytest.MonkeyPatch) -> None:
    from arcpipe.config import RunConfig

    monkeypatch.setattr(wandb, "init", lambda **kwargs: fake_init.append(kwargs))
    base = {"dataset": "d", "arch": "trm", "preset": "tiny", "target": "smoke", "epochs": 2, "eval_interval": 1}
    tracking.WandbMirror(RunConfig(**base, wandb="offline"), "trm", Path("out"), enabled=True)
    tracking.WandbMirror(RunConfig(**base, wandb="offline", seed_group="trm"), "trm-s1", Path("out"), enabled=True)
    assert [(c["group"], c["id"], c["mode"]) for c in fake_init] == [
        ("trm", wandb_run_id("trm"), "offline"),
        ("trm", wandb_run_id("trm-s1"), "offline"),
    ]


def test_saved_evaluations_are_mirrored_in_epoch_order(
    fake_init: list, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import json

    from arcpipe.config import RunConfig

    monkeypatch.delenv("WANDB_API_KEY", raising=False)  # the config's `offline` and `auto` are overridden: online
    for epoch in (10, 2):
        (tmp_path / f"eval/trm/epoch_{epoch}").mkdir(parents=True)
        (tmp_path / f"eval/trm/epoch_{epoch}/metrics.json").write_text(json.dumps({**METRICS, "epoch": epoch}))
    run = RunConfig(dataset="d", arch="trm", preset="tiny", target="smoke", epochs=2, eval_interval=1, wandb="offline")
    assert tracking.mirror_evaluations(run, "trm", tmp_path) == 2
    inits = [kwargs for name, kwargs in fake_init if name == "init"]
    assert [i["settings"].x_label for i in inits] == ["eval-epoch_2", "eval-epoch_10"]
    assert all(i["id"] == wandb_run_id("trm") and i["settings"].mode == "shared" for i in inits)


def test_a_sweeps_arms_are_one_wandb_group_and_each_arm_a_job_type() -> None:
    arm = {"seed_group": "depth-H_cycles_1", "sweep": {"name": "depth", "arm": "depth-H_cycles_1", "values": {}}}
    assert wandb_grouping(arm, "depth-H_cycles_1-s0") == {"group": "sweep-depth", "job_type": "depth-H_cycles_1"}
    assert wandb_grouping({"seed_group": "trm-arc1", "sweep": None}, "trm-arc1-s1") == {"group": "trm-arc1"}
    assert wandb_grouping({}, "trm-arc1") == {"group": "trm-arc1"}


def test_lines_written_after_a_cut_back_reach_the_metrics_file(tmp_path: Path) -> None:
    # one process that trains several segments (train_until after train_until, as the benchmarks do): the cut back
    # replaces the side file while it is open, and the lines written after it must land in the new one
    log = tracking.MetricsLog(tmp_path / "side.jsonl", enabled=True)
    for step in range(1, 6):
        log.write({"step": step, "epoch": step / 2})
    log.truncate_after(3)
    for step in (4, 5):
        log.write({"step": step, "epoch": step / 2, "again": True})
    log.export(tmp_path / "metrics.jsonl", since_epoch=0)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r.get("again", False)) for r in rows] == [
        (1, False),
        (2, False),
        (3, False),
        (4, True),
        (5, True),
    ]
