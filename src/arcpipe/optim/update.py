"""The update that ends every step of every fit: training (train/loop.py), adaptation to unseen tasks (eval/adapt.py)
and test-time training (eval/ttt.py) each compute their loss and gradients their own way, then call `apply_update`.
(A batched test-time-training job, eval/batched.py, updates K tasks' stacked weights in one vmapped AdamW instead:
the same rule per task, tested against this one task at a time.)"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
from torch.optim import Optimizer


def apply_update(
    optimizers: Sequence[tuple[Optimizer, float | None]],
    clip: Iterable[torch.Tensor] = (),
    grad_clip: float | None = None,
) -> None:
    """Upstream's order: the gradients of `clip`'s parameters clipped to a total norm of `grad_clip` (None: not
    clipped, and `clip`, which may be a generator, is not read; the norm stays on the device, no host sync), then
    per optimizer its groups' rate set (None: kept as they are), its step, and its gradients cleared."""
    if grad_clip is not None:
        torch.nn.utils.clip_grad_norm_(list(clip), grad_clip)
    for optimizer, lr in optimizers:
        if lr is not None:
            for group in optimizer.param_groups:
                group["lr"] = lr
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
