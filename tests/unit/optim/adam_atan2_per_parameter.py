"""AdamATan2's torch backend as it was before the foreach rewrite (imported as `adam_atan2_per_parameter`).

The reference for tests/unit/optim/test_adam_atan2.py (the new path must give the same bits) and the baseline of
benchmarks/optimizer_step.py. Per parameter and step it reads the step count to the host (`float(t)`, a
device-to-host sync on GPU) and builds its scalars with `torch.tensor(..., device=p.device)` (a host-to-device
copy); the update itself is unchanged in the library. Not used by arcpipe.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor
from torch.optim import Optimizer


def atan2_update_(p: Tensor, g: Tensor, m: Tensor, v: Tensor, scalars: Tensor) -> None:
    """One AdamATan2 update in place on flat tensors; scalars = [step_size, wd_alpha, 1-b1, 1-b2, sqrt(bc2)]."""
    step_size, wd_alpha, mbeta1, mbeta2, bc2_sqrt = scalars.unbind()
    p32, g32 = p.float(), g.float()
    m32 = m.float().lerp(g32, mbeta1)
    v32 = v.float().lerp(g32 * g32, mbeta2)
    p32 = p32 * wd_alpha - step_size * torch.atan2(m32, v32.sqrt() / bc2_sqrt)
    p.copy_(p32)
    m.copy_(m32)
    v.copy_(v32)


class PerParameterAdamATan2(Optimizer):
    """The old torch backend: same state keys (`step`, `exp_avg`, `exp_avg_sq`) and arguments as AdamATan2."""

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-4,
        betas: tuple[float, float] = (0.9, 0.95),
        weight_decay: float = 0.1,
        *,
        compile: bool = False,
    ) -> None:
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay))
        self.backend = "per-parameter"
        self._update = torch.compile(atan2_update_, dynamic=True) if compile else atan2_update_

    @torch.no_grad()
    def step(self, closure: None = None) -> None:  # type: ignore[override]
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            lr, wd = float(group["lr"]), float(group["weight_decay"])
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                t = state["step"]
                t.add_(1)
                n = float(t)
                scalars = torch.tensor(
                    [lr / (1 - beta1**n), 1 - lr * wd, 1 - beta1, 1 - beta2, math.sqrt(1 - beta2**n)],
                    dtype=torch.float32,
                    device=p.device,
                )
                self._update(
                    p.view(-1), p.grad.reshape(-1), state["exp_avg"].view(-1), state["exp_avg_sq"].view(-1), scalars
                )
