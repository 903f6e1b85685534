"""Quick evaluations in the report (evaluation.quick): which pass@K rows are quick, and how far quick scores lie from
full ones on the checkpoints that got both.

    quick_full_pairs(evals, quick, "pass@2")     # run -> [(epoch, quick, full)], fractions
    quick_full_gap(pairs, "pass@2")              # one line for passk.md's notes

A quick evaluation (results/eval/{run}/epoch_{epoch}/quick/metrics.json) scores a fixed subset of the test tasks
(arcpipe.stopping.quick_tasks); its metrics.json says so in info.quick. The full one is made only where the schedule
said it was due (arcpipe.stopping.full_evaluation_due).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd


def quick_full_pairs(
    evals: pd.DataFrame, quick: pd.DataFrame, metric: str
) -> dict[str, list[tuple[int, float, float]]]:
    """Per run, (epoch, quick value, full value) of `metric` at each checkpoint that has both evaluations."""
    full = {(r, int(e)): v for r, e, v in zip(evals["run"], evals["epoch"], evals[metric], strict=True)}
    pairs: dict[str, list[tuple[int, float, float]]] = {}
    for run, epoch, value in zip(quick["run"], quick["epoch"], quick[metric], strict=True):
        if (run, int(epoch)) in full:
            pairs.setdefault(run, []).append((int(epoch), float(value), float(full[run, int(epoch)])))
    return pairs


def quick_full_gap(pairs: Sequence[tuple[int, float, float]], metric: str = "pass@2") -> str:
    """How far quick scores lie from full ones on the checkpoints that got both: (epoch, quick, full) fractions ->
    one line for the report, in percentage points."""
    if not pairs:
        return f"quick vs full {metric}: no checkpoint has both"
    gaps = [100 * (quick - full) for _, quick, full in pairs]
    worst = max(range(len(gaps)), key=lambda i: abs(gaps[i]))
    return (
        f"quick vs full {metric} on {len(gaps)} checkpoint(s): mean |quick - full| "
        f"{sum(abs(g) for g in gaps) / len(gaps):.1f} points, mean quick - full {sum(gaps) / len(gaps):+.1f}, "
        f"largest {gaps[worst]:+.1f} at epoch {pairs[worst][0]}"
    )


def checkpoint_name(path: str | Path) -> str:
    """epoch_{N}, avg_last{K}, ... of an evaluation's metrics.json; a quick one lies one folder deeper."""
    parent = Path(path).parent
    return parent.parent.name if parent.name == "quick" else parent.name


def quick_notes(evals: pd.DataFrame, quick: pd.DataFrame, main_k: int) -> list[str]:
    """passk.md's notes on quick rows: what they score, and per run the quick-full gap of pass@main_k."""
    sizes = sorted({int(n) for n in quick["num_tasks"]}) if "num_tasks" in quick else []
    metric = f"pass@{main_k}"
    pairs = quick_full_pairs(evals, quick, metric)
    return [
        "evaluation: full, on every test task; quick, on a fixed subset of them (evaluation.quick"
        + (f": {', '.join(map(str, sizes))} tasks" if sizes else "")
        + "), shown where the checkpoint has no full evaluation (arcpipe.stopping.full_evaluation_due).",
        *(f"{run}: {quick_full_gap(pairs.get(run, []), metric)}" for run in sorted(set(quick["run"]))),
    ]
