"""The driver's cancelling of the cluster jobs Snakemake missed after a failure or Ctrl-C (arcpipe.driver)."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest

from arcpipe.driver import LEDGER, RECORD, cancel_leftovers, identity


def _driver(workdir: Path, pid: int, cancel: str | None, started: float) -> None:
    (workdir / RECORD).parent.mkdir(parents=True, exist_ok=True)
    record = {**identity(), "pid": pid, "started": started, "executor": "cluster-generic", "cancel": cancel}
    (workdir / RECORD).write_text(json.dumps(record | {"status": "status.py"}))


@pytest.fixture
def recording_cancel(tmp_path: Path) -> tuple[str, Path]:
    """A cancel command that writes its arguments, one per line, and returns."""
    out = tmp_path / "cancelled.txt"
    script = tmp_path / "cancel.sh"
    script.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" >> {out}\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script), out


def test_only_the_jobs_not_seen_to_end_are_cancelled(tmp_path: Path, recording_cancel) -> None:
    cancel, out = recording_cancel
    now = time.time()
    _driver(tmp_path, os.getpid(), cancel, started=now - 100)
    (tmp_path / LEDGER).write_text(
        f"{now - 500:.3f} arcpipe/smk-older-driver\n"  # an earlier driver's Job: not this run's
        f"{now - 90:.3f} arcpipe/smk-a\n"
        f"{now - 80:.3f} arcpipe/smk-b\n"
        f"{now - 70:.3f} arcpipe/smk-c\n"
        f"{now - 20:.3f} arcpipe/smk-b success\n"
        "17643\x00\x00 arcpipe/smk-d\n"  # a line a crash garbled: its Job counts as this run's, not as an error
    )
    line = cancel_leftovers(tmp_path)
    assert out.read_text().split() == ["arcpipe/smk-a", "arcpipe/smk-c", "arcpipe/smk-d"]
    assert line is not None and "3 cluster-generic job(s)" in line and line.endswith("arcpipe/smk-c, arcpipe/smk-d")


def test_nothing_is_cancelled_when_every_job_ended_or_by_another_process(tmp_path: Path, recording_cancel) -> None:
    cancel, out = recording_cancel
    now = time.time()
    (tmp_path / ".snakemake").mkdir()
    (tmp_path / LEDGER).write_text(f"{now - 50:.3f} arcpipe/smk-a\n{now - 10:.3f} arcpipe/smk-a failed\n")
    _driver(tmp_path, os.getpid(), cancel, started=now - 100)
    assert cancel_leftovers(tmp_path) is None  # the failure was seen: a run that failed waited for its jobs
    (tmp_path / LEDGER).write_text(f"{now - 50:.3f} arcpipe/smk-a\n")
    _driver(tmp_path, os.getpid() + 1, cancel, started=now - 100)
    assert cancel_leftovers(tmp_path) is None  # a job's own Snakemake, or a dry run: not the driver
    assert not out.exists()


@pytest.mark.parametrize(
    ("argv", "drives"),
    [
        (["--cores", "2", "smoke"], True),
        (["--profile", "profiles/ice", "full"], True),
        (["-n", "full"], False),
        (["-pn", "full"], False),
        (["--dry-run", "smoke"], False),
        (["full", "--dag"], False),
        (["--notemp", "smoke"], True),  # a long flag with an n in it is not -n
    ],
)
def test_only_a_call_that_runs_jobs_drives(argv: list[str], drives: bool) -> None:
    from arcpipe.hooks import driving

    assert driving(argv) is drives
