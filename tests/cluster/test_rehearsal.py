"""The rehearsal: the real `full` target through the real cluster profiles, sizes shrunk (config/rehearsal.yaml),
and every job checked as the scheduler received it. Each profile runs the `full` target of a subset of the published
runs (rehearsal.py says which, and why they are enough together):

* profiles/ice against the kubectl stand-in: rehearsal.ICE_RUNS (the staged ones: urm-arc1-validate's stop
  decision, urm-arc1's gate; a multi-node Indexed Job; 1 and 2 GPUs), both datasets, the pooled votes and the
  report, and every rendered Job manifest (GPU limits, node selector, deadline, memory, the memory-backed /dev/shm);
* profiles/slurm on the SLURM lab (cluster/slurm/lab-up.sh: partitions cpu and gpu, fake GPU GRES): the `full`
  target of one run of each training shape (rehearsal.SLURM_RUNS: 1 node x 2 GPUs, 2 nodes x 1 GPU, 1 GPU) with
  both datasets, the pooled votes and the report, and every job's record in slurmctld (`scontrol show job`:
  partition, GPUs, time limit, memory).
What each job must ask for: training, preflight and evaluation GPUs on the GPU partition (training nodes x
gpus_per_node; preflight and evaluation at least one, as the run trains on GPUs); data and report stages no GPU
on the CPU partition; every job a time limit and memory. The run must finish (every full run of the subset, its
preflight, its segments grouped by segment_evals, every evaluation, the pooled votes and the full report).

Each rehearsal is also a driver crash: the whole Snakemake process group is SIGKILLed while a training job runs on
the scheduler, and the same command is run again with no manual step (docs/reliability.md, "After a crash"). It must
take over (the dead driver's lock and its still-running jobs), no two jobs may ever train the same segment at once,
and the interrupted run's final weights must equal an uninterrupted run's bitwise.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from clusterlib import ICE_POLL, ROOT, SENTINEL, files_containing
from kubernetes.client import V1Job
from rehearsal import (
    GPU_RULES,
    ICE_RUNS,
    KILLED_IN,
    REHEARSAL,
    assert_equals_an_uninterrupted_run,
    assert_every_full_job_finished,
    assert_the_staged_runs_decided,
    kill_driver_while_training,
    rehearsal_config,
    subset,
    workdir,
)

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(1500)]
# The SLURM rehearsal is test_slurm_lab.py::test_full_rehearsal_through_the_slurm_profile, beside the other tests on
# the SLURM lab (one pytest worker brings the lab up and down).


def test_full_rehearsal_through_the_ice_profile(
    tmp_path: Path, fake_ice: dict, tmp_path_factory: pytest.TempPathFactory, worker_id: str
) -> None:
    overlay = subset(ICE_RUNS)
    cfg = rehearsal_config(overlay)
    work = workdir(tmp_path)
    (work / "ice-runs.yaml").write_text(yaml.safe_dump(overlay))
    args = ["--profile", str(ROOT / "profiles/ice"), *ICE_POLL, "--latency-wait", "10", "full", *REHEARSAL]
    args.append("ice-runs.yaml")
    env = {**fake_ice, "ARCPIPE_DRIVER_HEARTBEAT_S": "2"}
    state = Path(fake_ice["FAKE_KUBECTL_STATE"])

    def running() -> list[str]:
        """Training Jobs whose pods started and have not all ended (several runs train at once)."""
        jobs = []
        for path in sorted(state.glob("*/job/smk-train-*.json")):
            pods = state / path.parent.parent.name / "pods" / path.stem
            if list(pods.glob("*.log")) and not list(pods.glob("*.exit")):
                jobs.append(path.stem)
        return jobs

    def jobs() -> str:
        """Every Job the stand-in holds, with its pods' states and a running pod's last log line."""
        lines = []
        for path in sorted(state.glob("*/job/*.json")):
            pods = state / path.parent.parent.name / "pods" / path.stem
            for log in sorted(pods.glob("*.log")):
                code = log.with_suffix(".exit")
                last = (log.read_text(errors="replace").strip().splitlines() or [""])[-1][:160]
                lines.append(f"{path.stem} pod {log.stem}: " + (f"exit {code.read_text()}" if code.exists() else last))
            if not list(pods.glob("*.log")):
                lines.append(f"{path.stem}: no pod started")
        return "\n".join(lines)

    killed = kill_driver_while_training(
        work, args, env, lambda: next((j for j in running() if KILLED_IN in j), None), jobs
    )
    assert killed in running(), "the dead driver's training Job should still run"
    # Kubernetes re-creates the driver pod (cluster/ice/driver.yaml): another host, so the old driver's heartbeat
    # is what says it is gone; `unshare --uts` gives the new driver a hostname of its own (`localhost`: the
    # stand-in's pods inherit it, and torchrun's store must resolve it)
    time.sleep(3 * 2 + 1)
    restarted = ["unshare", "--uts", "sh", "-c", 'hostname localhost && exec "$@"', "sh", "snakemake", *args]
    done = subprocess.run(restarted, cwd=work, env=env, capture_output=True, text=True, timeout=1400)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-5000:]
    assert "took over from a dead driver" in out and "(another host): last heartbeat" in out, out[:3000]
    assert "cancelled its" in out, out[:3000]
    assert_the_staged_runs_decided(assert_every_full_job_finished(work, cfg))
    assert running() == [], "a training Job still has a running pod after the workflow ended"

    state = Path(fake_ice["FAKE_KUBECTL_STATE"])
    manifests = [json.loads(p.read_text()) for p in state.glob("*/job/*.json")]
    assert manifests
    seen = set()
    for job in manifests:
        V1Job.model_validate(job)  # a valid batch/v1 Job
        labels = job["metadata"]["labels"]
        rule = labels["arcpipe/rule"]
        if rule == "group" and labels.get("arcpipe/group", "").startswith("train-"):
            rule = "train_segment"  # a segment's group job (segment_evals)
        seen.add(rule)
        pod = job["spec"]["template"]["spec"]
        container = pod["containers"][0]
        limits = container["resources"]["limits"]
        gpus = int(limits.get("nvidia.com/gpu", 0))
        where = f"{job['metadata']['name']} ({rule})"
        assert job["spec"]["activeDeadlineSeconds"] > 0, where
        assert 0 < job["spec"]["ttlSecondsAfterFinished"] <= 86400, where  # a finished Job and its pods go away
        assert int(limits["memory"].removesuffix("Mi")) >= 1000, where
        shm = next(v for v in pod["volumes"] if v["name"] == "dshm")
        assert shm["emptyDir"]["medium"] == "Memory" and shm["emptyDir"]["sizeLimit"], where
        if rule in GPU_RULES:
            assert gpus > 0 and ("nodeSelector" in pod or "tolerations" in pod), where
        else:
            assert gpus == 0, where
    assert {"build_dataset", "evaluate_checkpoint", "run_preflight"} <= seen, seen
    # hrm-arc1's segments ran as Indexed Jobs of two pods (one per node), rendezvous through a headless Service
    indexed = [j for j in manifests if j["spec"].get("completionMode") == "Indexed"]
    assert indexed and all(j["spec"]["completions"] == 2 for j in indexed), [j["metadata"]["name"] for j in indexed]
    # the killed Job's pods were gone before its segment's next Job started
    calls = [json.loads(line) for line in (state / "calls.log").read_text().splitlines()]
    assert any(c[:2] == ["delete", "job"] and killed in c for c in calls), "the dead driver's Job was not cancelled"
    run = next(r for r in cfg.runs if f"-{r}-" in f"-{killed}-")
    assert_equals_an_uninterrupted_run(tmp_path_factory, worker_id, work, cfg, run)
    assert files_containing(work, SENTINEL) == []  # the key came from the Secret, into no file


def test_the_ice_driver_is_re_created_when_it_dies() -> None:
    """cluster/ice/driver.yaml: a killed or evicted driver pod is replaced (podFailurePolicy), a failed workflow
    is not retried, and the driver runs the same command, so it takes over as the test above shows."""
    driver = yaml.safe_load((ROOT / "cluster/ice/driver.yaml").read_text())
    V1Job.model_validate(driver)
    spec = driver["spec"]
    assert spec["backoffLimit"] >= 3 and spec["template"]["spec"]["restartPolicy"] == "Never"
    rules = spec["podFailurePolicy"]["rules"]
    assert any(r["action"] == "Ignore" and r.get("onPodConditions") for r in rules)  # evictions do not count
    fail = next(r for r in rules if r["action"] == "FailJob")
    assert fail["onExitCodes"]["operator"] == "NotIn" and 137 in fail["onExitCodes"]["values"]
