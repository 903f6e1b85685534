"""`arcpipe doctor`: can this machine run these runs, which code paths run, and how fast. One screen, any machine.

    arcpipe doctor                                             # every full run of config/config.yaml
    arcpipe doctor --run smoke-trm                             # one run (repeat --run for more)
    arcpipe doctor --config config/config.yaml config/rehearsal.yaml   # overlays, merged as Snakemake does

Machine: torch, CUDA and driver versions, the GPUs and their memory, NCCL and gloo, whether torch.compile works,
/dev/shm, W&B mode and whether a key is present (never its value). Per run: the attention path and the AdamATan2
backend that will run and why; /dev/shm against what the run's GPU processes need; one real training step and one
evaluation step (eager) at the run's per-device micro-batch and dtype on synthetic batches of the dataset's shape,
with examples/s and peak memory; on CUDA, the largest micro-batch that fits this GPU and the `micro_batch_size`
that reaches the run's global batch with it. Exit status 1 when a run cannot work here, one line per reason.
`run_preflight` records the same backends (`backends`) in preflight.json.
"""

from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from arcpipe.config import ArcpipeError, RunConfig, WorkflowConfig, read_config_yaml, validate_config

SHM_MB_PER_GPU = 512  # NCCL's shared-memory transport and proxy buffers between local GPU processes
FIT_HEADROOM = 0.9  # the largest micro-batch may use this share of the GPU's memory
ARC_SEQ_LEN, ARC_VOCAB = 900, 12  # every arcpipe dataset: 30 x 30 canvas, PAD EOS and 10 colours


