"""AdamATan2, sparse SignSGD for puzzle embeddings, Muon and EMA, and `make_optimizers` in upstream's order."""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn
from torch.optim import Optimizer

from arcpipe.optim.adam_atan2 import AdamATan2
from arcpipe.optim.ema import EMA
from arcpipe.optim.muon import Muon
from arcpipe.optim.signsgd import SparseSignSGD

__all__ = ["EMA", "AdamATan2", "Muon", "SparseSignSGD", "make_optimizers"]


def make_optimizers(
    head: nn.Module,
    *,
    lr: float,
    puzzle_emb_lr: float,
    weight_decay: float,
    puzzle_emb_weight_decay: float,
    betas: tuple[float, float] = (0.9, 0.95),
    optimizer: Literal["adam_atan2", "muon", "adamw"] = "adam_atan2",
    compile: bool | None = None,
) -> list[tuple[Optimizer, float]]:
    """[(SparseSignSGD, puzzle_emb_lr) if the model has a puzzle embedding, (AdamATan2, Muon or AdamW, lr)].

    Upstream's order and grouping (section 4.2): the sparse embedding first, then every trainable parameter
    (embeddings, heads and biases included) with the same weight decay. The schedule sets each group's lr.
    `compile=False` skips compiling AdamATan2's PyTorch update (about 10 s on CPU; the update is then ~3x slower,
    benchmarks/optimizer_step.py).
    """
    core = head.model.inner  # type: ignore[union-attr]
    out: list[tuple[Optimizer, float]] = []
    if hasattr(core, "puzzle_emb"):
        out.append(
            (SparseSignSGD(core.puzzle_emb, lr=puzzle_emb_lr, weight_decay=puzzle_emb_weight_decay), puzzle_emb_lr)
        )
    if optimizer == "adam_atan2":
        dense: Optimizer = AdamATan2(head.parameters(), lr=lr, betas=betas, weight_decay=weight_decay, compile=compile)
    elif optimizer == "adamw":  # VARC's: torch.optim.AdamW over every parameter, its task tokens included
        dense = torch.optim.AdamW(head.parameters(), lr=lr, betas=betas, weight_decay=weight_decay)
    elif optimizer == "muon":
        dense = Muon.for_model(head, lr=lr, weight_decay=weight_decay, betas=betas)
    else:
        raise ValueError(f"unknown optimizer {optimizer!r}; choose adam_atan2, muon or adamw")
    out.append((dense, lr))
    return out
