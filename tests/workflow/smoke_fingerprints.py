"""Fingerprints of what a research smoke run wrote: the record that a refactor left every result byte-identical.

    python tests/workflow/smoke_fingerprints.py WORKDIR > tests/data/smoke_research_fingerprints.json

WORKDIR is a scratch directory after `snakemake smoke` with the research overlay of
tests/workflow/test_smoke_research.py (seeds 0 and 1, ensemble_last 2, selection_tasks 4, the blank-id control, a
smaller model and the smoke dataset's test tasks alone). Every evaluation file, submission, vote file, report table
(CSV, Markdown, HTML), selection list and run config is hashed; fields that hold times (wall time, step time,
examples per second, and the GPU-hours and cost derived from them) are removed first, so two runs of the same code
give the same fingerprints. The checkpoints are fingerprinted too, by their tensors alone (every tensor's key path,
dtype, shape and bytes; not the file, whose run config and config hash change with any new config field): when the
weights differ (another CPU's kernels round differently), the evaluation outputs cannot be compared and the test
says so instead of failing.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
import sys
from pathlib import Path

# keys of JSON objects and CSV columns that hold a time or a figure computed from one
TIMED = re.compile(r"(seconds|_s|time|per_s|hours|cost)(_per_task)?$")  # ttt/seconds_per_task: a VARC run's
# report files that print timed columns inside text (their CSV twin is fingerprinted without those columns)
TIMED_TEXT = {"summary.md", "summary.html"}
PATTERNS = (
    "eval/*/*/metrics.json",
    "eval/*/*/per_puzzle.csv",
    "eval/*/*/submission.json",
    "eval/*/*/votes.npz",
    "eval/*/evaluation.yaml",
    "report/*.csv",
    "report/*.md",
    "report/*.html",
    "report/*.json",
    "runs/*/config.yaml",
)
CHECKPOINTS = ("runs/*/ckpt/*.pt",)


def fingerprints(work: Path) -> dict[str, dict[str, str]]:
    """{"checkpoints": {path: sha256}, "outputs": {path: sha256 of the time-free content}} under work/results."""
    results = work / "results"
    outputs = {
        str(path.relative_to(results)): _sha256(_time_free(path))
        for pattern in PATTERNS
        for path in sorted(results.glob(pattern))
        if path.name not in TIMED_TEXT
    }
    checkpoints = {
        str(path.relative_to(results)): _tensors_sha256(path)
        for pattern in CHECKPOINTS
        for path in sorted(results.glob(pattern))
    }
    return {"checkpoints": checkpoints, "outputs": outputs}


def _time_free(path: Path) -> bytes:
    if path.suffix == ".json":
        return json.dumps(_drop_timed(json.loads(path.read_bytes())), sort_keys=True).encode()
    if path.suffix == ".csv":
        rows = list(csv.reader(io.StringIO(path.read_text())))
        if not rows:
            return b""
        keep = [i for i, name in enumerate(rows[0]) if not TIMED.search(name)]
        return "\n".join(",".join(row[i] for i in keep if i < len(row)) for row in rows).encode()
    return path.read_bytes()


def _drop_timed(value):  # noqa: ANN001, ANN202
    if isinstance(value, dict):
        return {k: _drop_timed(v) for k, v in value.items() if not TIMED.search(k)}
    if isinstance(value, list):
        return [_drop_timed(v) for v in value]
    return value


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _tensors_sha256(path: Path) -> str:
    """The sha256 of a checkpoint's tensors: each one's key path, dtype, shape and bytes, in key order."""
    import torch

    from arcpipe.models.io import torch_load_checkpoint

    digest = hashlib.sha256()

    def walk(value, key: str) -> None:  # noqa: ANN001
        if isinstance(value, torch.Tensor):
            tensor = value.detach().cpu().contiguous()
            digest.update(f"{key}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
            digest.update(tensor.view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
        elif isinstance(value, dict):
            for k in sorted(value, key=str):
                walk(value[k], f"{key}.{k}")
        elif isinstance(value, (list, tuple)):
            for i, v in enumerate(value):
                walk(v, f"{key}[{i}]")

    walk(torch_load_checkpoint(path), "")
    return digest.hexdigest()


if __name__ == "__main__":
    json.dump(fingerprints(Path(sys.argv[1])), sys.stdout, indent=1, sort_keys=True)
    print()
