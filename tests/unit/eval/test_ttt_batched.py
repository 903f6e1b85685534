"""K tasks' test-time training in one batched step (eval/batched.py), each task exactly its own fit (eval/ttt.fit).

Three synthetic tasks of different sizes (2, 3 and 4 views; 3, 6 and 10 demonstrations: 1, 2 and 3 steps an
epoch at batch 4, so they finish at different steps and a freed slot takes the next task) on a tiny VARC-ViT (a
32 x 32 canvas of 4 x 4 patches, width 16, 2 layers), each task's batches drawn by ttt.task_batches as a job draws
them. Fitted alone, each by ttt.fit_task (the fit held to upstream's by tests/unit/train/test_varc_trainer_parity),
and together, 2 or 3 a step: with dropout off, every task's final weights and answers must equal its fit alone.

Tolerances, measured here (AVX2 and the default kernels, K = 2 and 3): float64, the largest difference of any
tensor is 4e-14 to 9e-14 of that tensor's largest value after 4 to 12 steps (the vmap'd forward and the per-task
reductions sum in another order, and AdamW's m / sqrt(v) magnifies a rounding where a gradient is near 0);
asserted at 1e-11. float32: 2.6e-5 to 4.2e-5; asserted at 5e-4. Answers: identical in both. The planted bugs
(clipping by the global norm of all the tasks: 0.18; a finished task stepping once more: 0.57) move a task's
weights far beyond either tolerance. With dropout on, the weights differ (other masks) but each task learns as
much batched as alone.
"""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from arcpipe.config.arch import make_arch_config
from arcpipe.config.runs import TTTConfig
from arcpipe.data.augment import to_canvas
from arcpipe.eval import batched, ttt
from arcpipe.models.registry import build_model
from arcpipe.models.syncs import HostSyncGuard

pytestmark = pytest.mark.numeric

SIZES = {"a": (2, 3), "b": (3, 6), "c": (4, 10)}  # task -> (views, demonstrations)
B, SEED = 4, 7
MODEL = {"image_size": 32, "patch_size": 4, "embed_dim": 16, "depth": 2, "num_heads": 2, "mlp_dim": 32}
CPU = torch.device("cpu")


def test_each_task_of_a_batched_fit_equals_its_fit_alone_in_float64() -> None:
    head, data = tiny(torch.float64)
    cfg = recipe()
    alone = fit_alone(head, data, cfg)
    for K in (2, 3):
        together = fit_together(head, data, cfg, K)
        assert {t: s["steps"] for t, s in together.items()} == {t: s["steps"] for t, s in alone.items()}
        assert worst(together, alone) < 1e-11, K
        assert all(torch.equal(together[t]["answers"], alone[t]["answers"]) for t in SIZES)


def test_each_task_of_a_batched_fit_equals_its_fit_alone_in_float32() -> None:
    head, data = tiny(torch.float32)
    cfg = recipe()
    assert worst(fit_together(head, data, cfg, 3), fit_alone(head, data, cfg)) < 5e-4


def test_with_dropout_each_task_learns_as_much_batched_as_alone() -> None:
    """Dropout on (0.1): the masks differ from a fit alone's, so the weights do; what each task learns must not.
    Three tasks with a rule to learn (each output its input's colours shifted by one), 8 epochs at rate 1e-2: each
    task's pixel accuracy on its demonstrations rises from 8-11% to 15-36% fitted alone, and fitted 3 a step lands
    within 0.03 of it (measured); asserted: within 0.08 per task, while each fit gains at least 0.05 on the
    untrained model (so a batched fit that did not learn, or learned another task's rule, fails)."""
    head, data = tiny(torch.float32, dropout=0.1, learnable=True)
    cfg = TTTConfig(epochs=8, warmup_epochs=1, batch_size=B, lr=1e-2, grad_clip=1.0, jobs=1)
    untrained = {t: result(copy.deepcopy(head), data, t, {"steps": 0})["accuracy"] for t in SIZES}
    alone, together = fit_alone(head, data, cfg), fit_together(head, data, cfg, 3)
    for t in SIZES:
        assert alone[t]["accuracy"] - untrained[t] > 0.05, (t, alone[t]["accuracy"], untrained[t])
        assert abs(together[t]["accuracy"] - alone[t]["accuracy"]) < 0.08, (t, together[t], alone[t])
    assert worst(together, alone) > 1e-3  # the dropout masks did differ


