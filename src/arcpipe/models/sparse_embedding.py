"""The sparse puzzle embedding: one row per puzzle identifier, a buffer trained by SignSGD (optim/signsgd.py).

Buffers, as upstream (TRM `CastedSparseEmbedding`), so the state dict holds only `weights`:

* `weights` (N, ndim) fp32, persistent: the table;
* `local_weights` (B, ndim) fp32 with requires_grad, non-persistent: this forward's rows, where the gradient lands;
* `local_ids` (B,) int32, non-persistent: their identifiers.

In training mode a forward copies `weights[ids]` into `local_weights` and returns it cast to the forward dtype; in
eval mode it returns `weights[ids]` cast, without a gradient. B (`batch_size`) is the number of rows per forward
call (the micro-batch on one device).

Gradient accumulation: after every backward, a hook moves (local_ids, local_weights.grad) to a pending list and
clears the grad, so k micro-batches forward+backward before one optimizer step keep every row's gradient with its
own id. `SparseSignSGD.step()` combines the pending rows (and those of all ranks), which gives exactly the update of
one batch that is the concatenation of the micro-batches.
"""

from __future__ import annotations

import functools
import sys
import weakref
from collections.abc import Callable

import torch
from torch import Tensor, nn


class SparseEmbedding(nn.Module):
    def __init__(self, num_embeddings: int, embedding_dim: int, batch_size: int, cast_to: torch.dtype) -> None:
        super().__init__()
        self.cast_to = cast_to
        self.weights = nn.Buffer(torch.zeros(num_embeddings, embedding_dim), persistent=True)  # zero init
        self.local_weights = nn.Buffer(torch.zeros(batch_size, embedding_dim, requires_grad=True), persistent=False)
        self.local_ids = nn.Buffer(torch.zeros(batch_size, dtype=torch.int32), persistent=False)
        self.pending_ids: list[Tensor] = []  # (B,) int32 per backward since the last optimizer step
        self.pending_grads: list[Tensor] = []  # (B, ndim) fp32, same order
        self.local_weights.register_post_accumulate_grad_hook(_hook_of(self))

    def forward(self, ids: Tensor) -> Tensor:
        if not self.training:
            return self.weights[ids].to(self.cast_to)
        with torch.no_grad():
            self.local_weights.copy_(self.weights[ids])
            self.local_ids.copy_(ids)
        return self.local_weights.to(self.cast_to)

    def take_pending(self) -> tuple[Tensor, Tensor] | None:
        """The (ids (n,), grads (n, ndim)) accumulated since the last call, concatenated; None when empty."""
        if not self.pending_ids:
            return None
        ids, grads = torch.cat(self.pending_ids), torch.cat(self.pending_grads)
        self.clear_pending()
        return ids, grads

    def clear_pending(self) -> None:
        self.pending_ids.clear()
        self.pending_grads.clear()
        self.local_weights.grad = None

    def _apply(self, fn, recurse=True):  # type: ignore[no-untyped-def]
        # `.to(device)` replaces the buffer with a non-leaf copy: make it a fresh leaf again, with the hook
        super()._apply(fn, recurse)
        leaf = self.local_weights.detach().requires_grad_(True)
        leaf.register_post_accumulate_grad_hook(_hook_of(self))
        self.local_weights = leaf
        return self

    def _hook(self, leaf: Tensor) -> None:
        # Kept out of torch.compile's graphs (torch.compiler.disable), as upstream. Marking it so at class definition
        # imports torch._dynamo, 1.3-1.6 s of CPU in every process that builds a model, most of which never compile
        # (CPU training, evaluation, the workflow's jobs). A process that compiles has imported dynamo before it traces
        # anything, so the disabled wrapper is made at the first call in such a process; elsewhere nothing can trace.
        if "torch._dynamo" in sys.modules:
            _out_of_graph(SparseEmbedding._collect)(self, leaf)
        else:
            self._collect(leaf)

    def _collect(self, leaf: Tensor) -> None:
        assert leaf.grad is not None
        self.pending_ids.append(self.local_ids.clone())
        self.pending_grads.append(leaf.grad.clone())
        leaf.grad = None


def _hook_of(module: SparseEmbedding) -> Callable[[Tensor], None]:
    """The gradient hook of `module`'s leaf, holding the module weakly. `module._hook` itself would make a cycle
    (module -> leaf -> its hook in torch's C++ autograd state -> module) that Python's garbage collector cannot see
    through, so a dropped model's table would never be freed: 4 GB per model at ARC-AGI-1's 2M puzzle ids, which on an
    H200 made `arcpipe doctor`'s micro-batch probes find 28 where the memory model fits about 510."""
    ref = weakref.ref(module)

    def hook(leaf: Tensor) -> None:
        alive = ref()
        if alive is not None:
            alive._hook(leaf)

    return hook


@functools.cache
def _out_of_graph(fn: Callable[..., None]) -> Callable[..., None]:
    return torch.compiler.disable(fn)
