"""Paired comparisons of two arms of an ablation (a run and its base, trained on the same seeds and scored on the
same tasks): what the ablation table prints beside each arm's mean (issue 36).

    over_seeds(arm, base)        # {seed: pass@K}: the paired difference, its 95% interval, the paired t-test
    sign_test(arm, base)         # {task: score}: wins, losses, ties and the exact two-sided sign-test p-value
    bootstrap_interval(arm, base, draws=10_000, seed=0)   # {task: score}: the 95% percentile interval of the mean

Over seeds: seed s of one arm and seed s of the other share their data order, initialisation and augmentation
draws, so the difference d_s = arm_s - base_s removes what the seed alone does; the interval is mean(d) +-
t_{0.975, n-1} * sd(d) / sqrt(n) and the test is Student's paired t-test (two-sided), with the t distribution of
arcpipe.report.seeds (exact for integer degrees of freedom; no scipy). Only seeds both arms have are paired.

Over tasks: both arms answer the same test tasks, so each task is a pair (its score per arm: the fraction of its
test inputs solved at pass@K, averaged over the arm's seeds). The sign test counts the tasks where the arm scores
higher and lower (ties carry no information and are dropped) and asks how likely so lopsided a split is when
either is equally likely: p = min(1, 2 P(X <= min(wins, losses))), X ~ Binomial(wins + losses, 1/2), exactly. The
bootstrap resamples tasks with replacement and takes the 2.5th and 97.5th percentiles of the resampled mean
difference (seeded: the same inputs give the same interval).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from arcpipe.report.seeds import t_critical, t_two_sided_mass


@dataclass(frozen=True)
class SeedComparison:
    """The paired difference arm - base over the seeds both have (pass@K in the inputs' unit)."""

    seeds: tuple[Hashable, ...]
    mean: float  # mean difference
    sd: float  # sample standard deviation of the differences (nan below 2 seeds)
    ci95: tuple[float, float]  # (nan, nan) below 2 seeds
    t: float  # the paired t statistic (nan below 2 seeds; +-inf when every difference is the same non-zero)
    p: float  # two-sided p-value of the paired t-test (nan below 2 seeds)


@dataclass(frozen=True)
class SignTest:
    wins: int  # tasks where the arm scores higher than the base
    losses: int
    ties: int
    p: float  # exact two-sided p-value; 1.0 when no task differs


def over_seeds(arm: Mapping[Hashable, float], base: Mapping[Hashable, float]) -> SeedComparison:
    """Arm against base over the seeds both were trained with (scores by seed)."""
    seeds = tuple(s for s in arm if s in base)
    if not seeds:
        raise ValueError(f"no seed in common: arm has {sorted(map(str, arm))}, base {sorted(map(str, base))}")
    n = len(seeds)
    mean, sd, low, high = mean_interval([arm[s] - base[s] for s in seeds])
    if n < 2:
        return SeedComparison(seeds, mean, math.nan, (math.nan, math.nan), math.nan, math.nan)
    if sd == 0:
        t = 0.0 if mean == 0 else math.copysign(math.inf, mean)
        p = 1.0 if mean == 0 else 0.0
    else:
        t = mean / (sd / math.sqrt(n))
        p = 1.0 - t_two_sided_mass(abs(t), n - 1)
    return SeedComparison(seeds, mean, sd, (low, high), t, p)


def mean_interval(values: Sequence[float]) -> tuple[float, float, float, float]:
    """(mean, sample sd, low, high): the mean and its 95% Student-t interval, mean +- t_{0.975, n-1} sd / sqrt(n);
    the sd and the bounds are nan below two values, everything nan for none."""
    n = len(values)
    if n == 0:
        return math.nan, math.nan, math.nan, math.nan
    mean = float(np.mean(values))
    if n < 2:
        return mean, math.nan, math.nan, math.nan
    sd = float(np.std(values, ddof=1))
    half = t_critical(n - 1) * sd / math.sqrt(n)
    return mean, sd, mean - half, mean + half


def sign_test(arm: Mapping[Hashable, float], base: Mapping[Hashable, float]) -> SignTest:
    """The exact two-sided sign test over the tasks both arms answered (scores by task)."""
    tasks = _common_tasks(arm, base)
    wins = sum(arm[t] > base[t] for t in tasks)
    losses = sum(arm[t] < base[t] for t in tasks)
    n = wins + losses
    if n == 0:
        return SignTest(0, 0, len(tasks), 1.0)
    tail = sum(math.comb(n, i) for i in range(min(wins, losses) + 1)) / 2**n
    return SignTest(wins, losses, len(tasks) - n, min(1.0, 2 * tail))


def bootstrap_interval(
    arm: Mapping[Hashable, float],
    base: Mapping[Hashable, float],
    draws: int = 10_000,
    seed: int = 0,
    confidence: float = 0.95,
) -> tuple[float, float]:
    """The percentile interval of the mean per-task difference, tasks resampled with replacement `draws` times."""
    tasks = _common_tasks(arm, base)
    d = np.array([arm[t] - base[t] for t in tasks], dtype=float)
    picks = np.random.default_rng(seed).integers(0, len(d), size=(draws, len(d)))
    means = d[picks].mean(axis=1)
    tail = (1 - confidence) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return float(low), float(high)


def _common_tasks(arm: Mapping[Hashable, float], base: Mapping[Hashable, float]) -> list[Hashable]:
    """The tasks both arms answered, in the arm's order; refuses arms scored on different task sets."""
    if set(arm) != set(base):
        only = sorted(map(str, set(arm) ^ set(base)))[:5]
        raise ValueError(
            f"the arms were scored on different tasks ({len(set(arm) ^ set(base))} in one only, e.g. {only}): a "
            "paired test needs the same test tasks; evaluate both on one dataset"
        )
    return list(arm)