@pytest.mark.parametrize("bug", ["global_norm", "finished_task_steps"])
def test_a_planted_bug_in_the_batched_step_fails(monkeypatch: pytest.MonkeyPatch, bug: str) -> None:
    head, data = tiny(torch.float64)
    cfg = recipe()
    alone = fit_alone(head, data, cfg)
    if bug == "global_norm":  # every task clipped by the norm of all the tasks' gradients together
        norm = batched.task_grad_norm
        monkeypatch.setattr(batched, "task_grad_norm", lambda grads: torch.linalg.vector_norm(norm(grads)).expand(3))
    else:  # a task steps once more after its last batch (on blank rows: no gradient, but AdamW's moments move it)
        blank = ttt.make_batch(data.split.inputs, data.split.labels, data.ids, np.zeros(0, dtype=int), B, CPU)
        blank["canvas_draws"] = torch.zeros((B, 3), dtype=torch.float64)
        next_step, late = batched._next_step, set()

        def one_more(slot: Any) -> Any:
            step = next_step(slot)
            if step is None and slot is not None and id(slot) not in late:
                late.add(id(slot))
                return cfg.lr, blank
            return step

        monkeypatch.setattr(batched, "_next_step", one_more)
    assert worst(fit_together(head, data, cfg, 3), alone) > 1e-2


def test_tasks_per_step_is_validated_with_the_field_named() -> None:
    assert TTTConfig().tasks_per_step == 1  # one task at a time until measured on a GPU
    with pytest.raises(ValueError, match="tasks_per_step"):
        TTTConfig(tasks_per_step=0)


# ----------------------------------------------------------------------------------------------------------------


def recipe(**changes: Any) -> TTTConfig:
    # 3 epochs (0 at rate 0, a warm-up epoch, then the cosine), a clip low enough to act on most steps
    return TTTConfig(epochs=3, warmup_epochs=1, batch_size=B, lr=3e-3, grad_clip=0.05, jobs=1, **changes)


def tiny(dtype: torch.dtype, dropout: float = 0.0, learnable: bool = False) -> tuple[torch.nn.Module, SimpleNamespace]:
    """A tiny VARC-ViT (without dropout by default), and the three tasks' rows: demonstrations and a test row per
    view. Each output a random grid, or with `learnable` its input's colours shifted by one (a rule to learn)."""
    torch.manual_seed(0)
    head = build_model(
        make_arch_config("varc", "tiny", {**MODEL, "dropout": dropout}),
        vocab_size=12,
        seq_len=900,
        num_puzzle_identifiers=9,
        batch_size=B,
        device="cpu",
    ).to(dtype)
    rng = np.random.default_rng(0)
    inputs, labels, ids, demonstrations, tests = [], [], [], {}, {}
    next_id = 1
    for task, (views, demos) in SIZES.items():
        task_ids = np.arange(next_id, next_id + views)
        next_id += views
        rows = []
        for i in range(demos + views):  # the last `views` rows: one test row per view
            h, w = rng.integers(2, 6, size=2)
            grid = rng.integers(0, 10, size=(h, w), dtype=np.uint8)
            inputs.append(to_canvas(grid))
            output = (grid + 1) % 10 if learnable else rng.integers(0, 10, size=(w, h), dtype=np.uint8)
            labels.append(to_canvas(output.astype(np.uint8)))
            ids.append(task_ids[i % views])
            rows.append(len(inputs) - 1)
        demonstrations[task] = (np.array(rows[:demos]), task_ids)
        tests[task] = np.array(rows[demos:])
    split = SimpleNamespace(inputs=np.stack(inputs), labels=np.stack(labels))
    return head, SimpleNamespace(split=split, ids=np.array(ids), demonstrations=demonstrations, tests=tests)


