"""`seeds: [...]` expands a run into one run per seed, `{run}-s{seed}`; every mistake in it is a config error."""

import copy
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from arcpipe import plan
from arcpipe.cli import main
from arcpipe.config import ArcpipeError, config_hash, training_changes, validate_config
from arcpipe.keep import config_drift
from arcpipe.rule_inputs import RuleInputs

ROOT = Path(__file__).resolve().parents[1].parent
SHIPPED = yaml.safe_load((ROOT / "config/config.yaml").read_text())


def _with_run(**changes):
    raw = copy.deepcopy(SHIPPED)
    raw["runs"]["smoke-trm"].update(changes)
    return raw


def _resolved(cfg, name):
    """What write_run_config is handed for run `name`: the workflow's own `run_config` (arcpipe.rule_inputs)."""
    return RuleInputs(cfg, plan.MemoryRecords({}, {}, {})).run_config(SimpleNamespace(run=name))


def test_seeds_expand_into_one_run_per_seed_in_place_of_the_run():
    cfg = validate_config(_with_run(seeds=[0, 2]))
    assert list(cfg.runs)[:3] == ["smoke-trm-s0", "smoke-trm-s2", "smoke-varc"]
    assert "smoke-trm" not in cfg.runs
    assert cfg.runs_for("smoke") == ["smoke-trm-s0", "smoke-trm-s2", "smoke-varc", "smoke-loopvit"]
    shipped = validate_config(SHIPPED).runs["smoke-trm"]
    for seed in (0, 2):
        run = cfg.runs[f"smoke-trm-s{seed}"]
        assert (run.seed, run.seed_group, run.seeds) == (seed, "smoke-trm", None)
        assert run.model_copy(update={"seed": 0, "seed_group": None}) == shipped


def test_a_run_with_seed_or_neither_is_unchanged():
    cfg = validate_config(_with_run(seed=3))
    run = cfg.runs["smoke-trm"]
    assert (run.seed, run.seed_group) == (3, None)
    dumped = run.model_dump(mode="json")
    assert "seeds" not in dumped and "seed_group" not in dumped  # so its config_hash is what it was before seeds
    assert validate_config(_resolved(cfg, "smoke-trm")).runs["smoke-trm"] == run
    assert validate_config(SHIPPED).runs["smoke-trm"].seed == 0


def test_an_expanded_runs_resolved_config_holds_its_seed_and_hashes_the_same():
    cfg = validate_config(_with_run(seeds=[0, 1]))
    resolved = _resolved(cfg, "smoke-trm-s1")
    assert resolved["runs"]["smoke-trm-s1"]["seed"] == 1
    assert resolved["runs"]["smoke-trm-s1"]["seed_group"] == "smoke-trm"
    assert "seeds" not in resolved["runs"]["smoke-trm-s1"]
    again = validate_config(yaml.safe_load(yaml.safe_dump(resolved))).runs["smoke-trm-s1"]  # the job's view
    assert again == cfg.runs["smoke-trm-s1"]
    assert config_hash(again) == config_hash(cfg.runs["smoke-trm-s1"])
    assert config_hash(cfg.runs["smoke-trm-s0"]) != config_hash(cfg.runs["smoke-trm-s1"])


def test_the_seed_group_is_not_a_training_change():
    run = validate_config(_with_run(seeds=[0])).runs["smoke-trm-s0"].model_dump(mode="json")
    assert training_changes({k: v for k, v in run.items() if k != "seed_group"}, run) == []
    assert training_changes({**run, "seed": 1}, run) == ["seed: 1 -> 0"]


def test_an_expanded_run_is_compared_with_its_own_saved_config(tmp_path):
    cfg = validate_config(_with_run(seeds=[0, 1]))
    for name in cfg.runs_for("smoke"):
        (tmp_path / "results/runs" / name / "ckpt").mkdir(parents=True)
        (tmp_path / "results/runs" / name / "ckpt/epoch_2.pt").write_bytes(b"trained")
        (tmp_path / "results/runs" / name / "config.yaml").write_text(yaml.safe_dump(_resolved(cfg, name)))
    assert config_drift(cfg, tmp_path) == []
    assert config_drift(validate_config(_with_run(seeds=[0, 1, 2])), tmp_path) == []  # one more seed
    changed = config_drift(validate_config(_with_run(seeds=[0, 1], lr=2e-3)), tmp_path)
    assert [line.split(":")[0] for line in changed] == ["runs.smoke-trm-s0", "runs.smoke-trm-s1"]
    assert all("lr: 0.001 -> 0.002" in line for line in changed)


SEED_MISTAKES = {
    "duplicate seeds": (
        {"seeds": [0, 1, 0]},
        "runs.smoke-trm.seeds=[0, 1, 0]: seed 0 is listed twice; list each seed once",
    ),
    "seed and seeds": (
        {"seeds": [0, 1], "seed": 3},
        "runs.smoke-trm: seed=3 and seeds=[0, 1] are both set; remove seed "
        "(seeds expands into one run per seed, grouped under smoke-trm)",
    ),
    "seed_group and seeds": (
        {"seeds": [0], "seed_group": "x"},
        "runs.smoke-trm: seed_group='x' and seeds=[0] are both set; remove seed_group",
    ),
    "empty seeds": ({"seeds": []}, "runs.smoke-trm.seeds: empty; list at least one seed, or remove seeds"),
    "not a list": ({"seeds": 3}, "runs.smoke-trm.seeds=3: Input should be a valid list"),
    "not an integer": ({"seeds": [0, "1"]}, "runs.smoke-trm.seeds.1='1': Input should be a valid integer"),
    "misspelt": ({"sedes": [0, 1]}, "runs.smoke-trm.sedes: unknown key; did you mean seeds?"),
}


@pytest.mark.parametrize("mistake", SEED_MISTAKES)
def test_a_seeds_mistake_is_one_line_naming_the_field(mistake):
    changes, message = SEED_MISTAKES[mistake]
    with pytest.raises(ArcpipeError) as err:
        validate_config(_with_run(**changes))
    assert len(str(err.value).splitlines()) == 1
    assert str(err.value).startswith(f"config: {message}")


def test_an_expanded_name_that_is_already_a_run_is_an_error():
    raw = _with_run(seeds=[0, 1])
    raw["runs"]["smoke-trm-s1"] = copy.deepcopy(SHIPPED["runs"]["smoke-trm"])
    with pytest.raises(ArcpipeError) as err:
        validate_config(raw)
    assert str(err.value).splitlines() == [
        "config: runs.smoke-trm.seeds: seed 1 makes run smoke-trm-s1, which is already declared under runs; "
        "rename one of them"
    ]


def test_config_check_prints_the_expanded_runs(tmp_path, capsys):
    path = tmp_path / "seeds.yaml"
    path.write_text(yaml.safe_dump(_with_run(seeds=[0, 1]), sort_keys=False))
    assert main(["config", "check", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("smoke-trm-s0: trm/tiny") and out[0].endswith(", seed 0 of seed group smoke-trm")
    assert out[1].startswith("smoke-trm-s1: ") and out[1].endswith(", seed 1 of seed group smoke-trm")
    runs = len(SHIPPED["runs"]) + 1  # smoke-trm became two runs
    assert out[-1] == f"{path}: ok ({len(SHIPPED['datasets'])} datasets, {runs} runs)"
