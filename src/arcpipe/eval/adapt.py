"""Fit a checkpoint to tasks it has never seen (`arcpipe predict --adapt MINUTES [--adapt-mode MODE]`).

A checkpoint's puzzle-embedding table has one row per identifier of the dataset it was trained with; a new task has
no row, so the model cannot be asked about it. Adaptation gives it rows and fits them, and in some modes more:

1. The new tasks become a small dataset, built like a training dataset in `fast` mode (the same augmentation
   semantics: dihedral transforms x colour permutations, translated train examples), with as many views per task
   as the checkpoint's own tasks have. Only the challenges go in: the solutions never reach adaptation.
2. The table grows by one row per new view, each started from the mean of the trained rows (row 0, the blank
   identifier, is left out of the mean). The trained rows are copied unchanged, and never move: a batch holds only
   new rows, and the sparse optimizer touches only the rows of its batch.
3. The model trains on the new tasks' demonstrations (the train split of step 1) with the training loss, one
   optimizer step per ACT step and the carry kept across batches as in training, until the time budget (or a step
   budget) is spent. Batches are drawn uniformly from the demonstration rows with a seeded generator. What trains
   is the mode's:

   * `rows` (default): only the new rows; every network weight frozen.
   * `rows+full`: the new rows alone for the first ROWS_SHARE (half) of the budget, then every weight and the rows.
     The rows go first so that they leave the mean before the network moves: a network trained from the start
     can fit the few demonstrations through its weights, with every new row still near the same mean vector, and
     carry nothing task-specific in the rows.
   * `full`: every network weight and the new rows from the first step.
   * `lora`: low-rank adapters on every linear projection of the reasoning blocks (attention `qkv_proj`/`o_proj`,
     or TRM's token MLP `mlp_t`, and the MLP `gate_up_proj`/`down_proj`) plus the new rows; the network frozen.
     Each projection computes W x + (alpha/r) B A x with A (r, in) Kaiming-uniform and B (out, r) zero, so the
     adapted model starts equal to the original (r LORA_RANK, alpha LORA_ALPHA). Afterwards the adapters are
     merged into W (W + (alpha/r) B A) and the original modules put back, so prediction runs the plain model.
     Not peft: its LoRA targets torch's own layer types (nn.Linear, ...), while these models' projections are
     `layers.CastedLinear` (an fp32 weight cast to the input's dtype), and peft requires transformers, accelerate,
     huggingface_hub and safetensors, a heavy tree for a bundle that must install offline on Kaggle; the rule
     above is the dozen lines of `_LoRALinear`.

   Optimizers: the run's own, from `optim.make_optimizers` with the hyperparameters saved in the checkpoint's run
   config (RunConfig's defaults where a key is missing): sparse SignSGD for the rows (`puzzle_emb_lr`,
   `puzzle_emb_weight_decay`), the run's dense optimizer (AdamATan2 or Muon: `lr`, `weight_decay`, `beta1`,
   `beta2`) for the network or the adapters, eager (a compile costs tens of seconds, much of a minutes-long
   budget). The rates are constant, at the run's peak values: a few hundred steps are too few for a schedule, and
   the default schedule (lr_min_ratio 1) holds the peak rate after warmup anyway; the dense optimizer starts with
   fresh moments, whose first steps AdamATan2 bounds (atan2), so no warmup is added. The loss is divided by the
   global batch before backward, as in training (irrelevant to SignSGD and to AdamATan2's scale-free update).

The budget is honoured as training honours its deadline (train/loop.py): a margin of 10% (at most 5 minutes) is
kept back, the last step starts before the budget less the margin, and no step starts that the longest step so
far would carry past the budget; a phase's share ends its phase the same way, so the phase switch is on time too
(a phase's first step is expected to take twice the longest step before it). `AdaptStats.seconds` is the time from
the start of fitting to the end of the last step. Only the very first step has no estimate: a budget whose margin is
shorter than one step can be overrun by that step, as a training deadline can; and a step that runs longer than the
longest before it (a busy machine) can end past the budget by up to how much longer it ran, less the time that was
left.

Under torchrun every rank draws the same batch and trains on its slice of it; SparseSignSGD combines the rows of
all ranks, the dense gradients are summed over ranks before each step (`distributed.all_reduce_grads`, as the
trainer does), so every rank ends with the same weights, and rank 0's clock decides when to stop.
"""

