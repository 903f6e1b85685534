"""arcpipe.report.paired against values worked out by hand (each test says how)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from arcpipe.report.paired import bootstrap_interval, over_seeds, sign_test


def test_paired_t_over_seeds_equals_the_hand_computation() -> None:
    # differences 1, 2, 3 (only seeds 0-2 are in both): mean 2, sd 1, standard error 1/sqrt(3), t = 2 sqrt(3);
    # with 2 degrees of freedom P(|T| <= t) = t / sqrt(2 + t^2) exactly, so p = 1 - 2 sqrt(3) / sqrt(14);
    # t_{0.975, 2} = 4.302652729911275 (printed tables), so the interval is 2 +- 4.3026527 / sqrt(3)
    arm = {0: 11.0, 1: 22.0, 2: 33.0, 7: 99.0}
    base = {0: 10.0, 1: 20.0, 2: 30.0, 5: 0.0}
    got = over_seeds(arm, base)
    assert got.seeds == (0, 1, 2)
    assert got.mean == pytest.approx(2.0) and got.sd == pytest.approx(1.0)
    assert got.t == pytest.approx(2 * math.sqrt(3))
    assert got.p == pytest.approx(1 - 2 * math.sqrt(3) / math.sqrt(14), abs=1e-10)
    half = 4.302652729911275 / math.sqrt(3)
    assert got.ci95 == pytest.approx((2 - half, 2 + half), abs=1e-8)


def test_the_sign_of_the_difference_and_the_degenerate_cases() -> None:
    # differences -1, -1.5: mean -1.25, sd sqrt(1/8), t = -1.25 / (sd / sqrt 2) = -5; one degree of freedom is
    # Cauchy's, P(|T| <= t) = 2/pi atan(t), so p = 1 - 2/pi atan(5); two seeds: an interval wide enough to hold 0
    worse = over_seeds({0: 1.0, 1: 1.5}, {0: 2.0, 1: 3.0})
    assert worse.mean == pytest.approx(-1.25) and worse.t == pytest.approx(-5.0)
    assert worse.p == pytest.approx(1 - 2 / math.pi * math.atan(5), abs=1e-10)
    assert worse.ci95[0] < -1.25 < 0 < worse.ci95[1]
    one = over_seeds({3: 5.0}, {3: 4.0})  # one pair: a difference, no spread, no interval, no test
    assert one.mean == 1.0 and math.isnan(one.sd) and math.isnan(one.p) and all(map(math.isnan, one.ci95))
    same = over_seeds({0: 2.0, 1: 3.0}, {0: 1.0, 1: 2.0})  # every difference 1: certain, sd 0
    assert same.p == 0.0 and same.t == math.inf and same.ci95 == (1.0, 1.0)
    with pytest.raises(ValueError, match="no seed in common"):
        over_seeds({0: 1.0}, {1: 1.0})


def test_sign_test_equals_the_exact_binomial_tail() -> None:
    # 7 wins, 2 losses, 3 ties: n = 9 untied, p = 2 P(X <= 2) = 2 (C(9,0) + C(9,1) + C(9,2)) / 2^9 = 92 / 512
    base = {f"t{i}": 0.5 for i in range(12)}
    arm = {**{f"t{i}": 1.0 for i in range(7)}, "t7": 0.0, "t8": 0.0, "t9": 0.5, "t10": 0.5, "t11": 0.5}
    got = sign_test(arm, base)
    assert (got.wins, got.losses, got.ties) == (7, 2, 3)
    assert got.p == pytest.approx(92 / 512)
    assert sign_test(base, arm).p == got.p  # symmetric in the arms
    # a balanced split is no evidence: 2 P(X <= 2 | n = 4) = 2 * 11/16 > 1, capped at 1
    assert sign_test({"a": 1, "b": 1, "c": 0, "d": 0}, {"a": 0, "b": 0, "c": 1, "d": 1}).p == 1.0
    assert sign_test({"a": 1.0}, {"a": 1.0}).p == 1.0  # no task differs
    with pytest.raises(ValueError, match="different tasks"):
        sign_test({"a": 1.0}, {"b": 1.0})


def test_bootstrap_interval_is_the_resampled_means_percentiles() -> None:
    arm = {f"t{i}": float(i % 3 == 0) for i in range(30)}
    base = {f"t{i}": float(i % 5 == 0) for i in range(30)}
    low, high = bootstrap_interval(arm, base, draws=2000, seed=7)
    # the same draws by hand: 2000 resamples of the 30 differences, their means, the 2.5th and 97.5th percentiles
    d = np.array([arm[t] - base[t] for t in arm])
    rng = np.random.default_rng(7)
    means = [d[rng.integers(0, 30, size=30)].mean() for _ in range(2000)]
    assert (low, high) == pytest.approx(tuple(np.quantile(means, [0.025, 0.975])))
    assert low < d.mean() < high
    assert bootstrap_interval(arm, base, draws=2000, seed=7) == (low, high)  # seeded
    flat = bootstrap_interval({"a": 1.0, "b": 0.5}, {"a": 0.5, "b": 0.0})  # every difference 0.5
    assert flat == pytest.approx((0.5, 0.5))
