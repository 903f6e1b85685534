"""`evaluation.ensemble_last: K`: below 1, or more than a run's checkpoints, is a one-line config error."""

import copy
from pathlib import Path

import pytest
import yaml

from arcpipe.config import ArcpipeError, validate_config

ROOT = Path(__file__).resolve().parents[1].parent
SHIPPED = yaml.safe_load((ROOT / "config/config.yaml").read_text())


def _with_ensemble(k):
    raw = copy.deepcopy(SHIPPED)
    raw.setdefault("evaluation", {})["ensemble_last"] = k
    return raw


def test_ensemble_last_is_off_by_default_and_takes_up_to_every_checkpoint():
    assert validate_config(SHIPPED).evaluation.ensemble_last is None
    assert validate_config(_with_ensemble(2)).evaluation.ensemble_last == 2  # smoke-trm: 4 epochs, every 2


@pytest.mark.parametrize(
    ("k", "message"),
    [
        (0, "config: evaluation.ensemble_last=0: Input should be greater than or equal to 1"),
        (-1, "config: evaluation.ensemble_last=-1: Input should be greater than or equal to 1"),
        (
            3,
            "config: evaluation.ensemble_last=3 is more than the checkpoints of run smoke-trm (2), smoke-varc (2), "
            "smoke-loopvit (2) (epochs / eval_interval); lower ensemble_last",
        ),
    ],
)
def test_a_bad_ensemble_size_is_one_line_naming_the_field(k, message):
    with pytest.raises(ArcpipeError) as err:
        validate_config(_with_ensemble(k))
    assert str(err.value) == message


def test_every_run_with_too_few_checkpoints_is_named_on_the_one_line():
    raw = _with_ensemble(11)
    with pytest.raises(ArcpipeError) as err:
        validate_config(raw)
    assert str(err.value).count("\n") == 0
    # every shipped run with fewer than 11 checkpoints, in the config's order, with its count
    runs = raw["runs"]
    short = [
        f"{n} ({r['epochs'] // r['eval_interval']})" for n, r in runs.items() if r["epochs"] // r["eval_interval"] < 11
    ]
    assert len(short) >= 4 and f"run {', '.join(short)} (epochs" in str(err.value)