from __future__ import annotations

import json
import logging
import math
import tempfile
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from arcpipe.config import ArcpipeError, DatasetConfig, RunConfig
from arcpipe.data.arc import Pair, Subset, Task
from arcpipe.data.build import plan_dataset, write_dataset
from arcpipe.data.dataset import example_puzzle_ids, load_split
from arcpipe.eval.infer import make_batch
from arcpipe.eval.puzzles import parse_identifiers
from arcpipe.models.io import core_of
from arcpipe.models.layers import Block, CastedLinear
from arcpipe.optim import make_optimizers
from arcpipe.optim.signsgd import SparseSignSGD
from arcpipe.optim.update import apply_update
from arcpipe.train import distributed
from arcpipe.train.sampler import halt_min_steps

log = logging.getLogger(__name__)

STAT_KEYS = ("lm_loss", "count", "accuracy", "exact_accuracy")  # the loss head's metrics kept per step

EMBEDDING_KEY = "puzzle_emb.weights"  # the table's key in a checkpoint's state dict (SparseEmbedding.weights)

MODES = ("rows", "rows+full", "full", "lora")
ROWS_SHARE = 0.5  # rows+full: the rows phase's share of the budget (time and steps); the rest trains everything
LORA_RANK = 8
LORA_ALPHA = 16.0
# each mode's phases: (what trains, the phase's share of the budget)
PHASES: dict[str, tuple[tuple[str, float], ...]] = {
    "rows": (("rows", 1.0),),
    "rows+full": (("rows", ROWS_SHARE), ("full", 1.0 - ROWS_SHARE)),
    "full": (("full", 1.0),),
    "lora": (("lora", 1.0),),
}


@dataclass(frozen=True)
class Demonstrations:
    """The new tasks' views and their demonstration rows, numbered after the checkpoint's identifiers."""

    names: list[str]  # (M,) identifiers of the new views, appended after the checkpoint's N identifiers
    inputs: np.ndarray  # (R, seq_len) uint8 tokens
    labels: np.ndarray  # (R, seq_len) uint8 tokens (PAD 0 is ignored by the loss)
    example_ids: np.ndarray  # (R,) int64 puzzle id of each row, in N..N+M-1


@dataclass(frozen=True)
class Phase:
    """One phase of an adaptation: what trained (`rows`, `full` or `lora`), for how many steps and seconds."""

    name: str
    steps: int
    seconds: float


@dataclass(frozen=True)
class Hyperparameters:
    """The run's optimizer settings, from the run config saved in the checkpoint (RunConfig's defaults if absent)."""

    lr: float
    weight_decay: float
    betas: tuple[float, float]
    optimizer: str
    puzzle_emb_lr: float
    puzzle_emb_weight_decay: float

    @classmethod
    def of_run(cls, run: Mapping[str, Any]) -> Hyperparameters:
        def get(key: str) -> Any:
            return run[key] if run.get(key) is not None else RunConfig.model_fields[key].default

        return cls(
            lr=float(get("lr")),
            weight_decay=float(get("weight_decay")),
            betas=(float(get("beta1")), float(get("beta2"))),
            optimizer=str(get("optimizer")),
            puzzle_emb_lr=float(get("puzzle_emb_lr")),
            puzzle_emb_weight_decay=float(get("puzzle_emb_weight_decay")),
        )


@dataclass(frozen=True)
class AdaptStats:
    mode: str
    phases: tuple[Phase, ...]
    steps: int
    seconds: float  # from the start of fitting to the end of its last step; budget_seconds at most (module doc)
    budget_seconds: float
    new_rows: int
    demonstrations: int
    first_loss: float  # mean lm_loss per row (token mean of a sequence) over the first 10% of steps
    last_loss: float  # ... and over the last 10%
    last_accuracy: float  # token accuracy of the sequences that finished in the last 10% of steps
    last_exact: float  # exact accuracy of the same

    def describe(self) -> str:
        phases = " + ".join(f"{p.name} {p.steps} steps {p.seconds:.1f} s" for p in self.phases)
        return (
            f"adapt mode {self.mode} on {self.new_rows} new rows, {self.demonstrations} demonstrations: {phases} "
            f"(budget {self.budget_seconds:.0f} s); loss {self.first_loss:.3f} -> {self.last_loss:.3f}, token "
            f"accuracy {100 * self.last_accuracy:.1f}%, exact {100 * self.last_exact:.1f}% (last 10% of steps)"
        )


