"""The architectures' configs and published presets, importable without torch (the workflow plans with them).

Each config uses upstream's field names; `make_arch_config(arch, preset, overrides)` is the one way to build
one. The models themselves live in arcpipe/models (trm.py, hrm.py, urm.py, transformer.py, varc.py, varc_unet.py);
registry.py builds them from these configs. VARC ("ARC Is a Vision Problem!") is a ViT (`varc`) or a U-Net
(`varc-unet`) on a canvas, not a recursive core: its configs share no field with the others (upstream VARC's argument
names) and are not CoreConfigs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator


class CoreConfig(BaseModel):
    """Fields every architecture shares, under upstream's names; the dataset fills vocab, seq_len and ids."""

    model_config = ConfigDict(extra="forbid", frozen=True)  # a typo is an error, not a default

    hidden_size: int = Field(gt=0)
    num_heads: int = Field(gt=0)
    expansion: float = Field(gt=0)
    pos_encodings: Literal["rope", "learned", "none"] = "rope"
    rms_norm_eps: float = Field(default=1e-5, gt=0)
    rope_theta: float = Field(default=10000.0, gt=0)
    puzzle_emb_ndim: int = Field(default=0, ge=0)  # left out: hidden_size (upstream's yaml interpolation)
    loss_type: Literal["stablemax_cross_entropy", "softmax_cross_entropy"] = "stablemax_cross_entropy"

    @model_validator(mode="before")
    @classmethod
    def _puzzle_emb_follows_hidden(cls, data: Any) -> Any:
        if isinstance(data, dict) and "puzzle_emb_ndim" not in data and "hidden_size" in data:
            data = {**data, "puzzle_emb_ndim": data["hidden_size"]}
        return data

    @model_validator(mode="after")
    def _heads_fit(self) -> CoreConfig:
        head_dim = self.hidden_size // self.num_heads
        if head_dim == 0:
            raise ValueError(f"num_heads={self.num_heads} exceeds hidden_size={self.hidden_size}")
        if self.pos_encodings == "rope" and head_dim % 2:
            raise ValueError(
                f"hidden_size={self.hidden_size} // num_heads={self.num_heads} = {head_dim} is odd: rotary "
                "embeddings need an even head size; change hidden_size or num_heads"
            )
        return self

    @property
    def prefix_len(self) -> int:
        """P: positions the puzzle embedding takes before the tokens (ceil(ndim / hidden))."""
        return -(self.puzzle_emb_ndim // -self.hidden_size)

    def core_kwargs(self) -> dict[str, Any]:
        return dict(
            hidden_size=self.hidden_size,
            num_heads=self.num_heads,
            puzzle_emb_ndim=self.puzzle_emb_ndim,
            puzzle_emb_len=self.prefix_len,
            pos_encodings=self.pos_encodings,
            rope_theta=self.rope_theta,
            **self.halt_kwargs(),
        )

    def halt_kwargs(self) -> dict[str, Any]:
        """ACT limits from the arch's own fields (every arch but URM names them halt_max_steps and
        halt_exploration_prob; URMConfig overrides this)."""
        return dict(halt_max_steps=self.halt_max_steps, halt_exploration_prob=self.halt_exploration_prob)  # type: ignore[attr-defined]

    def block_kwargs(self) -> dict[str, Any]:
        return dict(
            hidden_size=self.hidden_size,
            num_heads=self.num_heads,
            expansion=self.expansion,
            rms_norm_eps=self.rms_norm_eps,
        )


class TRMConfig(CoreConfig):
    name: Literal["trm"] = "trm"
    H_cycles: int = Field(gt=0)  # T: outer recursion steps
    L_cycles: int = Field(gt=0)  # n: latent updates per outer step
    H_layers: int = Field(default=0, ge=0)  # upstream requires it and ignores it
    L_layers: int = Field(gt=0)  # blocks of the single network
    halt_max_steps: int = Field(gt=0)
    halt_exploration_prob: float = Field(ge=0, le=1)
    mlp_t: bool = False  # SwiGLU across tokens instead of attention (the paper's Sudoku variant)
    puzzle_emb_len: int = Field(default=16, ge=0)  # prefix positions; 0: ceil(puzzle_emb_ndim / hidden_size)
    no_ACT_continue: bool = True  # halt on q_halt > 0; False: q_halt > q_continue with a bootstrapped target

    @model_validator(mode="after")
    def _prefix_fits(self) -> TRMConfig:
        if self.puzzle_emb_ndim == 0 and self.puzzle_emb_len > 0:
            raise ValueError(
                f"puzzle_emb_len={self.puzzle_emb_len} needs a puzzle embedding but puzzle_emb_ndim=0; "
                "set puzzle_emb_len=0 or puzzle_emb_ndim > 0"
            )
        if self.puzzle_emb_len and self.puzzle_emb_ndim > self.puzzle_emb_len * self.hidden_size:
            raise ValueError(
                f"puzzle_emb_ndim={self.puzzle_emb_ndim} does not fit in puzzle_emb_len={self.puzzle_emb_len} "
                f"positions of hidden_size={self.hidden_size}; raise puzzle_emb_len or set it to 0 (automatic)"
            )
        return self

    @property
    def prefix_len(self) -> int:
        return self.puzzle_emb_len or super().prefix_len


class HRMConfig(CoreConfig):
    name: Literal["hrm"] = "hrm"
    H_cycles: int = Field(gt=0)
    L_cycles: int = Field(gt=0)
    H_layers: int = Field(gt=0)
    L_layers: int = Field(gt=0)
    halt_max_steps: int = Field(gt=0)
    halt_exploration_prob: float = Field(ge=0, le=1)
    pos_encodings: Literal["rope", "learned"] = "rope"  # upstream HRM raises on anything else


URM_EXPLORATION_PROB = 0.1  # upstream hard-codes it


class URMConfig(CoreConfig):
    name: Literal["urm"] = "urm"
    num_layers: int = Field(gt=0)
    loops: int = Field(gt=0)  # ACT steps (upstream's name for halt_max_steps)
    H_cycles: int = Field(gt=0)
    L_cycles: int = Field(gt=0)
    pos_encodings: Literal["rope"] = "rope"  # upstream always builds RoPE
    conv_dtype: Literal["bfloat16", "forward"] = "bfloat16"  # upstream's bf16 conv, or the forward dtype
    # how the conv is computed: upstream's nn.Conv1d call (rounds as upstream's code on any device), or the faster
    # elementwise form (w0*u[t-1] + w1*u[t] + b, rounded once; fused by the compiler): models/layers.ConvSwiGLU
    conv_impl: Literal["conv1d", "elementwise"] = "conv1d"

    def halt_kwargs(self) -> dict[str, Any]:
        return dict(halt_max_steps=self.loops, halt_exploration_prob=URM_EXPLORATION_PROB)


class TransformerConfig(CoreConfig):
    name: Literal["transformer"] = "transformer"
    H_cycles: int = Field(default=1, gt=0)  # kept for compatibility; unused
    H_layers: int = Field(gt=0)
    halt_max_steps: int = Field(gt=0)
    halt_exploration_prob: float = Field(ge=0, le=1)
    act_enabled: bool = True  # False: no early halting in training either
    pos_encodings: Literal["rope", "learned"] = "rope"


VARC_MIN_IMAGE_SIZE = 32  # a 30x30 grid in the interior (image_size - 2), its border in the last row and column


class PatchCanvas:
    """What a patch-token model on the canvas derives from its fields (embed_dim, num_heads, image_size,
    patch_size): VARC's ViT and LoopViT."""

    embed_dim: int
    num_heads: int
    image_size: int
    patch_size: int

    @property
    def hidden_size(self) -> int:
        """embed_dim, under the name code common to every arch reads."""
        return self.embed_dim

    @property
    def head_dim(self) -> int:
        return self.embed_dim // self.num_heads

    @property
    def grid_side(self) -> int:
        """Patches along a side of the canvas: image_size // patch_size."""
        return self.image_size // self.patch_size

    @property
    def num_patches(self) -> int:
        """Patch tokens (the sequence is these plus the task token)."""
        return self.grid_side**2

    @property
    def loss_type(self) -> str:
        return "softmax_cross_entropy"  # per-pixel cross entropy (upstream-varc.md 2.8)


class VARCConfig(PatchCanvas, BaseModel):
    """VARC-ViT (upstream-varc.md section 2), under upstream's argument names: a post-norm ViT over a square canvas
    of `image_size` pixels cut into `patch_size` patches, one task token, one forward pass (no ACT)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Literal["varc"] = "varc"
    image_size: int = Field(default=64, gt=0)  # canvas side S in pixels
    patch_size: int = Field(default=2, gt=0)  # p: S/p x S/p patch tokens
    embed_dim: int = Field(default=512, gt=0)
    depth: int = Field(default=10, gt=0)  # encoder layers
    num_heads: int = Field(default=8, gt=0)
    mlp_dim: int = Field(default=512, gt=0)  # upstream's default: MLP ratio 1
    dropout: float = Field(default=0.1, ge=0, lt=1)  # in upstream's five places and on the embeddings
    num_colors: Literal[12] = 12  # ARC's 10 colours, background/ignore (10), border (11)

    @model_validator(mode="after")
    def _shapes_fit(self) -> VARCConfig:
        problems = []
        if self.image_size % self.patch_size:
            problems.append(f"image_size={self.image_size} is not a multiple of patch_size={self.patch_size}")
        if self.image_size < VARC_MIN_IMAGE_SIZE:
            problems.append(
                f"image_size={self.image_size} < {VARC_MIN_IMAGE_SIZE}: the canvas interior (image_size - 2) must "
                "hold a 30x30 ARC grid"
            )
        if self.embed_dim % self.num_heads:
            problems.append(f"embed_dim={self.embed_dim} is not a multiple of num_heads={self.num_heads}")
        elif (self.embed_dim // self.num_heads) % 4:
            problems.append(
                f"head size embed_dim // num_heads = {self.embed_dim // self.num_heads} is not a multiple of 4, "
                "which the 2D rotary embedding needs (a row half and a column half of channel pairs)"
            )
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def halt_max_steps(self) -> int:
        return 1  # one forward pass: no ACT


class VARCUNetConfig(BaseModel):
    """VARC-Unet (upstream-varc.md section 3): diffusers' UNet2DConditionModel over a square canvas of `image_size`
    pixels, each pixel's colour embedded in 4 channels, cross-attention to one task token, one forward pass.

    Upstream picks the widths from `--unet-size` (small, medium, big: embed_dim 160, 240, 320); here they are fields,
    so that a CPU-sized preset keeps the published structure: channels (embed_dim / 2, embed_dim, embed_dim) at
    resolutions S, S/2, S/4, `layers_per_block` ResNet blocks per resolution (2 for big, else 1), a cross-attention
    mid block (big only), `num_heads` attention heads at every level (upstream's `embed_dim // 40`, passed as
    diffusers' `attention_head_dim`, which diffusers reads as the number of heads) and `norm_num_groups` GroupNorm
    groups (upstream's `embed_dim // 10`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Literal["varc-unet"] = "varc-unet"
    image_size: int = Field(default=64, gt=0)  # canvas side S in pixels
    embed_dim: int = Field(default=320, gt=0)  # the task token's width and the two deeper levels' channels
    layers_per_block: int = Field(default=2, gt=0)
    mid_block: bool = True  # UNetMidBlock2DCrossAttn between the down and up paths
    num_heads: int = Field(default=8, gt=0)
    norm_num_groups: int = Field(default=32, gt=0)
    num_colors: Literal[12] = 12  # ARC's 10 colours, background/ignore (10), border (11)

    @model_validator(mode="after")
    def _shapes_fit(self) -> VARCUNetConfig:
        problems = []
        if self.image_size % 4:
            problems.append(f"image_size={self.image_size} is not a multiple of 4 (the U-Net halves it twice)")
        if self.image_size < VARC_MIN_IMAGE_SIZE:
            problems.append(
                f"image_size={self.image_size} < {VARC_MIN_IMAGE_SIZE}: the canvas interior (image_size - 2) must "
                "hold a 30x30 ARC grid"
            )
        if self.embed_dim % 2 or (self.embed_dim // 2) % self.norm_num_groups:
            problems.append(
                f"embed_dim // 2 = {self.embed_dim / 2:g} is not a multiple of norm_num_groups={self.norm_num_groups}"
            )
        if (self.embed_dim // 2) % self.num_heads:
            problems.append(
                f"embed_dim // 2 = {self.embed_dim // 2} (the first level's channels) is not a multiple of "
                f"num_heads={self.num_heads}"
            )
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def block_out_channels(self) -> tuple[int, int, int]:
        return (self.embed_dim // 2, self.embed_dim, self.embed_dim)

    @property
    def hidden_size(self) -> int:
        """embed_dim, under the name code common to every arch reads."""
        return self.embed_dim

    @property
    def loss_type(self) -> str:
        return "softmax_cross_entropy"  # per-pixel cross entropy, as VARC-ViT

    @property
    def halt_max_steps(self) -> int:
        return 1  # one forward pass: no ACT


class LoopViTConfig(PatchCanvas, BaseModel):
    """LoopViT ("Scaling Visual ARC with Looped Transformers", WenjieShu/LoopViT), under upstream's argument names:
    VARC's canvas, task token, embeddings and head around one weight-tied core of `loop_core_depth` layers applied
    `max_loop_steps` times, with a learned step embedding before each pass and an exit gate on the task token.

    `block` is upstream's `--architecture`: `vit` (`loop_vit`: VARC's post-norm layer) or `hybrid` (`loop_vit1`:
    pre-RMSNorm attention and a convolutional GLU, the paper's hybrid block). With `train_dynamic_exit` /
    `eval_dynamic_exit` a row stops once its gate reaches `exit_gate_threshold` at a step >= `min_loop_steps`;
    training adds `gate_entropy_weight` x the gates' negative entropy and `loop_penalty_weight` x the mean exit step
    over `max_loop_steps` to the pixel loss (models/loopvit.py).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Literal["loopvit"] = "loopvit"
    block: Literal["vit", "hybrid"] = "hybrid"
    image_size: int = Field(default=64, gt=0)
    patch_size: int = Field(default=2, gt=0)
    embed_dim: int = Field(default=512, gt=0)
    loop_core_depth: int = Field(default=6, gt=0)  # layers of the weight-tied core
    max_loop_steps: int = Field(default=6, gt=0)  # passes through the core (the planned maximum)
    min_loop_steps: int = Field(default=6, gt=0)  # the exit gate may stop a row only from this pass on
    num_heads: int = Field(default=8, gt=0)
    mlp_dim: int = Field(default=512, gt=0)
    dropout: float = Field(default=0.1, ge=0, lt=1)
    num_colors: Literal[12] = 12
    exit_gate: bool = True  # upstream's --disable-exit-gate, inverted
    exit_gate_threshold: float = Field(default=0.6, gt=0, le=1)
    step_embedding: bool = True  # upstream's --no-step-embedding, inverted
    gate_entropy_weight: float = Field(default=5e-4, ge=0)
    loop_penalty_weight: float = Field(default=1e-3, ge=0)
    train_dynamic_exit: bool = True
    eval_dynamic_exit: bool = True
    # upstream's --exit-on-entropy-stable (its test-time-training evaluation, the early-exit script): a row answers
    # from the first step after which its mean pixel entropy fell by less than `entropy_threshold_pct` (a fraction of
    # the step before's) `entropy_patience` steps in a row, or from its gate's exit step when that is earlier
    # (models/loopvit.entropy_exit_steps); evaluation only
    exit_on_entropy_stable: bool = False
    entropy_patience: int = Field(default=2, ge=1)
    entropy_threshold_pct: float = Field(default=0.05, ge=0)

    @model_validator(mode="after")
    def _shapes_fit(self) -> LoopViTConfig:
        problems = []
        if self.min_loop_steps > self.max_loop_steps:
            problems.append(f"min_loop_steps={self.min_loop_steps} > max_loop_steps={self.max_loop_steps}")
        try:
            VARCConfig(**self.layer_config().model_dump())
        except ValidationError as err:
            problems += [e["msg"].removeprefix("Value error, ") for e in err.errors()]
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def layer_config(self) -> VARCConfig:
        """The VARC config of one core layer (models/varc.py's layers read their shape from it); unchecked, as a test's
        canvas under 32 pixels builds it (the validator checks it)."""
        return VARCConfig.model_construct(
            image_size=self.image_size,
            patch_size=self.patch_size,
            embed_dim=self.embed_dim,
            depth=self.loop_core_depth,
            num_heads=self.num_heads,
            mlp_dim=self.mlp_dim,
            dropout=self.dropout,
        )

    @property
    def halt_max_steps(self) -> int:
        return 1  # one call of the head: the loop runs inside it


VARC_ARCHS = (
    "varc",
    "varc-unet",
    "loopvit",
)  # canvas models: models/varc_head.py, test-time training, upstream VARC's files

CONFIGS: dict[str, type] = {
    "hrm": HRMConfig,
    "trm": TRMConfig,
    "urm": URMConfig,
    "transformer": TransformerConfig,
    "varc": VARCConfig,
    "varc-unet": VARCUNetConfig,
    "loopvit": LoopViTConfig,
}

ArchConfig = Annotated[
    HRMConfig | TRMConfig | URMConfig | TransformerConfig | VARCConfig | VARCUNetConfig | LoopViTConfig,
    Field(discriminator="name"),
]
_ADAPTER: TypeAdapter[Any] = TypeAdapter(ArchConfig)

_D512 = dict(hidden_size=512, num_heads=8, expansion=4, pos_encodings="rope")
_ACT16 = dict(halt_max_steps=16, halt_exploration_prob=0.1)
_TINY = dict(hidden_size=64, num_heads=4, expansion=2, pos_encodings="rope")

PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    "trm": {
        "arc": {
            **_D512,
            **_ACT16,
            "H_cycles": 3,
            "L_cycles": 4,
            "H_layers": 0,
            "L_layers": 2,
            "puzzle_emb_len": 16,
        },
        "default": {**_D512, **_ACT16, "H_cycles": 3, "L_cycles": 6, "H_layers": 0, "L_layers": 2},
        "tiny": {
            **_TINY,
            "H_cycles": 1,
            "L_cycles": 1,
            "L_layers": 1,
            "halt_max_steps": 2,
            "halt_exploration_prob": 0.1,
            "puzzle_emb_len": 1,
        },
    },
    "hrm": {
        "arc": {**_D512, **_ACT16, "H_cycles": 2, "L_cycles": 2, "H_layers": 4, "L_layers": 4},
        "tiny": {
            **_TINY,
            "H_cycles": 1,
            "L_cycles": 1,
            "H_layers": 1,
            "L_layers": 1,
            "halt_max_steps": 2,
            "halt_exploration_prob": 0.1,
        },
    },
    "urm": {
        "arc": {**_D512, "loops": 16, "H_cycles": 2, "L_cycles": 6, "num_layers": 4},
        "default": {**_D512, "loops": 16, "H_cycles": 4, "L_cycles": 3, "num_layers": 8},
        "tiny": {**_TINY, "loops": 2, "H_cycles": 1, "L_cycles": 1, "num_layers": 1},
    },
    "transformer": {
        "arc": {**_D512, **_ACT16, "num_heads": 12, "H_layers": 8},
        "tiny": {**_TINY, "H_layers": 2, "halt_max_steps": 2, "halt_exploration_prob": 0.1},
    },
    "varc": {
        # VARC-ViT-18M (upstream's offline_train_VARC_ViT.sh and its argument defaults)
        "arc": {
            "image_size": 64,
            "patch_size": 2,
            "embed_dim": 512,
            "depth": 10,
            "num_heads": 8,
            "mlp_dim": 512,
            "dropout": 0.1,
        },
        "tiny": {
            "image_size": 32,
            "patch_size": 2,
            "embed_dim": 64,
            "depth": 2,
            "num_heads": 4,
            "mlp_dim": 64,
            "dropout": 0.1,
        },
    },
    "varc-unet": {
        # VARC-Unet-55M (upstream's offline_train_VARC_Unet.sh: --unet-size big --image-size 64)
        "arc": {
            "image_size": 64,
            "embed_dim": 320,
            "layers_per_block": 2,
            "mid_block": True,
            "num_heads": 8,
            "norm_num_groups": 32,
        },
        # upstream's other two sizes (one block per resolution, no mid block)
        "medium": {
            "image_size": 64,
            "embed_dim": 240,
            "layers_per_block": 1,
            "mid_block": False,
            "num_heads": 6,
            "norm_num_groups": 24,
        },
        "small": {
            "image_size": 64,
            "embed_dim": 160,
            "layers_per_block": 1,
            "mid_block": False,
            "num_heads": 4,
            "norm_num_groups": 16,
        },
        # the published structure (two blocks per resolution, the mid block) at CPU size
        "tiny": {
            "image_size": 32,
            "embed_dim": 16,
            "layers_per_block": 2,
            "mid_block": True,
            "num_heads": 2,
            "norm_num_groups": 4,
        },
    },
    "loopvit": {
        # LoopViT-Large as upstream's published run log trained it (architecture loop_vit1: the hybrid block, a core
        # of 10 layers, 6 passes): 17.6M parameters, the paper's "18M"
        "large": {"block": "hybrid", "loop_core_depth": 10},
        "arc": {"block": "hybrid", "loop_core_depth": 10},  # the published ARC-AGI-1 model: large
        # the published script script/offline_train_loop_VARC_ViT.sh (architecture loop_vit: VARC's layer, core 6)
        "script": {"block": "vit", "loop_core_depth": 6},
        # LoopViT-Small, 3.8M: the repository gives no shape; assumed the large one at width 256, core 8
        "small": {"block": "hybrid", "embed_dim": 256, "mlp_dim": 256, "loop_core_depth": 8},
        # every path at CPU size: 3 passes, exit allowed from the second
        "tiny": {
            "block": "hybrid",
            "image_size": 32,
            "embed_dim": 32,
            "mlp_dim": 48,
            "num_heads": 4,
            "loop_core_depth": 2,
            "max_loop_steps": 3,
            "min_loop_steps": 2,
        },
    },
}


def make_arch_config(arch: str, preset: str, overrides: Mapping[str, Any]) -> Any:
    """The validated, frozen config of `arch` from `preset` plus `overrides` (upstream field names).

    Raises ValueError naming the bad arch, preset or field, with the valid choices.
    """
    if arch not in PRESETS:
        raise ValueError(f"unknown arch {arch!r}; choose one of {', '.join(CONFIGS)}")
    if preset not in PRESETS[arch]:
        raise ValueError(f"unknown preset {preset!r} for arch {arch}; choose one of {', '.join(PRESETS[arch])}")
    fields = set(CONFIGS[arch].model_fields) - {"name"}
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise ValueError(
            f"unknown field(s) {', '.join(unknown)} for arch {arch}; valid fields: {', '.join(sorted(fields))}"
        )
    try:
        return _ADAPTER.validate_python({**PRESETS[arch][preset], **overrides, "name": arch})
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'][1:]) or arch}: {e['msg'].removeprefix('Value error, ')}"
            for e in err.errors()
        )
        raise ValueError(f"{arch}/{preset}: {problems}") from None


def arch_config_from_dict(data: Mapping[str, Any]) -> Any:
    """A config saved with `model_dump()` (it carries its `name`) back to the typed model."""
    return _ADAPTER.validate_python(dict(data))
