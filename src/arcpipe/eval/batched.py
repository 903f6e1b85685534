"""Test-time training of K tasks at once: one step advances K independent fits of the same canvas model (VARC's
ViT and U-Net, LoopViT).

    fit_tasks(head, fits, cfg, tasks_per_step=8, on_done=answer)  # eval/ttt.run_job with ttt.tasks_per_step > 1

A fit of one task (eval/ttt.fit) steps a ~17M-parameter model on 8 rows: small matrices a GPU runs far below its
peak. Here K tasks' fits share a step, each one still its own fit:

* weights: every parameter of the model is held K times, stacked along a new leading dimension (K, ...), and the
  model runs on each task's slice with its own batch (`torch.func.functional_call` under `torch.func.vmap`; dropout
  draws differ per task: randomness "different"). The task-token table is stacked too, (K, V_max, D): each task's
  own fresh table of V rows fills the first V, the rest are never looked up (no gradient, no change, a zero in the
  norm);
* loss: each task's is the head's (models/varc_head.py: the pixel mean of its batch, times its rows), so the sum of
  the K losses over the rows has, for each task's slice of the weights, exactly that task's gradient;
* clipping: each task's gradient norm over its own gradients only (torch's clip_grad_norm_, per task);
* AdamW: each task's moments (stacked as the weights) and its own step count and rate (K-vectors), torch's
  single-tensor AdamW update term for term (betas 0.9/0.999, eps 1e-8, no weight decay: ttt.fit's optimizer);
* a task whose steps have run out stops changing: the update of its slice (weights, moments, step count) is masked
  away, and a freed slot takes the job's next task (the checkpoint's weights, the task's table, zero moments). An
  empty slot (no task left) steps on blank rows, masked the same way. Each task's own steps (its batches and rates,
  in its order: `TaskFit.steps`) are ttt.fit_task's, so with dropout off a task's final weights equal its fit alone
  to rounding (tests/unit/eval/test_ttt_batched.py: float64 and float32, with the tolerances reached).

The step has no host sync: the rates, the mask and the step counts are tensors; a task's last loss is read once,
when it finishes. Compiled (`compile`), the loss (the K forwards under vmap) and the update are compiled once each
per job, whole (fullgraph).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.func import functional_call, vmap
from torch.nn.attention import SDPBackend, sdpa_kernel

from arcpipe.config.runs import TTTConfig
from arcpipe.data import canvas
from arcpipe.models.loopvit import LoopOutput

BETAS = (0.9, 0.999)  # ttt.fit's AdamW (upstream's), eps and weight decay as below
EPS = 1e-8
CLIP_EPS = 1e-6  # torch's clip_grad_norm_: max_norm / (norm + 1e-6)
IGNORE_LABEL_ID = -100  # a blank row's labels (eval/infer.make_batch)

Step = tuple[float, dict[str, Tensor]]  # (the step's rate, its batch of cfg.batch_size rows)
LossFn = Callable[[torch.nn.Module, dict[str, Tensor], dict[str, Tensor]], Tensor]
UpdateFn = Callable[..., None]


@dataclass
class TaskFit:
    """One task's fit: its name, its fresh task-token table (V, D), and its steps in order, each (rate, batch)."""

    name: str
    table: Tensor
    steps: Iterable[Step]
    info: dict[str, Any] = field(default_factory=dict)  # carried into its statistics (views, demonstrations)


