"""The report's tables, each a function of what report/load.py loaded: pass@K per checkpoint, the run comparison
with published numbers, dataset statistics, training accuracy first vs last, the curves of pass@K against ACT step;
and the pooled-votes table of rule pool_votes. pass@K values are percentages in the tables.

    evals = inputs.evals                                # load.load_report_inputs(...)
    passk_table(evals, runs, inputs.ensembles)          # run x checkpoint
    comparison_table(evals, runs, main_k)               # one row per run
    learning_table(accuracy_curves(inputs.train))       # one row per run
    pooled_table(votes_paths, ks)                       # votes pooled over each run's checkpoints
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from arcpipe.config import ArcpipeError
from arcpipe.eval.pool import pool_votes
from arcpipe.eval.score import DEFAULT_KS
from arcpipe.report.format import SELECTED_ON_TEST
from arcpipe.report.load import ACCURACY, CONTROL_LABELS, COUNT, DatasetFiles, RunInfo
from arcpipe.report.quick import checkpoint_name


@dataclass(frozen=True)
class Published:
    value: float  # percent
    metric: str  # "pass@1" or "pass@2"
    source: str


# docs/reference/upstream-recursive.md 11.1; URM's figures are pass@1, HRM's and TRM's pass@2: not directly comparable
PUBLISHED: dict[tuple[str, str], Published] = {
    ("hrm", "ARC-AGI-1"): Published(40.3, "pass@2", "HRM paper"),
    ("hrm", "ARC-AGI-2"): Published(5.0, "pass@2", "HRM paper"),
    ("trm", "ARC-AGI-1"): Published(44.6, "pass@2", "TRM paper, Table 5"),
    ("trm", "ARC-AGI-2"): Published(7.8, "pass@2", "TRM paper, Table 5"),
    ("urm", "ARC-AGI-1"): Published(53.8, "pass@1", "URM paper, abstract"),
    ("urm", "ARC-AGI-2"): Published(16.0, "pass@1", "URM paper, abstract"),
    # VARC-ViT-18M, one test-time training per task (upstream's README: a run lands in 52-56 and 6-10)
    ("varc", "ARC-AGI-1"): Published(54.5, "pass@2", "VARC paper (ViT-18M)"),
    ("varc", "ARC-AGI-2"): Published(8.3, "pass@2", "VARC paper (ViT-18M)"),
    # LoopViT-Large (18M; arcpipe's `large`/`arc` presets, the loopvit-arc1 run), one test-time training per task as
    # VARC's (arXiv 2602.02156 and WenjieShu/LoopViT's README); LoopViT-Small's figure is in PUBLISHED_BY_PRESET
    ("loopvit", "ARC-AGI-1"): Published(65.8, "pass@2", "LoopViT paper (LoopViT-Large, 18M)"),
}
# a figure that holds for one preset of an arch only, before PUBLISHED's figure for the arch (`published_figure`)
PUBLISHED_BY_PRESET: dict[tuple[str, str, str], Published] = {
    ("loopvit", "small", "ARC-AGI-1"): Published(60.1, "pass@2", "LoopViT paper (LoopViT-Small, 3.8M)"),
}


def published_figure(info: RunInfo | None) -> Published | None:
    """The published figure beside a run's row: its preset's (PUBLISHED_BY_PRESET), else its arch's (PUBLISHED) on
    the run's benchmark; None when the run's test set is no benchmark or nothing is published for it."""
    if info is None or not info.benchmark:
        return None
    by_preset = PUBLISHED_BY_PRESET.get((info.arch, info.preset or "", info.benchmark))
    return by_preset or PUBLISHED.get((info.arch, info.benchmark))


def pass_ks(frame: pd.DataFrame) -> list[int]:
    """The K of every pass@K column, ascending."""
    return sorted(int(c.split("@")[1]) for c in frame.columns if re.fullmatch(r"pass@\d+", str(c)))


def passk_table(
    evals: pd.DataFrame,
    runs: Mapping[str, RunInfo] | None = None,
    ensembles: pd.DataFrame | None = None,
    quick: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Run x checkpoint: epoch, step, progress %, pass@K (%) with fresh votes per checkpoint.

    `ensembles` (`load.load_evaluations` of results/eval/{run}/{avg,pooled}_last{K}/metrics.json,
    eval/ensemble.py) adds a row per run and ensemble after the run's checkpoints, at the epoch of the last
    checkpoint in it; the `checkpoint` column tells the rows apart (epoch_{N}, avg_last{K}, pooled_last{K}).
    `quick` (the quick evaluations, evaluation.quick): a row for each checkpoint without a full evaluation, and a
    column `evaluation` (full or quick) after `checkpoint`; without quick evaluations the table is as before.
    """
    runs = runs or {}
    marked = quick is not None and len(quick) > 0
    if marked:
        assert quick is not None
        have = set(zip(evals["run"], evals["epoch"], strict=True))
        only = quick[[key not in have for key in zip(quick["run"], quick["epoch"], strict=True)]]
        evals = pd.concat([evals.assign(evaluation="full"), only.assign(evaluation="quick")], ignore_index=True)
        evals = evals.sort_values(["run", "epoch"], kind="stable")
        if ensembles is not None and len(ensembles):
            ensembles = ensembles.assign(evaluation="full")
    if ensembles is not None and len(ensembles):
        evals = pd.concat([evals, ensembles], ignore_index=True).sort_values("run", kind="stable")
    table = pd.DataFrame(
        {
            "run": evals["run"],
            "checkpoint": [checkpoint_name(p) for p in evals["path"]],
            "epoch": evals["epoch"],
            "step": evals["step"],
            "progress_%": [
                _progress(epoch, runs.get(run)) for run, epoch in zip(evals["run"], evals["epoch"], strict=True)
            ],
        }
    )
    if marked:
        table.insert(2, "evaluation", evals["evaluation"])
    for k in pass_ks(evals):
        table[f"pass@{k}"] = 100 * evals[f"pass@{k}"]
        for label in CONTROL_LABELS.values():  # a control pass's pass@K beside the normal one
            if f"pass@{k} ({label})" in evals:
                table[f"pass@{k} ({label})"] = 100 * evals[f"pass@{k} ({label})"]
    return table


