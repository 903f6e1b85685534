"""Where training reports: metrics JSON lines (the record), a rank-0 progress line, and an optional W&B mirror.

The W&B API key is read by wandb itself from the environment (WANDB_API_KEY) or a cluster Secret; arcpipe never
writes it anywhere. One W&B run per arcpipe run: its id is derived from the run name, resumed across segments.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
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
    """Mirror metrics to Weights & Biases when the run's `wandb` (or WANDB_MODE) is online/offline."""

    def __init__(self, run: RunConfig, run_name: str, out_dir: Path, enabled: bool) -> None:
        mode = os.environ.get("WANDB_MODE", run.wandb)
        self.run = None
        if not enabled or mode == "disabled":
            return
        import wandb

        run_id = hashlib.sha256(f"arcpipe:{run_name}".encode()).hexdigest()[:16]
        self.run = wandb.init(
            project=run.wandb_project,
            name=run_name,
            group=run.seed_group,  # the runs of one `seeds:` list side by side; None: no group
            id=run_id,
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


def _hms(seconds: float) -> str:
    if seconds == float("inf"):
        return "?"
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"
