"""`runs.<run>.gate`: the shipped recipe validates; each mistake is one line naming the field and the fix; a gate
changes neither the run's resolved training config nor its hash."""

import copy
from pathlib import Path

import pytest
import yaml

from arcpipe.config import ArcpipeError, GateConfig, config_hash, training_changes, validate_config

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = yaml.safe_load((ROOT / "config/config.yaml").read_text())


def _with_gates(**gates):
    """The shipped config with `gate` set on the named runs (None removes it)."""
    raw = copy.deepcopy(SHIPPED)
    for run, gate in gates.items():
        raw["runs"][run]["gate"] = gate
    return raw


def _problems(raw) -> list[str]:
    with pytest.raises(ArcpipeError) as err:
        validate_config(raw, source="config.yaml")
    return str(err.value).splitlines()


def test_the_shipped_recipe_gates_urm_arc1_on_5_percent_of_its_epochs():
    cfg = validate_config(SHIPPED)
    full, validation = cfg.runs["urm-arc1"], cfg.runs["urm-arc1-validate"]
    assert full.gate == GateConfig(run="urm-arc1-validate", metric="pass@1", min=0.05)
    assert validation.epochs * 20 == full.epochs and validation.target == full.target == "full"
    assert validation.gate is None
    # the same recipe: only the length (and so the jobs it is cut into) differs
    same = {"epochs", "segment_evals", "gate"}
    assert validation.model_dump(exclude=same) == full.model_dump(exclude=same)


def test_a_named_epoch_of_the_gate_run_is_accepted():
    gate = {"run": "urm-arc1-validate", "metric": "pass@2", "min": 0, "epoch": 4000}
    assert validate_config(_with_gates(**{"urm-arc1": gate})).runs["urm-arc1"].gate.epoch == 4000


GATE = {"run": "urm-arc1-validate", "metric": "pass@1", "min": 0.05}


@pytest.mark.parametrize(
    ("changes", "line"),
    [
        (
            {"run": "urm-arc1"},
            "config.yaml: runs.urm-arc1.gate.run='urm-arc1': a run cannot gate itself; name another run",
        ),
        ({"run": "urm-arc9"}, "config.yaml: runs.urm-arc1.gate.run='urm-arc9' is not a run (runs: hrm-arc1, "),
        (
            {"metric": "pass@3"},
            "config.yaml: runs.urm-arc1.gate.metric='pass@3': evaluation.pass_ks does not compute it; use one of "
            "pass@1, pass@2, pass@5, pass@10, pass@100, pass@1000 or cell_accuracy",
        ),
        (
            {"metric": "accuracy"},
            "config.yaml: runs.urm-arc1.gate.metric='accuracy': not a pass@K or cell_accuracy; name it as "
            "metrics.json does, e.g. pass@1",
        ),
        ({"min": 5}, "config.yaml: runs.urm-arc1.gate.min=5: Input should be less than or equal to 1"),
        ({"min": -0.1}, "config.yaml: runs.urm-arc1.gate.min=-0.1: Input should be greater than or equal to 0"),
        (
            {"epoch": 3000},
            "config.yaml: runs.urm-arc1.gate.epoch=3000 is not a checkpoint of run urm-arc1-validate (multiples of "
            "eval_interval=2000 up to epochs=10000); pick one, or remove epoch for its last",
        ),
        ({"threshold": 0.05}, "config.yaml: runs.urm-arc1.gate.threshold=0.05: unknown key"),
    ],
)
def test_a_gate_mistake_is_one_line_naming_the_field_and_the_fix(changes, line):
    problems = _problems(_with_gates(**{"urm-arc1": {**GATE, **changes}}))
    assert len(problems) == 1, problems
    assert problems[0].startswith(line)


def test_a_missing_gate_field_is_named():
    gate = {key: value for key, value in GATE.items() if key != "min"}
    assert _problems(_with_gates(**{"urm-arc1": gate})) == ["config.yaml: runs.urm-arc1.gate.min: Field required"]


