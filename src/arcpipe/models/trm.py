"""TRM, the Tiny Recursive Model (TRM: `models/recursive_reasoning/trm.py`): one small network does both updates.

In the paper's terms y = z_H (the answer), z = z_L (the latent), T = `H_cycles`, n = `L_cycles`:

    no_grad:  repeat H_cycles-1 times: { repeat L_cycles: z_L = net(z_L, z_H + x);  z_H = net(z_H, z_L) }
    grad:     repeat L_cycles: z_L = net(z_L, z_H + x);  z_H = net(z_H, z_L)

so the last cycle is back-propagated in full. Outputs come from z_H; the 16-position puzzle prefix
(`puzzle_emb_len`) holds the puzzle embedding in position 0 and zeros after it, which act as scratch tokens.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from arcpipe.config.arch import TRMConfig
from arcpipe.models.layers import InnerCarry, RecursiveCore, init_state, make_blocks


class TRM(RecursiveCore):
    states = ("H_init", "L_init")

    def __init__(self, config: TRMConfig, **sizes: Any) -> None:
        super().__init__(**config.core_kwargs(), **sizes)  # sizes: see RecursiveCore
        self.config = config
        self.halt_rule = "q_halt>0" if config.no_ACT_continue else "q_halt>q_continue"
        self.bootstrap_q = not config.no_ACT_continue
        mlp_t_len = self.seq_len + config.prefix_len if config.mlp_t else None
        self.L_level = make_blocks(config.L_layers, **config.block_kwargs(), mlp_t_len=mlp_t_len)
        self.H_init = init_state(config.hidden_size, self.forward_dtype)
        self.L_init = init_state(config.hidden_size, self.forward_dtype)

    def recur(self, carry: InnerCarry, x: Tensor) -> tuple[InnerCarry, Tensor]:
        cos_sin = self.cos_sin()
        z_H, z_L = carry
        with torch.no_grad():
            for _ in range(self.config.H_cycles - 1):
                for _ in range(self.config.L_cycles):
                    z_L = self.L_level(z_L, z_H + x, cos_sin)
                z_H = self.L_level(z_H, z_L, cos_sin)
        for _ in range(self.config.L_cycles):
            z_L = self.L_level(z_L, z_H + x, cos_sin)
        z_H = self.L_level(z_H, z_L, cos_sin)
        return (z_H.detach(), z_L.detach()), z_H
