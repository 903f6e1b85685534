"""The loss head (TRM: `models/losses.py`, `ACTLossHead`): one ACT step, its loss, metrics and outputs.

Normalisation as upstream: lm_loss is the per-sequence token mean of the cross entropy, **summed over rows** (every
row, halted or not); q_halt_loss (BCE of q_halt against "the whole sequence is right") and q_continue_loss (against
the bootstrapped target, HRM) are sums; total = lm_loss + 0.5 * (q_halt_loss + q_continue_loss). The trainer divides
by the global batch size. Metrics are sums over the rows that halted this step and have labels, with `count`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from arcpipe.models.act import ACT, Carry

IGNORE_LABEL_ID = -100


def stablemax_cross_entropy(logits: Tensor, labels: Tensor, valid: Tensor) -> Tensor:
    """Per-token -log stablemax(logits)[label] in float64, 0 at ignored positions; s(x) = x+1 or 1/(1-x)."""
    x = logits.to(torch.float64)
    s = torch.where(x < 0, 1 / (1 - x + 1e-30), x + 1)
    logprobs = torch.log(s / s.sum(-1, keepdim=True))
    picked = torch.gather(logprobs, -1, torch.where(valid, labels, 0).long().unsqueeze(-1)).squeeze(-1)
    return -torch.where(valid, picked, 0)


def softmax_cross_entropy(logits: Tensor, labels: Tensor, valid: Tensor) -> Tensor:
    """Per-token softmax cross entropy in fp32, 0 at ignored positions."""
    flat = F.cross_entropy(
        logits.float().view(-1, logits.shape[-1]),
        labels.long().view(-1),
        ignore_index=IGNORE_LABEL_ID,
        reduction="none",
    )
    return flat.view(labels.shape)


LOSSES = {"stablemax_cross_entropy": stablemax_cross_entropy, "softmax_cross_entropy": softmax_cross_entropy}


class ACTLossHead(nn.Module):
    """`head(carry, batch, return_keys)` -> (carry, loss, metrics, outputs, all_halted); see the module doc."""

    def __init__(self, model: ACT, loss_type: str) -> None:
        super().__init__()
        self.model = model
        self.loss_type = loss_type
        self.loss_fn = LOSSES[loss_type]

    def initial_carry(self, batch: dict[str, Tensor]) -> Carry:
        return self.model.initial_carry(batch)

    def forward(
        self, carry: Carry, batch: dict[str, Tensor], return_keys: Sequence[str] = ()
    ) -> tuple[Carry, Tensor, dict[str, Tensor], dict[str, Tensor], bool]:
        carry, loss, metrics, outputs = self.step(carry, batch, tuple(return_keys))
        return carry, loss, metrics, outputs, bool(carry.halted.all())

    def step(
        self, carry: Carry, batch: dict[str, Tensor], return_keys: tuple[str, ...] = ()
    ) -> tuple[Carry, Tensor, dict[str, Tensor], dict[str, Tensor]]:
        """The tensor part of `forward` (no host sync), for callers that compile it."""
        carry, outputs = self.model(carry, batch)
        labels = carry.current_data["labels"]
        logits = outputs["logits"]

        with torch.no_grad():
            outputs["preds"] = preds = logits.argmax(-1)
            valid = labels != IGNORE_LABEL_ID
            counts = valid.sum(-1)
            divisor = counts.clamp_min(1).unsqueeze(-1)
            correct = valid & (preds == labels)
            seq_correct = correct.sum(-1) == counts
            rows = carry.halted & (counts > 0)  # metrics only for sequences that finished this step
            metrics = {
                "count": rows.sum(),
                "accuracy": torch.where(rows, (correct.float() / divisor).sum(-1), 0).sum(),
                "exact_accuracy": (rows & seq_correct).sum(),
                "q_halt_accuracy": (rows & ((outputs["q_halt_logits"] >= 0) == seq_correct)).sum(),
                "steps": torch.where(rows, carry.steps, 0).sum(),
            }

        lm_loss = (self.loss_fn(logits, labels, valid) / divisor).sum()
        q_halt = outputs["q_halt_logits"]
        q_halt_loss = F.binary_cross_entropy_with_logits(q_halt, seq_correct.to(q_halt.dtype), reduction="sum")
        metrics["lm_loss"] = lm_loss.detach()
        metrics["q_halt_loss"] = q_halt_loss.detach()
        total = lm_loss + 0.5 * q_halt_loss
        if "target_q_continue" in outputs:
            q_continue_loss = F.binary_cross_entropy_with_logits(
                outputs["q_continue_logits"], outputs["target_q_continue"], reduction="sum"
            )
            metrics["q_continue_loss"] = q_continue_loss.detach()
            total = lm_loss + 0.5 * (q_halt_loss + q_continue_loss)
        return carry, total, metrics, {k: outputs[k].detach() for k in return_keys if k in outputs}
