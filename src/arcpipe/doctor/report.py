"""The command: merge and validate the config files, check the machine and each run, print one screen, and exit 1
with one line per reason when a run cannot work here."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from arcpipe.config import ArcpipeError, WorkflowConfig, read_config_yaml, validate_config
from arcpipe.doctor.machine import environment, machine_rows
from arcpipe.doctor.run import TTTStep, check_run, plan_run


def load_configs(paths: Iterable[Path]) -> WorkflowConfig:
    """Config files merged in order (later ones override, as Snakemake's --configfile), then validated."""
    from snakemake.utils import update_config

    merged: dict[str, Any] = {}
    paths = list(paths)
    for path in paths:
        update_config(merged, read_config_yaml(path) or {})
    return validate_config(merged, " + ".join(map(str, paths)))


def doctor(
    config_paths: list[Path],
    runs: list[str] | None,
    results: Path,
    measure: bool = True,
    gpus: list[str] | None = None,
    ttt_step: TTTStep | None = None,
) -> int:
    """ttt_step: what times a `ttt:` run's test-time-training step (the CLI's: eval/ttt_measure.ttt_step_figures);
    None: not timed."""
    cfg = load_configs(config_paths)
    names = runs or cfg.runs_for("full")
    unknown = [n for n in names if n not in cfg.runs]
    if unknown:
        raise ArcpipeError(f"--run {', '.join(unknown)}: no such run (runs: {', '.join(sorted(cfg.runs))})")
    if gpus:  # planned on named GPUs by the memory model; this machine is not checked
        return _report([plan_run(cfg, name, results, gpus) for name in names], f"run(s) fit {', '.join(gpus)}")
    env = environment()
    print(f"arcpipe doctor on {env['host']}")
    for label, value in machine_rows(env):
        print(f"  {label:<18} {value}")
    checks = (check_run(cfg, name, env, results, measure, ttt_step) for name in names)
    return _report(checks, "run(s) can run here")


def _report(checks: Iterable[Any], ok: str) -> int:
    problems, count = [], 0
    for check in checks:
        count += 1
        print(f"run {check.name}")
        for label, value in check.rows:
            print(f"  {label:<18} {value}")
        problems += check.problems
    if problems:
        print(f"{len(problems)} problem(s):")
        for problem in problems:
            print(f"arcpipe: error: {problem}")
        return 1
    print(f"ok: {count} {ok}")
    return 0
