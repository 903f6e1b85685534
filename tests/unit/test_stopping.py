"""Stop rules and the quick/full evaluation schedule on hand-made histories (arcpipe.stopping, config/stop.py)."""

import copy
import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from pydantic import ValidationError

from arcpipe.config import (
    ArcpipeError,
    QuickEvalConfig,
    RunConfig,
    StopConfig,
    config_hash,
    stop_problems,
    training_changes,
    validate_config,
)
from arcpipe.report.selection import held_out_tasks
from arcpipe.stopping import (
    Score,
    boundary_score,
    decide,
    decision_record,
    full_evaluation_due,
    quick_full_gap,
    read_history,
    saved_gpu_hours,
    write_decision,
)

BOUNDARIES = [2, 4, 6, 8]
SHIPPED = Path(__file__).resolve().parents[2] / "config/config.yaml"


def _history(*values: float, tasks: str = "2 held-out selection tasks") -> list[Score]:
    return [Score(2 * (i + 1), value, tasks) for i, value in enumerate(values)]


def _decisions(rule: StopConfig, values: list[float], boundaries=BOUNDARIES) -> list[bool]:
    history = [Score(e, v, "t") for e, v in zip(boundaries, values, strict=False)]
    return [decide(history[: i + 1], rule, boundaries).stop for i in range(len(history))]


def test_target_reached_at_the_second_of_four_boundaries_stops_there():
    rule = StopConfig(metric="pass@2", target=0.45)
    decision = decide(_history(0.2, 0.5), rule, BOUNDARIES)
    assert decision.stop and decision.fired == "target" and decision.epoch == 4
    assert decision.skipped_epochs == 4 and decision.planned_epochs == 8
    assert decision.reason == (
        "stop at epoch 4 of 8: pass@2 = 0.500 on 2 held-out selection tasks at epoch 4 >= target 0.45"
    )
    assert not decide(_history(0.2), rule, BOUNDARIES).stop


def test_plateau_fires_after_patience_evaluations_without_a_gain():
    rule = StopConfig(patience=3)
    boundaries = [2, 4, 6, 8, 10, 12]
    assert _decisions(rule, [0.1, 0.3, 0.3, 0.2, 0.25], boundaries) == [False, False, False, False, True]
    decision = decide(_history(0.1, 0.3, 0.3, 0.2, 0.25), rule, boundaries)
    assert decision.fired == "patience" and (decision.best_epoch, decision.best_value) == (4, 0.3)
    assert "3 evaluation(s) without a gain above min_delta 0 over the best, 0.300 at epoch 4 (patience 3)" in (
        decision.reason
    )


def test_a_gain_below_min_delta_does_not_reset_the_patience():
    rule = StopConfig(patience=2, min_delta=0.05)
    # 0.14 and 0.13 rise less than 0.05 above the best (0.1 at epoch 1): two evaluations without a gain
    assert _decisions(rule, [0.1, 0.14, 0.13], [1, 2, 3, 4]) == [False, False, True]
    # 0.18 is 0.08 above the best: a gain, measured from the best, not from the evaluation before
    assert _decisions(rule, [0.1, 0.14, 0.18, 0.2], [1, 2, 3, 4, 5]) == [False] * 4


def test_min_delta_one_with_patience_one_fires_at_the_second_boundary():
    # pass@K cannot rise by more than 1: the rule the workflow test uses because its outcome is known on CPU
    assert _decisions(StopConfig(patience=1, min_delta=1.0), [0.0, 0.0, 1.0, 1.0]) == [False, True, True, False]


def test_raising_the_patience_continues_where_the_lower_one_stopped():
    values = [0.0, 0.0, 0.0, 0.0]
    assert _decisions(StopConfig(patience=1, min_delta=1.0), values)[1]
    assert _decisions(StopConfig(patience=5, min_delta=1.0), values) == [False] * 4


