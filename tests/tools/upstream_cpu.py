"""Run upstream's own trainers on a CPU: a device-rewritten copy of an upstream tree, and CPU stand-ins for the two
CUDA-only packages upstream imports. Shared by the recording tools of tests/tools/ and the side-by-side benchmarks.

    python tests/tools/upstream_cpu.py TREE OUT        # OUT: TREE's copy with the device rewritten (prints the edits)

Upstream code is read, never copied into this repository: TREE is a scratch tree of an upstream repository (for
example `git --git-dir=<clone>/.git archive <commit> | tar -x -C TREE`), and OUT is another scratch folder.

What changes, and only that:

* **The device.** TRM's, HRM's and URM's `pretrain.py` hard-code CUDA (`torch.device("cuda")`, `.cuda()`,
  `map_location="cuda"`, an NCCL process group, `torch.cuda.set_device`). `cpu_tree` copies the tree and rewrites
  exactly those literals in every .py file (the rewrites in DEVICE_REWRITES, each counted and printed); nothing else
  in the copy differs from the tree. VARC picks its device itself and needs no copy.
* **flash-attn** (HRM, URM): a module `flash_attn` / `flash_attn_interface` whose `flash_attn_func` calls torch's
  SDPA with flash-attn's (B, S, H, hd) layout and default scale hd^-0.5.
* **adam-atan2** (TRM, HRM, URM): the PyPI package `adam-atan2` 0.0.3 is a CUDA extension with no CPU path. Its own
  Python (`adam_atan2/adam_atan2.py`: the Optimizer class, its state, the step counting) is used as it is, from the
  package's source distribution (`pip download --no-deps --no-binary :all: adam-atan2==0.0.3`, unpacked: pass its
  root); only the extension module `adam_atan2_backend` is replaced by `adam_atan2_cuda_impl_` below, the kernel of
  `csrc/adam_atan2.cu` written for the CPU: the scalars in double from the fp32 step count, cast to the math type,
  then per element in fp32 (float64 for float64 parameters): p *= 1 - lr*wd; m = lerp(m, g, 1-b1);
  v = lerp(v, g*g, 1-b2); p -= lr/(1-b1^t) * atan2(m, sqrt(v) / sqrt(1-b2^t)). The kernel's lerp is
  fma(t, v1, fma(-t, v0, v0)), which its authors note is identical to torch.lerp for t < 0.5: torch.lerp here.

arcpipe's own AdamATan2 (src/arcpipe/optim/adam_atan2.py) is not used here: the stand-in is the reference it is
compared against.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import shutil
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.nn.functional as F

# (pattern, replacement): the CUDA literals of upstream's trainers, rewritten for the CPU
DEVICE_REWRITES: list[tuple[str, str]] = [
    (r'torch\.device\("cuda"\)', 'torch.device("cpu")'),
    (r'device="cuda"', 'device="cpu"'),
    (r'map_location="cuda"', 'map_location="cpu"'),
    (r"\.cuda\(\)", ".cpu()"),
    (r'init_process_group\(backend="nccl"\)', 'init_process_group(backend="gloo")'),
    (r"torch\.cuda\.set_device\(", "(lambda _device: None)("),
]


def cpu_tree(tree: Path, out: Path) -> dict[str, int]:
    """Copy `tree` to `out` (replaced) with DEVICE_REWRITES applied to every .py file; {file: edits} of the files
    that changed."""
    tree, out = tree.resolve(), out.resolve()
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(tree, out, ignore=shutil.ignore_patterns("__pycache__", ".git"))
    edits: dict[str, int] = {}
    for path in sorted(out.rglob("*.py")):
        text = path.read_text()
        count = 0
        for pattern, replacement in DEVICE_REWRITES:
            text, n = re.subn(pattern, replacement, text)
            count += n
        if count:
            path.write_text(text)
            edits[path.relative_to(out).as_posix()] = count
    return edits


def flash_attn_func(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """flash-attn's layout (B, S, H, hd) and default scale hd^-0.5, through SDPA's (B, H, S, hd)."""
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal)
    return out.transpose(1, 2).contiguous()


@torch.no_grad()
def adam_atan2_cuda_impl_(
    params: list[torch.Tensor],
    grads: list[torch.Tensor],
    exp_avgs: list[torch.Tensor],
    exp_avg_sqs: list[torch.Tensor],
    state_steps: list[torch.Tensor],
    lr: float,
    beta1: float,
    beta2: float,
    weight_decay: float,
) -> None:
    """csrc/adam_atan2.cu's FusedAdamMathFunctor on the CPU (the module docstring)."""
    for p, g, m, v, t in zip(params, grads, exp_avgs, exp_avg_sqs, state_steps, strict=True):
        math_dtype = torch.float64 if p.dtype == torch.float64 else torch.float32
        step = float(t.to(torch.float32))
        # the kernel's scalars: computed in double, then cast to the math type
        scalars = torch.tensor(
            [
                lr / (1 - beta1**step),
                1 - lr * weight_decay,
                (1 - beta2**step) ** 0.5,
                1 - beta1,
                1 - beta2,
            ],
            dtype=torch.float64,
        ).to(math_dtype)
        step_size, wd_alpha, bc2_sqrt, mbeta1, mbeta2 = scalars.unbind()
        p32, g32, m32, v32 = p.to(math_dtype), g.to(math_dtype), m.to(math_dtype), v.to(math_dtype)
        p32 = p32 * wd_alpha
        m32 = m32.lerp(g32, mbeta1)  # the kernel's lerp, "identical to PyTorch when t < 0.5" (its comment)
        v32 = v32.lerp(g32 * g32, mbeta2)
        p32 = p32 - step_size * torch.atan2(m32, v32.sqrt() / bc2_sqrt)
        p.copy_(p32)
        m.copy_(m32)
        v.copy_(v32)


