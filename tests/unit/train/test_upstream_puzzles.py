"""`sampler: upstream` for HRM, TRM and URM draws the rows upstream's own `PuzzleDataset` draws
(train/upstream_puzzles.py).

Two goldens, both from upstream's own code, neither recorded for this test:

* tests/data/sampler/upstream_stats.* (tests/tools/record_sampler_stats.py): TRM's and URM's `PuzzleDataset`
  iterated for 1,000-2,000 passes on 15 real tasks at num_aug 100, every visit written down (its puzzle, the rows
  it gave a kept batch, the position within its puzzle of its first row), TRM's NumPy global generator seeded with
  np.random.seed(seed). Here the same passes drawn by `draw_visits` with that generator must give every visit's
  puzzle, rows and first row, and every pass's batches: 150,000 visits, exactly;
* tests/data/trainer/trainer_*.pt (tests/tools/record_trainer_goldens.py): upstream's own `pretrain.py` for
  HRM, TRM and URM, its DataLoader worker drawing, every step's rows written down (111-116 steps), with the train
  loader's base seed (from which PyTorch seeds the worker's NumPy generator). arcpipe's Trainer with `sampler:
  upstream`, its worker generator seeded from that base seed, must plan every row exactly (URM's rank 0 walks the
  loader once before each pass it trains: the pass it trains is the loader's second) and, trained on its own draws
  with upstream's exploration draws, give upstream's loss at every step and its final weights: the whole run, its
  sampler included. With a base seed of its own (a run's: a torch draw after arcpipe's initialisation) TRM and HRM
  draw the same puzzles and other examples of them.

Planted changes fail: URM's pass without the walk, the global generator reseeded every pass, the dropped batch's
draws skipped, TRM's examples from the pass's Philox generator (URM's rule), the loader's passes counted from 0.
A run stopped at a boundary and again in the middle of a pass, and resumed, trains the same rows to the same
weights as one that was not stopped.
"""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from test_trainer_parity import _assert_state, _load, _trainer

from arcpipe.config.runs import RunConfig
from arcpipe.train import upstream_puzzles
from arcpipe.train.sampler import _pack, collate

DATA = Path(__file__).parents[2] / "data" / "sampler"
NO_ROW = 255  # record_sampler_stats.py: a visit that gave no kept row


@pytest.fixture(scope="module")
def stats() -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    with np.load(io.BytesIO((DATA / "upstream_stats.npz").read_bytes())) as data:
        arrays = {k: data[k] for k in data.files}
    meta = json.loads((DATA / "upstream_stats.json").read_text())
    for field in ("puzzle_indices", "group_indices"):
        buffer = io.BytesIO()
        np.save(buffer, arrays[field])
        assert hashlib.sha256(buffer.getvalue()).hexdigest() == meta["dataset_sha256"][field]
    return arrays, meta


def record(arrays: dict[str, np.ndarray], run: dict[str, Any], passes: int | None = None) -> dict[str, np.ndarray]:
    """record_sampler_stats.py's record of `run` (its first `passes`), drawn by draw_visits (called through the module,
    so that a planted replacement is the one called): the loader iterated once a pass (pass p draws with
    seed + p + 1), TRM's global generator seeded with np.random.seed(seed) before the first."""
    split = SimpleNamespace(puzzle_indices=arrays["puzzle_indices"], group_indices=arrays["group_indices"])
    family, batch, epochs, seed = run["family"], run["global_batch_size"], run["epochs_per_pass"], run["seed"]
    rng = np.random.RandomState(seed)
    out: dict[str, list] = {"puzzle": [], "taken": [], "first": [], "batches": []}
    for p in range(passes or run["passes"]):
        puzzles, counts, chosen = upstream_puzzles.draw_visits(split, family, seed + p + 1, epochs, batch, rng)
        taken, _, num_batches = _pack(counts, batch)
        out["puzzle"].append(puzzles)
        out["taken"].append(taken)
        out["first"].append(np.array([c[0] if t else NO_ROW for c, t in zip(chosen, taken, strict=True)]))
        out["batches"].append(num_batches)
    return {k: np.asarray(v) if k == "batches" else np.concatenate(v) for k, v in out.items()}


