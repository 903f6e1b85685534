"""What only a GPU can check: bf16 training of every preset, flash-attn, the adam-atan2 kernel, compile, resume, eval.

    pytest -m gpu            # on a CUDA machine; everywhere else these are collected and skipped (tests/conftest.py)

Tolerances, where a result cannot be bitwise:
* bf16 keeps 8 significant bits (a rounding is up to 2^-9 = 0.2% relative). Two kernels that compute the same
  bf16 function (flash-attn and SDPA; compiled and eager, where Inductor keeps fused intermediates in fp32) differ by
  a few such roundings per layer: compared as norm-relative errors (|a - b| / |b| over the whole tensor), 2% for
  one attention layer, 5% for a whole model step.
* fp32 optimizer updates from different kernels (the CUDA extension, Inductor, eager ATen: fma contraction,
  libdevice vs ATen atan2) differ by an ulp per step on updates of ~lr: within 1e-6 after 100 steps, as the CPU test
  against the float64 formula. bf16 parameters round each update to bf16, so an ulp of fp32 can flip a rounding:
  within 2 bf16 ulps (relative 2^-6, absolute 1e-4 near zero).
* Resume is checked bitwise, under deterministic settings (SDPA's math kernel, no flash-attn, deterministic
  algorithms): flash and memory-efficient attention backward accumulate with atomics, so two uninterrupted GPU runs
  need not agree to the bit without them. The test first checks that two uninterrupted runs agree, so a failure
  says which of the two went wrong.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from arcpipe.config import load_config
from arcpipe.config.arch import PRESETS, VARC_ARCHS
from arcpipe.data.augment import to_canvas
from arcpipe.data.dataset import load_split
from arcpipe.eval.infer import make_batch as predict_batch
from arcpipe.eval.infer import predict
from arcpipe.models import layers
from arcpipe.models.io import load_weights
from arcpipe.models.registry import build_model, make_arch_config
from arcpipe.optim import AdamATan2, make_optimizers
from arcpipe.optim import adam_atan2 as adam_atan2_module
from arcpipe.train.checkpoint import load_state
from arcpipe.train.distributed import DistEnv
from arcpipe.train.loop import Trainer

pytestmark = pytest.mark.gpu

CUDA = torch.device("cuda", 0)
VOCAB, SEQ_LEN, NUM_IDS = 12, 48, 10
PRESET_CASES = [(arch, preset, "adam_atan2") for arch, presets in PRESETS.items() for preset in presets]
PRESET_CASES += [("urm", preset, "muon") for preset in PRESETS["urm"]]  # URM's ARC-AGI-2 recipe


@pytest.fixture(autouse=True)
def _fresh_compile_caches() -> Iterator[None]:
    # every test compiles afresh: a function recompiled past torch._dynamo's limit silently runs eagerly, and a
    # compiled-against-eager comparison would then compare eager with eager
    torch._dynamo.reset()
    yield


# -- bf16 training of every preset ------------------------------------------------------------------------------


@pytest.mark.parametrize(("arch", "preset", "optimizer"), PRESET_CASES, ids=["-".join(c) for c in PRESET_CASES])
def test_every_preset_trains_bf16_steps_without_nan_or_inf(arch: str, preset: str, optimizer: str) -> None:
    head = _head(arch, preset, batch_size=2)
    forward_dtype = getattr(head, "forward_dtype", None) or head.model.inner.forward_dtype  # VARC: on the head
    assert forward_dtype == torch.bfloat16
    # eager AdamATan2: compiling it for every preset's parameter list would pass torch._dynamo's recompile limit
    optimizers = make_optimizers(
        head, lr=1e-4, puzzle_emb_lr=1e-2, weight_decay=0.1, puzzle_emb_weight_decay=0.1, optimizer=optimizer,
        compile=False,
    )  # fmt: skip
    head.train()
    carry = None
    for step in range(4):
        batch = _batch(2, seed=step, arch=arch)
        if carry is None:
            carry = head.initial_carry(batch)
        carry, loss, _, _ = head.step(carry, batch)
        assert torch.isfinite(loss), (step, float(loss))
        (loss / 2).backward()
        for opt, _ in optimizers:
            opt.step()
            opt.zero_grad(set_to_none=True)
        assert all(torch.isfinite(t).all() for t in carry.inner), step
    for name, t in [*head.named_parameters(), *head.named_buffers()]:
        if t.is_floating_point():
            assert torch.isfinite(t).all(), name


# -- flash-attn against SDPA ------------------------------------------------------------------------------------


def test_flash_attention_matches_sdpa_in_outputs_and_gradients(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("flash_attn")
    torch.manual_seed(0)
    with torch.device(CUDA):
        attn = layers.Attention(hidden_size=512, num_heads=8)  # head size 64, as every arc preset but transformer
        rope = layers.RotaryEmbedding(64, 916, 10000.0)
    x0 = torch.randn(2, 916, 512, device=CUDA, dtype=torch.bfloat16)  # 16 prefix positions + 900 tokens
    grad_out = torch.randn(2, 916, 512, device=CUDA, dtype=torch.bfloat16)
    assert layers.flash_attention_usable(CUDA, torch.bfloat16, attn.head_dim)

    def run() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        attn.zero_grad(set_to_none=True)
        x = x0.clone().requires_grad_(True)
        out = attn(x, rope())
        out.backward(grad_out)
        return out.detach(), x.grad, attn.qkv_proj.weight.grad

    flash = run()
    monkeypatch.setattr(layers, "_flash_attn_func", None)
    assert not layers.flash_attention_usable(CUDA, torch.bfloat16, attn.head_dim)
    sdpa = run()
    for name, a, b in zip(("output", "input grad", "qkv weight grad"), flash, sdpa, strict=True):
        assert _relative_error(a, b) < 2e-2, (name, _relative_error(a, b))


# -- AdamATan2 on CUDA -------------------------------------------------------------------------------------------

SHAPES = [(4096, 33), (512, 512), (12, 512), (2,), (1,), (1000, 7)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("compile", [False, True], ids=["eager", "compiled"])
def test_adam_atan2_cuda_kernel_matches_the_torch_rule(dtype: torch.dtype, compile: bool) -> None:
    pytest.importorskip("adam_atan2_backend")
    if not adam_atan2_module._ext_supports(CUDA):
        pytest.skip(f"adam_atan2_backend is not built for SM {torch.cuda.get_device_capability(CUDA)}")
    ext_params, torch_params = _cuda_params(dtype), _cuda_params(dtype)
    ext = AdamATan2(ext_params, lr=1e-3)
    ours = AdamATan2(torch_params, lr=1e-3, compile=compile)
    assert ext.backend == "cuda-ext"
    ours.backend = "torch"
    _run_same_gradients([ext, ours], [ext_params, torch_params], steps=100)
    _assert_updates_close(ext_params, torch_params, dtype)
    for a, b in zip(ext_params, torch_params, strict=True):
        assert torch.equal(ext.state[a]["step"], ours.state[b]["step"])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_adam_atan2_compiled_matches_eager_on_cuda(dtype: torch.dtype) -> None:
    eager_params, compiled_params = _cuda_params(dtype), _cuda_params(dtype)
    eager = AdamATan2(eager_params, lr=1e-3, compile=False)
    compiled = AdamATan2(compiled_params, lr=1e-3, compile=True)
    eager.backend = compiled.backend = "torch"
    _run_same_gradients([eager, compiled], [eager_params, compiled_params], steps=100)
    _assert_updates_close(eager_params, compiled_params, dtype)


@pytest.mark.parametrize("compile", [False, True], ids=["eager", "compiled"])
def test_adam_atan2_torch_backend_steps_without_a_host_sync(compile: bool) -> None:
    # the point of the foreach rewrite: the old loop read every step count to the host (float(t)) and copied a
    # scalars tensor to the device per parameter; a synchronizing call now raises
    params = _cuda_params(torch.float32) + _cuda_params(torch.bfloat16)
    opt = AdamATan2(params, lr=1e-3, compile=compile)
    opt.backend = "torch"
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3
    opt.step()  # state and compilation may sync
    opt.step()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            for group in opt.param_groups:
                group["lr"] *= 0.5  # as the schedule does: no recompilation, no copy
            opt.step()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    assert all(float(opt.state[p]["step"]) == 5 for p in params)


@pytest.mark.parametrize("arch", ["varc", "loopvit"])
def test_a_compiled_batched_ttt_step_is_each_task_own_on_cuda(arch: str) -> None:
    # eval/batched.py's K forwards under vmap, compiled as a job compiles them, on CUDA: each task's loss and gradients
    # equal its own step's. The first GPU run (2026-11-28) failed here: the memory-efficient attention's backward
    # under vmap ("LSE is not correctly aligned (strideH)"); batched.attention_backends keeps it out.
    from arcpipe.eval import batched, ttt

    torch.manual_seed(0)
    overrides = {"dropout": 0.0, "image_size": 32, "patch_size": 4}
    head = build_model(
        make_arch_config(arch, "tiny", overrides),
        vocab_size=12,
        seq_len=900,
        num_puzzle_identifiers=5,
        batch_size=4,
        device=CUDA,
    )
    if arch == "loopvit":
        head.test_time = True  # the pixel loss alone, as ttt.run_job sets it
    rng = np.random.default_rng(0)
    grids = [rng.integers(0, 10, size=rng.integers(2, 6, size=2), dtype=np.uint8) for _ in range(8)]
    inputs = np.stack([to_canvas(g) for g in grids])
    labels = np.stack([to_canvas((g + 1) % 10) for g in grids])
    ids = np.arange(8) % 4 + 1
    K, batches = 2, []
    for chunk in (np.arange(4), np.arange(4, 8)):
        batch = ttt.make_batch(inputs, labels, ids, chunk, 4, CUDA)
        batch["canvas_draws"] = torch.rand((4, 3), dtype=torch.float64, device=CUDA)
        batches.append(batch)
    inner = head.model.inner
    params = {
        n: torch.stack([p.detach() + 0.01 * k for k in range(K)]).requires_grad_() for n, p in inner.named_parameters()
    }
    stacked = {key: torch.stack([b[key] for b in batches]) for key in batches[0]}
    head.train()
    losses = torch.compile(batched.batched_loss, fullgraph=True)(head, params, stacked)
    grads = torch.autograd.grad(losses.sum(), list(params.values()), allow_unused=True)  # LoopViT: its exit gate
    for k, batch in enumerate(batches):
        with torch.no_grad():
            for name, p in inner.named_parameters():
                p.copy_(params[name][k])
        inner.zero_grad(set_to_none=True)
        loss = ttt.step_loss(head, batch)
        loss.backward()
        assert [g is None for g in grads] == [p.grad is None for p in inner.parameters()]
        # bf16 autocast on both sides, other attention kernels (math batched, memory-efficient alone): bf16's rounding
        assert abs(losses[k].item() - loss.item()) <= 2e-2 * loss.item()
        for g, (name, p) in zip(grads, inner.named_parameters(), strict=True):
            if g is None:
                continue
            scale = p.grad.abs().max().clamp_min(1e-6)
            assert (g[k] - p.grad).abs().max() <= 5e-2 * scale, name


@pytest.mark.parametrize("arch", list(PRESETS))
def test_a_whole_training_step_makes_no_host_sync_on_cuda(arch: str) -> None:
    # the CPU proof (tests/unit/models/test_graphs.py) records the ops that would sync; CUDA itself says so here:
    # forward, loss, backward, SparseSignSGD (its per-id sums without `unique`), AdamATan2 (torch rule), EMA
    from arcpipe.optim import EMA

    head = _head(arch, "tiny", batch_size=4)
    optimizers = make_optimizers(
        head, lr=1e-4, puzzle_emb_lr=1e-2, weight_decay=0.1, puzzle_emb_weight_decay=0.1, compile=False
    )
    for opt, _ in optimizers:
        if isinstance(opt, AdamATan2):
            opt.backend = "torch"
    ema = EMA(head, 0.999)
    batch = {**_batch(4, seed=0, arch=arch), "halt_min_steps": torch.zeros(4, dtype=torch.int32, device=CUDA)}
    head.train()
    carry = head.initial_carry(batch)

    def step() -> None:
        nonlocal carry
        carry, loss, _, _ = head.step(carry, batch)
        (loss / 4).backward()
        for opt, _ in optimizers:
            opt.step()
            opt.zero_grad(set_to_none=True)
        ema.update()

    step()  # optimizer state and lazy initialisation may sync once
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        step()
        step()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()


def test_adam_atan2_state_loaded_on_the_cpu_moves_to_the_parameters_device() -> None:
    # load_state maps files to the CPU, and torch.optim keeps a loaded `step` where it was mapped
    params = _cuda_params(torch.float32)
    opt = AdamATan2(params, lr=1e-3, compile=False)
    opt.backend = "torch"
    _run_same_gradients([opt], [params], steps=3)
    state = {"state": {k: {n: t.cpu() for n, t in s.items()} for k, s in opt.state_dict()["state"].items()}}
    state["param_groups"] = opt.state_dict()["param_groups"]
    again = AdamATan2(params, lr=1e-3, compile=False)
    again.load_state_dict(state)
    assert all(s["step"].device == CUDA and s["step"].dtype == torch.float32 for s in again.state.values())


# -- torch.compile against eager ---------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", list(PRESETS))
def test_compiled_step_matches_eager_in_bf16(arch: str) -> None:
    # VARC without dropout: inductor draws its dropout masks from its own generator, so a compiled step with dropout
    # never equals the eager one on CUDA (on the H200, 2026-11-27: logits 58% apart, the loss within 2%)
    overrides = {"dropout": 0.0} if arch == "varc" else {}
    eager = _head(arch, "tiny", batch_size=4, **overrides)
    compiled = _head(arch, "tiny", batch_size=4, **overrides)
    compiled.load_state_dict(eager.state_dict())
    batch = {**_batch(4, seed=0, arch=arch), "halt_min_steps": torch.zeros(4, dtype=torch.int32, device=CUDA)}
    results = []
    for head, step in ((eager, eager.step), (compiled, torch.compile(compiled.step))):
        head.train()
        carry = head.initial_carry(batch)
        for _ in range(2):  # the second step runs from a carried state
            head.zero_grad(set_to_none=True)
            carry, loss, _, outputs = step(carry, batch, ("logits",))
            loss.backward()
        grads = torch.cat([p.grad.flatten().float() for p in head.parameters() if p.grad is not None])
        results.append((loss.detach().float(), outputs["logits"].float(), grads))
    (loss_e, logits_e, grads_e), (loss_c, logits_c, grads_c) = results
    assert abs(float(loss_c - loss_e)) <= 2e-2 * abs(float(loss_e)), (float(loss_e), float(loss_c))
    assert _relative_error(logits_c, logits_e) < 5e-2
    assert _relative_error(grads_c, grads_e) < 5e-2


def test_a_test_time_training_job_compiles_its_step_once_on_cuda(
    tiny_dataset: Path, tmp_path: Path, tiny_checkpoint
) -> None:
    # on CUDA a job's steps are compiled by default (inductor, bf16), once for all its tasks: each task's fresh model
    # and task-token table are the compiled step's inputs; the CPU test (tests/integration/test_varc_pipeline.py)
    # checks the same under aot_eager and that the compiled step computes the eager one
    from torch._dynamo.utils import counters

    from arcpipe.config.runs import TTTConfig
    from arcpipe.eval import ttt

    ckpt = tiny_checkpoint(tmp_path / "varc.pt", tiny_dataset, arch="varc")
    torch._dynamo.reset()
    counters.clear()
    summary = ttt.run_job(ckpt, tiny_dataset, tmp_path / "job_0.npz", 0, TTTConfig(epochs=2, jobs=1), device="cuda")
    assert summary["model_step"] == "compiled" and len(summary["tasks"]) >= 2
    assert counters["stats"]["unique_graphs"] == 1 and not counters["recompiles"]
    assert all(math.isfinite(s["last_loss"]) and s["steps"] > 0 for s in summary["stats"].values())


# -- resume, evaluation and RNG through the Trainer ---------------------------------------------------------------


def test_resume_on_gpu_is_bitwise_the_uninterrupted_run(
    tiny_dataset: Path, tmp_path: Path, write_config, monkeypatch: pytest.MonkeyPatch
) -> None:
    # eager model step: in one process, each Trainer's torch.compile(head.step) would be another recompilation
    config = write_config(tmp_path / "config.yaml", {"r": {"gpus_per_node": 1, "compile": False}})
    cfg = load_config(config)
    with _deterministic(monkeypatch):
        for name in ("straight", "again"):
            for epoch in (2, 4):
                assert Trainer(cfg, "r", tiny_dataset, tmp_path / name).train_until(epoch, None) == 0
        out = tmp_path / "resumed"
        assert Trainer(cfg, "r", tiny_dataset, out).train_until(2, None) == 0
        for _ in range(2):  # stop one step into segment 2 (a side checkpoint), twice; then finish it
            assert Trainer(cfg, "r", tiny_dataset, out).train_until(4, None, max_new_steps=1) == 0
        assert (
            load_state(out / "resume/side.pt")["position"]["step"]
            > load_state(out / "state/epoch_2.pt")["position"]["step"]
        )
        assert Trainer(cfg, "r", tiny_dataset, out).train_until(4, None) == 0
    again = _differences(tmp_path / "straight", tmp_path / "again")
    assert not again, f"two uninterrupted GPU runs differ even with deterministic settings: {again}"
    resumed = _differences(tmp_path / "straight", out)
    assert not resumed, f"the resumed run differs from the uninterrupted one: {resumed}"


def test_training_state_saves_and_restores_the_cuda_generator(tiny_dataset: Path, tmp_path: Path, write_config) -> None:
    config = write_config(tmp_path / "config.yaml", {"r": {"gpus_per_node": 1, "compile": False}})
    cfg = load_config(config)
    assert Trainer(cfg, "r", tiny_dataset, tmp_path / "out").train_until(2, None) == 0
    saved = load_state(tmp_path / "out/state/epoch_2.pt")
    assert saved["cuda_rng"] is not None
    assert torch.equal(saved["cuda_rng"], torch.cuda.get_rng_state(CUDA))  # the boundary was the last thing done
    trainer = Trainer(cfg, "r", tiny_dataset, tmp_path / "out")  # seeds, builds the model: the generator moves
    torch.rand(1000, device=CUDA)
    assert not torch.equal(torch.cuda.get_rng_state(CUDA), saved["cuda_rng"])
    trainer.resume(4)
    assert torch.equal(torch.cuda.get_rng_state(CUDA), saved["cuda_rng"])
    assert torch.equal(torch.get_rng_state(), saved["torch_rng"])


@pytest.fixture(scope="module")
def cpu_checkpoint(tiny_dataset: Path, tmp_path_factory: pytest.TempPathFactory, write_config) -> Path:
    """A TRM `tiny` checkpoint trained on the CPU for one segment (the weights a GPU evaluation job would load)."""
    out = tmp_path_factory.mktemp("cpu-run")
    cfg = load_config(write_config(out / "config.yaml", {"r": {}}))
    assert Trainer(cfg, "r", tiny_dataset, out).train_until(2, None) == 0
    return out / "ckpt/epoch_2.pt"


# fp32: the same computation on another device; bf16, the GPU default: 8 significant bits (on CPU, bf16 against fp32
# on this checkpoint gave logits within 0.04 of |logit| <= 2.6, 1% norm-relative, and equal argmaxes wherever the
# two best logits were more than 0.05 apart)
EVAL_TOLERANCE = {torch.float32: (1e-4, 1e-3), torch.bfloat16: (5e-2, 0.1)}  # (relative, argmax margin)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_gpu_evaluation_equals_cpu_evaluation_of_the_same_checkpoint(
    cpu_checkpoint: Path, tiny_dataset: Path, dtype: torch.dtype
) -> None:
    split = load_split(tiny_dataset, "test")
    example_ids = np.repeat(split.puzzle_identifiers, np.diff(split.puzzle_indices)).astype(np.int64)
    rows = np.arange(min(16, len(example_ids)), dtype=np.int64)  # a fixed batch: the first test examples
    answers, logits = [], []
    for device, forward_dtype in ((torch.device("cpu"), torch.float32), (CUDA, dtype)):
        head, _ = load_weights(cpu_checkpoint, device, forward_dtype=forward_dtype, batch_size=len(rows))
        env = DistEnv(rank=0, local_rank=0, world_size=1, device=device)
        answers.append(predict(head, split.inputs, split.labels, example_ids, rows, len(rows), env))
        logits.append(_final_logits(head, split, example_ids, rows, device))
    (cpu, gpu), (cpu_logits, gpu_logits) = answers, logits
    assert cpu is not None and gpu is not None
    rel, margin = EVAL_TOLERANCE[dtype]
    assert _relative_error(gpu_logits, cpu_logits) < rel
    top2 = cpu_logits.topk(2, dim=-1).values
    clear = (top2[..., 0] - top2[..., 1] > margin).numpy()  # tokens no rounding of this size can flip
    assert clear.mean() > 0.5, "the checkpoint's logits are too flat to compare predictions"
    assert np.array_equal(gpu.preds[clear], cpu.preds[clear])
    np.testing.assert_allclose(gpu.q_halt_logits, cpu.q_halt_logits, rtol=rel, atol=rel)
    assert gpu.metric_sums["count"] == cpu.metric_sums["count"]
    assert gpu.metric_sums["steps"] == cpu.metric_sums["steps"]  # evaluation runs every ACT step
    assert gpu.metric_sums["lm_loss"] == pytest.approx(cpu.metric_sums["lm_loss"], rel=rel)


# -- helpers ------------------------------------------------------------------------------------------------------


def _head(arch: str, preset: str, batch_size: int, **overrides: object):
    if arch == "varc-unet":  # an optional extra (`arcpipe[unet]`): a GPU image without it skips, and says why
        pytest.importorskip("diffusers", reason="varc-unet needs diffusers: pip install 'arcpipe[unet]'")
    torch.manual_seed(0)
    return build_model(
        make_arch_config(arch, preset, overrides),
        vocab_size=VOCAB,
        seq_len=900 if arch in VARC_ARCHS else SEQ_LEN,  # VARC reads 30x30 maps
        num_puzzle_identifiers=NUM_IDS,
        batch_size=batch_size,
        device=CUDA,
    )


def _batch(batch_size: int, seed: int, arch: str = "trm") -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    if arch in VARC_ARCHS:  # grids of random sizes in 30x30 token maps (data/augment.to_canvas), and their placements
        rng = np.random.default_rng(seed)
        maps = [
            to_canvas(rng.integers(0, 10, size=rng.integers(1, 31, size=2)).astype(np.uint8))
            for _ in range(2 * batch_size)
        ]
        tokens = torch.from_numpy(np.stack(maps).astype(np.int32))
        labels = torch.where(tokens[batch_size:] == 0, -100, tokens[batch_size:])
        batch = {
            "inputs": tokens[:batch_size],
            "labels": labels,
            "puzzle_identifiers": torch.randint(1, NUM_IDS, (batch_size,), generator=g, dtype=torch.int32),
            "canvas_draws": torch.rand((batch_size, 3), generator=g, dtype=torch.float64),
        }
        return {k: v.to(CUDA) for k, v in batch.items()}
    labels = torch.randint(0, VOCAB, (batch_size, SEQ_LEN), generator=g, dtype=torch.int32)
    labels[:, SEQ_LEN // 2 :] = -100  # ignored padding, as the loader writes it
    batch = {
        "inputs": torch.randint(0, VOCAB, (batch_size, SEQ_LEN), generator=g, dtype=torch.int32),
        "labels": labels,
        "puzzle_identifiers": torch.randint(1, NUM_IDS, (batch_size,), generator=g, dtype=torch.int32),
    }
    return {k: v.to(CUDA) for k, v in batch.items()}


def _final_logits(head, split, example_ids: np.ndarray, rows: np.ndarray, device: torch.device) -> torch.Tensor:
    """(N, seq_len, V) fp32 logits of the last ACT step, on the CPU: the loop of eval.infer.predict."""
    batch = predict_batch(split.inputs, split.labels, example_ids, rows, len(rows), device)
    with torch.no_grad():
        carry = head.initial_carry(batch)
        while True:
            carry, _, _, outputs, all_halted = head(carry, batch, return_keys=("logits",))
            if all_halted:
                return outputs["logits"].float().cpu()


def _cuda_params(dtype: torch.dtype) -> list[torch.nn.Parameter]:
    g = torch.Generator(device=CUDA).manual_seed(0)
    return [
        torch.nn.Parameter((torch.randn(s, device=CUDA, generator=g) * 0.02).to(dtype)) for s in SHAPES
    ]  # fmt: skip


def _run_same_gradients(opts: list[AdamATan2], param_sets: list[list[torch.nn.Parameter]], steps: int) -> None:
    g = torch.Generator(device=CUDA).manual_seed(1)
    for step in range(steps):
        for i, group in enumerate(zip(*param_sets, strict=True)):
            if i == 3 and step % 3 == 0:  # a parameter without a gradient: the step counts differ
                grad = None
            else:
                grad = (torch.randn(group[0].shape, device=CUDA, generator=g) * 1e-3).to(group[0].dtype)
            for p in group:
                p.grad = None if grad is None else grad.clone()
        for opt in opts:
            for pg in opt.param_groups:
                pg["lr"] = 1e-3 * min(1.0, (step + 1) / 10)
            opt.step()


def _assert_updates_close(a: list[torch.Tensor], b: list[torch.Tensor], dtype: torch.dtype) -> None:
    for x, y in zip(a, b, strict=True):
        if dtype == torch.float32:
            torch.testing.assert_close(x, y, atol=1e-6, rtol=0)
            continue
        # bf16 parameters and moments: the kernel (fused, fp32 inside) and the PyTorch rule round at different
        # points, so a parameter whose rounding went the other way once drifts a few ulps over the steps (on the
        # H200, 2026-11-27: 3 of 135,168 entries, at most 5 ulps). Every entry within 8 bf16 ulps of its magnitude,
        # and all but 1 in 10,000 within rtol 2^-6: a wrong rule (a beta, the lr, the decay) moves most entries.
        # An ulp is counted at no less than the learning rate's magnitude (2^-10, the tests' lr 1e-3): an entry
        # that crosses zero on one side only is a few updates' rounding apart, which is 256 ulps of its own
        # near-zero magnitude (the PyTorch rule compiled against eager, H200, 2026-11-27)
        x, y = x.float(), y.float()
        ulp = torch.exp2(torch.floor(torch.log2(torch.maximum(x.abs(), y.abs()).clamp_min(2**-10))) - 7)
        ulps = ((x - y).abs() / ulp).max().item()
        assert ulps <= 8, f"bf16 update {ulps:.0f} ulps from the PyTorch rule's"
        off = ((x - y).abs() > 1e-4 + 2**-6 * y.abs()).float().mean().item()
        assert off <= 1e-4, f"{off:.2e} of the bf16 entries outside rtol 2^-6"


def _relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


@contextlib.contextmanager
def _deterministic(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    monkeypatch.setattr(layers, "_flash_attn_func", None)
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    before = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        with sdpa_kernel(SDPBackend.MATH), warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # warn_only: ops without a deterministic kernel say so
            yield
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])


def _differences(a: Path, b: Path) -> list[str]:
    """Files of run b whose weights, optimizer state or metrics steps differ from run a's."""
    found = []
    for name in ("ckpt/epoch_2.pt", "ckpt/epoch_4.pt"):
        wa, wb = (torch.load(run / name, map_location="cpu", weights_only=True)["model"] for run in (a, b))
        found += [f"{name}:{k}" for k in wa if not torch.equal(wa[k], wb[k])]
    sa, sb = (load_state(run / "state/epoch_4.pt") for run in (a, b))
    found += [f"state/epoch_4.pt:model:{k}" for k in sa["model"] if not torch.equal(sa["model"][k], sb["model"][k])]
    for i, (oa, ob) in enumerate(zip(sa["optimizers"], sb["optimizers"], strict=True)):
        for pid, s in oa["state"].items():
            found += [f"optimizer {i} param {pid} {k}" for k, t in s.items() if not torch.equal(t, ob["state"][pid][k])]
    return found
