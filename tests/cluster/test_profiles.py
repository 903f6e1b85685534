"""Static checks of the profiles, envs/ and the lab scripts, and the cluster plans of the real workflow.

`snakemake -n full` through profiles/ice and profiles/slurm must plan the same jobs as a plain dry run (every
segment, every evaluation and the full runs' report) on a machine with neither cluster (no kubectl call, no SLURM
needed for a dry run). How long a plan takes is measured by benchmarks/plan.py, not here: a test holds on any machine.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from clusterlib import ROOT, VENV_BIN, base_env

PROFILES = ROOT / "profiles"
PLATFORMS = ["ice", "slurm", "local"]
GPU_KEYS = {"gpu", "gpus", "gpus_per_node", "nodes", "gres", "gpu_model", "tasks", "mpi"}


def profile(name: str) -> dict[str, Any]:
    return yaml.safe_load((PROFILES / name / "config.yaml").read_text())


def test_workflow_profile_sets_only_shared_keys() -> None:
    default = profile("default")
    assert default["cores"] == "all"  # plain `snakemake smoke` needs it
    forbidden = {"executor", "jobs", "default-resources", "resources", "profile"}
    assert not forbidden & set(default), "these would replace the platform profile's keys"
    assert not [k for k in default if k.startswith(("slurm-", "cluster-generic-", "kubernetes-"))]


@pytest.mark.parametrize("name", [*PLATFORMS, "default"])
def test_no_profile_sets_gpu_counts(name: str) -> None:
    config = profile(name)
    sections = [config.get("default-resources", {}), config.get("resources", {})]
    sections += list((config.get("set-resources") or {}).values())
    for section in sections:
        assert not GPU_KEYS & set(section), f"profiles/{name}: GPU counts come from each run's config"
    assert "--gpus" not in yaml.safe_dump(config) and "gres" not in yaml.safe_dump(config)


def test_cluster_profiles_name_their_executor_and_the_ice_programs_are_executable() -> None:
    assert profile("ice")["executor"] == "cluster-generic"
    assert profile("slurm")["executor"] == "slurm"
    for key in ("cluster-generic-submit-cmd", "cluster-generic-status-cmd", "cluster-generic-cancel-cmd"):
        program = PROFILES / "ice" / profile("ice")[key]
        assert program.is_file() and os.access(program, os.X_OK), program


def test_slurm_status_command_is_not_left_to_sacct_without_accounting() -> None:
    # the plugin falls back to sacct when MinJobAge < 3 x init seconds; without slurmdbd sacct hangs the run. The
    # CI lab runs the real profiles/slurm, so its MinJobAge must allow squeue, as Slurm's default (300 s) does
    hpc = profile("slurm")
    assert hpc["slurm-status-command"] == "squeue"
    min_job_age = int(re.search(r"^MinJobAge=(\d+)$", (ROOT / "cluster/slurm/lab-up.sh").read_text(), re.M)[1])
    assert min_job_age >= 3 * hpc["slurm-init-seconds-before-status-checks"]
    assert 3 * hpc["slurm-init-seconds-before-status-checks"] <= 300  # Slurm's default MinJobAge


def test_the_slurm_profile_puts_every_gpu_job_on_the_gpu_partition() -> None:
    # the workflow profile sets no set-resources, so these survive (reference: set-resources do not merge)
    assert "set-resources" not in profile("default") and "set-threads" not in profile("default")
    hpc = profile("slurm")
    assert hpc["default-resources"]["slurm_partition"] == "cpu"
    for rule in ("train_segment", "run_preflight", "evaluate_checkpoint"):
        assert hpc["set-resources"][rule]["slurm_partition"] == "gpu", rule


def test_conda_env_pins_what_pyproject_requires() -> None:
    env = yaml.safe_load((ROOT / "envs/arcpipe.yaml").read_text())
    assert env["channels"][-1] == "nodefaults"
    conda = [d for d in env["dependencies"] if isinstance(d, str)]
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    python = next(d for d in conda if d.startswith("python="))
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    floor = re.search(r">=\s*3\.(\d+)", pyproject["requires-python"])[1]
    assert int(python.split("=")[1].split(".")[1]) >= int(floor)
    pins = dict(line.split("==") for line in pip if "==" in line)
    for requirement in pyproject["dependencies"]:
        name = re.match(r"[A-Za-z0-9_.-]+", requirement)[0].lower()
        assert name in pins, f"envs/arcpipe.yaml does not pin {name}"
        exact = re.search(r"==\s*([\w.]+)", requirement)
        if exact:
            assert pins[name] == exact[1], f"{name}: pyproject pins {exact[1]}, envs/arcpipe.yaml {pins[name]}"
    assert any(line.startswith("arcpipe @ ") for line in pip)


def test_dockerfile_builds_the_kernels_for_a100_and_h100_with_kubectl() -> None:
    text = (ROOT / "cluster/Dockerfile").read_text()
    assert re.search(r'TORCH_CUDA_ARCH_LIST="8\.0;9\.0"', text)
    assert "torch==2.13.0" in text and "flash-attn" in text and "adam-atan2" in text and "kubectl" in text


def plan(workdir: Path, args: list[str]) -> str:
    """The stdout of `snakemake -n full ARGS` in workdir."""
    done = subprocess.run(
        [str(VENV_BIN / "snakemake"), "-s", str(ROOT / "Snakefile"), "-n", "full", *args],
        cwd=workdir,
        env=base_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout


def job_stats(output: str) -> dict[str, int]:
    table = output.split("Job stats:")[1].split("\n\n")[0]
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M)}


@pytest.fixture(scope="module")
def plan_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh working directory with the repository's config: nothing built, so the plan is every full job."""
    work = tmp_path_factory.mktemp("plan")
    shutil.copytree(ROOT / "config", work / "config")
    return work


