"""What `arcpipe doctor` measures on a real GPU reaches the forecast: the record it writes (doctor.run._record, called
after the measured steps on CUDA) is the file `arcpipe.forecast` reads its throughput from. The writer runs here on
figures as a GPU measurement returns them; the reader is the forecast itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from arcpipe.config import load_config
from arcpipe.doctor.run import _record
from arcpipe.forecast import forecast_runs

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
