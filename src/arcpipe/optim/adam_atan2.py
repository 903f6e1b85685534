"""AdamATan2 (PyPI `adam-atan2` 0.0.3, as upstream trains with): Adam with atan2 in place of the epsilon division.

Per parameter, step t from 1, maths in fp32, state in the parameter's dtype:

    p <- p * (1 - lr * wd)
    m <- lerp(m, g, 1 - beta1);  v <- lerp(v, g^2, 1 - beta2)
    p <- p - (lr / (1 - beta1^t)) * atan2(m, sqrt(v) / sqrt(1 - beta2^t))

There is no epsilon. `backend` is "cuda-ext" when the `adam_atan2_backend` CUDA extension imports and every
parameter is on a GPU it was built for (SM 8.0/8.6/8.9/9.0), else "torch": the same update in PyTorch, compiled on
CUDA (torch has no foreach atan2; `compile=True` forces it on CPU). It never falls back to plain Adam.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor
from torch.optim import Optimizer

log = logging.getLogger(__name__)

try:
    import adam_atan2_backend as _cuda_ext  # type: ignore[import-not-found]
except ImportError:
    _cuda_ext = None

_EXT_ARCHS = {(8, 0), (8, 6), (8, 9), (9, 0)}  # what adam-atan2 0.0.3's setup.py builds for


def atan2_update_(p: Tensor, g: Tensor, m: Tensor, v: Tensor, scalars: Tensor) -> None:
    """One AdamATan2 update in place on flat tensors; scalars = [step_size, wd_alpha, 1-b1, 1-b2, sqrt(bc2)].

    Scalars come as a tensor so that a compiled version is not recompiled when the schedule changes lr.
    """
    step_size, wd_alpha, mbeta1, mbeta2, bc2_sqrt = scalars.unbind()
    p32, g32 = p.float(), g.float()
    m32 = m.float().lerp(g32, mbeta1)
    v32 = v.float().lerp(g32 * g32, mbeta2)
    p32 = p32 * wd_alpha - step_size * torch.atan2(m32, v32.sqrt() / bc2_sqrt)
    p.copy_(p32)
    m.copy_(m32)
    v.copy_(v32)


class AdamATan2(Optimizer):
    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-4,
        betas: tuple[float, float] = (0.9, 0.95),
        weight_decay: float = 0.1,
        *,
        compile: bool | None = None,
    ) -> None:
        if lr < 0 or weight_decay < 0 or not all(0 <= b < 1 for b in betas):
            raise ValueError(f"AdamATan2: invalid lr={lr}, betas={betas} or weight_decay={weight_decay}")
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay))
        tensors = [p for group in self.param_groups for p in group["params"]]
        self.backend = "cuda-ext" if tensors and all(_ext_supports(p.device) for p in tensors) else "torch"
        self._update: Callable[..., None] = atan2_update_
        if compile is None:
            # compiling costs tens of seconds per process on CPU, where tiny smoke models gain nothing from it
            compile = any(p.device.type == "cuda" for p in tensors)
        if self.backend == "torch" and compile:
            self._update = torch.compile(atan2_update_, dynamic=True)
        log.debug("AdamATan2 backend: %s", self.backend)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> None:  # type: ignore[override]
        assert closure is None, "AdamATan2 takes no closure"
        for group in self.param_groups:
            params, grads, exp_avgs, exp_avg_sqs, steps = [], [], [], [], []
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                params.append(p)
                grads.append(p.grad)
                exp_avgs.append(state["exp_avg"])
                exp_avg_sqs.append(state["exp_avg_sq"])
                steps.append(state["step"])
            if not params:
                continue
            beta1, beta2 = group["betas"]
            lr, wd = float(group["lr"]), float(group["weight_decay"])
            if self.backend == "cuda-ext":
                torch._foreach_add_(steps, 1)
                _cuda_ext.adam_atan2_cuda_impl_(params, grads, exp_avgs, exp_avg_sqs, steps, lr, beta1, beta2, wd)
                continue
            for p, g, m, v, t in zip(params, grads, exp_avgs, exp_avg_sqs, steps, strict=True):
                t.add_(1)
                n = float(t)
                scalars = torch.tensor(
                    [lr / (1 - beta1**n), 1 - lr * wd, 1 - beta1, 1 - beta2, math.sqrt(1 - beta2**n)],
                    dtype=torch.float32,
                    device=p.device,
                )
                self._update(p.view(-1), g.reshape(-1), m.view(-1), v.view(-1), scalars)


def _ext_supports(device: torch.device) -> bool:
    return _cuda_ext is not None and device.type == "cuda" and torch.cuda.get_device_capability(device) in _EXT_ARCHS
