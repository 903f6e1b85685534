"""pass@K over seeds: the runs a `seeds: [...]` list expanded into (one seed group), aggregated per checkpoint.

    seed_table(evals, seed_groups(runs))   # per group, epoch and pass@K: n, mean, sd, min, max, 95% interval

The interval is Student's t over seeds: mean +- t_{0.975, n-1} * sd / sqrt(n), with the sample standard deviation
(ddof=1). A group of one seed has no sd and no interval (empty cells). `t_critical` is exact for integer degrees of
freedom (Abramowitz & Stegun 26.7.3-4), so the report needs no scipy.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

import pandas as pd

COLUMNS = ["seed_group", "epoch", "metric", "num_seeds", "seeds", "mean", "sd", "min", "max", "ci95_low", "ci95_high"]


def seed_groups(runs: Mapping[str, object]) -> dict[str, tuple[str, int | None]]:
    """run -> (seed group, seed) from RunInfo-like objects (`seed_group`, `seed`); a run without a group is its own."""
    return {
        name: (getattr(info, "seed_group", None) or name, getattr(info, "seed", None)) for name, info in runs.items()
    }


def seed_table(evals: pd.DataFrame, groups: Mapping[str, tuple[str, int | None]] | None = None) -> pd.DataFrame:
    """One row per seed group, checkpoint epoch and pass@K (%): the number of seeds evaluated there, which seeds,
    their mean, sample standard deviation, min, max and the 95% Student-t interval of the mean.

    `evals` is `load.load_evaluations`' frame (pass@K as fractions); `groups` maps a run to its (group, seed), and
    a run missing from it is a group of its own with an unknown seed.
    """
    groups = groups or {}
    metrics = [f"pass@{k}" for k in sorted(int(c.split("@")[1]) for c in evals.columns if _is_passk(c))]
    if evals.empty or not metrics:
        return pd.DataFrame(columns=COLUMNS)
    frame = evals[["run", "epoch", *metrics]].copy()
    frame["seed_group"] = [groups.get(run, (run, None))[0] for run in frame["run"]]
    frame["seed"] = [groups.get(run, (run, None))[1] for run in frame["run"]]
    long = frame.melt(id_vars=["seed_group", "epoch", "run", "seed"], value_vars=metrics, var_name="metric")
    long = long.dropna(subset=["value"])
    long["value"] = 100 * long["value"].astype(float)
    by = long.groupby(["seed_group", "epoch", "metric"], sort=False)
    table = by["value"].agg(num_seeds="count", mean="mean", sd="std", min="min", max="max").reset_index()
    table["seeds"] = by["seed"].agg(_seed_list).to_numpy()
    half = [
        t_critical(n - 1) * sd / math.sqrt(n) if n > 1 else math.nan
        for n, sd in zip(table["num_seeds"], table["sd"], strict=True)
    ]
    table["ci95_low"] = table["mean"] - half
    table["ci95_high"] = table["mean"] + half
    order = table["metric"].map(lambda m: int(m.split("@")[1]))
    table = table.assign(_k=order).sort_values(["seed_group", "epoch", "_k"], kind="stable").drop(columns="_k")
    return table[COLUMNS].reset_index(drop=True)


def t_critical(df: int, confidence: float = 0.95) -> float:
    """The two-sided Student-t critical value: P(|T| <= t) = confidence with `df` degrees of freedom (t_{0.975, df}
    for 95%), by bisection on the exact distribution function, to 1e-12."""
    if df < 1 or not 0 < confidence < 1:
        raise ValueError(f"t_critical needs df >= 1 and 0 < confidence < 1, got df={df}, confidence={confidence}")
    lo, hi = 0.0, 1.0
    while t_two_sided_mass(hi, df) < confidence:
        lo, hi = hi, 2 * hi
    while hi - lo > 1e-12 * hi:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_two_sided_mass(mid, df) < confidence else (lo, mid)
    return (lo + hi) / 2


def t_two_sided_mass(t: float, df: int) -> float:
    """P(|T| <= t) for Student's t with integer df: Abramowitz & Stegun 26.7.3 (odd df) and 26.7.4 (even df)."""
    theta = math.atan(t / math.sqrt(df))
    cos2 = math.cos(theta) ** 2
    if df % 2:  # 2/pi * (theta + sin cos (1 + 2/3 cos^2 + 2*4/(3*5) cos^4 + ... up to cos^(df-3)))
        term = total = 1.0
        for j in range(3, df - 1, 2):
            term *= (j - 1) / j * cos2
            total += term
        series = math.sin(theta) * math.cos(theta) * total if df > 1 else 0.0
        return 2 / math.pi * (theta + series)
    term = total = 1.0  # sin (1 + 1/2 cos^2 + 1*3/(2*4) cos^4 + ... up to cos^(df-2))
    for j in range(2, df - 1, 2):
        term *= (j - 1) / j * cos2
        total += term
    return math.sin(theta) * total


def _is_passk(column: object) -> bool:
    return re.fullmatch(r"pass@\d+", str(column)) is not None


def _seed_list(seeds: pd.Series) -> str:
    known = sorted({int(s) for s in seeds if pd.notna(s)})
    return " ".join(map(str, known))
