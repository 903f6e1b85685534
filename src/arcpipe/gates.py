"""Gates: a run trains only after another run's evaluation reaches a threshold (`runs.<run>.gate` in the config).

    record = check_gate("urm-arc1", gate, 10000, Path("results/eval/urm-arc1-validate/epoch_10000/metrics.json"),
                        Path("results/gates/urm-arc1.json"))

Rule check_gate (rules/train.smk) is a Snakemake checkpoint: it writes the gate's record, results/gates/{run}.json,
and exits 0 whether the gate passed or not. The workflow's input functions (arcpipe.rule_inputs) read the record: a
gated run's training, evaluations and report rows are asked for only when it passed, so a gate that falls short is
a decision (the run never starts, every other run goes on), not a failed job. `gate_line` is the one line that says
so, printed by the gate job; `gate_status` is the report's "not started: gate ..." for that run.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from arcpipe import paths
from arcpipe.config import ArcpipeError, GateConfig, RunConfig
from arcpipe.files import atomic_write_many
from arcpipe.plan import read_gate

log = logging.getLogger(__name__)


def gate_epoch(runs: Mapping[str, RunConfig], name: str) -> int:
    """The checkpoint of the gate run that run `name`'s gate reads: gate.epoch, else the gate run's last."""
    gate = runs[name].gate
    assert gate is not None, name
    return gate.epoch or runs[gate.run].epochs


def decide(run: str, gate: GateConfig, epoch: int, metrics: Mapping[str, Any], metrics_path: str) -> dict[str, Any]:
    """The gate's record: which checkpoint of which run was read, the value, the threshold and whether it passed."""
    if gate.metric not in metrics:
        raise ArcpipeError(
            f"{metrics_path}: no {gate.metric} (runs.{run}.gate.metric); re-evaluate the checkpoint"
            + (
                " (evaluations before arcpipe scored cell_accuracy lack it)"
                if gate.metric == "cell_accuracy"
                else f" with evaluation.pass_ks holding {gate.metric.removeprefix('pass@')}"
            )
        )
    value = float(metrics[gate.metric])
    return {
        "run": run,
        "gate_run": gate.run,
        "epoch": epoch,
        "checkpoint": paths.CKPT.format(run=gate.run, epoch=epoch),
        "metrics": metrics_path,
        "metric": gate.metric,
        "value": value,
        "min": gate.min,
        "passed": value >= gate.min,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def gate_line(record: Mapping[str, Any], record_path: str | Path) -> str:
    """`gate: urm-arc1 not started: urm-arc1-validate pass@1 = 0.031 at epoch 10000 < min 0.05 (record ...)`."""
    verdict = "may train" if record["passed"] else "not started"
    return f"gate: {record['run']} {verdict}: {_reading(record)} (record {record_path})"


def gate_status(results_dir: str | Path, run: str) -> str | None:
    """The report's summary word for a run its gate stopped: `not started: gate <run> pass@1 = ... < min ...`.

    None when the run has no gate record (no gate, or not decided yet) or its gate passed.
    """
    record = read_record(Path(results_dir) / "gates" / f"{run}.json")
    if record is None or record["passed"]:
        return None
    return f"not started: gate {_reading(record)}"


def read_record(path: str | Path) -> dict[str, Any] | None:
    """A gate record, or None when there is none (arcpipe.plan's reader: the one reader of gate records)."""
    return read_gate(path)


def check_gate(run: str, gate: GateConfig, epoch: int, metrics_path: Path, out: Path) -> dict[str, Any]:
    """Rule check_gate: read the gate run's metrics.json, write the record to `out` and log its one line."""
    try:
        metrics = json.loads(metrics_path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ArcpipeError(f"{metrics_path}: cannot read the gate run's evaluation ({err})") from None
    record = decide(run, gate, epoch, metrics, str(metrics_path))
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_many(out.parent, {out.name: (json.dumps(record, indent=2) + "\n").encode()})
    log.info("%s", gate_line(record, out))
    return record


def _reading(record: Mapping[str, Any]) -> str:
    sign = ">=" if record["passed"] else "<"
    return (
        f"{record['gate_run']} {record['metric']} = {record['value']:.4g} at epoch {record['epoch']} "
        f"{sign} min {record['min']:g}"
    )
