"""The report, written: every table and plot of results/report/ from one reading of the results.

    render_workflow_report(out_dir, config, metrics_paths, train_metrics_paths, verify_paths, ensemble_paths)
    render_report(out_dir, metrics_paths, train_metrics_paths, dataset_dirs, runs, main_k, ensemble_paths)
    render_pooled(csv_path, md_path, votes_paths, ks)  # rule pool_votes

The files are read once (load.py), each table is built once (tables.py, seeds.py, selection.py, summary.py) and
handed to whatever else shows it, and every table is written as CSV, Markdown and HTML (format.py), atomically.
Titles and notes, what a reader sees beside the numbers, are written here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from arcpipe import paths, plan
from arcpipe.config import WorkflowConfig
from arcpipe.files import atomic_write_many
from arcpipe.forecast import forecast_table
from arcpipe.gates import gate_status
from arcpipe.plan import stop_records
from arcpipe.report.ablation import ablation_table
from arcpipe.report.format import SELECTED_ON_TEST, table_files, write_table
from arcpipe.report.load import (
    LOSS,
    STEP_TIME,
    ReportInputs,
    RunInfo,
    load_evaluations,
    load_report_inputs,
    runs_from_config,
)
from arcpipe.report.plots import plot_ablation, plot_accuracy, plot_depth, plot_loop_steps, plot_loss, plot_passk
from arcpipe.report.quick import quick_notes
from arcpipe.report.seeds import seed_groups, seed_table
from arcpipe.report.selection import held_out_tasks, selection_table, task_scores
from arcpipe.report.summary import compact, gpu_hours_spent, hours_spent, summary_table
from arcpipe.report.tables import (
    N_STEPS,
    accuracy_curves,
    comparison_table,
    dataset_table,
    depth_curves,
    learning_table,
    loop_step_curves,
    pass_ks,
    passk_table,
    pooled_table,
)
from arcpipe.train.tracking import log_ablation

PASSK_NOTES = [
    "pass@K in %, averaged over every test task (fractional credit for tasks with several test inputs).",
    "Votes are fresh for each checkpoint (single-checkpoint); see pooled.md for upstream's pooled numbers.",
]

RESULTS = Path(paths.RESULTS)  # the workflow's results folder, relative to the directory its jobs run in


def render_workflow_report(
    out_dir: str | Path,
    config: Mapping[str, Any],
    metrics_paths: Sequence[str | Path],
    train_metrics_paths: Sequence[str | Path],
    verify_paths: Sequence[str | Path],
    ensemble_paths: Sequence[str | Path] = (),
    quick_paths: Sequence[str | Path] = (),
) -> list[Path]:
    """`render_report` for the workflow: runs and main_k from the config, datasets from their verify.json paths;
    the checkpoint selection on evaluation.selection_tasks held-out tasks (selection.py); and the summary the HTML
    report opens on (summary.py), from the same comparison and selection tables. quick_paths: the quick
    evaluations' metrics.json (evaluation.quick), rows of passk only, marked (quick.py)."""
    cfg = WorkflowConfig.model_validate(dict(config))
    out_dir = Path(out_dir)
    datasets = {Path(p).parent.name: Path(p).parent for p in verify_paths}  # results/data/<dataset>/verify.json
    seeds = {name: cfg.datasets[run.dataset].seed for name, run in cfg.runs.items()}  # of the held-out draw
    n, main_k, runs = cfg.evaluation.selection_tasks, cfg.report.main_k, runs_from_config(cfg)
    inputs = load_report_inputs(metrics_paths, train_metrics_paths, datasets, ensemble_paths, per_puzzle=n > 0)
    selection, chosen = selection_table(inputs.evals, inputs.per_puzzle, n, seeds, main_k)
    written = write_selection(out_dir, selection, chosen, n, main_k)
    comparison = comparison_table(inputs.evals, runs, main_k)
    written += _write_report(out_dir, inputs, runs, main_k, comparison, load_evaluations(quick_paths))
    hours = hours_spent(inputs.evals, inputs.train[STEP_TIME])
    forecast, statuses, stops = forecast_table(cfg, RESULTS), _statuses(cfg, comparison), _stops(cfg, comparison)
    summary = summary_table(cfg, runs, comparison, selection, hours, forecast, statuses, stops)
    return written + write_summary(out_dir, cfg, summary)


