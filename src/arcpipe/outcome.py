"""What a finished `snakemake` call prints last: the results of its runs, or why its failed jobs failed.

    onsuccess:
        on_success(workflow, CFG)  # per run: pass@K of the last and selected checkpoints, accuracy, GPU-hours

    onerror:
        on_failure(workflow, log)  # per failed job: its rule, its own last error line, its log

Only files the workflow wrote are read: the report's summary.csv and learning.csv where this call's DAG builds a
report (results/report/ or results/report/full/), else each run's evaluations and training metrics. A hook never
fails the workflow: a summary that cannot be made is one line saying why.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import pandas as pd

from arcpipe import paths
from arcpipe.config import WorkflowConfig
from arcpipe.gates import gate_status
from arcpipe.plan import stop_records
from arcpipe.report.load import STEP_TIME, TTT_SECONDS

PREFIX = "arcpipe: "
N_LAST_STEPS = 3  # training accuracy at the end: the mean of the last counted steps, as learning.csv's
ERROR_BLOCK = re.compile(r"\s*Error in rule (\S+):$")
ERROR_LOG = re.compile(r"\s+log: (.*?)(?: \(check log file\(s\) for error details\))?$")
# a Python exception's last line, possibly behind torchrun's "[rank0]: " prefix
EXCEPTION = re.compile(
    r"^(?:\[[^\]]*\]:?\s*)?((?:[A-Za-z_]\w*\.)*([A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt))\b.*)$"
)
WRAPPER_EXCEPTIONS = ("ChildFailedError", "CalledProcessError")  # torchrun's and the shell's: not the cause
MAX_CHARS = 240
TRAINED = f"training token accuracy (mean of the last {N_LAST_STEPS} counted steps)"


class FailedJob(NamedTuple):
    rule: str
    logs: tuple[str, ...]


def on_success(workflow: Any, cfg: WorkflowConfig) -> None:
    """onsuccess: print the results of the runs this call's DAG built (see `success_lines`)."""
    try:
        outputs = [str(path) for job in workflow.dag.jobs for path in job.output]
        lines = success_lines(Path("."), outputs, cfg)
    except Exception as err:  # the workflow succeeded: an unreadable result file must not make it fail
        lines = [f"no summary of the results ({type(err).__name__}: {err}); the tables are in results/report/"]
    _print(lines)


def on_failure(workflow: Any, log: Sequence[str] | str) -> None:
    """onerror: print each failed job's own error line and log (see `failure_lines`)."""
    logs = [log] if isinstance(log, str) else list(log)
    try:
        jobs = _scheduler_failures(workflow)
        if not jobs:  # another Snakemake version: its log's "Error in rule" blocks instead
            jobs = failed_jobs("\n".join(Path(path).read_text(errors="replace") for path in logs))
        lines = failure_lines(Path("."), jobs)
    except Exception as err:  # report the workflow's own failure, not one of this hook
        lines = [f"could not name the failed jobs ({type(err).__name__}: {err}); see Snakemake's messages above"]
    _print(lines)


def success_lines(root: Path, outputs: Iterable[str], cfg: WorkflowConfig) -> list[str]:
    """The lines printed after a successful call whose DAG has these output files (paths relative to root).

    One line per run of the DAG that has results: from the report's summary.csv and learning.csv where the DAG
    built a report, else from the run's metrics; then where the report is and the command that renders it.
    """
    outputs = list(outputs)
    runs = sorted({run for path in outputs if (run := paths.run_of(path))})
    lines, covered = [], set()
    for folder in dict.fromkeys(Path(path).parent for path in outputs if Path(path).name == "summary.csv"):
        summary = pd.read_csv(root / folder / "summary.csv", dtype={"run": str})
        summary = summary[summary["run"].isin(runs)]
        if len(summary):
            lines += _report_lines(folder, summary, _learning_accuracy(root / folder / "learning.csv"))
            covered |= set(summary["run"])
    uncovered = [run for run in runs if run not in covered and run in cfg.runs]
    width = max((len(run) for run in uncovered), default=0)
    stops = stop_records(cfg, root / paths.RESULTS, uncovered)  # where a stop rule ended a run (arcpipe.plan)
    fallback = [
        line + (f"  (stopped at epoch {stops[run]['epoch']} of {stops[run]['planned_epochs']})" if run in stops else "")
        for run in uncovered
        if (line := _metrics_line(root, run, cfg, width))
    ]
    stopped = [
        f"  {run.ljust(width)}  {status}" for run in uncovered if (status := gate_status(root / paths.RESULTS, run))
    ]
    if fallback:
        lines.append(f"pass@{cfg.report.main_k} in % of the last checkpoint (epoch), {TRAINED}, GPU-hours:")
        lines += fallback + ["the tables of every run, selected checkpoints included: snakemake report"]
    return lines + stopped


