"""The config schema: the shipped config validates; each mistake is rejected with the field and the fix."""

import copy
from pathlib import Path

import pytest
import yaml

from arcpipe.cli import main
from arcpipe.config import ArcpipeError, json_schema, load_config, validate_config

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = yaml.safe_load((ROOT / "config/config.yaml").read_text())


def _with_run(**changes):
    raw = copy.deepcopy(SHIPPED)
    raw["runs"]["smoke-trm"].update(changes)
    return raw


def test_shipped_config_validates_and_plans_segments():
    cfg = load_config(ROOT / "config/config.yaml")
    run = cfg.runs["smoke-trm"]
    assert run.boundaries() == [2, 4]
    assert cfg.runs["urm-arc1"].segment_ends()[:2] == [20000, 40000]
    assert set(cfg.runs_for("smoke")) == {"smoke-trm"}


def test_schema_file_is_generated_from_the_models():
    import json

    assert json.loads((ROOT / "config/schema.json").read_text()) == json_schema()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"epochs": 5, "eval_interval": 2}, "epochs=5 is not a multiple of eval_interval=2"),
        ({"segment_evals": 3}, "segment_evals=3 does not divide the 2 evaluations"),
        ({"global_batch_size": 30, "micro_batch_size": 4}, "global_batch_size=30 is not divisible"),
        ({"dataset": "nope"}, "runs.smoke-trm.dataset='nope' is not declared"),
        ({"epochs": 0}, "runs.smoke-trm.epochs: Input should be greater than 0"),
        ({"arch": "gpt"}, "runs.smoke-trm.arch"),
        ({"H_cycles": 3}, "runs.smoke-trm.H_cycles: unknown key"),
    ],
)
def test_config_mistakes_name_the_field(changes, message):
    with pytest.raises(ArcpipeError, match="^config: .*" + message.replace("(", r"\(").replace(")", r"\)")):
        validate_config(_with_run(**changes))


def test_unknown_top_level_and_dataset_keys_are_rejected():
    raw = copy.deepcopy(SHIPPED)
    raw["datasets"]["smoke"]["num_augs"] = 3
    raw["evalution"] = {}
    with pytest.raises(ArcpipeError) as err:
        validate_config(raw)
    assert "datasets.smoke.num_augs: unknown key" in str(err.value)
    assert "evalution: unknown key" in str(err.value)


def test_cli_reports_a_bad_config_in_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(_with_run(eval_interval=3)))
    assert main(["config", "check", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert err.startswith(f"arcpipe: error: {bad}: runs.smoke-trm: epochs=4 is not a multiple of eval_interval=3")
