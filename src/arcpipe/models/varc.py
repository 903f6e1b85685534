"""VARC-ViT, the vision transformer of "ARC Is a Vision Problem!" (upstream VARC 537b01e, src/ARC_ViT.py).

    model = VARCViT(make_arch_config("varc", "arc", {}), num_tasks=400)
    logits = model(pixels, task_ids, mask)  # (B, S, S) colours, (B,) tasks, (B, S, S) input grid -> (B, 12, S, S)

The function is upstream's (upstream-varc.md 2.4-2.7), with its state-dict keys (2.11), so that upstream's
checkpoints load unchanged and the golden test compares it with upstream's own code:

1. every pixel's colour is embedded (`color_embed`, 12 x D), then a p x p stride-p convolution D -> D (`patch_embed`,
   timm's PatchEmbed without norm) makes (S/p)^2 patch tokens, row-major, plus a learned absolute position each;
2. the task's token (`task_token_embed`) is prepended, without a position; dropout on the whole sequence;
3. `depth` post-norm encoder layers, x = LN1(x + drop(attn(x))), x = LN2(x + drop(W2 drop(GELU(W1 x)))), exact GELU,
   then a final LayerNorm;
4. the head maps each patch token to p x p x 12 logits, unpatchified to (B, 12, S, S).

Attention has a fused qkv, 2D rotary embeddings on q and k (EVA-02's `VisionRotaryEmbeddingFast`: in each head,
channels [0, hd/2) turn with the patch row, [hd/2, hd) with the patch column, adjacent channels form the rotated
pairs, theta 10000; the task token is not rotated), and a key mask: a patch takes part when any of its pixels is
on the input grid (the mask max-pooled per patch); the task token always does. Every query gets an output.

One change of form, not of function: attention runs through `F.scaled_dot_product_attention` with a boolean key mask
and `dropout_p` while training, where upstream writes the matmul, a fill with the dtype's minimum, the softmax and
dropout on the weights. The masked keys get zero weight in both (the task token is never masked, so no row is empty);
the sums run in another order, so results agree to rounding; the dropout draws differ.

No host syncs and no branch on data: a compiled step traces it whole (`torch.compile(fullgraph=True)`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from arcpipe.config.arch import VARCConfig

ROPE_THETA = 10000.0
EMBED_INIT_STD = 0.02  # trunc-normal, cut at +-2 absolute (torch's default a, b), as upstream


class PatchEmbed(nn.Module):
    """timm's PatchEmbed as upstream builds it (in_chans = embed_dim, bias, no norm): (B, D, S, S) -> (B, N, D)."""

    def __init__(self, embed_dim: int, patch_size: int) -> None:
        super().__init__()
        self.proj = nn.Conv2d(embed_dim, embed_dim, kernel_size=patch_size, stride=patch_size, bias=True)

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(x).flatten(2).transpose(1, 2)  # (B, D, S/p, S/p) -> (B, N, D), row-major


class Rotary2D(nn.Module):
    """2D rotary embedding of the patch tokens (positions 1..N of the sequence; position 0, the task token, stays).

    `freqs_cos`/`freqs_sin` (N, head_dim) are persistent buffers, as upstream's, computed as upstream computes them
    (in fp32 on the CPU) so that a fresh model holds the same numbers as an upstream checkpoint.
    """

    def __init__(self, head_dim: int, grid_side: int) -> None:
        super().__init__()
        cos, sin = _rope_tables(head_dim, grid_side)
        device = torch.get_default_device()  # the device the model is being built on (build_model's context)
        self.register_buffer("freqs_cos", cos.to(device))
        self.register_buffer("freqs_sin", sin.to(device))

    def forward(self, x: Tensor) -> Tensor:
        # x: (B, H, T, hd) with T = 1 + N
        patches = x[:, :, 1:]
        rotated = patches * self.freqs_cos + _rotate_pairs(patches) * self.freqs_sin
        # the buffers are fp32 (the model's dtype outside autocast): keep q, k in the activations' dtype
        return torch.cat([x[:, :, :1], rotated.to(x.dtype)], dim=2)


