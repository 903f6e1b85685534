"""VARC-Unet (models/varc_unet.py) against upstream VARC's own code, and its count, head, compile and FLOPs.

The golden (tests/data/models/golden_varc_unet.pt) comes from upstream's ARCUNet (lillian039/VARC 537b01e) with
diffusers' UNet2DConditionModel, run by `tests/tools/record_varc_unet_goldens.py` in float64 on a 16 x 16 canvas at
small widths; it holds the weights under upstream's keys, so arcpipe loads exactly what upstream ran (strict) and must
give its logits, loss and every gradient. It also holds what upstream's published `big` model gives diffusers and its
parameter count, which the `arc` preset must reproduce.
"""

from __future__ import annotations

import sys
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from arcpipe.config.arch import VARCUNetConfig, make_arch_config
from arcpipe.models.flops import eval_flops_per_step, eval_steps, train_flops_per_example
from arcpipe.models.varc_unet import (
    VARCUNet,
    count_parameters_excluding_task_tokens,
    preset_parameter_count,
    unet_kwargs,
)

pytestmark = pytest.mark.skipif(find_spec("diffusers") is None, reason="diffusers missing: pip install 'arcpipe[unet]'")

GOLDEN = Path(__file__).parents[2] / "data" / "models" / "golden_varc_unet.pt"
FLOAT64 = dict(atol=1e-9, rtol=1e-9)
GRADS = dict(atol=1e-6, rtol=1e-6)  # the golden's gradients are stored in float32
IGNORE_INDEX = 10
ARC_PARAMETERS = 54_548_380  # upstream's count_parameters of ARCUNet(size="big"): "VARC-Unet-55M"


def test_arc_preset_is_upstreams_published_unet() -> None:
    golden = _golden()
    cfg = make_arch_config("varc-unet", "arc", {})
    assert unet_kwargs(cfg) == golden["published"]["unet_kwargs"]
    assert golden["published"]["parameters"] == ARC_PARAMETERS
    assert preset_parameter_count(cfg) == ARC_PARAMETERS
    with torch.device("meta"):
        model = VARCUNet(cfg, num_tasks=400)
    assert count_parameters_excluding_task_tokens(model) == ARC_PARAMETERS
    state = model.state_dict()
    assert list(state)[:4] == ["color_embed.weight", "task_token_embed.weight", "encoder.conv_in.weight",
                               "encoder.conv_in.bias"]  # fmt: skip
    assert tuple(state["color_embed.weight"].shape) == (12, 4)
    assert tuple(state["task_token_embed.weight"].shape) == (400, 320)
    assert tuple(state["encoder.conv_out.weight"].shape) == (12, 160, 3, 3)
    assert "encoder.mid_block.attentions.0.transformer_blocks.0.attn2.to_k.weight" in state


def test_golden_config_is_upstreams_call_at_small_widths() -> None:
    golden = _golden()
    assert unet_kwargs(_golden_config(golden)) == golden["upstream"]["unet_kwargs"]


@pytest.mark.numeric
def test_logits_loss_and_gradients_equal_upstream_golden() -> None:
    golden = _golden()
    logits, loss, grads = _run_golden(_golden_model(golden), golden)
    torch.testing.assert_close(logits, golden["logits"], **FLOAT64)
    torch.testing.assert_close(loss, golden["loss"], **FLOAT64)
    assert set(grads) == set(golden["grads"])
    # atol relative to the largest gradient entry of the whole model: some parameters' gradients are zero up to
    # rounding (the cross-attention blocks attend to one task token, so their query side cancels out: 1e-21 here),
    # and their rounding follows the CPU's kernels (ATEN_CPU_CAPABILITY=default differed 16x from the recording)
    scale = max(want.abs().max().item() for want in golden["grads"].values())
    for name, want in golden["grads"].items():
        tol = {**GRADS, "atol": GRADS["atol"] * scale}
        torch.testing.assert_close(
            grads[name].float(), want, **tol, msg=lambda m, name=name: f"gradient of {name}: {m}"
        )


@pytest.mark.numeric
@pytest.mark.parametrize("bug", ["transposed canvas", "timestep 1", "task token of the next task"])
def test_the_golden_catches_a_planted_bug(bug: str) -> None:
    golden = _golden()
    model = _golden_model(golden)
    encoder = model.encoder.forward

    def planted(x: torch.Tensor, t: int, task: torch.Tensor, return_dict: bool) -> Any:
        if bug == "transposed canvas":
            x = x.transpose(2, 3)
        elif bug == "timestep 1":
            t = 1
        else:
            task = model.task_token_embed((golden["task_ids"] + 1) % golden["num_tasks"]).unsqueeze(1)
        return encoder(x, t, task, return_dict=return_dict)

    model.encoder.forward = planted  # type: ignore[method-assign]
    logits, _, _ = _run_golden(model, golden, backward=False)
    with pytest.raises(AssertionError):
        torch.testing.assert_close(logits, golden["logits"], **FLOAT64)


