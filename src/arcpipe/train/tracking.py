"""Where training reports: metrics JSON lines (the record), a rank-0 progress line, and an optional W&B mirror.

The W&B API key is read by wandb itself from the environment (WANDB_API_KEY) or a cluster Secret; arcpipe never
writes it anywhere (offline run files hold no environment: checked by the sentinel tests). One W&B run per arcpipe
run (so per seed: `{run}-s{seed}`): its id is derived from the run name, resumed across segments, and grouped by the
seed group, else the run name. `wandb: auto` is online when the job has WANDB_API_KEY, else offline (`wandb_mode`).

Evaluation curves (`log_evaluation`, called by each evaluate_checkpoint job) go into the same W&B run, at the
checkpoint's training step, only when it is online:
* online: the evaluation attaches to the run in W&B's shared mode (several writers to one run; wandb >= 0.19) as a
  secondary writer (`x_primary=False`, its own `x_label`, `x_update_finish_state=False`), so the training job of the
  next segment, which may be writing at the same time, stays the run's primary writer and decides its final state.
  Shared mode ignores `log(step=...)`, so the records carry their step as `eval/step`, the x-axis of every `eval/*`
  chart (define_metric): no record depends on the order in which the writers reach the server.
* offline: nothing. An offline writer is a directory (fragment) of its own, and `wandb sync` replays the fragments of
  one run id as resumes in order of start time; an evaluation's fragment starts after the next segment's and holds
  an earlier step, so its rows would land behind later training steps, and older wandb replaced the history synced
  before (wandb issues 3841, 5865): it could disturb the training curve. The evaluation's metrics.json stays the
  record (results/eval/{run}/epoch_{epoch}/); once online, `arcpipe runs wandb-evals RUN` (`mirror_evaluations`)
  logs the saved ones through the same shared-mode writer as the online jobs.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from arcpipe.config import RunConfig

log = logging.getLogger(__name__)


class MetricsLog:
    """Append-only JSON lines in a side file; a boundary exports its lines to the declared metrics file."""

    def __init__(self, path: Path, enabled: bool) -> None:
        self.path = path
        self.enabled = enabled
        self._file = None

    def write(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "a")  # noqa: SIM115  (kept open across steps)
        self._file.write(json.dumps(record) + "\n")

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()
            os.fsync(self._file.fileno())

    def truncate_after(self, step: int) -> None:
        """Drop lines past `step`: a resumed run re-trains them, so they would appear twice."""
        if not self.enabled or not self.path.exists():
            return
        # the open file is replaced below: lines written to it afterwards would go to the old file, lost (a process
        # that trains several segments, train_until after train_until); the next write opens the new one
        self.flush()
        if self._file is not None:
            self._file.close()
            self._file = None
        kept = [line for line in self._lines() if json.loads(line)["step"] <= step]
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text("".join(kept))
        tmp.replace(self.path)

    def export(self, target: Path, since_epoch: float) -> None:
        """Write the lines of the pass that ended at this boundary to `target`, atomically."""
        self.flush()
        lines = [line for line in self._lines() if json.loads(line)["epoch"] > since_epoch]
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_text("".join(lines))
        tmp.replace(target)

    def _lines(self) -> list[str]:
        return self.path.read_text().splitlines(keepends=True) if self.path.exists() else []


class Progress:
    """A progress line on rank 0 every few seconds: steps, it/s, ETA, loss."""

    def __init__(self, total_steps: int, enabled: bool, every_s: float = 10.0) -> None:
        self.total = total_steps
        self.enabled = enabled
        self.every_s = every_s
        self.started = time.monotonic()
        self.first_step: int | None = None
        self.last = 0.0

    def update(self, step: int, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if self.first_step is None:
            self.first_step, self.started = step, now
            return
        if now - self.last < self.every_s:
            return
        self.last = now
        rate = (step - self.first_step) / max(now - self.started, 1e-9)
        eta = (self.total - step) / rate if rate > 0 else float("inf")
        log.info(
            "step %d/%d (%.1f%%) %.2f it/s ETA %s loss %.4f acc %.3f data-wait %.1f%%",
            step,
            self.total,
            100 * step / max(self.total, 1),
            rate,
            _hms(eta),
            record.get("train/lm_loss", float("nan")),
            record.get("train/accuracy", float("nan")),
            100 * record["time/data_wait_s"] / max(record["time/step_s"], 1e-9),
        )


class WandbMirror:
    """Mirror metrics to Weights & Biases when the run's `wandb` (or WANDB_MODE) is auto/online/offline."""

    def __init__(self, run: RunConfig, run_name: str, out_dir: Path, enabled: bool) -> None:
        mode = wandb_mode(run.wandb)
        self.run = None
        if not enabled or mode == "disabled":
            return
        import wandb

        self.run = wandb.init(
            project=run.wandb_project,
            name=run_name,
            **wandb_grouping(run.model_dump(mode="json"), run_name),
            id=wandb_run_id(run_name),
            resume="allow",
            mode=mode,
            dir=str(out_dir),
            config=run.model_dump(mode="json"),
            settings=wandb.Settings(x_disable_stats=True, console="off"),
        )
        log.info("W&B run %s (%s): %s", run_name, mode, getattr(self.run, "url", None) or "offline")

    def log(self, record: dict[str, Any], step: int) -> None:
        if self.run is not None:
            self.run.log(record, step=step)

    def finish(self) -> None:
        if self.run is not None:
            self.run.finish()
            self.run = None


