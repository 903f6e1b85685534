"""Process-group set-up; the only module that reads RANK, LOCAL_RANK and WORLD_SIZE (set by torchrun).

One process (CPU, or one GPU) runs without any process group. Under torchrun: NCCL on GPU, gloo on CPU; multi-node
works through torchrun's rendezvous. Gradients are all-reduced by hand (SUM, as upstream), because the loss is
already divided by the global batch; the puzzle-embedding optimizer all-gathers its own rows.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from arcpipe.config import ArcpipeError, RunConfig

if TYPE_CHECKING:
    from torch import nn

log = logging.getLogger(__name__)

# torch is imported inside the functions that need it: `is_rank_zero` configures logging for every CLI command,
# and `arcpipe data ...` should not pay torch's import time


@dataclass(frozen=True)
class DistEnv:
    rank: int
    local_rank: int
    world_size: int
    device: Any = None  # torch.device; set by setup()

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1


def dist_env() -> DistEnv:
    """The launch shape torchrun set, or rank 0 of 1 for a plain process."""
    return DistEnv(
        rank=int(os.environ.get("RANK", 0)),
        local_rank=int(os.environ.get("LOCAL_RANK", 0)),
        world_size=int(os.environ.get("WORLD_SIZE", 1)),
    )


def is_rank_zero() -> bool:
    return dist_env().rank == 0


def setup(run: RunConfig | None, gpus: int | None = None) -> DistEnv:
    """Pick the device and, under torchrun, join the process group; checks the launch matches the config."""
    import torch
    import torch.distributed as dist

    env = dist_env()
    want_gpu = run.cuda if run is not None else (gpus or 0) > 0
    if run is not None and run.simulate_gpus:
        # a rehearsal runs many small jobs on few cores: one thread per simulated GPU (OpenMP threads of several
        # processes spinning on the same cores made each step ~5x slower on a 2-core machine)
        torch.set_num_threads(1)
    if run is not None and run.simulate_gpus and env.rank == 0:
        log.warning(
            "simulate_gpus: the job was scheduled for %d node(s) x %d GPU(s) but trains on CPU (gloo); a rehearsal",
            run.nodes,
            run.gpus_per_node,
        )
    if want_gpu:
        if not torch.cuda.is_available():
            raise ArcpipeError(
                "the run asks for GPUs (gpus_per_node > 0) but CUDA is not available here; "
                "set gpus_per_node: 0 to train on CPU"
            )
        device = torch.device("cuda", env.local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if run is not None and env.world_size != run.num_devices:
        raise ArcpipeError(
            f"launched with WORLD_SIZE={env.world_size} but the run declares nodes x gpus_per_node = "
            f"{run.nodes} x {max(run.gpus_per_node, 1)}; launch it through snakemake, or fix the config"
        )
    if env.is_distributed and not dist.is_initialized():
        dist.init_process_group(
            "nccl" if device.type == "cuda" else "gloo",
            device_id=device if device.type == "cuda" else None,
            timeout=timedelta(minutes=30),
        )
    return DistEnv(env.rank, env.local_rank, env.world_size, device)


def teardown(env: DistEnv) -> None:
    import torch.distributed as dist

    if env.is_distributed and dist.is_initialized():
        dist.destroy_process_group()


def barrier(env: DistEnv) -> None:
    import torch.distributed as dist

    if env.is_distributed:
        dist.barrier()


def all_reduce_grads(model: nn.Module, env: DistEnv) -> None:
    """Sum each parameter's gradient over ranks (a zero gradient where a rank had none)."""
    import torch
    import torch.distributed as dist

    if not env.is_distributed:
        return
    for p in model.parameters():
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        dist.all_reduce(p.grad)