@pytest.mark.parametrize("name", ["trm_a", "trm_b", "urm_a"])
def test_every_visit_is_upstreams(stats, name):
    arrays, meta = stats
    run = meta["runs"][name]
    got = record(arrays, run)
    for key, value in got.items():
        want = arrays[f"{name}_{key}"]
        assert np.array_equal(value, want), f"{name} {key}: first difference at {np.flatnonzero(value != want)[:1]}"


def _reseeded_each_pass(monkeypatch):
    original = upstream_puzzles.draw_visits

    def planted(split, family, philox_seed, epochs, batch, rng):
        if rng is not None:
            rng.seed(0)
        return original(split, family, philox_seed, epochs, batch, rng)

    monkeypatch.setattr(upstream_puzzles, "draw_visits", planted)


def _dropped_batch_not_drawn(monkeypatch):
    def planted(split, family, philox_seed, epochs, batch, rng):
        puzzle_indices = np.asarray(split.puzzle_indices, dtype=np.int64)
        group_indices = np.asarray(split.group_indices, dtype=np.int64)
        gen = np.random.Generator(np.random.Philox(seed=philox_seed))
        groups = np.concatenate([gen.permutation(len(group_indices) - 1) for _ in range(epochs)])
        puzzles = np.array([gen.integers(group_indices[g], group_indices[g + 1]) for g in groups], dtype=np.int64)
        counts = puzzle_indices[puzzles + 1] - puzzle_indices[puzzles]
        taken, _, _ = _pack(counts, batch)
        chooser = gen if family == "urm" else rng
        chosen = [chooser.choice(int(n), int(t), replace=False) if t else np.zeros(1, np.int64) for n, t in
                  zip(counts, taken, strict=True)]  # fmt: skip
        return puzzles, counts, chosen

    monkeypatch.setattr(upstream_puzzles, "draw_visits", planted)


def _examples_from_philox(monkeypatch):
    monkeypatch.setattr(upstream_puzzles, "PHILOX_EXAMPLES", ("urm", "trm"))


@pytest.mark.parametrize("plant", [_reseeded_each_pass, _dropped_batch_not_drawn, _examples_from_philox])
def test_planted_changes_fail(stats, monkeypatch, plant):
    arrays, meta = stats
    run = meta["runs"]["trm_a"]
    plant(monkeypatch)
    got = record(arrays, run, passes=20)
    assert any(not np.array_equal(got[k], arrays[f"trm_a_{k}"][: len(got[k])]) for k in got)


# ---------------------------------------------------------------------------------------------------------------
# upstream's own trainers' rows: the Trainer's plan, and URM's whole run


def upstream_trainer(golden: dict[str, Any], tmp_path: Path, **changes: Any):
    """The parity Trainer with `sampler: upstream`, NumPy's worker generator seeded as in upstream's run (TRM, HRM:
    from the loader's base seed the recorder kept; URM draws none from it)."""
    trainer = _trainer(golden, tmp_path, sampler="upstream", **changes)
    if "loader_base_seed" in golden:
        trainer.upstream_puzzles.rng = upstream_puzzles.worker_generator(golden["loader_base_seed"])
    return trainer


@pytest.mark.parametrize("family", ["trm", "hrm", "urm"])
def test_the_trainer_plans_upstream_trainers_rows(family, tmp_path):
    golden = _load(family)
    plan = upstream_trainer(golden, tmp_path).plan(0)
    examples = np.concatenate([s["examples"].numpy() for s in golden["steps"]])
    puzzles = np.concatenate([s["puzzles"].numpy() for s in golden["steps"]])
    assert plan.num_batches >= golden["num_steps"]
    assert np.array_equal(plan.puzzles[: len(puzzles)], puzzles), f"{family}: another puzzle order"
    assert np.array_equal(plan.examples[: len(examples)], examples), f"{family}: other examples"


@pytest.mark.parametrize("family", ["trm", "hrm"])
def test_another_worker_seed_draws_other_examples_of_the_same_puzzles(family, tmp_path):
    """What a run of its own draws (its base seed from torch's generator after arcpipe's initialisation): upstream's
    puzzles, other examples of them."""
    golden = _load(family)
    plan = _trainer(golden, tmp_path, sampler="upstream").plan(0)
    examples = np.concatenate([s["examples"].numpy() for s in golden["steps"]])
    puzzles = np.concatenate([s["puzzles"].numpy() for s in golden["steps"]])
    assert np.array_equal(plan.puzzles[: len(puzzles)], puzzles)
    assert not np.array_equal(plan.examples[: len(examples)], examples)
    starts, ends = golden["dataset"]["arrays"]["puzzle_indices"].numpy()[[puzzles, puzzles + 1]]
    assert ((starts <= plan.examples[: len(examples)]) & (plan.examples[: len(examples)] < ends)).all()