def test_no_rule_fires_before_min_epoch_a_flat_start_is_not_a_plateau():
    # nothing learned yet (pass@2 0 at the first boundaries) is not a plateau: min_epoch holds the patience off
    rule = StopConfig(patience=1, min_epoch=6)
    boundaries = [2, 4, 6, 8, 10]
    assert _decisions(rule, [0.0, 0.0, 0.0, 0.0], boundaries) == [False, False, True, True]
    assert _decisions(StopConfig(target=0.1, min_epoch=4), [0.5, 0.5], boundaries) == [False, True]
    held = decide([Score(2, 0.0, "t"), Score(4, 0.0, "t")], rule, boundaries)
    assert not held.stop and held.reason.endswith("no stop before min_epoch 6")


def test_either_rule_fires_first_and_the_last_boundary_never_stops():
    both = StopConfig(target=0.9, patience=1)
    assert decide(_history(0.5, 0.4), both, BOUNDARIES).fired == "patience"
    assert decide(_history(0.5, 0.95), both, BOUNDARIES).fired == "target"
    last = decide(_history(0.1, 0.1, 0.1, 0.95), both, BOUNDARIES)
    assert not last.stop and last.skipped_epochs == 0 and "the planned last epoch" in last.reason


def test_continue_says_how_much_patience_is_left():
    decision = decide(_history(0.3, 0.2), StopConfig(patience=3), BOUNDARIES)
    assert decision.reason == (
        "continue: pass@2 = 0.200 on 2 held-out selection tasks at epoch 4; best 0.300 at epoch 2; "
        "1 of patience 3 without a gain"
    )


def _per_puzzle(values: dict[str, list[int]]) -> pd.DataFrame:
    rows = [{"puzzle": p, "pass@1": v, "pass@2": v} for p, vs in values.items() for v in vs]
    return pd.DataFrame(rows)


def test_score_is_on_the_held_out_selection_tasks_as_the_report_draws_them():
    per_puzzle = _per_puzzle({"a": [1], "b": [0, 1], "c": [0], "d": [1], "e": [0]})
    held = held_out_tasks(["a", "b", "c", "d", "e"], 2, seed=7)
    expected = sum({"a": 1, "b": 0.5, "c": 0, "d": 1, "e": 0}[t] for t in held) / 2
    score = boundary_score(per_puzzle, epoch=4, metric="pass@2", selection_tasks=2, seed=7)
    assert score == Score(4, expected, "2 held-out selection tasks")


def test_without_selection_tasks_the_score_falls_back_to_the_test_tasks_and_says_so():
    per_puzzle = _per_puzzle({"a": [1], "b": [0, 1], "c": [0], "d": [1]})
    score = boundary_score(per_puzzle, epoch=2, metric="pass@2", selection_tasks=0, seed=0)
    assert score.fallback and score.value == pytest.approx(0.625)
    assert score.tasks.startswith("all 4 test tasks (fall-back: evaluation.selection_tasks is 0")
    decision = decide([score], StopConfig(target=0.5), [2, 4])
    assert decision.stop and decision.fallback and "fall-back" in decision.reason


def test_a_metric_the_evaluation_did_not_compute_names_the_fix():
    with pytest.raises(ArcpipeError, match=r"no pass@10 \(it has pass@1, pass@2\)"):
        boundary_score(_per_puzzle({"a": [1]}), epoch=2, metric="pass@10", selection_tasks=0, seed=0)
    assert stop_problems({"r": StopConfig(metric="pass@10", patience=1), "s": None}, [1, 2]) == [
        "runs.r.stop.metric='pass@10': evaluation.pass_ks does not compute it; use one of pass@1, pass@2 or "
        "cell_accuracy"
    ]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"metric": "pass@2"}, "sets neither target nor patience"),
        ({"metric": "top2", "patience": 1}, "not a pass@K"),
        ({"target": 1.5}, "less than or equal to 1"),
        ({"patience": 0}, "greater than 0"),
    ],
)
def test_stop_config_errors(fields, message):
    with pytest.raises(ValidationError, match=message):
        StopConfig(**fields)


def test_record_round_trips_the_history_and_the_saved_gpu_hours(tmp_path):
    rule = StopConfig(target=0.45)
    decision = decide(_history(0.2, 0.5), rule, BOUNDARIES)
    path = tmp_path / "epoch_4.json"
    write_decision(path, decision_record(decision, "smoke-trm", rule))
    record = json.loads(path.read_text())
    assert record["stop"] and record["epoch"] == 4 and record["skipped_epochs"] == 4
    assert record["rule"] == {"metric": "pass@2", "target": 0.45, "patience": None, "min_delta": 0.0, "min_epoch": None}
    assert read_history(record) == _history(0.2, 0.5)
    assert saved_gpu_hours(decision, gpu_hours_trained=3.0) == 3.0
    assert saved_gpu_hours(decide(_history(0.2), rule, BOUNDARIES), 3.0) == 0


