"""One process, gradient accumulation and a real 2-process gloo torchrun train the same weights."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from arcpipe.launch import torchrun_launch

RUNS = {
    "single": {},
    "accum": {"micro_batch_size": 2},  # 4 micro-batches of 2 per step
    "ddp": {"nodes": 2},  # two CPU processes (gloo), 4 rows each
    "ddp_accum": {"nodes": 2, "micro_batch_size": 2},
}


def _run(config: Path, run: str, data: Path, out: Path, nodes: int) -> None:
    # the workflow's own launch prefix: for 2 CPU "nodes" on one machine, torchrun --standalone with 2 processes
    cmd = [*shlex.split(torchrun_launch(nodes, 0)), "arcpipe", "train", "--config", str(config), "--run", run]
    cmd += ["--data", str(data), "--out", str(out), "--until-epoch", "2"]
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def trained(tiny_dataset, tmp_path_factory, write_config) -> dict[str, dict[str, torch.Tensor]]:
    root = tmp_path_factory.mktemp("dist")
    config = write_config(root / "config.yaml", RUNS)
    weights = {}
    for name, changes in RUNS.items():
        _run(config, name, tiny_dataset, root / name, nodes=changes.get("nodes", 1))
        weights[name] = torch.load(root / name / "ckpt/epoch_2.pt", weights_only=True)["model"]
    return weights


@pytest.mark.parametrize("other", ["accum", "ddp", "ddp_accum"])
def test_same_global_batch_gives_the_same_weights(trained, other):
    reference = trained["single"]
    assert reference.keys() == trained[other].keys()
    for key, value in reference.items():
        torch.testing.assert_close(trained[other][key], value, rtol=1e-4, atol=1e-5, msg=key)


def test_training_changed_the_weights(trained, tiny_dataset):
    # guards the comparison above against a run that silently did nothing
    w = trained["single"]
    assert any(v.abs().sum() > 0 for k, v in w.items() if "puzzle_emb" in k)
