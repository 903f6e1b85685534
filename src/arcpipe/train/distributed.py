"""Process-group set-up; the only module that reads RANK, LOCAL_RANK and WORLD_SIZE (set by torchrun)."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class DistEnv:
    rank: int
    local_rank: int
    world_size: int

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1


def dist_env() -> DistEnv:
    """The launch shape torchrun set, or rank 0 of 1 for a plain process (no process group needed)."""
    return DistEnv(
        rank=int(os.environ.get("RANK", 0)),
        local_rank=int(os.environ.get("LOCAL_RANK", 0)),
        world_size=int(os.environ.get("WORLD_SIZE", 1)),
    )


def is_rank_zero() -> bool:
    return dist_env().rank == 0
