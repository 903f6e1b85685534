"""Architectures by name, their published presets, and `build_model`, the one way to construct a model.

    head = build_model(make_arch_config("trm", "arc", {}), vocab_size=12, seq_len=900,
                       num_puzzle_identifiers=876406, batch_size=768, device="cuda")

Presets use upstream's field names and values (docs/reference/upstream-recursive.md 3 and 11.2): `arc` is each
architecture's published ARC-AGI setting (TRM: L_layers=2 H_cycles=3 L_cycles=4; URM: loops=16 H_cycles=2 L_cycles=6
num_layers=4; HRM and the transformer baseline: their yaml defaults), `default` is the upstream yaml where it
differs, and `tiny` (1 cycle, 2 ACT steps, hidden 64) is for CPU smoke runs. ARC-AGI-2 uses the same
architectures; URM's ARC-AGI-2 recipe differs only in the optimizer (the run's `optimizer: muon`).
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch import nn

from arcpipe.config.arch import (  # noqa: F401  (re-exported: the registry is where callers look)
    CONFIGS,
    PRESETS,
    VARC_ARCHS,
    ArchConfig,
    HRMConfig,
    TransformerConfig,
    TRMConfig,
    URMConfig,
    arch_config_from_dict,
    make_arch_config,
)
from arcpipe.models.act import ACT
from arcpipe.models.hrm import HRM
from arcpipe.models.layers import RecursiveCore
from arcpipe.models.loopvit_head import build_loopvit
from arcpipe.models.losses import ACTLossHead
from arcpipe.models.transformer import Transformer
from arcpipe.models.trm import TRM
from arcpipe.models.urm import URM
from arcpipe.models.varc_head import build_varc

log = logging.getLogger(__name__)

MODELS: dict[str, type[RecursiveCore]] = {"hrm": HRM, "trm": TRM, "urm": URM, "transformer": Transformer}


def default_forward_dtype(device: torch.device | str) -> torch.dtype:
    """bf16 on CUDA (as upstream), fp32 on CPU."""
    return torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32


def build_model(
    arch_cfg: Any,
    *,
    vocab_size: int,
    seq_len: int,
    num_puzzle_identifiers: int,
    batch_size: int,
    device: torch.device | str,
    forward_dtype: torch.dtype | None = None,
) -> ACTLossHead:
    """ACTLossHead(ACT(model)) on `device`; `batch_size` is the rows per forward call on one device.

    State-dict keys are `model.inner.<upstream name>`, as upstream's uncompiled layout. To compile, call
    `head.compile()` (nn.Module.compile keeps the keys) or compile `head.step`.
    """
    dtype = forward_dtype or default_forward_dtype(device)
    if arch_cfg.name in VARC_ARCHS:  # one forward pass on a canvas: its own head with the loss head's interface
        with torch.device(device):
            build = build_loopvit if arch_cfg.name == "loopvit" else build_varc
            return build(  # type: ignore[return-value]
                arch_cfg,
                vocab_size=vocab_size,
                seq_len=seq_len,
                num_puzzle_identifiers=num_puzzle_identifiers,
                forward_dtype=dtype,
            )
    with torch.device(device):
        core = MODELS[arch_cfg.name](
            arch_cfg,
            vocab_size=vocab_size,
            seq_len=seq_len,
            num_puzzle_identifiers=num_puzzle_identifiers,
            batch_size=batch_size,
            forward_dtype=dtype,
        )
    return ACTLossHead(ACT(core), arch_cfg.loss_type)


def count_parameters(module: nn.Module) -> int:
    """Trainable parameters (upstream's `num_params`): the puzzle-embedding table is a buffer, not counted."""
    return sum(p.numel() for p in module.parameters())


def preset_parameter_count(arch: str, preset: str, vocab_size: int = 12, seq_len: int = 900) -> int:
    """Parameters of a preset, built on the meta device (no memory, no init cost)."""
    cfg = make_arch_config(arch, preset, {})
    head = build_model(
        cfg,
        vocab_size=vocab_size,
        seq_len=seq_len,
        num_puzzle_identifiers=1,
        batch_size=1,
        device="meta",
        forward_dtype=torch.bfloat16,
    )
    return count_parameters(head)
