"""A run's stop rule (`runs.<run>.stop`: end before the last epoch once the answer is in) and the schedule of
quick and full evaluations at its boundaries; the decisions themselves are `arcpipe.stopping`'s."""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import Field, model_validator

from arcpipe.config.base import Metric, Strict, invalid, uncomputed_metric


class StopConfig(Strict):
    """Stop at a boundary when `metric` reaches `target`, or after `patience` evaluations without a gain of more
    than `min_delta` over the best so far; either rule, or both (whichever fires first). target 0: as soon as the
    metric is above 0 (the run has learned anything)."""

    metric: Metric = "pass@2"  # a pass@K of evaluation.pass_ks as metrics.json names it, or cell_accuracy
    target: float | None = Field(default=None, ge=0, le=1)  # pass@K is a fraction; 0: any score above 0
    patience: int | None = Field(default=None, gt=0)  # evaluations after the best one
    min_delta: float = Field(default=0.0, ge=0)  # a gain counts when it is above this
    # never before this epoch: a curve still flat at zero early on (nothing learned yet) is not a plateau
    min_epoch: int | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _some_rule(self) -> StopConfig:
        if self.target is None and self.patience is None:
            raise invalid(
                "StopConfig",
                [((), "sets neither target nor patience, so it never fires; set one of them, or both", None)],
            )
        return self


class QuickEvalConfig(Strict):
    """At every boundary a quick evaluation on a fixed subset of the test tasks; the full one only where
    `arcpipe.stopping.full_evaluation_due` says (best quick score so far, the last or stopping boundary, every
    `full_every`-th boundary)."""

    share: float = Field(default=0.1, gt=0, le=1)  # of the test tasks, rounded up
    puzzles: int | None = Field(default=None, gt=0)  # a number of test tasks instead of a share
    full_every: int | None = Field(default=None, gt=0)  # None: only best, last and stopping boundaries

    def num_tasks(self, total: int) -> int:
        """Test tasks in the quick subset, out of `total`: at least one, at most all."""
        wanted = self.puzzles if self.puzzles is not None else math.ceil(self.share * total)
        return max(1, min(total, wanted))

    def always_full(self, epoch: int, boundaries: Sequence[int]) -> bool:
        """Whether boundary `epoch` of `boundaries` gets the full evaluation whatever its quick score: the first, the
        last and every `full_every`-th (1-based). `arcpipe.stopping.full_evaluation_due` adds the scores' reasons;
        the forecast's cheapest outcome counts only these."""
        index = list(boundaries).index(epoch) + 1
        return index == 1 or epoch == boundaries[-1] or (self.full_every is not None and index % self.full_every == 0)


def stop_problems(stops: dict[str, StopConfig | None], pass_ks: list[int]) -> list[str]:
    """One line per run whose stop rule reads a pass@K that the evaluation does not compute."""
    return [
        problem
        for name, stop in stops.items()
        if stop is not None and (problem := uncomputed_metric(f"runs.{name}.stop.metric", stop.metric, pass_ks))
    ]
