"""One training step of each tiny model on CPU: shapes, dtypes, loss, and every optimizer moving something."""

from __future__ import annotations

import pytest
import torch
from modelkit import ARCHS, SEQ_LEN, VOCAB, make_batch, tiny_head

from arcpipe.models.registry import PRESETS
from arcpipe.optim import make_optimizers


@pytest.mark.parametrize("arch", ARCHS)
def test_tiny_model_trains_one_step(arch: str) -> None:
    head = tiny_head(arch, batch_size=3)
    batch = make_batch(3)
    optimizers = make_optimizers(head, lr=1e-3, puzzle_emb_lr=1e-2, weight_decay=0.1, puzzle_emb_weight_decay=0.1)
    before = {k: v.clone() for k, v in head.state_dict().items()}
    head.train()
    carry = head.initial_carry(batch)
    carry, loss, metrics, outputs, all_halted = head(carry, batch, ["preds", "q_halt_logits"])

    assert loss.ndim == 0 and torch.isfinite(loss)
    assert outputs["preds"].shape == (3, SEQ_LEN)
    assert outputs["q_halt_logits"].shape == (3,) and outputs["q_halt_logits"].dtype == torch.float32
    assert not outputs["preds"].requires_grad
    assert {"count", "accuracy", "exact_accuracy", "q_halt_accuracy", "steps", "lm_loss", "q_halt_loss"} <= set(metrics)
    assert isinstance(all_halted, bool)
    assert torch.equal(carry.steps, torch.ones(3, dtype=torch.int32))
    assert all(t.dtype == torch.float32 and not t.requires_grad for t in carry.inner)

    (loss / 3).backward()
    for opt, _ in optimizers:
        opt.step()
        opt.zero_grad()
    after = head.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert "model.inner.puzzle_emb.weights" in changed
    assert "model.inner.lm_head.weight" in changed
    assert "model.inner.embed_tokens.embedding_weight" in changed


def test_every_arch_has_arc_and_tiny_presets() -> None:
    for arch, presets in PRESETS.items():
        assert {"arc", "tiny"} <= set(presets), arch


@pytest.mark.parametrize("arch", ARCHS)
def test_logits_have_vocab_width(arch: str) -> None:
    head = tiny_head(arch)
    batch = make_batch(2)
    head.eval()
    with torch.no_grad():
        _, outputs = head.model(head.initial_carry(batch), batch)
    assert outputs["logits"].shape == (2, SEQ_LEN, VOCAB)


@pytest.mark.parametrize("arch", ARCHS)
def test_a_dropped_model_frees_its_puzzle_embedding_table(arch: str) -> None:
    # the table is the largest tensor of a run (4 GB at ARC-AGI-1's 2M puzzle ids): a model built, trained a step,
    # moved (`.to`, which gives the embedding's leaf a new hook) and dropped must give it back, so that a process
    # building several (the doctor's micro-batch probes, an evaluation after training, the tests) does not fill up
    import gc
    import weakref

    head = tiny_head(arch, batch_size=2).to(torch.float32)
    optimizers = make_optimizers(
        head, lr=1e-3, puzzle_emb_lr=1e-2, weight_decay=0.1, puzzle_emb_weight_decay=0.1, compile=False
    )
    batch = make_batch(2)
    _, loss, _, _, _ = head(head.initial_carry(batch), batch)
    loss.backward()
    for opt, _ in optimizers:
        opt.step()
    emb = head.model.inner.puzzle_emb
    assert not emb.pending_ids, "the hook did not run"  # the step took what the hook collected
    tables = [weakref.ref(emb), weakref.ref(emb.weights), weakref.ref(emb.local_weights)]
    del head, optimizers, emb, loss
    gc.collect()
    assert [t() for t in tables] == [None, None, None]