@contextlib.contextmanager
def cpu_stand_ins(adam_atan2_source: Path | None = None) -> Iterator[None]:
    """sys.modules with flash-attn's stand-in and, given the adam-atan2 source distribution's root, its package with
    the CPU backend; restored on exit."""
    names = ["flash_attn", "flash_attn_interface", "adam_atan2_backend", "adam_atan2", "adam_atan2.adam_atan2"]
    saved = {k: sys.modules.pop(k) for k in names if k in sys.modules}
    flash = types.ModuleType("flash_attn")
    flash.flash_attn_func = flash_attn_func  # type: ignore[attr-defined]
    sys.modules["flash_attn"] = sys.modules["flash_attn_interface"] = flash
    added_path = None
    if adam_atan2_source is not None:
        root = adam_atan2_source.resolve()
        if not (root / "adam_atan2" / "adam_atan2.py").is_file():
            raise SystemExit(f"{root}: no adam_atan2/adam_atan2.py; pass the root of adam-atan2 0.0.3's sdist")
        backend = types.ModuleType("adam_atan2_backend")
        backend.adam_atan2_cuda_impl_ = adam_atan2_cuda_impl_  # type: ignore[attr-defined]
        sys.modules["adam_atan2_backend"] = backend
        sys.path.insert(0, str(root))
        added_path = str(root)
    try:
        yield
    finally:
        if added_path is not None:
            sys.path.remove(added_path)
        for name in names:
            sys.modules.pop(name, None)
        sys.modules.update(saved)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("tree", type=Path, help="an upstream tree (scratch, outside the repository)")
    parser.add_argument("out", type=Path, help="where its CPU copy goes (replaced)")
    args = parser.parse_args()
    edits = cpu_tree(args.tree, args.out)
    for name, count in edits.items():
        print(f"{name}: {count} device literal(s) rewritten")
    print(f"{args.out}: {sum(edits.values())} rewrites in {len(edits)} file(s); nothing else differs from {args.tree}")


if __name__ == "__main__":
    main()
