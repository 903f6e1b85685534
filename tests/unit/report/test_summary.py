"""The results summary the HTML report opens on: hand-built evaluations and step times with known answers."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from arcpipe.config import WorkflowConfig
from arcpipe.forecast import forecast_table
from arcpipe.gates import check_gate, gate_status
from arcpipe.report.render import render_workflow_report
from arcpipe.report.selection import task_scores
from arcpipe.stopping import Score, decide, decision_record, write_decision

# (puzzle, test_index) -> (pass@1, pass@2) per epoch; task a has two test inputs. pass@2 over the tasks a, b, c, d:
# epoch 2: .5 1 0 0 (37.5%), epoch 4: 1 0 1 0 (50%), epoch 6: .5 0 0 1 (37.5%)
CHECKPOINTS = {
    2: {("a", 0): (0, 1), ("a", 1): (0, 0), ("b", 0): (1, 1), ("c", 0): (0, 0), ("d", 0): (0, 0)},
    4: {("a", 0): (1, 1), ("a", 1): (1, 1), ("b", 0): (0, 0), ("c", 0): (1, 1), ("d", 0): (0, 0)},
    6: {("a", 0): (0, 0), ("a", 1): (1, 1), ("b", 0): (0, 0), ("c", 0): (0, 0), ("d", 0): (0, 1)},
}
STEP_S, STEPS, EVAL_S = 36.0, 10, 360.0  # per segment: 10 steps of 36 s (0.1 h); per evaluation 0.1 h
PRICE = 2.0


def _results(root: Path, run: str) -> tuple[list[Path], list[Path]]:
    metrics, train = [], []
    for epoch, cells in CHECKPOINTS.items():
        directory = root / "eval" / run / f"epoch_{epoch}"
        directory.mkdir(parents=True)
        rows = [{"puzzle": p, "test_index": i, "pass@1": one, "pass@2": two} for (p, i), (one, two) in cells.items()]
        pd.DataFrame(rows).to_csv(directory / "per_puzzle.csv", index=False)
        scores = task_scores(pd.DataFrame(rows)).mean().to_dict()
        record = {"epoch": epoch, "step": epoch * 10, **scores, "wall_time_s": EVAL_S, "info": {"run": run}}
        (directory / "metrics.json").write_text(json.dumps(record))
        metrics.append(directory / "metrics.json")
        jsonl = root / "runs" / run / "metrics" / f"epoch_{epoch}.jsonl"
        jsonl.parent.mkdir(parents=True, exist_ok=True)
        steps = range(STEPS * (epoch // 2 - 1) + 1, STEPS * epoch // 2 + 1)
        jsonl.write_text("".join(json.dumps({"step": s, "time/step_s": STEP_S}) + "\n" for s in steps))
        train.append(jsonl)
    return metrics, train


@pytest.fixture
def config(tmp_path, write_config) -> dict:
    runs = {"gpu-run": {"epochs": 6, "nodes": 2, "gpus_per_node": 4}, "cpu-run": {"epochs": 6}}
    raw = yaml.safe_load(write_config(tmp_path / "config.yaml", runs).read_text())
    raw["datasets"]["tiny"] |= {"seed": 1, "max_puzzles": None}  # the whole evaluation set: the published benchmark
    raw["report"] = {"gpu_hour_price": PRICE}
    return raw


def _summary(tmp_path: Path, config: dict) -> pd.DataFrame:
    metrics, train = [], []
    for run in ("gpu-run", "cpu-run"):
        m, t = _results(tmp_path / "results", run)
        metrics, train = metrics + m, train + t
    render_workflow_report(tmp_path / "report", config, metrics, train, [])
    return pd.read_csv(tmp_path / "report" / "summary.csv").set_index("run")


def test_last_and_best_on_test_beside_the_published_number(tmp_path, config):
    row = _summary(tmp_path, config).loc["gpu-run"]
    assert row["last pass@2"] == pytest.approx(37.5) and row["best-on-test pass@2"] == pytest.approx(50.0)
    assert row["best_epoch"] == 4 and pd.isna(row["selected pass@2"]) and row["scored_on"] == "every test task"
    assert (row["benchmark"], row["published"], row["published_metric"]) == ("ARC-AGI-1", 44.6, "pass@2")
    assert row["last on published metric"] == pytest.approx(37.5)


def test_the_selected_checkpoint_and_the_others_are_scored_on_the_tasks_not_held_out(tmp_path, config):
    config["evaluation"] = {"selection_tasks": 1}  # seed 1 holds out task b, where epoch 2 is the best
    row = _summary(tmp_path, config).loc["gpu-run"]
    assert (row["selected pass@2"], row["selected_epoch"]) == (pytest.approx(100 * 0.5 / 3), 2)
    assert row["last pass@2"] == pytest.approx(100 * 1.5 / 3)  # epoch 6 on a, c, d
    assert (row["best-on-test pass@2"], row["best_epoch"]) == (pytest.approx(100 * 2 / 3), 4)
    assert row["scored_on"] == "test tasks but 1 held out"


def test_gpu_hours_and_cost_weight_the_recorded_times_by_the_gpus_held(tmp_path, config):
    summary = _summary(tmp_path, config)
    train_h, eval_h = 3 * STEPS * STEP_S / 3600, 3 * EVAL_S / 3600
    gpu = summary.loc["gpu-run"]
    assert gpu["gpus"] == 8 and gpu["hours"] == pytest.approx(train_h + eval_h)
    assert gpu["gpu_hours"] == pytest.approx(8 * train_h + 1 * eval_h)  # training on 2 x 4 GPUs, evaluation on 1
    assert gpu["cost"] == pytest.approx(PRICE * (8 * train_h + eval_h))
    cpu = summary.loc["cpu-run"]
    assert cpu["hours"] == pytest.approx(train_h + eval_h) and cpu["gpu_hours"] == 0 and cpu["cost"] == 0


def test_the_summary_is_an_html_table_with_its_notes(tmp_path, config):
    _summary(tmp_path, config)
    page = (tmp_path / "report" / "summary.html").read_text()
    assert page.count("<table") == 1 and ">gpu-run</td>" in page and ">37.50 (6)</td>" in page
    # the compact view: scores with their epoch, the published number with its metric, GPU-hours and cost
    assert ">50.00 (4)</td>" in page and ">44.6 pass@2</td>" in page and ">37.50</td>" in page
    assert ">2.70</td>" in page and ">5.40</td>" in page  # 8 GPUs x 0.3 h + 1 x 0.3 h, at 2.0 per GPU-hour
    assert "gpu_hours" in pd.read_csv(tmp_path / "report" / "summary.csv").columns  # the CSV keeps every column
    assert "<code>report.gpu_hour_price</code>" in page
    # linked to the per-task pages and the front page beside it (rule render_task_pages writes them there)
    assert '<a href="tasks/index.html">every task and what each run answered</a>' in page
    assert '<a href="index.html">every table and plot</a>' in page
    assert "[every task and what each run answered](tasks/index.html)" in (tmp_path / "report/summary.md").read_text()
    for stem in ("passk", "comparison", "seeds", "selection", "learning"):
        assert "<table" in (tmp_path / "report" / f"{stem}.html").read_text(), stem


def test_the_forecast_stands_beside_what_was_spent(tmp_path, config):
    """Each run's row carries the forecast `arcpipe config check` printed (arcpipe.forecast) beside the spent GPU-h."""
    summary = _summary(tmp_path, config)
    forecast = forecast_table(WorkflowConfig.model_validate(config), Path("results")).set_index("run")
    for run in ("gpu-run", "cpu-run"):
        assert summary.loc[run, "forecast_gpu_hours"] == pytest.approx(forecast.loc[run, "forecast_gpu_hours"])
        assert summary.loc[run, "throughput_source"] == forecast.loc[run, "throughput_source"]
    assert summary.loc["gpu-run", "forecast_gpu_hours"] > 0 and summary.loc["cpu-run", "forecast_gpu_hours"] == 0
    shown = (tmp_path / "report" / "summary.md").read_text()
    assert "forecast GPU-h" in shown and "arcpipe config check" in shown


