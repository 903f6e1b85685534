"""What `arcpipe doctor` measures on a real GPU reaches the forecast: the record it writes (doctor.run._record, called
after the measured steps on CUDA) is the file `arcpipe.forecast` reads its throughput from. The writer runs here on
figures as a GPU measurement returns them (a `ttt:` run's test-time-training step: measured here, on the CPU); the
reader is the forecast itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from arcpipe.config import load_config, read_config_yaml, validate_config
from arcpipe.doctor.measure import OutOfMemory
from arcpipe.doctor.run import RunCheck, _record, _ttt_step
from arcpipe.forecast import TTTRate, forecast_runs

ROOT = Path(__file__).resolve().parents[2]
H100 = {"gpus": [{"name": "NVIDIA H100 80GB HBM3", "memory_gb": 79.2, "capability": "9.0"}]}


def test_a_measured_record_replaces_the_assumption_in_the_forecast(tmp_path):
    cfg = load_config(ROOT / "config/config.yaml")
    results = tmp_path / "results"
    assumed = forecast_runs(cfg, results)["trm-arc1"]
    assert not assumed.throughput.measured
    train = {"examples_per_s": 2 * assumed.throughput.train_examples_per_s, "peak_gb": 61.0, "model_peak_gb": 58.5}
    row = _record(results, "trm-arc1", cfg.runs["trm-arc1"], H100, train, {"examples_per_s": 3000.0})
    path = results / "doctor/trm-arc1/H100-80GB.json"
    assert row.startswith(str(path)) and path.is_file()
    record = json.loads(path.read_text())
    assert record["peak_gb"] == 61.0 and record["model_peak_gb"] == 58.5  # the true peak beside the model's
    assert not [key for key in record if key.startswith("ttt_")]  # no test-time-training step measured: no fields
    measured = forecast_runs(cfg, results)["trm-arc1"]
    assert measured.throughput.measured and str(path) in measured.throughput.source
    assert measured.train_gpu_hours == pytest.approx(assumed.train_gpu_hours / 2)  # twice the assumed speed


def test_a_device_that_is_no_named_gpu_writes_no_record(tmp_path):
    cfg = load_config(ROOT / "config/config.yaml")
    other = {"gpus": [{"name": "Some Other Accelerator", "memory_gb": 32.0, "capability": "8.0"}]}
    row = _record(
        tmp_path,
        "trm-arc1",
        cfg.runs["trm-arc1"],
        other,
        {"examples_per_s": 1.0, "peak_gb": 1.0},
        {"examples_per_s": 1.0},
    )
    assert row.startswith("not written") and not (tmp_path / "doctor").exists()


def _ttt_config(K: int):
    """config.yaml with smoke-varc (the tiny VARC-ViT; ttt: 2 epochs, 2 jobs of the smoke dataset's test tasks, 9
    views each) planned on one H100 with eager steps (compile: false), K tasks a step."""
    raw = read_config_yaml(ROOT / "config/config.yaml")
    run = raw["runs"]["smoke-varc"]
    run.update(gpus_per_node=1, gpu="H100-80GB", compile=False, ttt={**run["ttt"], "tasks_per_step": K})
    return validate_config(raw)


@pytest.mark.parametrize("K", [1, 2])
def test_a_ttt_step_measured_on_cpu_is_recorded_and_the_forecast_bills_it(tmp_path, K):
    import torch

    from arcpipe.eval.ttt_measure import ttt_step_figures

    cfg = _ttt_config(K)
    run, check = cfg.runs["smoke-varc"], RunCheck("smoke-varc")
    figures = _ttt_step(cfg, "smoke-varc", torch.device("cpu"), False, ttt_step_figures, check)
    assert figures is check.figures["ttt"] and figures["examples_per_s"] > 0 and figures["step_s"] > 0
    assert figures["examples_per_s"] == pytest.approx(K * 8 / figures["step_s"])  # K x batch_size rows a step
    assert (figures["tasks_per_step"], figures["batch_size"], figures["views"], figures["step"]) == (K, 8, 9, "eager")
    assert check.rows == [("ttt step", check.rows[0][1])] and f"at K = {K} tasks x batch 8 (eager" in check.rows[0][1]

    results = tmp_path / "results"
    assumed = forecast_runs(cfg, results)["smoke-varc"]
    train = {"examples_per_s": 100.0, "peak_gb": 1.0}
    _record(results, "smoke-varc", run, H100, train, {"examples_per_s": 100.0}, figures)
    record = json.loads((results / "doctor/smoke-varc/H100-80GB.json").read_text())
    assert record["ttt_examples_per_s"] == figures["examples_per_s"] and record["ttt_step_s"] == figures["step_s"]
    assert (record["ttt_tasks_per_step"], record["ttt_batch_size"], record["ttt_step"]) == (K, 8, "eager")
    measured = forecast_runs(cfg, results)["smoke-varc"]
    assert measured.throughput.ttt == TTTRate(figures["examples_per_s"], K, 8, "eager")
    assert measured.ttt.measured and not assumed.ttt.measured
    assert measured.ttt.source.startswith("TTT measured: ") and measured.ttt.gpu_hours != assumed.ttt.gpu_hours
    # the same record read by a run that steps K + 1 tasks at once: the figure does not apply
    other = forecast_runs(_ttt_config(K + 1), results)["smoke-varc"].ttt
    assert not other.measured and f"TTT step is K = {K} x batch 8, eager; the run's K = {K + 1}" in other.source


def test_a_ttt_step_out_of_memory_is_a_problem_not_a_crash():
    def out_of_memory(*_):
        raise OutOfMemory

    cfg, check = _ttt_config(32), RunCheck("smoke-varc")
    assert _ttt_step(cfg, "smoke-varc", "cuda", True, out_of_memory, check) is None and "ttt" not in check.figures
    assert check.rows == [("ttt step", "out of memory at K = 32 tasks x batch 8")]
    assert check.problems == [
        "run smoke-varc: test-time training at ttt.tasks_per_step 32 does not fit this GPU; set a smaller "
        "runs.smoke-varc.ttt.tasks_per_step"
    ]
