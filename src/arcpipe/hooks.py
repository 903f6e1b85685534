"""What the workflow does around its jobs, called from rules/common.smk and the Snakefile's handlers: the driver's
start (taking over from a dead driver), the bill before any job, and the checks of `onstart`.

    start_driver(Path("."), sys.argv[1:])            # the planning process of a real run only: take over, register
    print_forecast(cfg, Path("results"), sys.argv[1:])
    on_driver_start(workflow)                        # onstart: record the executor, then the checkpoint guards
    on_driver_error()                                # onerror: cancel this driver's cluster jobs still running

Each prints its lines to stderr as `arcpipe: ...` (problems) or `arcpipe forecast: ...` and ends the process with a
non-zero status where the run must not go on; nothing here decides what a run trains (arcpipe.plan does).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from arcpipe.config import WorkflowConfig
from arcpipe.doctor.memory import fit_problems
from arcpipe.driver import cancel_leftovers, complete_atomic_outputs, record_executor, register, take_over
from arcpipe.forecast import forecast_lines, forecast_ranges, sweep_forecast_lines
from arcpipe.jobs import partition_problems, slurm_partitions
from arcpipe.keep import config_drift, planned_jobs, retraining

# Snakemake's flags of a call that plans, lists or reports but runs no job: such a call never drives
NOT_DRIVING = {
    "-n", "--dry-run", "--dryrun", "--unlock", "--lint", "--list", "--list-rules", "--summary",
    "--detailed-summary", "--dag", "--rulegraph", "--filegraph", "--d3dag", "--report",
    "--cleanup-metadata", "--list-changes", "--lc", "--list-input-changes", "--li",
}  # fmt: skip


def driving(argv: list[str]) -> bool:
    """Whether a Snakemake command line runs jobs (no dry run, listing or report flag; `-pn` counts as -n)."""
    return not any(
        a in NOT_DRIVING or (a[:1] == "-" and a[1:2] != "-" and "n" in a[1:] and a[1:].isalpha()) for a in argv
    )


def _say(line: str) -> None:
    print(f"arcpipe: {line}", file=sys.stderr)


def start_driver(workdir: Path, argv: list[str]) -> None:
    """In the process that plans and submits a real run: take over from a dead driver (its lock, its still-running
    cluster jobs), then register this one (arcpipe.driver); exit 2 if another driver is alive."""
    if not driving(argv):
        return
    try:
        may_drive, lines = take_over(workdir)
    except RuntimeError as err:
        _say(str(err))
        raise SystemExit(2) from None
    for line in lines:
        _say(line)
    if may_drive:
        register(workdir)
        # a killed driver's config jobs left whole files, which Snakemake would mis-plan (arcpipe.driver)
        whole = complete_atomic_outputs(workdir)
        if whole:
            _say(f"{len(whole)} config file(s) written whole by jobs cut off: kept ({', '.join(whole)})")


def stop_on_drift(cfg: WorkflowConfig) -> None:
    """A run whose checkpoints exist and whose training config changed stops every Snakemake call (arcpipe.keep)."""
    problems = config_drift(cfg)
    for problem in problems:
        _say(problem)
    if problems:
        raise SystemExit(2)


def print_forecast(cfg: WorkflowConfig, results: Path, argv: list[str]) -> None:
    """The bill before any job runs: per run of the targets named (every run otherwise), steps, FLOPs, GPU-hours and
    cost, a range for a staged run, and each sweep named as a target as a whole and per arm (arcpipe.forecast, as
    `arcpipe config check` prints it); then a warning per micro-batch that will not fit its GPU, by the memory
    model's shipped or cached figures (nothing computed)."""
    named = [target for target in cfg.targets if target in argv]
    listed = sorted({r for t in named for r in cfg.runs_for(t)}) if named else sorted(cfg.runs)
    ranges = forecast_ranges(cfg, results)
    lines = forecast_lines(cfg, results, listed, ranges)
    for sweep, target in zip(cfg.sweeps, cfg.sweep_targets, strict=True):
        if target in named:  # the sweep as a whole and per arm, as `arcpipe config check` prints it
            lines += sweep_forecast_lines(cfg, sweep, ranges, results)
    for line in lines:
        print(f"arcpipe forecast: {line}", file=sys.stderr)
    for problem in fit_problems(cfg, listed, results)[0]:
        _say(f"warning: {problem}")


def on_driver_start(workflow: Any) -> None:
    """onstart: record how this driver's jobs are cancelled (arcpipe.driver), then the checkpoint guard."""
    settings = workflow.executor_settings
    record_executor(
        Path("."),
        workflow.executor_plugin.name if workflow.executor_plugin else None,
        getattr(settings, "cancel_cmd", None),
        getattr(settings, "status_cmd", None),
    )
    stop_if_retraining(workflow)
    if workflow.executor_plugin and workflow.executor_plugin.name == "slurm":
        stop_if_partitions_missing(workflow)


def on_driver_error() -> None:
    """onerror (a failed or interrupted run): cancel this driver's cluster jobs that may still run (arcpipe.driver)."""
    line = cancel_leftovers(Path("."))
    if line:
        _say(line)


def stop_workflow(workflow: Any, problems: list[str]) -> None:
    """Print one line per problem and end the driver before any job runs (its own locks released)."""
    for problem in problems:
        _say(problem)
    _say("stopped before running anything; no file was changed (docs/reliability.md: After a crash)")
    workflow.persistence.unlock()  # this run's own locks: the next run must not find them stale
    os._exit(3)  # at once: the scheduler has not started, no output was touched


def stop_if_partitions_missing(workflow: Any) -> None:
    """Every slurm_partition the planned jobs name must exist (a typo would fail each job at sbatch)."""
    available = slurm_partitions()
    if available is None:
        return  # sbatch will say it
    wanted: dict[str, set[str]] = {}
    for job in workflow.dag.needrun_jobs():
        for one in job.jobs if job.is_group() else [job]:
            name = one.resources.get("slurm_partition")
            if name and not one.is_local:
                wanted.setdefault(str(name), set()).add(one.rule.name)
    problems = partition_problems(wanted, available, "your SLURM profile (profiles/slurm/config.yaml)")
    if problems:
        stop_workflow(workflow, problems)


def stop_if_retraining(workflow: Any) -> None:
    """Stop before any job runs if Snakemake would retrain over an existing checkpoint (arcpipe.keep)."""
    problems = retraining(planned_jobs(workflow.dag))
    if problems:
        stop_workflow(workflow, problems)