def render_ablation(
    out_dir: str | Path,
    config: Mapping[str, Any],
    sweep: str,
    metrics_paths: Sequence[str | Path],
    train_metrics_paths: Sequence[str | Path],
) -> list[Path]:
    """Sweep `sweep`'s ablation table (report/ablation.py: each arm against the sweep's base run, over seeds and
    over tasks) as ablation.{csv,md,html}, and its arms' score against GPU-hours as ablation.png, in out_dir.
    Held out as the report's checkpoint selection holds them out: evaluation.selection_tasks of the test tasks.
    The table and plot also go to W&B beside the arms when the base run's `wandb` is not disabled (log_ablation)."""
    cfg = WorkflowConfig.model_validate(dict(config))
    out_dir, main_k = Path(out_dir), cfg.report.main_k
    arms, base = cfg.arm_seeds(sweep), cfg.sweeps[sweep].base
    inputs = load_report_inputs(metrics_paths, train_metrics_paths, per_puzzle=True)
    held: list[str] = []
    if cfg.evaluation.selection_tasks and len(inputs.evals):
        first = inputs.evals.iloc[0]
        tasks = list(task_scores(inputs.per_puzzle[first["path"]]).index)
        seed = cfg.datasets[cfg.runs[first["run"]].dataset].seed  # the same draw as the report's selection
        held = held_out_tasks(tasks, cfg.evaluation.selection_tasks, seed, source=f"sweep {sweep}")
    hours = gpu_hours_spent(cfg, hours_spent(inputs.evals, inputs.train[STEP_TIME]))
    ks = tuple(sorted({1, main_k}))
    runs = [run for by_seed in arms.values() for run in by_seed.values()]
    protocols = {run: _protocol_of(cfg, run) for run in runs}
    table = ablation_table(inputs.evals, inputs.per_puzzle, arms, base, main_k, ks, hours, held, protocols=protocols)
    values = {run.sweep.arm: run.sweep.values for run in cfg.runs.values() if run.sweep and run.sweep.name == sweep}
    table.insert(1, "values", [", ".join(f"{k}={v}" for k, v in values.get(arm, {}).items()) for arm in table["arm"]])
    halving_notes = _halving_columns(cfg, sweep, arms, table) if cfg.sweeps[sweep].halving is not None else []
    seeds = sorted({seed for runs in arms.values() for seed in runs})
    notes = [
        f"sweep {sweep}: each arm against its base run {base} (the reference row), at each run's last evaluated "
        f"checkpoint; seeds {seeds}. Scores in %: pass@K mean over seeds with its 95% Student-t interval.",
        f"diff_pass@{main_k}: the paired difference over the seeds both have (interval, paired t-test p_seeds); "
        f"over tasks, each averaged over seeds: wins and losses against the reference, the exact sign test (p_sign) "
        f"and the bootstrap interval of the mean per-task difference.",
        f"reported tasks: the test tasks less {len(held)} held out for selection (evaluation.selection_tasks)"
        if held
        else "reported tasks: every test task (evaluation.selection_tasks is 0)",
        *halving_notes,
    ]
    unlike = [arm for arm, differs in zip(table["arm"], table["protocol_vs_base"], strict=True) if differs]
    if unlike:
        notes.append(
            f"not like for like: {', '.join(unlike)} scored under another protocol than the reference (column "
            "protocol vs base: test-time training, test views or checkpoint), so their difference from it is not "
            "the swept values' alone"
        )
    written = [out_dir / f"ablation.{ext}" for ext in ("csv", "md", "html")]
    write_table(
        table, written[0], written[1], f"Ablation: sweep {sweep}", notes, shown=_ablation_shown(table, ks, main_k)
    )
    plot_ablation(table, out_dir / "ablation.png", f"pass@{main_k}")
    base_config = cfg.runs[cfg.reference_of(sweep)[0]].model_dump(mode="json")
    log_ablation(sweep, base_config, table, out_dir / "ablation.png", out_dir)  # W&B, in the base run's mode
    return [*written, out_dir / "ablation.png"]


