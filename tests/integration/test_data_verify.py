"""Verification passes on a fresh build and names each corruption (issue: at least six kinds)."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from arcpipe.cli import main
from arcpipe.config import DatasetConfig, KaggleSource
from arcpipe.data.augment import to_canvas
from arcpipe.data.build import build_dataset
from arcpipe.data.verify import verify_dataset

DATA = Path(__file__).parents[1] / "data"
TEST_TASK = "66e6c45b"  # the tiny fixture's evaluation task


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    cfg = DatasetConfig(
        sources=[KaggleSource(kaggle=str(DATA / "arc-tiny"), subsets=["training", "evaluation", "concept"])],
        test_set="evaluation",
        num_aug=8,
    )
    out = tmp_path_factory.mktemp("verify") / "tiny"
    build_dataset(cfg, out)
    return out


@pytest.fixture
def dataset(built, tmp_path) -> Path:
    copy = tmp_path / "tiny"
    shutil.copytree(built, copy)
    return copy


def _failures(path: Path) -> str:
    report = verify_dataset(path)
    assert not report["ok"]
    return "\n".join(report["failures"])


def test_fresh_build_verifies_and_records_checksums(dataset, capsys):
    assert main(["data", "verify", str(dataset)]) == 0
    report = json.loads((dataset / "verify.json").read_text())
    assert report["ok"] and report["failures"] == []
    assert report["prediction_only"] is False
    assert set(report["files"]) >= {"identifiers.json", "train/all__inputs.npy", "test/all__labels.npy"}
    build = json.loads((dataset / "build.json").read_text())
    assert report["identifiers_sha256"] == build["identifiers_sha256"]
    assert "ok" in capsys.readouterr().out


def test_truncated_array(dataset):
    path = dataset / "train/all__inputs.npy"
    path.write_bytes(path.read_bytes()[:-900])
    assert "train/all__inputs.npy is truncated" in _failures(dataset)


def test_edited_metadata(dataset):
    path = dataset / "train/dataset.json"
    meta = json.loads(path.read_text())
    meta["total_groups"] += 1
    path.write_text(json.dumps(meta))
    assert "train/dataset.json: total_groups=5 but the arrays hold 4" in _failures(dataset)


def test_shuffled_index(dataset):
    path = dataset / "train/all__puzzle_indices.npy"
    index = np.load(path)
    index[[3, 4]] = index[[4, 3]]
    np.save(path, index)
    assert "train/all__puzzle_indices.npy must start at 0, increase strictly" in _failures(dataset)


def test_out_of_range_token(dataset):
    labels = np.load(dataset / "train/all__labels.npy", mmap_mode="r+")
    labels[5, 0] = 12
    labels.flush()
    del labels
    assert "train row 5: a token outside 0..11" in _failures(dataset)


def test_missing_test_puzzle(dataset):
    path = dataset / "test_puzzles.json"
    puzzles = json.loads(path.read_text())
    del puzzles[TEST_TASK]
    path.write_text(json.dumps(puzzles))
    assert f"test split holds task {TEST_TASK}, which test_puzzles.json lacks" in _failures(dataset)


def test_missing_test_input_under_an_augmentation(dataset):
    ids = np.load(dataset / "test/all__puzzle_identifiers.npy")
    names = json.loads((dataset / "identifiers.json").read_text())
    inputs = np.load(dataset / "test/all__inputs.npy", mmap_mode="r+")
    index = np.load(dataset / "test/all__puzzle_indices.npy")
    row = index[3]  # the first example of test puzzle 3, replaced by another valid grid
    inputs[row] = to_canvas(np.full((2, 2), 3, dtype=np.uint8))
    inputs.flush()
    del inputs
    assert f"test puzzle {names[ids[3]]!r}: its inputs are not the test inputs" in _failures(dataset)


def test_test_pair_copied_into_its_own_train_examples(dataset):
    task = json.loads((dataset / "test_puzzles.json").read_text())[TEST_TASK]
    names = json.loads((dataset / "identifiers.json").read_text())
    ids = np.load(dataset / "train/all__puzzle_identifiers.npy")
    index = np.load(dataset / "train/all__puzzle_indices.npy")
    puzzle = [names[i] for i in ids].index(TEST_TASK)  # the original, untransformed puzzle
    row = index[puzzle]
    pair = task["test"][0]
    for name, grid in (("inputs", pair["input"]), ("labels", pair["output"])):
        array = np.load(dataset / f"train/all__{name}.npy", mmap_mode="r+")
        array[row] = to_canvas(np.array(grid, dtype=np.uint8))
        array.flush()
        del array
    assert f"train puzzle {TEST_TASK!r} holds one of its own test pairs" in _failures(dataset)


def test_identifier_out_of_range(dataset):
    path = dataset / "test/all__puzzle_identifiers.npy"
    ids = np.load(path)
    ids[0] = 10_000
    np.save(path, ids)
    assert "test/all__puzzle_identifiers.npy: ids span" in _failures(dataset)


def test_missing_and_extra_split(dataset):
    shutil.move(dataset / "test", dataset / "validation")
    failures = _failures(dataset)
    assert "split test/ is missing" in failures
    assert "extra split validation/" in failures


def test_file_changed_since_the_last_passing_verification(dataset, capsys):
    assert verify_dataset(dataset)["ok"]
    inputs = np.load(dataset / "train/all__inputs.npy", mmap_mode="r+")
    cell = int(np.flatnonzero(inputs[0] >= 2)[0])
    inputs[0, cell] = 2 + (inputs[0, cell] - 1) % 10  # another colour: still a valid canvas
    inputs.flush()
    del inputs
    assert main(["data", "verify", str(dataset)]) == 1
    err = capsys.readouterr().err
    assert "FAIL train/all__inputs.npy: sha256" in err
    assert "no longer matches the last passing verify.json" in err
    # a second run still compares against the last passing report, not the failed one
    assert "no longer matches the last passing verify.json" in _failures(dataset)