def test_missing_diffusers_is_one_line_naming_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "diffusers", None)  # import diffusers -> ImportError
    with pytest.raises(ImportError, match=r"arch varc-unet needs diffusers.*: pip install 'arcpipe\[unet\]'$"):
        VARCUNet(make_arch_config("varc-unet", "tiny", {}), num_tasks=3)


def test_embeddings_start_trunc_normal() -> None:
    torch.manual_seed(0)
    model = VARCUNet(make_arch_config("varc-unet", "tiny", {}), num_tasks=300)
    for table in (model.task_token_embed.weight, model.color_embed.weight):
        assert table.abs().max() <= 2 and 0.01 < table.std() < 0.03


def test_mask_is_ignored_and_the_task_token_matters() -> None:
    # upstream passes attention_mask and never uses it; the task token is the cross-attention's only key
    model = _tiny().eval()
    pixels, task_ids, mask = _inputs(model.config, batch=2)
    with torch.no_grad():
        a = model(pixels, task_ids, mask)
        assert torch.equal(a, model(pixels, task_ids, torch.ones_like(mask)))
        assert (a != model(pixels, task_ids + 1, mask)).any()
    assert a.shape == (2, 12, 32, 32)


def test_the_timestep_reaches_diffusers_as_a_tensor_on_the_pixels_device() -> None:
    # a Python 0 makes diffusers build a tensor from the host in every forward: a host sync per step on CUDA (the
    # GPU test of host syncs found it, H200, 2026-11-27). What it is given must already be a tensor, on the device.
    model = _tiny().eval()
    seen: list[Any] = []
    embed = model.encoder.get_time_embed
    model.encoder.get_time_embed = lambda sample, timestep: seen.append((sample, timestep)) or embed(sample, timestep)
    pixels, task_ids, mask = _inputs(model.config, batch=2)
    with torch.no_grad():
        model(pixels, task_ids, mask)
    ((sample, timestep),) = seen
    assert torch.is_tensor(timestep) and timestep.device == sample.device
    assert timestep.dtype == torch.long and timestep.tolist() == [0, 0]  # upstream's timestep 0, per row


def test_config_errors_name_the_fields() -> None:
    with pytest.raises(ValueError, match=r"image_size=34 is not a multiple of 4"):
        make_arch_config("varc-unet", "tiny", {"image_size": 34})
    with pytest.raises(ValueError, match=r"image_size=28 < 32: the canvas interior"):
        make_arch_config("varc-unet", "tiny", {"image_size": 28})
    with pytest.raises(ValueError, match=r"embed_dim // 2 = 8 is not a multiple of norm_num_groups=3"):
        make_arch_config("varc-unet", "tiny", {"norm_num_groups": 3})
    with pytest.raises(ValueError, match=r"embed_dim // 2 = 8 .* not a multiple of num_heads=3"):
        make_arch_config("varc-unet", "tiny", {"num_heads": 3})
    cfg = make_arch_config("varc-unet", "arc", {})
    assert (cfg.block_out_channels, cfg.hidden_size, cfg.halt_max_steps) == ((160, 320, 320), 320, 1)