@dataclass
class RunCheck:
    name: str
    rows: list[tuple[str, str]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------------------------
# the machine


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
        "shm_mb": _shm_mb(),
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
    env["compile"] = _compile_check("cuda") if env["cuda"] else None
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


def _shm_mb() -> dict[str, float] | None:
    try:
        st = os.statvfs("/dev/shm")
    except OSError:
        return None
    return {"total": st.f_blocks * st.f_frsize / 2**20, "free": st.f_bavail * st.f_frsize / 2**20}


def _version_of(imported: bool, dist_name: str) -> str | None:
    """The installed version of an optional kernel package that arcpipe imported, None when it did not import."""
    import importlib.metadata

    if not imported:
        return None
    try:
        return importlib.metadata.version(dist_name)
    except importlib.metadata.PackageNotFoundError:
        return "installed"


def _compile_check(device: str) -> dict[str, Any]:
    """Compile and run a small function on `device`: usable, seconds, or the error's first line."""
    import torch

    started = time.monotonic()
    try:
        fn = torch.compile(lambda x: torch.nn.functional.silu(x) * 2 + 1, dynamic=False)
        x = torch.arange(8.0, device=device)
        ok = torch.allclose(fn(x), torch.nn.functional.silu(x) * 2 + 1)
        return {"usable": bool(ok), "seconds": time.monotonic() - started, "error": None if ok else "wrong result"}
    except Exception as err:  # noqa: BLE001  (inductor fails in many ways: no compiler, no triton, ...)
        return {"usable": False, "seconds": time.monotonic() - started, "error": _first_line(err)}


# --------------------------------------------------------------------------------------------------------------
# code paths


def attention_path(arch_cfg: Any, device: Any, dtype: Any) -> tuple[str, str]:
    """(path, why): flash-attn or PyTorch SDPA, for this model config on this device in this dtype."""
    import torch

    from arcpipe.models import layers

    head_dim = arch_cfg.hidden_size // arch_cfg.num_heads
    device = torch.device(device)
    if layers.flash_attention_usable(device, dtype, head_dim):
        cap = ".".join(map(str, torch.cuda.get_device_capability(device)))
        return "flash-attn", f"installed, SM {cap} >= 8.0, {_dtype_name(dtype)}, head_dim {head_dim} % 8 == 0"
    if layers._flash_attn_func is None:
        why = "flash-attn not installed"
    elif device.type != "cuda":
        why = "flash-attn is GPU only"
    elif dtype not in (torch.bfloat16, torch.float16):
        why = f"flash-attn needs a half dtype, the forward dtype is {_dtype_name(dtype)}"
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

    from arcpipe.models.configs import make_arch_config
    from arcpipe.models.registry import default_forward_dtype

    arch_cfg = make_arch_config(run.arch, run.preset, run.arch_overrides)
    dtype = default_forward_dtype(device)
    attention, attention_why = attention_path(arch_cfg, device, dtype)
    optimizer, optimizer_why = optimizer_path(run, device)
    compiled = run.compile if run.compile is not None else torch.device(device).type == "cuda"
    return {
        "device": str(device),
        "dtype": _dtype_name(dtype),
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
                f"flash-attn imports but fails at its first call ({_first_line(err)}); "
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
                f"the adam-atan2 CUDA extension imports but fails at its first step ({_first_line(err)}); "
                "`pip uninstall adam-atan2` (the PyTorch AdamATan2 has the same rule)"
            )
    return problems


# --------------------------------------------------------------------------------------------------------------
# one run


def check_run(cfg: WorkflowConfig, name: str, env: dict[str, Any], results: Path, measure: bool = True) -> RunCheck:
    import torch

    from arcpipe.models.configs import make_arch_config

    run = cfg.runs[name]
    check = RunCheck(name)
    shape = f"{run.nodes} node(s) x {run.gpus_per_node} GPU(s)" + (" (simulated on CPU)" if run.simulate_gpus else "")
    check.rows.append(("shape", f"{run.arch}/{run.preset}, {shape}, micro-batch {run.micro_batch}"))
    if run.cuda and not env["cuda"]:
        check.problems.append(
            f"run {name} trains on {run.num_devices} GPU(s) but CUDA is not available here "
            f"(torch {env['torch']}); run it on a GPU machine, or gpus_per_node: 0 for CPU"
        )
        device = None
    elif run.cuda and run.gpus_per_node > len(env["gpus"]) and run.nodes == 1:
        check.problems.append(
            f"run {name} needs {run.gpus_per_node} GPUs on one node; this machine has {len(env['gpus'])}"
        )
        device = torch.device("cuda", 0)
    else:
        device = torch.device("cuda", 0) if run.cuda else torch.device("cpu")

    probe_device = device or torch.device("cpu")
    paths = backends(run, probe_device)
    where = "" if device is not None else " (on CPU; no CUDA here)"
    check.rows.append(("attention", f"{paths['attention']}: {paths['attention_why']}{where}"))
    check.rows.append(("optimizer", f"{paths['optimizer']}: {paths['optimizer_why']}{where}"))
    if device is None:  # what the run would do on its GPUs; nothing to check here
        paths["compile"] = "on (on CUDA)" if (run.compile if run.compile is not None else run.cuda) else "off"
    elif paths["compile"] == "on":
        if env["compile"] is None:  # a CPU run that asks for compile: checked on the CPU
            env["compile"] = _compile_check(str(device))
        if not env["compile"]["usable"]:
            check.problems.append(
                f"run {name} compiles but torch.compile fails here ({env['compile']['error']}); "
                f"set runs.{name}.compile: false"
            )
    check.rows.append(("compile", paths["compile"] + _compile_note(env, paths["compile"])))
    if device is not None:
        check.problems += [f"run {name}: {p}" for p in first_calls(device)]
    check.figures["backends"] = paths

    need = shm_need_mb(run)
    if need:
        have = env["shm_mb"]["free"] if env["shm_mb"] else 0.0
        check.rows.append(("/dev/shm", f"{have:.0f} MB free, the run's {run.gpus_per_node} GPU processes need {need}"))
        problem = shm_problem(run, name, env["shm_mb"])
        if problem:
            check.problems.append(problem)
    else:
        check.rows.append(("/dev/shm", "not used (one GPU process per node, or CPU)"))

    arch_cfg = make_arch_config(run.arch, run.preset, run.arch_overrides)
    ids, ids_note = puzzle_identifiers(cfg, run, results)
    check.figures["num_puzzle_identifiers"] = ids
    if not measure:
        return check
    if device is None:
        check.rows.append(("train step", "no CUDA: not measured"))
        check.rows.append(("eval step", "no CUDA: not measured"))
        return check
    try:
        train = step_figures(run, arch_cfg, device, run.micro_batch, ids)
        check.rows.append(
            ("train step", f"{train['examples_per_s']:.1f} examples/s, peak {_gb(train['peak_gb'])} "
             f"at micro-batch {run.micro_batch} ({paths['dtype']}, eager, {ids:,} puzzle ids{ids_note})")
        )  # fmt: skip
        check.figures["train"] = train
    except _OutOfMemory:
        train = None
        check.rows.append(("train step", f"out of memory at micro-batch {run.micro_batch}"))
    evaluation = eval_figures(run, arch_cfg, device, ids)
    check.figures["eval"] = evaluation
    check.rows.append(
        ("eval step", f"{evaluation['examples_per_s']:.1f} examples/s at batch {evaluation['batch']} "
         f"({evaluation['act_steps']} ACT steps), peak {_gb(evaluation['peak_gb'])}")
    )  # fmt: skip
    if device.type != "cuda":
        check.rows.append(("largest micro-batch", "searched on CUDA only"))
        return check
    fit = largest_micro_batch(run, arch_cfg, device, ids)
    check.figures["largest_micro_batch"] = fit
    if fit == 0:
        memory = env["gpus"][0]["memory_gb"]
        check.problems.append(
            f"run {name}: not even a micro-batch of 1 fits this GPU ({memory:.0f} GB); use a larger GPU"
        )
        return check
    suggestion = fitting_micro_batch(run, fit)
    verdict = "fits" if train is not None and run.micro_batch <= fit else "does not fit"
    check.rows.append(
        ("largest micro-batch", f"{fit} on this GPU; the run's {run.micro_batch} {verdict}; "
         f"micro_batch_size: {suggestion} reaches global_batch_size {run.global_batch_size} with "
         f"{run.global_batch_size // (run.num_devices * suggestion)} accumulation step(s)")
    )  # fmt: skip
    if verdict == "does not fit":
        check.problems.append(
            f"run {name}: micro-batch {run.micro_batch} does not fit this GPU (at most {fit}); "
            f"set runs.{name}.micro_batch_size: {suggestion}"
        )
    return check


def shm_need_mb(run: RunConfig) -> int:
    """/dev/shm the run's GPU processes on one node need: NCCL between them (0 for one process or CPU)."""
    return SHM_MB_PER_GPU * run.gpus_per_node if run.cuda and run.gpus_per_node > 1 else 0


def shm_problem(run: RunConfig, name: str, shm: dict[str, float] | None = None) -> str | None:
    """One line when this node's /dev/shm is too small for the run (doctor, and every training job's launch)."""
    need, shm = shm_need_mb(run), shm if shm is not None else _shm_mb()
    have = shm["free"] if shm else 0.0
    if not need or have >= need:
        return None
    return (
        f"run {name}: /dev/shm has {have:.0f} MB free, NCCL between {run.gpus_per_node} GPU processes needs "
        f"{need} MB; give the container more (docker run --shm-size={-(-need // 1024)}g; ICE jobs get shm_mb)"
    )


def fitting_micro_batch(run: RunConfig, fit: int) -> int:
    """The largest micro-batch <= `fit` that divides the global batch over the run's devices."""
    per_device = run.global_batch_size // run.num_devices
    return max(m for m in range(1, min(fit, per_device) + 1) if per_device % m == 0)


def puzzle_identifiers(cfg: WorkflowConfig, run: RunConfig, results: Path) -> tuple[int, str]:
    """The dataset's puzzle-embedding rows (its metadata when built, else an estimate) and a note saying which."""
    import json

    meta = results / "data" / run.dataset / "train" / "dataset.json"
    if meta.is_file():
        return int(json.loads(meta.read_text())["num_puzzle_identifiers"]), ""
    dataset = cfg.datasets[run.dataset]
    per_source = dataset.max_puzzles or 1000  # ARC subsets hold 100-1000 puzzles
    return 1 + len(dataset.sources) * per_source * (dataset.num_aug + 1), ", estimated: dataset not built"


class _OutOfMemory(Exception):
    pass


def _model(run: RunConfig, arch_cfg: Any, device: Any, batch: int, ids: int):  # noqa: ANN202
    from arcpipe.models.registry import build_model
    from arcpipe.optim import make_optimizers

    head = build_model(
        arch_cfg, vocab_size=ARC_VOCAB, seq_len=ARC_SEQ_LEN, num_puzzle_identifiers=ids, batch_size=batch, device=device
    )
    optimizers = make_optimizers(
        head,
        lr=run.lr,
        puzzle_emb_lr=run.puzzle_emb_lr,
        weight_decay=run.weight_decay,
        puzzle_emb_weight_decay=run.puzzle_emb_weight_decay,
        betas=(run.beta1, run.beta2),
        optimizer=run.optimizer,
    )
    return head, optimizers


def _batch(batch: int, ids: int, device: Any, seed: int = 0) -> dict[str, Any]:
    import torch

    g = torch.Generator().manual_seed(seed)
    inputs = torch.randint(2, ARC_VOCAB, (batch, ARC_SEQ_LEN), generator=g, dtype=torch.int32)
    return {
        "inputs": inputs.to(device),
        "labels": torch.randint(2, ARC_VOCAB, (batch, ARC_SEQ_LEN), generator=g, dtype=torch.int32).to(device),
        "puzzle_identifiers": torch.randint(1, max(ids, 2), (batch,), generator=g, dtype=torch.int32).to(device),
    }


def step_figures(run: RunConfig, arch_cfg: Any, device: Any, batch: int, ids: int, steps: int = 2) -> dict[str, float]:
    """Training steps (forward, backward, optimizer) at micro-batch `batch`: examples/s after one warm-up, peak."""
    import torch

    _reset_peak(device)
    try:
        head, optimizers = _model(run, arch_cfg, device, batch, ids)
        data = _batch(batch, ids, device)
        carry = head.initial_carry(data)
        times = []
        for _ in range(steps + 1):
            _sync(device)
            t0 = time.perf_counter()
            carry, loss, _, _ = head.step(carry, data)
            (loss / batch).backward()
            for optimizer, _ in optimizers:
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            _sync(device)
            times.append(time.perf_counter() - t0)
        if not torch.isfinite(loss).item():
            raise ArcpipeError(f"{run.arch}/{run.preset}: the training loss is not finite on {device}")
    except torch.OutOfMemoryError:
        raise _OutOfMemory from None
    finally:
        head = optimizers = carry = None  # noqa: F841  (free before the next probe)
        _empty(device)
    step_s = sum(times[1:]) / steps
    return {"examples_per_s": batch / step_s, "step_s": step_s, "peak_gb": _peak_gb(device), "batch": batch}


def eval_figures(run: RunConfig, arch_cfg: Any, device: Any, ids: int) -> dict[str, float]:
    """One evaluation pass (inference mode, every ACT step to halt_max_steps) at the run's evaluation batch."""
    import torch

    from arcpipe.models.registry import build_model

    batch = min(run.eval_batch_size or run.micro_batch, run.micro_batch)
    _reset_peak(device)
    head = build_model(
        arch_cfg, vocab_size=ARC_VOCAB, seq_len=ARC_SEQ_LEN, num_puzzle_identifiers=ids, batch_size=batch, device=device
    )
    head.eval()
    data = _batch(batch, ids, device)
    with torch.inference_mode():
        for _ in range(2):  # a warm-up pass, then the timed one
            carry = head.initial_carry(data)
            _sync(device)
            t0 = time.perf_counter()
            act_steps = 0
            for _ in range(head.model.max_steps):
                carry, _, _, _ = head.step(carry, data)
                act_steps += 1
            _sync(device)
            seconds = time.perf_counter() - t0
    del head, carry
    _empty(device)
    return {"examples_per_s": batch / seconds, "batch": batch, "act_steps": act_steps, "peak_gb": _peak_gb(device)}


def largest_micro_batch(run: RunConfig, arch_cfg: Any, device: Any, ids: int) -> int:
    """The largest training micro-batch whose step fits FIT_HEADROOM of this GPU's memory (0: none)."""
    import torch

    total = torch.cuda.get_device_properties(device).total_memory / 2**30 * FIT_HEADROOM

    def fits(batch: int) -> tuple[bool, float]:
        try:
            peak = step_figures(run, arch_cfg, device, batch, ids, steps=1)["peak_gb"]
        except _OutOfMemory:
            return False, float("inf")
        return peak <= total, peak

    ok, peak1 = fits(1)
    if not ok:
        return 0
    ok2, peak2 = fits(2)
    if not ok2:
        return 1
    per_example = max(peak2 - peak1, 1e-6)
    guess = max(2, int((total - (peak1 - per_example)) / per_example))  # memory is affine in the micro-batch
    while guess > 2 and not fits(guess)[0]:
        guess = int(guess * 0.9)
    return guess


# --------------------------------------------------------------------------------------------------------------
# the command


def load_configs(paths: Iterable[Path]) -> WorkflowConfig:
    """Config files merged in order (later ones override, as Snakemake's --configfile), then validated."""
    from snakemake.utils import update_config

    merged: dict[str, Any] = {}
    paths = list(paths)
    for path in paths:
        update_config(merged, read_config_yaml(path) or {})
    return validate_config(merged, " + ".join(map(str, paths)))


def doctor(config_paths: list[Path], runs: list[str] | None, results: Path, measure: bool = True) -> int:
    cfg = load_configs(config_paths)
    names = runs or cfg.runs_for("full")
    unknown = [n for n in names if n not in cfg.runs]
    if unknown:
        raise ArcpipeError(f"--run {', '.join(unknown)}: no such run (runs: {', '.join(sorted(cfg.runs))})")
    env = environment()
    print(f"arcpipe doctor on {env['host']}")
    for label, value in machine_rows(env):
        print(f"  {label:<18} {value}")
    problems = []
    for name in names:
        check = check_run(cfg, name, env, results, measure)
        print(f"run {name}")
        for label, value in check.rows:
            print(f"  {label:<18} {value}")
        problems += check.problems
    if problems:
        print(f"{len(problems)} problem(s):")
        for problem in problems:
            print(f"arcpipe: error: {problem}")
        return 1
    print(f"ok: {len(names)} run(s) can run here")
    return 0


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


def _compile_note(env: dict[str, Any], compile_: str) -> str:
    if env["compile"] is None or compile_ != "on":
        return ""
    return " (usable here)" if env["compile"]["usable"] else " (but unusable here)"


def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"[:200]


def _gb(value: float | None) -> str:
    """GPU peak memory; on CPU the process's peak RSS so far."""
    if value is None:
        import resource

        return f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GB RSS (process)"
    return f"{value:.2f} GB"


def _sync(device: Any) -> None:
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def _reset_peak(device: Any) -> None:
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def _peak_gb(device: Any) -> float | None:
    import torch

    return torch.cuda.max_memory_allocated(device) / 2**30 if torch.device(device).type == "cuda" else None


def _empty(device: Any) -> None:
    import gc

    import torch

    gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()
