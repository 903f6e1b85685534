"""Checkpoint ensembles (`evaluation.ensemble_last: K`): a run's last K checkpoints with their weights averaged
(their votes pooled: pool.py).

    average_checkpoints(["results/runs/R/ckpt/epoch_8.pt", ".../epoch_10.pt"], "results/runs/R/ckpt/avg_last2.pt")

The averaged checkpoint is an ordinary weights checkpoint (models/io.py), evaluated like an epoch checkpoint. Every
floating tensor of the model state dict is averaged in float64 and cast back to its dtype, the puzzle-embedding
table included (each row the mean of that puzzle's rows: the rows belong to the same identifiers in every
checkpoint of a run). Non-floating tensors are taken from the last checkpoint. The metadata (step, epoch, config)
is the last checkpoint's, plus `averaged_from`: the K file names.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from arcpipe.config import ArcpipeError
from arcpipe.models.io import read_weights, write_checkpoint

log = logging.getLogger(__name__)

# what must agree between the averaged checkpoints: the model they describe and the puzzles its rows belong to
_SAME = ("format", "arch", "arch_config", "dataset", "identifiers_sha256")


def average_checkpoints(paths: Sequence[str | Path], out: str | Path) -> Path:
    """Write the parameter average of the weights checkpoints `paths` (oldest first) to `out`.

    Reads one checkpoint at a time: memory is a float64 sum of the model plus two checkpoints, whatever K is.
    """
    if not paths:
        raise ArcpipeError("average_checkpoints: no checkpoints given")
    first: dict[str, Any] = {}
    totals: dict[str, torch.Tensor] = {}
    for path in paths:
        ckpt = read_weights(path)
        first = first or ckpt
        shapes = {k: tuple(v.shape) for k, v in ckpt["model"].items()}
        differ = [k for k in _SAME if ckpt.get(k) != first.get(k)]
        if differ or shapes != {k: tuple(v.shape) for k, v in first["model"].items()}:
            what = ", ".join(differ) if differ else "state dict keys or shapes"
            raise ArcpipeError(f"{path}: {what} differ from {paths[0]}; average checkpoints of one run only")
        for key, value in ckpt["model"].items():
            if value.is_floating_point():
                totals[key] = totals[key] + value.to(torch.float64) if key in totals else value.to(torch.float64)
    last = ckpt
    model = {
        key: (totals[key] / len(paths)).to(value.dtype) if value.is_floating_point() else value
        for key, value in last["model"].items()
    }
    payload: dict[str, Any] = {k: v for k, v in last.items() if k != "model"}
    write_checkpoint(out, {**payload, "model": model, "averaged_from": [Path(p).name for p in paths]})
    log.info("averaged %d checkpoints (%s) -> %s", len(paths), ", ".join(map(str, paths)), out)
    return Path(out)
