"""LoopViT, the looped vision transformer of "Scaling Visual ARC with Looped Transformers" (WenjieShu/LoopViT 4cdbdf4,
src/ARC_LoopViT.py with the layers of src/ARC_ViT.py or src/ARC_ViT1.py).

    model = LoopViT(make_arch_config("loopvit", "tiny", {}), num_tasks=400)
    out = model(pixels, task_ids, mask, dynamic_exit=True)  # out.logits (B, 12, S, S), out.exit_steps (B,)

VARC-ViT's canvas model (models/varc.py: colour embedding, p x p patch convolution, learned positions, one task token
first, a final LayerNorm and the per-patch head) with its encoder replaced by a loop, under upstream's state-dict keys
(`core_layers`, `step_embed`, `exit_gate`), so that upstream's checkpoints load unchanged:

1. for step t = 0 .. max_loop_steps - 1: add the step's learned embedding (`step_embed[t]`) to every token, then run
   the `loop_core_depth` layers of the core, the same weights at every step;
2. after each step the exit gate (LayerNorm, Linear D -> D/2, GELU, Linear -> 1, sigmoid) reads the task token and
   gives the row's probability of stopping;
3. with dynamic exit, a row whose gate reaches `exit_gate_threshold` at a step >= `min_loop_steps` stops: its state
   is kept from then on (later steps still compute on it, as upstream's do, and are thrown away) and its exit step is
   recorded; the others run to `max_loop_steps`.

The layers: `block: vit` is VARC's post-norm layer (upstream's `--architecture loop_vit`, models/varc.EncoderLayer);
`block: hybrid` is upstream's `loop_vit1` layer: x + attn(RMSNorm(x)), then x + ConvGLU(RMSNorm(x)), where ConvGLU
projects to 2 x H channels (H = int(2 mlp_dim / 3)), splits them into a gate and a value, runs a depthwise 3 x 3
convolution over the gate's patch tokens (the task token's gate passes unchanged), and returns fc2(GELU(gate) x value).
RMSNorm is scale x x / sqrt(mean(x^2) + 1e-6). Attention is VARC's (2D RoPE, the key mask from the input grid).

The exit is written as masks (`torch.where` on the state, the exit step and the finished flags): no branch on data
and no host sync, so a compiled step traces it whole. Upstream's loop stops early only when every row of the batch has
exited (`finished_mask.all()`, a host sync each step); here the batch always runs `max_loop_steps`, and what upstream
computes is reproduced exactly: the rows' outputs, their exit steps, and the gate probabilities the regularizer sees
(those of the steps upstream ran, i.e. up to the batch's largest exit step: `LoopOutput.ran_steps`).

Training's extra terms (upstream's offline trainer, `_compute_gate_regularizers`; `loop_regularizers` here): the
gates' mean negative binary entropy (eps 1e-6 inside the logs) over rows x steps ran, weighted by
`gate_entropy_weight`, and the mean exit step over max_loop_steps, weighted by `loop_penalty_weight`. The exit step
is an integer: the loop penalty adds a constant and no gradient (upstream's too).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from arcpipe.config.arch import LoopViTConfig, VARCConfig
from arcpipe.models.varc import EMBED_INIT_STD, Attention, EncoderLayer, PatchEmbed, check_canvas_inputs

RMS_EPS = 1e-6
GATE_ENTROPY_EPS = 1e-6


class LoopOutput(NamedTuple):
    logits: Tensor  # (B, C, S, S) from each row's final state
    gate_probs: Tensor  # (B, max_loop_steps) the exit gate after each step ((B, 0) without a gate)
    exit_steps: Tensor  # (B,) int64: the step each row stopped after (max_loop_steps when it never exited)
    ran_steps: Tensor  # () int64: the steps upstream's loop would have run (its largest exit step)
    step_logits: tuple[Tensor, ...]  # each step's logits before the exit's selection (only when asked for)


class RMSNorm(nn.Module):
    """Upstream's RMSNorm (parameter `scale`, eps inside the root)."""

    def __init__(self, dim: int, eps: float = RMS_EPS) -> None:
        super().__init__()
        self.eps = eps
        self.scale = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        return self.scale * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


class ConvGLU(nn.Module):
    """Upstream's ConvolutionalGLU: fc1 -> (gate, value); depthwise 3 x 3 conv on the patch tokens' gate."""

    def __init__(self, cfg: LoopViTConfig) -> None:
        super().__init__()
        hidden = int(2 * cfg.mlp_dim / 3)
        self.fc1 = nn.Linear(cfg.embed_dim, 2 * hidden)
        self.dwconv = nn.Conv2d(hidden, hidden, kernel_size=3, stride=1, padding=1, groups=hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, cfg.embed_dim)
        self.drop = nn.Dropout(cfg.dropout)
        self.grid_side = cfg.grid_side

    def forward(self, x: Tensor) -> Tensor:
        gate, value = self.fc1(x).chunk(2, dim=-1)
        B, T, H = gate.shape
        g = self.grid_side
        image = self.dwconv(gate[:, 1:].transpose(1, 2).reshape(B, H, g, g)).flatten(2).transpose(1, 2)
        gate = torch.cat([gate[:, :1], image], dim=1)
        return self.drop(self.fc2(self.drop(self.act(gate) * value)))


