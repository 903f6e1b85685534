"""Blocks shared by every model: casted linear/embedding layers, RMSNorm, RoPE, attention, SwiGLU and the I/O core.

Precision follows upstream (HRM/TRM/URM), not `torch.autocast`: parameters are fp32 and cast per layer to the
activation dtype (`forward_dtype`, bf16 on GPU, fp32 on CPU); the recursion state and `H_init`/`L_init` live in the
forward dtype, URM's conv in bf16 (`URMConfig.conv_dtype`); RMSNorm and rotary embeddings compute in fp32 and cast back.

`RecursiveCore` holds the modules every model shares under upstream's attribute names (`embed_tokens`, `lm_head`,
`q_head`, `puzzle_emb`, `rotary_emb`/`embed_pos`), so the state-dict keys equal upstream's. Each model file
(trm.py, hrm.py, urm.py, transformer.py) subclasses it and adds only its levels, initial states and recursion.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from arcpipe.models.sparse_embedding import SparseEmbedding

log = logging.getLogger(__name__)

CosSin = tuple[Tensor, Tensor] | None
InnerCarry = tuple[Tensor, ...]  # (z_H, z_L) for HRM/TRM, (hidden,) for URM and the transformer; each (B, P+L, D)

try:  # flash-attn 2 (HRM and URM use it upstream); optional, GPU only
    from flash_attn import flash_attn_func as _flash_attn_func  # type: ignore[import-not-found]
except ImportError:
    _flash_attn_func = None


def trunc_normal_init_(tensor: Tensor, std: float = 1.0, lower: float = -2.0, upper: float = 2.0) -> Tensor:
    """JAX-style truncated normal whose standard deviation really is `std` (torch's trunc_normal_ is not)."""
    with torch.no_grad():
        if std == 0:
            return tensor.zero_()
        sqrt2 = math.sqrt(2)
        a = math.erf(lower / sqrt2)
        b = math.erf(upper / sqrt2)
        z = (b - a) / 2
        c = (2 * math.pi) ** -0.5
        pdf_u = c * math.exp(-0.5 * lower**2)
        pdf_l = c * math.exp(-0.5 * upper**2)
        comp_std = std / math.sqrt(1 - (upper * pdf_u - lower * pdf_l) / z - ((pdf_u - pdf_l) / z) ** 2)
        tensor.uniform_(a, b)
        tensor.erfinv_()
        tensor.mul_(sqrt2 * comp_std)
        tensor.clip_(lower * comp_std, upper * comp_std)
    return tensor


def rms_norm(x: Tensor, eps: float) -> Tensor:
    """RMSNorm without a learnable scale, computed in fp32 and cast back (upstream's `rms_norm`)."""
    dtype = x.dtype
    x = x.float()
    x = x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps)
    return x.to(dtype)


