"""arcpipe.launch: the torchrun prefix and executor resources for each run shape, and the runtime dispatch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from arcpipe.launch import detect_executor, job_resources, launch_command, torchrun_launch


@pytest.mark.parametrize("executor", ["auto", "local", "ice", "slurm"])
def test_one_process_runs_the_command_as_it_is(executor: str) -> None:
    assert torchrun_launch(1, 0, executor) == ""
    assert torchrun_launch(1, 1, executor) == ""


@pytest.mark.parametrize("executor", ["auto", "local", "ice", "slurm"])
def test_one_node_is_standalone_torchrun_on_every_executor(executor: str) -> None:
    # the same string everywhere: params must not differ between the driver and the job
    assert torchrun_launch(1, 8, executor) == "torchrun --standalone --nproc-per-node=8 --no-python --"


def test_auto_multi_node_prefix_is_independent_of_the_executor() -> None:
    prefix = torchrun_launch(2, 4)
    assert prefix == "python -m arcpipe.launch --nodes 2 --gpus-per-node 4 --segment 0 --"
    assert torchrun_launch(2, 4, segment=7).endswith("--segment 7 --")


def test_consecutive_segments_rendezvous_on_different_ports() -> None:
    # the segments of one cluster job run back to back: segment k + 1 must not reach segment k's store
    env = {"ARCPIPE_NNODES": "2", "JOB_COMPLETION_INDEX": "0", "ARCPIPE_MASTER_ADDR": "j-0.j"}
    ports = [
        next(a for a in launch_command(2, 1, ["x"], env, segment=k) if a.startswith("--master-port=")) for k in range(3)
    ]
    assert ports == ["--master-port=29500", "--master-port=29501", "--master-port=29502"]
    assert "+ 3))" in torchrun_launch(2, 1, "ice", segment=3)
    slurm = torchrun_launch(2, 1, "slurm", segment=3)
    assert "% 20000 + 3))" in slurm and '--rdzv-id="$SLURM_JOB_ID-3"' in slurm


def test_literal_forms_carry_the_rendezvous_of_their_executor() -> None:
    ice = torchrun_launch(2, 4, "ice")
    assert "--node-rank=${JOB_COMPLETION_INDEX:?" in ice and "--master-addr=${ARCPIPE_MASTER_ADDR:?" in ice
    slurm = torchrun_launch(3, 0, "slurm")
    assert slurm.startswith("srun --nodes=3 --ntasks=3 --ntasks-per-node=1 ")
    assert "--nproc-per-node=1 --rdzv-backend=c10d" in slurm and slurm.endswith("--no-python --")
    assert torchrun_launch(2, 4, "local") == "torchrun --standalone --nproc-per-node=8 --no-python --"


def test_bad_shapes_and_executors_are_errors() -> None:
    with pytest.raises(ValueError, match="nodes >= 1"):
        torchrun_launch(0, 1)
    with pytest.raises(ValueError, match="pick one of"):
        torchrun_launch(2, 1, "kubernetes")


def test_one_node_resources_ask_for_total_gpus_and_no_mpi() -> None:
    assert job_resources(1, 4) == {
        "gpu": 4,
        "nodes": 1,
        "gpus_per_node": 4,
        "mem_mb": 72000,
        "shm_mb": 17000,
        "tasks": None,
        "mpi": None,
        "slurm_extra": None,
    }


def test_multi_node_resources_use_gpus_per_node_not_total_gpus() -> None:
    # gpu>0 together with tasks would become --ntasks-per-gpu in the slurm plugin
    res = job_resources(2, 4)
    assert res["gpu"] == 0 and res["tasks"] == 2 and res["mpi"] == "srun"
    assert res["slurm_extra"] == "--ntasks-per-node=1 --gpus-per-node=4"
    assert job_resources(2, 0)["slurm_extra"] == "--ntasks-per-node=1"


def test_dispatch_reads_the_indexed_job_environment() -> None:
    env = {"ARCPIPE_NNODES": "2", "JOB_COMPLETION_INDEX": "1", "ARCPIPE_MASTER_ADDR": "j-0.j"}
    assert detect_executor(env) == "ice"
    argv = launch_command(2, 4, ["arcpipe", "train"], env)
    assert argv == [
        "torchrun",
        "--nnodes=2",
        "--node-rank=1",
        "--nproc-per-node=4",
        "--master-addr=j-0.j",
        "--master-port=29500",
        "--no-python",
        "--",
        "arcpipe",
        "train",
    ]


def test_dispatch_refuses_a_job_with_the_wrong_number_of_pods() -> None:
    env = {"ARCPIPE_NNODES": "3", "JOB_COMPLETION_INDEX": "0", "ARCPIPE_MASTER_ADDR": "j-0.j"}
    with pytest.raises(RuntimeError, match="3 pods"):
        launch_command(2, 1, ["arcpipe"], env)


def test_dispatch_without_a_cluster_keeps_the_world_size_on_one_machine() -> None:
    assert detect_executor({"PATH": "/usr/bin"}) == "local"
    argv = launch_command(2, 3, ["arcpipe", "train"], {})
    assert argv[:5] == ["torchrun", "--standalone", "--nproc-per-node=6", "--no-python", "--"]


def test_module_entry_point_prints_the_command_it_would_exec() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "arcpipe.launch", "--nodes", "1", "--gpus-per-node", "2", "--dry-run", "--"]
        + ["arcpipe", "train", "--run", "x y"],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin"},
    )
    assert out.stdout.strip() == "torchrun --standalone --nproc-per-node=2 --no-python -- arcpipe train --run 'x y'"


def test_torchrun_passes_the_command_s_own_flags_through(tmp_path) -> None:
    # torchrun's parser would read `--run` as an abbreviation of its `--run-path` without the `--`
    prefix = torchrun_launch(1, 2)
    out = subprocess.run(
        f"{prefix} sh -c 'echo $RANK \"$@\" >> {tmp_path}/seen' sh --run x --config y",
        shell=True,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert sorted((tmp_path / "seen").read_text().splitlines()) == ["0 --run x --config y", "1 --run x --config y"]
