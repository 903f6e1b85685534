#!/usr/bin/env python3
"""Submit one Snakemake jobscript to ICE as a Kubernetes Job (the cluster-generic executor's submit command).

    submit.py JOBSCRIPT            create the Job (and, for nodes > 1, its headless Service); print NAMESPACE/NAME
    submit.py --print JOBSCRIPT    print the manifests as YAML and create nothing

The Job is job.yaml (beside this file) with the job's sizes filled in from the `# properties = {...}` line
Snakemake writes into every jobscript: cpu request = threads; memory request = limit = mem_mb + shm_mb (a
memory-backed emptyDir counts against the limit); /dev/shm sizeLimit = shm_mb; `nvidia.com/gpu` limit =
gpus_per_node per pod, plus gpu-pod.yaml's node selector and tolerations; activeDeadlineSeconds = runtime x 60 +
the template's slack. `nodes > 1` makes an Indexed Job (one pod per node) and a headless Service owned by it, and
sets ARCPIPE_NNODES / ARCPIPE_MASTER_ADDR / ARCPIPE_MASTER_PORT for arcpipe.launch; Kubernetes adds
JOB_COMPLETION_INDEX. Only pod 0 runs the jobscript (Snakemake's job wrapper, which runs the rule as node 0); the
other pods run just the job's multi-node shell commands, as Snakemake formats them in a dry run of the jobscript
(follower_plan.py, at submit time, under the jobscript's Python): a second wrapper would delete the log and
outputs pod 0 is writing. Environment: ARCPIPE_IMAGE, ARCPIPE_NAMESPACE override the template; ARCPIPE_KUEUE_QUEUE
adds the Kueue queue label; KUBECTL names the kubectl binary. Needs only PyYAML.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import secrets
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
MASTER_PORT = 29500
NAME_MAX = 52  # pods of an Indexed Job are <name>-<index>; hostnames and Service names stop at 63
KUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# Snakemake's flags that wrap a rule's shell in a conda env or container: followers could not do the same
DEPLOYMENT_FLAGS = {
    "--software-deployment-method",
    "--deployment-method",
    "--deployment",
    "--sdm",
    "--use-conda",
    "--use-apptainer",
    "--use-singularity",
}
# the container command of every pod of an Indexed Job: pod 0 runs the jobscript ($1), the others their script ($2)
POD_DISPATCH = 'if [ "${JOB_COMPLETION_INDEX:?}" = 0 ]; then exec /bin/bash -c "$1"; fi; exec /bin/bash -c "$2"'
# helpers of the follower script: Snakemake's job wrapper waits for inputs (shared-FS latency) and runs the shell
# command with `set -euo pipefail` and the thread and TMPDIR variables; so do the followers
FOLLOWER_FUNCTIONS = r"""wait_for_files() {  # LATENCY_S FILE...
  local deadline=$((SECONDS + $1)) f; shift
  for f in "$@"; do
    until [ -e "$f" ]; do
      if ((SECONDS > deadline)); then echo "follower: input $f missing after the latency wait" >&2; return 1; fi
      ls "$(dirname "$f")" >/dev/null 2>&1 || true  # refresh the NFS attribute cache
      sleep 1
    done
  done
}
run_shell() {  # THREADS TMPDIR COMMAND
  local threads=$(($1 < $(nproc) ? $1 : $(nproc))) var
  for var in OMP_NUM_THREADS GOTO_NUM_THREADS OPENBLAS_NUM_THREADS MKL_NUM_THREADS VECLIB_MAXIMUM_THREADS \
    NUMEXPR_NUM_THREADS; do export "$var=$threads"; done
  if [ -n "$2" ]; then export TMPDIR="$2" TMP="$2" TEMP="$2" TEMPDIR="$2"; fi
  echo "follower: $3" >&2
  /bin/bash -c "set -euo pipefail; $3"
}"""


def render(
    jobscript: str,
    env: dict[str, str] | None = None,
    suffix: str | None = None,
    followers: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """The manifests for one jobscript: [Job] or [Job, headless Service]; the Service's owner uid is left empty.

    `followers`: what pods 1.. run for nodes > 1 (follower_plan.py's entries); None plans them from the jobscript.
    """
    env = dict(os.environ if env is None else env)
    props = read_properties(jobscript)
    template = yaml.safe_load((HERE / "job.yaml").read_text())
    gpu_patch = yaml.safe_load((HERE / "gpu-pod.yaml").read_text()) or {}
    res = props.get("resources", {})
    nodes = int(res.get("nodes", 1))
    gpus = int(res.get("gpus_per_node", res.get("gpu", 0) if nodes == 1 else 0))
    mem_mb = int(res.get("mem_mb", 4000))
    shm_mb = int(res.get("shm_mb", 1000))
    runtime_min = int(res.get("runtime", 60))

    job = copy.deepcopy(template)
    meta = job["metadata"]
    meta["name"] = name = job_name(props, suffix or secrets.token_hex(2))
    if env.get("ARCPIPE_NAMESPACE"):
        meta["namespace"] = env["ARCPIPE_NAMESPACE"]
    labels = {**meta.get("labels", {}), **_labels(props)}
    if env.get("ARCPIPE_KUEUE_QUEUE"):
        labels[KUEUE_LABEL] = env["ARCPIPE_KUEUE_QUEUE"]
    meta["labels"] = labels
    slack = int(meta.get("annotations", {}).get("arcpipe/deadline-slack-seconds", 900))

    spec = job["spec"]
    spec["activeDeadlineSeconds"] = runtime_min * 60 + slack
    pod = spec["template"]
    pod.setdefault("metadata", {}).setdefault("labels", {}).update(_labels(props))
    pod_spec = pod["spec"]
    if gpus > 0:
        _merge(pod_spec, gpu_patch)
    container = pod_spec["containers"][0]
    if env.get("ARCPIPE_IMAGE"):
        container["image"] = env["ARCPIPE_IMAGE"]
    container["command"] = ["/bin/bash", "-c", jobscript]
    memory = f"{mem_mb + shm_mb}Mi"
    resources: dict[str, Any] = {
        "requests": {"cpu": str(props.get("threads", 1)), "memory": memory},
        "limits": {"memory": memory},
    }
    if gpus > 0:
        resources["requests"]["nvidia.com/gpu"] = resources["limits"]["nvidia.com/gpu"] = str(gpus)
    container["resources"] = resources
    for volume in pod_spec.get("volumes", []):
        if volume["name"] == "dshm":
            volume["emptyDir"]["sizeLimit"] = f"{shm_mb}Mi"
    if nodes == 1:
        return [job]

    if followers is None:
        followers = follower_plan(jobscript)
    container["command"] = [
        "/bin/bash",
        "-c",
        POD_DISPATCH,
        "arcpipe-pod",
        jobscript,
        follower_script(jobscript, followers),
    ]
    spec.update(completionMode="Indexed", completions=nodes, parallelism=nodes)
    pod_spec["subdomain"] = name  # pods resolve as <name>-<index>.<name> through the Service below
    container.setdefault("env", []).extend(
        [
            {"name": "ARCPIPE_NNODES", "value": str(nodes)},
            {"name": "ARCPIPE_MASTER_ADDR", "value": f"{name}-0.{name}"},
            {"name": "ARCPIPE_MASTER_PORT", "value": str(MASTER_PORT)},
        ]
    )
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": meta["namespace"], "labels": labels},
        "spec": {
            "clusterIP": "None",
            "selector": {"job-name": name},
            "publishNotReadyAddresses": True,  # rank 0 must resolve before any pod is Ready
            "ports": [{"name": "rendezvous", "port": MASTER_PORT, "targetPort": MASTER_PORT}],
        },
    }
    return [job, service]


def read_properties(jobscript: str) -> dict[str, Any]:
    """The JSON Snakemake writes as `# properties = {...}` into each jobscript."""
    match = re.search(r"^# properties = (.*)$", jobscript, flags=re.MULTILINE)
    if match is None:
        raise SystemExit("submit.py: no '# properties = ' line in the jobscript (is it a Snakemake jobscript?)")
    return json.loads(match.group(1))


def follower_plan(jobscript: str) -> list[dict[str, Any]]:
    """The multi-node jobs of this jobscript in execution order: follower_plan.py under the jobscript's Python."""
    workdir, python, args = parse_jobscript(jobscript)
    if DEPLOYMENT_FLAGS & set(args):
        raise SystemExit(
            "submit.py: multi-node jobs on ICE run their follower pods in the image's environment; drop "
            "--software-deployment-method (conda/apptainer) from the ICE run: the image is the environment"
        )
    threads = str(read_properties(jobscript).get("threads", 1))
    # --cores: the dry run in the driver must not cap a job's threads at the driver's CPUs (pod 0 has its own)
    argv = [python, str(HERE / "follower_plan.py"), *args, "--cores", threads]
    done = subprocess.run(argv, cwd=workdir, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        tail = "\n".join(done.stderr.splitlines()[-25:])  # the dry run's banner and plan come first
        raise SystemExit(f"submit.py: planning the follower pods failed:\n{tail}")
    jobs = json.loads(done.stdout)
    if not jobs:
        raise SystemExit("submit.py: a job with nodes > 1 has no multi-node rule in it (resources.nodes)")
    return jobs


def follower_script(jobscript: str, jobs: list[dict[str, Any]]) -> str:
    """The bash script of pods 1..: wait for each job's inputs, then run its shell command as Snakemake would."""
    workdir, _, args = parse_jobscript(jobscript)
    latency = args[args.index("--latency-wait") + 1] if "--latency-wait" in args[:-1] else "5"
    lines = [
        "# a follower pod of a multi-node job: the rule's commands only (pod 0 runs Snakemake's job wrapper)",
        "set -euo pipefail",
        f"cd {shlex.quote(workdir)}",
        FOLLOWER_FUNCTIONS,
    ]
    for job in jobs:
        what = f"rule {job['rule']} (" + ", ".join(f"{k}={v}" for k, v in job["wildcards"].items()) + ")"
        lines.append(f'echo "follower $JOB_COMPLETION_INDEX:" {shlex.quote(what)} >&2')
        if job["input"]:
            lines.append(f"wait_for_files {latency} " + " ".join(map(shlex.quote, job["input"])))
        # like Snakemake's job preparation: the command may redirect into a log whose folder pod 0 has not made yet
        folders = sorted({os.path.dirname(f) for f in [*job["output"], *job.get("log", [])]} - {""})
        if folders:
            lines.append("mkdir -p " + " ".join(map(shlex.quote, folders)))
        tmpdir = shlex.quote(job["tmpdir"]) if job.get("tmpdir") else "''"
        lines.append(f"run_shell {int(job['threads'])} {tmpdir} {shlex.quote(job['shellcmd'])}")
    return "\n".join(lines) + "\n"


def parse_jobscript(jobscript: str) -> tuple[str, str, list[str]]:
    """(workdir, python, Snakemake arguments) of a cluster-generic jobscript's `cd W && PY -m snakemake ...` line."""
    for line in jobscript.splitlines():
        words = shlex.split(line, comments=True)
        if "snakemake" not in words or "-m" not in words:
            continue
        at = words.index("-m")
        if words[at + 1] != "snakemake" or words[:1] != ["cd"] or words[2:3] != ["&&"]:
            continue
        end = words.index("&&", at) if "&&" in words[at:] else len(words)
        return words[1], words[at - 1], words[at + 2 : end]
    raise SystemExit("submit.py: no 'cd DIR && PYTHON -m snakemake ...' line in the jobscript")


def job_name(props: dict[str, Any], suffix: str) -> str:
    """smk-<rule or group>-<wildcards>-<suffix>: a DNS-1035 label short enough for Indexed-Job pod hostnames."""
    parts = [props.get("rule") or props.get("groupid") or "job", *map(str, props.get("wildcards", {}).values())]
    slug = re.sub(r"[^a-z0-9]+", "-", "-".join(parts).lower()).strip("-")
    room = NAME_MAX - len("smk--") - len(suffix)
    if len(slug) > room:  # keep it unique when cut: the tail becomes a hash of the whole slug
        digest = hashlib.sha1(slug.encode()).hexdigest()[:6]
        slug = slug[: room - 7].rstrip("-") + "-" + digest
    return f"smk-{slug}-{suffix}"


def create(manifests: list[dict[str, Any]]) -> str:
    """Create the Job, then the Service owned by it; returns NAMESPACE/NAME."""
    job = manifests[0]
    created = _kubectl_create(job)
    ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
    for extra in manifests[1:]:
        extra["metadata"]["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": created["metadata"]["uid"]}
        ]
        try:
            _kubectl_create(extra)
        except subprocess.CalledProcessError:
            subprocess.run(
                [_kubectl(), "delete", "job", name, "-n", ns, "--ignore-not-found", "--wait=false"], check=False
            )
            raise
    return f"{ns}/{name}"


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--print":
        print(yaml.safe_dump_all(render(Path(argv[1]).read_text()), sort_keys=False), end="")
        return 0
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        job_id = create(render(Path(argv[0]).read_text()))
        # the driver's ledger of what it submitted (cwd is the workflow's directory): a driver that takes over
        # from a dead one cancels those still running before it submits anything (arcpipe.driver)
        ledger = Path(".snakemake") / "arcpipe-submitted"
        if ledger.parent.is_dir():
            with open(ledger, "a") as f:
                f.write(f"{time.time():.3f} {job_id}\n")
        print(job_id)
    except subprocess.CalledProcessError as err:
        print(f"submit.py: kubectl create failed ({err.returncode}): {err.stderr}", file=sys.stderr)
        return 1
    return 0


def _labels(props: dict[str, Any]) -> dict[str, str]:
    labels = {"app.kubernetes.io/managed-by": "arcpipe", "arcpipe/rule": _label(props.get("rule") or "group")}
    if props.get("groupid"):
        labels["arcpipe/group"] = _label(props["groupid"])
    if "run" in props.get("wildcards", {}):
        labels["arcpipe/run"] = _label(props["wildcards"]["run"])
    return labels


def _label(value: str) -> str:
    # label values: at most 63 of [A-Za-z0-9_.-], alphanumeric at both ends
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", str(value))[:63].strip("-_.") or "x"


def _merge(base: dict[str, Any], patch: dict[str, Any]) -> None:
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        elif isinstance(value, list) and isinstance(base.get(key), list):
            base[key] = base[key] + value
        else:
            base[key] = copy.deepcopy(value)


def _kubectl() -> str:
    return os.environ.get("KUBECTL", "kubectl")


def _kubectl_create(manifest: dict[str, Any]) -> dict[str, Any]:
    out = subprocess.run(
        [_kubectl(), "create", "-f", "-", "-o", "json"],
        input=json.dumps(manifest),
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return json.loads(out.stdout)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