def views_per_task(identifiers: list[str]) -> int:
    """The most views (original included) any task of a checkpoint's identifiers has; 1 when there are none."""
    names, _, _ = parse_identifiers(identifiers[1:])
    counts = Counter(names)
    return max(counts.values(), default=1)


def demonstrations(tasks: dict[str, Task], first_id: int, num_aug: int, seed: int) -> Demonstrations:
    """Views and demonstration rows of `tasks` (test outputs dropped), built as a `fast` dataset would build them."""
    unsolved = {name: _without_test_outputs(task) for name, task in tasks.items()}
    subset = Subset("adapt", unsolved, {"kind": "challenges"})
    # an internal build of tasks already parsed: there is no source to describe
    cfg = DatasetConfig.model_construct(sources=[], test_set="adapt", num_aug=num_aug, seed=seed, mode="fast")
    plan = plan_dataset(cfg, [subset])
    with tempfile.TemporaryDirectory(prefix="arcpipe-adapt-") as tmp:
        write_dataset(plan, Path(tmp))
        split = load_split(Path(tmp), "train")
        ids = example_puzzle_ids(split)
        inputs, labels = np.array(split.inputs), np.array(split.labels)  # copies: the folder goes away
    names = json.loads(plan.identifiers_json)[1:]  # [0] is the blank identifier
    return Demonstrations(names, inputs, labels, ids - 1 + first_id)


def extend_checkpoint(ckpt: Mapping[str, Any], new_rows: int, *, source: str | Path) -> dict[str, Any]:
    """A copy of a checkpoint dict (models.io.read_weights) with `new_rows` more puzzle identifiers: the table
    grown by extend_table and the identifier count to match, ready for models.io.model_from_checkpoint."""
    dataset = dict(ckpt["dataset"], num_puzzle_identifiers=ckpt["dataset"]["num_puzzle_identifiers"] + new_rows)
    return dict(ckpt, model=extend_table(ckpt["model"], new_rows, source=source), dataset=dataset)


def extend_table(state: Mapping[str, torch.Tensor], new_rows: int, *, source: str | Path) -> dict[str, torch.Tensor]:
    """A copy of a checkpoint's state dict whose puzzle-embedding table has `new_rows` more rows, each the mean of
    the trained rows (the blank row 0 excluded)."""
    if EMBEDDING_KEY not in state:
        raise ArcpipeError(
            f"{source}: the model has no puzzle embedding (puzzle_emb_ndim 0), so there is nothing to adapt; "
            "predict without --adapt"
        )
    table = state[EMBEDDING_KEY]  # (N, ndim)
    mean = table[1:].float().mean(0, keepdim=True) if table.shape[0] > 1 else torch.zeros_like(table[:1]).float()
    return {**state, EMBEDDING_KEY: torch.cat([table, mean.to(table.dtype).expand(new_rows, -1)])}


