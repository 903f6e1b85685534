"""keep.config_drift and training_changes on configs written by an older arcpipe, which lack the fields added since:
a field missing from the saved config reads as its default, so upgrading arcpipe never reads as a changed run."""

from __future__ import annotations

from pathlib import Path

import yaml

from arcpipe.config import training_changes, validate_config
from arcpipe.keep import config_drift

ROOT = Path(__file__).resolve().parents[2]


def _trained(root: Path, cfg, name: str, drop_run: tuple[str, ...] = (), drop_data: tuple[str, ...] = ()) -> None:
    """A checkpoint of run `name` and its resolved config as an older arcpipe wrote it (without `drop_*` fields)."""
    run = cfg.runs[name]
    saved_run = {k: v for k, v in run.model_dump(mode="json").items() if k not in drop_run}
    saved_data = {k: v for k, v in cfg.datasets[run.dataset].model_dump(mode="json").items() if k not in drop_data}
    out = root / "results/runs" / name
    (out / "ckpt").mkdir(parents=True)
    (out / "ckpt/epoch_2.pt").write_bytes(b"weights")
    (out / "config.yaml").write_text(yaml.safe_dump({"runs": {name: saved_run}, "datasets": {run.dataset: saved_data}}))


def test_fields_added_since_a_checkpoint_read_as_their_defaults(tmp_path: Path) -> None:
    cfg = validate_config(yaml.safe_load((ROOT / "config/config.yaml").read_text()))
    _trained(tmp_path, cfg, "smoke-trm", drop_run=("grad_clip",), drop_data=("test_demos_in_train",))
    assert config_drift(cfg, tmp_path) == []  # smoke-trm clips nothing and keeps the test demonstrations: no change


def test_a_real_change_of_a_field_the_old_config_lacked_is_still_a_change(tmp_path: Path) -> None:
    raw = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    del raw["runs"]["smoke-varc"]  # its test-time training needs the test demonstrations in the train split
    _trained(tmp_path, validate_config(raw), "smoke-trm", drop_run=("grad_clip",), drop_data=("test_demos_in_train",))
    raw["runs"]["smoke-trm"]["grad_clip"] = 1.0
    raw["datasets"]["smoke"]["test_demos_in_train"] = False
    (line,) = config_drift(validate_config(raw), tmp_path)
    assert "grad_clip: None -> 1.0" in line and "datasets.smoke.test_demos_in_train: True -> False" in line
    run = validate_config(raw).runs["smoke-trm"].model_dump(mode="json")
    assert training_changes({k: v for k, v in run.items() if k != "grad_clip"}, run) == ["grad_clip: None -> 1.0"]