@pytest.fixture(scope="module")
def plain_plan(plan_dir: Path) -> dict[str, int]:
    return job_stats(plan(plan_dir, []))


@pytest.mark.skipif(not (ROOT / "Snakefile").exists(), reason="no workflow yet")
def test_the_full_plan_has_every_segment_evaluation_and_the_report(plan_dir: Path, plain_plan: tuple) -> None:
    from arcpipe.config import validate_config

    cfg = validate_config(yaml.safe_load((ROOT / "config/config.yaml").read_text()), source="config/config.yaml")
    # a gated run's jobs are planned once its gate passed (rule check_gate, a Snakemake checkpoint)
    gated = [run for run in cfg.runs_for("full") if cfg.runs[run].gate is not None]
    ungated = [run for run in cfg.runs_for("full") if run not in gated]
    boundaries = sum(len(cfg.runs[run].boundaries()) for run in ungated)
    runs = len(ungated)
    stats = plain_plan
    assert stats["train_segment"] == stats["evaluate_checkpoint"] == boundaries > 0
    assert stats.get("check_gate", 0) == len(gated)
    assert stats["run_preflight"] == stats["write_run_config"] == runs
    # the report of the full runs is planned from the config: no checkpoint on disk is needed to see it
    assert stats["render_full_report"] == stats["pool_full_votes"] == stats["render_full_task_pages"] == 1
    assert not (plan_dir / "results").exists()


@pytest.mark.skipif(not (ROOT / "Snakefile").exists(), reason="no workflow yet")
@pytest.mark.parametrize("name", ["ice", "slurm"])
def test_cluster_profiles_plan_every_full_job(name: str, plan_dir: Path, plain_plan: dict[str, int]) -> None:
    assert plain_plan.get("train_segment", 0) > 0 and plain_plan.get("render_full_report") == 1
    # every segment, evaluation and the report job, as without a profile
    assert job_stats(plan(plan_dir, ["--profile", str(PROFILES / name)])) == plain_plan


def test_install_profiles_links_them_where_snakemake_looks(tmp_path: Path) -> None:
    env = base_env(HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path / "xdg"))
    subprocess.run(["bash", str(ROOT / "cluster/install-profiles.sh")], env=env, check=True, capture_output=True)
    for name in PLATFORMS:
        assert (tmp_path / "xdg/snakemake" / name).resolve() == PROFILES / name
    subprocess.run(["bash", str(ROOT / "cluster/install-profiles.sh"), "--remove"], env=env, check=True)
    assert not list((tmp_path / "xdg/snakemake").iterdir())


def test_profile_lookup_by_name_after_install(tmp_path: Path) -> None:
    env = base_env(XDG_CONFIG_HOME=str(tmp_path / "xdg"))
    subprocess.run(["bash", str(ROOT / "cluster/install-profiles.sh")], env=env, check=True, capture_output=True)
    probe = "from snakemake.cli import get_profile_dir; import sys; print(get_profile_dir(sys.argv[1])[0].resolve())"
    out = subprocess.run(
        [str(VENV_BIN / "python"), "-c", probe, "ice"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert out.stdout.strip() == str(PROFILES / "ice")
