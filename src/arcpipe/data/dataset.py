"""Reading a built dataset (upstream on-disk format): the one way the trainer and evaluator open one.

Works on datasets built by arcpipe and by the upstream TRM, HRM or URM builders: unknown metadata keys are
ignored and `total_puzzles` (absent in HRM- and URM-built `dataset.json`) is recomputed from the arrays.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict

from arcpipe.config import ArcpipeError

SPLITS = ("train", "test")
FIELDS = ("inputs", "labels", "puzzle_identifiers", "puzzle_indices", "group_indices")


class Metadata(BaseModel):
    """upstream's PuzzleDatasetMetadata; extra keys are ignored so every upstream variant loads."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    pad_id: int
    ignore_label_id: int | None
    blank_identifier_id: int
    vocab_size: int
    seq_len: int
    num_puzzle_identifiers: int
    total_groups: int
    mean_puzzle_examples: float
    total_puzzles: int | None = None
    sets: list[str]


@dataclass(frozen=True)
class Split:
    metadata: Metadata
    inputs: np.ndarray  # (N_ex, seq_len) uint8, memory-mapped
    labels: np.ndarray  # (N_ex, seq_len) uint8, memory-mapped
    puzzle_identifiers: np.ndarray  # (N_puz,) int32
    puzzle_indices: np.ndarray  # (N_puz + 1,) int32 CSR offsets into examples
    group_indices: np.ndarray  # (N_grp + 1,) int32 CSR offsets into puzzles


def load_split(dataset_dir: str | Path, split: str, mmap: bool = True) -> Split:
    """One split of a dataset; inputs and labels are memory-mapped read-only (pages load on demand)."""
    folder = Path(dataset_dir) / split
    meta_path = folder / "dataset.json"
    try:
        raw = json.loads(meta_path.read_text())
    except FileNotFoundError:
        raise ArcpipeError(f"{meta_path}: missing; is {dataset_dir} a built dataset?") from None
    except json.JSONDecodeError as err:
        raise ArcpipeError(f"{meta_path}: not valid JSON ({err.msg} at line {err.lineno})") from None
    arrays = {}
    for field in FIELDS:
        path = folder / f"all__{field}.npy"
        try:
            arrays[field] = np.load(
                path, mmap_mode="r" if mmap and field in ("inputs", "labels") else None, allow_pickle=False
            )
        except (OSError, ValueError) as err:
            raise ArcpipeError(f"{path}: unreadable array ({err}); rebuild the dataset") from None
    if raw.get("total_puzzles") is None:
        raw["total_puzzles"] = len(arrays["puzzle_identifiers"])
    return Split(metadata=Metadata.model_validate(raw), **arrays)


def example_puzzle_ids(split: Split) -> np.ndarray:
    """(N_ex,) int64: the puzzle identifier of every example of the split."""
    return np.repeat(split.puzzle_identifiers, np.diff(split.puzzle_indices)).astype(np.int64)


def load_identifiers(dataset_dir: str | Path) -> list[str]:
    return json.loads((Path(dataset_dir) / "identifiers.json").read_text())


def identifiers_sha256(dataset_dir: str | Path) -> str:
    """sha256 of identifiers.json: puzzle-embedding rows belong to it, so checkpoints record and check it."""
    path = Path(dataset_dir) / "identifiers.json"
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
    except FileNotFoundError:
        raise ArcpipeError(f"{path}: missing; is {dataset_dir} a built dataset?") from None
    return digest.hexdigest()