def fit_tasks(
    head: torch.nn.Module,
    fits: Iterable[TaskFit],
    cfg: TTTConfig,
    tasks_per_step: int,
    on_done: Callable[[TaskFit, dict[str, Tensor], dict[str, Any]], None],
    loss_fn: LossFn | None = None,
    update_fn: UpdateFn | None = None,
    max_views: int | None = None,
) -> int:
    """Fit every task of `fits`, `tasks_per_step` at a time (module doc), starting each from `head`'s weights; the
    steps taken. on_done(fit, weights, stats) as each task finishes: weights is its model's state (the inner model's
    parameter names, its own table of V rows), stats {steps, seconds, slot_seconds, last_loss, tasks_per_step}:
    seconds is its share of the steps it took part in (each step's time over the tasks in it), so the tasks'
    seconds add up to the fit's. max_views: the largest table of the tasks (default: the first tasks' largest
    table; a later task with more views is refused). head: in train mode for dropout, as ttt.fit puts it."""
    loss_fn = loss_fn or batched_loss
    update_fn = update_fn or adamw_update
    queue = iter(fits)
    first = [f for _, f in zip(range(tasks_per_step), queue, strict=False)]
    if not first:
        return 0
    K = len(first)
    inner = head.model.inner
    template = {name: p.detach() for name, p in inner.named_parameters() if p.requires_grad}
    table_name = "task_token_embed.weight"
    width = template[table_name].shape[1]
    rows = max_views or max(f.table.shape[0] for f in first)
    device, dtype = template[table_name].device, template[table_name].dtype
    shapes = {name: (rows, width) if name == table_name else tuple(t.shape) for name, t in template.items()}
    params = {n: torch.zeros((K, *s), device=device, dtype=dtype).requires_grad_() for n, s in shapes.items()}
    exp_avg = {n: torch.zeros_like(p, requires_grad=False) for n, p in params.items()}
    exp_avg_sq = {n: torch.zeros_like(p, requires_grad=False) for n, p in params.items()}
    step_count = torch.zeros(K, device=device, dtype=torch.float64)
    slots: list[_Slot | None] = [None] * K

    def start(k: int, fit: TaskFit | None) -> None:
        slots[k] = None if fit is None else _Slot(fit, iter(fit.steps))
        if fit is None:
            return
        if fit.table.shape[0] > rows:
            raise ValueError(f"task {fit.name}: {fit.table.shape[0]} views, more than the {rows} rows of the stack")
        with torch.no_grad():
            for name, p in params.items():
                if name == table_name:
                    p[k].zero_()
                    p[k, : fit.table.shape[0]].copy_(fit.table)
                else:
                    p[k].copy_(template[name])
                exp_avg[name][k].zero_()
                exp_avg_sq[name][k].zero_()
            step_count[k] = 0

    def finish(k: int) -> None:
        slot = slots[k]
        assert slot is not None
        V = slot.fit.table.shape[0]
        weights = {n: (p[k, :V] if n == table_name else p[k]).detach().clone() for n, p in params.items()}
        last = float(slot.last_loss) / cfg.batch_size if slot.last_loss is not None else float("nan")
        stats = {
            **slot.fit.info,
            "steps": slot.steps,
            "seconds": round(slot.seconds, 3),
            "slot_seconds": round(time.monotonic() - slot.started, 3),
            "last_loss": last,
            "tasks_per_step": K,
        }
        on_done(slot.fit, weights, stats)

    for k, fit in enumerate(first):
        start(k, fit)
    blank: dict[str, Tensor] | None = None
    steps = 0
    while True:
        batches: list[dict[str, Tensor] | None] = []
        rates = []
        for k in range(K):
            step = _next_step(slots[k])
            while step is None and slots[k] is not None:  # the slot's task is done: the next task takes it
                finish(k)
                start(k, next(queue, None))
                step = _next_step(slots[k])
            batches.append(step[1] if step else None)
            rates.append(step[0] if step else 0.0)
        if all(s is None for s in slots):
            return steps
        if blank is None:
            blank = _blank(next(b for b in batches if b is not None))
        batch = {key: torch.stack([(b or blank)[key] for b in batches]) for key in blank}  # (K, B, ...)
        active_list = [s is not None for s in slots]
        active = torch.tensor(active_list, device=device)
        lr = torch.tensor(rates, device=device, dtype=torch.float64)
        started = time.monotonic()
        losses = loss_fn(head, params, batch)  # (K,)
        grads = torch.autograd.grad((losses / cfg.batch_size).sum(), list(params.values()), allow_unused=True)
        # a weight the loss does not use (LoopViT's exit gate in test-time training) gets a zero gradient: its
        # moments stay 0 and the weight does not move, as torch's AdamW skips a parameter without a gradient
        grads = tuple(torch.zeros_like(p) if g is None else g for g, p in zip(grads, params.values(), strict=True))
        update_fn(
            params, dict(zip(params, grads, strict=True)), exp_avg, exp_avg_sq, step_count, lr, active, cfg.grad_clip
        )
        share = (time.monotonic() - started) / sum(active_list)
        steps += 1
        for k, slot in enumerate(slots):
            if slot is not None:
                slot.steps += 1
                slot.seconds += share
                slot.last_loss = losses[k].detach()


def batched_loss(head: torch.nn.Module, params: dict[str, Tensor], batch: dict[str, Tensor]) -> Tensor:
    """(K,) each task's loss on its batch, with its slice of `params` (K, ...): the head's loss (the batch's pixel
    mean times its rows, models/varc_head.VARCHead.step), the K forwards as one under vmap. batch: the head's keys,
    each (K, B, ...). A LoopViT head must be in test-time training (`head.test_time`: no exit, no regularizer), the
    loss its fit alone has."""
    if getattr(head, "test_time", True) is False:  # LoopViT's head outside test-time training (models/loopvit_head)
        raise ValueError(
            "a batched fit is test-time training: set head.test_time = True (the pixel loss alone, no exit), as "
            "ttt.run_job does; this head's training loss adds the exit and the gate regularizers"
        )
    K, B = batch["inputs"].shape[:2]
    flat = {key: value.flatten(0, 1) for key, value in batch.items()}  # (K B, ...): placing needs no weights
    side = head.config.image_size
    placement = head.place(flat)
    pixels, mask = canvas.encode_inputs(flat["inputs"], placement, side)
    targets = canvas.encode_targets(flat["labels"], placement, side)
    ids = flat["puzzle_identifiers"].long()
    inner = head.model.inner

    def one(p: dict[str, Tensor], x: Tensor, t: Tensor, m: Tensor) -> Tensor:
        out = functional_call(inner, p, (x, t, m))
        return out.logits if isinstance(out, LoopOutput) else out  # LoopViT: its loop run through, no exit

    dtype = head.forward_dtype
    autocast = torch.autocast(pixels.device.type, dtype=dtype, enabled=dtype != torch.float32)
    with autocast, sdpa_kernel(attention_backends(pixels.device)):
        logits = vmap(one, randomness="different")(
            params, pixels.unflatten(0, (K, B)), ids.unflatten(0, (K, B)), mask.unflatten(0, (K, B))
        )  # (K, B, 12, S, S)
    if logits.dtype != torch.float64:  # as the head: a float64 model keeps its precision in the loss
        logits = logits.float()
    per_pixel = F.cross_entropy(logits.flatten(0, 1), targets, ignore_index=canvas.BACKGROUND, reduction="none")
    pixel_sum = per_pixel.unflatten(0, (K, B)).flatten(1).sum(1)  # (K,)
    count = (targets != canvas.BACKGROUND).unflatten(0, (K, B)).flatten(1).sum(1)
    return pixel_sum / count.clamp_min(1) * B


