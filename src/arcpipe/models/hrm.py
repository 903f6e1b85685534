"""HRM ACT v1, the Hierarchical Reasoning Model (HRM: `models/hrm/hrm_act_v1.py`): a slow H and a fast L module.

    no_grad:  for h in 0..H_cycles-1:
                  for l in 0..L_cycles-1: unless (h, l) is the last pair: z_L = L_level(z_L, z_H + x)
                  unless h is the last: z_H = H_level(z_H, z_L)
    grad:     z_L = L_level(z_L, z_H + x);  z_H = H_level(z_H, z_L)          # the "1-step gradient"

Halting is q_halt > q_continue, and q_continue learns a bootstrapped target from one more no-grad step (act.py).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from arcpipe.config.arch import HRMConfig
from arcpipe.models.layers import InnerCarry, RecursiveCore, init_state, make_blocks


class HRM(RecursiveCore):
    states = ("H_init", "L_init")
    halt_rule = "q_halt>q_continue"
    bootstrap_q = True

    def __init__(self, config: HRMConfig, **sizes: Any) -> None:
        super().__init__(**config.core_kwargs(), **sizes)  # sizes: see RecursiveCore
        self.config = config
        self.H_level = make_blocks(config.H_layers, **config.block_kwargs())
        self.L_level = make_blocks(config.L_layers, **config.block_kwargs())
        self.H_init = init_state(config.hidden_size, self.forward_dtype)
        self.L_init = init_state(config.hidden_size, self.forward_dtype)

    def recur(self, carry: InnerCarry, x: Tensor) -> tuple[InnerCarry, Tensor]:
        cos_sin = self.cos_sin()
        H, L = self.config.H_cycles, self.config.L_cycles
        z_H, z_L = carry
        with torch.no_grad():
            for h in range(H):
                for l in range(L):
                    if not (h == H - 1 and l == L - 1):
                        z_L = self.L_level(z_L, z_H + x, cos_sin)
                if h != H - 1:
                    z_H = self.H_level(z_H, z_L, cos_sin)
        z_L = self.L_level(z_L, z_H + x, cos_sin)
        z_H = self.H_level(z_H, z_L, cos_sin)
        return (z_H.detach(), z_L.detach()), z_H
