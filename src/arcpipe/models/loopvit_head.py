"""LoopViT's step on arcpipe's batches: VARC's canvas step (models/varc_head.py) around the looped model.

    head = build_model(make_arch_config("loopvit", "tiny", {}), vocab_size=12, seq_len=900, num_puzzle_identifiers=N,
                       batch_size=B, device="cpu")

Everything but the model call is VARC's: the placement on the canvas, the pixel loss averaged over the micro-batch's
pixels, the answer decoded back to arcpipe's token map. The model runs its loop (models/loopvit.py) with dynamic exit
as the config says for training (`train_dynamic_exit`) or evaluation (`eval_dynamic_exit`, in eval mode), and in
training the loss gains upstream's two terms, `gate_entropy_weight` x the negative gate entropy and
`loop_penalty_weight` x the loop penalty, added to the pixel mean as upstream's offline trainer adds them.

`test_time = True` (eval/ttt.py sets it on the heads it fits) is upstream's test-time training: the pixel loss alone
and no dynamic exit while fitting (upstream's test_time_train_ARC.py adds no regularizer, and its published script
turns neither exit on); answering then follows `eval_dynamic_exit`.

`metrics["steps"]` sums the rows' loop steps (the evaluation's totals give their mean), and `outputs["loop_steps"]`
gives each row's; `reports_loop_steps` tells eval/infer.predict to keep them, and the evaluation writes their mean
per test input (per_puzzle.csv's `mean_loop_steps`, eval/evaluate.py).
"""

from __future__ import annotations

import torch
from torch import Tensor

from arcpipe.config.arch import LoopViTConfig
from arcpipe.models.loopvit import LoopViT, entropy_exit_steps, logits_at_steps, loop_regularizers
from arcpipe.models.varc_head import VARCHead, VARCModel


class LoopViTHead(VARCHead):
    """VARCHead with LoopViT's loop, exit and regularizers (module doc)."""

    test_time = False
    reports_loop_steps = True  # eval/infer.predict keeps each row's `loop_steps` (per_puzzle.csv's mean_loop_steps)

    def run_model(self, pixels: Tensor, task_ids: Tensor, mask: Tensor) -> tuple[Tensor, Tensor | None, Tensor | None]:
        cfg: LoopViTConfig = self.config  # type: ignore[assignment]
        dynamic = (cfg.train_dynamic_exit and not self.test_time) if self.training else cfg.eval_dynamic_exit
        if not self.training and cfg.exit_on_entropy_stable:  # upstream's entropy exit, in evaluation only
            out = self.model.inner(pixels, task_ids, mask, dynamic_exit=dynamic, step_logits=True)
            steps = entropy_exit_steps(out, cfg.entropy_patience, cfg.entropy_threshold_pct)
            return logits_at_steps(out, steps), None, steps
        out = self.model.inner(pixels, task_ids, mask, dynamic_exit=dynamic)
        extra = None
        if self.training and not self.test_time:
            neg_entropy, penalty = loop_regularizers(out, cfg.max_loop_steps)
            extra = cfg.gate_entropy_weight * neg_entropy + cfg.loop_penalty_weight * penalty
        return out.logits, extra, out.exit_steps


def build_loopvit(
    config: LoopViTConfig, *, vocab_size: int, seq_len: int, num_puzzle_identifiers: int, forward_dtype: torch.dtype
) -> LoopViTHead:
    """The head of a LoopViT for a dataset of arcpipe's ARC format (vocabulary 12, 30 x 30 maps)."""
    if vocab_size != 12 or seq_len != 900:
        raise ValueError(
            f"loopvit reads ARC grids in arcpipe's 30x30 token format (vocab_size 12, seq_len 900); this dataset has "
            f"vocab_size {vocab_size}, seq_len {seq_len}"
        )
    model = VARCModel(LoopViT(config, num_tasks=num_puzzle_identifiers))  # type: ignore[arg-type]
    return LoopViTHead(model, config, forward_dtype)  # type: ignore[arg-type]
