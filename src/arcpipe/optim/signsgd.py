"""Sparse SignSGD for the puzzle embedding (TRM: `CastedSparseEmbeddingSignSGD_Distributed`).

At `step()`: take the (ids, gradient rows) the embedding collected since the last step (every micro-batch), gather
those of all ranks when torch.distributed is initialised, sum the gradient per distinct id, and for those rows only:

    w <- w * (1 - lr * wd) - lr * sign(g)

Only rows present in the global batch change, decay included. Because only the sign counts, the loss scale does
not matter, and k micro-batches on r ranks give exactly the update of one batch that concatenates them all.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import Tensor

from arcpipe.models.sparse_embedding import SparseEmbedding
from arcpipe.optim.base import EagerOptimizer


class SparseSignSGD(EagerOptimizer):
    def __init__(self, embedding: SparseEmbedding, lr: float = 1e-2, weight_decay: float = 0.1) -> None:
        if lr < 0 or weight_decay < 0:
            raise ValueError(f"SparseSignSGD: invalid lr={lr} or weight_decay={weight_decay}")
        self.embedding = embedding
        super().__init__([embedding.weights], dict(lr=lr, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> None:  # type: ignore[override]
        assert closure is None, "SparseSignSGD takes no closure"
        pending = self.embedding.take_pending()
        distributed = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
        if pending is None and not distributed:
            return  # nothing in the batch touched the embedding (TRM skips the same way)
        weights = self.embedding.weights
        if pending is None:
            pending = (
                torch.empty(0, dtype=torch.int32, device=weights.device),
                torch.empty(0, weights.shape[1], device=weights.device),
            )
        ids, grads = pending
        if distributed:
            ids, grads = _all_gather(ids), _all_gather(grads)
        if ids.numel() == 0:
            return
        group = self.param_groups[0]
        sparse_sign_update_(weights, ids, grads, lr=float(group["lr"]), weight_decay=float(group["weight_decay"]))

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.embedding.clear_pending()


def sparse_sign_update_(weights: Tensor, ids: Tensor, grads: Tensor, *, lr: float, weight_decay: float) -> None:
    """Sum `grads` (n, D) per distinct id of `ids` (n,), then SignSGD with decoupled decay on those rows of weights.

    Every shape is n, whatever the ids, so nothing waits on the host (`unique` would: its size depends on the
    values, a device-to-host copy on CUDA). A stable sort puts equal ids side by side; each run of equal ids is a
    group (numbered by a cumulative sum of "differs from the previous"), and index_add_ sums each group's rows in
    their original order, as `unique` + scatter_add_ did: the same sums, bit for bit, on CPU. Each position then
    writes its row's new value; the positions of one id write the same value, so the row is decayed once.
    """
    n = ids.shape[0]
    sorted_ids, order = torch.sort(ids, stable=True)
    starts = torch.ones(n, dtype=torch.bool, device=ids.device)
    starts[1:] = sorted_ids[1:] != sorted_ids[:-1]
    group = torch.cumsum(starts, 0) - 1  # (n,): 0 .. distinct-1, in sorted order
    summed = torch.zeros(n, grads.shape[1], dtype=grads.dtype, device=grads.device)
    summed.index_add_(0, group, grads[order])
    rows = sorted_ids.long()
    new = weights[rows].mul_(1.0 - lr * weight_decay).add_(torch.sign(summed[group]), alpha=-lr)
    weights.index_put_((rows,), new)


def _all_gather(t: Tensor) -> Tensor:
    # ranks may hold different numbers of rows (a rank with no pending rows sends none): gather sizes first
    world = dist.get_world_size()
    size = torch.tensor([t.shape[0]], dtype=torch.int64, device=t.device)
    sizes = [torch.zeros_like(size) for _ in range(world)]
    dist.all_gather(sizes, size)
    longest = int(max(s.item() for s in sizes))
    padded = torch.zeros((longest, *t.shape[1:]), dtype=t.dtype, device=t.device)
    padded[: t.shape[0]] = t
    parts = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(parts, padded)
    return torch.cat([part[: int(n.item())] for part, n in zip(parts, sizes, strict=True)])
