"""Host synchronisations made by a step: the one recorder that the graph tests, the batched test-time training test
and benchmarks/graphs.py use.

A compiled step that reads a tensor on the host (or makes a tensor whose size depends on its values) waits for the
GPU there and splits the graph. `HostSyncGuard().active()` records every such op run under it, and the arcpipe file
that called it:
* `.item()`, `bool(t)`, `int(t)`, `float(t)` dispatch `aten._local_scalar_dense`;
* `nonzero`, `unique` and `masked_select` have data-dependent sizes, and an index with a bool mask calls nonzero
  inside its kernel (seen as aten.index / index_put with a bool index);
* `.tolist()` and `.numpy()` dispatch nothing: they are patched on `torch.Tensor` while the guard is active.
"""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

SYNC_OPS = frozenset(
    {"_local_scalar_dense", "nonzero", "_unique2", "unique_dim", "unique_consecutive", "masked_select"}
)
_PATCHED = ("tolist", "numpy")


class HostSyncGuard(TorchDispatchMode):
    """Records the ops that need a tensor's value on the host, as (op, arcpipe file that called it), in `seen`."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, str]] = []

    def _record(self, name: str) -> None:
        files = [f.filename for f in traceback.extract_stack() if "/arcpipe/" in f.filename]
        self.seen.append((name, files[-1].rsplit("/", 1)[-1] if files else "?"))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        name = func.overloadpacket.__name__
        if name in SYNC_OPS:
            self._record(f"aten.{name}")
        elif name in ("index", "index_put", "index_put_") and any(
            isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in (args[1] or ())
        ):
            self._record(f"aten.{name} with a bool mask")
        return func(*args, **(kwargs or {}))

    @contextlib.contextmanager
    def active(self) -> Iterator[HostSyncGuard]:
        """Record while inside: the dispatch mode, and `.tolist()` / `.numpy()` patched to record, then restored."""
        originals: dict[str, Any] = {name: getattr(torch.Tensor, name) for name in _PATCHED}

        def recording(name: str):  # type: ignore[no-untyped-def]
            def wrapper(t, *a, **k):  # type: ignore[no-untyped-def]
                self._record(f"Tensor.{name}")
                return originals[name](t, *a, **k)

            return wrapper

        try:
            for name in _PATCHED:
                setattr(torch.Tensor, name, recording(name))
            with self:
                yield self
        finally:
            for name, original in originals.items():
                setattr(torch.Tensor, name, original)

    def named(self) -> list[str]:
        """`seen` as 'op@file' strings, for a message or a table."""
        return [f"{op}@{where}" for op, where in self.seen]