def pooled_table(votes_paths: Sequence[str | Path], ks: Sequence[int] | None = None) -> pd.DataFrame:
    """Run x checkpoint pass@K (%) with votes pooled over that checkpoint and all earlier ones of its run.

    This is what upstream logs during training (aggregated voting, docs/reference/upstream-recursive.md 10.4). Paths are
    grouped by run (results/eval/{run}/epoch_{N}/votes.npz) and pooled in epoch order.
    """
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
        published = published_figure(info)
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


def dataset_table(datasets: Mapping[str, DatasetFiles]) -> pd.DataFrame:
    """Dataset statistics from each built dataset's dataset.json files, identifiers.json and test_puzzles.json."""
    rows = []
    for name, files in datasets.items():
        row: dict[str, Any] = {"dataset": name}
        for split in ("train", "test"):
            meta = files.meta[split]
            row[f"{split}_groups"] = meta.get("total_groups")
            row[f"{split}_puzzles"] = meta.get("total_puzzles")
            mean = meta.get("mean_puzzle_examples")
            row[f"{split}_mean_examples"] = round(mean, 4) if mean is not None else None
            puzzles = meta.get("total_puzzles")
            row[f"{split}_examples"] = round(puzzles * mean) if puzzles is not None and mean is not None else None
        row["identifiers"] = len(files.identifiers)
        row["test_tasks"] = len(files.test_puzzles)
        row["test_inputs"] = sum(len(task.get("test", [])) for task in files.test_puzzles.values())
        rows.append(row)
    return pd.DataFrame(rows)


# counted steps averaged at the end of a run in learning.md. smoke-trm counts 7 of its 14 steps (rows halt on
# alternate steps) and its accuracy jumps from ~10% to its plateau within two or three counted steps, so the start
# is the first counted step alone (the model after one update) and the end the mean of the last 3, which damps the
# plateau's step-to-step noise (benchmarks/RESULTS.md, "Smoke learning")
N_STEPS = 3