def _protocol_of(cfg: WorkflowConfig, name: str) -> dict[str, str]:
    """How run `name`'s number in an ablation table is scored, besides test-time training (report/ablation.py): the
    test views (the dataset its last evaluation answers) and the checkpoint (the plan on the records on disk)."""
    run = cfg.runs[name]
    dataset = run.answered_dataset if run.ttt is not None else run.dataset
    views = cfg.datasets[dataset]
    p = plan.run_plan(cfg, name, plan.DiskRecords(RESULTS), evaluations=False)
    checkpoint = "last"
    if p.stopped_at is not None:
        checkpoint = "where halving stopped it" if "/rungs/" in p.halted_by else "where its stop rule stopped it"
    return {"test views": f"{dataset} ({views.views}, {views.num_aug + 1} per task)", "checkpoint": checkpoint}


def _halving_columns(
    cfg: WorkflowConfig, sweep: str, arms: Mapping[str, Mapping[int, str]], table: pd.DataFrame
) -> list[str]:
    """`stopped_at_rung` (the epoch of the rung that did not keep the arm; empty for the arms that went on) into
    `table`, from the plan on the records on disk; the notes: the rungs and the GPU-hours halving saved."""
    records = plan.DiskRecords(RESULTS)
    stopped: dict[str, int | None] = {}
    for arm, runs in arms.items():
        p = plan.run_plan(cfg, next(iter(runs.values())), records)
        stopped[arm] = p.stopped_at if "/rungs/" in p.halted_by else None
    table["stopped_at_rung"] = [stopped.get(arm) for arm in table["arm"]]
    halving = cfg.sweeps[sweep].halving
    epochs = cfg.runs[cfg.reference_of(sweep)[0]].epochs  # every arm's: halving refuses a grid that moves them
    saved = sum(
        row["gpu_hours"] * (epochs / row["stopped_at_rung"] - 1)
        for _, row in table.iterrows()
        if "gpu_hours" in table and not pd.isna(row["stopped_at_rung"])
    )
    return [
        f"successive halving: rungs at epochs {', '.join(map(str, halving.rungs))}, the best 1/{halving.eta} of the "
        f"arms go on at each, ranked on {halving.metric} over the held-out selection tasks, every test task where "
        f"evaluation.selection_tasks is 0 (the records under results/sweeps/{sweep}/rungs/ say which); the stopped "
        "arms' scores are at their rung",
        f"halving saved about {saved:.2f} GPU-h against the full grid (each stopped arm's hours scaled to its "
        f"{epochs} planned epochs)",
    ]


