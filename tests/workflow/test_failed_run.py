"""A failed `snakemake smoke` ends on the failing job's own error line and its log, not only Snakemake's traceback.

The smoke dataset's source is an empty directory: the config is valid, the plan is made, and build_dataset, the
first job that reads the source, fails in seconds. With `--quiet rules` Snakemake leaves its "Error in rule" blocks
out of its own log, and the lines must still come (arcpipe.outcome reads the failed jobs from the scheduler).
The success case reads the smoke run's output in test_smoke.py; the parsing and formatting: tests/unit/test_outcome.py.
"""

from __future__ import annotations

import pytest
from scratch import snakemake

EMPTY_SOURCE = {"datasets": {"smoke": {"sources": [{"directory": "empty", "subset": "evaluation"}]}}}
BUILD_ERROR = "arcpipe: error: empty: no *.json task files (directory source, subset 'evaluation')"


@pytest.mark.parametrize("quiet", [[], ["--quiet", "rules"]], ids=["default", "quiet"])
def test_a_failed_job_is_named_with_its_own_error_line_and_log(tmp_path, quiet):
    (tmp_path / "empty").mkdir()
    proc = snakemake(tmp_path, EMPTY_SOURCE, "smoke", *quiet, name="empty-source.yaml")
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if line.startswith("arcpipe:")]
    assert lines == [
        "arcpipe: 1 job failed:",
        f"arcpipe:   build_dataset: {BUILD_ERROR}",
        "arcpipe:     log: logs/build_dataset/smoke.log",
    ], proc.stderr[-3000:]
    assert BUILD_ERROR in (tmp_path / "logs/build_dataset/smoke.log").read_text()