def accuracy_curves(train: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """(run, step, epoch, train/accuracy) of the steps where at least one row halted, sorted by run and step.

    train: `load.read_train_curves`' curves. train/accuracy is the token accuracy of the rows that halted at that
    step (models/losses.py); on a step where none halted, nothing was measured and the trainer writes train/count 0
    and train/accuracy 0.0: those steps are left out here rather than read as 0% accuracy.
    """
    count = train[COUNT][["run", "step", COUNT]]
    merged = train[ACCURACY].merge(count, on=["run", "step"], how="inner")
    return merged[merged[COUNT] > 0].drop(columns=COUNT).reset_index(drop=True)


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


def depth_curves(evals: pd.DataFrame, metrics: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """(run, epoch, depth, pass@K...) for every ACT step of each run's last checkpoint that has pass@K per step.

    evals: `load.evaluations_frame(metrics)`; metrics: path -> content of each metrics.json. A metrics.json written
    before evaluations recorded "depth" is skipped, and a run without any is left out. pass@K values are fractions,
    as in metrics.json.
    """
    rows = []
    for run, group in evals.groupby("run", sort=True):
        for path, epoch in zip(group["path"].iloc[::-1], group["epoch"].iloc[::-1], strict=True):
            depth = metrics[path].get("depth")
            if depth:
                rows += [{"run": run, "epoch": epoch, "depth": int(d), **by_k} for d, by_k in depth.items()]
                break
    frame = pd.DataFrame(rows) if rows else pd.DataFrame(columns=["run", "epoch", "depth"])
    return frame.sort_values(["run", "depth"], kind="stable").reset_index(drop=True)


def loop_step_curves(evals: pd.DataFrame, per_puzzle: Mapping[str, pd.DataFrame] | None = None) -> pd.DataFrame:
    """(run, epoch, checkpoint, loop_steps, inputs, pass@K...) of each looped run's last evaluation whose
    per_puzzle.csv has `mean_loop_steps` (LoopViT's, eval/write.py): its test inputs grouped by the loop steps their
    answers took (the mean over the rows that answer an input, rounded to a whole step), pass@K of each group as a
    fraction and the group's size. Runs without loop steps are left out; so are inputs no row answered.

    evals: `load.evaluations_frame(metrics)`; per_puzzle: the per_puzzle.csv frames already read (ReportInputs'),
    by metrics.json path. Other evaluations' files are read here: only the header of one without the column, and an
    evaluation without a per_puzzle.csv is passed over (the report's other tables need metrics.json alone)."""
    frames = []
    read = per_puzzle or {}
    for run, group in evals.groupby("run", sort=True):
        for path, epoch in zip(group["path"].iloc[::-1], group["epoch"].iloc[::-1], strict=True):
            table = read.get(path)
            if table is None:
                csv = Path(path).with_name("per_puzzle.csv")
                if not csv.exists():
                    continue
                try:
                    with csv.open() as header:
                        if "mean_loop_steps" not in header.readline().strip().split(","):
                            continue
                    table = pd.read_csv(csv, dtype={"puzzle": str})
                except OSError as err:
                    raise ArcpipeError(f"{csv}: cannot read per-puzzle results ({err}); re-run its evaluation") from err
            if "mean_loop_steps" not in table:
                continue
            table = table.dropna(subset=["mean_loop_steps"]).copy()
            ks = [c for c in table.columns if re.fullmatch(r"pass@\d+", c)]
            table["loop_steps"] = table["mean_loop_steps"].round().astype(int)
            by_steps = table.groupby("loop_steps", sort=True)
            frame = by_steps[ks].mean().reset_index()
            frame.insert(1, "inputs", by_steps.size().to_numpy())
            frame.insert(0, "checkpoint", Path(path).parent.name)
            frame.insert(0, "epoch", epoch)
            frame.insert(0, "run", run)
            frames.append(frame)
            break
    if not frames:
        return pd.DataFrame(columns=["run", "epoch", "checkpoint", "loop_steps", "inputs"])
    return pd.concat(frames, ignore_index=True)


# --------------------------------------------------------------------------------------------------------------


def _progress(epoch: Any, info: RunInfo | None) -> float:
    if info is None or epoch is None or not info.epochs:
        return math.nan
    return round(100 * float(epoch) / info.epochs, 1)