def test_training_step_compiles_whole_without_graph_breaks() -> None:
    # fullgraph: any graph break (a host sync, a branch on data) is an error; aot_eager traces forward and backward.
    # No bound on its wall time: a loaded CI machine took over 60 s (2026-11-28); a hang meets pytest's --timeout
    torch._dynamo.reset()
    model = _tiny().train()
    pixels, task_ids, mask = _inputs(model.config, batch=2)
    targets = torch.where(mask, pixels, IGNORE_INDEX)

    def step(pixels: torch.Tensor, task_ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return _upstream_loss(model(pixels, task_ids, mask), targets)

    loss = torch.compile(step, backend="aot_eager", fullgraph=True)(pixels, task_ids, mask)
    loss.backward()
    assert torch.isfinite(loss)
    assert all(p.grad is not None for p in model.parameters())


def test_the_varc_head_trains_the_unet(tiny_dataset: Path) -> None:
    # registry.build_model gives the VARC head (canvas, upstream's loss, decoding) around the U-Net
    from arcpipe.data.dataset import load_split
    from arcpipe.eval.infer import make_batch
    from arcpipe.models.registry import build_model
    from arcpipe.models.varc_head import VARCHead
    from arcpipe.train.sampler import canvas_draws

    split = load_split(tiny_dataset, "train")
    torch.manual_seed(0)
    head = build_model(
        make_arch_config("varc-unet", "tiny", {}),
        vocab_size=split.metadata.vocab_size,
        seq_len=split.metadata.seq_len,
        num_puzzle_identifiers=split.metadata.num_puzzle_identifiers,
        batch_size=4,
        device="cpu",
    )
    assert isinstance(head, VARCHead) and isinstance(head.model.inner, VARCUNet)
    ids = np.repeat(split.puzzle_identifiers, np.diff(split.puzzle_indices)).astype(np.int64)
    batch = make_batch(split.inputs, split.labels, ids, np.arange(4, dtype=np.int64) * 3, 4, torch.device("cpu"))
    batch["canvas_draws"] = torch.from_numpy(canvas_draws(0, 1, np.arange(4)))
    optimizer = torch.optim.AdamW(head.parameters(), lr=1e-2)
    losses = []
    for _ in range(3):
        _, loss, metrics, outputs = head.step(head.initial_carry(batch), batch, ("preds",))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] and int(metrics["count"]) == 4
    assert outputs["preds"].shape == batch["labels"].shape


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_flops_match_torch_counter(mode: str) -> None:
    # as test_flops.py for the other archs: SDPA's math backend, so that QK^T and AV are counted as matmuls
    model = _tiny().train(mode == "train")
    cfg = model.config
    pixels, task_ids, mask = _inputs(cfg, batch=2)
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        if mode == "train":
            _upstream_loss(model(pixels, task_ids, mask), torch.where(mask, pixels, IGNORE_INDEX)).backward()
        else:
            with torch.no_grad():
                model(pixels, task_ids, mask)
    predicted = train_flops_per_example(cfg, 900) if mode == "train" else eval_flops_per_step(cfg, 900)
    assert counter.get_total_flops() == predicted.total * 2
    assert eval_steps(cfg) == 1


# ------------------------------------------------------------------------------------------------------------------


def _golden() -> dict[str, Any]:
    return torch.load(GOLDEN, weights_only=True)


def _golden_config(golden: dict[str, Any]) -> VARCUNetConfig:
    # the golden's canvas is 16 pixels, under the 32 that ARC grids need (VARCUNetConfig refuses it); the model itself
    # is defined for any canvas that halves twice, so its config is built without that check
    return VARCUNetConfig.model_construct(**golden["config"])


def _golden_model(golden: dict[str, Any]) -> VARCUNet:
    model = VARCUNet(_golden_config(golden), num_tasks=golden["num_tasks"]).double()
    model.load_state_dict(golden["weights"], strict=True)
    return model.eval()


def _run_golden(
    model: VARCUNet, golden: dict[str, Any], backward: bool = True
) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    logits = model(golden["pixels"], golden["task_ids"], golden["mask"])
    loss = _upstream_loss(logits, golden["targets"])
    if backward:
        loss.backward()
    return logits, loss, {k: p.grad for k, p in model.named_parameters()}


def _tiny() -> VARCUNet:
    torch.manual_seed(0)
    return VARCUNet(make_arch_config("varc-unet", "tiny", {}), num_tasks=7)


def _inputs(cfg: VARCUNetConfig, batch: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A grid per row at an odd offset, the rest background (10), as upstream's loader."""
    g = torch.Generator().manual_seed(1)
    S = cfg.image_size
    pixels = torch.full((batch, S, S), IGNORE_INDEX)
    mask = torch.zeros((batch, S, S), dtype=torch.bool)
    for row in range(batch):
        top, left, h, w = 1 + 2 * row, 3, 5 + 4 * row, 9
        pixels[row, top : top + h, left : left + w] = torch.randint(0, 10, (h, w), generator=g)
        mask[row, top : top + h, left : left + w] = True
    return pixels, torch.arange(batch) + 1, mask


def _upstream_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """upstream's training loss: per-pixel cross entropy, background ignored, mean over the other pixels."""
    C = logits.shape[1]
    return F.cross_entropy(logits.permute(0, 2, 3, 1).reshape(-1, C), targets.reshape(-1), ignore_index=IGNORE_INDEX)
