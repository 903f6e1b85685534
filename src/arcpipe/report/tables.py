"""pass@K tables across runs and checkpoints, pooled-vote tables, the run comparison and dataset statistics.

Every function takes file paths explicitly (the Snakemake rules pass them) and every table is written as CSV,
Markdown and HTML (the page `snakemake --report` shows in place), atomically. pass@K values are percentages in the
tables.

    render_report(out_dir, metrics_paths, train_metrics_paths, dataset_dirs, runs)   # passk, comparison, plots
    render_pooled(out_dir, votes_paths)                                               # pooled votes
    render_report(..., ensemble_paths=[".../avg_last2/metrics.json", ".../pooled_last2/metrics.json"])
"""

from __future__ import annotations

import html
import json
import logging
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from arcpipe.config import ArcpipeError
from arcpipe.files import atomic_write_many

if TYPE_CHECKING:
    from arcpipe.config import WorkflowConfig

log = logging.getLogger(__name__)

SELECTED_ON_TEST = "selected on the test set"
CONTROL_LABELS = {"blank_puzzle_id": "blank id"}  # metrics.json "controls" -> the label in column names
# inline-sized, id-scoped styles of the HTML tables (to_html): readable alone and inside Snakemake's report page
TABLE_CSS = [
    {"selector": "th, td", "props": "border: 1px solid #d0d7de; padding: 0.15rem 0.35rem"},
    {"selector": "td", "props": "white-space: nowrap"},
    {"selector": "thead th", "props": "background: #f6f8fa; text-align: left; vertical-align: bottom"},
]
HEADING_CSS = "font-size: 1.1rem; font-weight: 600; margin: 1rem 0 0.25rem"


@dataclass(frozen=True)
class Published:
    value: float  # percent
    metric: str  # "pass@1" or "pass@2"
    source: str


# upstream.md section 6; URM's figures are pass@1, HRM's and TRM's pass@2: not directly comparable
PUBLISHED: dict[tuple[str, str], Published] = {
    ("hrm", "ARC-AGI-1"): Published(40.3, "pass@2", "HRM paper"),
    ("hrm", "ARC-AGI-2"): Published(5.0, "pass@2", "HRM paper"),
    ("trm", "ARC-AGI-1"): Published(44.6, "pass@2", "TRM paper, Table 5"),
    ("trm", "ARC-AGI-2"): Published(7.8, "pass@2", "TRM paper, Table 5"),
    ("urm", "ARC-AGI-1"): Published(53.8, "pass@1", "URM paper, abstract"),
    ("urm", "ARC-AGI-2"): Published(16.0, "pass@1", "URM paper, abstract"),
}


@dataclass(frozen=True)
class RunInfo:
    arch: str  # hrm, trm, urm, transformer
    benchmark: str | None  # "ARC-AGI-1", "ARC-AGI-2", or None when the test set is neither
    epochs: int  # the run's configured total, for progress %
    seed: int | None = None
    seed_group: str | None = None  # the run's `seeds:` list (config.RunConfig); None: a group of its own


def runs_from_config(cfg: WorkflowConfig) -> dict[str, RunInfo]:
    """RunInfo of every run of a validated workflow config."""
    return {
        name: RunInfo(run.arch, _benchmark(cfg, run.dataset), run.epochs, run.seed, run.seed_group)
        for name, run in cfg.runs.items()
    }


