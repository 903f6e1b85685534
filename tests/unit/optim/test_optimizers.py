"""AdamATan2 against its formula (the CUDA kernel: tests/gpu), SignSGD row semantics and accumulation, EMA, Muon."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "models"))
from modelkit import make_batch, tiny_head  # noqa: E402

from arcpipe.models.sparse_embedding import SparseEmbedding  # noqa: E402
from arcpipe.optim import EMA, AdamATan2, Muon, SparseSignSGD, make_optimizers  # noqa: E402
from arcpipe.optim.muon import orthogonalize  # noqa: E402
from arcpipe.optim.signsgd import sparse_sign_update_  # noqa: E402

pytestmark = pytest.mark.numeric  # every test here checks an optimizer's numbers


def _reference_adam_atan2(p, grads, lr, betas, wd):  # the formula of adam-atan2 0.0.3, in float64
    b1, b2 = betas
    p = p.double().clone()
    m = torch.zeros_like(p)
    v = torch.zeros_like(p)
    for t, g in enumerate(grads, start=1):
        g = g.double()
        p = p * (1 - lr * wd)
        m = m + (1 - b1) * (g - m)
        v = v + (1 - b2) * (g * g - v)
        p = p - lr / (1 - b1**t) * torch.atan2(m, v.sqrt() / math.sqrt(1 - b2**t))
    return p


@pytest.mark.parametrize("compile", [False, True])
def test_adam_atan2_equals_the_formula_over_100_steps(compile: bool) -> None:
    g = torch.Generator().manual_seed(0)
    p0 = torch.randn(64, 33, generator=g) * 0.02
    grads = [torch.randn(64, 33, generator=g) * 1e-3 for _ in range(100)]
    p = torch.nn.Parameter(p0.clone())
    opt = AdamATan2([p], lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1, compile=compile)
    assert opt.backend == "torch"
    for grad in grads:
        p.grad = grad.clone()
        opt.step()
    expected = _reference_adam_atan2(p0, grads, 1e-3, (0.9, 0.95), 0.1)
    torch.testing.assert_close(p.detach().double(), expected, atol=1e-6, rtol=0)
    assert float(opt.state[p]["step"]) == 100


def test_adam_atan2_has_no_epsilon_and_is_scale_invariant() -> None:
    # atan2 makes the step independent of the gradient scale: 1e-20 and 1e+3 gradients move p equally
    outs = []
    for scale in (1e-20, 1e3):
        p = torch.nn.Parameter(torch.zeros(5))
        opt = AdamATan2([p], lr=0.1, weight_decay=0.0, compile=False)
        p.grad = torch.full((5,), scale)
        opt.step()
        outs.append(p.detach().clone())
    torch.testing.assert_close(outs[0], outs[1])
    assert outs[0][0] < 0


def test_signsgd_changes_and_decays_only_the_rows_in_the_batch() -> None:
    emb = SparseEmbedding(10, 4, batch_size=3, cast_to=torch.float32)
    with torch.no_grad():
        emb.weights.copy_(torch.randn(10, 4))
    before = emb.weights.clone()
    opt = SparseSignSGD(emb, lr=0.01, weight_decay=0.5)
    emb.train()
    ids = torch.tensor([2, 5, 2], dtype=torch.int32)
    out = emb(ids)
    (out * torch.tensor([[1.0], [-2.0], [0.5]])).sum().backward()
    opt.step()
    changed = (emb.weights != before).any(1).nonzero().flatten().tolist()
    assert changed == [2, 5]
    # row 2 appears twice: gradients summed (1 + 0.5 > 0), then sign; decay once
    torch.testing.assert_close(emb.weights[2], before[2] * (1 - 0.01 * 0.5) - 0.01)
    torch.testing.assert_close(emb.weights[5], before[5] * (1 - 0.01 * 0.5) + 0.01)


def test_signsgd_k_micro_batches_equal_one_concatenated_batch() -> None:
    torch.manual_seed(0)
    weights = torch.randn(12, 4)
    ids = torch.tensor([3, 7, 3, 11, 7, 1], dtype=torch.int32)
    coeff = torch.randn(6, 4)

    def run(chunks: int) -> torch.Tensor:
        rows = 6 // chunks
        emb = SparseEmbedding(12, 4, batch_size=rows, cast_to=torch.float32)
        with torch.no_grad():
            emb.weights.copy_(weights)
        emb.train()
        opt = SparseSignSGD(emb, lr=0.1, weight_decay=0.2)
        for c in range(chunks):
            sl = slice(c * rows, (c + 1) * rows)
            (emb(ids[sl]) * coeff[sl]).sum().backward()
        opt.step()
        return emb.weights.clone()

    one = run(1)
    assert torch.equal(run(2), one) and torch.equal(run(3), one)
    assert not torch.equal(one, weights)


def test_signsgd_update_equals_the_unique_based_rule_bitwise() -> None:
    """The sync-free update (sort + segment sum, no `unique`) equals upstream's formulation, `unique` +
    scatter_add_, bit for bit on CPU: many ids repeated, in any order, with gradients whose sums need rounding."""

    def by_unique(weights: torch.Tensor, ids: torch.Tensor, grads: torch.Tensor, lr: float, wd: float) -> None:
        unique, inverse = ids.unique(return_inverse=True)
        summed = torch.zeros(unique.shape[0], grads.shape[1], dtype=grads.dtype)
        summed.scatter_add_(0, inverse.unsqueeze(-1).expand(-1, grads.shape[1]), grads)
        weights[unique] = weights[unique] * (1.0 - lr * wd) - lr * torch.sign(summed)

    g = torch.Generator().manual_seed(0)
    for trial in range(20):
        n, rows = int(torch.randint(1, 64, (1,), generator=g)), int(torch.randint(1, 40, (1,), generator=g))
        weights = torch.randn(rows, 8, generator=g)
        ids = torch.randint(0, rows, (n,), generator=g, dtype=torch.int32)
        grads = torch.randn(n, 8, generator=g) * torch.logspace(-6, 6, 8)  # sums that round
        k = n // 3  # some ids get a gradient and its negation: their sum is 0, and so is its sign
        if k:
            ids[:k], grads[:k] = ids[n - k :].flip(0), -grads[n - k :].flip(0)
        want, got = weights.clone(), weights.clone()
        by_unique(want, ids, grads, 0.01, 0.3)
        sparse_sign_update_(got, ids, grads, lr=0.01, weight_decay=0.3)
        assert torch.equal(got, want), trial


def test_model_gradient_accumulation_gives_the_same_embedding_update() -> None:
    batch = make_batch(4)
    results = []
    for chunks in (1, 2):
        head = tiny_head("trm", batch_size=4 // chunks)
        opt, _ = make_optimizers(
            head, lr=1e-3, puzzle_emb_lr=1e-2, weight_decay=0.1, puzzle_emb_weight_decay=0.1, compile=False
        )[0]
        head.train()
        for c in range(chunks):
            part = {k: v[c * 4 // chunks : (c + 1) * 4 // chunks] for k, v in batch.items()}
            part["halt_min_steps"] = torch.zeros(len(part["inputs"]), dtype=torch.int32)
            _, loss, *_ = head(head.initial_carry(part), part)
            loss.backward()
        opt.step()
        results.append(head.model.inner.puzzle_emb.weights.clone())
    assert torch.equal(results[0], results[1])
    assert results[0].abs().sum() > 0


def test_ema_tracks_parameters_only_and_keeps_live_buffers() -> None:
    head = tiny_head("trm")
    ema = EMA(head, rate=0.5)
    assert set(ema.state_dict()) == {n for n, _ in head.named_parameters()}
    assert not any("puzzle_emb" in n or n.endswith("_init") for n in ema.state_dict())
    before = {n: p.detach().clone() for n, p in head.named_parameters()}
    with torch.no_grad():
        for p in head.parameters():
            p.add_(1.0)
        head.model.inner.puzzle_emb.weights.add_(3.0)
        head.model.inner.H_init.add_(2.0)
    ema.update()
    copy = ema.ema_copy(head)
    for n, p in copy.named_parameters():
        torch.testing.assert_close(p, before[n] + 0.5)  # 0.5 * (x + 1) + 0.5 * x
    assert torch.equal(copy.model.inner.puzzle_emb.weights, head.model.inner.puzzle_emb.weights)  # live
    assert torch.equal(copy.model.inner.H_init, head.model.inner.H_init)
    restored = EMA(head, rate=0.5)
    restored.load_state_dict(ema.state_dict())
    assert all(torch.equal(restored.shadow[k], v) for k, v in ema.shadow.items())


def test_muon_split_and_step_follow_urm() -> None:
    head = tiny_head("urm")
    muon = make_optimizers(
        head, lr=1e-3, puzzle_emb_lr=1e-2, weight_decay=0.1, puzzle_emb_weight_decay=0.1, optimizer="muon"
    )[1][0]
    assert isinstance(muon, Muon)
    muon_group, adam_group = muon.param_groups
    assert all(p.ndim == 2 for p in muon_group["params"]) and all(p.ndim != 2 for p in adam_group["params"])
    names = {id(p): n for n, p in head.named_parameters()}
    assert {names[id(p)].split(".")[-2] + "." + names[id(p)].split(".")[-1] for p in adam_group["params"]} >= {
        "q_head.bias",
        "dwconv.weight",
        "dwconv.bias",
    }
    w = head.model.inner.lm_head.weight
    w0 = w.detach().clone()
    batch = make_batch(2)
    head.train()
    _, loss, *_ = head(head.initial_carry(batch), batch)
    loss.backward()
    grad = w.grad.clone()
    muon.step()
    g = grad + 0.95 * grad  # Nesterov with a fresh buffer
    expected = w0 * (1 - 1e-3 * 0.1) - 1e-3 * 0.2 * math.sqrt(max(w.shape)) * orthogonalize(g.bfloat16(), 5)
    torch.testing.assert_close(w.detach(), expected)


def test_orthogonalize_flattens_the_spectrum() -> None:
    g = torch.randn(64, 32) @ torch.diag(torch.logspace(-1, 1, 32))
    s = torch.linalg.svdvals(orthogonalize(g, 5))
    assert s.min() > 0.3 and s.max() < 2.0  # condition number 100 -> about 4 (URM schedule, 5 steps)
