"""Evaluation of every checkpoint (pass@K, ensembles, checkpoint selection, controls), the report's figures, and
the offline Kaggle bundle."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from arcpipe.config.base import Strict, invalid
from arcpipe.config.stop import QuickEvalConfig


class EvaluationConfig(Strict):
    pass_ks: list[int] = Field(default_factory=lambda: [1, 2, 5, 10, 100, 1000], min_length=1)
    submission_k: int = Field(default=2, ge=1)
    batch_size: int = Field(default=768, gt=0)  # global examples per inference batch
    # also evaluate each run's last K checkpoints as ensembles: votes pooled, and weights averaged into
    # results/runs/{run}/ckpt/avg_last{K}.pt (eval/ensemble.py); None: no ensembles
    ensemble_last: int | None = Field(default=None, ge=1)
    quick_puzzles: int | None = Field(default=None, gt=0)  # a fixed subset of test puzzles, for fast feedback
    kaggle_run: str | None = None  # the run `snakemake kaggle` bundles; None: the first run in the config
    kaggle_epoch: int | None = Field(default=None, gt=0)  # its checkpoint; None: the run's last
    # test tasks held out to select each run's checkpoint on (report/selection.py); 0: no selection table
    selection_tasks: int = Field(default=0, ge=0)
    # extra passes of every evaluation: blank_puzzle_id feeds every test row the blank puzzle embedding (row 0)
    controls: list[Literal["blank_puzzle_id"]] = Field(default_factory=list)
    # a quick evaluation of every boundary on a fixed subset of the test tasks, the full one only where due
    # (arcpipe.stopping.full_evaluation_due); None: every boundary is fully evaluated
    quick: QuickEvalConfig | None = None
    # canvas models (VARC): each test view is answered this many times, each at its own random scale and offset,
    # and every answer votes (upstream's --num-attempts 10: 51 views x 10 = 510 votes per test input)
    canvas_attempts: int = Field(default=10, gt=0)

    @field_validator("controls")
    @classmethod
    def _controls_once(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError(f"{value}: list each control once")
        return value

    @model_validator(mode="after")
    def _selection_leaves_tasks(self) -> EvaluationConfig:
        if self.quick_puzzles is not None and self.selection_tasks >= self.quick_puzzles:
            raise invalid(
                "EvaluationConfig",
                [
                    (
                        ("selection_tasks",),
                        f"must be below quick_puzzles={self.quick_puzzles}, so that some of the "
                        "scored tasks are left to report on; lower it",
                        self.selection_tasks,
                    )
                ],
            )
        return self


class ReportConfig(Strict):
    main_k: int = Field(default=2, gt=0)  # the pass@K column the run comparison sorts by
    gpu_hour_price: float = Field(default=2.5, ge=0)  # currency units per GPU hour, for cost estimates


class KaggleConfig(Strict):
    """`snakemake kaggle`: how the offline bundle is made (eval/kaggle.py); which checkpoint goes in is
    evaluation.kaggle_run / kaggle_epoch."""

    # a folder of wheels to take the bundle's wheels from, offline; None: download them from the package index
    wheelhouse: str | None = None
    python: str = Field(default="3.11", pattern=r"^3\.\d+$")  # the Kaggle image's Python, for the wheels' tags
    adapt_mode: Literal["rows", "rows+full", "full", "lora"] = "rows"  # run.sh's default for unseen tasks
    adapt_share: float = Field(default=0.7, gt=0, lt=1)  # of run.sh's --minutes; the rest: start-up and predict
