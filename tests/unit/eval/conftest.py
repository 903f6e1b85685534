"""Hand-built prediction sets: each row is (puzzle name, input grid, predicted grid or canvas, q_halt logit)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

from arcpipe.eval.puzzles import TestPuzzles, load_tasks_from_json
from arcpipe.eval.reference import DIHEDRAL
from arcpipe.eval.synthetic import encode

Row = tuple[str, Any, Any, float]


def augment(grid: Any, name: str) -> np.ndarray:
    """The grid as puzzle `name` shows it: colours mapped first, then the dihedral transform
    (docs/reference/upstream-recursive.md 1.8)."""
    grid = np.array(grid, dtype=np.uint8)
    if "|||" not in name:
        return grid
    tid, digits = name.split("|||")[-2:]
    colours = np.array([int(c) for c in digits], dtype=np.uint8)
    return np.ascontiguousarray(DIHEDRAL[int(tid[1:])](colours[grid]))


def canvas(grid: Any) -> np.ndarray:
    grid = np.asarray(grid, dtype=np.uint8)
    return grid.reshape(900) if grid.size == 900 and grid.ndim == 1 else encode(grid)


@pytest.fixture
def make_rows() -> Callable[[Sequence[Row]], dict[str, Any]]:
    """Rows in the ORIGINAL frame -> arrays in the augmented frame, as the model would see and answer them."""

    def make(rows: Sequence[Row]) -> dict[str, Any]:
        identifiers = ["<blank>"]
        ids, inputs, preds, qs = [], [], [], []
        for name, x, y, q in rows:
            if name not in identifiers:
                identifiers.append(name)
            ids.append(identifiers.index(name) if name != "<blank>" else 0)
            inputs.append(canvas(augment(x, name)))
            preds.append(y if isinstance(y, np.ndarray) and y.shape == (900,) else canvas(augment(y, name)))
            qs.append(q)
        return {
            "inputs": np.stack(inputs),
            "preds": np.stack(preds),
            "puzzle_identifiers": np.array(ids, dtype=np.int32),
            "q_halt_logits": np.array(qs, dtype=np.float32),
            "identifiers": identifiers,
        }

    return make


def tasks(spec: dict[str, list[tuple[Any, Any]]]) -> TestPuzzles:
    """{task: [(test input, test output), ...]} -> TestPuzzles."""
    raw = {name: {"test": [{"input": x, "output": y} for x, y in pairs]} for name, pairs in spec.items()}
    return load_tasks_from_json(raw, "hand-built test_puzzles.json")
