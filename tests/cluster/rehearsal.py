"""The rehearsal's parts shared by its two tests: the SLURM one (test_slurm_lab.py, with the other tests on the lab,
so that one pytest worker owns the lab) and the ICE one (test_rehearsal.py). What the rehearsal checks:
test_rehearsal.py's docstring.

Each rehearsal runs the `full` target of a subset of the published runs (`subset` tags the others `smoke`, so that
`full` leaves them out; no other field changes, so a run's resolved config, and its weights, are the same in both):
between them every training shape on both profiles and both datasets. ICE_RUNS are the staged scenario (urm-arc1-
validate's stop decision and urm-arc1's gate on it), a multi-node Indexed Job (hrm-arc1, offline W&B on every rank)
and the group job the driver is killed in (urm-arc2); SLURM_RUNS one run of each training shape. What the plan
decides (which boundaries train, the stop decision, the gate) is the same through either profile, so the ICE
rehearsal checks it once. The runs neither rehearses (trm-arc1, trm-arc2-kaggle: shapes and fields the others have)
add jobs of the same kinds and shapes: tests/cluster/test_profiles.py plans every job of the whole `full` target
through both profiles, and test_ice_manifests.py renders each kind of Job."""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from clusterlib import ROOT, VENV_BIN, base_env, snakemake
from once import once_per_session

from arcpipe import plan
from arcpipe.config import WorkflowConfig

COPIED = ["Snakefile", "rules", "config", "workflow", "profiles", "envs"]
REHEARSAL = ["--configfile", "config/config.yaml", "config/rehearsal.yaml"]
GPU_RULES = {"train_segment", "run_preflight", "evaluate_checkpoint"}
CPU_RULES = {"build_dataset", "verify_dataset", "render_full_report", "pool_full_votes", "render_full_task_pages"}


# The SLURM rehearsal's runs, one of each training shape on SLURM: urm-arc2 (1 node x 2 GPUs, torchrun
# --standalone, one group job of two checkpoints: the job the driver is killed in), hrm-arc1 (2 nodes x 1 GPU: srun
# and torchrun on both lab nodes, two segments, offline W&B on every rank) and trm-arc2 (1 GPU, one process); their
# datasets are both of the rehearsal's, so every CPU stage (build, verify, pooled votes, report) runs on SLURM too.
SLURM_RUNS = ("hrm-arc1", "trm-arc2", "urm-arc2")
# The ICE rehearsal's: the staged pair (urm-arc1-validate on 1 GPU, its stop decision; urm-arc1 on 1 node x 2 GPUs,
# its gate, two group jobs), hrm-arc1 (an Indexed Job of two pods and a headless Service) and urm-arc2 (killed in):
# every shape and both datasets again. Every job of the whole `full` target (44 before the gate adds urm-arc1's) ran
# here until the CI time was cut; the three runs left out (trm-arc1, trm-arc2, trm-arc2-kaggle) took 12 of its jobs.
ICE_RUNS = ("hrm-arc1", "urm-arc1", "urm-arc1-validate", "urm-arc2")


def rehearsal_config(*overlays: dict) -> WorkflowConfig:
    """config/config.yaml with config/rehearsal.yaml and `overlays` merged over it, as Snakemake merges them."""
    from snakemake.utils import update_config

    config = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    for overlay in (yaml.safe_load((ROOT / "config/rehearsal.yaml").read_text()), *overlays):
        update_config(config, overlay)
    return WorkflowConfig.model_validate(config)


def subset(runs: tuple[str, ...]) -> dict:
    """The overlay that leaves `runs` alone in the `full` target: every other full run tagged `smoke` (no other field
    changes, so the runs' resolved configs, and urm-arc2's weights, are the same in both rehearsals)."""
    full = rehearsal_config().runs_for("full")
    assert set(runs) <= set(full), full
    return {"runs": {name: {"target": "smoke"} for name in full if name not in runs}}


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


def assert_every_full_job_finished(work: Path, cfg: WorkflowConfig) -> dict[str, plan.RunPlan]:
    """Every boundary the plan trains (by the records on disk: a stop rule's decisions, a gate) has its checkpoint
    and due evaluations, none that it does not train has, no record is still awaited, and the full report is
    written. Returns the plans."""
    plans = plan.plans(cfg, plan.DiskRecords(work / "results"), cfg.runs_for("full"))
    assert plans.keys() == set(cfg.runs_for("full")), plans.keys()
    for name, p in plans.items():
        assert p.final, (name, p.waiting)
        assert (work / f"results/runs/{name}/preflight.json").is_file()
        for epoch in p.planned:
            trained = epoch in p.trained
            assert (work / f"results/runs/{name}/ckpt/epoch_{epoch}.pt").is_file() == trained, (name, epoch)
            due = epoch in p.full
            assert (work / f"results/eval/{name}/epoch_{epoch}/metrics.json").is_file() == due, (name, epoch)
    for table in ("passk.md", "pooled.md", "comparison.md"):
        assert (work / "results/report/full" / table).is_file()
    # its task pages: the front page, the task index and a page per answered task of every run (report/answers.py)
    front = (work / "results/report/full/index.html").read_text()
    assert "tasks/index.html" in front and "passk.html" in front
    index = (work / "results/report/full/tasks/index.html").read_text()
    assert all(name in index for name in plans), [name for name in plans if name not in index]
    assert len(list((work / "results/report/full/tasks").glob("*.html"))) > 1
    return plans


def assert_the_staged_runs_decided(plans: dict[str, plan.RunPlan]) -> None:
    """The staged scenario of the whole `full` target: urm-arc1-validate's stop decision was made and urm-arc1's
    gate opened on it (the ICE rehearsal; the plan decides the same through either profile)."""
    assert plans["urm-arc1"].gate is not None and plans["urm-arc1"].gate.state == "open"
    assert plans["urm-arc1-validate"].decisions == (2,)  # the stop decision was made (stop or go on: the curve's)


