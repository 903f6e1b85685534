"""VARC's training and evaluation step on arcpipe's batches: the canvas, the model, upstream's loss, answers as tokens.

    head = build_model(make_arch_config("varc", "tiny", {}), vocab_size=12, seq_len=900, num_puzzle_identifiers=N,
                       batch_size=B, device="cpu")
    carry, loss, metrics, outputs = head.step(head.initial_carry(batch), batch, ("preds",))

VARC answers a grid in one forward pass, so it takes the loss head's place with the loss head's interface
(`initial_carry`, `forward`, `step`: losses.ACTLossHead), and the trainer, the evaluator, the vote and the report
serve it unchanged. One step, inside the step (on the device, no host sync, so it compiles whole):

1. Both grids of each row are found in arcpipe's 30x30 token map (`canvas.grid_boxes`) and placed on the model's
   canvas at a scale and offset drawn from `batch["canvas_draws"]` (three uniforms per row, from
   train/sampler.canvas_draws: deterministic from the run's seed, whatever the number of processes), with
   upstream's distribution (`canvas.draw_placement`: scale uniform in 1..(canvas-2)//largest side, offset uniform in
   what is left). The row's puzzle identifier is its task token: every augmented view of a puzzle has its own, as
   every pseudo-task file of upstream's test-time training has.
2. The model, VARC-ViT (models/varc.py, arch `varc`) or VARC-Unet (models/varc_unet.py, arch `varc-unet`), maps
   the input canvas to 12 logits per pixel; the rest of the step is the same for both, as upstream's is.
3. The loss is upstream's: per-pixel cross entropy over the output grid and its border, the background (10)
   ignored, **averaged over the micro-batch's pixels** (not per row, as the other architectures' loss head does).
   It is returned times the rows of the micro-batch, because the trainer divides every loss by the global batch
   and sums micro-batches and processes: the gradient is then the mean over micro-batches of their pixel means,
   which is upstream's DDP gradient (each rank's pixel mean, averaged over ranks).
4. The answer: the argmax canvas decoded by upstream's rule (crop at the offset, shape from the border, s x s block
   majority, the blocks cut in the original frame as upstream's: `batch["canvas_views"]`, each row's dihedral id,
   which eval/infer.predict supplies) back into arcpipe's token map (`canvas.decode`), so `outputs["preds"]` is what
   every other model gives. VARC has no halting head: `q_halt_logits` are 0, so the vote ranks candidates by count
   and breaks ties by first appearance, as upstream's vote does.

Where the output's size comes from at evaluation: upstream sizes the scale range from the larger of the input and
the *ground-truth* output (its evaluation JSONs hold the test outputs; upstream-varc.md 7.1). Here a row whose
label is known does the same, so scores are comparable with upstream's; a row without a label (a hidden test set,
Kaggle) is sized from its input alone. metrics.json names the rule (`info.canvas`).

Precision: fp32 on CPU; bf16 autocast on CUDA, as the other architectures run bf16 there (upstream VARC trains in
fp16 autocast with a GradScaler; bf16 has fp32's exponent range and needs no scaler).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from arcpipe.config.arch import VARCConfig, VARCUNetConfig
from arcpipe.data import canvas
from arcpipe.models.act import Carry
from arcpipe.models.varc import VARCViT
from arcpipe.models.varc_unet import VARCUNet

DRAWS_PER_ROW = 3  # scale, row offset, column offset
CANVAS_RULE = (
    "scale and offset drawn per answer from the larger of the input and the ground-truth output when the label is "
    "known (upstream VARC's rule), else from the input"
)


class VARCModel(nn.Module):
    """The ViT or the U-Net under the name `inner` (state-dict keys `model.inner.<upstream name>`, as every arcpipe
    model), and `max_steps` = 1 for the callers that run a model's ACT steps."""

    max_steps = 1

    def __init__(self, inner: VARCViT | VARCUNet) -> None:
        super().__init__()
        self.inner = inner