def test_a_run_its_gate_stopped_has_a_row_that_says_why(tmp_path, config, monkeypatch):
    """The gate's own record (arcpipe.gates.check_gate on cpu-run's last evaluation) puts the gated run in the
    summary with `not started: gate ...`, its forecast and nothing spent; the evaluated runs have no status."""
    monkeypatch.chdir(tmp_path)  # the report reads results/gates/ where the workflow runs
    config["runs"]["gated-run"] = {
        **config["runs"]["cpu-run"],
        "gate": {"run": "cpu-run", "metric": "pass@2", "min": 0.9},
    }
    cfg = WorkflowConfig.model_validate(config)
    metrics = tmp_path / "results/eval/cpu-run/epoch_6/metrics.json"
    _results(tmp_path / "results", "cpu-run")
    _results(tmp_path / "results", "gpu-run")
    check_gate("gated-run", cfg.runs["gated-run"].gate, 6, metrics, tmp_path / "results/gates/gated-run.json")
    paths = sorted((tmp_path / "results/eval").glob("*/epoch_*/metrics.json"))
    train = sorted((tmp_path / "results/runs").glob("*/metrics/*.jsonl"))
    render_workflow_report(tmp_path / "report", config, paths, train, [])
    summary = pd.read_csv(tmp_path / "report/summary.csv", keep_default_na=False).set_index("run")
    assert summary.loc["gated-run", "status"] == gate_status("results", "gated-run")
    assert summary.loc["gated-run", "status"].startswith("not started: gate cpu-run pass@2 = 0.375")
    assert float(summary.loc["gated-run", "gpu_hours"]) == 0 and summary.loc["cpu-run", "status"] == ""
    assert "not started: gate" in (tmp_path / "report/summary.md").read_text()