class Attention(nn.Module):
    """Multi-head self-attention with a fused qkv (rows q | k | v, each heads x head_dim) and 2D RoPE."""

    def __init__(self, cfg: VARCConfig) -> None:
        super().__init__()
        self.num_heads = cfg.num_heads
        self.dropout = cfg.dropout  # on the attention weights (SDPA's dropout_p)
        self.qkv = nn.Linear(cfg.embed_dim, 3 * cfg.embed_dim)
        self.proj = nn.Linear(cfg.embed_dim, cfg.embed_dim)
        self.proj_dropout = nn.Dropout(cfg.dropout)
        self.rotary = Rotary2D(cfg.head_dim, cfg.grid_side)

    def forward(self, x: Tensor, keep: Tensor) -> Tensor:
        # x: (B, T, D); keep: (B, 1, 1, T), True where a key takes part
        B, T, D = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.num_heads, D // self.num_heads).permute(2, 0, 3, 1, 4)
        q, k = self.rotary(q), self.rotary(k)  # (B, H, T, hd)
        context = F.scaled_dot_product_attention(
            q, k, v, attn_mask=keep, dropout_p=self.dropout if self.training else 0.0
        )
        return self.proj_dropout(self.proj(context.transpose(1, 2).reshape(B, T, D)))


class EncoderLayer(nn.Module):
    """Post-norm transformer layer (upstream's ARCTransformerEncoderLayer; submodule names are its keys)."""

    def __init__(self, cfg: VARCConfig) -> None:
        super().__init__()
        self.self_attn = Attention(cfg)
        self.dropout1 = nn.Dropout(cfg.dropout)
        self.norm1 = nn.LayerNorm(cfg.embed_dim)
        self.linear1 = nn.Linear(cfg.embed_dim, cfg.mlp_dim)
        self.activation = nn.GELU()  # exact (erf), not tanh
        self.dropout2 = nn.Dropout(cfg.dropout)
        self.linear2 = nn.Linear(cfg.mlp_dim, cfg.embed_dim)
        self.dropout3 = nn.Dropout(cfg.dropout)
        self.norm2 = nn.LayerNorm(cfg.embed_dim)

    def forward(self, x: Tensor, keep: Tensor) -> Tensor:
        x = self.norm1(x + self.dropout1(self.self_attn(x, keep)))
        return self.norm2(x + self.dropout3(self.linear2(self.dropout2(self.activation(self.linear1(x))))))


class Encoder(nn.Module):
    def __init__(self, cfg: VARCConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.depth))

    def forward(self, x: Tensor, keep: Tensor) -> Tensor:
        for layer in self.layers:
            x = layer(x, keep)
        return x


