"""URM, the Universal Reasoning Model (URM: `models/urm/urm.py`): one hidden state looped through shared blocks.

    no_grad:  repeat (H_cycles-1) * L_cycles times: h = blocks(h + x)
    grad:     repeat L_cycles times:                h = blocks(h + x)      # truncated backprop through loops

Blocks use ConvSwiGLU (a causal depthwise conv along tokens inside the MLP). `loops` is the ACT maximum; halting
is q_halt > 0 with exploration probability 0.1, hard-coded upstream and here.

Upstream's conv (its weight and bias, the conv, its SiLU and down_proj) is bf16 whatever the forward dtype, so an
upstream checkpoint run in fp32 on CPU still rounds there. `conv_dtype: bfloat16` (the default) does the same, so
imported checkpoints answer as upstream's code does; `forward` runs the conv in the forward dtype instead.
`conv_impl: conv1d` (the default) computes the conv with upstream's call (nn.Conv1d on the (B, inter, T) layout), so
it rounds as upstream's does on any device; `elementwise` is the faster fused form (layers.ConvSwiGLU), a choice a
run makes in its config and its checkpoint records.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from arcpipe.config.arch import URMConfig
from arcpipe.models.layers import Block, InnerCarry, RecursiveCore, init_state


class URM(RecursiveCore):
    states = ("init_hidden",)
    halt_rule = "q_halt>0"

    def __init__(self, config: URMConfig, **sizes: Any) -> None:
        super().__init__(**config.core_kwargs(), **sizes)  # sizes: see RecursiveCore
        self.config = config
        conv_dtype = torch.bfloat16 if config.conv_dtype == "bfloat16" else self.forward_dtype
        self.layers = nn.ModuleList(
            Block(**config.block_kwargs(), mlp="conv_swiglu", dtype=conv_dtype, conv_impl=config.conv_impl)
            for _ in range(config.num_layers)
        )
        self.init_hidden = init_state(config.hidden_size, self.forward_dtype)

    def recur(self, carry: InnerCarry, x: Tensor) -> tuple[InnerCarry, Tensor]:
        cos_sin = self.cos_sin()
        (h,) = carry
        with torch.no_grad():
            for _ in range((self.config.H_cycles - 1) * self.config.L_cycles):
                h = self._loop(h, x, cos_sin)
        for _ in range(self.config.L_cycles):
            h = self._loop(h, x, cos_sin)
        return (h.detach(),), h

    def _loop(self, h: Tensor, x: Tensor, cos_sin: tuple[Tensor, Tensor] | None) -> Tensor:
        h = h + x
        for layer in self.layers:
            h = layer(h, cos_sin)
        return h
