"""The training loop: one Snakemake job trains from the latest state to an evaluation boundary.

    arcpipe train --config results/runs/smoke-trm/config.yaml --run smoke-trm --data results/data/smoke \
        --out results/runs/smoke-trm --until-epoch 2 --deadline 30m

Semantics as upstream (docs/reference/upstream-recursive.md 2, 5 and 8): one optimizer step per ACT step with the carry
kept across batches, loss / global_batch_size, gradients summed over ranks, the warm-up + lr_min_ratio schedule over
upstream's `total_steps`, updates stop after total_steps. The global batch is split into (rank, micro-batch) slots, each
with its own carry; all randomness comes from (seed, position) hashes (train/sampler.py), so one process, torchrun and
gradient accumulation give the same weights up to float summation order.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

import arcpipe
from arcpipe.config import ArcpipeError, RunConfig, WorkflowConfig, compiles, config_hash, load_config
from arcpipe.config.arch import VARC_ARCHS
from arcpipe.data.dataset import Split, identifiers_sha256, load_identifiers, load_split
from arcpipe.models.act import Carry
from arcpipe.models.io import save_weights
from arcpipe.models.registry import build_model, make_arch_config
from arcpipe.optim import EMA, make_optimizers
from arcpipe.optim.update import apply_update
from arcpipe.train import distributed
from arcpipe.train.checkpoint import (
    STATE_FORMAT,
    check_compatible,
    load_state,
    restore_rng,
    rng_state,
    save_atomic,
)
from arcpipe.train.sampler import PassPlan, batch_rows, canvas_draws, collate, halt_min_steps, plan_for
from arcpipe.train.schedule import lr_at, schedule_step, total_steps
from arcpipe.train.tracking import MetricsLog, Progress, WandbMirror
from arcpipe.train.upstream_order import UpstreamOrder
from arcpipe.train.upstream_puzzles import UpstreamPuzzles, family_of, upstream_halt_min_steps

log = logging.getLogger(__name__)

EXIT_DEADLINE = 75  # EX_TEMPFAIL: saved before the job's time limit; a retry continues from the side checkpoint
EXIT_BUDGET = 3  # max_hours reached


@dataclass
class Position:
    """Where training stands: the pass (one per eval_interval epochs), the batch inside it, the step."""

    pass_index: int = 0  # passes completed before the current one
    batch: int = 0  # batches of the current pass already trained
    step: int = 0  # optimizer steps so far (upstream counts from 1: the first update is step 1)
    wall_seconds: float = 0.0  # cumulative training time over all segments
    extra: dict[str, Any] = field(default_factory=dict)


class Trainer:
    def __init__(
        self,
        cfg: WorkflowConfig,
        run_name: str,
        data_dir: Path,
        out_dir: Path,
        *,
        forward_dtype: torch.dtype | None = None,
    ) -> None:
        """`forward_dtype`: None for the device's (bf16 on CUDA, fp32 on CPU); the trainer-parity test's float64."""
        self.run_name = run_name
        self.run: RunConfig = cfg.runs[run_name]
        self.cfg = cfg
        self.data_dir = data_dir
        self.out_dir = out_dir
        self.env = distributed.setup(self.run)
        self.device = self.env.device
        _require_verified(data_dir)
        self.split: Split = load_split(data_dir, "train")
        self.identifiers_sha256 = identifiers_sha256(data_dir)
        meta = self.split.metadata
        self.arch_cfg = make_arch_config(self.run.arch, self.run.preset, self.run.arch_overrides)
        torch.manual_seed(self.run.seed)  # the same initial weights on every rank
        self.head = build_model(
            self.arch_cfg,
            vocab_size=meta.vocab_size,
            seq_len=meta.seq_len,
            num_puzzle_identifiers=meta.num_puzzle_identifiers,
            batch_size=self.run.micro_batch,
            device=self.device,
            forward_dtype=forward_dtype,
        )
        self.optimizers = make_optimizers(
            self.head,
            lr=self.run.lr,
            puzzle_emb_lr=self.run.puzzle_emb_lr,
            weight_decay=self.run.weight_decay,
            puzzle_emb_weight_decay=self.run.puzzle_emb_weight_decay,
            betas=(self.run.beta1, self.run.beta2),
            optimizer=self.run.optimizer,
        )
        self.ema = EMA(self.head, self.run.ema_rate) if self.run.ema else None
        self.step_fn = self.head.step  # (carry, batch) -> carry, loss, metrics, outputs; no host sync
        if compiles(self.run.compile, self.device.type):
            self.step_fn = torch.compile(self.head.step)
        self.total_steps = total_steps(
            self.run.epochs, meta.total_groups, meta.mean_puzzle_examples, self.run.global_batch_size
        )
        self.slots = self.run.grad_accum_steps  # micro-batches of this rank per step
        # `sampler: upstream`: upstream's loaders' own draws, made by the trainer: VARC's epoch by epoch, the
        # recursive models' (upstream's PuzzleDataset) pass by pass
        upstream = self.run.sampler == "upstream"
        self.upstream_order = (
            UpstreamOrder.for_split(
                self.split, load_identifiers(data_dir), self.arch_cfg.image_size, self.run.num_devices
            )
            if upstream and self.run.arch in VARC_ARCHS
            else None
        )
        self.upstream_puzzles = (
            UpstreamPuzzles(family_of(self.run.arch), self.run.seed)
            if upstream and self.run.arch not in VARC_ARCHS
            else None
        )
        self.carries: list[Carry | None] = [None] * self.slots
        self.position = Position()
        self.config_hash = config_hash(self.run)
        self.side_path = out_dir / "resume" / "side.pt"
        self.metrics = MetricsLog(out_dir / "resume" / "metrics.jsonl", enabled=self.env.rank == 0)

    # ------------------------------------------------------------------------------------------------------------
    # the segment

    def train_until(self, until_epoch: int, deadline: float | None, max_new_steps: int | None = None) -> int:
        """Train to boundary `until_epoch`, writing every boundary's ckpt, state and metrics on the way.

        `max_new_steps` (preflight) stops early after that many steps, saving a side checkpoint.
        """
        run = self.run
        if until_epoch % run.eval_interval or not 0 < until_epoch <= run.epochs:
            raise ArcpipeError(
                f"--until-epoch {until_epoch}: not an evaluation boundary of run {self.run_name} "
                f"(multiples of eval_interval={run.eval_interval} up to epochs={run.epochs})"
            )
        start = run.segment_start(until_epoch)
        # earlier segments finished: their jobs never re-run. A run a stop rule ended at `start` and that now goes
        # on has no state file there (Snakemake deleted it: no job asked for it), only its kept copy, which
        # `resume` reads: that copy stays until the next segment starts, so a killed retry finds it again
        from_copy = start > 0 and not (self.out_dir / "state" / f"epoch_{start}.pt").exists()
        self._drop_boundary_copies(before=start if from_copy else start + 1)
        if max_new_steps is None and self.restore_boundary(until_epoch):
            return 0
        self.resume(until_epoch)
        first_step = self.position.step
        started = time.monotonic()
        wall_at_start = self.position.wall_seconds
        wandb = WandbMirror(self.run, self.run_name, self.out_dir, enabled=self.env.rank == 0)
        progress = Progress(self.total_steps, enabled=self.env.rank == 0)
        last_side = time.monotonic()
        while (self.position.pass_index + 1) * run.eval_interval <= until_epoch:
            plan = self.plan(self.position.pass_index)
            while self.position.batch < plan.num_batches and self.position.step < self.total_steps:
                now = time.monotonic()
                # rank 0's clock decides for every rank: the saves below are collectives
                self.position.wall_seconds, out_of_time, side_due = self._agree(
                    wall_at_start + (now - started),
                    deadline is not None and now >= deadline,
                    now - last_side >= run.side_checkpoint_minutes * 60,
                )
                if out_of_time:
                    self._save_side()
                    log.warning(
                        "deadline reached at step %d: saved %s; a retry continues from it",
                        self.position.step,
                        self.side_path,
                    )
                    return EXIT_DEADLINE
                if run.max_hours is not None and self.position.wall_seconds >= run.max_hours * 3600:
                    self._save_side()
                    log.error(
                        "run %s reached max_hours=%s of training; raise runs.%s.max_hours in the config to continue",
                        self.run_name,
                        run.max_hours,
                        self.run_name,
                    )
                    return EXIT_BUDGET
                if max_new_steps is not None and self.position.step >= first_step + max_new_steps:
                    self._save_side()
                    return 0
                if side_due and self.position.step > first_step:
                    self._save_side()
                    last_side = time.monotonic()
                record = self.train_step(plan, wandb)
                progress.update(self.position.step, record)
            self.position.wall_seconds = wall_at_start + (time.monotonic() - started)
            if self.upstream_puzzles is not None and self.position.pass_index == 0:
                self.upstream_puzzles.first_evaluation_draw()
            # the boundary's state holds the next pass's start: a job resumed from it never writes it again
            self.position.pass_index += 1
            self.position.batch = 0
            self.save_boundary(self.position.pass_index * run.eval_interval)
        wandb.finish()
        return 0

    def plan(self, pass_index: int) -> PassPlan:
        """Pass `pass_index` of the run's sampler (train/sampler.plan_for; `sampler: upstream` of a recursive model:
        upstream's own draws, train/upstream_puzzles.py, drawn when the pass is planned)."""
        run = self.run
        if self.upstream_puzzles is not None:
            return self.upstream_puzzles.plan(self.split, pass_index, run.eval_interval, run.global_batch_size)
        return plan_for(run.sampler, run.num_devices)(
            self.split, run.seed, pass_index, run.eval_interval, run.global_batch_size
        )

    def _agree(self, wall_seconds: float, out_of_time: bool, side_due: bool) -> tuple[float, bool, bool]:
        """Rank 0's view of the clock, on every rank (one tiny broadcast per step under torchrun)."""
        if not self.env.is_distributed:
            return wall_seconds, out_of_time, side_due
        values = torch.tensor([wall_seconds, float(out_of_time), float(side_due)], dtype=torch.float64)
        values = values.to(self.device)
        dist.broadcast(values, src=0)
        wall, out, side = values.tolist()
        return wall, bool(out), bool(side)

    # ------------------------------------------------------------------------------------------------------------
    # the stepping API (train_until drives it; benchmarks and notebooks may too): resume, train_step, save_boundary

    def train_step(
        self, plan: Any, wandb: WandbMirror | None = None, batches: list[dict[str, torch.Tensor]] | None = None
    ) -> dict[str, float]:
        """One optimizer step on batch `position.batch` of `plan` (train/sampler.plan_pass); returns its metrics.

        `batches` (one dict per micro-batch slot of this rank, as `draw` makes them) replaces the sampler's draw:
        a replay of the batches another trainer drew (tests/unit/train/test_trainer_parity.py).
        """
        run = self.run
        t0 = time.perf_counter()
        if batches is None:
            batches = self.draw(plan, self.position.batch, self.position.step + 1)
        if len(batches) != self.slots:
            raise ValueError(f"train_step: {len(batches)} batches for {self.slots} micro-batch slot(s)")
        batch_index = self.position.batch
        self.position.batch += 1
        self.position.step += 1
        step = self.position.step
        sums: dict[str, torch.Tensor] = {}
        data_wait = time.perf_counter() - t0
        for slot, batch in enumerate(batches):
            if self.carries[slot] is None:
                self.carries[slot] = self.head.initial_carry(batch)
            carry, loss, metrics, _ = self.step_fn(self.carries[slot], batch)
            self.carries[slot] = carry
            (loss / run.global_batch_size).backward()
            for k, v in metrics.items():
                sums[k] = sums.get(k, 0) + v.detach().float()
        distributed.all_reduce_grads(self.head, self.env)
        apply_update(  # the clip: the norm of the summed gradient, as every rank holds it
            [(optimizer, self.lr_of(base_lr, step, batch_index, plan)) for optimizer, base_lr in self.optimizers],
            (p for p in self.head.parameters() if p.grad is not None),  # listed only when grad_clip is set
            run.grad_clip,
        )
        if self.ema is not None:
            self.ema.update()
        record = self._reduce_metrics(sums)
        record.update(step=step, epoch=self._epoch_now(plan), lr=self.lr_of(run.lr, step, batch_index, plan))
        record["time/step_s"] = time.perf_counter() - t0
        record["time/data_wait_s"] = data_wait
        self.metrics.write(record)
        if wandb is not None:
            wandb.log(record, step)
        return record

    def draw(self, plan: Any, batch_index: int, step: int) -> list[dict[str, torch.Tensor]]:
        """This rank's micro-batches of global batch `batch_index` of `plan`, for optimizer step `step`, on the
        device: the rows (sampler.batch_rows, collate), each row's halting exploration and a canvas model's
        placement draws."""
        run, env = self.run, self.env
        if self.upstream_order is not None:
            self.upstream_order.fill(
                plan,
                batch_index,
                run.eval_interval * self.position.pass_index + 1,
                run.eval_interval,
                run.global_batch_size,
            )
        examples, puzzles = batch_rows(
            self.split, plan, batch_index, run.global_batch_size, run.seed, self.position.pass_index
        )
        micro = run.micro_batch
        out = []
        for slot in range(self.slots):
            lo = (env.rank * self.slots + slot) * micro
            rows = np.arange(lo, lo + micro)
            batch = {
                k: torch.from_numpy(v).to(self.device, non_blocking=True)
                for k, v in collate(self.split, examples[rows], puzzles[rows]).items()
            }
            if self.upstream_puzzles is not None:  # upstream's own exploration draws (train/upstream_puzzles.py)
                batch["halt_min_steps"] = upstream_halt_min_steps(
                    micro, self.arch_cfg_exploration, self.head.model.max_steps, self.device
                )
            else:
                batch["halt_min_steps"] = torch.from_numpy(
                    halt_min_steps(run.seed, step, rows, self.arch_cfg_exploration, self.head.model.max_steps)
                ).to(self.device)
            if getattr(self.head, "draws_per_row", 0):  # a canvas model: each row's placement (sampler.canvas_draws)
                draws = (
                    plan.draws[batch_index * run.global_batch_size + rows]
                    if getattr(plan, "draws", None) is not None
                    else canvas_draws(run.seed, step, rows)
                )
                batch["canvas_draws"] = torch.from_numpy(draws).to(self.device)
            out.append(batch)
        return out

    def lr_of(self, base_lr: float, step: int, batch_index: int, plan: Any) -> float:
        """The lr of an optimizer whose base rate is `base_lr` at step `step` (see lr_factor), rounded as upstream:
        per step, upstream's compute_lr puts base_lr inside the schedule (base_lr * step / warmup, which differs
        from base_lr * (step / warmup) in the last bit at some steps: tests/unit/train/test_trainer_parity.py);
        per epoch, upstream VARC's LambdaLR multiplies base_lr by the factor."""
        run = self.run
        if run.lr_warmup_epochs is None:
            at = schedule_step(run.arch, step)
            return lr_at(at, base_lr, run.lr_warmup_steps, self.total_steps, run.lr_min_ratio)
        return base_lr * self.lr_factor(step, batch_index, plan)

    def lr_factor(self, step: int, batch_index: int, plan: Any) -> float:
        """A per-epoch run's (lr_warmup_epochs) rate at optimizer step `step` (from 1), the step on batch
        `batch_index` (from 0) of `plan`, as a fraction of the base rate, as upstream VARC's schedule. Per-step
        runs are scheduled by `lr_of` alone."""
        run = self.run
        assert run.lr_warmup_epochs is not None
        # the epoch (from 0) the batch falls in: a pass is eval_interval epochs of plan.num_batches batches in all.
        # Upstream's LambdaLR steps once after each epoch: its epoch e (from 0) trains at the factor of e
        epoch = run.eval_interval * self.position.pass_index + run.eval_interval * batch_index // plan.num_batches
        return lr_at(epoch, 1.0, run.lr_warmup_epochs, run.epochs, run.lr_min_ratio)

    @property
    def arch_cfg_exploration(self) -> float:
        return float(getattr(self.arch_cfg, "halt_exploration_prob", 0.1))

    def _reduce_metrics(self, sums: dict[str, torch.Tensor]) -> dict[str, float]:
        keys = sorted(sums)
        stacked = torch.stack([sums[k] for k in keys])
        if self.env.is_distributed:
            dist.all_reduce(stacked)
        values = dict(zip(keys, stacked.tolist(), strict=True))
        # as upstream: metrics other than losses are means over the rows that halted this step, count included
        # (train/count is 1.0, or 0.0 when no row halted). On a step where none halted nothing was measured and
        # train/accuracy etc. read 0.0: readers keep only steps with train/count > 0 (report.tables.accuracy_curves)
        count = max(values.get("count", 0.0), 1.0)
        return {
            f"train/{k}": (v / self.run.global_batch_size if k.endswith("loss") else v / count)
            for k, v in values.items()
        }

    def _epoch_now(self, plan) -> float:
        return self.run.eval_interval * (self.position.pass_index + self.position.batch / max(plan.num_batches, 1))

    # ------------------------------------------------------------------------------------------------------------
    # state

    def _state(self) -> dict[str, Any]:
        return {
            "format": STATE_FORMAT,
            "arcpipe_version": arcpipe.__version__,
            "run": self.run_name,
            "run_config": self.run.model_dump(mode="json"),
            "config_hash": self.config_hash,
            "identifiers_sha256": self.identifiers_sha256,
            "position": self.position.__dict__.copy(),
            "model": self.head.state_dict(),
            "optimizers": [opt.state_dict() for opt, _ in self.optimizers],
            "ema": self.ema.state_dict() if self.ema is not None else None,
            "carries": self._gather_carries(),
            **rng_state(self.device),
            **({"upstream_order": self.upstream_order.state_dict()} if self.upstream_order is not None else {}),
            **({"upstream_puzzles": self.upstream_puzzles.state_dict()} if self.upstream_puzzles is not None else {}),
        }

    def _gather_carries(self) -> list[dict[str, torch.Tensor] | None]:
        """The carries of every (rank, slot), in global slot order; [] of Nones before the first step."""
        local = [c.state_dict() if c is not None else None for c in self.carries]
        local = [{k: v.cpu() for k, v in c.items()} if c is not None else None for c in local]
        if not self.env.is_distributed:
            return local
        gathered: list[Any] = [None] * self.env.world_size
        dist.all_gather_object(gathered, local)
        return [c for rank_carries in gathered for c in rank_carries]

    def _load(self, state: dict[str, Any], path: Path) -> None:
        check_compatible(state, path, self.run, self.identifiers_sha256)
        self.head.load_state_dict(state["model"])
        for (opt, _), opt_state in zip(self.optimizers, state["optimizers"], strict=True):
            opt.load_state_dict(opt_state)
        if self.ema is not None:
            self.ema.load_state_dict(state["ema"])
        self.position = Position(**state["position"])
        carries = state["carries"]
        start = self.env.rank * self.slots
        mine = carries[start : start + self.slots] if len(carries) == self.env.world_size * self.slots else None
        if mine is None and any(c is not None for c in carries):
            # the launch shape changed: slots no longer line up with the saved carries; restart the sequences
            log.warning(
                "%s: carries saved for %d slots, now %d: ACT sequences restart",
                path,
                len(carries),
                self.env.world_size * self.slots,
            )
            mine = [None] * self.slots
        self.carries = [
            Carry.from_state_dict({k: v.to(self.device) for k, v in c.items()}) if c is not None else None
            for c in (mine or [None] * self.slots)
        ]
        restore_rng(state, self.device)
        if self.upstream_order is not None:
            self.upstream_order.load_state_dict(state["upstream_order"])
        if self.upstream_puzzles is not None:
            self.upstream_puzzles.load_state_dict(state["upstream_puzzles"])

    def resume(self, until_epoch: int) -> None:
        """Continue from the side checkpoint if it is ahead and matches, else from the latest boundary state."""
        run = self.run
        candidates = []
        if self.side_path.exists():
            candidates.append(self.side_path)
        for epoch in range(until_epoch - run.eval_interval, 0, -run.eval_interval):
            boundary = self.out_dir / "state" / f"epoch_{epoch}.pt"
            found = [p for p in (boundary, self._boundary_copy(boundary)) if p.exists()]
            if found:
                candidates.append(found[0])
                break
        best: tuple[dict[str, Any], Path] | None = None
        for path in candidates:
            state = load_state(path)
            pos = state["position"]
            reached = pos["pass_index"] * run.eval_interval
            if path == self.side_path and (
                state["config_hash"] != self.config_hash
                or state["identifiers_sha256"] != self.identifiers_sha256
                or reached >= until_epoch
            ):
                log.info("%s: ignored (another config or beyond epoch %d)", path, until_epoch)
                continue
            if best is None or _order(pos) > _order(best[0]["position"]):
                best = (state, path)
        if best is not None:
            self._load(*best)
            log.info(
                "resumed from %s at step %d (pass %d, batch %d)",
                best[1],
                self.position.step,
                self.position.pass_index,
                self.position.batch,
            )
        elif until_epoch > run.eval_interval:
            previous = self.out_dir / "state" / f"epoch_{until_epoch - run.eval_interval}.pt"
            raise ArcpipeError(f"{previous}: missing; train the previous segment first (snakemake does this)")
        self.metrics.truncate_after(self.position.step)

    def _boundary_files(self, epoch: int) -> list[Path]:
        return [
            self.out_dir / "ckpt" / f"epoch_{epoch}.pt",
            self.out_dir / "state" / f"epoch_{epoch}.pt",
            self.out_dir / "metrics" / f"epoch_{epoch}.jsonl",
        ]

    def _boundary_copy(self, path: Path) -> Path:
        return self.out_dir / "resume" / "boundaries" / f"{path.parent.name}_{path.name}"

    def _keep_boundary_copies(self, epoch: int) -> None:
        """Rank 0, after writing boundary `epoch`: a hard link to each of its files under resume/boundaries/."""
        for path in self._boundary_files(epoch):
            _link_atomic(path, self._boundary_copy(path))

    def restore_boundary(self, epoch: int) -> bool:
        """Put back boundary `epoch`'s files from their kept copies, if this run wrote them; False otherwise.

        One cluster job trains the `segment_evals` boundaries of a segment, one `arcpipe train` after another.
        Killed before its last, the job is re-run whole, and Snakemake first deletes every output of it, also
        the boundaries it had finished. Those are put back here, byte for byte, instead of being trained again.
        """
        files = self._boundary_files(epoch)
        copies = [self._boundary_copy(path) for path in files]
        if not all(path.exists() or copy.exists() for path, copy in zip(files, copies, strict=True)):
            return False
        kept = load_state(files[1] if files[1].exists() else copies[1])
        if kept["config_hash"] != self.config_hash or kept["identifiers_sha256"] != self.identifiers_sha256:
            return False
        if self.env.rank == 0:
            for path, copy in zip(files, copies, strict=True):
                if not path.exists():
                    _link_atomic(copy, path)
                    log.info("%s: restored from %s (this run trained it before the job was re-run)", path, copy)
        distributed.barrier(self.env)
        return True

    def _drop_boundary_copies(self, before: int) -> None:
        """Copies of boundaries of earlier segments (epoch < `before`) are no longer needed."""
        keep = self.out_dir / "resume" / "boundaries"
        if self.env.rank != 0 or not keep.is_dir():
            return
        for copy in keep.iterdir():
            epoch = copy.stem.rpartition("_")[2]
            if epoch.isdigit() and int(epoch) < before:
                copy.unlink()

    def _save_side(self) -> None:
        state = self._state()
        if self.env.rank == 0:
            # the metrics first: a kill between the two then leaves lines past the side checkpoint, which a resume
            # cuts back (truncate_after), never a side checkpoint past lines still in the buffer, which were lost
            self.metrics.flush()
            save_atomic(state, self.side_path)
        distributed.barrier(self.env)

    def save_boundary(self, epoch: int) -> None:
        """Write boundary `epoch`'s ckpt, state and metrics files (a collective under torchrun); the state holds
        `position` as it is: train_until advances it to the next pass first, so a resume never writes it again."""
        state = self._state()
        if self.env.rank == 0:
            meta = {
                "run_config": self.run.model_dump(mode="json"),
                "config_hash": self.config_hash,
                "identifiers_sha256": self.identifiers_sha256,
                "step": self.position.step,
                "epoch": epoch,
                "total_steps": self.total_steps,
            }
            evaluated = self.ema.ema_copy(self.head) if self.ema is not None else self.head
            save_weights(
                self.out_dir / "ckpt" / f"epoch_{epoch}.pt",
                evaluated,
                arch=self.run.arch,
                arch_cfg=self.arch_cfg,
                dataset=self.split.metadata,
                **meta,
            )
            save_atomic(state, self.out_dir / "state" / f"epoch_{epoch}.pt")
            self.metrics.export(
                self.out_dir / "metrics" / f"epoch_{epoch}.jsonl", since_epoch=epoch - self.run.eval_interval
            )
            self._keep_boundary_copies(epoch)
            log.info(
                "boundary epoch %d: step %d, checkpoint %s",
                epoch,
                self.position.step,
                self.out_dir / "ckpt" / f"epoch_{epoch}.pt",
            )
        distributed.barrier(self.env)


