"""bf16's own rounding, simulated in float64: how far one ACT step of a golden moves when every value it computes is
rounded at bf16's unit roundoff (imported as `roundoff` by test_bf16.py and tests/tools/record_bf16_envelope.py).

A bf16 forward rounds each op's result to 8 significant bits: a relative error of up to u = 2^-8. Which error each
value gets depends on the kernels (the order of a sum, fused or split ops, native AVX-512 BF16 dot products or
emulated ones), so the bf16 logits of a golden differ from CPU to CPU, and where the recursion amplifies rounding
(these hidden-16 random weights: ~10^2 to 10^3 over four ACT steps) they differ a lot. What does not depend on the
CPU is the envelope: the same model in float64 (exact to ~1e-16 on any CPU), with every rounding point given a
seeded random relative error in [-u, u] (`BF16Roundoff`), and the weights and initial states so perturbed once per
draw (bf16 rounds a weight the same way at every call). Many draws sample the outcomes a correct bf16 forward can
have; the largest error over the draws, per step, is the step's measured sensitivity to bf16 rounding.

Rounding points, as in arcpipe's bf16 path: the result of every arithmetic op in the forward dtype (`ROUNDING_OPS`),
every cast into it from another float dtype except a parameter's (RMSNorm and RoPE compute in fp32 and round back),
and inside attention the scores, the probabilities and the output (SDPA and flash-attn keep the probabilities in
bf16 for the second matmul). Layout ops (views, cat, transpose), lookups, `where` and negation are exact in bf16 and
are left alone. Parts that stay in fp32 or bf16 whatever the forward dtype (RMSNorm's statistics, the Q values,
URM's bf16 conv) compute as they do.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from arcpipe.models.registry import build_model, make_arch_config

U = 2.0**-8  # bf16's unit roundoff: 8 significant bits, round to nearest
ROUNDING_OPS = {
    "add", "sub", "mul", "div", "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__",
    "__truediv__", "__rdiv__", "linear", "matmul", "bmm", "silu", "conv1d", "sum", "mean", "square", "rsqrt",
    "softmax", "exp", "log",
}  # fmt: skip
CASTS = {"to", "float", "double", "type"}


class BF16Roundoff(TorchFunctionMode):
    """Every float64 result of a rounding op, or of a cast into float64, times (1 + u*r), r uniform in [-1, 1]."""

    def __init__(self, generator: torch.Generator) -> None:
        super().__init__()
        self.generator = generator

    def round(self, t: torch.Tensor) -> torch.Tensor:
        r = torch.rand(t.shape, generator=self.generator, dtype=torch.float64) * 2 - 1
        return t * (1 + U * r)

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention:  # the layout arcpipe calls it with: (B, H, S, hd), no mask
            q, k, v = args[:3]
            scores = self.round(q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5)
            probs = self.round(torch.softmax(scores, dim=-1))
            return self.round(probs @ v)
        out = func(*args, **kwargs)
        if not isinstance(out, torch.Tensor) or out.dtype != torch.float64:
            return out
        name = getattr(func, "__name__", "")
        if name in ROUNDING_OPS:
            return self.round(out)
        source = args[0] if args else None
        if (
            name in CASTS
            and isinstance(source, torch.Tensor)
            and source.dtype != torch.float64
            and source.is_floating_point()
            and not isinstance(source, torch.nn.Parameter)
        ):
            return self.round(out)
        return out


def eval_steps(golden: dict) -> list[dict]:
    return [s for s in golden["steps"] if s["mode"] == "eval"]  # deterministic halting: max_steps each


def golden_head(golden: dict, dtype: torch.dtype) -> torch.nn.Module:
    head = build_model(
        make_arch_config(golden["arch"], "tiny", golden["arch_config"]),
        **golden["dataset"],
        batch_size=golden["batch_size"],
        device="cpu",
        forward_dtype=dtype,
    )
    head.load_state_dict(golden["weights"])
    return head.eval()


def run_steps(head: torch.nn.Module, golden: dict, mode: BF16Roundoff | None = None) -> list[dict[str, torch.Tensor]]:
    """The golden's evaluation steps from its first batch: logits and q_halt_logits of each."""
    carry = head.initial_carry(golden["first_batch"])
    outs = []
    with torch.no_grad():
        for step in eval_steps(golden):
            if mode is None:
                carry, _, _, out, _ = head(carry, step["batch"], ["logits", "q_halt_logits"])
            else:
                with mode:
                    carry, _, _, out, _ = head(carry, step["batch"], ["logits", "q_halt_logits"])
            outs.append(out)
    return outs


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    """max |got - want| over max |want|."""
    want = want.double()
    return ((got.double() - want).abs().max() / want.abs().max()).item()


def step_errors(golden: dict, outs: list[dict[str, torch.Tensor]]) -> Iterator[tuple[float, float]]:
    """(logits error, q_halt error) of each step against the golden."""
    for want, got in zip(eval_steps(golden), outs, strict=True):
        yield rel_err(got["logits"], want["logits"]), rel_err(got["q_halt_logits"], want["q_halt"])


def draw(golden: dict, seed: int) -> list[tuple[float, float]]:
    """One simulated bf16 forward (float64, seeded roundings): its (logits, q_halt) error at each step."""
    head = golden_head(golden, torch.float64)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # bf16 rounds each weight and initial state once: the same error at every call
        for t in [*head.parameters(), *head.buffers()]:
            if t.dtype in (torch.float32, torch.float64):  # URM's bf16 conv is bf16 in both paths: left alone
                t.mul_((1 + U * (torch.rand(t.shape, generator=generator, dtype=torch.float64) * 2 - 1)).to(t.dtype))
    return list(step_errors(golden, run_steps(head, golden, BF16Roundoff(generator))))


def bf16_kernel_fingerprint() -> str:
    """sha256 of what this machine's bf16 kernels give on fixed data, forward and backward: a bf16 matmul shaped as
    URM's down_proj here and a bf16 depthwise Conv1d shaped as its conv (the only parts of URM that stay bf16 in a
    float64 forward), and the gradients of each with respect to its input and weights. Where a machine's fingerprint
    equals a golden's, its kernels round as the recording machine's did, and the URM replay is compared tightly
    (test_upstream_parity.py). The backward counts: on an AMD EPYC with AVX-512 BF16, oneDNN's bf16 forward gave the
    AVX2 recording machine's bits and its backward did not (the puzzle-embedding gradient 12% off in one entry).
    Shared by that test and tests/tools/record_goldens.py."""
    g = torch.Generator().manual_seed(0)
    u = torch.randn(3, 28, 256, generator=g).to(torch.bfloat16).requires_grad_()
    w = (torch.randn(16, 256, generator=g) / 16).to(torch.bfloat16).requires_grad_()
    conv_w = torch.randn(256, 1, 2, generator=g).to(torch.bfloat16).requires_grad_()
    conv_b = torch.randn(256, generator=g).to(torch.bfloat16).requires_grad_()
    linear = F.linear(u, w)
    conv = F.conv1d(u.transpose(1, 2), conv_w, conv_b, padding=1, groups=256)
    grads = torch.autograd.grad(
        (linear, conv),
        (u, w, conv_w, conv_b),
        (
            torch.randn(linear.shape, generator=g).to(torch.bfloat16),
            torch.randn(conv.shape, generator=g).to(torch.bfloat16),
        ),
    )
    out = b"".join(t.detach().float().numpy().tobytes() for t in (linear, conv, *grads))
    return hashlib.sha256(out).hexdigest()
