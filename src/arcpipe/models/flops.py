"""FLOPs of a training step and of an evaluation step, from an arch config alone (no torch), and GPU peaks for MFU.

    from arcpipe.config.arch import make_arch_config
    from arcpipe.models.flops import train_flops_per_example, peak_bf16_flops
    cfg = make_arch_config("trm", "arc", {})
    mfu = train_flops_per_example(cfg, seq_len=900).total * examples_per_s / peak_bf16_flops("NVIDIA H100 80GB HBM3")

What is counted (2 FLOPs per multiply-add, as `torch.utils.flop_counter` and the MFU literature count):

* every matmul of a block: the QKV and output projections, QK^T and AV over all S = seq_len + prefix_len positions
  (non-causal, so the full S x S), the SwiGLU (gate+up and down; TRM's `mlp_t` variant mixes along the S tokens
  instead of attending), and URM's depthwise conv (kernel 2, S+1 outputs as it pads both sides, of which S are kept);
* the heads: lm_head on all S positions (the prefix rows are computed, then dropped) and q_head on position 0.

Not counted, here or by torch's flop counter: elementwise work (RMSNorm, RoPE, SiLU, softmax, residual adds, the
stablemax loss), embedding lookups, optimizer updates, and the ACT bookkeeping. These are memory-bound; they cost
time, so a model with many of them shows a lower MFU, which is the point of measuring it.

How block applications are counted in one ACT step (one call of the model, = one training step of one row):

* TRM: H_cycles x (L_cycles + 1) applications of the L_layers-block net; the first (H_cycles - 1) cycles run without
  gradient, the last cycle (L_cycles + 1 applications) with it (the "1-step gradient" of the paper).
* HRM: H_cycles x L_cycles applications of L_level (L_layers blocks) and H_cycles of H_level (H_layers blocks);
  one of each carries the gradient, the rest run without.
* URM: H_cycles x L_cycles loops of num_layers blocks; the last L_cycles loops carry the gradient.
* transformer: H_layers blocks once, with gradient.

Training cost of one example (row) in one training step = F(no-grad applications) + 3 F(gradient applications) +
3 F(heads), where F is the forward cost: a backward pass costs two forwards (the gradients with respect to the input
and to the weight). With F = 2 N per token for N parameters this is the usual 6 N for the gradient cycles and 2 N
for the no-grad ones (here attention's S x S terms are counted too, and the heads are not weight-shared).
HRM (and TRM with no_ACT_continue=False) add one more no-grad recursion and heads for the bootstrapped Q target,
forward only. Evaluation runs every block application forward only, plus the heads, for halt_max_steps (URM: loops)
ACT steps; `eval_flops_per_step` is one of them.

VARC (models/varc.py) is one forward pass over its own canvas, so `seq_len` and `vocab_size` do not apply: with
S = image_size, p = patch_size, N = (S/p)^2 patches, T = N + 1 tokens (the task token), D = embed_dim, M = mlp_dim,
C = num_colors, the forward is the patch conv (N outputs of a p x p x D -> D kernel: 2 N p^2 D^2, counted as
`conv`), per layer the qkv, output projection and MLP on T tokens (2 T (3 D^2 + D^2 + 2 D M)) and QK^T and AV over
T x T (4 T^2 D), and the head on the N patch tokens (2 N D C p^2). The colour and task embeddings are lookups. A
training step is the forward and a backward of twice its cost (every input of the conv is a trained embedding, so
its input gradient is computed too); evaluation is the forward, one "step".

VARC-Unet (models/varc_unet.py, diffusers' UNet2DConditionModel) is counted block by block from the config, with
channels (c0, c1, c2) = (D/2, D, D) at resolutions S, S/2, S/4, r^2 pixels at resolution r: a k x k convolution
cin -> cout costs 2 r^2 k^2 cin cout (`conv`: conv_in, conv_out, each ResNet block's two 3x3 and its 1x1 shortcut
when cin != cout, the down- and upsamplers, the transformers' 1x1 proj_in/proj_out); per transformer of width c
(`linear`) q, k, v and out of the self-attention on r^2 tokens (8 r^2 c^2), q and out of the cross-attention
(4 r^2 c^2) and its k, v on the one task token (4 D c), the GEGLU feed-forward (2 r^2 c 8c + 2 r^2 4c c), and
(`attention`) QK^T and AV over r^2 x r^2 (4 r^4 c) and over r^2 x 1 (4 r^2 c); per row the time-embedding MLP
(c0 -> 4 c0 -> 4 c0) and each ResNet block's projection of it (4 c0 -> cout). Training is three times the forward,
less the time MLP's first layer input gradient (its input, the sinusoid of timestep 0, is not trained).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# the GPU peaks live with the named GPUs: one table for MFU, the forecast and the doctor
from arcpipe.gpus import PEAK_BF16_FLOPS as PEAK_BF16_FLOPS
from arcpipe.gpus import peak_bf16_flops as peak_bf16_flops


@dataclass(frozen=True)
class Flops:
    """FLOPs by kind (2 per multiply-add); `total` is what MFU divides by time."""

    linear: int = 0  # projections, MLPs and heads
    attention: int = 0  # QK^T and AV
    conv: int = 0  # URM's depthwise conv

    @property
    def total(self) -> int:
        return self.linear + self.attention + self.conv

    def __add__(self, other: Flops) -> Flops:
        return Flops(self.linear + other.linear, self.attention + other.attention, self.conv + other.conv)

    def __mul__(self, k: int) -> Flops:
        return Flops(self.linear * k, self.attention * k, self.conv * k)

    __rmul__ = __mul__


def train_flops_per_example(cfg: Any, seq_len: int, vocab_size: int = 12) -> Flops:
    """Forward + backward FLOPs of one row in one training step (one ACT step), see the module doc."""
    if cfg.name == "varc":
        return 3 * _varc_forward(cfg)
    if cfg.name == "loopvit":
        return 3 * _loopvit_forward(cfg)
    if cfg.name == "varc-unet":
        c0 = cfg.embed_dim // 2
        return 3 * _unet_forward(cfg) + Flops(linear=-2 * c0 * 4 * c0)
    no_grad, grad = _block_applications(cfg)
    heads = _heads(cfg, seq_len, vocab_size)
    total = _blocks(cfg, seq_len, no_grad) + 3 * (_blocks(cfg, seq_len, grad) + heads)
    if _bootstraps_q(cfg):
        total = total + _blocks(cfg, seq_len, _merge(no_grad, grad)) + heads
    return total


def eval_flops_per_step(cfg: Any, seq_len: int, vocab_size: int = 12) -> Flops:
    """Forward FLOPs of one row in one evaluation ACT step; an evaluation runs `eval_steps(cfg)` of them."""
    if cfg.name == "varc":
        return _varc_forward(cfg)
    if cfg.name == "loopvit":
        return _loopvit_forward(cfg)
    if cfg.name == "varc-unet":
        return _unet_forward(cfg)
    no_grad, grad = _block_applications(cfg)
    return _blocks(cfg, seq_len, _merge(no_grad, grad)) + _heads(cfg, seq_len, vocab_size)


def eval_steps(cfg: Any) -> int:
    """ACT steps every row runs in evaluation: halt_max_steps (URM: loops; VARC: 1, a single forward pass)."""
    return cfg.loops if cfg.name == "urm" else cfg.halt_max_steps


def intermediate_size(hidden_size: int, expansion: float) -> int:
    """SwiGLU width as `arcpipe.models.layers.intermediate_size` (which imports torch): round(e*D*2/3) up to 256."""
    return -(round(expansion * hidden_size * 2 / 3) // -256) * 256


# ------------------------------------------------------------------------------------------------------------------

Applications = dict[str, int]  # block stack ("L", "H", "net") -> applications of the whole stack


def _block_applications(cfg: Any) -> tuple[Applications, Applications]:
    """(no-grad, gradient) applications of each block stack in one ACT step."""
    if cfg.name == "trm":
        return {"L": (cfg.H_cycles - 1) * (cfg.L_cycles + 1)}, {"L": cfg.L_cycles + 1}
    if cfg.name == "hrm":
        return {"L": cfg.H_cycles * cfg.L_cycles - 1, "H": cfg.H_cycles - 1}, {"L": 1, "H": 1}
    if cfg.name == "urm":
        return {"L": (cfg.H_cycles - 1) * cfg.L_cycles}, {"L": cfg.L_cycles}
    if cfg.name == "transformer":
        return {}, {"H": 1}
    raise ValueError(f"no FLOP count for arch {cfg.name!r}")


def _merge(a: Applications, b: Applications) -> Applications:
    return {k: a.get(k, 0) + b.get(k, 0) for k in a.keys() | b.keys()}


def _bootstraps_q(cfg: Any) -> bool:
    # act.py: the extra no-grad recursion for the Q-continue target, in training when more than one step is allowed
    if cfg.name == "hrm":
        return cfg.halt_max_steps > 1
    if cfg.name == "trm":
        return not cfg.no_ACT_continue and cfg.halt_max_steps > 1
    return False


def _stack_layers(cfg: Any, stack: str) -> int:
    if cfg.name == "urm":
        return cfg.num_layers
    return cfg.L_layers if stack == "L" else cfg.H_layers


def _blocks(cfg: Any, seq_len: int, applications: Applications) -> Flops:
    per_block = _block(cfg, seq_len)
    return sum((per_block * (n * _stack_layers(cfg, stack)) for stack, n in applications.items()), Flops())


def _block(cfg: Any, seq_len: int) -> Flops:
    """Forward FLOPs of one block on one row of S = seq_len + prefix positions (layers.Block)."""
    S, D = seq_len + cfg.prefix_len, cfg.hidden_size
    inter = intermediate_size(D, cfg.expansion)
    mlp = Flops(linear=2 * S * D * 2 * inter + 2 * S * inter * D)  # gate_up, down
    if cfg.name == "urm":
        mlp = mlp + Flops(conv=2 * inter * (S + 1) * 2)  # depthwise, kernel 2, padded both sides
    if getattr(cfg, "mlp_t", False):
        inter_t = intermediate_size(S, cfg.expansion)
        return mlp + Flops(linear=2 * D * S * 2 * inter_t + 2 * D * inter_t * S)  # SwiGLU across tokens
    width = (D // cfg.num_heads) * cfg.num_heads  # H * head_dim: smaller than D when heads do not divide it
    projections = 2 * S * D * 3 * width + 2 * S * width * D  # qkv, o
    return mlp + Flops(linear=projections, attention=2 * 2 * S * S * width)  # QK^T, AV


def _heads(cfg: Any, seq_len: int, vocab_size: int) -> Flops:
    S, D = seq_len + cfg.prefix_len, cfg.hidden_size
    return Flops(linear=2 * S * D * vocab_size + 2 * D * 2)  # lm_head on every position, q_head on position 0


def _varc_forward(cfg: Any) -> Flops:
    """Forward FLOPs of VARC-ViT on one canvas (module doc)."""
    N, p, D, M = cfg.num_patches, cfg.patch_size, cfg.embed_dim, cfg.mlp_dim
    T = N + 1
    layer = Flops(linear=2 * T * (3 * D * D + D * D + 2 * D * M), attention=2 * 2 * T * T * D)
    return Flops(linear=2 * N * D * cfg.num_colors * p * p, conv=2 * N * p * p * D * D) + cfg.depth * layer


def _loopvit_forward(cfg: Any) -> Flops:
    """Forward FLOPs of LoopViT on one canvas at the planned maximum: max_loop_steps passes of the core (the masked
    exit of models/loopvit.py runs every pass; an exited row's are thrown away), each with the exit gate, then the
    head once. The hybrid layer's MLP is the convolutional GLU: fc1 D -> 2H, a depthwise 3 x 3 conv over the patch
    tokens' H gate channels, fc2 H -> D (H = int(2 mlp_dim / 3))."""
    N, p, D, M = cfg.num_patches, cfg.patch_size, cfg.embed_dim, cfg.mlp_dim
    T = N + 1
    attention = Flops(linear=2 * T * 4 * D * D, attention=2 * 2 * T * T * D)
    if cfg.block == "hybrid":
        H = int(2 * M / 3)
        mlp = Flops(linear=2 * T * D * 2 * H + 2 * T * H * D, conv=2 * N * H * 9)
    else:
        mlp = Flops(linear=2 * T * 2 * D * M)
    gate = Flops(linear=2 * (D * (D // 2) + D // 2)) if cfg.exit_gate else Flops()
    embed_and_head = Flops(linear=2 * N * D * cfg.num_colors * p * p, conv=2 * N * p * p * D * D)
    return embed_and_head + cfg.max_loop_steps * (cfg.loop_core_depth * (attention + mlp) + gate)


def _unet_forward(cfg: Any) -> Flops:
    """Forward FLOPs of VARC-Unet on one canvas (module doc), in diffusers' UNet2DConditionModel's order."""
    S, D, L = cfg.image_size, cfg.embed_dim, cfg.layers_per_block
    ch = cfg.block_out_channels
    c0 = ch[0]
    res = (S, S // 2, S // 4)

    def conv(r: int, k: int, cin: int, cout: int) -> Flops:
        return Flops(conv=2 * r * r * k * k * cin * cout)

    def resnet(r: int, cin: int, cout: int) -> Flops:
        shortcut = conv(r, 1, cin, cout) if cin != cout else Flops()
        return conv(r, 3, cin, cout) + conv(r, 3, cout, cout) + shortcut + Flops(linear=2 * 4 * c0 * cout)

    def transformer(r: int, c: int) -> Flops:
        N = r * r
        linear = 8 * N * c * c + 4 * N * c * c + 4 * D * c + 2 * N * c * 8 * c + 2 * N * 4 * c * c
        return conv(r, 1, c, c) * 2 + Flops(linear=linear, attention=4 * N * N * c + 4 * N * c)

    total = conv(S, 3, 4, c0) + Flops(linear=2 * c0 * 4 * c0 + 2 * 4 * c0 * 4 * c0)  # conv_in, time MLP
    cin = c0
    for i, c in enumerate(ch):  # down: CrossAttnDown, CrossAttnDown, Down (no attention); downsample but the last
        for _ in range(L):
            total = total + resnet(res[i], cin, c) + (transformer(res[i], c) if i < 2 else Flops())
            cin = c
        if i < 2:
            total = total + conv(res[i + 1], 3, c, c)  # stride 2: outputs at the next resolution
    if cfg.mid_block:
        total = total + resnet(res[2], ch[2], ch[2]) * 2 + transformer(res[2], ch[2])
    rch = ch[::-1]
    prev = rch[0]
    for i, c in enumerate(rch):  # up: Up (no attention), CrossAttnUp, CrossAttnUp; upsample but the last
        r = res[2 - i]
        skip_in = rch[min(i + 1, 2)]
        for j in range(L + 1):
            skip = skip_in if j == L else c
            total = total + resnet(r, (prev if j == 0 else c) + skip, c) + (transformer(r, c) if i > 0 else Flops())
        prev = c
        if i < 2:
            total = total + conv(res[1 - i], 3, c, c)  # nearest x2, then a 3x3 conv at the finer resolution
    return total + conv(S, 3, c0, cfg.num_colors)  # conv_out
