"""What an answers golden records of the dataset it was answered on, so that a test knows it rebuilt the same one
(imported as `answerkit` by test_import_answers.py, test_varc_import_answers.py and their recorders,
tests/tools/record_answer_goldens.py and record_varc_answer_goldens.py)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np


def dataset_hashes(data: Path) -> dict[str, str]:
    """SHA-256 of a built dataset's identifiers.json, test_puzzles.json and test split arrays."""
    h = hashlib.sha256()
    for field in ("inputs", "labels", "puzzle_identifiers", "puzzle_indices", "group_indices"):
        h.update(np.ascontiguousarray(np.load(data / "test" / f"all__{field}.npy")).tobytes())
    return {
        "identifiers_sha256": hashlib.sha256((data / "identifiers.json").read_bytes()).hexdigest(),
        "test_puzzles_sha256": hashlib.sha256((data / "test_puzzles.json").read_bytes()).hexdigest(),
        "test_split_sha256": h.hexdigest(),
    }
