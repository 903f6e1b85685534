"""The real `smoke` target through `--executor slurm` on the lab SLURM, with one 2-node training segment, and the
W&B key kept out of every file the run creates or changes.

The workflow (Snakefile, rules/, config/, workflow/, profiles/) is copied into a fresh directory, so the run
starts from nothing. A 2-node CPU run (gloo) is added through a second config file unless config.yaml already
has a smoke run with nodes > 1. HOME and TMPDIR point into the test's directory, so every file the run touched
there (.netrc included) is searched for the sentinel key, along with results/, logs/, .snakemake/ and wandb/.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from clusterlib import ROOT, SENTINEL, base_env, files_containing, snakemake

# 15.7 min measured on a 2-core machine shared with other heavy jobs (load 7-11); CI has the machine to itself
pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(1800)]
COPIED = ["Snakefile", "rules", "config", "workflow", "profiles", "envs"]


def test_smoke_with_a_two_node_segment_through_slurm_leaks_no_key(tmp_path: Path, slurm_lab: None) -> None:
    work, home, tmp = tmp_path / "work", tmp_path / "home", tmp_path / "tmp"
    work.mkdir()
    for name in COPIED:
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy2
        copy(ROOT / name, work / name)
    home.mkdir()
    tmp.mkdir()
    config = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    smoke_runs = {name: run for name, run in config["runs"].items() if run["target"] == "smoke"}
    configfiles = ["config/config.yaml"]
    if not any(run.get("nodes", 1) > 1 for run in smoke_runs.values()):
        name, run = next(iter(smoke_runs.items()))
        two_node = {**run, "nodes": 2, "gpus_per_node": 0, "epochs": run["eval_interval"]}  # one segment
        (work / "two-node.yaml").write_text(yaml.safe_dump({"runs": {f"{name}-2node": two_node}}))
        configfiles.append("two-node.yaml")

    env = base_env(WANDB_API_KEY=SENTINEL, WANDB_MODE="offline", HOME=str(home), TMPDIR=str(tmp))
    args = ["--configfile", *configfiles, "--profile", str(ROOT / "profiles/slurm"), "smoke"]
    done = snakemake(args, work, env, timeout_s=1700)
    assert done.returncode == 0, done.stdout[-5000:]
    assert "--ntasks-per-node=1" in done.stdout  # the 2-node segment went through srun + torchrun

    leaks = files_containing(work, SENTINEL) + files_containing(home, SENTINEL) + files_containing(tmp, SENTINEL)
    assert leaks == []
    scripts = [
        p for p in Path("/var/lib/arcpipe-slurm-lab/ctld").rglob("script") if SENTINEL.encode() in p.read_bytes()
    ]
    assert scripts == []
