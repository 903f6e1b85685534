"""The report's opening page: per run, the last, selected and best-on-test pass@K beside the published number, with
the GPU-hours and cost spent so far.

    hours = hours_spent(inputs.evals, inputs.train[STEP_TIME])      # inputs: load.load_report_inputs(...)
    table = summary_table(cfg, runs, comparison, selection, hours)  # comparison, selection: the report's tables
    shown = compact(table, "pass@2")                                # summary.md and .html (render.py)

pass@K is at `report.main_k`. With `evaluation.selection_tasks: N` the three checkpoints are scored on the test tasks
not held out (selection.csv's rows, so they compare on one set); without it the last and best-on-test checkpoints are
scored on every test task (comparison.csv) and there is no selected one.

Hours are what the metrics recorded: training, the sum of every step's `time/step_s` (results/runs/{run}/metrics/,
one record per optimizer step; start-up, compilation, checkpoint writes and queue waits not included); evaluation,
each metrics.json's `wall_time_s`; test-time training (`ttt:`), its evaluation's `ttt/wall_seconds` (TTT_SECONDS: its
jobs' fits and answers, summed by eval/ttt.collect), counted to the run that trained it, also where it answers another
dataset (a `<run>@<dataset>` row). GPU-hours weight each by the GPUs the job held (training: nodes x gpus_per_node,
evaluation: the run's evaluation GPUs, test-time training: one of them at most), by RunConfig.gpu_hours, the formula
the forecast, the ablation table and the driver's last lines use too (`gpu_hours_spent`); cost = GPU-hours x
`report.gpu_hour_price`. CPU jobs hold no GPU: 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pandas as pd

from arcpipe.report.format import SELECTED_ON_TEST
from arcpipe.report.load import STEP_TIME, TTT_SECONDS, RunInfo
from arcpipe.report.tables import published_figure

if TYPE_CHECKING:
    from arcpipe.config import WorkflowConfig


def hours_spent(evals: pd.DataFrame, step_times: pd.DataFrame) -> pd.DataFrame:
    """Per run: training, evaluation and test-time training hours recorded in the metrics (index: run; module
    doc). step_times: the time/step_s curve of `load.read_train_curves`."""
    train = step_times.groupby("run")[STEP_TIME].sum() / 3600
    if len(evals) and "wall_time_s" in evals:
        evaluate = evals.groupby("run")["wall_time_s"].sum(min_count=0) / 3600
    else:
        evaluate = pd.Series(dtype=float)
    if len(evals) and TTT_SECONDS in evals:  # the run before `@` (run names have none: arcpipe.names)
        trained_by = evals["run"].astype(str).str.split("@").str[0].rename("run")
        ttt = evals[TTT_SECONDS].groupby(trained_by).sum(min_count=0) / 3600
    else:
        ttt = pd.Series(dtype=float)
    frame = pd.DataFrame({"train_hours": train, "eval_hours": evaluate, "ttt_hours": ttt}).fillna(0.0)
    frame.index.name = "run"
    return frame


def gpu_hours_spent(cfg: WorkflowConfig, hours: pd.DataFrame) -> pd.Series:
    """Per run of `hours` (`hours_spent`'s frame): its GPU-hours, RunConfig.gpu_hours of its wall hours; 0 for a
    row that is no run of the config (a test-time training row answering another dataset, `<run>@<dataset>`: its
    jobs' hours count to its run)."""
    spent = [
        cfg.runs[run].gpu_hours(row["train_hours"], row["eval_hours"], row.get("ttt_hours", 0.0))
        if run in cfg.runs
        else 0.0
        for run, row in hours.iterrows()
    ]
    return pd.Series(spent, index=hours.index, name="gpu_hours", dtype=float)


def summary_table(
    cfg: WorkflowConfig,
    runs: dict[str, RunInfo],
    comparison: pd.DataFrame,
    selection: pd.DataFrame,
    hours: pd.DataFrame,
    forecast: pd.DataFrame | None = None,
    statuses: Mapping[str, str] | None = None,
    stops: Mapping[str, Mapping[str, Any]] | None = None,
) -> pd.DataFrame:
    """One row per evaluated run (comparison's rows): see the module docstring for what each number is. forecast:
    arcpipe.forecast.forecast_table's rows (joined on `run`), put beside what was spent. statuses: a word on how a
    run ended that its scores do not say (`not started: gate ...`); a run with a status and no evaluation gets a row
    of its own, with its forecast and nothing spent. stops: the decision record (arcpipe.stopping) of each run a
    stop rule ended early: its status says at which epoch and why, and saved_gpu_hours what the skipped epochs
    would have cost at the rate of the trained ones."""
    main = f"pass@{cfg.report.main_k}"
    price = cfg.report.gpu_hour_price
    rows = []
    for _, compared in comparison.iterrows():
        run = str(compared["run"])
        config = cfg.runs.get(run)
        info = runs.get(run)
        published = published_figure(info)
        picked = selection[selection["run"] == run] if len(selection) else selection
        if len(picked):
            by_label = {label: row for label, row in zip(picked["checkpoint"], picked.to_dict("records"), strict=True)}
            selected = next(
                row for label, row in by_label.items() if label.startswith("selected on ") and label != SELECTED_ON_TEST
            )
            last, best = by_label["last"], by_label[SELECTED_ON_TEST]
            scored_on = f"test tasks but {cfg.evaluation.selection_tasks} held out"
            last_value, best_value = last.get(main, math.nan), best.get(main, math.nan)
            selected_value, selected_epoch, best_epoch = selected.get(main, math.nan), selected["epoch"], best["epoch"]
        else:
            scored_on = "every test task"
            last_value = compared.get(main, math.nan)
            best_value = compared.get(f"best_{main} ({SELECTED_ON_TEST})", math.nan)
            selected_value, selected_epoch, best_epoch = math.nan, math.nan, compared.get("best_epoch", math.nan)
        train_gpus = config.train_gpus if config else 0
        nothing = pd.Series({"train_hours": 0.0, "eval_hours": 0.0, "ttt_hours": 0.0})
        spent = hours.loc[run] if run in hours.index else nothing
        gpu_hours = gpu_hours_spent(cfg, pd.DataFrame([spent], index=[run])).iloc[0]
        row: dict[str, Any] = {
            "run": run,
            "arch": info.arch if info else "",
            "benchmark": (info.benchmark or "") if info else "",
            "epoch": compared["last_epoch"],
            "epochs": config.epochs if config else math.nan,
            "progress_%": compared["progress_%"],
            f"last {main}": last_value,
            f"selected {main}": selected_value,
            "selected_epoch": selected_epoch,
            f"best-on-test {main}": best_value,
            "best_epoch": best_epoch,
            "scored_on": scored_on,
            "published": published.value if published else math.nan,
            "published_metric": published.metric if published else "",
            "last on published metric": compared.get("ours_on_published_metric", math.nan),
            "gpus": train_gpus,
            "hours": spent["train_hours"] + spent["eval_hours"] + spent.get("ttt_hours", 0.0),
            "gpu_hours": gpu_hours,
            "cost": gpu_hours * price,
        }
        rows.append(row)
    stops = stops or {}
    statuses = {**(statuses or {}), **{run: "stopped " + r["reason"].removeprefix("stop ") for run, r in stops.items()}}
    for run in sorted(set(statuses) - {row["run"] for row in rows}):
        info, config = runs.get(run), cfg.runs.get(run)
        rows.append(
            {
                "run": run,
                "arch": info.arch if info else "",
                "benchmark": (info.benchmark or "") if info else "",
                "epochs": config.epochs if config else math.nan,
                "progress_%": 0.0,
                "gpus": config.train_gpus if config else 0,
                "hours": 0.0,
                "gpu_hours": 0.0,
                "cost": 0.0,
            }
        )
    table = pd.DataFrame(rows)
    if statuses and len(table):
        table["status"] = [statuses.get(run, "") for run in table["run"]]
    if stops and len(table):
        table["saved_gpu_hours"] = [
            gpu_hours * stops[run]["skipped_epochs"] / stops[run]["epoch"] if run in stops else 0.0
            for run, gpu_hours in zip(table["run"], table["gpu_hours"], strict=True)
        ]
    if forecast is not None and len(table):
        columns = ["run", "forecast_gpu_hours", "forecast_low_gpu_hours", "forecast_cost", "throughput_source"]
        planned = forecast[[c for c in columns if c in forecast.columns]]
        table = table.merge(planned, on="run", how="left")
    return table


def compact(table: pd.DataFrame, main: str) -> pd.DataFrame:
    """The summary as shown (Markdown, HTML, the report's opening page): a few narrow columns, numbers as text."""

    def score(value: Any, epoch: Any = None) -> str:
        if pd.isna(value):
            return ""
        return f"{value:.2f}" + (f" ({int(epoch)})" if epoch is not None and pd.notna(epoch) else "")

    rows = []
    for row in table.to_dict("records"):
        rows.append(
            {
                "run": row["run"],
                f"last {main} (epoch)": score(row[f"last {main}"], row["epoch"]),
                "selected (epoch)": score(row[f"selected {main}"], row["selected_epoch"]),
                "best on test (epoch)": score(row[f"best-on-test {main}"], row["best_epoch"]),
                "published": f"{row['published']:g} {row['published_metric']}" if pd.notna(row["published"]) else "",
                "ours": score(row["last on published metric"]) if pd.notna(row["published"]) else "",
                "GPU-h": _amount(row["gpu_hours"]),
                "cost": _amount(row["cost"]),
                **({"forecast GPU-h": _forecast(row)} if "forecast_gpu_hours" in row else {}),
                **({"saved GPU-h": _amount(row["saved_gpu_hours"])} if "saved_gpu_hours" in row else {}),
                **({"status": row["status"]} if "status" in row else {}),
            }
        )
    return pd.DataFrame(rows)


def _forecast(row: dict[str, Any]) -> str:
    """The planned forecast, or `cheapest-planned` for a staged run whose decisions are not all made."""
    low, high = row.get("forecast_low_gpu_hours"), row["forecast_gpu_hours"]
    if low is None or pd.isna(low) or _amount(low) == _amount(high):
        return _amount(high)
    return f"{_amount(low)}-{_amount(high)}"


def _amount(value: float) -> str:
    if pd.isna(value):
        return ""
    return f"{value:,.0f}" if value >= 100 else f"{value:.2f}" if value < 10 else f"{value:.1f}"
