"""Checkpoint selection without test leakage: pick each run's checkpoint on held-out test tasks, score it on the rest.

    held_out = held_out_tasks(task_names, n, seed)                          # evaluation.selection_tasks tasks
    table, chosen = selection_table(evals, per_puzzle, n, seeds, main_k)    # per run: selected, last, best-on-test

Picking the checkpoint with the best test pass@K and reporting that number reuses the test set for selection, so
the number is optimistic. Here `n` test tasks are held out per run (chosen with `numpy.random.default_rng(seed)`
from the task names in sorted order; the workflow passes the run's dataset seed, `datasets.<name>.seed`, so runs
on one dataset share their held-out tasks). The checkpoint with the best pass@main_k on those tasks is selected
(ties to the later checkpoint: the last one is the default choice) and every checkpoint shown is scored on the
other tasks only. Beside it are the last checkpoint and the one selected on the whole test set (the comparison
table's best, ties to the earlier), both scored on the same other tasks.

Scores come from each evaluation's per_puzzle.csv (one row per test input, 0/1 per K; load.read_per_puzzle), which
lies beside its metrics.json and is complete when metrics.json is (eval/write.py). pass@K on a set of tasks is
defined as the evaluation's (eval/score.py): each task scores the fraction of its test inputs solved, the set the
mean over its tasks, so over every task it is the evaluation's pass@K.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from arcpipe.config import ArcpipeError
from arcpipe.report.format import SELECTED_ON_TEST


def task_scores(per_puzzle: pd.DataFrame) -> pd.DataFrame:
    """Per task (index, in file order): pass@K columns as the fraction of the task's test inputs solved, and
    cell_accuracy (the mean over its test inputs) where the evaluation wrote it."""
    columns = [c for c in per_puzzle.columns if re.fullmatch(r"pass@\d+", str(c)) or c == "cell_accuracy"]
    return per_puzzle.groupby("puzzle", sort=False)[columns].mean()


def subset_pass_at(scores: pd.DataFrame, tasks: Iterable[str]) -> pd.Series:
    """pass@K (fractions) over some tasks of `task_scores`: the mean of their task scores."""
    return scores.loc[list(tasks)].mean()


def held_out_tasks(task_names: Sequence[str], n: int, seed: int, source: str = "the test set") -> list[str]:
    """`n` of the task names, drawn with numpy's default_rng(seed) from their sorted order; sorted."""
    if n >= len(task_names):
        raise ArcpipeError(
            f"evaluation.selection_tasks={n} leaves no task to report on: {source} has {len(task_names)} test tasks; "
            f"lower selection_tasks below {len(task_names)}"
        )
    names = sorted(task_names)
    chosen = np.random.default_rng(seed).choice(len(names), size=n, replace=False)
    return sorted(names[i] for i in chosen)


def selection_table(
    evals: pd.DataFrame,
    per_puzzle: Mapping[str, pd.DataFrame],
    n: int,
    seeds: Mapping[str, int] | None = None,
    main_k: int = 2,
) -> tuple[pd.DataFrame, dict[str, dict]]:
    """Per run, three rows (selected on the held-out tasks, last, selected on the test set): epoch, pass@main_k on
    the held-out tasks and pass@K (%) on the other tasks; and per run its seed and held-out tasks.

    evals: `load.load_evaluations`' frame (run, epoch, path of each metrics.json); per_puzzle: metrics.json path ->
    its per_puzzle.csv (`load.read_per_puzzle`); seeds: run -> seed of its held-out draw (0 when missing). n = 0
    gives an empty table.
    """
    seeds = seeds or {}
    rows, chosen = [], {}
    ks: list[int] = []
    for run, group in evals.groupby("run", sort=True):
        if n == 0:
            break
        group = group.sort_values("epoch", kind="stable")
        scores = [task_scores(per_puzzle[p]) for p in group["path"]]
        tasks = list(scores[0].index)
        for path, other in zip(group["path"].iloc[1:], scores[1:], strict=True):
            if list(other.index) != tasks:
                raise ArcpipeError(f"{Path(path).with_name('per_puzzle.csv')}: other test tasks than the run's first")
        ks = sorted(int(c.split("@")[1]) for c in scores[0].columns if str(c).startswith("pass@"))
        main = f"pass@{main_k}" if main_k in ks else f"pass@{ks[-1]}"
        seed = int(seeds.get(str(run), 0))
        held = held_out_tasks(tasks, n, seed, source=f"run {run}")
        others = [t for t in tasks if t not in set(held)]
        chosen[str(run)] = {"seed": seed, "held_out": held, "num_other_tasks": len(others)}
        on_held = np.array([subset_pass_at(s, held)[main] for s in scores])
        on_all = np.array([s[main].mean() for s in scores])
        picks = {
            f"selected on {n} held-out tasks": len(on_held) - 1 - int(np.argmax(on_held[::-1])),  # ties: later
            "last": len(scores) - 1,
            SELECTED_ON_TEST: int(np.argmax(on_all)),  # ties: earlier, as comparison.md's best
        }
        for label, i in picks.items():
            other = subset_pass_at(scores[i], others)
            rows.append(
                {"run": run, "checkpoint": label, "epoch": group["epoch"].iloc[i]}
                | {f"held_out_{main}": 100 * on_held[i]}
                | {f"pass@{k}": 100 * other[f"pass@{k}"] for k in ks}
            )
    if not rows:
        return pd.DataFrame(columns=["run", "checkpoint", "epoch"]), chosen
    return pd.DataFrame(rows), chosen