def _ablation_shown(table: pd.DataFrame, ks: tuple[int, ...], main_k: int) -> pd.DataFrame:
    """The ablation table as a paper prints it: each number with its interval in one cell (the CSV keeps them
    apart)."""

    def cells(mean: str, low: str, high: str) -> list[str]:
        rows = zip(table[mean], table[low], table[high], strict=True)
        return [
            "" if pd.isna(m) else f"{m:.2f}" if pd.isna(lo) else f"{m:.2f} [{lo:.2f}, {hi:.2f}]" for m, lo, hi in rows
        ]

    shown = pd.DataFrame({"arm": table["arm"], "values": table["values"], "seeds": table["seeds"]})
    for k in ks:
        shown[f"pass@{k} (95% CI)"] = cells(f"pass@{k}", f"pass@{k}_ci95_low", f"pass@{k}_ci95_high")
    if f"diff_pass@{main_k}" in table:
        shown[f"vs reference, pass@{main_k} (95% CI)"] = cells(f"diff_pass@{main_k}", "diff_ci95_low", "diff_ci95_high")
        shown["p (seeds, paired t)"] = table["p_seeds"]
        wins = zip(table["task_wins"], table["task_losses"], strict=True)
        shown["tasks better / worse"] = ["" if pd.isna(w) else f"{int(w)} / {int(lo)}" for w, lo in wins]
        shown["p (tasks, sign test)"] = table["p_sign"]
        boot = zip(table["task_bootstrap_low"], table["task_bootstrap_high"], strict=True)
        shown["tasks, bootstrap 95% CI"] = ["" if pd.isna(lo) else f"[{lo:.2f}, {hi:.2f}]" for lo, hi in boot]
    if "gpu_hours" in table:
        shown["GPU-h"] = table["gpu_hours"]
    if "stopped_at_rung" in table:
        shown["stopped at rung"] = ["" if pd.isna(e) else f"epoch {int(e)}" for e in table["stopped_at_rung"]]
    if table["protocol_vs_base"].astype(bool).any():
        shown["protocol vs base"] = table["protocol_vs_base"]
    return shown


def render_report(
    out_dir: str | Path,
    metrics_paths: Sequence[str | Path],
    train_metrics_paths: Sequence[str | Path] = (),
    dataset_dirs: Mapping[str, str | Path] | None = None,
    runs: Mapping[str, RunInfo] | None = None,
    main_k: int = 2,
    ensemble_paths: Sequence[str | Path] = (),
) -> list[Path]:
    """Write passk, comparison, seeds, datasets and learning tables (.csv, .md, .html each), passk_vs_step.png,
    loss_vs_step.png, accuracy_vs_step.png, passk_vs_depth.png and passk_vs_loop_steps.png. `ensemble_paths`:
    metrics of checkpoint ensembles, rows of passk only (`tables.passk_table`)."""
    inputs = load_report_inputs(metrics_paths, train_metrics_paths, dataset_dirs, ensemble_paths)
    runs = runs or {}
    return _write_report(Path(out_dir), inputs, runs, main_k, comparison_table(inputs.evals, runs, main_k))


def render_pooled(
    csv_path: str | Path, md_path: str | Path, votes_paths: Sequence[str | Path], ks: Sequence[int] | None = None
) -> None:
    """Write the pooled-votes table (upstream's in-training numbers) as CSV, Markdown and HTML."""
    write_table(
        pooled_table(votes_paths, ks),
        csv_path,
        md_path,
        "pass@K with votes pooled across checkpoints",
        [
            "Each row pools the votes of that checkpoint and every earlier one of the run, as upstream's evaluator "
            "does during training (aggregated voting); pass@K in %.",
        ],
    )


def write_selection(out_dir: Path, table: pd.DataFrame, chosen: dict[str, dict], n: int, main_k: int = 2) -> list[Path]:
    """Write `selection.selection_table`'s table and held-out tasks: selection.{csv,md,html} and
    selection_tasks.json."""
    by_set: dict[tuple[str, ...], list[str]] = {}
    for run, info in chosen.items():
        by_set.setdefault(tuple(info["held_out"]), []).append(run)
    if n:
        notes = [
            f"Per run: the checkpoint with the best pass@{main_k} on {n} held-out test tasks "
            "(evaluation.selection_tasks; ties to the later), the last checkpoint, and the one selected on the whole "
            "test set (optimistic; ties to the earlier, as in comparison.md).",
            "pass@K in % on the other test tasks only, with fractional credit per task as in passk.md; "
            f"held_out_pass@{main_k}: on the held-out tasks.",
            "Held-out tasks: numpy default_rng(seed) over the sorted task names, seed = the run's dataset seed "
            "(datasets.<name>.seed); also in selection_tasks.json.",
            *(f"Held out for {', '.join(runs)}: {', '.join(tasks)}." for tasks, runs in by_set.items()),
        ]
    else:
        notes = ["evaluation.selection_tasks is 0: no test tasks are held out, so there is no selection to show."]
    write_table(
        table, out_dir / "selection.csv", out_dir / "selection.md", "Checkpoint selection on held-out tasks", notes
    )
    tasks_json = {"selection_tasks": n, "runs": chosen}
    atomic_write_many(out_dir, {"selection_tasks.json": (json.dumps(tasks_json, indent=2) + "\n").encode()})
    return [*table_files(out_dir, "selection"), out_dir / "selection_tasks.json"]


