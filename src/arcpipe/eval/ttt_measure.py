"""Test-time training's step timed as a job steps it (eval/ttt.py), on synthetic tasks of a run's shape: what
`arcpipe doctor` records on a GPU (arcpipe.gpus.doctor_record's `ttt_*` fields) and the forecast bills a run's fits
at (arcpipe.forecast.ttt_forecast) instead of an assumed MFU.

    figures = ttt_step_figures(run, arch_cfg, device, views=51, compiled=True)  # examples_per_s, step_s, peak_gb

K = ttt.tasks_per_step tasks a step, ttt.batch_size rows each: at K = 1 the one-task fit's step (`ttt.fit`: the
head's loss, backward, clipping, torch's AdamW), at K > 1 the batched step (`batched.fit_tasks`: the K forwards under
vmap, each task's own clipping and AdamW), compiled as a job compiles them. The doctor sits below evaluation in the
layer order (pyproject.toml), so the `arcpipe doctor` command hands this function to the doctor's check of a run
(doctor/run.check_run's `ttt_step`).
"""

from __future__ import annotations

import time
from typing import Any

import torch

from arcpipe.config import RunConfig
from arcpipe.doctor.measure import (
    ARC_SEQ_LEN,
    ARC_VOCAB,
    OutOfMemory,
    free_memory,
    peak_gb,
    reset_peak,
    sync_device,
    synthetic_batch,
)
from arcpipe.eval import batched, ttt
from arcpipe.models.registry import build_model

WARMUP_STEPS = 2  # a first fit of its own: the compilation (where compiled) and the allocator's first sizes
TIMED_STEPS = {"cuda": 20, "cpu": 2}  # a few seconds on a CPU at the tiny presets


def ttt_step_figures(
    run: RunConfig, arch_cfg: Any, device: torch.device, views: int, compiled: bool = False, steps: int | None = None
) -> dict[str, Any]:
    """The run's test-time-training step on `device`: K synthetic tasks of `views` views each (random canvases: a
    step's cost does not depend on the grids), a first fit of WARMUP_STEPS steps, then a fit of `steps` timed steps
    (TIMED_STEPS by default). {examples_per_s: K x batch_size rows a step over the step's seconds, step_s, peak_gb
    (None on a CPU), tasks_per_step, batch_size, views, step: "compiled" or "eager", steps}. Running out of memory
    raises OutOfMemory, with the probe's memory freed."""
    cfg = run.ttt
    assert cfg is not None, "a run with ttt:"
    K, B = cfg.tasks_per_step, cfg.batch_size
    steps = steps or TIMED_STEPS.get(device.type, TIMED_STEPS["cpu"])
    free_memory(device)
    reset_peak(device)
    out_of_memory = False
    try:
        head = build_model(
            arch_cfg,
            vocab_size=ARC_VOCAB,
            seq_len=ARC_SEQ_LEN,
            num_puzzle_identifiers=views,
            batch_size=B,
            device=device,
        )
        head.test_time = True  # LoopViT fits as upstream's test-time training (models/loopvit_head.py)
        batches = [_task_batch(B, views, device, seed=k) for k in range(K)]
        fit = _one_task(head, batches[0], cfg, compiled) if K == 1 else _tasks(head, batches, cfg, views, compiled)
        fit(WARMUP_STEPS)
        sync_device(device)
        started = time.perf_counter()
        fit(steps)
        sync_device(device)
        seconds = time.perf_counter() - started
    except torch.OutOfMemoryError:
        out_of_memory = True  # raised below, once the failed step's tensors are no longer held (doctor/measure.py)
    finally:
        head = batches = fit = None  # noqa: F841  (free before the next probe)
    free_memory(device)
    if out_of_memory:
        raise OutOfMemory
    step_s = seconds / steps
    return {
        "examples_per_s": K * B / step_s,
        "step_s": step_s,
        "peak_gb": peak_gb(device),
        "tasks_per_step": K,
        "batch_size": B,
        "views": views,
        "step": "compiled" if compiled else "eager",
        "steps": steps,
    }


def _one_task(head: torch.nn.Module, batch: dict[str, torch.Tensor], cfg: Any, compiled: bool) -> Any:
    """n steps of `ttt.fit` on `head`, as a job at tasks_per_step 1 steps (its loss compiled once, reused)."""
    loss_fn = torch.compile(ttt.step_loss) if compiled else ttt.step_loss

    def fit(n: int) -> None:
        # two epochs (fit reads the loss once an epoch, as a job does at the end of each of its epochs)
        two = cfg.model_copy(update={"epochs": 1, "warmup_epochs": 0})
        ttt.fit(head, lambda epoch: iter([batch] * (n - n // 2 if epoch == 0 else n // 2)), two, loss_fn)

    return fit


def _tasks(head: torch.nn.Module, batches: list[dict[str, torch.Tensor]], cfg: Any, views: int, compiled: bool) -> Any:
    """n batched steps of K tasks (`batched.fit_tasks`), as a job at tasks_per_step K steps (ttt._fit_batched: its
    loss and update compiled once, whole, reused)."""
    loss_fn = torch.compile(batched.batched_loss, fullgraph=True) if compiled else batched.batched_loss
    update_fn = torch.compile(batched.adamw_update, fullgraph=True) if compiled else batched.adamw_update
    width = head.model.inner.task_token_embed.weight.shape[1]
    head.train()  # dropout, as a job's batched fit

    def fit(n: int) -> None:
        fits = []
        for k, batch in enumerate(batches):
            table = torch.empty((views, width))
            torch.nn.init.trunc_normal_(table, std=ttt.TOKEN_STD)
            fits.append(batched.TaskFit(f"task{k}", table, [(cfg.lr, batch)] * n))
        done = batched.fit_tasks(head, fits, cfg, len(batches), lambda *_: None, loss_fn, update_fn, views)
        assert done == n, (done, n)

    return fit


def _task_batch(rows: int, views: int, device: torch.device, seed: int) -> dict[str, torch.Tensor]:
    """A step's rows of one task: the doctor's synthetic rows, their ids rows 0..views - 1 of the task's own table."""
    batch = synthetic_batch(rows, views + 1, device, seed)
    batch["puzzle_identifiers"] -= 1
    return batch
