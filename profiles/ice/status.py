#!/usr/bin/env python3
"""Print one of running|success|failed for NAMESPACE/NAME (the cluster-generic executor's status command).

    status.py arcpipe/smk-train-segment-trm-1f3a

Snakemake aborts the whole run when this exits non-zero, so it never does: any kubectl or API trouble
(timeouts, 5xx, a restarting API server) prints `running` and Snakemake asks again on its next poll. A Job that
no longer exists has failed (deleted by hand or by a cancel). Kueue's suspended Jobs are `running` (queued).
A Job seen ended is noted in the driver's ledger beside submit.py's lines, so that the driver, when it fails or is
interrupted, cancels only the Jobs that may still run (arcpipe.driver.cancel_leftovers).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path


def classify(job: dict) -> str:
    """success on the Complete condition, failed on Failed (incl. DeadlineExceeded), else running.

    SuccessCriteriaMet / FailureTarget are not final: pods may still be terminating, so wait for the real one.
    """
    for condition in job.get("status", {}).get("conditions") or []:
        if condition.get("status") != "True":
            continue
        if condition.get("type") == "Complete":
            return "success"
        if condition.get("type") == "Failed":
            return "failed"
    return "running"


def status(job_id: str) -> str:
    namespace, _, name = job_id.rpartition("/")
    argv = [os.environ.get("KUBECTL", "kubectl"), "get", "job", name, "-o", "json", "--request-timeout=20s"]
    if namespace:
        argv += ["-n", namespace]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as err:
        print(f"status.py: {job_id}: {err}; reporting running", file=sys.stderr)
        return "running"
    if out.returncode != 0:
        if "NotFound" in out.stderr:
            return "failed"
        print(f"status.py: {job_id}: kubectl: {out.stderr.strip()}; reporting running", file=sys.stderr)
        return "running"
    try:
        return classify(json.loads(out.stdout))
    except ValueError as err:
        print(f"status.py: {job_id}: unreadable kubectl output ({err}); reporting running", file=sys.stderr)
        return "running"


def note_ended(job_id: str, state: str) -> None:
    """Append "<time> <job> <state>" to the driver's ledger (cwd is the workflow's directory), if it keeps one."""
    ledger = Path(".snakemake") / "arcpipe-submitted"
    if state != "running" and ledger.is_file():
        try:
            with open(ledger, "a") as f:
                f.write(f"{time.time():.3f} {job_id} {state}\n")
        except OSError as err:  # never fail the status command over it
            print(f"status.py: {job_id}: could not note it in {ledger}: {err}", file=sys.stderr)


if __name__ == "__main__":
    state = status(sys.argv[1]) if len(sys.argv) == 2 else "running"
    if len(sys.argv) == 2:
        note_ended(sys.argv[1], state)
    print(state)
