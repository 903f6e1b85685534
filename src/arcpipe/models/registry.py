"""Architectures by name, their published presets, and `build_model`, the one way to construct a model.

    head = build_model(make_arch_config("trm", "arc", {}), vocab_size=12, seq_len=900,
                       num_puzzle_identifiers=876406, batch_size=768, device="cuda")

Presets use upstream's field names and values (upstream.md sections 3 and 6): `arc` is each architecture's
published ARC-AGI setting (TRM: L_layers=2 H_cycles=3 L_cycles=4; URM: loops=16 H_cycles=2 L_cycles=6
num_layers=4; HRM and the transformer baseline: their yaml defaults), `default` is the upstream yaml where it
differs, and `tiny` (1 cycle, 2 ACT steps, hidden 64) is for CPU smoke runs. ARC-AGI-2 uses the same
architectures; URM's ARC-AGI-2 recipe differs only in the optimizer (the run's `optimizer: muon`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Annotated, Any

import torch
from pydantic import Field, TypeAdapter, ValidationError
from torch import nn

from arcpipe.models.act import ACT
from arcpipe.models.hrm import HRM, HRMConfig
from arcpipe.models.layers import RecursiveCore
from arcpipe.models.losses import ACTLossHead
from arcpipe.models.transformer import Transformer, TransformerConfig
from arcpipe.models.trm import TRM, TRMConfig
from arcpipe.models.urm import URM, URMConfig

log = logging.getLogger(__name__)

MODELS: dict[str, type[RecursiveCore]] = {"hrm": HRM, "trm": TRM, "urm": URM, "transformer": Transformer}
CONFIGS: dict[str, type] = {
    "hrm": HRMConfig,
    "trm": TRMConfig,
    "urm": URMConfig,
    "transformer": TransformerConfig,
}

ArchConfig = Annotated[HRMConfig | TRMConfig | URMConfig | TransformerConfig, Field(discriminator="name")]
_ADAPTER: TypeAdapter[Any] = TypeAdapter(ArchConfig)

_D512 = dict(hidden_size=512, num_heads=8, expansion=4, pos_encodings="rope")
_ACT16 = dict(halt_max_steps=16, halt_exploration_prob=0.1)
_TINY = dict(hidden_size=64, num_heads=4, expansion=2, pos_encodings="rope")

PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    "trm": {
        "arc": {
            **_D512,
            **_ACT16,
            "H_cycles": 3,
            "L_cycles": 4,
            "H_layers": 0,
            "L_layers": 2,
            "puzzle_emb_len": 16,
        },
        "default": {**_D512, **_ACT16, "H_cycles": 3, "L_cycles": 6, "H_layers": 0, "L_layers": 2},
        "tiny": {
            **_TINY,
            "H_cycles": 1,
            "L_cycles": 1,
            "L_layers": 1,
            "halt_max_steps": 2,
            "halt_exploration_prob": 0.1,
            "puzzle_emb_len": 1,
        },
    },
    "hrm": {
        "arc": {**_D512, **_ACT16, "H_cycles": 2, "L_cycles": 2, "H_layers": 4, "L_layers": 4},
        "tiny": {
            **_TINY,
            "H_cycles": 1,
            "L_cycles": 1,
            "H_layers": 1,
            "L_layers": 1,
            "halt_max_steps": 2,
            "halt_exploration_prob": 0.1,
        },
    },
    "urm": {
        "arc": {**_D512, "loops": 16, "H_cycles": 2, "L_cycles": 6, "num_layers": 4},
        "default": {**_D512, "loops": 16, "H_cycles": 4, "L_cycles": 3, "num_layers": 8},
        "tiny": {**_TINY, "loops": 2, "H_cycles": 1, "L_cycles": 1, "num_layers": 1},
    },
    "transformer": {
        "arc": {**_D512, **_ACT16, "num_heads": 12, "H_layers": 8},
        "tiny": {**_TINY, "H_layers": 2, "halt_max_steps": 2, "halt_exploration_prob": 0.1},
    },
}


def make_arch_config(arch: str, preset: str, overrides: Mapping[str, Any]) -> Any:
    """The validated, frozen config of `arch` from `preset` plus `overrides` (upstream field names).

    Raises ValueError naming the bad arch, preset or field, with the valid choices.
    """
    if arch not in PRESETS:
        raise ValueError(f"unknown arch {arch!r}; choose one of {', '.join(MODELS)}")
    if preset not in PRESETS[arch]:
        raise ValueError(f"unknown preset {preset!r} for arch {arch}; choose one of {', '.join(PRESETS[arch])}")
    fields = set(CONFIGS[arch].model_fields) - {"name"}
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise ValueError(
            f"unknown field(s) {', '.join(unknown)} for arch {arch}; valid fields: {', '.join(sorted(fields))}"
        )
    try:
        return _ADAPTER.validate_python({**PRESETS[arch][preset], **overrides, "name": arch})
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'][1:]) or arch}: {e['msg'].removeprefix('Value error, ')}"
            for e in err.errors()
        )
        raise ValueError(f"{arch}/{preset}: {problems}") from None


def arch_config_from_dict(data: Mapping[str, Any]) -> Any:
    """A config saved with `model_dump()` (it carries its `name`) back to the typed model."""
    return _ADAPTER.validate_python(dict(data))


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
