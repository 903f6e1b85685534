"""`sweeps:` expands a base run over a grid into ordinary runs named for their values; every mistake in a sweep is one
config error line, before any compute."""

import copy
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from arcpipe import plan
from arcpipe.cli import main
from arcpipe.config import ArcpipeError, config_hash, training_changes, validate_config
from arcpipe.config.sweeps import arm_name, spelling
from arcpipe.rule_inputs import RuleInputs

ROOT = Path(__file__).resolve().parents[1].parent
SHIPPED = yaml.safe_load((ROOT / "config/config.yaml").read_text())
DEPTH = {"base": "smoke-trm", "grid": {"arch_overrides.H_cycles": [1, 2], "ema": [True, False]}}


def _with_sweep(**sweeps):
    raw = copy.deepcopy(SHIPPED)
    raw["sweeps"] = copy.deepcopy(sweeps)
    return raw


def _resolved(cfg, name):
    """What write_run_config is handed for run `name`: the workflow's own `run_config` (arcpipe.rule_inputs)."""
    return RuleInputs(cfg, plan.MemoryRecords({}, {}, {})).run_config(SimpleNamespace(run=name))


def test_a_sweep_expands_into_one_run_per_combination_named_for_its_values():
    cfg = validate_config(_with_sweep(depth=DEPTH))
    arms = ["depth-H_cycles_1-ema_true", "depth-H_cycles_1-ema_false", "depth-H_cycles_2-ema_true"]
    assert cfg.arms_of("depth") == [*arms, "depth-H_cycles_2-ema_false"]
    assert list(cfg.runs)[: len(SHIPPED["runs"])] == list(SHIPPED["runs"])  # the base and every run stay as they were
    assert cfg.runs["smoke-trm"] == validate_config(SHIPPED).runs["smoke-trm"]
    run = cfg.runs["depth-H_cycles_2-ema_false"]
    assert (run.arch_overrides, run.ema, run.target, run.seed_group) == ({"H_cycles": 2}, False, "smoke", None)
    assert (run.sweep.name, run.sweep.arm) == ("depth", "depth-H_cycles_2-ema_false")
    assert run.sweep.values == {"arch_overrides.H_cycles": 2, "ema": False}
    assert cfg.reference_of("depth") == ["smoke-trm"]  # the base run: the ablation table's reference
    assert cfg.runs_for("sweep_depth") == ["smoke-trm", *cfg.arms_of("depth")]
    assert list(cfg.arm_seeds("depth")) == ["smoke-trm", *arms, "depth-H_cycles_2-ema_false"]
    assert set(cfg.arms_of("depth")) < set(cfg.runs_for("smoke"))  # arms keep the base's target
    assert cfg.targets == ["smoke", "full", "sweep_depth"]


def test_a_sweeps_seeds_expand_each_arm_as_runs_seeds_do():
    cfg = validate_config(_with_sweep(depth={**DEPTH, "seeds": [0, 1]}))
    assert cfg.arms_of("depth")[:3] == [
        "depth-H_cycles_1-ema_true-s0",
        "depth-H_cycles_1-ema_true-s1",
        "depth-H_cycles_1-ema_false-s0",
    ]
    run = cfg.runs["depth-H_cycles_1-ema_true-s1"]
    assert (run.seed, run.seed_group, run.sweep.arm) == (1, "depth-H_cycles_1-ema_true", "depth-H_cycles_1-ema_true")


def test_adding_a_value_adds_arms_and_changes_no_existing_arm():
    before = validate_config(_with_sweep(depth=DEPTH))
    grid = {"ema": [True, False], "arch_overrides.H_cycles": [3, 1, 2]}  # a new value first, the fields reordered
    after = validate_config(_with_sweep(depth={**DEPTH, "grid": grid}))
    assert set(before.arms_of("depth")) < set(after.arms_of("depth"))
    assert set(after.arms_of("depth")) - set(before.arms_of("depth")) == {
        "depth-H_cycles_3-ema_true",
        "depth-H_cycles_3-ema_false",
    }
    for arm in before.arms_of("depth"):  # same resolved config, so the same checkpoints: nothing retrains
        assert _resolved(after, arm) == _resolved(before, arm)


def test_how_a_value_is_written_in_yaml_changes_neither_the_arms_name_nor_its_config():
    spelt = [validate_config(_with_sweep(lr={"base": "smoke-trm", "grid": {"lr": [v]}})) for v in (1.0e-4, "1e-4")]
    assert spelt[0].arms_of("lr") == spelt[1].arms_of("lr") == ["lr-lr_0.0001"]
    assert config_hash(spelt[0].runs["lr-lr_0.0001"]) == config_hash(spelt[1].runs["lr-lr_0.0001"])


