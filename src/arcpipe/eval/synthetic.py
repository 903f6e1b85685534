"""Synthetic prediction sets with the layout of a real test split, for tests and benchmarks/evaluate.py.

Every test pair of every task gets `num_aug` augmented views (plus the original); each view's prediction is the
augmented true output, or a corrupted copy, an unrelated grid, or an empty canvas, with a random q_halt logit.
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
        p_task = p_correct if pred_rng.random() < solvable else 0.0
        for v, (tid, colours) in enumerate(views):
            identifiers.append(task if v == 0 else f"{task}|||t{tid}|||{''.join(map(str, colours))}")
            pid = len(identifiers) - 1
            for pair in puzzle["test"]:
                x = DIHEDRAL[tid](colours[np.array(pair["input"], dtype=np.uint8)]).astype(np.uint8)
                y = DIHEDRAL[tid](colours[np.array(pair["output"], dtype=np.uint8)]).astype(np.uint8)
                inputs.append(encode(x))
                preds.append(_prediction(y, pred_rng, p_task, p_corrupt, p_empty))
                ids.append(pid)
    return SyntheticPredictions(
        inputs=np.stack(inputs),
        preds=np.stack(preds),
        puzzle_identifiers=np.array(ids, dtype=np.int32),
        q_halt_logits=pred_rng.normal(0, 3, len(ids)).astype(np.float32),
        identifiers=identifiers,
    )


def _prediction(label: np.ndarray, rng: np.random.Generator, p_correct: float, p_corrupt: float, p_empty: float):
    u = rng.random()
    if u < p_correct:
        return encode(label)
    if u < p_correct + p_corrupt:
        wrong = label.copy()
        r, c = rng.integers(wrong.shape[0]), rng.integers(wrong.shape[1])
        wrong[r, c] = (wrong[r, c] + 1 + rng.integers(2)) % 10  # few distinct corruptions: votes collide
        return encode(wrong)
    if u < p_correct + p_corrupt + p_empty:
        return np.zeros(SEQ_LEN, dtype=np.uint8)
    # an unrelated grid; sometimes an irregular canvas with stray colours past its EOS border
    shape = rng.integers(1, CANVAS + 1, 2)
    canvas = encode(rng.integers(0, 10, shape).astype(np.uint8))
    if rng.random() < 0.3:
        canvas = rng.integers(0, 12, SEQ_LEN).astype(np.uint8)
    return canvas
