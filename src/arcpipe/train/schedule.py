"""Learning-rate schedule and step count, exactly as upstream (docs/reference/upstream-recursive.md 2.4 and 8.3)."""

from __future__ import annotations

import math


def total_steps(epochs: int, total_groups: int, mean_puzzle_examples: float, global_batch_size: int) -> int:
    """Upstream's estimate of the number of optimizer steps; it also sets the schedule's length."""
    return int(epochs * total_groups * mean_puzzle_examples / global_batch_size)


def schedule_step(arch: str, step: int) -> int:
    """The step count upstream's schedule is evaluated at for optimizer step `step` (from 1): TRM's and HRM's trainers
    count the step before computing its lr, URM's after the update (its compute_lr sees the steps already taken, so
    its first update has lr 0 and every later one the rate TRM gives the step before)."""
    return step - 1 if arch == "urm" else step


def lr_at(step: int, base_lr: float, warmup_steps: int, num_total_steps: int, min_ratio: float) -> float:
    """Linear warm-up, then cosine from base_lr to min_ratio * base_lr at schedule step `step` (schedule_step: the
    optimizer step, from 1, in TRM and HRM; one less in URM)."""
    if step < warmup_steps:
        return base_lr * step / max(1, warmup_steps)
    progress = (step - warmup_steps) / max(1, num_total_steps - warmup_steps)
    return base_lr * (min_ratio + max(0.0, (1 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))))
