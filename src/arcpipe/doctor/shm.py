"""/dev/shm: what a run's GPU processes on one node need (NCCL between them) against what this node has; checked
by `arcpipe doctor` and by every training job's launch."""

from __future__ import annotations

import os

from arcpipe.config import RunConfig

SHM_MB_PER_GPU = 512  # NCCL's shared-memory transport and proxy buffers between local GPU processes


def shm_mb() -> dict[str, float] | None:
    try:
        st = os.statvfs("/dev/shm")
    except OSError:
        return None
    return {"total": st.f_blocks * st.f_frsize / 2**20, "free": st.f_bavail * st.f_frsize / 2**20}


def shm_need_mb(run: RunConfig) -> int:
    """/dev/shm the run's GPU processes on one node need: NCCL between them (0 for one process or CPU)."""
    return SHM_MB_PER_GPU * run.gpus_per_node if run.cuda and run.gpus_per_node > 1 else 0


def shm_problem(run: RunConfig, name: str, shm: dict[str, float] | None = None) -> str | None:
    """One line when this node's /dev/shm is too small for the run (doctor, and every training job's launch)."""
    need, shm = shm_need_mb(run), shm if shm is not None else shm_mb()
    have = shm["free"] if shm else 0.0
    if not need or have >= need:
        return None
    return (
        f"run {name}: /dev/shm has {have:.0f} MB free, NCCL between {run.gpus_per_node} GPU processes needs "
        f"{need} MB; give the container more (docker run --shm-size={-(-need // 1024)}g; ICE jobs get shm_mb)"
    )
