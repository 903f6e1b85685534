"""profiles/slurm (the real HPC profile) end to end on the SLURM lab (cluster/slurm/lab-up.sh: 2 nodes x 2 fake GPUs),
and the rehearsal of `full` through it (what the rehearsal checks: test_rehearsal.py's docstring). Every test on the
lab is in this file, so that one pytest worker (tests/run.sh runs two, a file each) brings the lab up and down.

Needs root; skipped without it, except under CI=true where it must run. The lab is torn down by the session
fixture whatever happens (and by .ci/run's trap when pytest itself is killed).
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from datetime import datetime
from pathlib import Path

import pytest
import yaml
from clusterlib import FIXTURES, ROOT, SENTINEL, SLURM_POLL, base_env, files_containing, snakemake, write_runs
from rehearsal import (
    CPU_RULES,
    GPU_RULES,
    KILLED_IN,
    REHEARSAL,
    SLURM_RUNS,
    assert_equals_an_uninterrupted_run,
    assert_every_full_job_finished,
    expected_gpus,
    kill_driver_while_training,
    rehearsal_config,
    subset,
    workdir,
)

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def slurm_args(configfile: Path) -> list[str]:
    return [
        "-s",
        str(FIXTURES / "Snakefile"),
        "--configfile",
        str(configfile),
        "--profile",
        str(ROOT / "profiles/slurm"),
        *SLURM_POLL,
        "--workflow-profile",
        str(ROOT / "profiles/default"),
    ]


def test_one_node_two_gpu_and_two_node_torchrun_through_the_slurm_executor(tmp_path: Path, slurm_lab: None) -> None:
    runs = {
        "one": {"nodes": 1, "gpus_per_node": 2},  # --gpus=2 on one node, torchrun --standalone
        "multi": {"nodes": 2, "gpus_per_node": 1},  # srun + torchrun c10d across lab1 and lab2
        "bad": {"nodes": 1, "gpus_per_node": 0, "fail": True},  # fails; the run must end, not hang
    }
    configfile = write_runs(tmp_path / "runs.json", runs)
    env = base_env(WANDB_API_KEY=SENTINEL)
    done = snakemake([*slurm_args(configfile), "--retries", "0", "all"], tmp_path, env, timeout_s=800)
    assert done.returncode == 1, done.stdout[-4000:]  # 1 = the failed job; 130/124 would be the timeout
    assert "SLURM status is: 'FAILED'" in done.stdout and "wildcards: run=bad" in done.stdout

    one = json.loads((tmp_path / "out/one.json").read_text())
    assert one["world_size"] == 2
    assert {p["cuda_visible_devices"] for p in one["procs"]} == {"0,1"}  # the job's 2 GRES GPUs
    multi = json.loads((tmp_path / "out/multi.json").read_text())
    assert multi["world_size"] == 2 and multi["sum"] == 55 * (1 + 2)
    assert sorted(p["host"] for p in multi["procs"]) == ["lab1", "lab2"]  # one rank on each node
    assert all(p["cuda_visible_devices"] == "0" for p in multi["procs"])  # --gpus-per-node=1
    assert all(p["has_wandb_key"] for p in multi["procs"])  # --export=ALL carried it, as an env var only

    # neither the jobscripts SLURM stored (sbatch --wrap) nor anything in the work tree holds the key
    state = Path("/var/lib/arcpipe-slurm-lab/ctld")
    scripts = [p for p in state.rglob("script") if SENTINEL.encode() in p.read_bytes()]
    assert scripts == []
    assert files_containing(tmp_path, SENTINEL) == []


def test_lab_up_is_idempotent_and_fast_when_nothing_changed(slurm_lab: None) -> None:
    env = base_env(SLURM_LAB_NODES="2", SLURM_LAB_GPUS="2")
    out = subprocess.run(
        ["bash", str(ROOT / "cluster/slurm/lab-up.sh")], env=env, capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0 and "already up" in out.stderr
    # a node can report the transitional state "planned" for a moment after a job left it
    for _ in range(30):
        nodes = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T %G"], capture_output=True, text=True, check=True)
        if "planned" not in nodes.stdout:
            break
        time.sleep(1)
    # one line per node and partition (cpu, gpu, debug): every node idle in each, with its 2 GPUs
    assert set(nodes.stdout.splitlines()) == {"lab1 idle gpu:2", "lab2 idle gpu:2"}, nodes.stdout
    assert len(nodes.stdout.splitlines()) == 2 * 3, nodes.stdout


@pytest.mark.timeout(1500)
def test_full_rehearsal_through_the_slurm_profile(
    tmp_path: Path, slurm_lab: None, tmp_path_factory: pytest.TempPathFactory, worker_id: str
) -> None:
    """The `full` target of rehearsal.SLURM_RUNS (one run of each training shape, both datasets, the pooled votes
    and the report; rehearsal.py's docstring says how the two rehearsals share the runs)."""
    overlay = subset(SLURM_RUNS)
    cfg = rehearsal_config(overlay)
    work = workdir(tmp_path)
    (work / "slurm-runs.yaml").write_text(yaml.safe_dump(overlay))
    args = ["--profile", str(ROOT / "profiles/slurm"), *SLURM_POLL, "full", *REHEARSAL, "slurm-runs.yaml"]

    def running() -> list[str]:
        """This workflow's training jobs SLURM runs now (several runs train at once)."""
        out = subprocess.run(["squeue", "-h", "-t", "R", "-o", "%i|%k|%Z"], capture_output=True, text=True).stdout
        jobs = [line.split("|") for line in out.splitlines()]
        # the plugin's comment: rule_train_segment_wildcards_..., or rule_train-<run>-segment<k> for a group job
        return [c for _, c, d in jobs if Path(d) == work and ("train_segment" in c or c.startswith("rule_train-"))]

    def queue() -> str:
        """Every job SLURM knows of now, one line each (for a stalled driver's report)."""
        return subprocess.run(["squeue", "-h", "-o", "%i %T %k"], capture_output=True, text=True).stdout

    env = base_env(WANDB_API_KEY=SENTINEL)  # must reach the jobs as an environment variable only
    killed = kill_driver_while_training(
        work, args, env, lambda: next((j for j in running() if KILLED_IN in j), None), queue
    )
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
    assert_equals_an_uninterrupted_run(tmp_path_factory, worker_id, work, cfg, run)
    # the multi-node run went through srun + torchrun on both lab nodes
    assert "--ntasks-per-node=1" in (work / "logs/train_segment/hrm-arc1/epoch_1.log").read_text()
    # the W&B key is in no file of the run and in no jobscript SLURM stored
    assert files_containing(work, SENTINEL) == []
    scripts = Path("/var/lib/arcpipe-slurm-lab/ctld")
    assert [p for p in scripts.rglob("script") if SENTINEL.encode() in p.read_bytes()] == []
