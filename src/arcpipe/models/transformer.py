"""The plain transformer baseline under the same ACT wrapper (TRM: `transformers_baseline.py`, `Model_ACTV2`).

Each ACT step applies `H_level` (H_layers blocks) once, with gradient: z_H = H_level(z_H, x). It halts on
q_halt > q_continue; as upstream's trainer never asks for a Q-continue target, q_continue is never trained.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from arcpipe.config.arch import TransformerConfig
from arcpipe.models.layers import InnerCarry, RecursiveCore, init_state, make_blocks


class Transformer(RecursiveCore):
    halt_rule = "q_halt>q_continue"

    def __init__(self, config: TransformerConfig, **sizes: Any) -> None:
        super().__init__(**config.core_kwargs(), **sizes)  # sizes: see RecursiveCore
        self.config = config
        if not config.act_enabled:
            self.halt_rule = "none"
        self.H_level = make_blocks(config.H_layers, **config.block_kwargs())
        self.H_init = init_state(config.hidden_size, self.forward_dtype)

    def recur(self, carry: InnerCarry, x: Tensor) -> tuple[InnerCarry, Tensor]:
        z_H = self.H_level(carry[0], x, self.cos_sin())
        return (z_H.detach(),), z_H
