"""What each job of a run asks the scheduler for, beyond training (arcpipe.launch.job_resources): the preflight,
the per-checkpoint evaluation and the test-time training jobs. Pure functions of the config, the dataset's size and
the run's doctor record (the forecast's inputs): the Snakefile calls them at plan time, so nothing here imports
torch.

    resources = evaluation_resources(cfg, run_name, Path(paths.RESULTS))   # gpu, mem_mb, shm_mb, runtime
    device    = device_flag(run, gpus)                                 # "--device cuda" or "--device cpu"

Rules of thumb, each a documented default a run can override (docs/configuration.md, "Per-run resources"):
* evaluation and preflight run on GPUs whenever the run trains on GPUs: `eval_gpus` (default 1) and 1 GPU;
* a GPU evaluation's time limit is the forecast's own time for one checkpoint's evaluation job
  (arcpipe.forecast: Forecast.eval_job_hours, the rate its eval GPU-hours bill at; quick_job_hours for a quick
  evaluation's job, on its share of the tasks) x EVAL_SAFETY, plus start-up,
  so a job's limit and the bill cannot disagree; on CPUs (also simulated GPUs) the test split's rows x ACT steps
  at a conservative CPU rate (EVAL_ROW_STEPS_PER_S_CPU), times the same safety, plus start-up;
  `eval_runtime_minutes` overrides either;
* a test-time-training job (`ttt:`) gets one GPU at most, and a limit that covers its share of the forecast's
  test-time training too (`ttt_resources`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from arcpipe import forecast, paths
from arcpipe.config import DatasetConfig, RunConfig, WorkflowConfig

EVAL_ROW_STEPS_PER_S_CPU = 20.0  # test rows x ACT steps per second of one CPU evaluation job
EVAL_SAFETY = 1.5
EVAL_STARTUP_MIN = 15
DEFAULT_ACT_STEPS = 16  # the published presets' halt_max_steps
TASKS_PER_TEST_SET = 400  # ARC-AGI-1 evaluation (ARC-AGI-2's evaluation2 has 120): an upper bound for planning
TEST_PAIRS_PER_TASK = 1.1  # some tasks have 2-3 test inputs


def test_rows(dataset: DatasetConfig, dataset_dir: Path) -> int:
    """Rows of the test split (a CPU evaluation's limit): read from the built dataset when it exists, else an upper
    bound from its config."""
    built = Path(dataset_dir) / "test" / "dataset.json"
    try:
        return int(json.loads(built.read_text())["total_puzzles"])
    except (OSError, ValueError, KeyError):
        tasks = dataset.max_puzzles or TASKS_PER_TEST_SET
        return math.ceil(tasks * TEST_PAIRS_PER_TASK * (dataset.num_aug + 1))


# forecasts of this process by (config, run, its inputs): `snakemake -n full` asks for the resources of every
# evaluation and test-time-training job (thousands of calls, four resources each) of a few runs
_FORECASTS: dict[tuple[Any, ...], tuple[WorkflowConfig, forecast.Forecast]] = {}


def run_forecast(cfg: WorkflowConfig, name: str, results: Path) -> forecast.Forecast:
    """Run `name`'s forecast (the whole run) from the datasets' sizes and its doctor record under `results`: the
    bill whose evaluation and test-time training the jobs' time limits are sized from. The inputs are read on
    every call (a dataset built or a doctor record written since counts), the forecast computed once per inputs."""
    run = cfg.runs[name]
    data = forecast.data_size(run.dataset, cfg.datasets[run.dataset], results)
    answered = forecast.data_size(run.answered_dataset, cfg.datasets[run.answered_dataset], results)
    measured = forecast.doctor_throughput(results, name, run)
    key = (id(cfg), name, data, answered, measured)
    kept = _FORECASTS.get(key)
    if kept is not None and kept[0] is cfg:  # the config itself is kept with it: its id is not reused meanwhile
        return kept[1]
    bill = forecast.forecast_run(cfg, name, data, measured, answered=answered)
    if len(_FORECASTS) >= 256:
        _FORECASTS.clear()
    _FORECASTS[key] = (cfg, bill)
    return bill


def limit_minutes(hours: float) -> int:
    """A job's time limit for `hours` of forecast work: x EVAL_SAFETY, plus start-up, in whole minutes."""
    return EVAL_STARTUP_MIN + math.ceil(EVAL_SAFETY * hours * 60)


def evaluation_runtime(cfg: WorkflowConfig, name: str, results: Path, quick: bool = False) -> int:
    """Minutes for one checkpoint's evaluation (the job's time limit): `eval_runtime_minutes`, else on GPUs the
    forecast's time for the job (`limit_minutes` of Forecast.eval_job_hours, or quick_job_hours for a quick one),
    else on CPUs the test rows x ACT steps at EVAL_ROW_STEPS_PER_S_CPU (a quick one: its share of the tasks)."""
    run = cfg.runs[name]
    quick = quick and cfg.evaluation.quick is not None  # no quick evaluations: every one is full
    if run.eval_runtime_minutes is not None:
        return run.eval_runtime_minutes
    if run.evaluation_gpus and not run.simulate_gpus:
        bill = run_forecast(cfg, name, results)
        return limit_minutes(bill.quick_job_hours if quick else bill.eval_job_hours)
    rows = test_rows(cfg.datasets[run.dataset], paths.under(results, paths.DATA, dataset=run.dataset))
    schedule = cfg.evaluation.quick
    if quick and schedule is not None:
        tasks = forecast.data_size(run.dataset, cfg.datasets[run.dataset], results).test_tasks
        rows = math.ceil(rows * schedule.num_tasks(tasks) / tasks) if tasks else rows
    steps = int(run.arch_overrides.get("halt_max_steps", DEFAULT_ACT_STEPS))
    # varc: one forward pass per answer and `evaluation.canvas_attempts` answers per row (10 by default), each
    # cheaper than one ACT step of a 512-wide TRM (10 layers once against 2 layers 15 times): 16 bounds it
    return EVAL_STARTUP_MIN + math.ceil(EVAL_SAFETY * rows * steps / EVAL_ROW_STEPS_PER_S_CPU / 60)


def evaluation_resources(cfg: WorkflowConfig, name: str, results: Path, quick: bool = False) -> dict[str, int]:
    """A checkpoint's evaluation job (quick: a quick evaluation's, evaluation.quick): its GPUs, memory and limit."""
    gpus = cfg.runs[name].evaluation_gpus
    return {
        "gpu": gpus,
        "mem_mb": 16000 + 8000 * gpus,
        "shm_mb": 2000,
        "runtime": evaluation_runtime(cfg, name, results, quick),
    }


def ttt_resources(cfg: WorkflowConfig, name: str, results: Path) -> dict[str, int]:
    """A test-time-training job of run `name` (eval/ttt.py): an evaluation's resources, but one GPU at most (a job
    fits and answers on one device), and a time limit that also covers the job's share of the run's test-time
    training: `limit_minutes` of the forecast's (forecast.ttt_forecast: its fits, answers and compilation) over its
    jobs. `eval_runtime_minutes` overrides it, as for an evaluation; on CPUs the evaluation's limit stands."""
    run = cfg.runs[name]
    resources = evaluation_resources(cfg, name, results)
    gpus = min(resources["gpu"], 1)
    resources.update(gpu=gpus, mem_mb=16000 + 8000 * gpus)
    if run.ttt is not None and run.eval_runtime_minutes is None and gpus and not run.simulate_gpus:
        bill = run_forecast(cfg, name, results).ttt
        assert bill is not None, name
        resources["runtime"] = max(resources["runtime"], limit_minutes(bill.gpu_hours / bill.jobs))
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