def fit(
    head: nn.Module,
    demos: Demonstrations,
    *,
    mode: str = "rows",
    hyper: Hyperparameters,
    batch_size: int,
    minutes: float,
    max_steps: int | None = None,
    seed: int = 0,
    env: Any,
) -> AdaptStats:
    """Adapt `head` (its table already extended) to `demos` in `mode` for `minutes` or `max_steps` steps; the
    head is left in its mode, with every parameter trainable again and, for `lora`, the adapters merged."""
    assert mode in PHASES, mode
    params = list(head.parameters())
    was_training = head.training
    head.train()
    generator = np.random.default_rng([seed, 0xADA97])
    torch.manual_seed(seed)  # the adapters' init draws from torch's generator
    local = batch_size // env.world_size
    act = head.model
    exploration = float(act.inner.halt_exploration_prob)
    rows_total = len(demos.example_ids)
    history: list[list[float]] = []  # per step: loss sum, count, accuracy sum, exact sum
    phases: list[Phase] = []
    carry = None
    budget = minutes * 60
    margin = min(5 * 60.0, 0.1 * budget)  # as train/loop.py keeps back from its deadline
    started = time.monotonic()
    longest = 0.0  # the longest step so far: no step starts that it would carry past the budget
    adapters: list[_LoRALinear] = []
    share_done = 0.0
    try:
        for p_index, (name, share) in enumerate(PHASES[mode]):
            share_done += share
            last_phase = p_index == len(PHASES[mode]) - 1
            phase_end = started + (budget - margin) * (1.0 if last_phase else share_done)
            phase_steps = None if max_steps is None else (max_steps if last_phase else round(share_done * max_steps))
            optimizers, reduce = _phase(head, name, hyper, adapters)
            phase_start, first_step = time.monotonic(), len(history)
            phase_longest = 0.0
            while phase_steps is None or len(history) < phase_steps:
                now = time.monotonic()
                # a phase's first step may cost more than the last phase's (more gradients, fresh moments): twice
                expected = phase_longest if len(history) > first_step else 2 * longest
                if _stop(now >= phase_end or now + expected > started + budget, env):
                    break
                rows = generator.integers(0, rows_total, size=batch_size)[env.rank * local : (env.rank + 1) * local]
                batch = make_batch(demos.inputs, demos.labels, demos.example_ids, rows, local, env.device)
                # halting exploration from the step and each row's place in the global batch, as the trainer draws
                # it: from each rank's torch generator, ranks would repeat each other's draws and the adapted rows
                # would depend on the number of processes
                positions = np.arange(env.rank * local, (env.rank + 1) * local)
                explore = halt_min_steps(seed, len(history) + 1, positions, exploration, act.max_steps)
                batch["halt_min_steps"] = torch.from_numpy(explore).to(env.device)
                if carry is None:
                    carry = head.initial_carry(batch)
                carry, loss, metrics, _ = head.step(carry, batch)
                (loss / batch_size).backward()
                if reduce is not None:
                    distributed.all_reduce_grads(reduce, env)
                apply_update([(optimizer, None) for optimizer in optimizers])  # constant rates, no clip
                history.append(torch.stack([metrics[k].double() for k in STAT_KEYS]).tolist())  # one host sync
                took = time.monotonic() - now
                phase_longest, longest = max(phase_longest, took), max(longest, took)
            phases.append(Phase(name, len(history) - first_step, time.monotonic() - phase_start))
        seconds = time.monotonic() - started
    finally:
        _merge(head, adapters)
        for p in params:
            p.requires_grad_(True)
            p.grad = None
        head.train(was_training)
        core_of(head).puzzle_emb.clear_pending()
    return _stats(mode, tuple(phases), history, seconds, budget, len(demos.names), rows_total, local)


def fit_rows(
    head: nn.Module,
    demos: Demonstrations,
    *,
    batch_size: int,
    lr: float,
    weight_decay: float,
    minutes: float,
    max_steps: int | None = None,
    seed: int = 0,
    env: Any,
) -> AdaptStats:
    """Mode `rows` with SignSGD's rate and decay given: only the new rows train, every weight frozen."""
    hyper = Hyperparameters.of_run({"puzzle_emb_lr": lr, "puzzle_emb_weight_decay": weight_decay})
    return fit(
        head, demos, mode="rows", hyper=hyper, batch_size=batch_size, minutes=minutes, max_steps=max_steps,
        seed=seed, env=env,
    )  # fmt: skip


def add_lora(head: nn.Module, rank: int = LORA_RANK, alpha: float = LORA_ALPHA) -> list[_LoRALinear]:
    """Wrap every CastedLinear inside the reasoning blocks of `head` in a LoRA adapter (B = 0: the model is
    unchanged); returns the wrappers, in module order."""
    wrapped = []
    for block in [m for m in head.modules() if isinstance(m, Block)]:
        for parent in list(block.modules()):
            for child_name, child in list(parent.named_children()):
                if isinstance(child, CastedLinear):
                    wrapper = _LoRALinear(child, rank, alpha)
                    setattr(parent, child_name, wrapper)
                    wrapped.append(wrapper)
    if not wrapped:
        raise ArcpipeError("--adapt-mode lora: the model has no linear projection in a reasoning block to adapt")
    return wrapped


