"""arcpipe.shim.logged: what a workflow script's failure leaves in its rule's log."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from arcpipe.config import ArcpipeError
from arcpipe.shim import logged


def test_a_bug_leaves_its_traceback_in_the_log_and_still_fails(tmp_path: Path) -> None:
    # the traceback Python prints at exit goes to the real stderr, after the redirect: the rule's log stayed empty
    # and the failure summary said "no error line in its log" (a report crash in the staged rehearsal)
    log = tmp_path / "logs" / "step.log"
    with pytest.raises(ValueError, match="Encountered all NA values"), logged(SimpleNamespace(log=[str(log)])):
        print("started")
        raise ValueError("Encountered all NA values")
    text = log.read_text()
    assert text.startswith("started\n")
    assert "Traceback (most recent call last)" in text
    assert text.rstrip().endswith("ValueError: Encountered all NA values")


def test_a_known_error_is_one_line_and_exit_status_2(tmp_path: Path) -> None:
    log = tmp_path / "step.log"
    with pytest.raises(SystemExit) as exit_info, logged(SimpleNamespace(log=[str(log)])):
        raise ArcpipeError("runs.x.lr: must be positive; set it above 0")
    assert exit_info.value.code == 2
    assert log.read_text() == "arcpipe: error: runs.x.lr: must be positive; set it above 0\n"
