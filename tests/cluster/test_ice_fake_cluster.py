"""profiles/ice end to end through Snakemake against the kubectl stand-in (tests/cluster/fake_kubectl.py).

No real Kubernetes runs here: the stand-in runs each pod as a local process. What is real: Snakemake 9 with the
cluster-generic executor and this profile, submit/status/cancel, the rendered Jobs, torchrun across 2 "pods".
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from clusterlib import (
    FAKE_KUBECTL,
    FIXTURES,
    ICE_POLL,
    ROOT,
    SENTINEL,
    default_sigint,
    files_containing,
    snakemake,
    write_runs,
)
from kubernetes.client import V1Job

PROFILE = ROOT / "profiles/ice"
pytestmark = pytest.mark.cluster


def ice_args(configfile: Path) -> list[str]:
    return [
        "-s",
        str(FIXTURES / "Snakefile"),
        "--configfile",
        str(configfile),
        "--profile",
        str(PROFILE),
        *ICE_POLL,
        "--workflow-profile",
        str(ROOT / "profiles/default"),
        "--latency-wait",
        "10",
    ]


def kubectl(env: dict[str, str], *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["kubectl", *args], env=env, input=stdin, capture_output=True, text=True, check=False)


@pytest.mark.slow
def test_cpu_multi_gpu_and_two_pod_jobs_run_through_api_hiccups(tmp_path: Path, fake_ice: dict) -> None:
    runs = {
        "cpu": {"nodes": 1, "gpus_per_node": 0},
        "two": {"nodes": 1, "gpus_per_node": 2},
        "multi": {"nodes": 2, "gpus_per_node": 1},
        "bad": {"nodes": 1, "gpus_per_node": 0, "fail": True},  # fails; keep-going finishes the others
    }
    configfile = write_runs(tmp_path / "runs.json", runs)
    env = {**fake_ice, "FAKE_KUBECTL_FAIL_EVERY": "3"}  # every third `kubectl get` fails like a flaky API
    done = snakemake([*ice_args(configfile), "--retries", "0", "all"], tmp_path, env, timeout_s=800)
    assert done.returncode == 1, done.stdout[-3000:]
    assert done.stdout.count("Error in rule train") == 1 and "wildcards: run=bad" in done.stdout
    assert not (tmp_path / "out/bad.json").exists()

    two = json.loads((tmp_path / "out/two.json").read_text())
    assert two["world_size"] == 2
    multi = json.loads((tmp_path / "out/multi.json").read_text())
    assert multi["world_size"] == 2 and multi["sum"] == 55 * (1 + 2)
    assert sorted(p["pod_index"] for p in multi["procs"]) == ["0", "1"]  # one rank per pod
    assert all(p["has_wandb_key"] for p in multi["procs"])  # the Secret reached the pods
    # pod 0 ran Snakemake's job wrapper, which ran the rule as node 0 into the job's log; pod 1 ran only the
    # rule's command (no second wrapper to delete that log), and arcpipe.launch moved its output beside it
    pod0_log = (tmp_path / "logs/train/multi.log").read_text()
    assert "torchrun --nnodes=2 --node-rank=0" in pod0_log, pod0_log
    assert "--node-rank=1" not in pod0_log
    assert "--node-rank=1" in (tmp_path / "logs/train/multi.log.pod1").read_text()
    pods = Path(env["FAKE_KUBECTL_STATE"]) / "arcpipe/pods"
    [pod_dir] = pods.glob("smk-train-multi-*")
    pod0_out, pod1_out = (pod_dir / "0.log").read_text(), (pod_dir / "1.log").read_text()
    assert "Building DAG of jobs" in pod0_out and "Building DAG of jobs" not in pod1_out
    assert "follower 1: rule train (run=multi)" in pod1_out

    state = Path(env["FAKE_KUBECTL_STATE"])
    jobs = [json.loads(p.read_text()) for p in state.glob("arcpipe/job/*.json")]
    assert len(jobs) == 5  # make_data + 4 training jobs
    for job in jobs:
        V1Job.model_validate(job)
    indexed = [j for j in jobs if j["spec"].get("completionMode") == "Indexed"]
    assert len(indexed) == 1 and len(list(state.glob("arcpipe/service/*.json"))) == 1
    calls = (state / "calls.log").read_text()
    assert '"get", "job"' in calls and int((state / "get-count").read_text()) >= 3  # hiccups did happen
    # the key is in the driver's environment and in the Secret, never in what we rendered or wrote
    assert files_containing(tmp_path, SENTINEL) == [tmp_path / "secrets.json"]


# Snakemake's executors take every job out of their active list while they check its status, so a Ctrl-C during a
# check cancels nothing through the profile; the driver's onerror then cancels what its ledger does not show ended
# (arcpipe.driver.cancel_leftovers). Both moments: between checks, and inside one (every `get` slowed to 6 s; the
# test sends Ctrl-C within 0.2 s of one starting).
@pytest.mark.parametrize("get_delay", [0, 6], ids=["between-status-checks", "during-a-status-check"])
def test_ctrl_c_cancels_running_jobs_without_waiting(tmp_path: Path, fake_ice: dict, get_delay: int) -> None:
    configfile = write_runs(tmp_path / "runs.json", {"slow": {"nodes": 2, "gpus_per_node": 0, "hang": True}})
    argv = [str(Path(sys.executable).parent / "snakemake"), *ice_args(configfile), "all"]
    log = open(tmp_path / "snakemake.log", "w")  # noqa: SIM115 - closed below, after the process ends
    env = {**fake_ice, "FAKE_KUBECTL_GET_DELAY_S": str(get_delay)}
    proc = subprocess.Popen(
        argv, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT, preexec_fn=default_sigint
    )
    state = Path(fake_ice["FAKE_KUBECTL_STATE"])
    pods = state / "arcpipe/pods"
    try:
        deadline = time.monotonic() + 240
        while not list(pods.glob("smk-train-slow-*/1.log")) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert list(pods.glob("smk-train-slow-*/1.log")), (tmp_path / "snakemake.log").read_text()[-3000:]
        time.sleep(3)  # both pods are inside the hanging rule
        while get_delay and not _status_check_under_way(state, "smk-train-slow"):
            assert time.monotonic() < deadline, "no status check of the training Job began"
            time.sleep(0.2)
        started = time.monotonic()
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
        # the rule sleeps for an hour: any bound well below proves Snakemake did not wait; 60 s leaves room for a loaded
        # machine (cancelling starts a status and a cancel program per Job), it takes 2-10 s on an idle one
        assert time.monotonic() - started < 60
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()
    jobs = Path(fake_ice["FAKE_KUBECTL_STATE"]) / "arcpipe/job"
    # cancel.sh returns at once; its detached `kubectl delete` ends a moment later (under a second idle; in one CI run
    # under load, more than the 5 s this loop once allowed; in another, the Python cancel.py before it did not start
    # the deletion within Snakemake's 2 s limit for the cancel command)
    deadline = time.monotonic() + 30
    while list(jobs.glob("smk-train-slow-*.json")) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not list(jobs.glob("smk-train-slow-*.json")), "the Job was not deleted"
    assert not list((Path(fake_ice["FAKE_KUBECTL_STATE"]) / "arcpipe/service").glob("*.json"))
    # every process of both pods is gone (torchrun's workers included: they run in sessions of their own)
    left = subprocess.run(
        [sys.executable, str(FAKE_KUBECTL), "_kill-all"], env=fake_ice, capture_output=True, text=True, check=True
    )
    assert left.stdout.strip() == "0"


def test_status_survives_api_errors_and_reports_outcomes(fake_ice: dict) -> None:
    status = [sys.executable, str(PROFILE / "status.py")]
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "deadline", "namespace": "arcpipe"},
        "spec": {
            "activeDeadlineSeconds": 6,  # the three asks below come first, each a Python process: seconds on a busy box
            "template": {"spec": {"containers": [{"name": "c", "image": "x", "command": ["sleep", "30"]}]}},
        },
    }
    assert kubectl(fake_ice, "create", "-f", "-", "-o", "json", stdin=json.dumps(job)).returncode == 0

    workdir = Path(fake_ice["FAKE_KUBECTL_STATE"]).parent / "workflow"  # the driver's ledger, as submit.py starts it
    ledger = workdir / ".snakemake/arcpipe-submitted"
    ledger.parent.mkdir(parents=True)
    ledger.write_text("1.000 arcpipe/deadline\n")

    def ask(job_id: str, **extra: str) -> subprocess.CompletedProcess:
        env = {**fake_ice, **extra}
        return subprocess.run([*status, job_id], env=env, cwd=workdir, capture_output=True, text=True)

    first = ask("arcpipe/deadline")
    assert (first.returncode, first.stdout) == (0, "running\n")
    hiccup = ask("arcpipe/deadline", FAKE_KUBECTL_FAIL_EVERY="1")
    assert (hiccup.returncode, hiccup.stdout) == (0, "running\n") and "Unable to connect" in hiccup.stderr
    no_kubectl = ask("arcpipe/deadline", KUBECTL="/nonexistent/kubectl")
    assert (no_kubectl.returncode, no_kubectl.stdout) == (0, "running\n")
    for _ in range(300):  # activeDeadlineSeconds=6: the pod is killed, the Job fails
        if ask("arcpipe/deadline").stdout == "failed\n":
            break
        time.sleep(0.1)
    assert ask("arcpipe/deadline").stdout == "failed\n"
    assert ask("arcpipe/never-existed").stdout == "failed\n"
    # only the ends are noted, each time they are seen (the driver cancels what has none: arcpipe.driver)
    lines = [line.split()[1:] for line in ledger.read_text().splitlines()]
    assert lines[0] == ["arcpipe/deadline"] and ["arcpipe/deadline", "running"] not in lines
    assert ["arcpipe/deadline", "failed"] in lines and lines[-1] == ["arcpipe/never-existed", "failed"]


def test_cancel_returns_at_once_even_when_the_api_hangs(tmp_path: Path) -> None:
    hanging = tmp_path / "kubectl"
    pids = tmp_path / "pids"
    hanging.write_text(f"#!/bin/sh\necho $$ >> {pids}\nexec sleep 30\n")
    hanging.chmod(0o755)
    started = time.monotonic()
    subprocess.run(
        [str(PROFILE / "cancel.sh"), "arcpipe/a", "arcpipe/b", "other/c"],
        env={**os.environ, "KUBECTL": str(hanging)},
        check=True,
        timeout=2,  # Snakemake's own limit for the cancel command
    )
    assert time.monotonic() - started < 1.5
    for _ in range(50):  # the detached stand-ins: one per namespace, still "deleting"
        if pids.exists() and len(pids.read_text().split()) == 2:
            break
        time.sleep(0.05)
    for pid in pids.read_text().split():
        os.kill(int(pid), signal.SIGKILL)


def _status_check_under_way(state: Path, job_prefix: str) -> bool:
    for busy in state.glob("get-busy-*"):
        try:
            if busy.read_text().startswith(job_prefix):
                return True
        except FileNotFoundError:  # that `get` just ended
            pass
    return False


def test_a_pod_lost_without_an_exit_code_fails_its_job(fake_ice: dict) -> None:
    """The stand-in as the kubelet: a pod whose process is gone without an exit code (killed from outside, died
    before it wrote one) has failed, and so has its Job. Before, such a Job stayed active for ever and the driver
    waited on it (the issue where the ICE rehearsal sat silent until its deadline)."""
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "lost", "namespace": "arcpipe"},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "command": ["sleep", "600"]}]}}},
    }
    assert kubectl(fake_ice, "create", "-f", "-", "-o", "json", stdin=json.dumps(job)).returncode == 0
    pods = Path(fake_ice["FAKE_KUBECTL_STATE"]) / "arcpipe/pods/lost"
    deadline = time.monotonic() + 30
    while not (pods / "0.log").exists() and time.monotonic() < deadline:
        time.sleep(0.1)

    def status() -> dict:
        return json.loads(kubectl(fake_ice, "get", "job", "lost", "-n", "arcpipe", "-o", "json").stdout)["status"]

    assert status() == {"active": 1}
    os.kill(int((pods / "0.pid").read_text()), signal.SIGKILL)  # the pod's own wrapper: no exit code is written
    deadline = time.monotonic() + 30
    while "active" in status() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert status()["conditions"][0]["type"] == "Failed"
    assert not (pods / "0.exit").exists()