def test_urm_without_its_rank_0_walk_plans_other_rows(tmp_path, monkeypatch):
    golden = _load("urm")
    monkeypatch.setattr(upstream_puzzles, "WALKS_BEFORE_PASS", {})
    plan = _trainer(golden, tmp_path, sampler="upstream").plan(0)
    puzzles = np.concatenate([s["puzzles"].numpy() for s in golden["steps"]])
    assert not np.array_equal(plan.puzzles[: len(puzzles)], puzzles)


@pytest.mark.numeric
@pytest.mark.parametrize("family", ["trm", "hrm", "urm"])
def test_trains_as_upstreams_whole_run_from_its_own_sampler(family, tmp_path):
    """The Trainer draws its own batches (sampler upstream); only upstream's exploration draws are given."""
    golden = _load(family)
    trainer = upstream_trainer(golden, tmp_path)
    plan = trainer.plan(0)
    draw = trainer.draw

    def with_upstreams_exploration(plan, batch_index, step):
        batches = draw(plan, batch_index, step)
        want = golden["steps"][batch_index]
        rows = collate(trainer.split, want["examples"].numpy(), want["puzzles"].numpy())
        assert np.array_equal(batches[0]["inputs"].numpy(), rows["inputs"]), f"step {step}: other rows"
        batches[0]["halt_min_steps"] = want["halt_min_steps"]
        return batches

    trainer.draw = with_upstreams_exploration
    for i, want in enumerate(golden["steps"]):
        got = trainer.train_step(plan)
        for key, value in want["metrics"].items():
            name = "lr" if key == "lr" else f"train/{key}"
            tol = {"rel": 0, "abs": 0} if key == "lr" else {"rel": 1e-6, "abs": 1e-6}
            assert got[name] == pytest.approx(float(value), **tol), f"step {i + 1} {key}"
        if i + 1 == golden["snapshot"]["step"]:
            _assert_state(golden, trainer, golden["snapshot"])
    _assert_state(golden, trainer, golden["final"])


# ---------------------------------------------------------------------------------------------------------------
# resume, and the run setting


def _recording(golden, out: Path, tmp_path: Path):
    trainer = _trainer(golden, tmp_path / out.name, sampler="upstream", epochs=golden["train"]["epochs"] * 2,
                       side_checkpoint_minutes=1e9)  # fmt: skip
    trainer.upstream_puzzles.rng = upstream_puzzles.worker_generator(golden["loader_base_seed"])
    seen: list[np.ndarray] = []
    step = trainer.step_fn

    def recording(carry, batch):
        seen.append(batch["inputs"].numpy().copy())
        return step(carry, batch)

    trainer.step_fn = recording
    return trainer, seen


def test_resumed_runs_train_the_same_rows_and_weights(tmp_path):
    """TRM (NumPy's global generator carried across passes): two passes whole, and stopped at the boundary and in
    the middle of the second pass."""
    torch.set_num_threads(1)
    golden = _load("trm")
    epochs = golden["train"]["epochs"]
    whole, seen_whole = _recording(golden, tmp_path / "whole", tmp_path)
    whole.train_until(epochs, None)
    whole.train_until(2 * epochs, None)
    pieces = []
    for stop in (None, 30, None):
        part, seen = _recording(golden, tmp_path / "parts", tmp_path)
        part.train_until(epochs if not pieces else 2 * epochs, None, max_new_steps=stop)
        pieces += seen
    assert len(pieces) == len(seen_whole) > golden["num_steps"]
    for step, (a, b) in enumerate(zip(seen_whole, pieces, strict=True), 1):
        assert np.array_equal(a, b), f"step {step}"
    for (name, a), b in zip(whole.head.state_dict().items(), part.head.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_sampler_upstream_is_a_setting_of_every_model():
    base = {"dataset": "d", "preset": "tiny", "target": "smoke", "epochs": 2, "eval_interval": 1}
    for arch in ("trm", "hrm", "urm", "varc"):
        assert RunConfig(**base, arch=arch, sampler="upstream").model_dump()["sampler"] == "upstream"