def test_a_cycle_of_gates_is_one_line_naming_every_run_in_it():
    raw = _with_gates(
        **{
            "urm-arc1-validate": {**GATE, "run": "trm-arc1"},
            "trm-arc1": {**GATE, "run": "urm-arc1"},
        }
    )
    assert _problems(raw) == [
        "config.yaml: runs.trm-arc1.gate: gates form a cycle (trm-arc1 -> urm-arc1 -> urm-arc1-validate -> "
        "trm-arc1), so none of these runs would ever train; remove one of the gates"
    ]


def test_a_chain_of_gates_is_allowed():
    cfg = validate_config(_with_gates(**{"urm-arc1-validate": {**GATE, "run": "trm-arc1"}}))
    assert cfg.runs["urm-arc1-validate"].gate.run == "trm-arc1" and cfg.runs["urm-arc1"].gate.run == GATE["run"]


def test_a_gate_is_not_a_training_field():
    gated = validate_config(SHIPPED).runs["urm-arc1"]
    plain = validate_config(_with_gates(**{"urm-arc1": None})).runs["urm-arc1"]
    assert "gate" not in plain.model_dump(mode="json")  # runs without a gate dump (and hash) as before gates existed
    assert training_changes(plain.model_dump(mode="json"), gated.model_dump(mode="json")) == []
    # the run's resolved config (arcpipe.rule_inputs: run_config) leaves the gate out: it names another run
    assert config_hash(plain) == config_hash(gated.model_copy(update={"gate": None}))


def test_a_gate_across_targets_is_refused():
    assert _problems(_with_gates(**{"smoke-trm": {**GATE}})) == [
        "config.yaml: runs.smoke-trm.gate.run='urm-arc1-validate' is a full run and smoke-trm a smoke run: "
        "`snakemake smoke` would train urm-arc1-validate to check the gate; gate on a smoke run"
    ]


@pytest.mark.parametrize(
    ("fields", "line"),
    [
        (
            {"epochs": 4, "segment_evals": 2, "stop": {"target": 0.1}},
            "config.yaml: runs.smoke-trm.stop: the run trains in one segment (segment_evals=2 of its 2 checkpoints), "
            "so no boundary is left to stop at; lower segment_evals or remove the stop rule",
        ),
        (
            {"epochs": 8, "stop": {"patience": 1, "min_epoch": 8}},
            "config.yaml: runs.smoke-trm.stop.min_epoch=8 is after the run's last decision (epoch 6: the last "
            "segment end but one), so the rule never fires; lower it",
        ),
    ],
)
def test_a_stop_rule_that_cannot_fire_is_refused(fields, line):
    raw = copy.deepcopy(SHIPPED)
    raw["runs"]["smoke-trm"].update(fields)
    assert _problems(raw) == [line]


def test_stop_target_0_means_any_score_above_0():
    from arcpipe.stopping import Score, decide

    raw = copy.deepcopy(SHIPPED)
    raw["runs"]["smoke-trm"].update({"epochs": 8, "stop": {"target": 0.0}})
    rule = validate_config(raw).runs["smoke-trm"].stop
    flat = decide([Score(2, 0.0, "t")], rule, [2, 4, 6, 8])
    learned = decide([Score(2, 0.0, "t"), Score(4, 0.01, "t")], rule, [2, 4, 6, 8])
    assert not flat.stop and learned.stop and "0.010 on t at epoch 4 > target 0" in learned.reason


def test_a_patience_rule_on_few_held_out_tasks_is_warned_about(caplog):
    raw = copy.deepcopy(SHIPPED)
    raw["runs"]["smoke-trm"].update({"epochs": 8, "stop": {"patience": 3}})
    raw.setdefault("evaluation", {})["selection_tasks"] = 2
    validate_config(raw)
    assert any(
        "runs.smoke-trm.stop: patience reads pass@2 on evaluation.selection_tasks=2 held-out tasks, a score in steps "
        "of 50%" in r.getMessage()
        for r in caplog.records
    )
    caplog.clear()
    raw["evaluation"]["selection_tasks"] = 10
    validate_config(raw)
    assert not [r for r in caplog.records if "patience reads" in r.getMessage()]