def intermediate_size(hidden_size: int, expansion: float) -> int:
    """SwiGLU width: round(expansion * D * 2/3) rounded up to a multiple of 256 (1536 for D=512, expansion 4)."""
    return -(round(expansion * hidden_size * 2 / 3) // -256) * 256


class CastedLinear(nn.Module):
    """Linear layer with an fp32 weight cast to the input dtype; truncated LeCun-normal init, zero bias."""

    def __init__(self, in_features: int, out_features: int, bias: bool) -> None:
        super().__init__()
        self.weight = nn.Parameter(
            trunc_normal_init_(torch.empty(out_features, in_features), std=1.0 / in_features**0.5)
        )
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        bias = self.bias.to(x.dtype) if self.bias is not None else None
        return F.linear(x, self.weight.to(x.dtype), bias)


class CastedEmbedding(nn.Module):
    """Embedding table `embedding_weight` (fp32) cast to the forward dtype before the lookup."""

    def __init__(self, num_embeddings: int, embedding_dim: int, init_std: float, cast_to: torch.dtype) -> None:
        super().__init__()
        self.cast_to = cast_to
        self.embedding_weight = nn.Parameter(
            trunc_normal_init_(torch.empty(num_embeddings, embedding_dim), std=init_std)
        )

    def forward(self, ids: Tensor) -> Tensor:
        return F.embedding(ids, self.embedding_weight.to(self.cast_to))


class RotaryEmbedding(nn.Module):
    """RoPE tables (P+L, head_dim) in fp32, built from cat(freqs, freqs); non-persistent like upstream."""

    def __init__(self, dim: int, max_positions: int, base: float) -> None:
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
        freqs = torch.outer(torch.arange(max_positions, dtype=torch.float32), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.cos_cached = nn.Buffer(emb.cos(), persistent=False)
        self.sin_cached = nn.Buffer(emb.sin(), persistent=False)

    def forward(self) -> tuple[Tensor, Tensor]:
        return self.cos_cached, self.sin_cached


def apply_rotary(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    """Rotate q, k (B, S, H, hd) in fp32 by cos/sin (S, hd); rotate_half(x) = cat(-x[hd/2:], x[:hd/2])."""
    dtype = q.dtype
    cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)

    def rotate(x: Tensor) -> Tensor:
        x = x.to(cos.dtype)
        x1, x2 = x.chunk(2, dim=-1)
        return (x * cos + torch.cat((-x2, x1), dim=-1) * sin).to(dtype)

    return rotate(q), rotate(k)


def flash_attention_usable(device: torch.device, dtype: torch.dtype, head_dim: int) -> bool:
    """flash-attn when installed, on an SM 8.0+ GPU, in a half dtype, with a head size it supports."""
    if _flash_attn_func is None or device.type != "cuda" or dtype not in (torch.bfloat16, torch.float16):
        return False
    return torch.cuda.get_device_capability(device)[0] >= 8 and head_dim % 8 == 0 and head_dim <= 256


class Attention(nn.Module):
    """Non-causal multi-head attention; head size = hidden // heads as upstream (12 heads on 512 gives 42)."""

    def __init__(self, hidden_size: int, num_heads: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.output_size = self.head_dim * num_heads
        # rows ordered [all Q heads | all K heads | all V heads], as upstream
        self.qkv_proj = CastedLinear(hidden_size, 3 * self.output_size, bias=False)
        self.o_proj = CastedLinear(self.output_size, hidden_size, bias=False)

    def forward(self, x: Tensor, cos_sin: CosSin) -> Tensor:
        B, S, _ = x.shape
        qkv = self.qkv_proj(x).view(B, S, 3 * self.num_heads, self.head_dim)
        q, k, v = qkv.split(self.num_heads, dim=2)  # each (B, S, H, hd)
        if cos_sin is not None:
            q, k = apply_rotary(q, k, *cos_sin)
        if flash_attention_usable(x.device, x.dtype, self.head_dim):
            out = _flash_attn_func(q, k, v, causal=False)
            out = out[0] if isinstance(out, tuple) else out
        else:
            out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
            out = out.transpose(1, 2)
        return self.o_proj(out.reshape(B, S, self.output_size))


class SwiGLU(nn.Module):
    """down(silu(gate) * up), with gate and up the two halves of `gate_up_proj`."""

    def __init__(self, hidden_size: int, expansion: float) -> None:
        super().__init__()
        inter = intermediate_size(hidden_size, expansion)
        self.gate_up_proj = CastedLinear(hidden_size, 2 * inter, bias=False)
        self.down_proj = CastedLinear(inter, hidden_size, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class ConvSwiGLU(nn.Module):
    """URM's MLP: u = silu(gate) * up, a causal depthwise conv (kernel 2) along tokens, SiLU, then down_proj.

    The conv weight [inter, 1, 2] and bias [inter] are parameters in `dtype` (upstream's nn.Conv1d keys and shapes),
    and the conv, its SiLU and down_proj run in it: upstream hard-codes bf16 whatever the forward dtype
    (URMConfig.conv_dtype picks). `impl` (URMConfig.conv_impl) picks how the conv is computed:

    * "conv1d" (the default): upstream's call, nn.Conv1d on the transposed (B, inter, T) activations, padding 1 on
      both sides and the first T outputs kept. It rounds as upstream's code does on the same device, whatever the
      device's convolution kernel does (cuDNN, oneDNN or torch's own CPU kernel), so an imported checkpoint answers as
      upstream's evaluation does (tests/unit/eval/test_import_answers.py).
    * "elementwise": the conv as what it is, out[t] = w0 * u[t-1] + w1 * u[t] + b on the (B, T, inter) layout,
      accumulated in fp32 (at least) and rounded once to the conv dtype. No transposes and no convolution kernels
      (upstream's path is a transpose copy in, a depthwise convolution kernel and its weight-gradient kernel, and a
      transpose copy out, four times per loop), so the compiler fuses the MLP's elementwise work into the kernels
      around the two matrix products (benchmarks/RESULTS.md, URM). Where the device's bf16 convolution rounds
      otherwise than once from an fp32 sum in this order, its outputs differ by a bf16 step here and there, and the
      model's answers can follow; on the 2-core AMD EPYC (AVX2) of this repository's tests both give the same bits.
    """

    def __init__(
        self, hidden_size: int, expansion: float, dtype: torch.dtype, impl: Literal["conv1d", "elementwise"] = "conv1d"
    ) -> None:
        super().__init__()
        if impl not in ("conv1d", "elementwise"):
            raise ValueError(f"conv impl {impl!r}: expected 'conv1d' or 'elementwise'")
        inter = intermediate_size(hidden_size, expansion)
        self.impl = impl
        self.gate_up_proj = CastedLinear(hidden_size, 2 * inter, bias=False)
        self.dwconv = nn.Conv1d(inter, inter, kernel_size=2, padding=1, groups=inter, bias=True).to(dtype)
        self.down_proj = CastedLinear(inter, hidden_size, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        if self.impl == "conv1d":
            u = (F.silu(gate) * up).transpose(1, 2).to(self.dwconv.weight.dtype)  # (B, inter, T) in the conv dtype
            u = self.dwconv(u)[..., : x.shape[1]]  # padding 1 on both sides, the first T outputs
            u = F.silu(u).transpose(1, 2).contiguous()
        else:
            weight, bias = self.dwconv.weight, self.dwconv.bias
            acc = torch.promote_types(weight.dtype, torch.float32)
            u = (F.silu(gate) * up).to(weight.dtype).to(acc)  # rounded to the conv dtype, as upstream's cast
            previous = F.pad(u[:, :-1], (0, 0, 1, 0))  # u[t-1], zero before the first token (the left padding)
            u = (previous * weight[:, 0, 0].to(acc) + u * weight[:, 0, 1].to(acc) + bias.to(acc)).to(weight.dtype)
            u = F.silu(u)
        # down_proj casts its weight to the conv dtype, as upstream; the exact cast back to x's dtype is what
        # upstream's residual sum (forward dtype + bf16) does by type promotion
        return self.down_proj(u).to(x.dtype)


class Block(nn.Module):
    """Post-norm block: h = norm(h + mixer(h)); h = norm(h + mlp(h)).

    mixer is attention, or with `mlp_t` a SwiGLU across the token axis (TRM's MLP variant, width `seq_len`).
    """

    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        expansion: float,
        rms_norm_eps: float,
        *,
        mlp: Literal["swiglu", "conv_swiglu"] = "swiglu",
        mlp_t_len: int | None = None,
        dtype: torch.dtype = torch.float32,
        conv_impl: Literal["conv1d", "elementwise"] = "conv1d",
    ) -> None:
        super().__init__()
        if mlp_t_len is not None:
            self.mlp_t = SwiGLU(mlp_t_len, expansion)
        else:
            self.self_attn = Attention(hidden_size, num_heads)
        if mlp == "conv_swiglu":
            self.mlp: nn.Module = ConvSwiGLU(hidden_size, expansion, dtype, conv_impl)
        else:
            self.mlp = SwiGLU(hidden_size, expansion)
        self.norm_eps = rms_norm_eps

    def forward(self, h: Tensor, cos_sin: CosSin) -> Tensor:
        if hasattr(self, "mlp_t"):
            t = h.transpose(1, 2)  # (B, D, T): mix along tokens
            h = rms_norm(t + self.mlp_t(t), self.norm_eps).transpose(1, 2)
        else:
            h = rms_norm(h + self.self_attn(h, cos_sin), self.norm_eps)
        return rms_norm(h + self.mlp(h), self.norm_eps)


class ReasoningModule(nn.Module):
    """`H_level`/`L_level`: the blocks applied in order to (h + injection)."""

    def __init__(self, layers: Sequence[Block]) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, h: Tensor, injection: Tensor, cos_sin: CosSin) -> Tensor:
        h = h + injection
        for layer in self.layers:
            h = layer(h, cos_sin)
        return h


class RecursiveCore(nn.Module):
    """I/O shared by every model: token + puzzle embeddings in, lm_head and q_head out.

    Subclasses set the class attributes below and implement `recur`. The carry is a tuple of states, each
    (B, P+L, D) in the forward dtype, reset to the buffer that `states` names for it.
    `forward(carry, batch)` = `recur(carry, input_embeddings(batch))` returns (new carry, logits, q_halt,
    q_continue); the new carry is detached, logits are (B, L, V) in the forward dtype, q values fp32 (B,).
    """

    # halting: "q_halt>0" (TRM no_ACT_continue, URM) or "q_halt>q_continue" (HRM, TRM-continue, transformer)
    halt_rule: str = "q_halt>0"
    bootstrap_q: bool = False  # an extra no-grad forward gives the Q-continue target (HRM)
    states: tuple[str, ...] = ("H_init",)  # the carry's states in order, each by its initial state's buffer

    def __init__(
        self,
        *,
        hidden_size: int,
        num_heads: int,
        vocab_size: int,
        seq_len: int,
        num_puzzle_identifiers: int,
        batch_size: int,
        puzzle_emb_ndim: int,
        puzzle_emb_len: int,
        pos_encodings: str,
        rope_theta: float,
        forward_dtype: torch.dtype,
        halt_max_steps: int,
        halt_exploration_prob: float,
    ) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.seq_len = seq_len
        self.forward_dtype = forward_dtype
        self.halt_max_steps = halt_max_steps
        self.halt_exploration_prob = halt_exploration_prob
        self.puzzle_emb_ndim = puzzle_emb_ndim
        self.puzzle_emb_len = puzzle_emb_len
        self.pos_encodings = pos_encodings
        self.embed_scale = math.sqrt(hidden_size)
        embed_init_std = 1.0 / self.embed_scale

        self.embed_tokens = CastedEmbedding(vocab_size, hidden_size, init_std=embed_init_std, cast_to=forward_dtype)
        self.lm_head = CastedLinear(hidden_size, vocab_size, bias=False)
        self.q_head = CastedLinear(hidden_size, 2, bias=True)
        if puzzle_emb_ndim > 0:
            self.puzzle_emb = SparseEmbedding(num_puzzle_identifiers, puzzle_emb_ndim, batch_size, forward_dtype)
        total = seq_len + puzzle_emb_len
        if pos_encodings == "rope":
            self.rotary_emb = RotaryEmbedding(hidden_size // num_heads, total, rope_theta)
        elif pos_encodings == "learned":
            self.embed_pos = CastedEmbedding(total, hidden_size, init_std=embed_init_std, cast_to=forward_dtype)
        # Q head starts at (almost) "never halt" so the model bootstraps before it learns to stop
        with torch.no_grad():
            self.q_head.weight.zero_()
            self.q_head.bias.fill_(-5)

    # -- subclass API ----------------------------------------------------------------------------------------

    def recur(self, carry: InnerCarry, x: Tensor) -> tuple[InnerCarry, Tensor]:
        """One ACT step of the recursion from `carry` with input embedding x (B, P+L, D); returns (carry, z)."""
        raise NotImplementedError

    # -- shared ----------------------------------------------------------------------------------------------

    def input_embeddings(self, inputs: Tensor, puzzle_identifiers: Tensor) -> Tensor:
        """(B, L) tokens and (B,) ids -> (B, P+L, D): the puzzle prefix, then tokens, scaled by sqrt(D)."""
        x = self.embed_tokens(inputs.to(torch.int32))
        if self.puzzle_emb_ndim > 0:
            pe = self.puzzle_emb(puzzle_identifiers)  # (B, ndim)
            pad = self.puzzle_emb_len * self.hidden_size - pe.shape[-1]
            if pad > 0:
                pe = F.pad(pe, (0, pad))
            x = torch.cat((pe.view(-1, self.puzzle_emb_len, self.hidden_size), x), dim=-2)
        if self.pos_encodings == "learned":
            x = 0.707106781 * (x + self.embed_pos.embedding_weight.to(self.forward_dtype))  # keep the variance
        return self.embed_scale * x

    def cos_sin(self) -> CosSin:
        return self.rotary_emb() if self.pos_encodings == "rope" else None

    def heads(self, z: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """logits (B, L, V) from the token positions; q_halt, q_continue (B,) fp32 from prefix position 0."""
        logits = self.lm_head(z)[:, self.puzzle_emb_len :]
        q = self.q_head(z[:, 0]).float()
        return logits, q[..., 0], q[..., 1]

    def forward(self, carry: InnerCarry, batch: dict[str, Tensor]) -> tuple[InnerCarry, Tensor, Tensor, Tensor]:
        x = self.input_embeddings(batch["inputs"], batch["puzzle_identifiers"])
        carry, z = self.recur(carry, x)
        return (carry, *self.heads(z))

    def state_shape(self, batch_size: int) -> tuple[int, int, int]:
        return (batch_size, self.seq_len + self.puzzle_emb_len, self.hidden_size)

    def empty_carry(self, batch_size: int, device: torch.device) -> InnerCarry:
        """Uninitialised states: every row is reset (`reset_carry`) before its first step."""
        shape = self.state_shape(batch_size)
        return tuple(torch.empty(shape, dtype=self.forward_dtype, device=device) for _ in self.states)

    def reset_carry(self, reset: Tensor, carry: InnerCarry) -> InnerCarry:
        """The rows where `reset` (B,) holds start again from the initial states."""
        r = reset.view(-1, 1, 1)
        return tuple(torch.where(r, getattr(self, name), z) for name, z in zip(self.states, carry, strict=True))


def make_blocks(n: int, **kwargs: object) -> ReasoningModule:
    return ReasoningModule([Block(**kwargs) for _ in range(n)])  # type: ignore[arg-type]


def init_state(hidden_size: int, dtype: torch.dtype) -> nn.Buffer:
    """An initial latent vector (D,) in the forward dtype, truncated normal std 1, saved but never trained."""
    return nn.Buffer(trunc_normal_init_(torch.empty(hidden_size, dtype=dtype), std=1), persistent=True)
