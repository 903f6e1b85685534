"""Learning-curve PNGs: pass@K against training step, and training loss and token accuracy against step, one line
per run; pass@K against ACT step, one line per run's last checkpoint."""

from __future__ import annotations

import io
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display on cluster nodes; must precede pyplot
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import FuncFormatter, MaxNLocator, NullFormatter  # noqa: E402

from arcpipe.files import atomic_write_many  # noqa: E402

log = logging.getLogger(__name__)

MAX_POINTS = 2000  # per run in the loss plot: longer curves are averaged in bins


def plot_passk(
    evals: pd.DataFrame,
    out_png: str | Path,
    ks: Sequence[int] = (1, 2),
    seed_groups: Mapping[str, str] | None = None,
) -> None:
    """One panel per K: pass@K (%, fresh votes per checkpoint) against step (epoch when step is unknown).

    The runs of a seed group (`seed_groups`: run -> group) with more than one seed are one line, the mean over
    seeds at each checkpoint, with the min-max range over seeds shaded.
    """
    fig, axes = plt.subplots(1, max(len(ks), 1), figsize=(5.5 * max(len(ks), 1), 4), squeeze=False)
    x_key = "step" if len(evals) and evals["step"].notna().all() else "epoch"
    banded = _multi_seed(evals, seed_groups or {})
    for ax, k in zip(axes[0], ks, strict=False):
        for run, group in evals[~evals["run"].isin(banded)].groupby("run", sort=True):
            ax.plot(group[x_key], 100 * group[f"pass@{k}"], marker="o", label=str(run))
        seeded = evals[evals["run"].isin(banded)]
        for name, members in seeded.groupby(seeded["run"].map(banded), sort=True):
            per_epoch = members.groupby("epoch", sort=True)
            x, values = per_epoch[x_key].mean(), per_epoch[f"pass@{k}"]
            label = f"{name} (mean of {members['run'].nunique()} seeds, min-max shaded)"
            (line,) = ax.plot(x, 100 * values.mean(), marker="o", label=label)
            ax.fill_between(x, 100 * values.min(), 100 * values.max(), color=line.get_color(), alpha=0.2, linewidth=0)
        ax.set(xlabel=x_key, ylabel=f"pass@{k} (%)", title=f"pass@{k} per checkpoint")
        _percent_axis(ax)
        ax.grid(alpha=0.3)
        if len(evals):
            ax.legend(fontsize="small")
    if not len(evals):
        axes[0][0].text(0.5, 0.5, "no evaluations yet", ha="center", va="center", transform=axes[0][0].transAxes)
    _save(fig, out_png)


def plot_loss(curves: pd.DataFrame, out_png: str | Path, key: str = "train/lm_loss") -> None:
    """Training loss against step, one line per run, averaged in bins beyond MAX_POINTS points."""
    fig, ax = plt.subplots(figsize=(7, 4))
    for run, group in curves.groupby("run", sort=True):
        steps, values = _binned(group["step"].to_numpy(float), group[key].to_numpy(float))
        ax.plot(steps, values, label=str(run))
    ax.set(xlabel="step", ylabel=key, title="training loss")
    if len(curves) and (curves[key] > 0).all():
        _readable_log_axis(ax)
    ax.grid(alpha=0.3)
    if len(curves):
        ax.legend(fontsize="small")
    else:
        ax.text(0.5, 0.5, "no training metrics yet", ha="center", va="center", transform=ax.transAxes)
    _save(fig, out_png)


def plot_accuracy(curves: pd.DataFrame, out_png: str | Path, key: str = "train/accuracy") -> None:
    """Training token accuracy (%) against step, one line per run, over the steps where a row halted.

    curves: as `tables.accuracy_curves` gives (steps where no row halted, which measured nothing, left out).
    """
    fig, ax = plt.subplots(figsize=(7, 4))
    for run, group in curves.groupby("run", sort=True):
        steps, values = _binned(group["step"].to_numpy(float), group[key].to_numpy(float))
        ax.plot(steps, 100 * values, marker=".", label=str(run))
    ax.set(xlabel="step", ylabel="token accuracy (%)", title="training token accuracy (rows that halted)")
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3)
    if len(curves):
        ax.legend(fontsize="small")
    else:
        ax.text(0.5, 0.5, "no training metrics yet", ha="center", va="center", transform=ax.transAxes)
    _save(fig, out_png)


def plot_depth(curves: pd.DataFrame, out_png: str | Path, ks: Sequence[int] = (1, 2)) -> None:
    """One panel per K: pass@K (%) after each ACT step of one evaluation pass, one line per run (one checkpoint).

    curves: run, epoch, depth (1-based ACT step) and pass@K columns (fractions), as `tables.depth_curves` gives.
    """

    def draw(ax: Any, run: str, group: pd.DataFrame, column: str) -> None:
        epoch = group["epoch"].iloc[0]  # one checkpoint per run
        label = f"{run} (epoch {int(epoch)})" if pd.notna(epoch) else str(run)
        ax.plot(group["depth"], 100 * group[column], marker="o", label=label)

    max_depth = int(curves["depth"].max()) if len(curves) else 1
    _panels_per_k(
        curves, out_png, ks, draw, "ACT step", "{} after each ACT step", "no evaluations with pass@K per ACT step yet",
        xlim=(0.5, max_depth + 0.5),
    )  # fmt: skip


