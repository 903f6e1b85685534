"""AdamATan2 (PyPI `adam-atan2` 0.0.3, as upstream trains with): Adam with atan2 in place of the epsilon division.

Per parameter, step t from 1, maths in fp32 (float64 for a float64 parameter: the CUDA kernel's opmath type),
state in the parameter's dtype:

    p <- p * (1 - lr * wd)
    m <- lerp(m, g, 1 - beta1);  v <- lerp(v, g^2, 1 - beta2)
    p <- p - (lr / (1 - beta1^t)) * atan2(m, sqrt(v) / sqrt(1 - beta2^t))

There is no epsilon. `backend` is "cuda-ext" when the `adam_atan2_backend` CUDA extension imports and every
parameter is on a GPU it was built for (SM 8.0/8.6/8.9/9.0), else "torch": the same update in PyTorch over the
lists of one device and dtype at a time, with foreach ops (atan2 has none: one call per tensor), compiled on CUDA
(`compile=True` forces it on CPU). It never falls back to plain Adam.

The torch backend makes no host sync and no host-to-device copy: the step counts stay tensors on the parameters'
device, and the bias corrections are computed there from them, in float64 as the CUDA kernel and Python's `beta**t`
do, then rounded to fp32; lr, betas and weight decay enter as kernel arguments.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor

from arcpipe.optim.base import EagerOptimizer

log = logging.getLogger(__name__)

try:
    import adam_atan2_backend as _cuda_ext  # type: ignore[import-not-found]
except ImportError:
    _cuda_ext = None

_EXT_ARCHS = {(8, 0), (8, 6), (8, 9), (9, 0)}  # what adam-atan2 0.0.3's setup.py builds for


def adam_atan2_foreach_(
    params: list[Tensor],
    grads: list[Tensor],
    exp_avgs: list[Tensor],
    exp_avg_sqs: list[Tensor],
    step_size: Tensor,
    bc2_sqrt: Tensor,
    wd_alpha: Tensor,
    mbeta1: float,
    mbeta2: float,
) -> None:
    """One AdamATan2 update in place on lists of tensors of one device and dtype.

    step_size, bc2_sqrt: (N,) in the maths dtype (fp32; float64 for float64 parameters, as the kernel's opmath type),
    lr / (1 - beta1^t) and sqrt(1 - beta2^t) of each tensor's step t; wd_alpha: 0-dim, 1 - lr * wd, in that dtype.
    They come as tensors so that a compiled version is not recompiled when the schedule changes lr. mbeta1, mbeta2:
    1 - beta1, 1 - beta2. The operations are those of the per-parameter loop this replaced, in its order, so eager
    results are bitwise that loop's (tests/unit/optim/test_adam_atan2.py).
    """
    math = step_size.dtype
    native = params[0].dtype == math
    p32 = [p.to(math) for p in params]  # in the maths dtype: the tensors themselves, updated in place
    g32 = [g.to(math) for g in grads]
    m32 = [m.to(math) for m in exp_avgs]
    v32 = [v.to(math) for v in exp_avg_sqs]
    torch._foreach_mul_(p32, wd_alpha)
    torch._foreach_lerp_(m32, g32, mbeta1)
    update = torch._foreach_mul(g32, g32)  # the one temporary: g^2, then the update
    torch._foreach_lerp_(v32, update, mbeta2)
    for v, u in zip(v32, update, strict=True):
        torch.sqrt(v, out=u)  # into the g^2 buffers: on CPU, fresh ones every step cost more than the ops
    torch._foreach_div_(update, list(bc2_sqrt.unbind()))
    for m, u in zip(m32, update, strict=True):
        torch.atan2(m, u, out=u)  # torch has no foreach atan2
    torch._foreach_mul_(update, list(step_size.unbind()))
    torch._foreach_sub_(p32, update)
    if not native:
        torch._foreach_copy_(params, p32)
        torch._foreach_copy_(exp_avgs, m32)
        torch._foreach_copy_(exp_avg_sqs, v32)


def bias_corrections(
    steps: Tensor, lr: float, beta1: float, beta2: float, dtype: torch.dtype = torch.float32
) -> tuple[Tensor, Tensor]:
    """(lr / (1 - beta1^t), sqrt(1 - beta2^t)) in `dtype` (the maths dtype) for step counts t (N,), on their device,
    with no host sync.

    Computed in float64, as the CUDA kernel's pow and the per-parameter rule's Python `beta**t` are, and rounded to
    `dtype` once. torch's float64 pow and libm's may differ in the last float64 bit; the fp32 results agree (checked
    for t up to 10^6 in tests/unit/optim/test_adam_atan2.py).
    """
    t = steps.double()
    # full_like then div: `lr / tensor` is reciprocal(tensor) * lr in torch, rounded twice
    step_size = torch.full_like(t, lr).div_(1 - beta1**t)
    return step_size.to(dtype), (1 - beta2**t).sqrt_().to(dtype)


class AdamATan2(EagerOptimizer):
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
        if compile is None:
            # compiling costs tens of seconds per process on CPU, where tiny smoke models gain nothing from it
            compile = any(p.device.type == "cuda" for p in tensors)
        # torch.compile is lazy: nothing is compiled unless the torch backend runs
        self._update: Callable[..., None] = torch.compile(adam_atan2_foreach_) if compile else adam_atan2_foreach_
        log.debug("AdamATan2 backend: %s%s", self.backend, " (compiled)" if compile and self.backend == "torch" else "")

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
            grouped = EagerOptimizer._group_tensors_by_device_and_dtype([params, grads, exp_avgs, exp_avg_sqs, steps])
            for (device, _), ((ps, gs, ms, vs, ts), _) in grouped.items():
                torch._foreach_add_(ts, 1)
                if self.backend == "cuda-ext":
                    _cuda_ext.adam_atan2_cuda_impl_(ps, gs, ms, vs, ts, lr, beta1, beta2, wd)
                    continue
                # the kernel's opmath type: float64 for float64 parameters, else fp32
                math = torch.float64 if ps[0].dtype == torch.float64 else torch.float32
                step_size, bc2_sqrt = bias_corrections(torch.stack(ts), lr, beta1, beta2, math)
                wd_alpha = torch.full((), 1 - lr * wd, dtype=math, device=device)
                self._update(ps, gs, ms, vs, step_size, bc2_sqrt, wd_alpha, 1 - beta1, 1 - beta2)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        # torch leaves a loaded `step` where the file was mapped (the CPU for map_location="cpu"); the update and
        # the CUDA kernel read it on the parameter's device
        for p, state in self.state.items():
            if "step" in state:
                state["step"] = state["step"].to(device=p.device, dtype=torch.float32)


def _ext_supports(device: torch.device) -> bool:
    return _cuda_ext is not None and device.type == "cuda" and torch.cuda.get_device_capability(device) in _EXT_ARCHS