def fit_alone(head: torch.nn.Module, data: SimpleNamespace, cfg: TTTConfig) -> dict[str, dict[str, Any]]:
    out = {}
    for task in SIZES:
        mine = copy.deepcopy(head)
        stats = ttt.fit_task(mine, data.split, data.ids, data.demonstrations[task], task, cfg, SEED, CPU)
        out[task] = result(mine, data, task, stats)
    return out


def fit_together(head: torch.nn.Module, data: SimpleNamespace, cfg: TTTConfig, K: int) -> dict[str, dict[str, Any]]:
    template = copy.deepcopy(head)
    width = template.model.inner.task_token_embed.weight.shape[1]
    out: dict[str, dict[str, Any]] = {}

    def done(fit: batched.TaskFit, weights: dict[str, torch.Tensor], stats: dict[str, Any]) -> None:
        mine = copy.deepcopy(head)
        inner = mine.model.inner
        inner.task_token_embed = torch.nn.Embedding(*weights["task_token_embed.weight"].shape, dtype=head_dtype(head))
        with torch.no_grad():
            for name, p in inner.named_parameters():
                p.copy_(weights[name])
        out[fit.name] = result(mine, data, fit.name, stats)

    fits = []
    for task in SIZES:
        table, epochs = ttt.task_batches(width, data.split, data.ids, data.demonstrations[task], task, cfg, SEED, CPU)
        fits.append(batched.TaskFit(task, table, ttt.task_steps(epochs, cfg)))
    template.train()
    batched.fit_tasks(template, fits, cfg, K, done, max_views=max(v for v, _ in SIZES.values()))
    assert list(out) == ["a", "b", "c"][: len(out)] or sorted(out) == sorted(SIZES)
    return out


def result(head: torch.nn.Module, data: SimpleNamespace, task: str, stats: dict[str, Any]) -> dict[str, Any]:
    """The fitted model's weights, its steps and its answers to the task's test rows (the argmax canvas decoded)."""
    rows, views = data.tests[task], data.demonstrations[task][1]
    local = ttt.local_ids(data.ids, np.concatenate([rows, data.demonstrations[task][0]]), views, task)
    batch = ttt.make_batch(data.split.inputs, data.split.labels, local, rows, len(rows), CPU)
    batch["canvas_draws"] = torch.full((len(rows), 3), 0.5, dtype=torch.float64)
    head.eval()
    with torch.no_grad():
        _, _, _, outputs = head.step(head.initial_carry(batch), batch, ("preds",))
    weights = {k: v.detach().clone() for k, v in head.model.inner.named_parameters()}
    demos = data.demonstrations[task][0]
    batch = ttt.make_batch(data.split.inputs, data.split.labels, local, demos, len(demos), CPU)
    batch["canvas_draws"] = torch.full((len(demos), 3), 0.5, dtype=torch.float64)
    with torch.no_grad():
        _, _, metrics, _ = head.step(head.initial_carry(batch), batch)
    accuracy = float(metrics["accuracy"] / metrics["count"])  # pixel accuracy on its demonstrations, dropout off
    return {"weights": weights, "steps": stats["steps"], "answers": outputs["preds"], "accuracy": accuracy}


def worst(together: dict[str, dict[str, Any]], alone: dict[str, dict[str, Any]]) -> float:
    """The largest difference of any task's tensor, relative to that tensor's largest value."""
    assert sorted(together) == sorted(alone) == sorted(SIZES)
    return max(
        float((w - alone[t]["weights"][k]).abs().max() / alone[t]["weights"][k].abs().max().clamp_min(1e-30))
        for t in SIZES
        for k, w in together[t]["weights"].items()
    )