def train(
    config_path: Path, run_name: str, data_dir: Path, out_dir: Path, until_epoch: int, deadline_minutes: float | None
) -> int:
    """Entry point of `arcpipe train`: returns the process exit status."""
    started = time.monotonic()
    cfg = load_config(config_path)
    if run_name not in cfg.runs:
        raise ArcpipeError(f"{config_path}: no run {run_name!r} (runs: {', '.join(sorted(cfg.runs))})")
    deadline = None
    if deadline_minutes is not None:
        margin = min(5 * 60.0, 0.1 * deadline_minutes * 60)
        deadline = started + deadline_minutes * 60 - margin
    trainer = Trainer(cfg, run_name, data_dir, out_dir)
    try:
        return trainer.train_until(until_epoch, deadline)
    finally:
        distributed.teardown(trainer.env)


def _link_atomic(src: Path, dst: Path) -> None:
    """`dst` becomes the same file as `src` (a hard link; a copy where the filesystem has none), atomically."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(src, tmp)
    except OSError:
        shutil.copy2(src, tmp)
    tmp.replace(dst)


def _order(position: dict[str, Any]) -> tuple[int, int, int]:
    # a side checkpoint taken after a pass's last step and the boundary state after it share the step: the
    # boundary is later (the next pass), so a boundary is never written twice
    return position["step"], position["pass_index"], position["batch"]


def _require_verified(data_dir: Path) -> None:
    report_path = data_dir / "verify.json"
    try:
        report = json.loads(report_path.read_text())
    except FileNotFoundError:
        raise ArcpipeError(f"{report_path}: missing; run 'arcpipe data verify {data_dir}' first") from None
    if not report.get("ok"):
        raise ArcpipeError(f"{report_path}: the dataset failed verification; see its failures")