def test_a_run_its_stop_rule_ended_says_where_and_what_it_saved(tmp_path, config, monkeypatch):
    """gpu-run's stop rule (target pass@2 0.5) fired at epoch 4 of 6 (arcpipe.stopping's record); the summary says so
    and puts the skipped epoch's GPU-hours, at the trained epochs' rate, beside what was spent."""
    monkeypatch.chdir(tmp_path)
    config["runs"]["gpu-run"]["stop"] = {"metric": "pass@2", "target": 0.5}
    rule = WorkflowConfig.model_validate(config).runs["gpu-run"].stop
    for run in ("gpu-run", "cpu-run"):
        _results(tmp_path / "results", run)
    history = [Score(2, 0.375, "all 4 test tasks", fallback=True), Score(4, 0.5, "all 4 test tasks", fallback=True)]
    decision = decide(history, rule, [2, 4, 6])
    assert decision.stop and decision.epoch == 4
    record = tmp_path / "results/runs/gpu-run/decisions/epoch_4.json"
    record.parent.mkdir()
    write_decision(record, decision_record(decision, "gpu-run", rule))
    went_on = decide(history[:1], rule, [2, 4, 6])  # the decision before it, as decide_boundary made it
    write_decision(record.with_name("epoch_2.json"), decision_record(went_on, "gpu-run", rule))
    paths = [
        p for p in sorted((tmp_path / "results/eval").glob("*/epoch_*/metrics.json")) if "gpu-run/epoch_6" not in str(p)
    ]
    train = [
        p
        for p in sorted((tmp_path / "results/runs").glob("*/metrics/*.jsonl"))
        if "gpu-run/metrics/epoch_6" not in str(p)
    ]
    render_workflow_report(tmp_path / "report", config, paths, train, [])
    summary = pd.read_csv(tmp_path / "report/summary.csv", keep_default_na=False).set_index("run")
    assert summary.loc["gpu-run", "status"].startswith("stopped at epoch 4 of 6: pass@2 = 0.500")
    # 2 segments of 0.1 h on 8 GPUs and 2 evaluations of 0.1 h on 1 GPU: 1.8 GPU-h for 4 epochs; 2 more skipped
    assert float(summary.loc["gpu-run", "gpu_hours"]) == pytest.approx(1.8)
    assert float(summary.loc["gpu-run", "saved_gpu_hours"]) == pytest.approx(1.8 * 2 / 4)
    assert summary.loc["cpu-run", "status"] == "" and float(summary.loc["cpu-run", "saved_gpu_hours"]) == 0
    assert "saved GPU-h" in (tmp_path / "report/summary.md").read_text()