def load_evaluations(metrics_paths: Sequence[str | Path]) -> pd.DataFrame:
    """One row per metrics.json: run, epoch, step and every number in it, sorted by run and epoch.

    The run is metrics["info"]["run"], else the directory above `epoch_<N>/` (results/eval/{run}/epoch_{N}/); the
    epoch is metrics["epoch"], else N.
    """
    rows = []
    for path in map(Path, metrics_paths):
        try:
            metrics = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise ArcpipeError(f"{path}: cannot read evaluation metrics ({err}); re-run its evaluation") from err
        info = metrics.get("info") or {}
        match = re.fullmatch(r"epoch_(\d+)", path.parent.name)
        epoch = metrics.get("epoch") if metrics.get("epoch") is not None else (int(match[1]) if match else None)
        run = info.get("run") or (path.parent.parent.name if match else path.parent.name)
        rows.append(
            {
                "run": run,
                "epoch": epoch,
                "step": metrics.get("step"),
                **{k: v for k, v in metrics.items() if isinstance(v, int | float) and k not in ("epoch", "step")},
                **_control_columns(metrics),
                "path": str(path),
            }
        )
    if not rows:
        return pd.DataFrame(columns=["run", "epoch", "step", "path"])
    return pd.DataFrame(rows).sort_values(["run", "epoch"], kind="stable").reset_index(drop=True)


def pass_ks(frame: pd.DataFrame) -> list[int]:
    """The K of every pass@K column, ascending."""
    return sorted(int(c.split("@")[1]) for c in frame.columns if re.fullmatch(r"pass@\d+", str(c)))


