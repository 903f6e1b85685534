"""Upstream VARC's offline data: RE-ARC's pairs as more examples of the same puzzles, and a train split without
the test set's tasks; both build, verify, and record what they were built from."""

import json
from pathlib import Path

import numpy as np
import pytest

from arcpipe.config import ArcpipeError, DatasetConfig, KaggleSource
from arcpipe.data.build import build_dataset
from arcpipe.data.verify import verify_dataset

DATA = Path(__file__).parents[1] / "data"
TINY = KaggleSource(kaggle=str(DATA / "arc-tiny"), subsets=["training", "evaluation"])
TASK = "8be77c9e"  # a training task of the tiny fixture: 3 train pairs, 1 test pair


def _re_arc(root: Path, files: dict[str, list]) -> Path:
    (root / "tasks").mkdir(parents=True, exist_ok=True)
    for name, pairs in files.items():
        (root / "tasks" / f"{name}.json").write_text(json.dumps(pairs))
    return root


def _pairs(n: int, start: int = 0) -> list[dict]:
    return [{"input": [[(start + k) % 10, 1, 2]], "output": [[3], [(start + k) // 10 % 10]]} for k in range(n)]


def _build(tmp_path: Path, name: str, **changes) -> tuple[Path, dict]:
    cfg = DatasetConfig.model_validate({"sources": [TINY], "test_set": "evaluation", "num_aug": 2, **changes})
    out = tmp_path / name
    build_dataset(cfg, out, workers=1)
    report = verify_dataset(out)
    assert report["ok"], report["failures"]
    return out, json.loads((out / "build.json").read_text())


def _examples_by_puzzle(out: Path, split: str) -> dict[str, int]:
    names = json.loads((out / "identifiers.json").read_text())
    ids = np.load(out / split / "all__puzzle_identifiers.npy")
    sizes = np.diff(np.load(out / split / "all__puzzle_indices.npy"))
    return {names[i]: int(n) for i, n in zip(ids, sizes, strict=True)}


def test_re_arc_pairs_are_more_training_examples_of_the_same_puzzles(tmp_path):
    root = _re_arc(tmp_path / "re_arc", {TASK: _pairs(6), "ffffffff": _pairs(2)})
    plain, _ = _build(tmp_path, "plain")
    extra, record = _build(tmp_path, "extra", sources=[TINY, {"re_arc": str(root)}])
    # the same puzzles and names: RE-ARC adds no identity of its own
    assert (extra / "identifiers.json").read_bytes() == (plain / "identifiers.json").read_bytes()
    before, after = _examples_by_puzzle(plain, "train"), _examples_by_puzzle(extra, "train")
    assert before.keys() == after.keys()
    assert all(after[p] == before[p] + (6 if p.startswith(TASK) else 0) for p in before)
    for name in ("test_puzzles.json", "test/all__inputs.npy", "test/all__labels.npy"):
        assert (extra / name).read_bytes() == (plain / name).read_bytes()
    assert record["sources"][-1] | {"directory": "", "files_sha256": ""} == {
        "kind": "re_arc",
        "directory": "",
        "files_sha256": "",
        "num_files": 2,
        "examples": None,
        "num_tasks": 1,
        "num_examples": 6,
        "num_skipped": 1,
        "skipped": ["ffffffff"],
        "dropped_test_pairs": 0,
    }


def test_the_build_record_changes_with_the_re_arc_files_and_the_limit(tmp_path):
    root = _re_arc(tmp_path / "re_arc", {TASK: _pairs(6)})
    sources = [TINY, {"re_arc": str(root)}]
    _, first = _build(tmp_path, "a", sources=sources)
    _re_arc(root, {TASK: _pairs(6, start=1)})
    _, edited = _build(tmp_path, "b", sources=sources)
    _, limited = _build(tmp_path, "c", sources=[TINY, {"re_arc": str(root), "examples": 4}])
    assert first["sources"][-1]["files_sha256"] != edited["sources"][-1]["files_sha256"]
    assert limited["config"] != edited["config"] and limited["sources"][-1]["num_examples"] == 4


def test_a_generated_copy_of_a_test_pair_is_dropped_from_training(tmp_path):
    task = json.loads((DATA / "arc-tiny_training_challenges.json").read_text())[TASK]
    solution = json.loads((DATA / "arc-tiny_training_solutions.json").read_text())[TASK][0]
    answer = {"input": task["test"][0]["input"], "output": solution}
    root = _re_arc(tmp_path / "re_arc", {TASK: [*_pairs(3), answer]})
    # upstream's offline protocol: validation on the training tasks' test pairs, RE-ARC in training, no augmentation
    out, record = _build(tmp_path, "offline", sources=[TINY, {"re_arc": str(root)}], test_set="training", num_aug=0)
    assert record["sources"][-1]["dropped_test_pairs"] == 1 and record["sources"][-1]["num_examples"] == 3
    assert _examples_by_puzzle(out, "train")[TASK] == 3 + 3


@pytest.mark.parametrize("num_aug", [0, 2])
def test_without_test_demos_the_train_split_holds_no_test_task(tmp_path, num_aug):
    default, _ = _build(tmp_path, "default", num_aug=num_aug)
    out, _ = _build(tmp_path, "offline", num_aug=num_aug, test_demos_in_train=False)
    names = json.loads((out / "identifiers.json").read_text())
    test = set(json.loads((out / "test_puzzles.json").read_text()))
    trained = {name.split("|||")[0] for name in _examples_by_puzzle(out, "train")}
    assert trained == {TASK, "0d3d703e"} and not trained & test
    # every view keeps a name (the test tasks' after the trained ones): the embedding table is as large as before
    assert sorted(names) == sorted(json.loads((default / "identifiers.json").read_text()))
    assert _examples_by_puzzle(out, "test") == _examples_by_puzzle(default, "test")
    assert json.loads((out / "test" / "dataset.json").read_text())["num_puzzle_identifiers"] == len(names)


def test_verify_fails_a_train_split_with_test_tasks_when_the_build_says_none(tmp_path):
    out, record = _build(tmp_path, "default")
    record["config"]["test_demos_in_train"] = False
    (out / "build.json").write_text(json.dumps(record))
    report = verify_dataset(out)
    assert not report["ok"] and "train split holds test task 66e6c45b" in report["failures"][0]


def test_a_train_split_left_empty_is_refused(tmp_path):
    cfg = DatasetConfig(sources=[TINY.model_copy(update={"subsets": ["training"]})], test_set="training")
    with pytest.raises(ArcpipeError, match="test_demos_in_train: false leaves the train split empty"):
        build_dataset(cfg.model_copy(update={"test_demos_in_train": False}), tmp_path / "out", workers=1)
    assert not (tmp_path / "out").exists()
