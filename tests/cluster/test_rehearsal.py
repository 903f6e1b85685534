"""The rehearsal: the real `full` target through the real cluster profiles, sizes shrunk (config/rehearsal.yaml),
and every job checked as the scheduler received it.

* profiles/slurm on the SLURM lab (cluster/slurm/lab-up.sh: partitions cpu and gpu, fake GPU GRES): every job's
  record in slurmctld (`scontrol show job`: partition, GPUs, time limit, memory);
* profiles/ice against the kubectl stand-in: every rendered Job manifest (GPU limits, node selector, deadline,
  memory, the memory-backed /dev/shm).
What each job must ask for: training, preflight and evaluation GPUs on the GPU partition (training nodes x
gpus_per_node; preflight and evaluation at least one, as the run trains on GPUs); data and report stages no GPU
on the CPU partition; every job a time limit and memory. The run must finish (every full run, its preflight, its
segments grouped by segment_evals, every evaluation, the pooled votes and the full report).

Each rehearsal is also a driver crash: the whole Snakemake process group is SIGKILLed while a training job runs on
the scheduler, and the same command is run again with no manual step (docs/reliability.md, "After a crash"). It must
take over (the dead driver's lock and its still-running jobs), no two jobs may ever train the same segment at once,
and the interrupted run's final weights must equal an uninterrupted run's bitwise.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import subprocess
import time
from datetime import datetime
from pathlib import Path

import pytest
import yaml
from clusterlib import ICE_POLL, ROOT, SENTINEL, SLURM_POLL, VENV_BIN, base_env, files_containing, snakemake
from kubernetes.client import V1Job

from arcpipe.config import WorkflowConfig

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(1500)]
COPIED = ["Snakefile", "rules", "config", "workflow", "profiles", "envs"]
REHEARSAL = ["--configfile", "config/config.yaml", "config/rehearsal.yaml"]
GPU_RULES = {"train_segment", "run_preflight", "evaluate_checkpoint"}
CPU_RULES = {"build_dataset", "verify_dataset", "render_full_report", "pool_full_votes"}


def rehearsal_config() -> WorkflowConfig:
    from snakemake.utils import update_config

    config = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    update_config(config, yaml.safe_load((ROOT / "config/rehearsal.yaml").read_text()))
    return WorkflowConfig.model_validate(config)


def workdir(tmp_path: Path) -> Path:
    """A fresh copy of the workflow, as a user's clone has it (plus the tiny ConceptARC file the overlay names)."""
    work = tmp_path / "work"
    work.mkdir(parents=True)
    for name in COPIED:
        (shutil.copytree if (ROOT / name).is_dir() else shutil.copy2)(ROOT / name, work / name)
    (work / "tests/data").mkdir(parents=True)
    for path in (ROOT / "tests/data").glob("arc-tiny_*"):
        shutil.copy2(path, work / "tests/data" / path.name)
    return work


def assert_every_full_job_finished(work: Path, cfg: WorkflowConfig) -> None:
    for name in cfg.runs_for("full"):
        run = cfg.runs[name]
        assert (work / f"results/runs/{name}/preflight.json").is_file()
        for epoch in run.boundaries():
            assert (work / f"results/runs/{name}/ckpt/epoch_{epoch}.pt").is_file(), (name, epoch)
            assert (work / f"results/eval/{name}/epoch_{epoch}/metrics.json").is_file(), (name, epoch)
    for table in ("passk.md", "pooled.md", "comparison.md"):
        assert (work / "results/report/full" / table).is_file()


def expected_gpus(cfg: WorkflowConfig, rule: str, run: str) -> int:
    r = cfg.runs[run]
    return {"train_segment": r.nodes * r.gpus_per_node, "run_preflight": 1, "evaluate_checkpoint": r.evaluation_gpus}[
        rule
    ]


def kill_driver_while_training(work: Path, args: list[str], env: dict, training: callable, timeout_s: int = 900) -> str:
    """Start `snakemake ARGS` in its own process group; SIGKILL the whole group at a random moment while a
    training job runs on the scheduler (`training()` names it, or None). Returns the job that was running."""
    with open(work / "killed-driver.log", "w") as log:
        proc = subprocess.Popen(
            [str(VENV_BIN / "snakemake"), *args], cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + timeout_s
            wait = random.uniform(0, 3)  # a random moment inside a segment
            first = running = None
            while time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.5)
                running = training()
                if running is not None and first is None:
                    first = time.monotonic()
                if running is not None and time.monotonic() - first >= wait:
                    break  # still training at the moment of the kill
            assert running, "no training job ran: " + (work / "killed-driver.log").read_text()[-3000:]
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return running


def final_weights(work: Path, run: str, epoch: int) -> dict:
    import torch

    return torch.load(work / f"results/runs/{run}/ckpt/epoch_{epoch}.pt", map_location="cpu", weights_only=False)[
        "model"
    ]


def assert_equals_an_uninterrupted_run(tmp_path: Path, work: Path, cfg: WorkflowConfig, run: str) -> None:
    """The run's last checkpoint, trained again here in one uninterrupted local Snakemake call, is bitwise equal."""
    import torch

    reference = workdir(tmp_path / "reference")
    last = cfg.runs[run].epochs
    target = f"results/runs/{run}/ckpt/epoch_{last}.pt"
    done = snakemake(["--cores", "2", target, *REHEARSAL], reference, base_env(), 900)
    assert done.returncode == 0, done.stdout[-3000:]
    got, want = final_weights(work, run, last), final_weights(reference, run, last)
    assert got.keys() == want.keys()
    for key in want:
        assert torch.equal(got[key], want[key]), f"{run}: {key} differs from an uninterrupted run"