def passk_table(
    evals: pd.DataFrame, runs: Mapping[str, RunInfo] | None = None, ensembles: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Run x checkpoint: epoch, step, progress %, pass@K (%) with fresh votes per checkpoint.

    `ensembles` (`load_evaluations` of results/eval/{run}/{avg,pooled}_last{K}/metrics.json, eval/ensemble.py) adds
    a row per run and ensemble after the run's checkpoints, at the epoch of the last checkpoint in it; the
    `checkpoint` column tells the rows apart (epoch_{N}, avg_last{K}, pooled_last{K}).
    """
    runs = runs or {}
    if ensembles is not None and len(ensembles):
        evals = pd.concat([evals, ensembles], ignore_index=True).sort_values("run", kind="stable")
    table = pd.DataFrame(
        {
            "run": evals["run"],
            "checkpoint": [Path(p).parent.name for p in evals["path"]],
            "epoch": evals["epoch"],
            "step": evals["step"],
            "progress_%": [
                _progress(epoch, runs.get(run)) for run, epoch in zip(evals["run"], evals["epoch"], strict=True)
            ],
        }
    )
    for k in pass_ks(evals):
        table[f"pass@{k}"] = 100 * evals[f"pass@{k}"]
        for label in CONTROL_LABELS.values():  # a control pass's pass@K beside the normal one
            if f"pass@{k} ({label})" in evals:
                table[f"pass@{k} ({label})"] = 100 * evals[f"pass@{k} ({label})"]
    return table


def pooled_table(votes_paths: Sequence[str | Path], ks: Sequence[int] | None = None) -> pd.DataFrame:
    """Run x checkpoint pass@K (%) with votes pooled over that checkpoint and all earlier ones of its run.

    This is what upstream logs during training (aggregated voting, upstream.md 5.4). Paths are grouped by run
    (results/eval/{run}/epoch_{N}/votes.npz) and pooled in epoch order.
    """
    from arcpipe.eval.passk import DEFAULT_KS
    from arcpipe.eval.results import pool_votes

    ks = tuple(ks or DEFAULT_KS)
    by_run: dict[str, list[tuple[int, Path]]] = {}
    for path in map(Path, votes_paths):
        match = re.fullmatch(r"epoch_(\d+)", path.parent.name)
        if not match:
            raise ArcpipeError(f"{path}: expected results/eval/<run>/epoch_<N>/votes.npz")
        by_run.setdefault(path.parent.parent.name, []).append((int(match[1]), path))
    rows = []
    for run, items in sorted(by_run.items()):
        items.sort()
        for i, (epoch, _) in enumerate(items):
            scores, _, _ = pool_votes([p for _, p in items[: i + 1]], ks)
            rows.append(
                {"run": run, "epoch": epoch, "checkpoints_pooled": i + 1}
                | {f"pass@{k}": 100 * v for k, v in scores.pass_at.items()}
            )
    return pd.DataFrame(rows, columns=["run", "epoch", "checkpoints_pooled", *(f"pass@{k}" for k in ks)])


def comparison_table(evals: pd.DataFrame, runs: Mapping[str, RunInfo] | None = None, main_k: int = 2) -> pd.DataFrame:
    """One row per run: the last checkpoint's pass@K, the best checkpoint at pass@main_k, the published number."""
    runs = runs or {}
    rows = []
    for run, group in evals.groupby("run", sort=True):
        info = runs.get(str(run))
        last = group.iloc[-1]
        best = group.loc[group[f"pass@{main_k}"].idxmax()] if f"pass@{main_k}" in group else last
        published = PUBLISHED.get((info.arch, info.benchmark)) if info and info.benchmark else None
        row: dict[str, Any] = {
            "run": run,
            "arch": info.arch if info else "",
            "benchmark": (info.benchmark or "") if info else "",
            "checkpoints": len(group),
            "last_epoch": last["epoch"],
            "progress_%": _progress(last["epoch"], info),
        }
        for k in pass_ks(evals):
            row[f"pass@{k}"] = 100 * last[f"pass@{k}"]
        row[f"best_pass@{main_k} ({SELECTED_ON_TEST})"] = 100 * best[f"pass@{main_k}"] if len(group) else math.nan
        row["best_epoch"] = best["epoch"]
        row["published"] = published.value if published else math.nan
        row["published_metric"] = published.metric if published else ""
        row["ours_on_published_metric"] = (
            100 * last[published.metric] if published and published.metric in last else math.nan
        )
        rows.append(row)
    return pd.DataFrame(rows)


def dataset_table(dataset_dirs: Mapping[str, str | Path]) -> pd.DataFrame:
    """Dataset statistics from each built dataset's dataset.json files, identifiers.json and test_puzzles.json."""
    rows = []
    for name, directory in dataset_dirs.items():
        directory = Path(directory)
        row: dict[str, Any] = {"dataset": name}
        for split in ("train", "test"):
            meta = _read_json(directory / split / "dataset.json")
            row[f"{split}_groups"] = meta.get("total_groups")
            row[f"{split}_puzzles"] = meta.get("total_puzzles")
            mean = meta.get("mean_puzzle_examples")
            row[f"{split}_mean_examples"] = round(mean, 4) if mean is not None else None
            puzzles = meta.get("total_puzzles")
            row[f"{split}_examples"] = round(puzzles * mean) if puzzles is not None and mean is not None else None
        row["identifiers"] = len(_read_json(directory / "identifiers.json"))
        test = _read_json(directory / "test_puzzles.json")
        row["test_tasks"] = len(test)
        row["test_inputs"] = sum(len(task.get("test", [])) for task in test.values())
        rows.append(row)
    return pd.DataFrame(rows)


def train_curves(train_metrics_paths: Sequence[str | Path], key: str = "train/lm_loss") -> pd.DataFrame:
    """(run, step, epoch, value) from results/runs/{run}/metrics/epoch_*.jsonl, sorted by run and step."""
    rows = []
    for path in map(Path, train_metrics_paths):
        run = path.parent.parent.name
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            record = json.loads(line)
            if key in record:
                rows.append((run, record["step"], record.get("epoch"), record[key]))
    frame = pd.DataFrame(rows, columns=["run", "step", "epoch", key])
    return frame.sort_values(["run", "step"], kind="stable").drop_duplicates(["run", "step"], keep="last")


ACCURACY = "train/accuracy"
# counted steps averaged at the end of a run in learning.md. smoke-trm counts 7 of its 14 steps (rows halt on
# alternate steps) and its accuracy jumps from ~10% to its plateau within two or three counted steps, so the start
# is the first counted step alone (the model after one update) and the end the mean of the last 3, which damps the
# plateau's step-to-step noise (benchmarks/RESULTS.md, "Smoke learning")
N_STEPS = 3


def accuracy_curves(train_metrics_paths: Sequence[str | Path]) -> pd.DataFrame:
    """(run, step, epoch, train/accuracy) of the steps where at least one row halted, sorted by run and step.

    train/accuracy is the token accuracy of the rows that halted at that step (models/losses.py); on a step where
    none halted, nothing was measured and the trainer writes train/count 0 and train/accuracy 0.0: those steps are
    left out here rather than read as 0% accuracy.
    """
    accuracy = train_curves(train_metrics_paths, ACCURACY)
    count = train_curves(train_metrics_paths, "train/count")[["run", "step", "train/count"]]
    merged = accuracy.merge(count, on=["run", "step"], how="inner")
    return merged[merged["train/count"] > 0].drop(columns="train/count").reset_index(drop=True)


def learning_table(curves: pd.DataFrame, n_steps: int = N_STEPS) -> pd.DataFrame:
    """Per run: training token accuracy (%) at its first counted step and averaged over its last `n_steps` counted
    steps, and the rise between them in points. curves: as `accuracy_curves` gives."""
    last_column = f"last_{n_steps}_accuracy"
    rows = []
    for run, group in curves.groupby("run", sort=True):
        values = 100 * group[ACCURACY].to_numpy(float)
        first, last = values[0], values[-n_steps:].mean()
        rows.append(
            {
                "run": run,
                "counted_steps": len(values),
                "first_step": int(group["step"].iloc[0]),
                "last_step": int(group["step"].iloc[-1]),
                "first_accuracy": first,
                last_column: last,
                "rise": last - first,
            }
        )
    columns = ["run", "counted_steps", "first_step", "last_step", "first_accuracy", last_column, "rise"]
    return pd.DataFrame(rows, columns=columns)


def depth_curves(evals: pd.DataFrame) -> pd.DataFrame:
    """(run, epoch, depth, pass@K...) for every ACT step of each run's last checkpoint that has pass@K per step.

    evals: `load_evaluations`' frame. A metrics.json written before evaluations recorded "depth" is skipped, and a
    run without any is left out. pass@K values are fractions, as in metrics.json.
    """
    rows = []
    for run, group in evals.groupby("run", sort=True):
        for path, epoch in zip(group["path"].iloc[::-1], group["epoch"].iloc[::-1], strict=True):
            depth = json.loads(Path(path).read_text()).get("depth")
            if depth:
                rows += [{"run": run, "epoch": epoch, "depth": int(d), **by_k} for d, by_k in depth.items()]
                break
    frame = pd.DataFrame(rows) if rows else pd.DataFrame(columns=["run", "epoch", "depth"])
    return frame.sort_values(["run", "depth"], kind="stable").reset_index(drop=True)


def to_markdown(frame: pd.DataFrame, title: str = "", notes: Sequence[str] = ()) -> str:
    """A GitHub Markdown table (numbers to 2 decimals) with an optional title and notes below it."""
    columns = [str(c) for c in frame.columns]
    lines = [f"# {title}", ""] if title else []
    lines += [
        "| " + " | ".join(columns) + " |",
        "|" + "|".join("---:" if _numeric(frame[c]) else "---" for c in frame.columns) + "|",
    ]
    for _, row in frame.iterrows():
        lines.append("| " + " | ".join(_cell(v) for v in row) + " |")
    if notes:
        lines += [""] + [f"{note}" for note in notes]
    return "\n".join(lines) + "\n"


def to_html(frame: pd.DataFrame, title: str = "", notes: Sequence[str] = (), uid: str = "table") -> str:
    """An HTML page: the title, the table (cells as in `to_markdown`, numbers right-aligned) and the notes.

    Styles are scoped to the table's id (`uid`), so the page can also be pasted into another one (the report's
    opening summary is: workflow/report/workflow.rst). Backquoted words in the notes become code.
    """
    uid = re.sub(r"\W", "_", uid)
    numeric = [c for c in frame.columns if _numeric(frame[c])]
    styler = (
        frame.style.set_uuid(uid)
        .hide(axis="index")
        .format(_cell, escape="html")
        .format_index(escape="html", axis=1)
        .set_table_attributes('style="border-collapse: collapse; font-size: 0.75rem; margin: 0.5rem 0 1rem"')
        .set_table_styles(TABLE_CSS)
    )
    if numeric:
        styler = styler.set_table_styles(
            {c: [{"selector": "td", "props": "text-align: right"}] for c in numeric}, overwrite=False
        )
    parts = ['<meta charset="utf-8">']
    if title:
        parts += [f"<title>{html.escape(title)}</title>", f'<h2 style="{HEADING_CSS}">{html.escape(title)}</h2>']
    parts.append(f'<div style="overflow-x: auto; max-width: 100%">\n{styler.to_html()}</div>')  # wide: scrolls
    parts += [f'<p style="font-size: 0.85rem; margin: 0.25rem 0">{_inline_code(note)}</p>' for note in notes]
    return "\n".join(parts) + "\n"


def write_table(
    frame: pd.DataFrame,
    csv_path: str | Path,
    md_path: str | Path,
    title: str,
    notes: Sequence[str] = (),
    shown: pd.DataFrame | None = None,
):
    """Write a table as CSV, Markdown and HTML (md_path with the suffix .html), each atomically. `shown`: a compact
    view of the same rows for the Markdown and HTML (the CSV keeps every column)."""
    md_path = Path(md_path)
    shown = frame if shown is None else shown
    html_text = to_html(shown, title, notes, uid=md_path.stem)
    for path, text in (
        (Path(csv_path), frame.to_csv(index=False)),
        (md_path, to_markdown(shown, title, notes)),
        (md_path.with_suffix(".html"), html_text),
    ):
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_many(path.parent, {path.name: text.encode()})


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
    loss_vs_step.png, accuracy_vs_step.png and passk_vs_depth.png. `ensemble_paths`: metrics of checkpoint
    ensembles, rows of passk only (`passk_table`)."""
    from arcpipe.report.plots import plot_accuracy, plot_depth, plot_loss, plot_passk
    from arcpipe.report.seeds import seed_groups, seed_table

    out_dir = Path(out_dir)
    evals = load_evaluations(metrics_paths)
    written = []
    notes = [
        "pass@K in %, averaged over every test task (fractional credit for tasks with several test inputs).",
        "Votes are fresh for each checkpoint (single-checkpoint); see pooled.md for upstream's pooled numbers.",
    ]
    ensembles = load_evaluations(ensemble_paths)
    passk_notes = notes
    if len(ensembles):
        passk_notes = [
            *notes,
            "Ensembles of a run's last K checkpoints: avg_lastK, the checkpoint whose weights are their average; "
            "pooled_lastK, their votes pooled. epoch: the last of the K.",
        ]
    passk = passk_table(evals, runs, ensembles)
    write_table(passk, out_dir / "passk.csv", out_dir / "passk.md", "pass@K per checkpoint", passk_notes)
    comparison = comparison_table(evals, runs, main_k)
    write_table(
        comparison,
        out_dir / "comparison.csv",
        out_dir / "comparison.md",
        "Runs compared with published numbers",
        [
            *notes,
            f"best_pass@{main_k} is the best checkpoint {SELECTED_ON_TEST}: an optimistic number, not a held-out one.",
            "Published: HRM and TRM report pass@2, URM pass@1 (upstream papers); they are not directly comparable.",
        ],
    )
    groups = seed_groups(runs or {})
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
    written += _table_files(out_dir, "passk", "comparison", "seeds")
    if dataset_dirs:
        write_table(dataset_table(dataset_dirs), out_dir / "datasets.csv", out_dir / "datasets.md", "Datasets")
        written += _table_files(out_dir, "datasets")
    plot_passk(
        evals,
        out_dir / "passk_vs_step.png",
        ks=sorted({1, main_k} & set(pass_ks(evals))) or pass_ks(evals)[:2],
        seed_groups={run: group for run, (group, _) in groups.items()},
    )
    plot_loss(train_curves(train_metrics_paths), out_dir / "loss_vs_step.png")
    written += [out_dir / "passk_vs_step.png", out_dir / "loss_vs_step.png"]
    accuracy = accuracy_curves(train_metrics_paths)
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
    written += [out_dir / "accuracy_vs_step.png", *_table_files(out_dir, "learning")]
    depth_ks = sorted({1, main_k} & set(pass_ks(evals))) or pass_ks(evals)[:2]
    plot_depth(depth_curves(evals), out_dir / "passk_vs_depth.png", ks=depth_ks)
    written.append(out_dir / "passk_vs_depth.png")
    return written


def render_workflow_report(
    out_dir: str | Path,
    config: Mapping[str, Any],
    metrics_paths: Sequence[str | Path],
    train_metrics_paths: Sequence[str | Path],
    verify_paths: Sequence[str | Path],
    ensemble_paths: Sequence[str | Path] = (),
) -> list[Path]:
    """`render_report` for the workflow: runs and main_k from the config, datasets from their verify.json paths;
    the checkpoint selection on evaluation.selection_tasks held-out tasks (report/selection.py); and the summary
    the HTML report opens on (report/summary.py)."""
    from arcpipe.config import WorkflowConfig
    from arcpipe.report.selection import selection_table, write_selection
    from arcpipe.report.summary import render_summary

    cfg = WorkflowConfig.model_validate(dict(config))
    datasets = {Path(p).parent.name: Path(p).parent for p in verify_paths}  # results/data/<dataset>/verify.json
    seeds = {name: cfg.datasets[run.dataset].seed for name, run in cfg.runs.items()}  # of the held-out draw
    n, main_k, runs = cfg.evaluation.selection_tasks, cfg.report.main_k, runs_from_config(cfg)
    evals = load_evaluations(metrics_paths)
    selection, chosen = selection_table(evals, n, seeds, main_k)
    written = write_selection(out_dir, selection, chosen, n, main_k)
    written += render_report(out_dir, metrics_paths, train_metrics_paths, datasets, runs, main_k, ensemble_paths)
    comparison = comparison_table(evals, runs, main_k)
    return written + render_summary(out_dir, cfg, runs, comparison, selection, evals, train_metrics_paths)


def render_pooled(
    csv_path: str | Path, md_path: str | Path, votes_paths: Sequence[str | Path], ks: Sequence[int] | None = None
):
    """Write the pooled-votes table (upstream's in-training numbers) as CSV and Markdown."""
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


# --------------------------------------------------------------------------------------------------------------


def _benchmark(cfg: WorkflowConfig, dataset_name: str) -> str | None:
    # upstream's test subset names; a dataset cut down by max_puzzles is not the published benchmark
    dataset = cfg.datasets.get(dataset_name)
    if dataset is None:
        return None
    name = {"evaluation": "ARC-AGI-1", "evaluation2": "ARC-AGI-2"}.get(dataset.test_set)
    if name and dataset.max_puzzles:
        return f"{name} (subset)"
    return name


def _control_columns(metrics: Mapping[str, Any]) -> dict[str, float]:
    # {"controls": {"blank_puzzle_id": {"pass@2": x}}} -> {"pass@2 (blank id)": x}
    controls = metrics.get("controls") or {}
    return {
        f"{key} ({CONTROL_LABELS.get(name, name)})": v for name, by_k in controls.items() for key, v in by_k.items()
    }


def _progress(epoch: Any, info: RunInfo | None) -> float:
    if info is None or epoch is None or not info.epochs:
        return math.nan
    return round(100 * float(epoch) / info.epochs, 1)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ArcpipeError(f"{path}: cannot read ({err}); rebuild the dataset") from err


def _numeric(column: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(column)


def _table_files(out_dir: Path, *stems: str) -> list[Path]:
    return [out_dir / f"{stem}.{ext}" for stem in stems for ext in ("csv", "md", "html")]


def _inline_code(text: str) -> str:
    escaped = html.escape(text)
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped)


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return f"{value:.2f}" if not value.is_integer() or abs(value) < 1000 else f"{value:.0f}"
    return str(value)
