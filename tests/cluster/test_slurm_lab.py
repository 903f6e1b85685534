"""profiles/slurm (the real HPC profile) end to end on the SLURM lab (cluster/slurm/lab-up.sh: 2 nodes x 2 fake GPUs).

Needs root; skipped without it, except under CI=true where it must run. The lab is torn down by the session
fixture whatever happens (and by .ci/run's trap when pytest itself is killed).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from clusterlib import FIXTURES, ROOT, SENTINEL, SLURM_POLL, base_env, files_containing, snakemake, write_runs

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
