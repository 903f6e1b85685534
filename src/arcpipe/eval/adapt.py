"""Fit puzzle-embedding rows for tasks a checkpoint has never seen (`arcpipe predict --adapt MINUTES`).

A checkpoint's puzzle-embedding table has one row per identifier of the dataset it was trained with; a new task has
no row, so the model cannot be asked about it. Adaptation gives it rows and fits only those:

1. The new tasks become a small dataset, built like a training dataset in `fast` mode (the same augmentation
   semantics: dihedral transforms x colour permutations, translated train examples), with as many views per task
   as the checkpoint's own tasks have. Only the challenges go in: the solutions never reach adaptation.
2. The table grows by one row per new view, each started from the mean of the trained rows (row 0, the blank
   identifier, is left out of the mean). The trained rows are copied unchanged.
3. Every network weight is frozen. The new rows are trained on the new tasks' demonstrations (the train split of
   step 1) with the training loss, one optimizer step per ACT step and the carry kept across batches as in
   training, by the run's own sparse SignSGD (`puzzle_emb_lr`, `puzzle_emb_weight_decay`, constant rate), until the
   time budget (or a step budget) is spent. Batches are drawn uniformly from the demonstration rows with a seeded
   generator.

Under torchrun every rank draws the same batch and trains on its slice of it; SparseSignSGD combines the rows of
all ranks, so every rank ends with the same table, and rank 0's clock decides when to stop.
"""

from __future__ import annotations

import json
import logging
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

from arcpipe.config import ArcpipeError, DatasetConfig
from arcpipe.data.arc import Pair, Subset, Task
from arcpipe.data.build import plan_dataset, write_dataset
from arcpipe.data.dataset import load_split
from arcpipe.eval.vote import parse_identifiers
from arcpipe.models.io import core_of
from arcpipe.optim.signsgd import SparseSignSGD

log = logging.getLogger(__name__)

STAT_KEYS = ("lm_loss", "count", "accuracy", "exact_accuracy")  # the loss head's metrics kept per step

EMBEDDING_KEY = "puzzle_emb.weights"  # the table's key in a checkpoint's state dict (SparseEmbedding.weights)


@dataclass(frozen=True)
class Demonstrations:
    """The new tasks' views and their demonstration rows, numbered after the checkpoint's identifiers."""

    names: list[str]  # (M,) identifiers of the new views, appended after the checkpoint's N identifiers
    inputs: np.ndarray  # (R, seq_len) uint8 tokens
    labels: np.ndarray  # (R, seq_len) uint8 tokens (PAD 0 is ignored by the loss)
    example_ids: np.ndarray  # (R,) int64 puzzle id of each row, in N..N+M-1


@dataclass(frozen=True)
class AdaptStats:
    steps: int
    seconds: float
    new_rows: int
    demonstrations: int
    first_loss: float  # mean lm_loss per row (token mean of a sequence) over the first 10% of steps
    last_loss: float  # ... and over the last 10%
    last_accuracy: float  # token accuracy of the sequences that finished in the last 10% of steps
    last_exact: float  # exact accuracy of the same


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
        ids = np.repeat(split.puzzle_identifiers, np.diff(split.puzzle_indices)).astype(np.int64)
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


def fit_rows(
    head: torch.nn.Module,
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
    """Train only the puzzle-embedding rows of `demos` (all weights frozen) for `minutes` or `max_steps` steps."""
    from arcpipe.eval.predict import _batch  # predict imports this module

    embedding = core_of(head).puzzle_emb
    optimizer = SparseSignSGD(embedding, lr=lr, weight_decay=weight_decay)
    frozen = [p for p in head.parameters() if p.requires_grad]
    for p in frozen:
        p.requires_grad_(False)
    was_training = head.training
    head.train()
    generator = np.random.default_rng([seed, 0xADA97])
    torch.manual_seed(seed)  # halting exploration draws from torch's generator
    local = batch_size // env.world_size
    rows_total = len(demos.example_ids)
    history: list[list[float]] = []  # per step: loss sum, count, accuracy sum, exact sum
    carry = None
    started = time.monotonic()
    budget = minutes * 60
    step = 0
    try:
        while max_steps is None or step < max_steps:
            if _stop(time.monotonic() - started >= budget, env):
                break
            rows = generator.integers(0, rows_total, size=batch_size)[env.rank * local : (env.rank + 1) * local]
            batch = _batch(demos.inputs, demos.labels, demos.example_ids, rows, local, env.device)
            if carry is None:
                carry = head.initial_carry(batch)
            carry, loss, metrics, _ = head.step(carry, batch)
            loss.backward()  # SignSGD: the scale of the loss does not matter
            optimizer.step()
            optimizer.zero_grad()
            history.append(torch.stack([metrics[k].double() for k in STAT_KEYS]).tolist())  # one host sync
            step += 1
    finally:
        for p in frozen:
            p.requires_grad_(True)
        head.train(was_training)
        embedding.clear_pending()
    return _stats(history, time.monotonic() - started, len(demos.names), rows_total, local)


def _stats(history: list[list[float]], seconds: float, new: int, demos: int, batch: int) -> AdaptStats:
    if not history:
        return AdaptStats(0, seconds, new, demos, float("nan"), float("nan"), float("nan"), float("nan"))
    values = np.asarray(history, dtype=np.float64)
    tenth = max(len(values) // 10, 1)
    first, last = values[:tenth].sum(0), values[-tenth:].sum(0)
    # lm_loss sums over all rows of every step; the accuracies over the rows that finished (count)
    return AdaptStats(
        steps=len(values),
        seconds=seconds,
        new_rows=new,
        demonstrations=demos,
        first_loss=first[0] / (tenth * batch),
        last_loss=last[0] / (tenth * batch),
        last_accuracy=last[2] / max(last[1], 1.0),
        last_exact=last[3] / max(last[1], 1.0),
    )


def _stop(out_of_time: bool, env: Any) -> bool:
    # rank 0's clock decides for every rank: SparseSignSGD.step is a collective
    if env.world_size == 1:
        return out_of_time
    flag = torch.tensor([float(out_of_time)], device=env.device)
    dist.broadcast(flag, src=0)
    return bool(flag.item())


def _without_test_outputs(task: Task) -> Task:
    return replace(task, test=tuple(Pair(p.input, None) for p in task.test))
