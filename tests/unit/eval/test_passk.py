"""test_puzzles.json loading, pass@K averaging, and submission.json against the stored schema."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import tasks

from arcpipe.config import ArcpipeError
from arcpipe.eval.passk import (
    FALLBACK_GRID,
    SCHEMA_PATH,
    build_submission,
    load_test_puzzles,
    score,
    validate_submission,
)
from arcpipe.eval.vote import vote

X, Y, W = [[1, 2], [3, 4]], [[5, 6], [7, 8]], [[5, 6], [7, 0]]


def test_pass_at_k_is_averaged_over_every_task_including_ones_without_predictions(make_rows):
    test = tasks({"a": [(X, Y)], "b": [(X, Y), ([[1]], [[1]])], "c": [(X, Y)], "d": [(X, Y)]})
    rows = [("a", X, W, 1.0), ("a|||t2|||0123456789", X, Y, 0.0), ("b", X, Y, 0.0), ("c", X, W, 0.0)]
    votes = vote(**make_rows(rows), test=test)
    scores = score(votes, test, (1, 2, 1000))
    # a: Y second -> 0 at K=1, 1 at K=2; b: 1 of 2 pairs; c: wrong; d: no predictions
    assert scores.pass_at == {1: 0.5 / 4, 2: 1.5 / 4, 1000: 1.5 / 4}
    assert scores.task_score[:, 1].tolist() == [1.0, 0.5, 0.0, 0.0]
    assert scores.label_rank.tolist() == [1, 0, -1, -1, -1]


def test_submission_has_an_entry_for_every_test_input_with_a_fallback(make_rows):
    test = tasks({"a": [(X, Y)], "b": [(X, Y), ([[1]], [[1]])]})
    empty = np.zeros(900, np.uint8)
    rows = [("a", X, W, 1.0), ("a|||t2|||0123456789", X, Y, 0.0), ("b", X, empty, 0.0)]
    submission, stats = build_submission(vote(**make_rows(rows), test=test), test)
    assert submission == {
        "a": [{"attempt_1": W, "attempt_2": Y}],
        "b": [
            {"attempt_1": FALLBACK_GRID, "attempt_2": FALLBACK_GRID},  # empty grid, repeated
            {"attempt_1": FALLBACK_GRID, "attempt_2": FALLBACK_GRID},  # no candidate at all
        ],
    }
    assert (stats.num_entries, stats.pairs_without_candidates, stats.empty_attempts) == (3, 1, 2)
    validate_submission(submission, test)


def test_a_single_candidate_is_repeated_as_attempt_2(make_rows):
    test = tasks({"a": [(X, Y)]})
    submission, _ = build_submission(vote(**make_rows([("a", X, Y, 0.0)]), test=test), test)
    assert submission == {"a": [{"attempt_1": Y, "attempt_2": Y}]}


@pytest.mark.parametrize(
    "bad",
    [
        {"a": [{"attempt_1": [[1]]}]},  # attempt_2 missing
        {"a": [{"attempt_1": [[1]], "attempt_2": [[10]]}]},  # colour out of range
        {"a": [{"attempt_1": [], "attempt_2": [[1]]}]},  # empty grid
        {"a": [{"attempt_1": [[1, 2], [3]], "attempt_2": [[1]]}]},  # ragged rows
        {"a": []},
    ],
)
def test_malformed_submissions_are_rejected(bad):
    with pytest.raises(ArcpipeError, match="submission.json"):
        validate_submission(bad)


def test_a_submission_missing_a_test_input_is_rejected():
    test = tasks({"a": [(X, Y), (W, Y)]})
    with pytest.raises(ArcpipeError, match="1 entries for 2 test inputs"):
        validate_submission({"a": [{"attempt_1": [[1]], "attempt_2": [[1]]}]}, test)


def test_the_schema_file_is_valid_json_schema():
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft202012Validator.check_schema(json.loads(SCHEMA_PATH.read_text()))


def test_malformed_test_puzzles_name_the_task_and_pair(tmp_path):
    path = tmp_path / "test_puzzles.json"
    path.write_text(
        json.dumps({"ok": {"test": [{"input": X, "output": Y}]}, "bad": {"test": [{"input": [[1, 2], [3]]}]}})
    )
    with pytest.raises(ArcpipeError, match=r"test_puzzles.json: task bad test 0 input"):
        load_test_puzzles(path)
    path.write_text("{not json")
    with pytest.raises(ArcpipeError, match="cannot read"):
        load_test_puzzles(path)


def test_test_puzzles_keep_file_order_and_pair_positions(tmp_path):
    path = tmp_path / "test_puzzles.json"
    raw = {"z": {"test": [{"input": X, "output": Y}], "train": []}, "a": {"test": [{"input": X}, {"input": W}]}}
    path.write_text(json.dumps(raw))
    test = load_test_puzzles(path)
    assert test.task_names == ["z", "a"] and test.pair_index.tolist() == [0, 0, 1]
    assert test.has_label.tolist() == [True, False, False]
    assert test.subset(["a"]).task_names == ["a"] and test.subset(["a"]).num_pairs == 2
