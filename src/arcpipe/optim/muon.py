"""Muon as in URM's ARC-AGI-2 recipe (URM: `models/muon.py`, `pretrain.py` with `use_muon=True`).

Two kinds of param groups, as upstream: `use_muon=True` (every 2-D parameter, embeddings and heads included) gets
SGD-momentum 0.95 with Nesterov, then 5 Newton-Schulz steps on the update (input rounded to bf16, iterated in fp32,
with URM's per-step coefficient schedule), decoupled decay p <- p(1 - lr*wd), and step lr * 0.2 * sqrt(max(rows,
cols)). The other parameters (q_head bias, URM's conv weight and bias) get URM's internal AdamW (betas (0.9, 0.95),
eps 1e-8 added to sqrt(v) before the bias correction, as upstream).

torch 2.13 ships `torch.optim.Muon`, but it iterates Newton-Schulz in bf16 with one fixed coefficient triple, so it
is not upstream's update; this class is.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor, nn

from arcpipe.optim.base import EagerOptimizer

# URM's quintic Newton-Schulz coefficients per iteration (the last one repeats)
NS_COEFFICIENTS = (
    (7.2086, -15.5131, 9.0178),
    (3.9623, -2.5813, 0.4542),
    (3.9466, -2.5765, 0.4544),
    (3.8991, -2.5671, 0.4566),
    (3.7186, -2.5308, 0.4653),
    (3.1390, -2.3073, 0.4733),
    (2.1715, -1.5246, 0.3885),
    (1.8648, -1.2224, 0.3577),
)


def orthogonalize(g: Tensor, steps: int) -> Tensor:
    """Approximate U V^T of g (2-D) by Newton-Schulz in fp32; the result's singular values lie around 0.5..1.5."""
    x = g.float()
    transpose = x.shape[-2] > x.shape[-1]
    if transpose:
        x = x.mT
    x = x / x.norm(dim=(-2, -1), keepdim=True).clamp_min(1e-7)
    for i in range(steps):
        a, b, c = NS_COEFFICIENTS[min(i, len(NS_COEFFICIENTS) - 1)]
        gram = x @ x.mT
        x = torch.addmm(x, torch.addmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    return x.mT if transpose else x


class Muon(EagerOptimizer):
    def __init__(
        self,
        param_groups: Iterable[dict[str, Any]],
        lr: float = 1e-4,
        weight_decay: float = 0.1,
        matched_adamw_rms: float = 0.2,
        momentum: float = 0.95,
        nesterov: bool = True,
        ns_steps: int = 5,
        adamw_betas: tuple[float, float] = (0.9, 0.95),
        adamw_eps: float = 1e-8,
    ) -> None:
        defaults = dict(
            lr=lr,
            weight_decay=weight_decay,
            matched_adamw_rms=matched_adamw_rms,
            momentum=momentum,
            nesterov=nesterov,
            ns_steps=ns_steps,
            adamw_betas=adamw_betas,
            adamw_eps=adamw_eps,
            use_muon=False,
        )
        super().__init__(list(param_groups), defaults)
        for group in self.param_groups:
            if group["use_muon"] and any(p.ndim != 2 for p in group["params"]):
                raise ValueError("Muon: a use_muon group may hold only 2-D parameters")

    @classmethod
    def for_model(
        cls, model: nn.Module, *, lr: float, weight_decay: float, betas: tuple[float, float] = (0.9, 0.95)
    ) -> Muon:
        """URM's split: 2-D parameters to Muon, the rest to the internal AdamW."""
        params = list(model.parameters())
        return cls(
            [
                {"params": [p for p in params if p.ndim == 2], "use_muon": True},
                {"params": [p for p in params if p.ndim != 2], "use_muon": False, "adamw_betas": betas},
            ],
            lr=lr,
            weight_decay=weight_decay,
        )

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> None:  # type: ignore[override]
        assert closure is None, "Muon takes no closure"
        for group in self.param_groups:
            if group["use_muon"]:
                self._muon_step(group)
            else:
                self._adamw_step(group)

    def _muon_step(self, group: dict[str, Any]) -> None:
        lr, wd, momentum = group["lr"], group["weight_decay"], group["momentum"]
        for p in group["params"]:
            if p.grad is None:
                continue
            state = self.state[p]
            if "muon_buffer" not in state:
                state["muon_buffer"] = torch.zeros_like(p.grad)
            buf = state["muon_buffer"]
            buf.mul_(momentum).add_(p.grad)
            g = p.grad.add(buf, alpha=momentum) if group["nesterov"] else buf
            update = orthogonalize(g.bfloat16(), group["ns_steps"])
            p.mul_(1 - lr * wd)
            # upstream's adjust_lr_wd_for_muon: lr * (sqrt(max(A, B)) * rms), in that order (the last bit of the
            # step differs from (lr * sqrt(max(A, B))) * rms where sqrt(max(A, B)) is not a power of two)
            p.add_(update, alpha=-(lr * (math.sqrt(max(p.shape[0], p.shape[1])) * group["matched_adamw_rms"])))

    def _adamw_step(self, group: dict[str, Any]) -> None:
        group["step"] = group.get("step", 0) + 1
        t = group["step"]
        lr, wd, eps = group["lr"], group["weight_decay"], group["adamw_eps"]
        beta1, beta2 = group["adamw_betas"]
        scale = (1 - beta1**t) / (1 - beta2**t) ** 0.5
        for p in group["params"]:
            if p.grad is None:
                continue
            state = self.state[p]
            if "adamw_exp_avg" not in state:
                state["adamw_exp_avg"] = torch.zeros_like(p.grad)
                state["adamw_exp_avg_sq"] = torch.zeros_like(p.grad)
            m, v = state["adamw_exp_avg"], state["adamw_exp_avg_sq"]
            m.lerp_(p.grad, 1 - beta1)
            v.lerp_(p.grad.square(), 1 - beta2)
            p.mul_(1 - lr * wd)
            p.add_(m / (eps + v.sqrt()), alpha=-lr / scale)
