#!/usr/bin/env python3
"""Delete Jobs by NAMESPACE/NAME without waiting (the cluster-generic executor's cancel command).

    cancel.py arcpipe/smk-a-1f3a arcpipe/smk-b-9c0d

Snakemake calls this on Ctrl-C with a 2 s timeout and no shell, so it starts one detached
`kubectl delete job --wait=false` per namespace and returns at once; the deletions finish even after Snakemake
exits. Pods and the multi-node Services go with their Job (owner references, background cascade).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import defaultdict


def cancel(job_ids: list[str]) -> list[list[str]]:
    """Start the deletions; returns the kubectl argvs started."""
    by_namespace: dict[str, list[str]] = defaultdict(list)
    for job_id in job_ids:
        namespace, _, name = job_id.rpartition("/")
        by_namespace[namespace].append(name)
    started = []
    for namespace, names in by_namespace.items():
        argv = [os.environ.get("KUBECTL", "kubectl"), "delete", "job", *names]
        argv += ["--ignore-not-found", "--wait=false", "--cascade=background"]
        if namespace:
            argv += ["-n", namespace]
        subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True, close_fds=True
        )
        started.append(argv)
    return started


if __name__ == "__main__":
    cancel(sys.argv[1:])
