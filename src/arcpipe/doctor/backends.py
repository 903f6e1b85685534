"""Which code paths a run takes on a device, and why: the attention path (flash-attn or one of PyTorch's SDPA
kernels), the optimizer backend (AdamATan2's CUDA extension or its PyTorch twin, or Muon), whether torch.compile
works, and whether an optional kernel that imports also survives its first call. `run_preflight` records
`backends` in preflight.json."""

from __future__ import annotations

import time
from typing import Any

from arcpipe.config import RunConfig, compiles


def compile_check(device: str) -> dict[str, Any]:
    """Compile and run a small function on `device`: usable, seconds, or the error's first line."""
    import torch

    started = time.monotonic()
    try:
        fn = torch.compile(lambda x: torch.nn.functional.silu(x) * 2 + 1, dynamic=False)
        x = torch.arange(8.0, device=device)
        ok = torch.allclose(fn(x), torch.nn.functional.silu(x) * 2 + 1)
        return {"usable": bool(ok), "seconds": time.monotonic() - started, "error": None if ok else "wrong result"}
    except Exception as err:  # noqa: BLE001  (inductor fails in many ways: no compiler, no triton, ...)
        return {"usable": False, "seconds": time.monotonic() - started, "error": first_line(err)}


def attention_path(arch_cfg: Any, device: Any, dtype: Any) -> tuple[str, str]:
    """(path, why): flash-attn or PyTorch SDPA, for this model config on this device in this dtype."""
    import torch

    from arcpipe.models import layers

    head_dim = arch_cfg.hidden_size // arch_cfg.num_heads
    device = torch.device(device)
    if layers.flash_attention_usable(device, dtype, head_dim):
        cap = ".".join(map(str, torch.cuda.get_device_capability(device)))
        return "flash-attn", f"installed, SM {cap} >= 8.0, {dtype_name(dtype)}, head_dim {head_dim} % 8 == 0"
    if layers._flash_attn_func is None:
        why = "flash-attn not installed"
    elif device.type != "cuda":
        why = "flash-attn is GPU only"
    elif dtype not in (torch.bfloat16, torch.float16):
        why = f"flash-attn needs a half dtype, the forward dtype is {dtype_name(dtype)}"
    elif torch.cuda.get_device_capability(device)[0] < 8:
        why = "flash-attn needs SM >= 8.0"
    else:
        why = f"flash-attn needs head_dim % 8 == 0 and <= 256, head_dim is {head_dim}"
    return f"SDPA ({_sdpa_kernels(device, dtype, head_dim)})", why


def _sdpa_kernels(device: Any, dtype: Any, head_dim: int) -> str:
    """The SDPA kernels that accept this shape here, in PyTorch's order of preference (the first one runs)."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q = torch.zeros(1, 2, 16, head_dim, device=device, dtype=dtype)
    usable = []
    for name, backend in (
        ("flash", SDPBackend.FLASH_ATTENTION),
        ("cudnn", SDPBackend.CUDNN_ATTENTION),
        ("mem-efficient", SDPBackend.EFFICIENT_ATTENTION),
        ("math", SDPBackend.MATH),
    ):
        try:
            with sdpa_kernel([backend]):
                F.scaled_dot_product_attention(q, q, q)
            usable.append(name)
        except RuntimeError:
            continue
    return "kernels usable: " + ", ".join(usable) if usable else "no kernel accepts this shape"


def optimizer_path(run: RunConfig, device: Any) -> tuple[str, str]:
    """(backend, why) of the run's main optimizer on this device."""
    import torch

    from arcpipe.optim import adam_atan2

    if run.optimizer == "muon":
        return "Muon (PyTorch)", "optimizer: muon"
    device = torch.device(device)
    if adam_atan2._ext_supports(device):
        return "AdamATan2 cuda-ext", "adam_atan2_backend imports and this GPU's SM is one it was built for"
    if adam_atan2._cuda_ext is None:
        why = "adam_atan2_backend not installed"
    elif device.type != "cuda":
        why = "the CUDA extension is GPU only"
    else:
        cap = torch.cuda.get_device_capability(device)
        why = f"adam-atan2 0.0.3 is built for SM {sorted(adam_atan2._EXT_ARCHS)}, this GPU is SM {cap}"
    return "AdamATan2 torch (the same rule)", why


def backends(run: RunConfig, device: Any) -> dict[str, str]:
    """What preflight.json records: device, dtype, attention path and optimizer backend, each with its reason."""
    import torch

    from arcpipe.config.arch import make_arch_config
    from arcpipe.models.registry import default_forward_dtype

    arch_cfg = make_arch_config(run.arch, run.preset, run.arch_overrides)
    dtype = default_forward_dtype(device)
    attention, attention_why = attention_path(arch_cfg, device, dtype)
    optimizer, optimizer_why = optimizer_path(run, device)
    compiled = compiles(run.compile, torch.device(device).type)
    return {
        "device": str(device),
        "dtype": dtype_name(dtype),
        "attention": attention,
        "attention_why": attention_why,
        "optimizer": optimizer,
        "optimizer_why": optimizer_why,
        "compile": "on" if compiled else "off",
    }


def first_calls(device: Any) -> list[str]:
    """Problems of optional kernels that import but fail when called: flash-attn, the adam-atan2 extension."""
    import torch

    from arcpipe.models import layers
    from arcpipe.optim import AdamATan2, adam_atan2

    device = torch.device(device)
    problems = []
    if layers._flash_attn_func is not None and device.type == "cuda":
        try:
            q = torch.randn(1, 16, 2, 64, device=device, dtype=torch.bfloat16)
            layers._flash_attn_func(q, q, q, causal=False)
            torch.cuda.synchronize(device)
        except Exception as err:  # noqa: BLE001
            problems.append(
                f"flash-attn imports but fails at its first call ({first_line(err)}); "
                "`pip uninstall flash-attn` (SDPA computes the same)"
            )
    if adam_atan2._ext_supports(device):
        try:
            p = torch.nn.Parameter(torch.ones(8, device=device))
            p.grad = torch.ones_like(p)
            AdamATan2([p], lr=1e-3).step()
            torch.cuda.synchronize(device)
        except Exception as err:  # noqa: BLE001
            problems.append(
                f"the adam-atan2 CUDA extension imports but fails at its first step ({first_line(err)}); "
                "`pip uninstall adam-atan2` (the PyTorch AdamATan2 has the same rule)"
            )
    return problems


def dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"[:200]