def failure_lines(root: Path, jobs: Sequence[FailedJob]) -> list[str]:
    """Per failed job: its rule and the last error line of its own log, then that log's path (Snakemake names its
    own log right after)."""
    if not jobs:
        return []  # stopped without a failed job (interrupted): Snakemake says so
    lines = [f"{len(jobs)} job{'s' * (len(jobs) != 1)} failed:"]
    for job in jobs:
        error = next((line for path in job.logs if (line := job_error_line(root / path))), "")
        lines.append(f"  {job.rule}: {error or 'no error line in its log'}")
        lines.append(f"    log: {', '.join(job.logs) or 'none (the rule declares no log)'}")
    return lines


def failed_jobs(snakemake_log: str) -> list[FailedJob]:
    """The failed jobs named by a Snakemake log's "Error in rule" blocks, each once. A failed group's jobs each have
    one, indented."""
    jobs: list[FailedJob] = []
    indent = None  # the open block's header's, None outside a block
    for line in snakemake_log.splitlines():
        depth = len(line) - len(line.lstrip())
        if match := ERROR_BLOCK.match(line):
            jobs.append(FailedJob(match[1], ()))
            indent = depth
        elif indent is not None and depth <= indent:
            indent = None  # the block's own lines are indented below its header
        elif indent is not None and (match := ERROR_LOG.match(line)):
            jobs[-1] = jobs[-1]._replace(logs=tuple(match[1].split(", ")))
    return list(dict.fromkeys(jobs))  # a job restarted (restart_times) fails once per attempt


def job_error_line(log_path: Path) -> str:
    """A job's own error from its log: the last `arcpipe: error:` line, else the last Python exception line that is
    not a wrapper's (torchrun's, the shell's), else the last line; "" without a log."""
    if not log_path.is_file():
        return ""
    lines = [line.strip() for line in log_path.read_text(errors="replace").splitlines() if line.strip()]
    own = [line[line.index("arcpipe: error:") :] for line in lines if "arcpipe: error:" in line]
    exceptions = [m[1] for line in lines if (m := EXCEPTION.match(line)) and m[2] not in WRAPPER_EXCEPTIONS]
    found = own or exceptions or lines[-1:] or [""]
    return _clip(found[-1])


def _scheduler_failures(workflow: Any) -> list[FailedJob]:
    """The failed jobs as Snakemake's scheduler holds them (present even with `--quiet rules`, which keeps the
    "Error in rule" blocks out of the log); a failed group is reported as its jobs whose logs hold an error."""
    jobs = []
    for failed in getattr(getattr(workflow, "scheduler", None), "failed", ()):
        members = list(failed.jobs) if failed.is_group() else [failed]
        named = [FailedJob(job.rule.name, tuple(str(path) for path in job.log)) for job in members]
        if failed.is_group():
            named = [job for job in named if any(_has_error(Path(path)) for path in job.logs)] or named
        jobs += named
    return sorted(dict.fromkeys(jobs))


def _has_error(log_path: Path) -> bool:
    if not log_path.is_file():
        return False
    text = log_path.read_text(errors="replace")
    return "arcpipe: error:" in text or any(EXCEPTION.match(line.strip()) for line in text.splitlines())