def _full_schedule(quick_values: list[float], schedule: QuickEvalConfig, stop_at: int | None = None) -> list[int]:
    boundaries = [2 * (i + 1) for i in range(len(quick_values))]
    history = [Score(e, v, "quick", quick=True) for e, v in zip(boundaries, quick_values, strict=True)]
    return [
        e
        for i, e in enumerate(boundaries)
        if full_evaluation_due(history[: i + 1], e, boundaries, schedule, stops=e == stop_at)
    ]


def test_full_evaluation_at_best_quick_scores_the_last_boundary_and_every_nth():
    quick = [0.1, 0.1, 0.3, 0.2, 0.2, 0.4, 0.4, 0.3]  # 8 boundaries, epochs 2..16
    assert _full_schedule(quick, QuickEvalConfig()) == [2, 6, 12, 16]  # first, new bests (strictly), last
    assert _full_schedule(quick, QuickEvalConfig(full_every=3)) == [2, 6, 12, 16]  # 3rd and 6th: epochs 6, 12
    assert _full_schedule(quick, QuickEvalConfig(full_every=2)) == [2, 4, 6, 8, 12, 16]
    assert _full_schedule(quick, QuickEvalConfig(), stop_at=10) == [2, 6, 10, 12, 16]
    assert _full_schedule([0.0] * 8, QuickEvalConfig()) == [2, 16]  # a flat run: no full evaluation in between


def test_quick_subset_size_is_a_share_rounded_up_or_a_count():
    assert QuickEvalConfig().num_tasks(400) == 40
    assert QuickEvalConfig().num_tasks(3) == 1
    assert QuickEvalConfig(share=0.25).num_tasks(10) == 3
    assert QuickEvalConfig(puzzles=50).num_tasks(40) == 40


def test_a_run_takes_a_stop_rule_that_changes_nothing_it_trains():
    fields = {"dataset": "d", "arch": "trm", "preset": "tiny", "target": "smoke", "epochs": 8, "eval_interval": 2}
    plain, stopping = RunConfig(**fields), RunConfig(**fields, stop={"patience": 3, "min_delta": 0.01})
    assert stopping.stop == StopConfig(patience=3, min_delta=0.01)
    assert "stop" not in plain.model_dump()  # runs without a rule hash and compare as before
    assert config_hash(plain) == config_hash(RunConfig(**fields, stop=None))
    assert training_changes(plain.model_dump(mode="json"), stopping.model_dump(mode="json")) == []
    with pytest.raises(ValidationError, match="sets neither target nor patience"):
        RunConfig(**fields, stop={"metric": "pass@1"})


def test_a_stop_metric_the_evaluation_does_not_compute_is_refused_with_the_choices():
    raw = yaml.safe_load(SHIPPED.read_text())
    good = copy.deepcopy(raw)
    good["runs"]["smoke-trm"]["stop"] = {"metric": "pass@2", "patience": 2}
    assert validate_config(good).runs["smoke-trm"].stop.patience == 2
    raw["runs"]["smoke-trm"]["stop"] = {"metric": "pass@3", "patience": 2}
    with pytest.raises(ArcpipeError, match=r"runs.smoke-trm.stop.metric='pass@3': evaluation.pass_ks does not compute"):
        validate_config(raw, source="config.yaml")


def test_the_quick_to_full_gap_is_measured_on_checkpoints_with_both():
    pairs = [(2, 0.10, 0.05), (4, 0.20, 0.25), (8, 0.50, 0.40)]
    assert quick_full_gap(pairs) == (
        "quick vs full pass@2 on 3 checkpoint(s): mean |quick - full| 6.7 points, mean quick - full +3.3, "
        "largest +10.0 at epoch 8"
    )
    assert quick_full_gap([]) == "quick vs full pass@2: no checkpoint has both"