def write_summary(out_dir: Path, cfg: WorkflowConfig, table: pd.DataFrame) -> list[Path]:
    """Write `summary.summary_table`'s table: summary.csv with every column, summary.md and .html compact."""
    main = f"pass@{cfg.report.main_k}"
    n = cfg.evaluation.selection_tasks
    notes = [
        f"{main} in % (`report.main_k`), with the checkpoint's epoch. last: the run's last checkpoint; selected: "
        + (
            f"the best on {n} held-out test tasks (`evaluation.selection_tasks`); the three are scored on the other "
            "tasks (selection.md)."
            if n
            else "none, as `evaluation.selection_tasks` is 0 (selection.md)."
        )
        + f" best on test: the best checkpoint {SELECTED_ON_TEST}, an optimistic number.",
        "published: the paper's number on the full benchmark in its metric (HRM, TRM and VARC pass@2, URM "
        "pass@1); ours: the last checkpoint at that metric on every test task. A cut-down dataset has no published "
        "number.",
        "GPU-h: training step times and evaluation wall times from the metrics (no start-up, compilation or queue "
        f"waits), each times the GPUs its job held (CPU jobs: 0); cost: GPU-h x {cfg.report.gpu_hour_price} "
        "(`report.gpu_hour_price`). Every column, wall hours included: summary.csv.",
        "forecast GPU-h: what `arcpipe config check` forecast for the whole run before it started (arcpipe.forecast: "
        "steps and FLOPs from the config, throughput from an `arcpipe doctor` record on the run's GPU or the "
        "stated assumption; summary.csv's throughput_source says which).",
        "status: how a run ended when its scores do not say it: `not started: gate ...` (a gate fell short: "
        "results/gates/), `stopped at epoch E of P: ...` (its stop rule fired: results/runs/<run>/decisions/); saved "
        "GPU-h: what the epochs a stop rule skipped would have cost at the rate of the trained ones.",
        "Per task: [every task and what each run answered](tasks/index.html), each task's page linked from there, and "
        "[every table and plot](index.html) on the report's front page (written by `snakemake report`, and by "
        "`snakemake full` for its report in results/report/full/).",
    ]
    shown = compact(table, main)
    write_table(table, out_dir / "summary.csv", out_dir / "summary.md", "Results summary", notes, shown)
    return table_files(out_dir, "summary")


# --------------------------------------------------------------------------------------------------------------


def _statuses(cfg: WorkflowConfig, comparison: pd.DataFrame) -> dict[str, str]:
    # runs whose gate (a run of this report) fell short: the summary says so instead of leaving them out
    reported = set(comparison["run"]) if len(comparison) else set()
    gated = [name for name, run in cfg.runs.items() if run.gate is not None and run.gate.run in reported]
    return {name: status for name in gated if (status := gate_status(RESULTS, name))}


def _stops(cfg: WorkflowConfig, comparison: pd.DataFrame) -> dict[str, dict[str, Any]]:
    # each reported run a stop rule ended: the decision record where its plan stopped (arcpipe.plan)
    names = sorted(set(comparison["run"])) if len(comparison) else []
    return stop_records(cfg, RESULTS, names)


