#!/usr/bin/env python3
"""What the follower pods of a multi-node ICE job run: the job's multi-node shell commands, in execution order.

    <the jobscript's python> follower_plan.py SNAKEMAKE_ARGS...    print a JSON list, one entry per multi-node job

submit.py calls this in the driver, at submit time, with the Snakemake arguments of the jobscript (what pod 0 of the
Indexed Job runs). It adds `--dry-run`, so Snakemake builds the same jobs from the same workflow, config, wildcards,
params and resources as pod 0 will, and formats each job's shell command, but runs and deletes nothing. The commands
are read from Snakemake's JOB_INFO log events (the documented interface of logger plugins), not from its text output.

Each entry: {"rule", "jobid", "wildcards", "input", "output", "log", "threads", "tmpdir", "nodes", "shellcmd"},
ordered so that every job comes after the jobs of this group that make its inputs. A group whose multi-node jobs
could run in more than one order is refused: pod 0's Snakemake and the followers must start the same torchrun
rendezvous together.
Runs under the Python that the jobscript names (it has Snakemake); stdlib otherwise.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from typing import Any

ANNOTATION = re.compile(r" \([^()]*\)$")  # Snakemake's " (pipe)", " (retrieve from storage)", ... after a file


def plan(snakemake_args: list[str]) -> list[dict[str, Any]]:
    """The multi-node jobs of the jobscript's target jobs, in the order pod 0's Snakemake runs them."""
    from snakemake.cli import main as snakemake_main
    from snakemake.logging import logger
    from snakemake_interface_logger_plugins.common import LogEvent

    records: list[logging.LogRecord] = []

    def capture(record: logging.LogRecord) -> bool:
        if getattr(record, "event", None) == LogEvent.JOB_INFO:
            records.append(record)
        return True  # a logger filter: Snakemake's own handlers still get every record

    logger.addFilter(capture)  # on the logger, not a handler: Snakemake replaces the handlers when it sets up
    try:
        snakemake_main([*snakemake_args, "--dry-run"])
    except SystemExit as done:
        if done.code:
            raise SystemExit(f"follower_plan.py: the dry run of the job failed (exit {done.code}); see above") from None
    finally:
        logger.removeFilter(capture)
    jobs = [_job(record) for record in records]
    return _in_order([job for job in jobs if job["nodes"] > 1])


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__, file=sys.stderr)
        return 2
    out = os.fdopen(os.dup(1), "w")  # the plan goes to the real stdout, everything Snakemake prints to stderr
    sys.stdout.flush()
    os.dup2(2, 1)
    with out:
        out.write(json.dumps(plan(argv)) + "\n")
    return 0


def _job(record: logging.LogRecord) -> dict[str, Any]:
    resources = dict(record.resources.items())
    try:
        nodes = int(resources.get("nodes") or 1)
    except ValueError:
        raise SystemExit(
            f"follower_plan.py: rule {record.rule_name}: resources.nodes must come from wildcards or "
            f"config, not from input files (got {resources.get('nodes')!r})"
        ) from None
    shellcmd = record.shellcmd or ""
    if nodes > 1 and (not shellcmd or "<TBD>" in shellcmd):
        # followers run the rule's shell command: a script/run rule has none, and a resource sized from the
        # job's inputs (<TBD> before they exist) is only known to pod 0
        raise SystemExit(
            f"follower_plan.py: rule {record.rule_name} has nodes={nodes} but no shell command fixed before it runs "
            f"({shellcmd!r}); a multi-node rule needs a `shell:` sized from wildcards or config"
        )
    return {
        "rule": record.rule_name,
        "jobid": record.jobid,
        "wildcards": dict(record.wildcards or {}),
        "input": [ANNOTATION.sub("", f) for f in record.input],
        "output": [ANNOTATION.sub("", f) for f in record.output],
        "log": [ANNOTATION.sub("", f) for f in record.log],
        "threads": int(record.threads),
        "tmpdir": resources.get("tmpdir"),
        "nodes": nodes,
        "shellcmd": shellcmd,
    }


def _in_order(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # Kahn's algorithm over "makes an input of"; the order must be unique (a chain), see the module docstring
    makers = {path: job["jobid"] for job in jobs for path in job["output"]}
    needs = {job["jobid"]: {makers[p] for p in job["input"] if p in makers} - {job["jobid"]} for job in jobs}
    by_id = {job["jobid"]: job for job in jobs}
    ordered: list[dict[str, Any]] = []
    while needs:
        ready = sorted((jobid for jobid, deps in needs.items() if not deps), key=str)
        if len(ready) != 1:
            names = ", ".join(sorted(f"{by_id[j]['rule']} {by_id[j]['wildcards']}" for j in (ready or needs)))
            raise SystemExit(
                f"follower_plan.py: multi-node jobs {names} of one group could run in any order or at once; "
                "put each in a group of its own or chain them through their files"
            )
        ordered.append(by_id[ready[0]])
        del needs[ready[0]]
        for deps in needs.values():
            deps.discard(ready[0])
    return ordered


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
