"""What several test modules read, made once per pytest session however many xdist workers there are.

tests/run.sh hands whole files to three pytest-xdist workers, so two modules that read the same session fixture may
run in two processes, each of which would make it. `once_per_session` makes it in the first worker that asks, under
a file lock in the session's own temporary directory (the parent of every worker's basetemp), and records what it
returns as JSON; a worker that asks later reads the record, or waits on the lock while it is being made. What it
made stays where the first worker made it: read only (copy it before changing anything). Test files import it as
`from once import once_per_session` (tests/conftest.py's folder is on sys.path).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from filelock import FileLock


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
