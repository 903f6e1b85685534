"""VARC-Unet, the U-Net of "ARC Is a Vision Problem!" (upstream VARC 537b01e, src/ARC_UNet.py).

    model = VARCUNet(make_arch_config("varc-unet", "arc", {}), num_tasks=400)
    logits = model(pixels, task_ids, mask)  # (B, S, S) colours, (B,) tasks, (B, S, S) input grid -> (B, 12, S, S)

Upstream's model is diffusers' `UNet2DConditionModel` with two embeddings around it, so this module is the same:
diffusers builds the U-Net (an optional dependency, the `unet` extra), and the state-dict keys are upstream's
(`color_embed.weight`, `task_token_embed.weight`, `encoder.<diffusers' names>`, upstream-varc.md section 3), so that
upstream's checkpoints load unchanged and the golden test compares it with upstream's own code:

1. every pixel's colour is embedded in 4 channels (`color_embed`, 12 x 4) at the canvas' full resolution;
2. the task's token (`task_token_embed`, embed_dim wide) is the U-Net's `encoder_hidden_states`, a sequence of one:
   every transformer block of the U-Net cross-attends to it, the only conditioning;
3. the U-Net (VARCUNetConfig: channels embed_dim / 2, embed_dim, embed_dim; CrossAttnDown, CrossAttnDown, Down;
   optionally the cross-attention mid block; Up, CrossAttnUp, CrossAttnUp) at the constant timestep 0, so its time
   embedding is a learned bias of every ResNet block, maps them to 12 logits per pixel.

Upstream passes `attention_mask` and ignores it; so does this model (`mask` is taken for the ViT's interface and only
checked for shape): the background around the grid is seen by the convolutions and the attention. No dropout
(diffusers' default 0), so training and evaluation compute the same function.

Init: diffusers' own, then trunc-normal(0.02) on the two embeddings, in upstream's order (color_embed, the task table,
the U-Net), so that under one seed a fresh model holds upstream's numbers.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from arcpipe.config.arch import VARCUNetConfig
from arcpipe.models.varc import check_canvas_inputs, count_parameters_excluding_task_tokens

COLOR_CHANNELS = 4  # upstream's nn.Embedding(num_colors, 4): the U-Net's in_channels
EMBED_INIT_STD = 0.02  # trunc-normal, cut at +-2 absolute (torch's default a, b), as upstream
INSTALL = "pip install 'arcpipe[unet]'"


def unet_kwargs(cfg: VARCUNetConfig) -> dict[str, Any]:
    """The arguments upstream gives diffusers' UNet2DConditionModel (ARC_UNet.py L52-72), from the config."""
    return dict(
        sample_size=cfg.image_size,
        in_channels=COLOR_CHANNELS,
        out_channels=cfg.num_colors,
        down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
        mid_block_type="UNetMidBlock2DCrossAttn" if cfg.mid_block else None,
        block_out_channels=cfg.block_out_channels,
        cross_attention_dim=cfg.embed_dim,
        layers_per_block=cfg.layers_per_block,
        attention_head_dim=cfg.num_heads,  # diffusers reads it as the number of heads (upstream's comment, L70)
        norm_num_groups=cfg.norm_num_groups,
    )


def unet_class() -> type[nn.Module]:
    """diffusers' UNet2DConditionModel, or an error naming the install command when diffusers is missing."""
    try:
        from diffusers import UNet2DConditionModel
    except ImportError as err:
        raise ImportError(f"arch varc-unet needs diffusers, which is not installed ({err}): {INSTALL}") from None
    return UNet2DConditionModel


class VARCUNet(nn.Module):
    """`model(pixels, task_ids, mask)` -> logits (B, num_colors, S, S); see the module doc.

    pixels: (B, S, S) integer colours 0..11 (10 is the canvas background); task_ids: (B,) rows of `task_token_embed`;
    mask: (B, S, S) bool, True on the input grid's pixels (not used, as upstream).
    """

    def __init__(self, cfg: VARCUNetConfig, num_tasks: int) -> None:
        super().__init__()
        if num_tasks <= 0:
            raise ValueError(f"num_tasks={num_tasks}: VARC needs at least one task token")
        unet = unet_class()
        self.config = cfg
        # built in upstream's order, so that under one seed the default inits draw the same numbers as upstream's
        self.color_embed = nn.Embedding(cfg.num_colors, COLOR_CHANNELS)
        self.task_token_embed = nn.Embedding(num_tasks, cfg.embed_dim)
        self.encoder = unet(**unet_kwargs(cfg))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Upstream's `_reset_parameters`: trunc-normal(0.02) embeddings; the U-Net keeps diffusers' init."""
        nn.init.trunc_normal_(self.task_token_embed.weight, std=EMBED_INIT_STD)
        nn.init.trunc_normal_(self.color_embed.weight, std=EMBED_INIT_STD)

    def forward(self, pixels: Tensor, task_ids: Tensor, mask: Tensor) -> Tensor:
        check_canvas_inputs(pixels, task_ids, mask, self.config.image_size, "VARCUNet")
        x = self.color_embed(pixels).permute(0, 3, 1, 2)  # (B, 4, S, S)
        task = self.task_token_embed(task_ids).unsqueeze(1)  # (B, 1, D): the cross-attention's one key
        # timestep 0, as upstream, as a tensor made on the device: diffusers turns a Python 0 into a tensor with a
        # host-to-device copy, one host sync per forward on CUDA (tests/gpu, H200, 2026-11-27)
        timestep = torch.zeros(x.shape[0], dtype=torch.long, device=x.device)
        return self.encoder(x, timestep, task, return_dict=False)[0]


def preset_parameter_count(cfg: VARCUNetConfig) -> int:
    """Parameters of a config without its task-token table, built on the meta device (no memory, no init cost)."""
    with torch.device("meta"):
        return count_parameters_excluding_task_tokens(VARCUNet(cfg, num_tasks=1))