class _LoRALinear(nn.Module):
    """W x + (alpha/r) B A x around a CastedLinear; A (r, in) Kaiming-uniform, B (out, r) zero."""

    def __init__(self, base: CastedLinear, rank: int, alpha: float) -> None:
        super().__init__()
        out_features, in_features = base.weight.shape
        self.base = base
        self.scale = alpha / rank
        self.lora_A = nn.Parameter(torch.empty(rank, in_features, device=base.weight.device))
        self.lora_B = nn.Parameter(torch.zeros(out_features, rank, device=base.weight.device))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))  # nn.Linear's (and peft's) init

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        low = F.linear(F.linear(x, self.lora_A.to(x.dtype)), self.lora_B.to(x.dtype))  # (..., out)
        return self.base(x) + self.scale * low

    @torch.no_grad()
    def merged(self) -> CastedLinear:
        self.base.weight.add_(self.scale * (self.lora_B @ self.lora_A))
        return self.base


def _phase(
    head: nn.Module, name: str, hyper: Hyperparameters, adapters: list[_LoRALinear]
) -> tuple[list[torch.optim.Optimizer], nn.Module | None]:
    # the phase's optimizers (make_optimizers: the trainer's), and the module whose gradients ranks sum, if any
    core = core_of(head)
    if name == "rows":
        for p in head.parameters():
            p.requires_grad_(False)
        rows = SparseSignSGD(core.puzzle_emb, lr=hyper.puzzle_emb_lr, weight_decay=hyper.puzzle_emb_weight_decay)
        return [rows], None  # SparseSignSGD combines the ranks' rows itself
    if name == "lora":
        for p in head.parameters():
            p.requires_grad_(False)
        adapters.extend(add_lora(head))
        reduce: nn.Module = nn.ModuleList([nn.ParameterList([a.lora_A, a.lora_B]) for a in adapters])
    else:
        for p in head.parameters():
            p.requires_grad_(True)
        reduce = head
    optimizers = make_optimizers(
        head,
        lr=hyper.lr,
        puzzle_emb_lr=hyper.puzzle_emb_lr,
        weight_decay=hyper.weight_decay,
        puzzle_emb_weight_decay=hyper.puzzle_emb_weight_decay,
        betas=hyper.betas,
        optimizer=hyper.optimizer,  # type: ignore[arg-type]
        compile=False,
    )
    # frozen parameters get no gradient, and both dense optimizers skip a parameter without one
    return [optimizer for optimizer, _ in optimizers], reduce


def _merge(head: nn.Module, adapters: list[_LoRALinear]) -> None:
    # put each adapted CastedLinear back, W + (alpha/r) B A, so that the head is the plain model again
    if not adapters:
        return
    for parent in list(head.modules()):
        for child_name, child in list(parent.named_children()):
            if isinstance(child, _LoRALinear):
                setattr(parent, child_name, child.merged())


def _stats(
    mode: str,
    phases: tuple[Phase, ...],
    history: list[list[float]],
    seconds: float,
    budget: float,
    new: int,
    demos: int,
    batch: int,
) -> AdaptStats:
    common = dict(mode=mode, phases=phases, seconds=seconds, budget_seconds=budget, new_rows=new, demonstrations=demos)
    if not history:
        nan = float("nan")
        return AdaptStats(steps=0, first_loss=nan, last_loss=nan, last_accuracy=nan, last_exact=nan, **common)
    values = np.asarray(history, dtype=np.float64)
    tenth = max(len(values) // 10, 1)
    first, last = values[:tenth].sum(0), values[-tenth:].sum(0)
    # lm_loss sums over all rows of every step; the accuracies over the rows that finished (count)
    return AdaptStats(
        steps=len(values),
        first_loss=first[0] / (tenth * batch),
        last_loss=last[0] / (tenth * batch),
        last_accuracy=last[2] / max(last[1], 1.0),
        last_exact=last[3] / max(last[1], 1.0),
        **common,
    )


def _stop(out_of_time: bool, env: Any) -> bool:
    # rank 0's clock decides for every rank: the optimizer steps are collectives
    if env.world_size == 1:
        return out_of_time
    flag = torch.tensor([float(out_of_time)], device=env.device)
    dist.broadcast(flag, src=0)
    return bool(flag.item())


def _without_test_outputs(task: Task) -> Task:
    return replace(task, test=tuple(Pair(p.input, None) for p in task.test))
