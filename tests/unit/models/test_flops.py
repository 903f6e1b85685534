"""The FLOP count of arcpipe.models.flops against torch's own counter on a real training and evaluation step.

`torch.utils.flop_counter.FlopCounterMode` counts the matmuls and convolutions the model really dispatches (forward
and backward); attention runs on SDPA's math backend so that QK^T and AV are counted (torch has no formula for the
CPU flash kernel). Neither side counts elementwise work. One known flaw of the counter: its formula for the
backward of a grouped conv ignores `groups` (a depthwise conv's backward is counted as if dense, ~channels x too
much), so for URM the conv's backward is left out on both sides; its forward is compared.
"""

from __future__ import annotations

import pytest
import torch
from modelkit import NUM_IDS, VOCAB, make_batch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from arcpipe.models import layers
from arcpipe.models.flops import (
    eval_flops_per_step,
    eval_steps,
    intermediate_size,
    peak_bf16_flops,
    train_flops_per_example,
)
from arcpipe.models.registry import build_model, make_arch_config

SEQ_LEN = 60  # attention (S^2) and the projections (S) both matter at this length with hidden 64
BATCH = 2

# tiny presets with more than one cycle, so the no-grad part of each recursion is exercised
CASES = {
    "trm": ("trm", {"H_cycles": 3, "L_cycles": 2, "L_layers": 2, "halt_max_steps": 3}),
    "trm_mlp_t": ("trm", {"H_cycles": 2, "L_cycles": 2, "mlp_t": True, "pos_encodings": "none"}),
    "trm_q_continue": ("trm", {"H_cycles": 2, "L_cycles": 3, "no_ACT_continue": False}),  # bootstrapped Q target
    "hrm": ("hrm", {"H_cycles": 2, "L_cycles": 3, "H_layers": 2}),  # bootstrapped Q target
    "urm": ("urm", {"H_cycles": 2, "L_cycles": 2, "num_layers": 2}),
    "urm_elementwise": ("urm", {"H_cycles": 2, "L_cycles": 2, "num_layers": 2, "conv_impl": "elementwise"}),
    "transformer": ("transformer", {"num_heads": 6}),  # head size 10: attention 60 wide on hidden 64
}

# Both sides count the same matmuls with the same shapes: with torch 2.13 the numbers are equal. 0.1% tolerates a
# future counter that rounds differently; one block application too many or too few is several percent here.
REL_TOL = 1e-3


@pytest.mark.parametrize("case", sorted(CASES))
def test_training_flops_match_torch_counter(case: str) -> None:
    arch, overrides = CASES[case]
    cfg, head = _head(arch, overrides)
    head.train()
    batch = make_batch(BATCH, seq_len=SEQ_LEN)
    batch["halt_min_steps"] = torch.zeros(BATCH, dtype=torch.int32)
    carry = head.initial_carry(batch)
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        _, loss, _, _ = head.step(carry, batch)
        loss.backward()
    predicted = train_flops_per_example(cfg, SEQ_LEN, VOCAB)
    measured = counter.get_total_flops()
    conv_backward = _by_op(counter, "convolution_backward")
    assert (conv_backward > 0) == _counts_conv(cfg)
    if conv_backward:  # URM's conv1d: the counter's grouped-conv backward is wrong, so only the forward is compared
        forward_conv = eval_flops_per_step(cfg, SEQ_LEN, VOCAB).conv  # every conv runs once forward
        measured -= conv_backward
        expected = (predicted.total - (predicted.conv - forward_conv)) * BATCH
    else:
        # URM's elementwise conv is model FLOPs (counted as upstream's Conv1d computes it) but elementwise work,
        # which the counter (matrix products, attention, convolutions) does not see
        expected = (predicted.total - predicted.conv) * BATCH
    assert measured == pytest.approx(expected, rel=REL_TOL)


@pytest.mark.parametrize("case", sorted(CASES))
def test_evaluation_flops_match_torch_counter(case: str) -> None:
    arch, overrides = CASES[case]
    cfg, head = _head(arch, overrides)
    head.eval()
    batch = make_batch(BATCH, seq_len=SEQ_LEN)
    carry = head.initial_carry(batch)
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        head.step(carry, batch)
    predicted = eval_flops_per_step(cfg, SEQ_LEN, VOCAB)
    seen = predicted.total if _counts_conv(cfg) else predicted.total - predicted.conv  # elementwise: not seen
    assert counter.get_total_flops() == pytest.approx(seen * BATCH, rel=REL_TOL)


def test_gradient_cycles_cost_three_forwards() -> None:
    # TRM at H_cycles=1 has no no-grad cycle: training is exactly 3x evaluation (forward + 2x backward)
    cfg = make_arch_config("trm", "tiny", {"H_cycles": 1})
    assert train_flops_per_example(cfg, 900) == 3 * eval_flops_per_step(cfg, 900)


def test_published_trm_counts_ten_no_grad_and_five_gradient_net_calls() -> None:
    # H3 L4: (3-1) x (4+1) no-grad and (4+1) gradient calls of the 2-block net per ACT step. Solve for one net call
    # N and the heads h from two evaluation counts (15 N + h at H3, 5 N + h at H1), then training is 10 N + 3 (5 N + h)
    cfg = make_arch_config("trm", "arc", {})
    h3 = eval_flops_per_step(cfg, 900).total
    h1 = eval_flops_per_step(make_arch_config("trm", "arc", {"H_cycles": 1}), 900).total
    net = (h3 - h1) // 10
    heads = h1 - 5 * net
    assert train_flops_per_example(cfg, 900).total == 25 * net + 3 * heads
    assert eval_steps(cfg) == 16


def test_intermediate_size_follows_layers() -> None:
    for hidden, expansion in [(64, 2), (512, 4), (916, 4), (100, 2.5)]:
        assert intermediate_size(hidden, expansion) == layers.intermediate_size(hidden, expansion)


@pytest.mark.parametrize(
    ("name", "peak"),
    [
        ("NVIDIA H100 80GB HBM3", 989e12),
        ("NVIDIA H100 PCIe", 756e12),
        ("NVIDIA H200", 989e12),
        ("NVIDIA A100-SXM4-80GB", 312e12),
        ("NVIDIA L4", 121e12),
        ("NVIDIA L40S", 362e12),
        ("NVIDIA GeForce RTX 4090", 165e12),
        ("Tesla T4", None),
    ],
)
def test_peak_of_known_gpus(name: str, peak: float | None) -> None:
    assert peak_bf16_flops(name) == peak


def _head(arch: str, overrides: dict) -> tuple[object, torch.nn.Module]:
    torch.manual_seed(0)
    cfg = make_arch_config(arch, "tiny", overrides)
    head = build_model(
        cfg, vocab_size=VOCAB, seq_len=SEQ_LEN, num_puzzle_identifiers=NUM_IDS, batch_size=BATCH, device="cpu"
    )
    return cfg, head


def _counts_conv(cfg: object) -> bool:
    """Whether the model dispatches a convolution the counter sees: URM's conv1d (its default), not elementwise."""
    return getattr(cfg, "conv_impl", None) == "conv1d"


def _by_op(counter: FlopCounterMode, name: str) -> int:
    return sum(v for op, v in counter.get_flop_counts()["Global"].items() if str(op).endswith(name))
