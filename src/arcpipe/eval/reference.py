"""A straightforward per-prediction Python evaluator: the readable specification the fast path is tested against.

It follows docs/reference/upstream-recursive.md 10.2-10.3 step by step (one row at a time, sha256 grid keys, a dict of
votes, a stable sort on (votes, mean q)). It is slow (about 20 s for the 386k predictions of ARC-AGI-1 aug-1000) and is
used only by the tests and by benchmarks/evaluate.py as the baseline.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from arcpipe.eval.puzzles import SEPARATOR
from arcpipe.eval.vote import sigmoid64

DIHEDRAL = [
    lambda g: g,
    lambda g: np.rot90(g, 1),
    lambda g: np.rot90(g, 2),
    lambda g: np.rot90(g, 3),
    np.fliplr,
    np.flipud,
    lambda g: g.T,
    lambda g: np.fliplr(np.rot90(g, 1)),
]
DIHEDRAL_INVERSE = [0, 3, 2, 1, 4, 5, 6, 7]


def reference_evaluate(
    inputs: np.ndarray,
    preds: np.ndarray,
    puzzle_identifiers: np.ndarray,
    q_halt_logits: np.ndarray,
    identifiers: Sequence[str],
    test_puzzles: dict[str, Any] | str | Path,
    ks: Sequence[int] = (1, 2, 5, 10, 100, 1000),
    crop: Callable[[np.ndarray], np.ndarray] | None = None,
) -> tuple[dict[int, float], dict[tuple[str, int], list[tuple[str, int, float]]]]:
    """(pass@K by K, ranked [(grid sha256, votes, mean q)] per (task, test index)) of one set of predictions.

    crop: one canvas -> grid; `reference_crop` (pure Python) by default. The benchmark passes the numba-compiled
    single-row crop, as upstream uses one, so that the baseline times upstream's algorithm fairly.
    """
    crop = crop or reference_crop
    if not isinstance(test_puzzles, dict):
        test_puzzles = json.loads(Path(test_puzzles).read_text())
    q_values = sigmoid64(np.asarray(q_halt_logits))
    recorded: dict[str, dict[str, list[tuple[str, float]]]] = {}
    for row in range(len(puzzle_identifiers)):
        pid = int(puzzle_identifiers[row])
        if pid == 0:
            continue
        task, invert = _inverse_of(identifiers[pid])
        input_key = grid_hash(invert(crop(inputs[row])))
        pred = invert(crop(preds[row]))
        recorded.setdefault(task, {}).setdefault(input_key, []).append((grid_hash(pred), float(q_values[row])))

    total = {k: 0.0 for k in ks}
    ranked_all: dict[tuple[str, int], list[tuple[str, int, float]]] = {}
    for task, puzzle in test_puzzles.items():
        solved = {k: 0 for k in ks}
        for j, pair in enumerate(puzzle["test"]):
            key = grid_hash(np.array(pair["input"], dtype=np.uint8))
            label = grid_hash(np.array(pair["output"], dtype=np.uint8))
            stats: dict[str, list[float]] = {}
            for h, q in recorded.get(task, {}).get(key, []):
                entry = stats.setdefault(h, [0, 0.0])
                entry[0] += 1
                entry[1] += q
            ranked = sorted(stats.items(), key=lambda kv: (kv[1][0], kv[1][1] / kv[1][0]), reverse=True)
            ranked_all[(task, j)] = [(h, int(n), s / n) for h, (n, s) in ranked]
            for k in ks:
                solved[k] += any(h == label for h, _ in ranked[:k])
        for k in ks:
            total[k] += solved[k] / len(puzzle["test"])
    return {k: total[k] / len(test_puzzles) for k in ks}, ranked_all


def reference_crop(canvas: np.ndarray) -> np.ndarray:
    canvas = np.asarray(canvas).reshape(30, 30)
    best, best_shape, num_c = 0, (0, 0), 30
    for r in range(1, 31):
        for c in range(1, num_c + 1):
            if not 2 <= canvas[r - 1, c - 1] <= 11:
                num_c = c - 1
                break
        if r * num_c > best:
            best, best_shape = r * num_c, (r, num_c)
    return (canvas[: best_shape[0], : best_shape[1]] - 2).astype(np.uint8)


def grid_hash(grid: np.ndarray) -> str:
    return hashlib.sha256(bytes(grid.shape) + np.ascontiguousarray(grid, dtype=np.uint8).tobytes()).hexdigest()


def _inverse_of(name: str):
    if SEPARATOR not in name:
        return name, lambda g: g
    task = name.split(SEPARATOR)[0]
    tid_field, colours = name.split(SEPARATOR)[-2:]
    undo = DIHEDRAL[DIHEDRAL_INVERSE[int(tid_field[1:])]]
    colour_inverse = np.argsort([int(c) for c in colours]).astype(np.uint8)
    return task, lambda g: colour_inverse[undo(g)]
