"""arcpipe.gates: the record of a gate's decision, its one line, and the report's "not started: gate ..." word."""

import json

import pytest

from arcpipe.config import ArcpipeError, GateConfig
from arcpipe.gates import check_gate, decide, gate_line, gate_status

GATE = GateConfig(run="urm-arc1-validate", metric="pass@1", min=0.05)
METRICS = "results/eval/urm-arc1-validate/epoch_10000/metrics.json"


@pytest.mark.parametrize(("value", "passed"), [(0.031, False), (0.05, True), (0.062, True)])
def test_the_gate_passes_at_or_above_its_threshold(value, passed):
    record = decide("urm-arc1", GATE, 10000, {"pass@1": value, "pass@2": 1.0}, METRICS)
    assert record["passed"] is passed
    assert record["value"] == value and record["min"] == 0.05 and record["metric"] == "pass@1"
    assert record["checkpoint"] == "results/runs/urm-arc1-validate/ckpt/epoch_10000.pt"


def test_a_gate_that_falls_short_is_one_line_naming_run_metric_value_and_threshold():
    record = decide("urm-arc1", GATE, 10000, {"pass@1": 0.03125}, METRICS)
    assert gate_line(record, "results/gates/urm-arc1.json") == (
        "gate: urm-arc1 not started: urm-arc1-validate pass@1 = 0.03125 at epoch 10000 < min 0.05 "
        "(record results/gates/urm-arc1.json)"
    )


def test_the_record_is_written_and_the_report_says_not_started(tmp_path):
    metrics = tmp_path / "metrics.json"
    metrics.write_text(json.dumps({"pass@1": 0.031}))
    out = tmp_path / "results/gates/urm-arc1.json"
    record = check_gate("urm-arc1", GATE, 10000, metrics, out)
    assert json.loads(out.read_text()) == record
    assert gate_status(tmp_path / "results", "urm-arc1") == (
        "not started: gate urm-arc1-validate pass@1 = 0.031 at epoch 10000 < min 0.05"
    )


def test_no_status_for_a_run_without_a_record_or_whose_gate_passed(tmp_path):
    assert gate_status(tmp_path, "trm-arc1") is None
    metrics = tmp_path / "metrics.json"
    metrics.write_text(json.dumps({"pass@1": 0.5}))
    check_gate("urm-arc1", GATE, 10000, metrics, tmp_path / "gates/urm-arc1.json")
    assert gate_status(tmp_path, "urm-arc1") is None


def test_an_evaluation_without_the_metric_is_an_error_naming_the_file(tmp_path):
    with pytest.raises(ArcpipeError, match=r"metrics.json: no pass@1 \(runs.urm-arc1.gate.metric\)"):
        decide("urm-arc1", GATE, 10000, {"pass@2": 0.5}, METRICS)