def test_an_arm_round_trips_through_its_resolved_config_and_its_tag_is_not_a_training_change():
    cfg = validate_config(_with_sweep(depth={**DEPTH, "seeds": [0]}))
    name = "depth-H_cycles_2-ema_true-s0"
    again = validate_config(yaml.safe_load(yaml.safe_dump(_resolved(cfg, name)))).runs[name]  # the job's view
    assert again == cfg.runs[name] and config_hash(again) == config_hash(cfg.runs[name])
    dumped = cfg.runs[name].model_dump(mode="json")
    assert training_changes({k: v for k, v in dumped.items() if k != "sweep"}, dumped) == []
    assert "sweep" not in validate_config(SHIPPED).runs["smoke-trm"].model_dump(mode="json")


@pytest.mark.parametrize(
    ("value", "spelt"),
    [(True, "true"), (None, "none"), (3, "3"), (3.0, "3"), (1e-4, "0.0001"), (3e-4, "0.0003"), (1e-5, "1e-5")]
    + [(2.5e20, "2.5e20"), (-0.5, "-0.5"), ("adamw", "adamw")],
)
def test_values_are_spelt_stably(value, spelt):
    assert spelling(value) == spelt


def test_an_arms_name_is_a_function_of_its_values_alone():
    assert arm_name("s", {"ema": True, "arch_overrides.H_cycles": 1}) == "s-H_cycles_1-ema_true"
    assert arm_name("s", {"arch_overrides.H_cycles": 1, "ema": True}) == "s-H_cycles_1-ema_true"
    assert arm_name("s", {"beta2": 0.95}) == "s-beta2_0.95"  # never beta20.95


SWEEP_MISTAKES = {
    "unknown field": (
        {"grid": {"arch_overrides.H_cycle": [1]}},
        "sweeps.depth.grid.arch_overrides.H_cycle: not a field of a run; did you mean arch_overrides.H_cycles?",
    ),
    "empty grid": ({"grid": {}}, "sweeps.depth.grid: empty; list at least one field and its values"),
    "empty values": (
        {"grid": {"ema": []}},
        "sweeps.depth.grid.ema: no values; list at least one, or remove the field",
    ),
    "refused value": (
        {"grid": {"arch_overrides.H_cycles": [1, 0]}},
        "sweeps.depth.grid.arch_overrides.H_cycles[1]=0: Input should be greater than 0",
    ),
    "refused run value": (
        {"grid": {"eval_interval": [2, 3]}},
        "sweeps.depth.grid.eval_interval[1]=3: epochs=4 is not a multiple of eval_interval=3",
    ),
    "undeclared dataset": (
        {"grid": {"dataset": ["smoke", "smok"]}},
        "sweeps.depth.grid.dataset[1]='smok' is not declared under datasets",
    ),
    "1 and 1.0": (
        {"grid": {"lr": [1, 1.0]}},
        "sweeps.depth.grid: lr=1 and lr=1.0 both make arm depth-lr_1; list each value once",
    ),
    "text that spells another arm": (
        {"grid": {"wandb_project": ["a-b", "x"], "preset": ["tiny"]}, "base": "smoke-trm"},
        None,  # no collision: each field keeps its own place in the name
    ),
    "base not a run": (
        {"base": "smoke-trn"},
        "sweeps.depth.base='smoke-trn' is not a run; did you mean smoke-trm?",
    ),
    "seed in the grid": (
        {"grid": {"seed": [0, 1]}},
        "sweeps.depth.grid.seed: not swept; list seeds under sweeps.depth.seeds instead",
    ),
    "a section as one value": (
        {"grid": {"ttt": [{"epochs": 1}]}},
        "sweeps.depth.grid.ttt[0]: not a plain value (a number, true/false, text or null); sweep the fields inside",
    ),
    "empty seeds": ({"seeds": []}, "sweeps.depth.seeds: empty; list at least one seed, or remove seeds"),
    "misspelt key": ({"seed": [0]}, "sweeps.depth.seed: unknown key; did you mean seeds?"),
}


@pytest.mark.parametrize("mistake", SWEEP_MISTAKES)
def test_a_sweep_mistake_is_one_line_naming_the_field(mistake):
    changes, message = SWEEP_MISTAKES[mistake]
    raw = _with_sweep(depth={**DEPTH, **changes})
    if message is None:
        validate_config(raw)
        return
    with pytest.raises(ArcpipeError) as err:
        validate_config(raw)
    assert len(str(err.value).splitlines()) == 1, str(err.value)
    assert str(err.value).startswith(f"config: {message}")