class VARCHead(nn.Module):
    """`head(carry, batch, return_keys)` -> (carry, loss, metrics, outputs, all_halted); see the module doc."""

    draws_per_row = DRAWS_PER_ROW  # callers put `canvas_draws` (B, 3) into every batch of a head that has this

    def __init__(self, model: VARCModel, config: VARCConfig | VARCUNetConfig, forward_dtype: torch.dtype) -> None:
        super().__init__()
        self.model = model
        self.config = config
        self.forward_dtype = forward_dtype
        self.loss_type = "softmax_cross_entropy"

    def initial_carry(self, batch: dict[str, Tensor]) -> Carry:
        B = batch["inputs"].shape[0]
        device = batch["inputs"].device
        return Carry(
            inner=(),
            steps=torch.zeros(B, dtype=torch.int32, device=device),
            halted=torch.ones(B, dtype=torch.bool, device=device),
            current_data={},
        )

    def forward(
        self, carry: Carry, batch: dict[str, Tensor], return_keys: Sequence[str] = ()
    ) -> tuple[Carry, Tensor, dict[str, Tensor], dict[str, Tensor], bool]:
        carry, loss, metrics, outputs = self.step(carry, batch, tuple(return_keys))
        return carry, loss, metrics, outputs, True

    def place(self, batch: dict[str, Tensor]) -> canvas.Placement:
        """Each row's scale and offset on the canvas (module doc, step 1)."""
        inputs, labels = batch["inputs"], batch["labels"]
        side = self.config.image_size
        _, _, in_h, in_w = canvas.grid_boxes(inputs)
        _, _, out_h, out_w = canvas.grid_boxes(labels)
        known = out_h > 0  # a row without a label is sized from its input
        out_h, out_w = torch.where(known, out_h, in_h), torch.where(known, out_w, in_w)
        return canvas.draw_placement((in_h, in_w), (out_h, out_w), batch["canvas_draws"], side)

    def run_model(self, pixels: Tensor, task_ids: Tensor, mask: Tensor) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """(logits (B, 12, S, S), a loss term added to the pixel mean or None, each row's loop steps or None): one
        pass here; LoopViT's head (models/loopvit_head.py) runs its loop and its regularizers."""
        return self.model.inner(pixels, task_ids, mask), None, None

    def step(
        self, carry: Carry, batch: dict[str, Tensor], return_keys: tuple[str, ...] = ()
    ) -> tuple[Carry, Tensor, dict[str, Tensor], dict[str, Tensor]]:
        """The tensor part of `forward` (no host sync), for callers that compile it."""
        side = self.config.image_size
        placement = self.place(batch)
        pixels, mask = canvas.encode_inputs(batch["inputs"], placement, side)
        targets = canvas.encode_targets(batch["labels"], placement, side)
        device_type = pixels.device.type
        with torch.autocast(device_type, dtype=self.forward_dtype, enabled=self.forward_dtype != torch.float32):
            logits, extra_loss, loop_steps = self.run_model(pixels, batch["puzzle_identifiers"].long(), mask)
        if logits.dtype != torch.float64:  # a float64 model (the parity tests) keeps its precision in the loss
            logits = logits.float()
        B = pixels.shape[0]

        valid = targets != canvas.BACKGROUND
        per_row = valid.flatten(1).sum(-1)
        pixel_sum = F.cross_entropy(logits, targets, ignore_index=canvas.BACKGROUND, reduction="sum")
        loss = pixel_sum / per_row.sum().clamp_min(1)
        if extra_loss is not None:  # a looped model's regularizers, added to the pixel mean as upstream adds them
            loss = loss + extra_loss
        loss = loss * B

        with torch.no_grad():
            answer = logits.argmax(1)
            correct = (valid & (answer == targets)).flatten(1).sum(-1)
            rows = per_row > 0
            zero = torch.zeros((), device=pixels.device)
            metrics = {
                "count": rows.sum(),
                "accuracy": torch.where(rows, correct / per_row.clamp_min(1), 0).sum(),
                "exact_accuracy": (rows & (correct == per_row)).sum(),
                "q_halt_accuracy": zero,
                "steps": rows.sum() if loop_steps is None else torch.where(rows, loop_steps, 0).sum(),
                "lm_loss": loss.detach(),
                "q_halt_loss": zero,
            }
            outputs: dict[str, Tensor] = {}
            if "preds" in return_keys:
                outputs["preds"] = canvas.decode(answer, placement, batch.get("canvas_views"))
            if "q_halt_logits" in return_keys:
                outputs["q_halt_logits"] = torch.zeros(B, device=pixels.device)
            if "logits" in return_keys:
                outputs["logits"] = logits.detach()
            if "loop_steps" in return_keys:  # the passes each row's answer took (1 for a one-pass model)
                outputs["loop_steps"] = torch.ones_like(per_row) if loop_steps is None else loop_steps
        steps = torch.ones(B, dtype=torch.int32, device=pixels.device)
        halted = torch.ones(B, dtype=torch.bool, device=pixels.device)
        return Carry((), steps, halted, {}), loss, metrics, outputs


def build_varc(
    config: VARCConfig | VARCUNetConfig,
    *,
    vocab_size: int,
    seq_len: int,
    num_puzzle_identifiers: int,
    forward_dtype: torch.dtype,
) -> VARCHead:
    """The head of a VARC model for a dataset of arcpipe's ARC format (vocabulary 12, 30 x 30 maps)."""
    if vocab_size != 12 or seq_len != 900:
        raise ValueError(
            f"{config.name} reads ARC grids in arcpipe's 30x30 token format (vocab_size 12, seq_len 900); this dataset "
            f"has vocab_size {vocab_size}, seq_len {seq_len}"
        )
    backbone = VARCUNet if isinstance(config, VARCUNetConfig) else VARCViT
    return VARCHead(VARCModel(backbone(config, num_tasks=num_puzzle_identifiers)), config, forward_dtype)
