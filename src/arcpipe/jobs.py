"""What each job of a run asks the scheduler for, beyond training (arcpipe.launch.job_resources): the preflight
and the per-checkpoint evaluation. Pure functions of the config (and, once built, the dataset's size): the
Snakefile calls them at plan time, so nothing here imports torch.

    resources = evaluation_resources(run, dataset_dir)   # gpu, mem_mb, shm_mb, runtime
    device    = device_flag(run, gpus)                   # "--device cuda" or "--device cpu"

Rules of thumb, each a documented default a run can override (docs/configuration.md, "Per-run resources"):
* evaluation and preflight run on GPUs whenever the run trains on GPUs: `eval_gpus` (default 1) and 1 GPU;
* the evaluation's time limit grows with the test split: rows x ACT steps at a conservative rate per GPU
  (EVAL_ROW_STEPS_PER_S), times a safety factor, plus start-up; `eval_runtime_minutes` overrides it;
* a test-time-training job (`ttt:`) gets one GPU at most, and a limit that covers its share of the forecast's
  test-time training too (`ttt_resources`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from arcpipe.config import DatasetConfig, RunConfig, WorkflowConfig

# test rows x ACT steps per second: one GPU (deliberately low for a 512-wide TRM/URM at 16 steps), one CPU job
EVAL_ROW_STEPS_PER_S = {"gpu": 1000.0, "cpu": 20.0}
EVAL_SAFETY = 1.5
EVAL_STARTUP_MIN = 15
DEFAULT_ACT_STEPS = 16  # the published presets' halt_max_steps
TASKS_PER_TEST_SET = 400  # ARC-AGI-1 evaluation (ARC-AGI-2's evaluation2 has 120): an upper bound for planning
TEST_PAIRS_PER_TASK = 1.1  # some tasks have 2-3 test inputs


def test_rows(dataset: DatasetConfig, dataset_dir: Path) -> int:
    """Rows of the test split: read from the built dataset when it exists, else an upper bound from its config."""
    built = Path(dataset_dir) / "test" / "dataset.json"
    try:
        return int(json.loads(built.read_text())["total_puzzles"])
    except (OSError, ValueError, KeyError):
        tasks = dataset.max_puzzles or TASKS_PER_TEST_SET
        return math.ceil(tasks * TEST_PAIRS_PER_TASK * (dataset.num_aug + 1))


def evaluation_runtime(run: RunConfig, rows: int) -> int:
    """Minutes for one checkpoint's evaluation (the job's time limit)."""
    if run.eval_runtime_minutes is not None:
        return run.eval_runtime_minutes
    steps = int(run.arch_overrides.get("halt_max_steps", DEFAULT_ACT_STEPS))
    # varc: one forward pass per answer and `evaluation.canvas_attempts` answers per row (10 by default), each
    # cheaper than one ACT step of a 512-wide TRM (10 layers once against 2 layers 15 times): 16 bounds it
    gpus = run.evaluation_gpus
    rate = EVAL_ROW_STEPS_PER_S["gpu"] * gpus if gpus and not run.simulate_gpus else EVAL_ROW_STEPS_PER_S["cpu"]
    return EVAL_STARTUP_MIN + math.ceil(EVAL_SAFETY * rows * steps / rate / 60)


def evaluation_resources(run: RunConfig, dataset: DatasetConfig, dataset_dir: Path) -> dict[str, int]:
    gpus = run.evaluation_gpus
    return {
        "gpu": gpus,
        "mem_mb": 16000 + 8000 * gpus,
        "shm_mb": 2000,
        "runtime": evaluation_runtime(run, test_rows(dataset, dataset_dir)),
    }


def ttt_resources(cfg: WorkflowConfig, name: str, dataset_dir: Path, results: Path) -> dict[str, int]:
    """A test-time-training job of run `name` (eval/ttt.py): an evaluation's resources, but one GPU at most (a job
    fits and answers on one device), and a time limit that also covers the job's share of the run's test-time
    training: the forecast's (forecast.ttt_forecast: its fits, answers and compilation) x EVAL_SAFETY, plus start-up.
    `eval_runtime_minutes` overrides it, as for an evaluation; on CPUs the evaluation's limit stands."""
    from arcpipe import forecast  # the TTT cost model; forecast is a layer below this module

    run = cfg.runs[name]
    resources = evaluation_resources(run, cfg.datasets[run.dataset], dataset_dir)
    gpus = min(resources["gpu"], 1)
    resources.update(gpu=gpus, mem_mb=16000 + 8000 * gpus)
    if run.ttt is not None and run.eval_runtime_minutes is None and gpus and not run.simulate_gpus:
        bill = forecast.forecast_run(
            cfg,
            name,
            forecast.data_size(run.dataset, cfg.datasets[run.dataset], results),
            forecast.doctor_throughput(results, name, run),
            answered=forecast.data_size(run.answered_dataset, cfg.datasets[run.answered_dataset], results),
        ).ttt
        assert bill is not None, name
        minutes = bill.gpu_hours * 60 / bill.jobs
        resources["runtime"] = max(resources["runtime"], EVAL_STARTUP_MIN + math.ceil(EVAL_SAFETY * minutes))
    return resources


def preflight_resources(run: RunConfig) -> dict[str, int]:
    """A few steps at the run's per-device micro-batch on one device: one GPU when the run trains on GPUs."""
    gpus = min(run.gpus_per_node, 1)
    return {"gpu": gpus, "mem_mb": 16000 + 8000 * gpus, "shm_mb": 2000, "runtime": 30}


def device_flag(run: RunConfig, gpus: int) -> str:
    return "--device cuda" if gpus > 0 and not run.simulate_gpus else "--device cpu"


def evaluation_launch(run: RunConfig) -> str:
    """ "" for one process; a torchrun prefix when a run evaluates on several GPUs (one node)."""
    gpus = run.evaluation_gpus
    return f"torchrun --standalone --nproc-per-node={gpus} --no-python --" if gpus > 1 else ""


def partition_problems(wanted: dict[str, set[str]], available: set[str], profile_hint: str) -> list[str]:
    """One line per partition the planned jobs name that the scheduler lacks: `wanted` maps partition -> rules."""
    return [
        f"slurm_partition={name!r} (rules {', '.join(sorted(rules))}) is not a partition of this cluster "
        f"(partitions: {', '.join(sorted(available)) or 'none'}); set your site's partitions in {profile_hint}"
        for name, rules in sorted(wanted.items())
        if name not in available
    ]


def slurm_partitions() -> set[str] | None:
    """The partitions `sinfo` lists (None when sinfo cannot be asked)."""
    import subprocess

    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%R"], capture_output=True, text=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return set(out.stdout.split())
