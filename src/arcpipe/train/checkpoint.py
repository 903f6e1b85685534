"""Training state files: boundary states, the side checkpoint inside a segment, atomic writes and clear errors.

A boundary writes two files (both declared Snakemake outputs): `ckpt/epoch_{E}.pt`, the evaluated weights
(written by `arcpipe.models.io.save_weights`), and `state/epoch_{E}.pt`, everything else needed to continue
exactly: live weights, optimizer states, EMA shadow, the ACT carry of every micro-batch slot, step, pass position,
RNG state (the CPU's, and the GPU's when training on one) and cumulative wall time. Both carry the resolved
config, its hash, the dataset's identifiers hash and the arcpipe version. The side checkpoint `resume/side.pt` has
the same content plus the position inside a pass; it is not a declared output, so Snakemake never deletes it, and
a retried job continues from it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from arcpipe.config import ArcpipeError, RunConfig, training_changes
from arcpipe.safeload import check_plain, torch_load

STATE_FORMAT = "arcpipe-state/1"


def save_atomic(obj: Any, path: Path) -> None:
    """torch.save to a temporary file beside `path`, fsync, then rename: a kill never leaves half a file.

    `obj` must hold only tensors and plain values, which `load_state` reads back without unpickling objects."""
    check_plain(obj)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def load_state(path: Path) -> dict[str, Any]:
    """Load a state file with `weights_only=True`; a truncated or foreign file, or one that holds Python objects
    beyond tensors and plain values, is an ArcpipeError naming it.

    Every state arcpipe has written (format arcpipe-state/1) holds only tensors (weights, optimizer and EMA
    states, ACT carries, the torch generators' ByteTensor states) and plain values (position, config, hashes).
    Training draws no randomness from numpy's generators and none from Python's but under `sampler: upstream`,
    whose `random.Random` states are tuples of ints (train/upstream_order.py): old states load as they are.
    """
    if not path.is_file():
        raise ArcpipeError(f"{path}: missing training state; re-run the previous segment")
    state = torch_load(path, what="training state", fix="delete it and re-run the segment that wrote it")
    if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
        raise ArcpipeError(f"{path}: not an arcpipe training state (format {STATE_FORMAT} expected)")
    return state


def rng_state(device: torch.device) -> dict[str, Any]:
    """The generators a state file restores: the CPU's (`torch_rng`) and, on a GPU, that GPU's (`cuda_rng`).

    Rank 0's: every rank seeds the same and draws the same, so they are equal on every rank.
    """
    return {
        "torch_rng": torch.get_rng_state(),
        "cuda_rng": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
    }


def restore_rng(state: Mapping[str, Any], device: torch.device) -> None:
    """Set the generators `rng_state` saved; a state without `cuda_rng` (written on CPU, or before arcpipe saved
    it) leaves the GPU's as seeded."""
    torch.set_rng_state(state["torch_rng"])
    if device.type == "cuda" and state.get("cuda_rng") is not None:
        torch.cuda.set_rng_state(state["cuda_rng"], device)


def check_compatible(state: dict[str, Any], path: Path, run: RunConfig, identifiers_sha256: str) -> None:
    """Refuse to continue from a state made with another model/optimizer/data config, listing the fields."""
    problems = training_changes(state["run_config"], run.model_dump(mode="json"))
    if state["identifiers_sha256"] != identifiers_sha256:
        problems.append("the dataset's identifiers.json differs (puzzle-embedding rows would be misassigned)")
    if problems:
        raise ArcpipeError(
            f"{path}: cannot resume, the config changed since it was written ({'; '.join(problems)}); "
            "start the run afresh (delete results/runs/<run>) or restore the old config"
        )