def _report_lines(folder: Path, summary: pd.DataFrame, accuracy: dict[str, float]) -> list[str]:
    """The runs of one report's summary.csv, where the report is and the command that renders it as HTML."""
    main = next(column for column in summary.columns if column.startswith("last pass@"))[len("last ") :]
    selected = summary[f"selected {main}"].notna().any()  # none without evaluation.selection_tasks
    checkpoints = "the last and the selected checkpoint" if selected else "the last checkpoint"
    lines = [f"{main} in % of {checkpoints} (epoch), {TRAINED}, GPU-hours:"]
    width = max(len(run) for run in summary["run"])
    for row in summary.to_dict("records"):
        status = row["status"] if isinstance(row.get("status"), str) else ""
        if status and pd.isna(row[f"last {main}"]):  # not started: gate ... (no scores)
            lines.append(f"  {row['run'].ljust(width)}  {status}")
            continue
        last = _score(row[f"last {main}"], row["epoch"])
        chosen = _score(row[f"selected {main}"], row["selected_epoch"]) if selected else None
        line = _run_line(row["run"].ljust(width), last, chosen, accuracy.get(row["run"], math.nan), row["gpu_hours"])
        lines.append(line + (f"  ({status})" if status else ""))  # stopped at epoch E of P: ...
    if not selected:
        lines.append("no checkpoint selected: evaluation.selection_tasks is 0")
    target = "full" if folder.name == "full" else "report"
    lines.append(f"report: {folder}/summary.md (every table beside it as .md, .csv, .html)")
    lines.append(f"as one HTML file: snakemake --report report.html {target}")
    return lines


def _learning_accuracy(path: Path) -> dict[str, float]:
    """run -> training accuracy (%) at the end, from the report's learning.csv ({} without one)."""
    if not path.is_file():
        return {}
    learning = pd.read_csv(path, dtype={"run": str})
    column = next(c for c in learning.columns if re.fullmatch(r"last_\d+_accuracy", c))
    return dict(zip(learning["run"], learning[column], strict=True))


def _metrics_line(root: Path, run: str, cfg: WorkflowConfig, width: int) -> str:
    """A run's line from its own metrics (no report in this call): the last evaluation, training accuracy and
    GPU-hours as the report counts them (RunConfig.gpu_hours: step times x training GPUs + evaluation wall times x
    evaluation GPUs + test-time training's jobs' times x their GPU)."""
    evaluations = sorted(
        (int(path.parent.name.removeprefix("epoch_")), json.loads(path.read_text()))
        for path in (root / paths.EVAL.format(run=run)).glob("epoch_*/metrics.json")
    )
    records = [
        json.loads(line)
        for path in sorted((root / paths.RUN.format(run=run) / "metrics").glob("epoch_*.jsonl"))
        for line in path.read_text().splitlines()
        if line.strip()
    ]
    if not evaluations and not records:
        return ""
    records.sort(key=lambda record: record["step"])
    counted = [100 * r["train/accuracy"] for r in records if r.get("train/count", 0) > 0 and "train/accuracy" in r]
    accuracy = sum(counted[-N_LAST_STEPS:]) / len(counted[-N_LAST_STEPS:]) if counted else math.nan
    config = cfg.runs[run]
    train_hours = sum(r.get(STEP_TIME, 0.0) for r in records) / 3600
    eval_hours = sum(metrics.get("wall_time_s", 0.0) for _, metrics in evaluations) / 3600
    ttt = root.glob(paths.TTT.format(run=run, epoch="*"))  # its test-time training's jobs, as the report counts them
    ttt_hours = sum(json.loads(path.read_text()).get(TTT_SECONDS, 0.0) for path in ttt) / 3600
    gpu_hours = config.gpu_hours(train_hours, eval_hours, ttt_hours)
    epoch, last = evaluations[-1] if evaluations else (math.nan, {})
    main = f"pass@{cfg.report.main_k}"
    return _run_line(run.ljust(width), _score(100 * last.get(main, math.nan), epoch), None, accuracy, gpu_hours)


def _run_line(run: str, last: str, selected: str | None, accuracy: float, gpu_hours: float) -> str:
    selection = "" if selected is None else f"  selected {selected}"
    trained = "-" if pd.isna(accuracy) else f"{accuracy:.1f}%"
    return f"  {run}  last {last}{selection}  train acc {trained}  GPU-h {_amount(gpu_hours)}"


def _score(value: Any, epoch: Any) -> str:
    if pd.isna(value):
        return "-"
    return f"{value:.2f}" + (f" ({int(epoch)})" if pd.notna(epoch) else "")


def _amount(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def _clip(line: str) -> str:
    return line if len(line) <= MAX_CHARS else line[: MAX_CHARS - 3] + "..."


def _print(lines: Sequence[str]) -> None:
    for line in lines:
        print(PREFIX + line, file=sys.stderr)
