"""The base class of arcpipe's optimizers: torch.optim.Optimizer, less the import of torch._dynamo it triggers.

torch wraps four of Optimizer's bookkeeping methods (`add_param_group`, `zero_grad`, `state_dict`,
`load_state_dict`) in `torch._disable_dynamo`, which imports torch._dynamo at the first call, so that a compiled
function calling them does not trace into them. The import costs 1.3-1.6 s of CPU in every process that builds an
optimizer: every CPU training process and every preflight, where nothing is compiled, pays it for a guard it never
needs. arcpipe never calls these methods inside a compiled function (what it compiles is the model's step and, on
CUDA, AdamATan2's update math), so its optimizers call the undecorated methods, which compute the same thing. A
torch that no longer wraps one (no `__wrapped__`) keeps its own method. A process that compiles imports dynamo
anyway, through torch.compile.
"""

from __future__ import annotations

from typing import Any

from torch.optim import Optimizer


def _unguarded(name: str) -> Any:
    method = getattr(Optimizer, name)
    return getattr(method, "__wrapped__", method)


class EagerOptimizer(Optimizer):
    """torch.optim.Optimizer whose bookkeeping methods are torch's own without the dynamo guard (module doc)."""

    add_param_group = _unguarded("add_param_group")
    zero_grad = _unguarded("zero_grad")
    state_dict = _unguarded("state_dict")
    load_state_dict = _unguarded("load_state_dict")