class HybridLayer(nn.Module):
    """Upstream's loop_vit1 layer (ARC_ViT1.ARCTransformerEncoderLayer): pre-RMSNorm attention and ConvGLU."""

    def __init__(self, cfg: LoopViTConfig) -> None:
        super().__init__()
        self.self_attn = Attention(cfg.layer_config())
        self.dropout1 = nn.Dropout(cfg.dropout)
        self.norm1 = RMSNorm(cfg.embed_dim)
        self.mlp = ConvGLU(cfg)
        self.dropout2 = nn.Dropout(cfg.dropout)
        self.norm2 = RMSNorm(cfg.embed_dim)

    def forward(self, x: Tensor, keep: Tensor) -> Tensor:
        x = x + self.dropout1(self.self_attn(self.norm1(x), keep))
        return x + self.dropout2(self.mlp(self.norm2(x)))


class LoopViT(nn.Module):
    """`model(pixels, task_ids, mask, dynamic_exit=...)` -> LoopOutput; see the module doc. Inputs as VARCViT's."""

    def __init__(self, cfg: LoopViTConfig, num_tasks: int) -> None:
        super().__init__()
        if num_tasks <= 0:
            raise ValueError(f"num_tasks={num_tasks}: LoopViT needs at least one task token")
        self.config = cfg
        D = cfg.embed_dim
        layer_cfg: VARCConfig = cfg.layer_config()
        # built in upstream's order, so that under one seed the default inits draw the same numbers as upstream's
        self.color_embed = nn.Embedding(cfg.num_colors, D)
        self.task_token_embed = nn.Embedding(num_tasks, D)
        self.patch_embed = PatchEmbed(D, cfg.patch_size)
        self.positional_embed = nn.Parameter(torch.zeros(1, cfg.num_patches, D))
        layers = [
            HybridLayer(cfg) if cfg.block == "hybrid" else EncoderLayer(layer_cfg) for _ in range(cfg.loop_core_depth)
        ]
        self.core_layers = nn.ModuleList(layers)
        self.step_embed = nn.Embedding(cfg.max_loop_steps, D) if cfg.step_embedding else None
        self.exit_gate = (
            nn.Sequential(nn.LayerNorm(D), nn.Linear(D, D // 2), nn.GELU(), nn.Linear(D // 2, 1))
            if cfg.exit_gate
            else None
        )
        self.dropout = nn.Dropout(cfg.dropout)
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, cfg.num_colors * cfg.patch_size**2)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Upstream's `_reset_parameters`: trunc-normal(0.02) embeddings and gate weights, zero head and gate biases;
        the rest keeps torch's default init from construction."""
        nn.init.trunc_normal_(self.positional_embed, std=EMBED_INIT_STD)
        nn.init.trunc_normal_(self.task_token_embed.weight, std=EMBED_INIT_STD)
        nn.init.trunc_normal_(self.color_embed.weight, std=EMBED_INIT_STD)
        nn.init.zeros_(self.head.bias)
        if self.step_embed is not None:
            nn.init.trunc_normal_(self.step_embed.weight, std=EMBED_INIT_STD)
        if self.exit_gate is not None:
            for module in self.exit_gate:
                if isinstance(module, nn.Linear):
                    nn.init.trunc_normal_(module.weight, std=EMBED_INIT_STD)
                    nn.init.zeros_(module.bias)

    def project(self, x: Tensor) -> Tensor:
        """The final LayerNorm and the head on a state (B, T, D) -> logits (B, C, S, S)."""
        cfg = self.config
        S, p, g, C = cfg.image_size, cfg.patch_size, cfg.grid_side, cfg.num_colors
        logits = self.head(self.norm(x)[:, 1:])
        return logits.view(-1, g, g, p, p, C).permute(0, 5, 1, 3, 2, 4).reshape(-1, C, S, S)

    def forward(
        self, pixels: Tensor, task_ids: Tensor, mask: Tensor, *, dynamic_exit: bool = False, step_logits: bool = False
    ) -> LoopOutput:
        cfg = self.config
        S, p, g, T = cfg.image_size, cfg.patch_size, cfg.grid_side, cfg.max_loop_steps
        check_canvas_inputs(pixels, task_ids, mask, S, "LoopViT")
        B = pixels.shape[0]

        tokens = self.patch_embed(self.color_embed(pixels).permute(0, 3, 1, 2)) + self.positional_embed
        task = self.task_token_embed(task_ids).unsqueeze(1)
        x = self.dropout(torch.cat([task, tokens], dim=1))  # (B, 1 + N, D)
        patch_keep = mask.view(B, g, p, g, p).any(dim=4).any(dim=2).flatten(1)
        keep = torch.cat([torch.ones_like(patch_keep[:, :1]), patch_keep], dim=1)[:, None, None, :]

        exiting = dynamic_exit and self.exit_gate is not None
        finished = torch.zeros(B, dtype=torch.bool, device=x.device)
        kept = torch.zeros_like(x)  # the state of each exited row
        exit_steps = torch.full((B,), T, dtype=torch.long, device=x.device)
        gates, per_step = [], []
        for step in range(T):
            if self.step_embed is not None:
                x = x + self.step_embed.weight[step]
            for layer in self.core_layers:
                x = layer(x, keep)
            if step_logits:
                per_step.append(self.project(x))
            if self.exit_gate is None:
                continue
            gate = torch.sigmoid(self.exit_gate(x[:, 0]).squeeze(-1))
            gates.append(gate)
            if not exiting:
                continue
            if step + 1 >= cfg.min_loop_steps:
                exit_now = (gate >= cfg.exit_gate_threshold) & ~finished
                kept = torch.where(exit_now[:, None, None], x, kept)
                exit_steps = torch.where(exit_now, step + 1, exit_steps)
                finished = finished | exit_now
            x = torch.where(finished[:, None, None], kept, x)

        gate_probs = torch.stack(gates, dim=1) if gates else x.new_zeros(B, 0)
        return LoopOutput(self.project(x), gate_probs, exit_steps, exit_steps.max(), tuple(per_step))


ENTROPY_EPS = 1e-8  # upstream's (prev - now) / (prev + 1e-8)


def entropy_exit_steps(out: LoopOutput, patience: int, threshold: float) -> Tensor:
    """(B,) the step each row answers from under upstream's entropy exit (`--exit-on-entropy-stable`, its
    test-time-training evaluation): each step's mean pixel entropy over the whole canvas (softmax over the colours in
    float32, as upstream's compute_entropy); a step whose entropy fell by less than `threshold` of the step before's
    counts, any other resets the count, and the row exits at the first step where the count reaches `patience`;
    then the earlier of that and the row's gate exit (`out.exit_steps`; without an exit, the last step). Upstream's
    loop runs only up to the batch's last gate exit and looks no further; a row's own gate exit is never later, so
    the earlier of the two is the same here, where every step runs. Needs `out.step_logits` (forward with
    step_logits=True). Masks, no host sync: the loop is over the configured steps."""
    if not out.step_logits:
        raise ValueError("entropy_exit_steps needs the per-step logits: call the model with step_logits=True")
    entropies = []
    for logits in out.step_logits:  # (B, C, S, S)
        logp = F.log_softmax(logits.float(), dim=1)
        entropies.append(-(logp.exp() * logp).sum(dim=1).flatten(1).mean(dim=1))
    exit_at = out.exit_steps.clone()
    count = torch.zeros_like(exit_at)
    found = torch.zeros_like(exit_at, dtype=torch.bool)
    for step in range(1, len(entropies)):
        before, now = entropies[step - 1], entropies[step]
        count = torch.where((before - now) / (before + ENTROPY_EPS) < threshold, count + 1, 0)
        hit = (count >= patience) & ~found
        exit_at = torch.where(hit, step + 1, exit_at)
        found = found | hit
    return torch.minimum(exit_at, out.exit_steps)


def logits_at_steps(out: LoopOutput, steps: Tensor) -> Tensor:
    """(B, C, S, S) each row's logits after its step `steps[row]` (1-based), from `out.step_logits`."""
    stacked = torch.stack(out.step_logits, dim=1)  # (B, T, C, S, S)
    index = (steps - 1).view(-1, 1, 1, 1, 1).expand(-1, 1, *stacked.shape[2:])
    return stacked.gather(1, index).squeeze(1)


def loop_regularizers(out: LoopOutput, max_loop_steps: int) -> tuple[Tensor, Tensor]:
    """(negative gate entropy, loop penalty) as upstream's trainer computes them: the first the mean over rows and the
    steps upstream ran (`out.ran_steps`) of p log p + (1 - p) log(1 - p), eps 1e-6 inside the logs; the second the
    mean of exit step / max_loop_steps, in float32 as upstream's `.float()`. Zeros without a gate."""
    steps = out.gate_probs.shape[1]
    if steps == 0:
        zero = torch.zeros((), device=out.logits.device)
        return zero, zero
    p = out.gate_probs
    entropy = -(p * torch.log(p + GATE_ENTROPY_EPS) + (1 - p) * torch.log(1 - p + GATE_ENTROPY_EPS))
    ran = (torch.arange(steps, device=p.device) < out.ran_steps)[None, :]  # (1, steps)
    neg_entropy = -torch.where(ran, entropy, 0).sum() / (p.shape[0] * out.ran_steps)
    penalty = (out.exit_steps.float() / max_loop_steps).mean()
    return neg_entropy, penalty


def count_parameters_excluding_task_tokens(model: nn.Module) -> int:
    """Parameters as upstream counts and prints them: all but the task-token table."""
    return sum(p.numel() for name, p in model.named_parameters() if "task_token" not in name)


def preset_parameter_count(cfg: LoopViTConfig) -> int:
    """Parameters of a config without its task-token table, built on the meta device."""
    with torch.device("meta"):
        return count_parameters_excluding_task_tokens(LoopViT(cfg, num_tasks=1))
