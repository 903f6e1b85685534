"""The machine: torch, CUDA and driver versions, the GPUs and their memory, NCCL and gloo, torch.compile, optional
kernels, /dev/shm and W&B (a key's presence only, never its value); and the rows `arcpipe doctor` prints for it."""

from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
from typing import Any

from arcpipe.doctor.backends import compile_check
from arcpipe.doctor.shm import shm_mb


def environment() -> dict[str, Any]:
    """What this machine offers: versions, GPUs, collectives, compile, /dev/shm, W&B (a key's presence only)."""
    import torch
    import torch.distributed as dist

    from arcpipe.models import layers
    from arcpipe.optim import adam_atan2

    env: dict[str, Any] = {
        "host": socket.gethostname(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cuda": torch.cuda.is_available(),
        "driver": _driver_version(),
        "gpus": [],
        "gloo": dist.is_available() and dist.is_gloo_available(),
        "nccl": None,
        "shm_mb": shm_mb(),
        "wandb_mode": os.environ.get("WANDB_MODE"),
        "wandb_key": bool(os.environ.get("WANDB_API_KEY")),
        "flash_attn": _version_of(layers._flash_attn_func is not None, "flash-attn"),
        "adam_atan2_ext": _version_of(adam_atan2._cuda_ext is not None, "adam-atan2"),
    }
    if env["cuda"]:
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            env["gpus"].append(
                {"name": p.name, "memory_gb": p.total_memory / 2**30, "capability": f"{p.major}.{p.minor}"}
            )
        if dist.is_available() and dist.is_nccl_available():
            env["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    # compiling even a tiny function costs seconds to a minute on a small CPU: checked where runs compile (CUDA)
    env["compile"] = compile_check("cuda") if env["cuda"] else None
    return env


def _driver_version() -> str | None:
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.splitlines()[0].strip() if out.returncode == 0 and out.stdout.strip() else None


def _version_of(imported: bool, dist_name: str) -> str | None:
    """The installed version of an optional kernel package that arcpipe imported, None when it did not import."""
    import importlib.metadata

    if not imported:
        return None
    try:
        return importlib.metadata.version(dist_name)
    except importlib.metadata.PackageNotFoundError:
        return "installed"


def machine_rows(env: dict[str, Any]) -> list[tuple[str, str]]:
    cuda = f"CUDA {env['torch_cuda']}" if env["torch_cuda"] else "CPU build"
    rows = [
        ("python / torch", f"{env['python']} / torch {env['torch']} ({cuda}); driver {env['driver'] or '-'}"),
    ]
    if env["gpus"]:
        for i, gpu in enumerate(env["gpus"]):
            rows.append((f"GPU {i}", f"{gpu['name']}, {gpu['memory_gb']:.1f} GB, SM {gpu['capability']}"))
    else:
        rows.append(("GPUs", "no CUDA"))
    rows.append(("collectives", f"gloo {'yes' if env['gloo'] else 'no'}, NCCL {env['nccl'] or 'no CUDA'}"))
    compiled = env["compile"]
    if compiled is None:
        rows.append(("torch.compile", "not checked (no CUDA: runs on CPU do not compile unless they say so)"))
    else:
        rows.append(
            ("torch.compile", f"usable ({compiled['seconds']:.1f} s for a test function)" if compiled["usable"]
             else f"unusable: {compiled['error']}")
        )  # fmt: skip
    rows.append(("flash-attn", env["flash_attn"] or "not installed"))
    rows.append(("adam-atan2 CUDA", env["adam_atan2_ext"] or "not installed"))
    shm = env["shm_mb"]
    rows.append(("/dev/shm", f"{shm['free']:.0f} MB free of {shm['total']:.0f} MB" if shm else "absent"))
    key = "present (not shown)" if env["wandb_key"] else "absent"
    rows.append(("W&B", f"WANDB_MODE={env['wandb_mode'] or '(unset: each run says)'}; WANDB_API_KEY {key}"))
    return rows
