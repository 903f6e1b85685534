"""test_puzzles.json loading: file order, pair positions, and errors that name the task and pair."""

from __future__ import annotations

import json

import pytest

from arcpipe.config import ArcpipeError
from arcpipe.eval.puzzles import load_test_puzzles

X, Y, W = [[1, 2], [3, 4]], [[5, 6], [7, 8]], [[5, 6], [7, 0]]


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