def wandb_mode(setting: str, environ: Mapping[str, str] = os.environ) -> str:
    """The W&B mode a job uses: WANDB_MODE if set, else the run's `wandb`, with `auto` resolved by WANDB_API_KEY."""
    mode = environ.get("WANDB_MODE") or setting
    if mode == "auto":
        return "online" if environ.get("WANDB_API_KEY") else "offline"
    return mode


def wandb_grouping(run_config: Mapping[str, Any], run_name: str) -> dict[str, str]:
    """W&B's group and job type of a run: a sweep's arms are one group (`sweep-<name>`), each arm a job type (its
    seeds side by side); other runs are grouped by their seed group (the runs of one `seeds:` list), else alone."""
    sweep = run_config.get("sweep")
    if sweep:
        return {"group": f"sweep-{sweep['name']}", "job_type": sweep["arm"]}
    return {"group": run_config.get("seed_group") or run_name}


def wandb_run_id(run_name: str) -> str:
    """The W&B run id of an arcpipe run: the same for every segment and evaluation job of the run."""
    return hashlib.sha256(f"arcpipe:{run_name}".encode()).hexdigest()[:16]


def evaluation_record(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The W&B record of one evaluation's metrics.json: pass@K, pass@K by ACT step, eval losses, and `eval/step`."""
    record: dict[str, float] = {"eval/step": metrics["step"], "eval/epoch": metrics["epoch"]}
    for key, value in metrics.items():
        if key.startswith("pass@"):
            record[f"eval/{key}"] = value
        elif key.startswith("eval/"):
            record[key] = value
    for depth, by_k in (metrics.get("depth") or {}).items():
        for key, value in by_k.items():
            record[f"eval/depth/{depth}/{key}"] = value
    return record


def evaluation_settings(epoch: int) -> dict[str, Any]:
    """wandb.Settings of an evaluation job's writer: secondary in shared mode (module docstring)."""
    return {
        "mode": "shared",
        "x_primary": False,
        "x_label": f"eval-epoch_{epoch}",
        "x_update_finish_state": False,
        "x_disable_stats": True,
        "console": "off",
    }


def log_evaluation(run_config: Mapping[str, Any], run_name: str, metrics: Mapping[str, Any], out_dir: Path) -> bool:
    """Log an evaluation into its run's W&B run when that is online (module docstring); True if it did.

    run_config: the checkpoint's run config (model_dump), whose `wandb` and `wandb_project` say where.
    """
    mode = wandb_mode(run_config.get("wandb", "disabled"))
    if mode != "online" or metrics.get("step") is None:
        log.info("W&B: evaluation not mirrored (mode %s); metrics.json is the record", mode)
        return False
    import wandb

    with wandb.init(
        project=run_config.get("wandb_project", "arcpipe"),
        name=run_name,
        **wandb_grouping(run_config, run_name),
        id=wandb_run_id(run_name),
        dir=str(out_dir),
        settings=wandb.Settings(**evaluation_settings(metrics["epoch"])),
    ) as run:
        run.define_metric("eval/step")
        run.define_metric("eval/*", step_metric="eval/step")
        run.log(evaluation_record(metrics))
    log.info("W&B run %s: evaluation at step %d mirrored", run_name, metrics["step"])
    return True


def mirror_evaluations(run: RunConfig, run_name: str, results: Path) -> int:
    """Log a run's saved evaluations (results/eval/RUN/epoch_*/metrics.json) into its W&B run, online; how many.

    For runs that trained offline, after `wandb sync`: each goes through `log_evaluation`'s shared-mode writer. Run
    it once per run: a second call logs the same points again.
    """
    paths = sorted((results / "eval" / run_name).glob("epoch_*/metrics.json"), key=lambda p: int(p.parent.name[6:]))
    config = {**run.model_dump(mode="json"), "wandb": "online"}
    return sum(log_evaluation(config, run_name, json.loads(p.read_text()), p.parent) for p in paths)


def log_ablation(sweep: str, base_config: Mapping[str, Any], table: Any, plot: Path | None, out_dir: Path) -> bool:
    """Log a sweep's ablation table (report/ablation.py's frame) and its plot into W&B, beside the sweep's arms: one
    W&B run `sweep-<name>-ablation` in the sweep's group (`sweep-<name>`, where every arm is a job type), job type
    `ablation`, in the mode of the base run's `wandb` (resolved as for training: `wandb_mode`); True if it logged.
    Each render (an arm added, a rung decided) logs the table again at the next step of the same W&B run, so its
    last row is the current table. The CSV and HTML under results/report/sweeps/<name>/ stay the record."""
    mode = wandb_mode(base_config.get("wandb", "disabled"))
    if mode == "disabled":
        log.info("W&B: ablation table of sweep %s not logged (mode disabled)", sweep)
        return False
    import wandb

    frame = table.astype(object).where(table.notna(), None)  # W&B tables hold None, not NaN
    name = f"sweep-{sweep}-ablation"
    with wandb.init(
        project=base_config.get("wandb_project", "arcpipe"),
        name=name,
        group=f"sweep-{sweep}",
        job_type="ablation",
        id=wandb_run_id(name),
        resume="allow",
        mode=mode,
        dir=str(out_dir),
        settings=wandb.Settings(x_disable_stats=True, console="off"),
    ) as run:
        record: dict[str, Any] = {"ablation": wandb.Table(dataframe=frame)}
        if plot is not None and plot.is_file():
            record["ablation_plot"] = wandb.Image(str(plot))
        run.log(record)
    log.info("W&B run %s (%s): ablation table of %d arms logged", name, mode, len(table))
    return True


def _hms(seconds: float) -> str:
    if seconds == float("inf"):
        return "?"
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"
