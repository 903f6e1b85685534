"""EMA of the trainable parameters, as upstream (TRM: `models/ema.py`).

shadow <- (1 - rate) * param + rate * shadow after every training batch, starting from the parameters at
creation. Only `named_parameters()` are tracked: the puzzle-embedding table (a buffer) and H_init/L_init (buffers)
are **not** averaged. The evaluated and exported weights are therefore the EMA parameters plus the *live* puzzle
embeddings and initial states (`ema_copy`, `copy_to`). An imported upstream TRM checkpoint already is such a copy.
"""

from __future__ import annotations

import copy

import torch
from torch import Tensor, nn


class EMA:
    def __init__(self, model: nn.Module, rate: float = 0.999) -> None:
        if not 0 < rate < 1:
            raise ValueError(f"EMA rate must be in (0, 1), got {rate}")
        self.rate = rate
        self.shadow: dict[str, Tensor] = {
            _name(n): p.detach().clone() for n, p in model.named_parameters() if p.requires_grad
        }
        self._model = model

    @torch.no_grad()
    def update(self, model: nn.Module | None = None) -> None:
        for name, p in (model or self._model).named_parameters():
            if p.requires_grad:
                self.shadow[_name(name)] = (1.0 - self.rate) * p.detach() + self.rate * self.shadow[_name(name)]

    @torch.no_grad()
    def copy_to(self, model: nn.Module) -> None:
        """Overwrite the parameters of `model` with the averages; buffers stay as they are."""
        for name, p in model.named_parameters():
            if _name(name) in self.shadow:
                p.copy_(self.shadow[_name(name)])

    def ema_copy(self, model: nn.Module | None = None) -> nn.Module:
        """A deep copy with the EMA parameters and the live buffers: the weights to evaluate and save."""
        clone = copy.deepcopy(model or self._model)
        self.copy_to(clone)
        return clone

    def state_dict(self) -> dict[str, Tensor]:
        return dict(self.shadow)

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        missing, unexpected = set(self.shadow) - set(state), set(state) - set(self.shadow)
        if missing or unexpected:
            raise ValueError(
                f"EMA state does not match the model: missing {sorted(missing)[:5]}, "
                f"unexpected {sorted(unexpected)[:5]}"
            )
        self.shadow = {k: state[k].to(self.shadow[k].device, self.shadow[k].dtype).clone() for k in self.shadow}


def _name(name: str) -> str:
    return name.replace("_orig_mod.", "")  # torch.compile(module) prefixes names; the averages do not depend on it
