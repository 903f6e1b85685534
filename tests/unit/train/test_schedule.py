"""The learning-rate schedule and step count follow upstream's formulas
(docs/reference/upstream-recursive.md 2.4, 8.3)."""

import math

import pytest

from arcpipe.train.schedule import lr_at, schedule_step, total_steps


@pytest.mark.parametrize(
    ("epochs", "groups", "mean", "expected"),
    [
        (100_000, 960, 4.1458115825446, 518_226),  # ARC-1, TRM/HRM defaults
        (200_000, 960, 4.1458115825446, 1_036_452),  # ARC-1, URM scripts
        (100_000, 1280, 4.332593232186176, 722_098),  # ARC-2
    ],
)
def test_total_steps_matches_upstream_table(epochs, groups, mean, expected):
    assert total_steps(epochs, groups, mean, 768) == expected


def test_warmup_is_linear_from_step_one_then_constant_with_min_ratio_one():
    assert lr_at(1, 1e-4, 2000, 518_226, 1.0) == pytest.approx(1e-4 / 2000)
    assert lr_at(1000, 1e-4, 2000, 518_226, 1.0) == pytest.approx(0.5e-4)
    assert lr_at(2000, 1e-4, 2000, 518_226, 1.0) == pytest.approx(1e-4)
    assert lr_at(400_000, 1e-4, 2000, 518_226, 1.0) == pytest.approx(1e-4)


def test_cosine_decays_to_min_ratio():
    base, warm, total, r = 1.0, 10, 110, 0.1
    assert lr_at(warm, base, warm, total, r) == pytest.approx(1.0)
    assert lr_at(60, base, warm, total, r) == pytest.approx(r + (1 - r) * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert lr_at(total, base, warm, total, r) == pytest.approx(r)


@pytest.mark.parametrize("arch", ["trm", "hrm", "transformer", "urm"])
def test_urm_evaluates_the_schedule_a_step_behind(arch):
    """TRM's and HRM's trainers count the step before computing its lr; URM's after the update, so its first update
    has lr 0 and its step s the rate TRM gives step s - 1 (docs/reference/upstream-recursive.md 8.3)."""
    behind = arch == "urm"
    assert [schedule_step(arch, s) for s in (1, 2, 500)] == ([0, 1, 499] if behind else [1, 2, 500])
    first = lr_at(schedule_step(arch, 1), 1e-4, 2000, 518_226, 1.0)
    assert first == (0.0 if behind else 1e-4 / 2000)