class VARCViT(nn.Module):
    """`model(pixels, task_ids, mask)` -> logits (B, num_colors, S, S); see the module doc.

    pixels: (B, S, S) integer colours 0..11 (10 is the canvas background); task_ids: (B,) rows of `task_token_embed`;
    mask: (B, S, S) bool, True on the input grid's pixels.
    """

    def __init__(self, cfg: VARCConfig, num_tasks: int) -> None:
        super().__init__()
        if num_tasks <= 0:
            raise ValueError(f"num_tasks={num_tasks}: VARC needs at least one task token")
        self.config = cfg
        D = cfg.embed_dim
        # built in upstream's order, so that under one seed the default inits draw the same numbers as upstream's
        self.color_embed = nn.Embedding(cfg.num_colors, D)
        self.task_token_embed = nn.Embedding(num_tasks, D)
        self.patch_embed = PatchEmbed(D, cfg.patch_size)
        self.positional_embed = nn.Parameter(torch.zeros(1, cfg.num_patches, D))
        self.encoder = Encoder(cfg)
        self.dropout = nn.Dropout(cfg.dropout)
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, cfg.num_colors * cfg.patch_size**2)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Upstream's `_reset_parameters`: trunc-normal(0.02) embeddings, zero head bias; the rest keeps torch's
        default init from construction."""
        nn.init.trunc_normal_(self.positional_embed, std=EMBED_INIT_STD)
        nn.init.trunc_normal_(self.task_token_embed.weight, std=EMBED_INIT_STD)
        nn.init.trunc_normal_(self.color_embed.weight, std=EMBED_INIT_STD)
        nn.init.zeros_(self.head.bias)

    def forward(self, pixels: Tensor, task_ids: Tensor, mask: Tensor) -> Tensor:
        cfg = self.config
        S, p, g, C = cfg.image_size, cfg.patch_size, cfg.grid_side, cfg.num_colors
        check_canvas_inputs(pixels, task_ids, mask, S, "VARCViT")
        B = pixels.shape[0]

        tokens = self.patch_embed(self.color_embed(pixels).permute(0, 3, 1, 2))  # (B, N, D): embed, then patchify
        tokens = tokens + self.positional_embed
        task = self.task_token_embed(task_ids).unsqueeze(1)  # (B, 1, D)
        x = self.dropout(torch.cat([task, tokens], dim=1))  # (B, T, D), T = 1 + N

        patch_keep = mask.view(B, g, p, g, p).any(dim=4).any(dim=2).flatten(1)  # (B, N): any pixel on the grid
        keep = torch.cat([torch.ones_like(patch_keep[:, :1]), patch_keep], dim=1)  # the task token always
        x = self.norm(self.encoder(x, keep[:, None, None, :]))

        logits = self.head(x[:, 1:])  # (B, N, p*p*C), per patch: (pixel row, pixel column, colour)
        # (B, g, g, p, p, C) -> (B, C, patch row, pixel row, patch column, pixel column) -> (B, C, S, S)
        return logits.view(B, g, g, p, p, C).permute(0, 5, 1, 3, 2, 4).reshape(B, C, S, S)


def count_parameters_excluding_task_tokens(model: nn.Module) -> int:
    """Parameters as upstream counts and prints them (its `count_parameters`): all but the task-token table."""
    return sum(p.numel() for name, p in model.named_parameters() if "task_token" not in name)


def preset_parameter_count(cfg: VARCConfig) -> int:
    """Parameters of a config without its task-token table, built on the meta device (no memory, no init cost)."""
    with torch.device("meta"):
        return count_parameters_excluding_task_tokens(VARCViT(cfg, num_tasks=1))


# ------------------------------------------------------------------------------------------------------------------


def _rope_tables(head_dim: int, grid_side: int) -> tuple[Tensor, Tensor]:
    """cos and sin (N, head_dim) of upstream's VisionRotaryEmbeddingFast(dim=head_dim // 2, pt_seq_len=grid_side),
    step for step in fp32 on the CPU (the same expressions round the same way)."""
    dim = head_dim // 2  # channels per axis
    inv_freq = 1.0 / (ROPE_THETA ** (torch.arange(0, dim, 2, device="cpu")[: dim // 2].float() / dim))  # (dim/2,)
    t = torch.arange(grid_side, device="cpu") / grid_side * grid_side  # patch index, as upstream writes it
    freqs = (t[:, None] * inv_freq[None, :]).repeat_interleave(2, dim=-1)  # (g, dim): each frequency on a pair
    rows = freqs[:, None, :].expand(grid_side, grid_side, dim)  # turns with the patch row
    cols = freqs[None, :, :].expand(grid_side, grid_side, dim)  # with the patch column
    table = torch.cat([rows, cols], dim=-1).reshape(grid_side * grid_side, 2 * dim)  # (N, hd), row-major
    return table.cos(), table.sin()


def _rotate_pairs(x: Tensor) -> Tensor:
    """(x0, x1, x2, x3, ...) -> (-x1, x0, -x3, x2, ...): adjacent channels are the rotated pairs."""
    x1, x2 = x.unflatten(-1, (-1, 2)).unbind(-1)
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def check_canvas_inputs(pixels: Tensor, task_ids: Tensor, mask: Tensor, side: int, model: str) -> None:
    """A canvas model's inputs (VARCViT, VARCUNet): one line naming every wrong shape or dtype. Shapes and dtypes
    only: static under torch.compile, no host sync."""
    B = pixels.shape[0] if pixels.ndim else 0
    problems = []
    if pixels.ndim != 3 or pixels.shape[1:] != (side, side):
        problems.append(f"pixels of shape {tuple(pixels.shape)}, expected (B, {side}, {side})")
    if pixels.is_floating_point():
        problems.append(f"pixels of dtype {pixels.dtype}, expected integer colours")
    if task_ids.shape != (B,):
        problems.append(f"task_ids of shape {tuple(task_ids.shape)}, expected ({B},)")
    if mask.shape != pixels.shape or mask.dtype != torch.bool:
        problems.append(
            f"mask of shape {tuple(mask.shape)} and dtype {mask.dtype}, expected bool {tuple(pixels.shape)}"
        )
    if problems:
        raise ValueError(f"{model} (image_size {side}): " + "; ".join(problems))
