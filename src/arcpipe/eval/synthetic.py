"""Synthetic prediction sets with the layout of a real test split, for tests and benchmarks/evaluate.py.

Every test pair of every task gets `num_aug` augmented views (plus the original); each view's prediction is the
augmented true output, one of two fixed near-misses per test pair, an unrelated grid, or an empty canvas, with a
random q_halt logit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from arcpipe.eval.grids import CANVAS, COLOUR_OFFSET, EOS, SEQ_LEN
from arcpipe.eval.reference import DIHEDRAL


@dataclass(frozen=True)
class SyntheticPredictions:
    inputs: np.ndarray  # (N, 900) uint8
    preds: np.ndarray  # (N, 900) uint8
    puzzle_identifiers: np.ndarray  # (N,) int32
    q_halt_logits: np.ndarray  # (N,) float32
    identifiers: list[str]


def encode(grid: np.ndarray) -> np.ndarray:
    """(H, W) colours -> (900,) tokens at (0, 0) with upstream's EOS border (no corner, none at the canvas edge)."""
    h, w = grid.shape
    canvas = np.zeros((CANVAS, CANVAS), dtype=np.uint8)
    canvas[:h, :w] = grid + COLOUR_OFFSET
    if h < CANVAS:
        canvas[h, :w] = EOS
    if w < CANVAS:
        canvas[:h, w] = EOS
    return canvas.reshape(SEQ_LEN)


def synthetic_predictions(
    test_puzzles: dict[str, Any],
    num_aug: int,
    seed: int = 0,
    pred_seed: int = 0,
    p_correct: float = 0.5,
    p_corrupt: float = 0.3,
    p_empty: float = 0.02,
    solvable: float = 1.0,
) -> SyntheticPredictions:
    """Predictions for every test pair x (original + num_aug augmentations), rows in puzzle order.

    Each task's augmentations are named as upstream names them, one puzzle id per (task, augmentation); every
    test pair of the task appears under each of its task's puzzle ids. The views depend on `seed` only, so sets
    with the same seed and another `pred_seed` share identifiers (like evaluations of two checkpoints). A fraction
    1 - `solvable` of the tasks never gets a right prediction.
    """
    rng = np.random.default_rng(seed)
    pred_rng = np.random.default_rng((seed, pred_seed))
    identifiers = ["<blank>"]
    inputs, preds, ids = [], [], []
    for task, puzzle in test_puzzles.items():
        views = [(0, np.arange(10))] + [
            (int(rng.integers(8)), np.concatenate([[0], rng.permutation(np.arange(1, 10))])) for _ in range(num_aug)
        ]
        # per task a chance of a right answer around p_correct; per test pair two fixed wrong answers ("rivals")
        # that compete with it for votes, so pass@1 < pass@2 < pass@K happens
        p_task = pred_rng.uniform(0, 2 * p_correct) if pred_rng.random() < solvable else 0.0
        pairs = []
        for pair in puzzle["test"]:
            x, y = np.array(pair["input"], dtype=np.uint8), np.array(pair["output"], dtype=np.uint8)
            r, c = pred_rng.integers(y.shape[0]), pred_rng.integers(y.shape[1])
            rivals = [y.copy(), y.copy()]
            rivals[0][r, c], rivals[1][r, c] = (y[r, c] + 1) % 10, (y[r, c] + 2) % 10
            pairs.append((x, y, rivals))
        for v, (tid, colours) in enumerate(views):
            identifiers.append(task if v == 0 else f"{task}|||t{tid}|||{''.join(map(str, colours))}")
            pid = len(identifiers) - 1
            for x, y, rivals in pairs:
                inputs.append(encode(_view(x, tid, colours)))
                u = pred_rng.random()
                if u < p_task:
                    preds.append(encode(_view(y, tid, colours)))
                elif u < p_task + p_corrupt:
                    preds.append(encode(_view(rivals[int(pred_rng.integers(2))], tid, colours)))
                elif u < p_task + p_corrupt + p_empty:
                    preds.append(np.zeros(SEQ_LEN, dtype=np.uint8))
                else:
                    preds.append(_unrelated(pred_rng))
                ids.append(pid)
    return SyntheticPredictions(
        inputs=np.stack(inputs),
        preds=np.stack(preds),
        puzzle_identifiers=np.array(ids, dtype=np.int32),
        q_halt_logits=pred_rng.normal(0, 3, len(ids)).astype(np.float32),
        identifiers=identifiers,
    )


def _view(grid: np.ndarray, tid: int, colours: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(DIHEDRAL[tid](colours[grid]), dtype=np.uint8)


def _unrelated(rng: np.random.Generator) -> np.ndarray:
    # an unrelated grid; sometimes an irregular canvas with stray colours past its EOS border
    if rng.random() < 0.3:
        return rng.integers(0, 12, SEQ_LEN).astype(np.uint8)
    shape = rng.integers(1, CANVAS + 1, 2)
    return encode(rng.integers(0, 10, shape).astype(np.uint8))