def attention_backends(device: torch.device) -> list[SDPBackend]:
    """The attention kernels the K forwards under vmap may use on `device`. On CUDA the math kernel alone: the
    memory-efficient kernel's backward fails under vmap ("LSE is not correctly aligned (strideH)", an H200 with
    torch 2.11, 2026-11-28; pytorch/pytorch PR 191085 names it a limitation of that kernel), and flash attention takes
    no mask. The same softmax attention, rounded as the math kernel rounds (a fit alone on CUDA takes the
    memory-efficient kernel; docs/varc.md). Elsewhere the kernels a fit alone may take."""
    if device.type == "cuda":
        return [SDPBackend.MATH]
    return [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.MATH]


def adamw_update(
    params: dict[str, Tensor],
    grads: dict[str, Tensor],
    exp_avg: dict[str, Tensor],
    exp_avg_sq: dict[str, Tensor],
    step_count: Tensor,
    lr: Tensor,
    active: Tensor,
    grad_clip: float,
) -> None:
    """One AdamW step of each active task, in place: its gradients clipped to `grad_clip` by its own norm
    (`task_grad_norm`), then torch's single-tensor AdamW rule with its step count and rate; an inactive task's
    weights, moments and step count are left as they are. step_count, lr: (K,) float64; active: (K,) bool."""
    with torch.no_grad():
        norm = task_grad_norm(grads)  # (K,)
        coef = torch.clamp(grad_clip / (norm + CLIP_EPS), max=1.0)
        step = step_count + active.to(step_count.dtype)
        step_count.copy_(step)
        beta1, beta2 = BETAS
        bias_correction1 = 1 - beta1**step
        bias_correction2_sqrt = (1 - beta2**step) ** 0.5
        step_size = lr / bias_correction1
        for name, p in params.items():
            shape = (-1,) + (1,) * (p.dim() - 1)
            keep = active.view(shape)
            g = grads[name] * coef.to(p.dtype).view(shape)
            m = torch.lerp(exp_avg[name], g, 1 - beta1)
            v = exp_avg_sq[name].mul(beta2).addcmul(g, g, value=1 - beta2)
            denom = (v.sqrt() / bias_correction2_sqrt.to(p.dtype).view(shape)).add(EPS)
            new = p + (-step_size).to(p.dtype).view(shape) * m / denom  # addcdiv's order: (value x m) / denom
            exp_avg[name].copy_(_masked(keep, m, exp_avg[name]))
            exp_avg_sq[name].copy_(_masked(keep, v, exp_avg_sq[name]))
            p.copy_(_masked(keep, new, p))


def task_grad_norm(grads: dict[str, Tensor]) -> Tensor:
    """(K,) each task's gradient norm over its own gradients (clip_grad_norm_'s: each tensor's norm, then theirs)."""
    norms = torch.stack([torch.linalg.vector_norm(g.flatten(1), 2, dim=1) for g in grads.values()])  # (P, K)
    return torch.linalg.vector_norm(norms, 2, dim=0)


# ------------------------------------------------------------------------------------------------------------------


@dataclass
class _Slot:
    fit: TaskFit
    steps_left: Iterator[Step]
    steps: int = 0
    seconds: float = 0.0
    started: float = field(default_factory=time.monotonic)
    last_loss: Tensor | None = None


def _next_step(slot: _Slot | None) -> Step | None:
    return None if slot is None else next(slot.steps_left, None)


def _masked(keep: Tensor, new: Tensor, old: Tensor) -> Tensor:
    """new where the task is active, else old (an inactive task's slice never changes)."""
    return torch.where(keep, new, old)


def _blank(batch: dict[str, Tensor]) -> dict[str, Tensor]:
    """A batch of blank rows shaped as `batch` (eval/infer.make_batch's padding: no input, no label, id 0)."""
    out = {key: torch.zeros_like(value) for key, value in batch.items()}
    out["labels"] = torch.full_like(batch["labels"], IGNORE_LABEL_ID)
    return out