def expected_gpus(cfg: WorkflowConfig, rule: str, run: str) -> int:
    r = cfg.runs[run]
    return {"train_segment": r.nodes * r.gpus_per_node, "run_preflight": 1, "evaluate_checkpoint": r.evaluation_gpus}[
        rule
    ]


# The training job the driver is killed in: urm-arc2's group job (two segments on 2 GPUs and their two
# evaluations, the longest job of a run without a gate: the uninterrupted reference of a gated run would train its
# gate run too), so that it still runs when the new driver takes over, seconds later, and the takeover cancels
# it; a one-segment job on one process can end in that time.
KILLED_IN = "urm-arc2-segment"


# A driver whose log and whose scheduler's jobs have not changed for this long has stalled: the test fails then,
# with the driver's last lines and every job's state, instead of at its deadline (a whole rehearsal takes 3-5 min)
STALL_S = 180


def kill_driver_while_training(
    work: Path,
    args: list[str],
    env: dict,
    training: callable,
    jobs: callable = lambda: "",
    timeout_s: int = 900,
) -> str:
    """Start `snakemake ARGS` in its own process group; SIGKILL the whole group at a random moment while a
    training job runs on the scheduler (`training()` names it, or None). Returns the job that was running.

    `jobs()` describes the scheduler's jobs (one line each: name and state): when neither it nor the driver's log
    changed for STALL_S seconds, or the driver ended first, the test fails with both."""
    driver_log = work / "killed-driver.log"
    with open(driver_log, "w") as log:
        proc = subprocess.Popen(
            [str(VENV_BIN / "snakemake"), *args], cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + timeout_s
            wait = random.uniform(0, 3)  # a random moment inside a segment
            first = running = None
            seen, changed = None, time.monotonic()
            while time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.5)
                running = training()
                if running is not None and first is None:
                    first = time.monotonic()
                if running is not None and time.monotonic() - first >= wait:
                    break  # still training at the moment of the kill
                now = (driver_log.stat().st_size, jobs())
                if now != seen:
                    seen, changed = now, time.monotonic()
                elif time.monotonic() - changed > STALL_S:
                    break
            if not running:
                why = (
                    f"the driver ended (rc {proc.returncode})"
                    if proc.poll() is not None
                    else f"nothing changed for {STALL_S} s"
                    if time.monotonic() < deadline
                    else f"the deadline of {timeout_s} s passed"
                )
                tail = "\n".join(driver_log.read_text().splitlines()[-60:])
                raise AssertionError(
                    f"no {KILLED_IN} training job ran: {why}.\nthe scheduler's jobs:\n{jobs()}\n"
                    f"the driver's last lines:\n{tail}"
                )
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return running


def final_weights(work: Path, run: str, epoch: int) -> dict:
    import torch

    return torch.load(work / f"results/runs/{run}/ckpt/epoch_{epoch}.pt", map_location="cpu", weights_only=True)[
        "model"
    ]


def assert_equals_an_uninterrupted_run(
    factory: pytest.TempPathFactory, worker_id: str, work: Path, cfg: WorkflowConfig, run: str
) -> None:
    """The run's last checkpoint equals, bitwise, the same run trained in one uninterrupted local Snakemake call.

    The reference starts from a rehearsal's built dataset and the run's config and preflight (copied with their
    times, so Snakemake takes them as made): it trains on the same bytes, and only the training is done again. Both
    rehearsals kill the same run, so the reference is trained once per session (tests/once.py), from the first
    rehearsal that gets here; the other checks that it trained from the same bytes (the dataset's files and the
    run's training config; the preflight's record is no input of training) before comparing."""
    import torch

    def make() -> dict:
        reference = workdir(factory.mktemp("reference"))
        dataset = cfg.runs[run].dataset
        shutil.copytree(work / f"results/data/{dataset}", reference / f"results/data/{dataset}")
        (reference / f"results/runs/{run}").mkdir(parents=True)
        for name in ("config.yaml", "preflight.json"):
            shutil.copy2(work / f"results/runs/{run}/{name}", reference / f"results/runs/{run}/{name}")
        target = f"results/runs/{run}/ckpt/epoch_{cfg.runs[run].epochs}.pt"
        done = snakemake(["--cores", "2", target, *REHEARSAL], reference, base_env(), 900)
        tail = done.stdout[-3000:]
        assert done.returncode == 0, tail
        assert "rule build_dataset:" not in done.stdout and "rule run_preflight:" not in done.stdout, tail
        return {"work": str(reference), "inputs": training_inputs(reference, cfg, run)}

    made = once_per_session(factory, worker_id, f"rehearsal-reference-{run}", make)
    reference = Path(made["work"])
    assert training_inputs(work, cfg, run) == made["inputs"], f"{run}: trained from other bytes than the reference"
    last = cfg.runs[run].epochs
    got, want = final_weights(work, run, last), final_weights(reference, run, last)
    assert got.keys() == want.keys()
    for key in want:
        assert torch.equal(got[key], want[key]), f"{run}: {key} differs from an uninterrupted run"


def training_inputs(work: Path, cfg: WorkflowConfig, run: str) -> dict[str, str]:
    """sha256 of what training `run` reads: its dataset's files (not the build and verification records: they hold
    times) and its training config."""
    dataset = work / f"results/data/{cfg.runs[run].dataset}"
    paths = [p for p in sorted(dataset.rglob("*")) if p.is_file() and p.name not in ("build.json", "verify.json")]
    paths.append(work / f"results/runs/{run}/config.yaml")
    return {str(p.relative_to(work)): hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}
