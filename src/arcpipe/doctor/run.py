"""One run on this machine: its shape against the GPUs here, its code paths, /dev/shm, and (unless skipped) its
measured steps (a `ttt:` run's test-time-training step too, timed by the `ttt_step` the command hands in) and
largest micro-batch; the rows `arcpipe doctor` prints for it and one line per problem."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from arcpipe.config import RunConfig, WorkflowConfig, compiles
from arcpipe.config.arch import VARC_ARCHS
from arcpipe.doctor.backends import backends, compile_check, first_calls
from arcpipe.doctor.measure import (
    ARC_SEQ_LEN,
    ARC_VOCAB,
    OutOfMemory,
    eval_figures,
    fitting_micro_batch,
    largest_micro_batch,
    puzzle_identifiers,
    step_figures,
)
from arcpipe.doctor.memory import (
    CONTEXT_BYTES,
    MARGIN,
    assumed_throughput,
    cache_path,
    fit_problem,
    gpu_plan,
    run_memory,
)
from arcpipe.doctor.shm import shm_need_mb, shm_problem
from arcpipe.files import atomic_write_many
from arcpipe.gpus import doctor_record, doctor_record_path

# times a `ttt:` run's test-time-training step: (run, arch config, device, views, compiled) -> figures
# (eval/ttt_measure.ttt_step_figures: evaluation's code, a layer above the doctor, so the command passes it in)
TTTStep = Callable[[RunConfig, Any, Any, int, bool], dict[str, Any]]


@dataclass
class RunCheck:
    name: str
    rows: list[tuple[str, str]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)


def check_run(
    cfg: WorkflowConfig,
    name: str,
    env: dict[str, Any],
    results: Path,
    measure: bool = True,
    ttt_step: TTTStep | None = None,
) -> RunCheck:
    import torch

    from arcpipe.config.arch import make_arch_config

    run = cfg.runs[name]
    check = RunCheck(name)
    shape = f"{run.nodes} node(s) x {run.gpus_per_node} GPU(s)" + (" (simulated on CPU)" if run.simulate_gpus else "")
    check.rows.append(("shape", f"{run.arch}/{run.preset}, {shape}, micro-batch {run.micro_batch}"))
    if run.cuda and not env["cuda"]:
        check.problems.append(
            f"run {name} trains on {run.num_devices} GPU(s) but CUDA is not available here "
            f"(torch {env['torch']}); run it on a GPU machine, or gpus_per_node: 0 for CPU"
        )
        device = None
    elif run.cuda and run.gpus_per_node > len(env["gpus"]) and run.nodes == 1:
        check.problems.append(
            f"run {name} needs {run.gpus_per_node} GPUs on one node; this machine has {len(env['gpus'])}"
        )
        device = torch.device("cuda", 0)
    else:
        device = torch.device("cuda", 0) if run.cuda else torch.device("cpu")

    probe_device = device or torch.device("cpu")
    paths = backends(run, probe_device)
    where = "" if device is not None else " (on CPU; no CUDA here)"
    check.rows.append(("attention", f"{paths['attention']}: {paths['attention_why']}{where}"))
    check.rows.append(("optimizer", f"{paths['optimizer']}: {paths['optimizer_why']}{where}"))
    if device is None:  # what the run would do on its GPUs; nothing to check here
        paths["compile"] = "on (on CUDA)" if compiles(run.compile, "cuda" if run.cuda else "cpu") else "off"
    elif paths["compile"] == "on":
        if env["compile"] is None:  # a CPU run that asks for compile: checked on the CPU
            env["compile"] = compile_check(str(device))
        if not env["compile"]["usable"]:
            check.problems.append(
                f"run {name} compiles but torch.compile fails here ({env['compile']['error']}); "
                f"set runs.{name}.compile: false"
            )
    check.rows.append(("compile", paths["compile"] + _compile_note(env, paths["compile"])))
    if device is not None:
        check.problems += [f"run {name}: {p}" for p in first_calls(device)]
    check.figures["backends"] = paths

    need = shm_need_mb(run)
    if need:
        have = env["shm_mb"]["free"] if env["shm_mb"] else 0.0
        check.rows.append(("/dev/shm", f"{have:.0f} MB free, the run's {run.gpus_per_node} GPU processes need {need}"))
        problem = shm_problem(run, name, env["shm_mb"])
        if problem:
            check.problems.append(problem)
    else:
        check.rows.append(("/dev/shm", "not used (one GPU process per node, or CPU)"))

    arch_cfg = make_arch_config(run.arch, run.preset, run.arch_overrides)
    ids, ids_note = puzzle_identifiers(cfg, run, results)
    check.figures["num_puzzle_identifiers"] = ids
    if not measure:
        return check
    if device is None:
        check.rows.append(("train step", "no CUDA: not measured"))
        check.rows.append(("eval step", "no CUDA: not measured"))
        if run.ttt is not None and run.arch in VARC_ARCHS:
            check.rows.append(("ttt step", "no CUDA: not measured"))
        return check
    # the run's training and evaluation steps compile here (on CUDA, or asked for), and torch.compile works
    compiles_here = paths["compile"] == "on" and (env["compile"] or {}).get("usable", False)
    try:
        train = step_figures(run, arch_cfg, device, run.micro_batch, ids)
        check.rows.append(
            ("train step", f"{train['examples_per_s']:.1f} examples/s, peak {_gb(train['peak_gb'])} "
             f"at micro-batch {run.micro_batch} ({paths['dtype']}, eager, {ids:,} puzzle ids{ids_note})")
        )  # fmt: skip
        check.figures["train"] = train
        if device.type == "cuda":  # the true peak beside the memory model's, so that the model can be corrected
            model = run_memory(run, ids).peak_bytes(run.micro_batch) / 2**30
            check.figures["train"]["model_peak_gb"] = model
            check.rows.append(
                ("memory model", f"{model:.2f} GB at micro-batch {run.micro_batch}; measured {train['peak_gb']:.2f} "
                 f"GB, measured/model {train['peak_gb'] / model:.2f}")
            )  # fmt: skip
        if compiles_here:  # what the run trains with: the record (and so the forecast) takes its examples/s
            compiled = check.figures["train_compiled"] = step_figures(
                run, arch_cfg, device, run.micro_batch, ids, compiled=True
            )
            check.rows.append(
                ("train compiled", f"{compiled['examples_per_s']:.1f} examples/s, peak {_gb(compiled['peak_gb'])} "
                 f"({compiled['examples_per_s'] / train['examples_per_s']:.2f}x eager)")
            )  # fmt: skip
            train = train | {"examples_per_s": compiled["examples_per_s"], "compiled": True}
    except OutOfMemory:
        train = None
        check.rows.append(("train step", f"out of memory at micro-batch {run.micro_batch}"))
    evaluation = eval_figures(run, arch_cfg, device, ids, compiled=compiles_here)
    check.figures["eval"] = evaluation
    check.rows.append(
        ("eval step", f"{evaluation['examples_per_s']:.1f} examples/s at batch {evaluation['batch']} "
         f"({evaluation['act_steps']} ACT steps, {'compiled' if compiles_here else 'eager'}), "
         f"peak {_gb(evaluation['peak_gb'])}")
    )  # fmt: skip
    ttt = _ttt_step(cfg, name, device, compiles_here, ttt_step, check)
    if device.type == "cuda" and train is not None:
        check.rows.append(("record", _record(results, name, run, env, train, evaluation, ttt)))
    if device.type != "cuda":
        check.rows.append(("largest micro-batch", "searched on CUDA only"))
        return check
    fit, probes = largest_micro_batch(run, arch_cfg, device, ids)
    check.figures["largest_micro_batch"] = fit
    check.figures["micro_batch_probes"] = probes
    check.rows.append(
        ("probes", ", ".join(f"{b}: " + ("out of memory" if p == float("inf") else f"{p:.2f} GB") for b, p in probes))
    )
    if fit == 0:
        memory = env["gpus"][0]["memory_gb"]
        check.problems.append(
            f"run {name}: not even a micro-batch of 1 fits this GPU ({memory:.0f} GB); use a larger GPU"
        )
        return check
    suggestion = fitting_micro_batch(run, fit)
    verdict = "fits" if train is not None and run.micro_batch <= fit else "does not fit"
    check.rows.append(
        ("largest micro-batch", f"{fit} on this GPU; the run's {run.micro_batch} {verdict}; "
         f"micro_batch_size: {suggestion} reaches global_batch_size {run.global_batch_size} with "
         f"{run.global_batch_size // (run.num_devices * suggestion)} accumulation step(s)")
    )  # fmt: skip
    if verdict == "does not fit":
        check.problems.append(
            f"run {name}: micro-batch {run.micro_batch} does not fit this GPU (at most {fit}); "
            f"set runs.{name}.micro_batch_size: {suggestion}"
        )
    return check


def plan_run(cfg: WorkflowConfig, name: str, results: Path, gpus: list[str]) -> RunCheck:
    """`arcpipe doctor --gpu`: on each named GPU, without it, by the memory model (arcpipe.doctor.memory): the
    largest micro-batch that fits the run with the margin, the micro_batch_size and accumulation that keep its
    global batch, and the assumed examples/s (the forecast's figure when no doctor record exists)."""
    from arcpipe.config.arch import make_arch_config
    from arcpipe.models.flops import eval_flops_per_step, train_flops_per_example

    run = cfg.runs[name]
    check = RunCheck(name)
    ids, ids_note = puzzle_identifiers(cfg, run, results)
    memory = run_memory(run, ids, cache_path(results))  # kept for config check and every plan
    per_device = run.global_batch_size // max(run.num_devices, 1)
    check.rows.append(
        ("shape", f"{run.arch}/{run.preset}, {run.num_devices} device(s), global batch {run.global_batch_size} "
         f"({per_device} per device), micro-batch {run.micro_batch}, {ids:,} puzzle ids{ids_note}")
    )  # fmt: skip
    check.rows.append(
        ("memory model", f"{memory.fixed_bytes / 2**30:.2f} GiB fixed + {memory.per_example_bytes / 2**20:.1f} MiB "
         f"per example (bf16 forward, {run.optimizer}{', EMA' if run.ema else ''}); fits with peak x "
         f"{1 + MARGIN:.2f} + {CONTEXT_BYTES / 2**30:.1f} GiB")
    )  # fmt: skip
    arch = make_arch_config(run.arch, run.preset, run.arch_overrides)
    train_row = train_flops_per_example(arch, ARC_SEQ_LEN, ARC_VOCAB).total
    eval_row = eval_flops_per_step(arch, ARC_SEQ_LEN, ARC_VOCAB).total
    plans = {}
    for gpu in gpus:
        plan = gpu_plan(memory, gpu, per_device)
        train_rate, _, _ = assumed_throughput(gpu, train_row, eval_row)
        plans[gpu] = {**plan.__dict__, "train_examples_per_s": train_rate}
        if not plan.micro_batch:
            check.rows.append((gpu, "not even a micro-batch of 1 fits"))
            check.problems.append(f"run {name}: not even a micro-batch of 1 fits {gpu}")
            continue
        check.rows.append(
            (gpu, f"largest micro-batch {plan.largest}; micro_batch_size {plan.micro_batch} x {plan.accumulation} "
             f"accumulation = {per_device} per device (peak {plan.peak_bytes / 1e9:.1f} of "
             f"{plan.capacity_bytes / 1e9:.0f} GB); {train_rate:,.0f} train examples/s assumed")
        )  # fmt: skip
        problem = fit_problem(name, run, memory, gpu)
        if problem:
            check.problems.append(problem)
    check.figures["memory"] = {"fixed_bytes": memory.fixed_bytes, "per_example_bytes": memory.per_example_bytes}
    check.figures["plans"] = plans
    return check


def _ttt_step(
    cfg: WorkflowConfig, name: str, device: Any, compiled: bool, ttt_step: TTTStep | None, check: RunCheck
) -> dict[str, Any] | None:
    """A `ttt:` canvas run's test-time-training step as its jobs step it (K = ttt.tasks_per_step tasks of
    ttt.batch_size rows, tasks of the answered dataset's views), compiled where the run's steps compile here: its
    figures (also in check.figures["ttt"]) and a row; None when not measured (a problem when it ran out of memory)."""
    from arcpipe.config.arch import make_arch_config

    run = cfg.runs[name]
    if run.ttt is None or run.arch not in VARC_ARCHS or ttt_step is None:
        return None
    K, B = run.ttt.tasks_per_step, run.ttt.batch_size
    views = cfg.datasets[run.answered_dataset].num_aug + 1
    arch_cfg = make_arch_config(run.arch, run.preset, run.arch_overrides)
    try:
        ttt = check.figures["ttt"] = ttt_step(run, arch_cfg, device, views, compiled)
    except OutOfMemory:
        check.rows.append(("ttt step", f"out of memory at K = {K} tasks x batch {B}"))
        check.problems.append(
            f"run {name}: test-time training at ttt.tasks_per_step {K} does not fit this GPU; set a smaller "
            f"runs.{name}.ttt.tasks_per_step"
        )
        return None
    check.rows.append(
        ("ttt step", f"{ttt['examples_per_s']:.1f} examples/s at K = {K} tasks x batch {B} ({ttt['step']}, "
         f"{views} views a task), {ttt['step_s'] * 1e3:.1f} ms a step, peak {_gb(ttt['peak_gb'])}")
    )  # fmt: skip
    return ttt


def _compile_note(env: dict[str, Any], compile_: str) -> str:
    if env["compile"] is None or compile_ != "on":
        return ""
    return " (usable here)" if env["compile"]["usable"] else " (but unusable here)"


def _gb(value: float | None) -> str:
    """GPU peak memory; on CPU the process's peak RSS so far."""
    if value is None:
        import resource

        return f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GB RSS (process)"
    return f"{value:.2f} GB"


def _record(
    results: Path,
    name: str,
    run: RunConfig,
    env: dict[str, Any],
    train: dict,
    evaluation: dict,
    ttt: dict | None = None,
) -> str:
    """Write what was measured on this GPU where the forecast reads it (gpus.doctor_record_path): throughput (a
    `ttt:` run's test-time-training step too, when measured), and the true peak beside the memory model's figure,
    so that either can be corrected. Returns the report row."""
    gpu = env["gpus"][0]
    record = doctor_record(
        name, run, gpu["name"], gpu["memory_gb"], train["examples_per_s"], evaluation["examples_per_s"], ttt=ttt
    )
    if record is None:
        return f"not written: {gpu['name']} is not a GPU of arcpipe.gpus (the forecast keeps its assumption)"
    record |= {"peak_gb": train["peak_gb"], "model_peak_gb": train.get("model_peak_gb")}
    path = doctor_record_path(results, name, record["gpu"])
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_many(path.parent, {path.name: (json.dumps(record, indent=2) + "\n").encode()})
    return f"{path}: the forecast reads this run's throughput on {record['gpu']} from it"
