"""Preflight: the real dataset and the real model config for a few steps on one device, before the cluster starts.

    arcpipe train --config results/runs/trm-arc1/config.yaml --run trm-arc1 --data results/data/arc1concept-aug-1000 \
        --out results/runs/trm-arc1 --preflight results/runs/trm-arc1/preflight.json

Trains a few steps at the run's per-device micro-batch, saves a side checkpoint, loads it into a fresh trainer,
trains one more step, runs the evaluated model for the full halt_max_steps on one test batch, and reports
timings, memory and the checks made. Every full run's first segment depends on it, so a broken config, a dataset
that does not fit the model, or a device out of memory fails in minutes, not after the cluster has started.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from pathlib import Path

import numpy as np
import torch

from arcpipe.config import ArcpipeError, load_config
from arcpipe.data.dataset import load_split
from arcpipe.doctor.backends import backends, first_calls
from arcpipe.train.loop import Trainer
from arcpipe.train.sampler import collate

log = logging.getLogger(__name__)

NUM_STEPS = 2


def preflight(config_path: Path, run_name: str, data_dir: Path, out_dir: Path, report_path: Path) -> int:
    cfg = load_config(config_path)
    if run_name not in cfg.runs:
        raise ArcpipeError(f"{config_path}: no run {run_name!r} (runs: {', '.join(sorted(cfg.runs))})")
    run = cfg.runs[run_name]
    # one device, one micro-batch per step: the memory and the model of the real run, the cost of a few steps
    one_device = run.model_copy(
        update={
            "nodes": 1,
            "gpus_per_node": min(run.gpus_per_node, 1),
            "global_batch_size": run.micro_batch,
            "micro_batch_size": None,
            "wandb": "disabled",
            "max_hours": None,
        }
    )
    cfg = cfg.model_copy(update={"runs": {run_name: one_device}})
    scratch = out_dir / "preflight-scratch"
    shutil.rmtree(scratch, ignore_errors=True)
    report: dict = {"run": run_name, "micro_batch": run.micro_batch, "checks": []}
    try:
        t0 = time.monotonic()
        trainer = Trainer(cfg, run_name, data_dir, scratch)
        report["build_s"] = time.monotonic() - t0
        # the code paths the run takes on this device, as `arcpipe doctor` reports them; a kernel that imports
        # but fails at its first call stops here, not hours into the run
        report["backends"] = backends(run, trainer.device)
        problems = first_calls(trainer.device)
        if problems:
            raise ArcpipeError(f"preflight of {run_name}: " + "; ".join(problems))
        report["checks"].append(f"backends: {report['backends']['attention']}, {report['backends']['optimizer']}")
        # the steps stay inside the first evaluation interval, so that the resume starts from the side
        # checkpoint (a tiny dataset, as in a rehearsal, may have only a few steps per interval)
        first = trainer.plan(0)
        steps = max(1, min(NUM_STEPS, first.num_batches - 1))
        t1 = time.monotonic()
        trainer.train_until(one_device.eval_interval, deadline=None, max_new_steps=steps)
        report["step_s"] = (time.monotonic() - t1) / steps
        report["train_examples_per_s"] = run.micro_batch / report["step_s"]  # first steps: compile time included
        report["checks"].append(f"trained {steps} steps")
        resumed = Trainer(cfg, run_name, data_dir, scratch)
        resumed.train_until(one_device.eval_interval, deadline=None, max_new_steps=1)
        if resumed.position.step != steps + 1:
            raise ArcpipeError(f"preflight: resume continued at step {resumed.position.step}, not {steps + 1}")
        report["checks"].append("saved, loaded and resumed")
        report["eval"] = _short_evaluation(resumed, data_dir)
        report["checks"].append("evaluated one test batch for the full halt_max_steps")
        if resumed.device.type == "cuda":
            report["peak_gpu_memory_gb"] = torch.cuda.max_memory_allocated() / 2**30
        report["ok"] = True
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    tmp = report_path.with_name(f".{report_path.name}.tmp")
    tmp.write_text(json.dumps(report, indent=2) + "\n")
    tmp.replace(report_path)
    log.info("preflight of %s passed: %s", run_name, ", ".join(report["checks"]))
    return 0


def _short_evaluation(trainer: Trainer, data_dir: Path) -> dict:
    test = load_split(data_dir, "test")
    rows = np.arange(min(trainer.run.micro_batch, len(test.inputs)))
    puzzles = np.searchsorted(test.puzzle_indices, rows, side="right") - 1
    batch = {k: torch.from_numpy(v).to(trainer.device) for k, v in collate(test, rows, puzzles).items()}
    head = trainer.ema.ema_copy(trainer.head) if trainer.ema is not None else trainer.head
    head.eval()
    steps = 0
    with torch.no_grad():
        carry = head.initial_carry(batch)
        while True:
            carry, loss, metrics, _, all_halted = head(carry, batch)
            steps += 1
            if all_halted:
                break
    head.train()
    return {"act_steps": steps, "rows": len(rows), "lm_loss": float(metrics["lm_loss"]) / len(rows)}