def test_the_summary_the_ablation_table_the_drivers_line_and_the_forecast_count_gpu_hours_alike(
    tmp_path, config, monkeypatch
):
    """One record (a GPU run on 2 x 4 GPUs and a CPU run, each with its step times and evaluation wall times), and
    every place that prints its GPU-hours: the report's summary, a sweep's ablation table, the driver's last line and
    a forecast at the throughput the record ran at. All are RunConfig.gpu_hours; the ablation table once summed the
    raw hours (0.01-0.02 for CPU runs, against 0.00 everywhere else)."""
    from arcpipe.forecast import Throughput, data_size, forecast_run
    from arcpipe.outcome import _metrics_line
    from arcpipe.report.render import render_ablation

    config["sweeps"] = {"dev": {"base": "gpu-run", "grid": {"gpus_per_node": [0]}}}  # its one arm: on the CPU
    arm = "dev-gpus_per_node_0"
    metrics, train = [], []
    for run in ("gpu-run", "cpu-run", arm):
        m, t = _results(tmp_path / "results", run)
        metrics, train = metrics + m, train + t
    render_workflow_report(tmp_path / "report", config, metrics, train, [])
    summary = pd.read_csv(tmp_path / "report" / "summary.csv").set_index("run")["gpu_hours"]
    monkeypatch.chdir(tmp_path)  # render_ablation reads results/ from where the workflow's jobs run
    render_ablation(tmp_path / "ablation", config, "dev", metrics, train)
    ablation = pd.read_csv(tmp_path / "ablation" / "ablation.csv").set_index("arm")["gpu_hours"]
    cfg = WorkflowConfig.model_validate(config)
    train_h, eval_h = 3 * STEPS * STEP_S / 3600, 3 * EVAL_S / 3600
    assert summary["gpu-run"] == pytest.approx(8 * train_h + eval_h) and summary["cpu-run"] == summary[arm] == 0
    assert (ablation["gpu-run"], ablation[arm]) == (pytest.approx(summary["gpu-run"]), 0.0)
    for run in ("gpu-run", "cpu-run"):
        line = _metrics_line(tmp_path, run, cfg, len(run))
        assert line.endswith(f"GPU-h {summary[run]:.2f}" if summary[run] < 10 else f"GPU-h {summary[run]:.1f}"), line
    # the forecast at the record's own throughput: its wall hours are the record's, its GPU-hours the summary's
    run = cfg.runs["gpu-run"]
    data = data_size("tiny", cfg.datasets["tiny"], tmp_path / "results")
    first = forecast_run(cfg, "gpu-run", data)
    rows = first.eval_passes * first.eval_rows * first.eval_attempts
    measured = Throughput(
        train_examples_per_s=first.train_examples / (train_h * 3600 * run.train_gpus),
        eval_examples_per_s=rows / (eval_h * 3600 * run.evaluation_gpus),
        source="the record",
        measured=True,
    )
    forecast = forecast_run(cfg, "gpu-run", data, measured)
    assert forecast.train_hours == pytest.approx(train_h) and forecast.gpu_hours == pytest.approx(summary["gpu-run"])
    cpu = forecast_run(cfg, "cpu-run", data)
    assert cpu.gpu_hours == 0 == summary["cpu-run"]


def test_an_ablation_row_on_other_test_views_than_its_base_is_marked_not_like_for_like(tmp_path, config, monkeypatch):
    """render_ablation gives each run's test views and checkpoint (the plan on disk) to the table: an arm swept onto
    a dataset with other views is marked beside the base's, and the notes say its difference is not like for
    like; an arm scored as the base is not marked."""
    from arcpipe.report.render import render_ablation

    config["datasets"]["wide"] = {**config["datasets"]["tiny"], "num_aug": 7}
    config["sweeps"] = {"dev": {"base": "gpu-run", "grid": {"dataset": ["tiny", "wide"]}}}
    runs = ("gpu-run", "dev-dataset_tiny", "dev-dataset_wide")
    metrics, train = [], []
    for run in runs:
        m, t = _results(tmp_path / "results", run)
        metrics, train = metrics + m, train + t
    monkeypatch.chdir(tmp_path)
    render_ablation(tmp_path / "ablation", config, "dev", metrics, train)
    table = pd.read_csv(tmp_path / "ablation" / "ablation.csv", keep_default_na=False).set_index("arm")
    assert (
        table.loc["gpu-run", "protocol"]
        == "test-time training: no; test views: tiny (drawn, 4 per task); checkpoint: last"
    )
    assert table.loc["dev-dataset_tiny", "protocol_vs_base"] == ""
    assert table.loc["dev-dataset_wide", "protocol_vs_base"] == (
        "test views: wide (drawn, 8 per task) (base: tiny (drawn, 4 per task))"
    )
    shown = (tmp_path / "ablation" / "ablation.md").read_text()
    assert "not like for like: dev-dataset_wide scored under another protocol than the reference" in shown
    assert "protocol vs base" in shown