def plot_loop_steps(curves: pd.DataFrame, out_png: str | Path, ks: Sequence[int] = (1, 2)) -> None:
    """One panel per K: pass@K (%) of the test inputs whose answers took each number of loop steps (a looped model's
    dynamic exit), one line per run at one evaluation, each point labelled with its number of inputs.

    curves: run, epoch, checkpoint, loop_steps, inputs and pass@K columns (fractions), as `tables.loop_step_curves`.
    """

    def draw(ax: Any, run: str, group: pd.DataFrame, column: str) -> None:
        ax.plot(group["loop_steps"], 100 * group[column], marker="o", label=f"{run} ({group['checkpoint'].iloc[0]})")
        for x, y, n in zip(group["loop_steps"], 100 * group[column], group["inputs"], strict=True):
            ax.annotate(str(int(n)), (x, y), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=7)

    _panels_per_k(
        curves, out_png, ks, draw, "loop steps taken", "{} by the loop steps an answer took",
        "no evaluations of a looped model with loop steps yet",
    )  # fmt: skip


def _panels_per_k(
    curves: pd.DataFrame,
    out_png: str | Path,
    ks: Sequence[int],
    draw: Any,
    xlabel: str,
    title: str,
    empty: str,
    xlim: tuple[float, float] | None = None,
) -> None:
    """One panel per K, pass@K (%) on a 0-100 axis against an integer x, `draw(ax, run, group, "pass@K")` drawing
    each run's line; `empty` written in the first panel when there is no curve."""
    fig, axes = plt.subplots(1, max(len(ks), 1), figsize=(5.5 * max(len(ks), 1), 4), squeeze=False)
    for ax, k in zip(axes[0], ks, strict=False):
        column = f"pass@{k}"
        for run, group in curves.groupby("run", sort=True) if column in curves else ():
            draw(ax, run, group, column)
        ax.set(xlabel=xlabel, ylabel=f"{column} (%)", title=title.format(column))
        if xlim is not None:
            ax.set_xlim(*xlim)
        _percent_axis(ax)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        if len(curves):
            ax.legend(fontsize="small")
    if not len(curves):
        axes[0][0].text(0.5, 0.5, empty, ha="center", va="center", transform=axes[0][0].transAxes)
    _save(fig, out_png)


def plot_ablation(table: pd.DataFrame, out_png: str | Path, metric: str = "pass@2") -> None:
    """A sweep's arms (report/ablation.py's table): `metric` (mean over seeds, its 95% interval as a bar) against
    the GPU-hours the arm spent, one labelled point per arm, the reference hollow."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for _, row in table.iterrows():
        x, y = float(row.get("gpu_hours", np.nan)), float(row[metric])
        low, high = float(row[f"{metric}_ci95_low"]), float(row[f"{metric}_ci95_high"])
        error = None if np.isnan(low) else [[y - low], [high - y]]
        reference = bool(row["base"])
        ax.errorbar(
            x, y, yerr=error, fmt="o", capsize=3, mfc="none" if reference else None, color="C1" if reference else "C0"
        )
        ax.annotate(str(row["arm"]) + (" (reference)" if reference else ""), (x, y), fontsize=7, xytext=(4, 3),
                    textcoords="offset points")  # fmt: skip
    ax.set_xlabel("GPU-hours (training and evaluation, all seeds)")
    ax.set_ylabel(f"{metric} (%), mean over seeds")
    _percent_axis(ax)
    _save(fig, out_png)


def _percent_axis(ax: plt.Axes) -> None:
    """A pass@K axis: from 0 (never a negative tick, as autoscaling all-zero values gives) to at most 100%, and to
    at least 10% so that small numbers (a smoke run's) still show their differences."""
    top = max((np.nanmax(line.get_ydata()) for line in ax.get_lines() if len(line.get_ydata())), default=0.0)
    ax.set_ylim(0, min(100.0, max(10.0, 1.15 * float(top))))


def _readable_log_axis(ax: plt.Axes) -> None:
    """Log scale labelled in plain numbers (0.5, 2, 3 rather than 5x10^-1); on a range under 1.5 decades, where few
    powers of ten fall, the minor ticks are labelled too."""
    ax.set_yscale("log")
    plain = FuncFormatter(lambda value, _: f"{value:g}")
    ax.yaxis.set_major_formatter(plain)
    low, high = ax.get_ylim()
    ax.yaxis.set_minor_formatter(plain if high / low < 10**1.5 else NullFormatter())
    ax.tick_params(axis="y", which="minor", labelsize="small")


def _multi_seed(evals: pd.DataFrame, seed_groups: Mapping[str, str]) -> dict[str, str]:
    """run -> seed group, for the evaluated runs of groups with more than one evaluated run."""
    runs = [run for run in evals["run"].unique() if run in seed_groups] if len(evals) else []
    sizes = pd.Series([seed_groups[run] for run in runs], dtype=object).value_counts()
    return {run: seed_groups[run] for run in runs if sizes[seed_groups[run]] > 1}


def _binned(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if len(x) <= MAX_POINTS:
        return x, y
    bins = np.array_split(np.arange(len(x)), MAX_POINTS)
    return np.array([x[b].mean() for b in bins]), np.array([y[b].mean() for b in bins])


def _save(fig: plt.Figure, out_png: str | Path) -> None:
    out_png = Path(out_png)
    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png", dpi=120)
    plt.close(fig)
    out_png.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_many(out_png.parent, {out_png.name: buffer.getvalue()})