def _write_report(
    out_dir: Path,
    inputs: ReportInputs,
    runs: Mapping[str, RunInfo],
    main_k: int,
    comparison: pd.DataFrame,
    quick: pd.DataFrame | None = None,
) -> list[Path]:
    # every table and plot but the selection and the summary; comparison: comparison_table(inputs.evals, ...)
    evals = inputs.evals
    passk_notes = PASSK_NOTES
    if len(inputs.ensembles):
        passk_notes = [
            *PASSK_NOTES,
            "Ensembles of a run's last K checkpoints: avg_lastK, the checkpoint whose weights are their average; "
            "pooled_lastK, their votes pooled. epoch: the last of the K.",
        ]
    if quick is not None and len(quick):
        passk_notes = [*passk_notes, *quick_notes(evals, quick, main_k)]
    passk = passk_table(evals, runs, inputs.ensembles, quick)
    write_table(passk, out_dir / "passk.csv", out_dir / "passk.md", "pass@K per checkpoint", passk_notes)
    write_table(
        comparison,
        out_dir / "comparison.csv",
        out_dir / "comparison.md",
        "Runs compared with published numbers",
        [
            *PASSK_NOTES,
            f"best_pass@{main_k} is the best checkpoint {SELECTED_ON_TEST}: an optimistic number, not a held-out one.",
            "Published: HRM and TRM report pass@2, URM pass@1 (upstream papers); they are not directly comparable.",
        ],
    )
    groups = seed_groups(runs)
    write_table(
        seed_table(evals, groups),
        out_dir / "seeds.csv",
        out_dir / "seeds.md",
        "pass@K over seeds",
        [
            "Per seed group (a run's `seeds:` list; a run without one is a group of one seed) and checkpoint: pass@K "
            "in % over the seeds evaluated there: mean, sample standard deviation (ddof=1), min, max.",
            "ci95: mean +- t_{0.975, n-1} * sd / sqrt(n) (Student t over seeds); one seed has no sd and no interval.",
        ],
    )
    written = table_files(out_dir, "passk", "comparison", "seeds")
    if inputs.datasets:
        write_table(dataset_table(inputs.datasets), out_dir / "datasets.csv", out_dir / "datasets.md", "Datasets")
        written += table_files(out_dir, "datasets")
    plot_ks = sorted({1, main_k} & set(pass_ks(evals))) or pass_ks(evals)[:2]
    plot_passk(
        evals,
        out_dir / "passk_vs_step.png",
        ks=plot_ks,
        seed_groups={run: group for run, (group, _) in groups.items()},
    )
    plot_loss(inputs.train[LOSS], out_dir / "loss_vs_step.png")
    written += [out_dir / "passk_vs_step.png", out_dir / "loss_vs_step.png"]
    accuracy = accuracy_curves(inputs.train)
    plot_accuracy(accuracy, out_dir / "accuracy_vs_step.png")
    write_table(
        learning_table(accuracy),
        out_dir / "learning.csv",
        out_dir / "learning.md",
        "Training token accuracy, first vs last steps",
        [
            f"train/accuracy in %: token accuracy of the rows that halted at a step, at a run's first counted step and "
            f"averaged over its last {N_STEPS} (counted: at least one row halted; the others measured nothing).",
            "rise: last minus first, in points.",
        ],
    )
    written += [out_dir / "accuracy_vs_step.png", *table_files(out_dir, "learning")]
    plot_depth(depth_curves(evals, inputs.metrics), out_dir / "passk_vs_depth.png", ks=plot_ks)
    plot_loop_steps(loop_step_curves(evals, inputs.per_puzzle), out_dir / "passk_vs_loop_steps.png", ks=plot_ks)
    written += [out_dir / "passk_vs_depth.png", out_dir / "passk_vs_loop_steps.png"]
    return written