def head_dtype(head: torch.nn.Module) -> torch.dtype:
    return head.model.inner.task_token_embed.weight.dtype


def test_the_batched_step_is_one_graph_each_and_makes_no_host_sync() -> None:
    """The loss (K forwards under vmap) and the update trace whole under torch._dynamo.explain (one graph, no
    break), and one eager step (loss, gradients, update) asks the host for no tensor's value (no .item(), no
    data-dependent size; tests/unit/models/test_graphs.py checks every model's step the same way)."""
    head, data = tiny(torch.float32)
    cfg, K = recipe(), 3
    width = head.model.inner.task_token_embed.weight.shape[1]
    firsts = []
    for task in SIZES:
        _, epochs = ttt.task_batches(width, data.split, data.ids, data.demonstrations[task], task, cfg, SEED, CPU)
        firsts.append(next(iter(epochs(0))))
    batch = {key: torch.stack([b[key] for b in firsts]) for key in firsts[0]}
    params = {n: torch.stack([p.detach()] * K).requires_grad_() for n, p in head.model.inner.named_parameters()}
    moments = [{n: torch.zeros_like(p, requires_grad=False) for n, p in params.items()} for _ in range(2)]
    state = (torch.zeros(K, dtype=torch.float64), torch.full((K,), 1e-3, dtype=torch.float64))
    active = torch.tensor([True, True, False])
    head.train()
    explained = torch._dynamo.explain(batched.batched_loss)(head, params, batch)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons
    grads = {n: torch.randn_like(p) for n, p in params.items()}
    explained = torch._dynamo.explain(batched.adamw_update)(params, grads, *moments, *state, active, 1.0)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons

    with HostSyncGuard().active() as syncs:
        losses = batched.batched_loss(head, params, batch)
        grads = dict(zip(params, torch.autograd.grad(losses.sum(), list(params.values())), strict=True))
        batched.adamw_update(params, grads, *moments, *state, active, cfg.grad_clip)
    assert syncs.seen == []


def test_the_unet_batched_loss_and_gradients_are_each_task_own() -> None:
    """VARC-Unet under the same mechanism (diffusers' U-Net under vmap): each task's loss and gradients from one
    batched forward equal its own step's (the head's `step`, the loss a one-task fit steps on), float64."""
    pytest.importorskip("diffusers")
    torch.manual_seed(0)
    head = build_model(
        make_arch_config("varc-unet", "tiny", {}),
        vocab_size=12,
        seq_len=900,
        num_puzzle_identifiers=5,
        batch_size=2,
        device="cpu",
    ).double()
    _, data = tiny(torch.float64)
    K, rows = 2, [np.array([0, 1]), np.array([5, 6])]
    batches = []
    for chunk in rows:
        batch = ttt.make_batch(data.split.inputs, data.split.labels, data.ids % 5, chunk, 2, CPU)
        batch["canvas_draws"] = torch.rand((2, 3), dtype=torch.float64)
        batches.append(batch)
    inner = head.model.inner
    params = {
        n: torch.stack([p.detach() + 0.01 * k for k in range(K)]).requires_grad_() for n, p in inner.named_parameters()
    }
    stacked = {key: torch.stack([b[key] for b in batches]) for key in batches[0]}
    losses = batched.batched_loss(head, params, stacked)
    grads = torch.autograd.grad(losses.sum(), list(params.values()))
    for k, batch in enumerate(batches):
        with torch.no_grad():
            for name, p in inner.named_parameters():
                p.copy_(params[name][k])
        inner.zero_grad()
        loss = ttt.step_loss(head, batch)
        loss.backward()
        assert abs(losses[k].item() - loss.item()) <= 1e-12 * loss.item()
        for g, (name, p) in zip(grads, inner.named_parameters(), strict=True):
            assert torch.allclose(g[k], p.grad, rtol=1e-9, atol=1e-12), name
