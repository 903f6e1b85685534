"""Helpers for the model tests: small batches and tiny models on CPU (imported as `modelkit`)."""

from __future__ import annotations

import torch

from arcpipe.models.registry import build_model, make_arch_config

VOCAB, SEQ_LEN, NUM_IDS = 12, 900, 10
ARCHS = ["trm", "hrm", "urm", "transformer"]


def make_batch(batch_size: int, seed: int = 0, seq_len: int = SEQ_LEN) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, VOCAB, (batch_size, seq_len), generator=g, dtype=torch.int32)
    labels[:, seq_len // 2 :] = -100  # ignored padding, as the loader writes it
    return {
        "inputs": torch.randint(0, VOCAB, (batch_size, seq_len), generator=g, dtype=torch.int32),
        "labels": labels,
        "puzzle_identifiers": torch.randint(1, NUM_IDS, (batch_size,), generator=g, dtype=torch.int32),
    }


def preset_head(
    arch: str, preset: str, batch_size: int = 2, seed: int = 0, seq_len: int = SEQ_LEN, **overrides: object
):
    torch.manual_seed(seed)
    cfg = make_arch_config(arch, preset, overrides)
    return build_model(
        cfg, vocab_size=VOCAB, seq_len=seq_len, num_puzzle_identifiers=NUM_IDS, batch_size=batch_size, device="cpu"
    )


def tiny_head(arch: str, batch_size: int = 2, seed: int = 0, seq_len: int = SEQ_LEN, **overrides: object):
    return preset_head(arch, "tiny", batch_size, seed, seq_len, **overrides)