def test_text_values_that_spell_the_same_arm_are_an_error():
    raw = _with_sweep(depth={"base": "smoke-trm", "grid": {"dataset": ["smoke", "smoke-wandb_project_a"]}})
    raw["sweeps"]["depth"]["grid"]["wandb_project"] = ["a-wandb_project_b", "b"]
    raw["datasets"]["smoke-wandb_project_a"] = raw["datasets"]["smoke"]
    with pytest.raises(ArcpipeError) as err:
        validate_config(raw)
    assert str(err.value).splitlines() == [
        "config: sweeps.depth.grid: dataset='smoke', wandb_project='a-wandb_project_b' and "
        "dataset='smoke-wandb_project_a', wandb_project='b' both make arm "
        "depth-dataset_smoke-wandb_project_a-wandb_project_b; list each value once (1 and 1.0 are one value) and "
        "spell text values apart"
    ]


def test_an_arm_that_is_already_a_run_is_an_error():
    raw = _with_sweep(depth={"base": "smoke-trm", "grid": {"ema": [False]}})
    raw["runs"]["depth-ema_false"] = copy.deepcopy(SHIPPED["runs"]["smoke-trm"])
    with pytest.raises(ArcpipeError) as err:
        validate_config(raw)
    assert str(err.value).splitlines() == [
        "config: sweeps.depth: arm depth-ema_false (ema=False) is already a run under runs; rename the sweep or the run"
    ]


def test_a_base_that_is_not_a_valid_run_is_reported_once_at_the_run():
    raw = _with_sweep(depth=DEPTH)
    raw["runs"]["smoke-trm"]["epochs"] = 5
    with pytest.raises(ArcpipeError) as err:
        validate_config(raw)
    assert len(str(err.value).splitlines()) == 1 and str(err.value).startswith("config: runs.smoke-trm: epochs=5")


def test_config_check_forecasts_the_sweep_and_each_arm(tmp_path, capsys):
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(_with_sweep(depth={**DEPTH, "seeds": [0, 1]}), sort_keys=False))
    assert main(["config", "check", str(path), "--results", str(tmp_path / "results")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert any(line.endswith(", arm depth-H_cycles_1-ema_true of sweep depth") for line in out)
    first = out.index("  sweep depth (base smoke-trm): 4 arms x 2 seeds = 8 runs, 0.00 GPU-h, cost 0.00")
    assert out[first + 1] == "    depth-H_cycles_1-ema_true: 2 run(s), 0.00 GPU-h, cost 0.00"
    assert out[-1] == f"{path}: ok ({len(SHIPPED['datasets'])} datasets, {len(SHIPPED['runs']) + 8} runs, 1 sweeps)"


def _check(raw, tmp_path, capsys) -> list[str]:
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    assert main(["config", "check", str(path), "--results", str(tmp_path / "results")]) == 0
    return capsys.readouterr().out.splitlines()


def _gpu_hours(line: str) -> list[float]:
    """The GPU-hours of a forecast line: one number, or the two ends of a range."""
    amount = line.split(" GPU-h")[0].rsplit(" ", 1)[-1]
    return [float(x.replace(",", "")) for x in amount.split("-")]


def test_config_check_forecasts_a_halved_sweep_against_its_full_grid(tmp_path, capsys):
    halving = {"rungs": [20000], "eta": 2}
    lr = {"base": "trm-arc1", "grid": {"lr": [1e-5, 1e-4, 3e-4, 1e-3]}, "seeds": [0, 1], "halving": halving}
    out = _check(_with_sweep(lr=lr), tmp_path, capsys)
    grid = next(i for i, line in enumerate(out) if line.startswith("  sweep lr (base trm-arc1): 4 arms x 2 seeds"))
    line = out[grid + 1]
    # 4 arms x 2 seeds to epoch 20000, the best 2 to 100000: 8 x 20000 + 4 x 80000 run-epochs of 8 x 100000
    assert line.startswith(
        "    with halving (rungs 20000, eta 2): 480,000 of the full grid's 800,000 run-epochs (0.60x; arms: 4 to epoch "
        "20000, 2 to the end (100000)); "
    )
    # arms that cost alike: one number, the full grid's scaled by the run-epochs (evaluations every 10000 epochs)
    (halved,), (full,) = _gpu_hours(line), _gpu_hours(out[grid])
    assert halved == pytest.approx(0.6 * full, rel=0.01)
    # arms that cost differently (a swept depth): which arms go on decides, so a range, inside the full grid's bill
    depth = {"base": "trm-arc1", "grid": {"arch_overrides.H_cycles": [1, 2, 3, 4]}, "halving": halving}
    out = _check(_with_sweep(depth=depth), tmp_path, capsys)
    grid = next(i for i, line in enumerate(out) if line.startswith("  sweep depth"))
    (low, high), (full,) = _gpu_hours(out[grid + 1]), _gpu_hours(out[grid])
    assert low < high < full and out[grid + 1].endswith("(the cheapest or the costliest arms going on at every rung)")
