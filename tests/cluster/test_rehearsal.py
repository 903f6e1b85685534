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
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from clusterlib import ROOT, base_env, snakemake
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
    work.mkdir()
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


def test_full_rehearsal_through_the_slurm_profile(tmp_path: Path, slurm_lab: None) -> None:
    cfg = rehearsal_config()
    work = workdir(tmp_path)
    done = snakemake(["--profile", str(ROOT / "profiles/slurm"), "full", *REHEARSAL], work, base_env(), 1400)
    assert done.returncode == 0, done.stdout[-5000:]
    assert_every_full_job_finished(work, cfg)

    # every job SLURM received from this run, as slurmctld recorded it (MinJobAge keeps them for an hour)
    records = subprocess.run(["scontrol", "show", "job", "-o"], capture_output=True, text=True, check=True).stdout
    jobs = [dict(re.findall(r"(\S+?)=(\S*)", line)) for line in records.splitlines()]
    jobs = [j for j in jobs if Path(j.get("WorkDir", "/")) == work]
    seen: dict[str, int] = {}
    for job in jobs:
        rule_wc = re.fullmatch(r"rule_(\w+?)_wildcards_(.*)", job["Comment"]) or re.fullmatch(
            r"rule_(\w+)", job["Comment"]
        )
        assert rule_wc, job["Comment"]
        rule = rule_wc[1].removeprefix("group_").split("_wildcards")[0]
        seen[rule] = seen.get(rule, 0) + 1
        where = f"{job['Comment']} (job {job['JobId']})"
        assert job["TimeLimit"] not in ("UNLIMITED", "Partition_Limit"), where
        assert int(job["MinMemoryNode"].rstrip("M")) >= 1000, where
        gpus = sum(int(n) for n in re.findall(r"gres[:/]gpu[:=](\d+)", job.get("TresPerJob", "")))
        gpus += sum(int(n) for n in re.findall(r"gres[:/]gpu[:=](\d+)", job.get("TresPerNode", ""))) * int(
            job["NumNodes"].split("-")[0]
        )
        if rule in GPU_RULES or rule.startswith("train-"):
            run = next(r for r in cfg.runs if r in job["Comment"])
            want = expected_gpus(cfg, "train_segment" if rule.startswith("train-") else rule, run)
            assert job["Partition"] == "gpu", where
            assert gpus == want > 0, f"{where}: {gpus} GPUs, want {want}"
        else:
            assert rule in CPU_RULES, where
            assert job["Partition"] == "cpu" and gpus == 0, where
    assert set(seen) >= {"build_dataset", "verify_dataset", "run_preflight", "evaluate_checkpoint"}, seen
    assert any(r.startswith("train") for r in seen), seen


def test_full_rehearsal_through_the_ice_profile(tmp_path: Path, fake_ice: dict) -> None:
    cfg = rehearsal_config()
    work = workdir(tmp_path)
    args = ["--profile", str(ROOT / "profiles/ice"), "--latency-wait", "10", "full", *REHEARSAL]
    done = snakemake(args, work, fake_ice, 1400)
    assert done.returncode == 0, done.stdout[-5000:]
    assert_every_full_job_finished(work, cfg)

    state = Path(fake_ice["FAKE_KUBECTL_STATE"])
    manifests = [json.loads(p.read_text()) for p in state.glob("*/job/*.json")]
    assert manifests
    seen = set()
    for job in manifests:
        V1Job.model_validate(job)  # a valid batch/v1 Job
        labels = job["metadata"]["labels"]
        rule = labels.get("arcpipe/rule") or labels.get("snakemake/rule")
        seen.add(rule)
        pod = job["spec"]["template"]["spec"]
        container = pod["containers"][0]
        limits = container["resources"]["limits"]
        gpus = int(limits.get("nvidia.com/gpu", 0))
        where = f"{job['metadata']['name']} ({rule})"
        assert job["spec"]["activeDeadlineSeconds"] > 0, where
        assert int(limits["memory"].removesuffix("Mi")) >= 1000, where
        shm = next(v for v in pod["volumes"] if v["name"] == "dshm")
        assert shm["emptyDir"]["medium"] == "Memory" and shm["emptyDir"]["sizeLimit"], where
        if rule in GPU_RULES or (rule or "").startswith("train"):
            assert gpus > 0 and "nodeSelector" in pod or "tolerations" in pod, where
        else:
            assert gpus == 0, where
    assert {"build_dataset", "evaluate_checkpoint", "run_preflight"} <= seen, seen
