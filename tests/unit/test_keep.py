"""arcpipe.keep.retraining: which planned training jobs would delete a checkpoint (onstart stops them)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from arcpipe.keep import PlannedJob, retraining


def _boundary(root: Path, epoch: int, *, kept: str | None) -> PlannedJob:
    """Run r's boundary `epoch` on disk; its copies under resume/boundaries/ as the trainer keeps them ("link"), as
    plain copies of the same bytes ("copy"), or none (None). The job re-runs it for a missing temp state."""
    run = root / "results/runs/r"
    ckpt, state, metrics = run / f"ckpt/epoch_{epoch}.pt", run / f"state/epoch_{epoch}.pt", run / "metrics/e.jsonl"
    for path in (ckpt, state, metrics):
        path.parent.mkdir(parents=True, exist_ok=True)
    ckpt.write_bytes(b"weights")
    boundaries = run / "resume/boundaries"
    boundaries.mkdir(parents=True, exist_ok=True)
    if kept == "link":
        os.link(ckpt, boundaries / f"ckpt_{ckpt.name}")
    elif kept == "copy":
        shutil.copy2(ckpt, boundaries / f"ckpt_{ckpt.name}")
    if kept is not None:
        (boundaries / f"state_{ckpt.name}").write_bytes(b"state")
    outputs = tuple(str(p.relative_to(root)) for p in (ckpt, state, metrics))
    return PlannedJob("train_segment", outputs, f"Missing output files: {outputs[1]}", incomplete=False)


def test_a_finished_boundary_of_a_re_run_group_job_is_restored_not_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert retraining([_boundary(tmp_path, 1, kept="link")]) == []


def test_a_checkpoint_without_its_kept_hard_link_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for kept in (None, "copy"):  # a copy of the bytes is not the trainer's link: the checkpoint would be lost
        shutil.rmtree(tmp_path / "results", ignore_errors=True)
        lines = retraining([_boundary(tmp_path, 1, kept=kept)])
        assert len(lines) == 1 and lines[0].startswith("results/runs/r/ckpt/epoch_1.pt: Snakemake would train it")
