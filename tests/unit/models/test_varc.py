"""VARC-ViT (models/varc.py) against upstream VARC's own code, and its shape, count, mask and compile properties.

The golden (tests/data/models/golden_varc.pt) comes from upstream's ARCViT (lillian039/VARC 537b01e), run by
`tests/tools/record_varc_goldens.py` in float64 on a 16 x 16 canvas; it holds upstream's weights under upstream's
keys, so arcpipe loads exactly what upstream ran (strict) and must give its logits, loss and every gradient.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from arcpipe.config.arch import VARCConfig, make_arch_config
from arcpipe.models.flops import eval_flops_per_step, eval_steps, train_flops_per_example
from arcpipe.models.varc import VARCViT, count_parameters_excluding_task_tokens, preset_parameter_count

GOLDEN = Path(__file__).parents[2] / "data" / "models" / "golden_varc.pt"
# float64 on both sides; upstream's explicit softmax and torch's SDPA sum in other orders (~1e-16), see
# test_upstream_parity.py for why 1e-9 holds on every CPU and still catches any change of function
FLOAT64 = dict(atol=1e-9, rtol=1e-9)
FLOAT32 = dict(atol=1e-6, rtol=1e-6)
IGNORE_INDEX = 10

# upstream-varc.md 2.11, after the `_orig_mod.` prefix: keys of one encoder layer, then the published shapes
LAYER_KEYS = [
    "self_attn.qkv.weight", "self_attn.qkv.bias", "self_attn.proj.weight", "self_attn.proj.bias",
    "self_attn.rotary.freqs_cos", "self_attn.rotary.freqs_sin", "norm1.weight", "norm1.bias", "linear1.weight",
    "linear1.bias", "linear2.weight", "linear2.bias", "norm2.weight", "norm2.bias",
]  # fmt: skip
ARC_SHAPES = {
    "positional_embed": (1, 1024, 512),
    "color_embed.weight": (12, 512),
    "task_token_embed.weight": (400, 512),
    "patch_embed.proj.weight": (512, 512, 2, 2),
    "patch_embed.proj.bias": (512,),
    **{f"encoder.layers.{i}.self_attn.qkv.weight": (1536, 512) for i in range(10)},
    **{f"encoder.layers.{i}.self_attn.rotary.freqs_cos": (1024, 64) for i in range(10)},
    **{f"encoder.layers.{i}.linear1.weight": (512, 512) for i in range(10)},
    "norm.weight": (512,),
    "head.weight": (48, 512),
    "head.bias": (48,),
}


def test_arc_preset_has_upstream_keys_in_upstream_order() -> None:
    with torch.device("meta"):
        model = VARCViT(make_arch_config("varc", "arc", {}), num_tasks=400)
    state = model.state_dict()
    layers = [f"encoder.layers.{i}.{k}" for i in range(10) for k in LAYER_KEYS]
    head = ["positional_embed", "color_embed.weight", "task_token_embed.weight", "patch_embed.proj.weight"]
    assert list(state) == [
        *head,
        "patch_embed.proj.bias",
        *layers,
        "norm.weight",
        "norm.bias",
        "head.weight",
        "head.bias",
    ]
    for key, shape in ARC_SHAPES.items():
        assert tuple(state[key].shape) == shape, key


def test_arc_preset_has_upstream_parameter_count() -> None:
    # upstream-varc.md 2.10: what upstream prints (task tokens left out), and the total with ARC-1's 400 tasks
    cfg = make_arch_config("varc", "arc", {})
    with torch.device("meta"):
        model = VARCViT(cfg, num_tasks=400)
    assert count_parameters_excluding_task_tokens(model) == 17_385_008
    assert sum(p.numel() for p in model.parameters()) == 17_589_808
    assert preset_parameter_count(cfg) == 17_385_008


@pytest.mark.numeric
def test_logits_loss_and_gradients_equal_upstream_golden() -> None:
    golden = _golden()
    model = _golden_model(golden).double()
    model.load_state_dict(golden["weights"], strict=True)
    model.eval()  # dropout off, as recorded
    logits = model(golden["pixels"], golden["task_ids"], golden["mask"])
    loss = _upstream_loss(logits, golden["targets"])
    loss.backward()
    torch.testing.assert_close(logits, golden["logits"], **FLOAT64)
    torch.testing.assert_close(loss, golden["loss"], **FLOAT64)
    grads = {k: p.grad for k, p in model.named_parameters()}
    assert set(grads) == set(golden["grads"])
    for name, want in golden["grads"].items():
        # atol relative to the tensor's largest entry: entries where terms cancel are small
        tol = {**FLOAT64, "atol": FLOAT64["atol"] * want.abs().max().item()}
        torch.testing.assert_close(grads[name], want, **tol, msg=lambda m, name=name: f"gradient of {name}: {m}")


@pytest.mark.numeric
def test_initialisation_draws_upstream_numbers_under_one_seed() -> None:
    # upstream's init under the recorded seed: torch defaults, trunc-normal(0.02) embeddings, zero head bias, and
    # the RoPE tables; the golden changed some tensors after init and kept their initial values in `init`
    golden = _golden()
    torch.manual_seed(golden["init_seed"])
    model = _golden_model(golden)
    for key, got in model.state_dict().items():
        want = golden["init"].get(key, golden["weights"][key])
        torch.testing.assert_close(got.double(), want.double(), **FLOAT32, msg=lambda m, key=key: f"{key}: {m}")


def test_embeddings_start_trunc_normal_and_head_bias_zero() -> None:
    torch.manual_seed(0)
    model = VARCViT(make_arch_config("varc", "tiny", {}), num_tasks=300)
    for table in (model.positional_embed, model.task_token_embed.weight, model.color_embed.weight):
        assert table.abs().max() <= 2 and 0.015 < table.std() < 0.025
    assert torch.count_nonzero(model.head.bias) == 0


def test_off_grid_pixels_reach_no_on_grid_logit() -> None:
    # a patch with no pixel on the input grid is masked as a key: what it holds changes only its own logits
    model = _tiny().eval()
    pixels, task_ids, mask = _inputs(model.config, batch=2)
    other = pixels.clone()
    off = ~mask.view(2, 16, 2, 16, 2).any(4).any(2).repeat_interleave(2, 1).repeat_interleave(2, 2)  # (B, S, S)
    other[off] = (other[off] + 3) % 12
    with torch.no_grad():
        a, b = model(pixels, task_ids, mask), model(other, task_ids, mask)
    on = ~off.unsqueeze(1).expand_as(a)
    assert torch.equal(a[on], b[on]) and not torch.equal(a, b)


def test_task_token_changes_every_logit() -> None:
    model = _tiny().eval()
    pixels, task_ids, mask = _inputs(model.config, batch=2)
    with torch.no_grad():
        a, b = model(pixels, task_ids, mask), model(pixels, task_ids + 1, mask)
    assert (a != b).all()


def test_dropout_only_in_training() -> None:
    model = _tiny()
    pixels, task_ids, mask = _inputs(model.config, batch=2)
    with torch.no_grad():
        model.train()
        assert not torch.equal(model(pixels, task_ids, mask), model(pixels, task_ids, mask))
        model.eval()
        assert torch.equal(model(pixels, task_ids, mask), model(pixels, task_ids, mask))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"pixels": lambda p: p[:, :-2, :-2]}, r"pixels of shape \(2, 30, 30\), expected \(B, 32, 32\)"),
        ({"pixels": lambda p: p.float()}, r"pixels of dtype torch.float32, expected integer colours"),
        ({"mask": lambda m: m.long()}, r"mask of shape \(2, 32, 32\) and dtype torch.int64, expected bool"),
        ({"task_ids": lambda t: t[:1]}, r"task_ids of shape \(1,\), expected \(2,\)"),
    ],
)
def test_wrong_inputs_are_refused_by_name(change: dict[str, Any], message: str) -> None:
    model = _tiny()
    pixels, task_ids, mask = _inputs(model.config, batch=2)
    args = {"pixels": pixels, "task_ids": task_ids, "mask": mask}
    for key, fn in change.items():
        args[key] = fn(args[key])
    with pytest.raises(ValueError, match=message):
        model(**args)


def test_config_errors_name_the_fields() -> None:
    with pytest.raises(ValueError, match=r"image_size=30 < 32: the canvas interior"):
        make_arch_config("varc", "tiny", {"image_size": 30})
    with pytest.raises(ValueError, match=r"image_size=33 is not a multiple of patch_size=2"):
        make_arch_config("varc", "tiny", {"image_size": 33})
    with pytest.raises(ValueError, match=r"embed_dim=64 is not a multiple of num_heads=3"):
        make_arch_config("varc", "tiny", {"num_heads": 3})
    with pytest.raises(ValueError, match=r"head size embed_dim // num_heads = 2 is not a multiple of 4"):
        make_arch_config("varc", "tiny", {"num_heads": 32})
    cfg = make_arch_config("varc", "arc", {})
    assert (cfg.grid_side, cfg.num_patches, cfg.hidden_size, cfg.halt_max_steps) == (32, 1024, 512, 1)


def test_training_step_compiles_whole_without_graph_breaks() -> None:
    # fullgraph: any graph break (a host sync, a branch on data) is an error. aot_eager traces the forward and its
    # backward (AOT autograd's joint graph) as inductor would, without compiling kernels; dropout on, as in training
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


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_flops_match_torch_counter(mode: str) -> None:
    # as test_flops.py for the other archs: SDPA's math backend, so that QK^T and AV are dispatched as matmuls and
    # counted; the count is exact (no elementwise work on either side)
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


def _golden_model(golden: dict[str, Any]) -> VARCViT:
    # the golden's canvas is 16 pixels, under the 32 that ARC grids need (VARCConfig refuses it); the model itself
    # is defined for any canvas, so its config is built without that check
    return VARCViT(VARCConfig.model_construct(**golden["config"]), num_tasks=golden["num_tasks"])


def _tiny() -> VARCViT:
    torch.manual_seed(0)
    return VARCViT(make_arch_config("varc", "tiny", {}), num_tasks=7)


def _inputs(cfg: VARCConfig, batch: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A grid per row at an odd offset (patches partly on it), the rest background (10), as upstream's loader."""
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