def test_full_rehearsal_through_the_slurm_profile(tmp_path: Path, slurm_lab: None) -> None:
    cfg = rehearsal_config()
    work = workdir(tmp_path)
    args = ["--profile", str(ROOT / "profiles/slurm"), *SLURM_POLL, "full", *REHEARSAL]

    def running() -> list[str]:
        """This workflow's training jobs SLURM runs now (several runs train at once)."""
        out = subprocess.run(["squeue", "-h", "-t", "R", "-o", "%i|%k|%Z"], capture_output=True, text=True).stdout
        jobs = [line.split("|") for line in out.splitlines()]
        return [c for _, c, d in jobs if Path(d) == work and "train_segment" in c]

    env = base_env(WANDB_API_KEY=SENTINEL)  # must reach the jobs as an environment variable only
    killed = kill_driver_while_training(work, args, env, lambda: next(iter(running()), None))
    assert killed in running(), "the dead driver's training job should still run on SLURM"
    done = snakemake(args, work, env, 1400)
    assert done.returncode == 0, done.stdout[-5000:]
    assert "took over from a dead driver" in done.stdout and "cancelled its" in done.stdout, done.stdout[:3000]
    assert_every_full_job_finished(work, cfg)
    # nothing of the workflow holds a node or a GPU once it ended: SLURM lists no job of this working directory
    queued = subprocess.run(["squeue", "-h", "-o", "%i|%T|%Z"], capture_output=True, text=True, check=True).stdout
    assert [line for line in queued.splitlines() if Path(line.split("|")[-1]) == work] == []

    # every job SLURM received from this run, as slurmctld recorded it (MinJobAge keeps them for an hour)
    records = subprocess.run(["scontrol", "show", "job", "-o"], capture_output=True, text=True, check=True).stdout
    jobs = [dict(re.findall(r"(\S+?)=(\S*)", line)) for line in records.splitlines()]
    jobs = [j for j in jobs if Path(j.get("WorkDir", "/")) == work]
    seen: dict[str, int] = {}
    for job in jobs:
        # the plugin's comment: rule_<rule>_wildcards_<values>, or rule_<group>_<rule> for a group job
        rule = job["Comment"].removeprefix("rule_").split("_wildcards_")[0]
        rule = "train_segment" if rule.startswith("train-") else rule
        seen[rule] = seen.get(rule, 0) + 1
        where = f"{job['Comment']} (job {job['JobId']})"
        assert job["TimeLimit"] not in ("UNLIMITED", "Partition_Limit"), where
        assert int(job["MinMemoryNode"].rstrip("M")) >= 1000, where
        gpus = sum(int(n) for n in re.findall(r"gres[:/]gpu[:=](\d+)", job.get("TresPerJob", "")))
        gpus += sum(int(n) for n in re.findall(r"gres[:/]gpu[:=](\d+)", job.get("TresPerNode", ""))) * int(
            job["NumNodes"].split("-")[0]
        )
        if rule in GPU_RULES:
            run = next(r for r in cfg.runs if f"-{r}-" in job["Comment"] or f"_{r}" in job["Comment"])
            want = expected_gpus(cfg, rule, run)
            assert job["Partition"] == "gpu", where
            assert gpus == want > 0, f"{where}: {gpus} GPUs, want {want}"
        else:
            assert rule in CPU_RULES, where
            assert job["Partition"] == "cpu" and gpus == 0, where
    assert set(seen) >= {"build_dataset", "verify_dataset", "run_preflight", "evaluate_checkpoint"}, seen
    assert "train_segment" in seen, seen

    # no two jobs ever trained the same segment at once: the killed one ended before its re-run started
    by_segment: dict[str, list[tuple[datetime, datetime]]] = {}
    for job in jobs:
        if "train" in job["Comment"]:
            span = (datetime.fromisoformat(job["StartTime"]), datetime.fromisoformat(job["EndTime"]))
            by_segment.setdefault(job["Comment"], []).append(span)
    assert len(by_segment[killed]) == 2, by_segment[killed]  # the cancelled job and its re-run
    for comment, spans in by_segment.items():
        spans.sort()
        for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
            assert end <= start, f"{comment}: two jobs trained it at once ({spans})"
    run = next(r for r in cfg.runs if f"-{r}-" in killed or killed.endswith(f"_{r}"))
    assert_equals_an_uninterrupted_run(tmp_path, work, cfg, run)
    # the multi-node run went through srun + torchrun on both lab nodes
    assert "--ntasks-per-node=1" in (work / "logs/train_segment/hrm-arc1/epoch_1.log").read_text()
    # the W&B key is in no file of the run and in no jobscript SLURM stored
    assert files_containing(work, SENTINEL) == []
    scripts = Path("/var/lib/arcpipe-slurm-lab/ctld")
    assert [p for p in scripts.rglob("script") if SENTINEL.encode() in p.read_bytes()] == []


def test_full_rehearsal_through_the_ice_profile(tmp_path: Path, fake_ice: dict) -> None:
    cfg = rehearsal_config()
    work = workdir(tmp_path)
    args = ["--profile", str(ROOT / "profiles/ice"), *ICE_POLL, "--latency-wait", "10", "full", *REHEARSAL]
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

    killed = kill_driver_while_training(work, args, env, lambda: next(iter(running()), None))
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
    assert_every_full_job_finished(work, cfg)
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
    # the killed Job's pods were gone before its segment's next Job started
    calls = [json.loads(line) for line in (state / "calls.log").read_text().splitlines()]
    assert any(c[:2] == ["delete", "job"] and killed in c for c in calls), "the dead driver's Job was not cancelled"
    run = next(r for r in cfg.runs if f"-{r}-" in f"-{killed}-")
    assert_equals_an_uninterrupted_run(tmp_path, work, cfg, run)
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
