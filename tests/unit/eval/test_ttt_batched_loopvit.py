"""LoopViT's test-time training K tasks a step (eval/batched.py): each task's fit equals its fit alone (ttt.fit_task),
as tests/unit/eval/test_ttt_batched.py holds VARC's, on the same three tasks (2, 3 and 4 views; 1, 2 and 3 steps an
epoch) with a tiny LoopViT (32 x 32 canvas of 4 x 4 patches, width 32, a hybrid core of 2 layers run 3 times).

Test-time training is upstream's: the pixel loss alone and no exit while fitting (`head.test_time`,
models/loopvit_head.py), so the exit gate takes no part in the loss: its weights get no gradient and must not move,
alone or batched (eval/batched.py gives such a weight a zero gradient; before, the batched fit failed on LoopViT's
output and on the gate's missing gradient). The gate is set so that it would stop some rows at step 2: answers
(`eval_dynamic_exit`, on) exit at mixed steps, and a batched fit that exited while fitting differs from the fit
alone by 1.4 of a tensor's largest value (planted, measured). Measured here (float64, K = 2 and 3): the largest
difference of any tensor is 1.1e-14 of its largest value (float32, K = 3: 7.1e-6); asserted at 1e-11, as for VARC.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from test_ttt_batched import SIZES, fit_alone, fit_together, recipe, tiny, worst

from arcpipe.config.arch import make_arch_config
from arcpipe.models.registry import build_model

pytestmark = pytest.mark.numeric


def tiny_loopvit(dtype: torch.dtype) -> tuple[torch.nn.Module, Any]:
    """A tiny LoopViT without dropout, set for test-time training, and test_ttt_batched's three tasks."""
    _, data = tiny(dtype)
    torch.manual_seed(0)
    head = build_model(
        make_arch_config("loopvit", "tiny", {"patch_size": 4, "dropout": 0.0}),
        vocab_size=12,
        seq_len=900,
        num_puzzle_identifiers=9,
        batch_size=4,
        device="cpu",
    ).to(dtype)
    with torch.no_grad():  # a gate that would stop some rows at step 2 (untrained, it sits at 0.5 < 0.6): a fit
        gate = head.model.inner.exit_gate[-1]  # that exited while fitting would then differ from one that did not
        gate.weight.normal_(std=3.0)
        gate.bias.fill_(1.2)
    head.test_time = True  # as ttt.run_job sets it on the heads it fits
    return head, data


def test_each_loopvit_task_of_a_batched_fit_equals_its_fit_alone_in_float64() -> None:
    torch.set_num_threads(1)
    head, data = tiny_loopvit(torch.float64)
    cfg = recipe()
    alone = fit_alone(head, data, cfg)
    start = {k: v.detach().clone() for k, v in head.model.inner.named_parameters()}
    for t in SIZES:  # the gate is no part of test-time training's loss: it stays as the checkpoint had it
        assert all(torch.equal(alone[t]["weights"][k], v) for k, v in start.items() if k.startswith("exit_gate"))
        assert not torch.equal(
            alone[t]["weights"]["core_layers.0.self_attn.qkv.weight"], start["core_layers.0.self_attn.qkv.weight"]
        )
    for K in (2, 3):
        together = fit_together(head, data, cfg, K)
        assert {t: s["steps"] for t, s in together.items()} == {t: s["steps"] for t, s in alone.items()}
        assert worst(together, alone) < 1e-11, K
        assert all(torch.equal(together[t]["answers"], alone[t]["answers"]) for t in SIZES)


def test_a_loopvit_head_outside_test_time_training_is_refused_by_the_batched_fit() -> None:
    # its training loss has the gate regularizers and the exit, which the batched loss (the pixel mean) has not
    head, data = tiny_loopvit(torch.float64)
    head = copy.deepcopy(head)
    head.test_time = False
    with pytest.raises(ValueError, match="test_time"):
        fit_together(head, data, recipe(), 2)
