"""Weights checkpoints in arcpipe's own format: written atomically, read with a clear error, built into a model.
models/upstream_io.py imports and exports the upstream repositories' checkpoints into and out of this format.

An arcpipe weights checkpoint is one `torch.save` dict, written to a temporary file and renamed:

    {"format": "arcpipe-weights/1", "arcpipe_version", "arch", "arch_config": dict,
     "dataset": {"vocab_size", "seq_len", "num_puzzle_identifiers"}, "identifiers_sha256": str | None,
     "model": state dict with upstream's names (no `_orig_mod.`/`model.`/`inner.` prefix),
     "run_config": dict | None, "config_hash": str | None, "step": int, "epoch": int, ...}

The weights are the *evaluated* ones: EMA parameters (when EMA is on) plus the live puzzle embeddings and initial
states (optim/ema.py). Tensors keep the dtype they were trained in (fp32 parameters; H_init/L_init and URM's conv
in the forward dtype); loading casts them to the model built for the device.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

import arcpipe
from arcpipe.config import ArcpipeError
from arcpipe.models.losses import ACTLossHead
from arcpipe.models.registry import arch_config_from_dict, build_model, default_forward_dtype
from arcpipe.safeload import torch_load

log = logging.getLogger(__name__)

FORMAT = "arcpipe-weights/1"


def save_weights(
    path: str | Path,
    head: nn.Module,
    *,
    arch: str,
    arch_cfg: Any,
    dataset: Any,
    identifiers_sha256: str | None = None,
    run_config: Mapping[str, Any] | None = None,
    config_hash: str | None = None,
    step: int = 0,
    epoch: int = 0,
    **extra: Any,
) -> None:
    """Write the weights of `head` (an ACTLossHead, compiled or not) with its metadata, atomically.

    `dataset` is a mapping or an object (e.g. data.dataset.Metadata) with vocab_size, seq_len and
    num_puzzle_identifiers.
    """
    state = {k: v.detach().cpu().clone() for k, v in core_of(head).state_dict().items()}
    write_checkpoint(
        path,
        {
            "format": FORMAT,
            "arcpipe_version": arcpipe.__version__ if hasattr(arcpipe, "__version__") else None,
            "arch": arch,
            "arch_config": arch_cfg.model_dump(mode="json"),
            "dataset": dataset_sizes(dataset),
            "identifiers_sha256": identifiers_sha256,
            "model": state,
            "run_config": dict(run_config) if run_config is not None else None,
            "config_hash": config_hash,
            "step": int(step),
            "epoch": int(epoch),
            **extra,
        },
    )


def read_weights(path: str | Path) -> dict[str, Any]:
    """The checkpoint dict of an arcpipe weights file, checked for format; clear errors for bad files."""
    path = Path(path)
    ckpt = torch_load_checkpoint(path)
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        found = ckpt.get("format") if isinstance(ckpt, dict) else type(ckpt).__name__
        raise ArcpipeError(
            f"{path}: not an arcpipe weights checkpoint (format {found!r}, expected {FORMAT!r}); "
            "for an upstream checkpoint run `arcpipe model import` first"
        )
    return ckpt


def load_weights(
    path: str | Path,
    device: torch.device | str,
    *,
    forward_dtype: torch.dtype | None = None,
    batch_size: int = 1,
) -> tuple[ACTLossHead, dict[str, Any]]:
    """Build the model a checkpoint describes on `device` and load its weights; returns (head, metadata).

    The head is in eval mode. `batch_size` only sizes the training buffer of the puzzle embedding.
    """
    path = Path(path)
    return model_from_checkpoint(
        read_weights(path), device, source=path, forward_dtype=forward_dtype, batch_size=batch_size
    )


def model_from_checkpoint(
    ckpt: Mapping[str, Any],
    device: torch.device | str,
    *,
    source: str | Path,
    forward_dtype: torch.dtype | None = None,
    batch_size: int = 1,
) -> tuple[ACTLossHead, dict[str, Any]]:
    """`load_weights` for a checkpoint dict already read with `read_weights` (so a caller that needs its metadata
    first reads the file once); `source` names it in errors."""
    cfg = arch_config_from_dict(ckpt["arch_config"])
    head = build_model(cfg, **ckpt["dataset"], batch_size=batch_size, device=device, forward_dtype=forward_dtype)
    load_state(core_of(head), ckpt["model"], source=source)
    head.eval()
    return head, {k: v for k, v in ckpt.items() if k != "model"}


def load_state(core: nn.Module, state: Mapping[str, Tensor], *, source: str | Path) -> None:
    """load_state_dict with an error that names the file and the first missing/unexpected/mis-shaped keys."""
    expected = core.state_dict()
    check_keys(expected, state, source=source)
    core.load_state_dict(dict(state), strict=True)  # copies cast to each tensor's dtype (e.g. bf16 -> fp32 on CPU)


def check_keys(expected: Mapping[str, Tensor], got: Mapping[str, Tensor], *, source: str | Path) -> None:
    missing = [k for k in expected if k not in got]
    unexpected = [k for k in got if k not in expected]
    shapes = [
        f"{k} {list(got[k].shape)} != {list(v.shape)}"
        for k, v in expected.items()
        if k in got and tuple(got[k].shape) != tuple(v.shape)
    ]
    if missing or unexpected or shapes:
        parts = []
        if missing:
            parts.append(f"{len(missing)} missing (first: {', '.join(missing[:5])})")
        if unexpected:
            parts.append(f"{len(unexpected)} unexpected (first: {', '.join(unexpected[:5])})")
        if shapes:
            parts.append(f"{len(shapes)} with other shapes (first: {'; '.join(shapes[:3])})")
        raise ArcpipeError(
            f"{source}: weights do not match the model: {'; '.join(parts)}; check --arch and the config it was "
            "trained with"
        )


def check_identifiers(meta: Mapping[str, Any], dataset_sha256: str, *, source: str | Path, dataset: str | Path) -> None:
    """Refuse a dataset whose identifiers.json differs from the one the checkpoint was trained with."""
    recorded = meta.get("identifiers_sha256")
    if recorded is None:
        log.warning("%s records no identifiers.json hash; cannot check it against %s", source, dataset)
    elif recorded != dataset_sha256:
        raise ArcpipeError(
            f"{source}: trained with identifiers.json sha256 {recorded[:12]}..., but {dataset} has "
            f"{dataset_sha256[:12]}...: puzzle-embedding rows belong to identifiers; use the dataset it was trained on"
        )


def core_of(head: nn.Module) -> nn.Module:
    """The bare model (upstream's `inner`) inside an ACTLossHead, compiled or not."""
    head = getattr(head, "_orig_mod", head)
    return head.model.inner  # type: ignore[union-attr,return-value]


def dataset_sizes(dataset: Any) -> dict[str, int]:
    keys = ("vocab_size", "seq_len", "num_puzzle_identifiers")
    if isinstance(dataset, Mapping):
        return {k: int(dataset[k]) for k in keys}
    return {k: int(getattr(dataset, k)) for k in keys}


def torch_load_checkpoint(path: Path) -> Any:
    if not path.is_file():
        raise ArcpipeError(f"{path}: no such checkpoint file")
    return torch_load(path, what="checkpoint", fix="copy it again or rerun the step that wrote it")


def write_checkpoint(path: str | Path, payload: Any) -> None:
    """torch.save to a temporary file in the same directory, then rename: readers never see a partial file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        torch.save(payload, tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


__all__ = [
    "FORMAT",
    "check_identifiers",
    "check_keys",
    "core_of",
    "dataset_sizes",
    "default_forward_dtype",
    "load_state",
    "load_weights",
    "model_from_checkpoint",
    "read_weights",
    "save_weights",
    "torch_load_checkpoint",
    "write_checkpoint",
]
