"""Whole graphs and no host syncs in the step path, for every arch at its `tiny` preset on CPU (issue 21).

* graph breaks: `torch._dynamo.explain` of the training step (one ACT segment's forward and loss, `head.step` in
  train mode) and of the evaluation step (`head.step` in eval mode) finds one graph and no break;
* no recompilation: `torch.compile(head.step, backend="aot_eager", fullgraph=True)` (aot_eager traces the backward
  too, without inductor's code generation, which would take most of the time on CPU) is compiled once and then
  reused for a second ACT step from the returned carry and a third with new data of the same shape, ACT halting
  included, under `error_on_recompile`;
* compiled and eager agree: same loss, logits, carry and gradients within rtol 1e-5 / atol 1e-6 (fp32 on CPU;
  aot_eager runs the same aten kernels, only its decompositions may reorder a float sum, so anything above a few
  ulps is a real difference); halted flags and step counts exactly;
* host syncs: one training step (two micro-batches' forward, loss and backward, then SparseSignSGD, AdamATan2
  or Muon, EMA: train/loop.py's train_step without the metric logging, which is the one place its numbers reach
  the host) and the evaluation step run under `HostSyncGuard` (arcpipe.models.syncs), which records every
  `.item()`, `bool(tensor)`, `.tolist()`, `.numpy()`, `nonzero`, boolean-mask index and `unique`. Neither makes
  one (`PINNED_TRAIN_SYNCS`, empty, is where a deliberate one would be listed with its reason);
* evaluation runs exactly halt_max_steps ACT steps with no host read of the halted flags: every row is halted then,
  and predict's answers equal those of the old loop that read `halted.all()` after every step.

Sizes: batch 2, sequence 16 (the models do not depend on 900), so the whole file takes some 15 s on 2 busy cores.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from modelkit import ARCHS, make_batch, preset_head, tiny_head
from torch._dynamo.testing import CompileCounterWithBackend

from arcpipe.config.arch import PRESETS, VARC_ARCHS, make_arch_config
from arcpipe.eval.infer import predict
from arcpipe.models.syncs import HostSyncGuard
from arcpipe.optim import EMA, make_optimizers
from arcpipe.train.distributed import DistEnv

B, L = 2, 16
RTOL, ATOL = 1e-5, 1e-6

# Host synchronisations a training step may make, with their reason; anything else fails the test. None today:
# SparseSignSGD used to sum the gradient rows per puzzle id with torch.unique, whose output size depends on the ids
# (a host sync on CUDA); it now sums them with a sort and fixed-size segment sums (optim/signsgd.py).
PINNED_TRAIN_SYNCS: set[tuple[str, str]] = set()


def _train_batch(seed: int) -> dict[str, torch.Tensor]:
    batch = make_batch(B, seed, seq_len=L)
    batch["halt_min_steps"] = torch.tensor([0, 2], dtype=torch.int32)  # as the trainer: one row explores
    return batch


def _close(a: torch.Tensor, b: torch.Tensor) -> None:
    if a.dtype.is_floating_point:
        torch.testing.assert_close(a, b, rtol=RTOL, atol=ATOL)
    else:
        assert torch.equal(a, b)


# --------------------------------------------------------------------------------------------------------------


def test_the_guard_sees_every_kind_of_host_sync() -> None:
    t = torch.tensor([1.0, -2.0])
    for kind, fn in [
        ("_local_scalar_dense", lambda: t[0].item()),
        ("_local_scalar_dense", lambda: bool(t[0] > 0)),
        ("Tensor.tolist", lambda: t.tolist()),
        ("Tensor.numpy", lambda: t.numpy()),
        ("aten.nonzero", lambda: t.nonzero()),
        ("bool mask", lambda: t[t > 0]),
        ("aten._unique2", lambda: t.unique(return_inverse=True)),
    ]:
        with HostSyncGuard().active() as guard:
            fn()
        assert guard.seen and kind in guard.seen[0][0], (kind, guard.seen)
    with HostSyncGuard().active() as guard:
        (t * 2 + 1).sum().sqrt()
    assert guard.seen == []


@pytest.mark.parametrize("arch", ARCHS)
def test_steps_are_one_graph_without_break(arch: str) -> None:
    torch._dynamo.reset()
    head = tiny_head(arch, batch_size=B, seq_len=L)
    for training, batch in [(True, _train_batch(0)), (False, make_batch(B, 0, seq_len=L))]:
        head.train(training)
        explained = torch._dynamo.explain(head.step)(head.initial_carry(batch), batch, ("preds", "q_halt_logits"))
        assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons
        assert explained.break_reasons == []
    torch._dynamo.reset()


@pytest.mark.numeric
@pytest.mark.parametrize("arch", ARCHS)
def test_training_step_compiles_once_and_matches_eager(arch: str) -> None:
    torch._dynamo.reset()
    eager_head = tiny_head(arch, batch_size=B, seq_len=L)
    head = tiny_head(arch, batch_size=B, seq_len=L)
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(head.step, backend=counter, fullgraph=True)
    eager_head.train(), head.train()
    batches = [_train_batch(0), _train_batch(0), _train_batch(1)]  # two ACT steps of a sequence, then new data
    carry_e = eager_head.initial_carry(batches[0])
    carry_c = head.initial_carry(batches[0])
    with torch._dynamo.config.patch(error_on_recompile=True):
        for batch in batches:
            carry_e, loss_e, metrics_e, out_e = eager_head.step(carry_e, batch, ("logits", "q_halt_logits"))
            carry_c, loss_c, metrics_c, out_c = compiled(carry_c, batch, ("logits", "q_halt_logits"))
            loss_e.backward(), loss_c.backward()
            _close(loss_c, loss_e)
            for k in out_e:
                _close(out_c[k], out_e[k])
            for k in metrics_e:
                _close(metrics_c[k], metrics_e[k])
            for a, b in zip(carry_c.inner, carry_e.inner, strict=True):
                _close(a, b)
            _close(carry_c.steps, carry_e.steps)
            _close(carry_c.halted, carry_e.halted)
    assert counter.frame_count == 1
    for (name, p), q in zip(head.named_parameters(), eager_head.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6, msg=name)  # sums of three backwards
    torch._dynamo.reset()


@pytest.mark.numeric
@pytest.mark.parametrize("arch", ARCHS)
def test_evaluation_step_compiles_once_and_matches_eager(arch: str) -> None:
    torch._dynamo.reset()
    head = tiny_head(arch, batch_size=B, seq_len=L).eval()
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(head.step, backend=counter, fullgraph=True)
    with torch.no_grad(), torch._dynamo.config.patch(error_on_recompile=True):
        for seed in (0, 1):  # two batches of all halt_max_steps steps
            batch = make_batch(B, seed, seq_len=L)
            carry_e = carry_c = head.initial_carry(batch)
            for _ in range(head.model.max_steps):
                carry_e, loss_e, _, out_e = head.step(carry_e, batch, ("preds", "q_halt_logits"))
                carry_c, loss_c, _, out_c = compiled(carry_c, batch, ("preds", "q_halt_logits"))
                _close(loss_c, loss_e)
                _close(out_c["q_halt_logits"], out_e["q_halt_logits"])
                _close(out_c["preds"], out_e["preds"])
                _close(carry_c.halted, carry_e.halted)
    assert counter.frame_count == 1
    torch._dynamo.reset()


@pytest.mark.parametrize("optimizer", ["adam_atan2", "muon"])
@pytest.mark.parametrize("arch", ARCHS)
def test_training_step_has_no_host_sync(arch: str, optimizer: str) -> None:
    head = tiny_head(arch, batch_size=B, seq_len=L)
    optimizers = make_optimizers(
        head, lr=1e-3, puzzle_emb_lr=1e-2, weight_decay=0.1, puzzle_emb_weight_decay=0.1, optimizer=optimizer,
        compile=False,
    )  # fmt: skip
    ema = EMA(head, 0.999)
    head.train()
    batch = _train_batch(0)
    carry = head.initial_carry(batch)
    for _ in range(2):  # the first step from the initial carry, the second from a carried one
        with HostSyncGuard().active() as guard:
            sums = None
            for _ in range(2):  # two micro-batches accumulated into one optimizer step
                carry, loss, metrics, _ = head.step(carry, batch)
                (loss / (2 * B)).backward()
                step_sums = {k: v.detach().float() for k, v in metrics.items()}  # what train_step keeps
                sums = step_sums if sums is None else {k: sums[k] + v for k, v in step_sums.items()}
            for opt, _ in optimizers:
                opt.step()
                opt.zero_grad(set_to_none=True)
            ema.update()
        assert set(guard.seen) == PINNED_TRAIN_SYNCS, guard.seen
    torch.stack(list(sums.values())).tolist()  # the logging boundary (Trainer._reduce_metrics): one read per step


@pytest.mark.parametrize("arch", ARCHS)
def test_evaluation_step_has_no_host_sync(arch: str) -> None:
    head = tiny_head(arch, batch_size=B, seq_len=L).eval()
    batch = make_batch(B, 0, seq_len=L)
    carry = head.initial_carry(batch)
    with torch.no_grad(), HostSyncGuard().active() as guard:
        for _ in range(head.model.max_steps):
            carry, _, _, _ = head.step(carry, batch, ("preds", "q_halt_logits"))
    assert guard.seen == []


def _old_predictions(head, inputs, labels, ids, rows, batch_size):  # type: ignore[no-untyped-def]
    # the loop predict had before: read halted.all() on the host after every ACT step
    from arcpipe.eval.infer import make_batch as rows_batch

    head.eval()
    preds, q_halt, steps = [], [], []
    with torch.no_grad():
        for start in range(0, len(rows), batch_size):
            chunk = rows[start : start + batch_size]
            batch = rows_batch(inputs, labels, ids, chunk, batch_size, torch.device("cpu"))
            carry = head.initial_carry(batch)
            n, step = len(chunk), 0
            while True:
                carry, _, metrics, outputs, all_halted = head(carry, batch, return_keys=("preds", "q_halt_logits"))
                step += 1
                if all_halted:
                    break
            steps.append(step)
            preds.append(outputs["preds"][:n].to(torch.uint8).numpy())
            q_halt.append(outputs["q_halt_logits"][:n].float().numpy())
    return np.concatenate(preds), np.concatenate(q_halt), steps


@pytest.mark.numeric
@pytest.mark.parametrize("arch", ARCHS)
def test_evaluation_runs_exactly_halt_max_steps_as_the_old_loop(arch: str) -> None:
    head = tiny_head(arch, batch_size=B, seq_len=L)
    batch = make_batch(5, 3, seq_len=L)
    inputs = batch["inputs"].numpy().astype(np.uint8)
    labels = np.where(batch["labels"].numpy() < 0, 0, batch["labels"].numpy()).astype(np.uint8)
    ids = batch["puzzle_identifiers"].numpy().astype(np.int64)
    rows = np.arange(5)
    preds, q_halt, steps = _old_predictions(head, inputs, labels, ids, rows, B)
    assert steps == [head.model.max_steps] * 3  # every row halted after exactly halt_max_steps, none before
    new = predict(head, inputs, labels, ids, rows, B, DistEnv(0, 0, 1, torch.device("cpu")))
    assert new is not None
    assert np.array_equal(new.preds, preds)
    assert np.array_equal(new.q_halt_logits, q_halt)


# -- the published presets' structure ----------------------------------------------------------------------------
# Every preset but `tiny` at its own structure (cycles, layers, heads, ACT steps, puzzle-embedding positions,
# expansion), only narrower: hidden_size 8 per head, so that CPU time stays in seconds; width changes no control
# flow. `fullgraph=True` makes any graph break an error, `error_on_recompile` any recompilation. The training step
# goes through aot_eager (dynamo, then AOT autograd's joint forward and backward graph, as torch.compile in
# train/loop.py does before inductor); the evaluation step too, under no_grad (one inference graph, compiled once
# over every ACT step), as eval/infer.py compiles it on CUDA before inductor.
# VARC is one ViT or U-Net pass over a canvas, not this recursive structure: its whole-graph compile is in
# test_varc.py and test_varc_unet.py. URM's `default` preset differs from its `arc` in counts alone (loops, cycles,
# layers: the same fields, the same code), and tracing it (96 block applications and their backward) took 44 s of
# a CI worker; TRM's `default` differs from its `arc` in L_cycles alone (6, not 4: the same inner loop, run more
# often), and took 27 s of a quiet core (its `arc`: 24 s), a sixth of the published cases' CPU: `arc` stands for both
SAME_STRUCTURE_AS_ARC = {("urm", "default"), ("trm", "default")}
COUNTS = {"loops", "H_cycles", "L_cycles", "num_layers"}  # how often the same blocks run, not which blocks
PUBLISHED = [
    (arch, preset)
    for arch, presets in PRESETS.items()
    if arch not in VARC_ARCHS
    for preset in presets
    if preset != "tiny" and (arch, preset) not in SAME_STRUCTURE_AS_ARC
]


def _fields_unlike_arc(arch: str, preset: str) -> set[str]:
    arc, other = make_arch_config(arch, "arc", {}).model_dump(), make_arch_config(arch, preset, {}).model_dump()
    return {field for field in arc if arc[field] != other[field]}


assert all(_fields_unlike_arc(a, p) <= COUNTS for a, p in SAME_STRUCTURE_AS_ARC)


def _published_head(arch: str, preset: str):  # type: ignore[no-untyped-def]
    return preset_head(arch, preset, batch_size=B, seq_len=L, hidden_size=8 * PRESETS[arch][preset]["num_heads"])


@pytest.mark.slow  # 10-60 s each on 2 busy cores: tracing 30-96 blocks and their backward
@pytest.mark.parametrize(("arch", "preset"), PUBLISHED, ids=[f"{a}-{p}" for a, p in PUBLISHED])
def test_published_structure_compiles_whole_once_and_matches_eager(arch: str, preset: str) -> None:
    torch._dynamo.reset()
    eager, head = _published_head(arch, preset), _published_head(arch, preset)
    train = CompileCounterWithBackend("aot_eager")
    step = torch.compile(head.step, backend=train, fullgraph=True)
    eager.train(), head.train()
    with torch._dynamo.config.patch(error_on_recompile=True):
        batch = _train_batch(0)
        carry_e, carry_c = eager.initial_carry(batch), head.initial_carry(batch)
        for batch in (_train_batch(0), _train_batch(1)):  # from the initial carry, then from a carried one
            carry_e, loss_e, _, out_e = eager.step(carry_e, batch, ("logits", "q_halt_logits"))
            carry_c, loss_c, _, out_c = step(carry_c, batch, ("logits", "q_halt_logits"))
            loss_e.backward(), loss_c.backward()
            _close(loss_c, loss_e)
            _close(out_c["logits"], out_e["logits"])
            _close(carry_c.halted, carry_e.halted)
    assert train.frame_count == 1
    for (name, p), q in zip(head.named_parameters(), eager.parameters(), strict=True):
        if q.grad is not None:
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6, msg=name)

    torch._dynamo.reset()
    evaluate = CompileCounterWithBackend("aot_eager")
    step = torch.compile(head.step, backend=evaluate, fullgraph=True)
    eager.eval(), head.eval()
    batch = make_batch(B, 2, seq_len=L)
    with torch.no_grad(), torch._dynamo.config.patch(error_on_recompile=True):
        carry_e = carry_c = head.initial_carry(batch)
        for _ in range(head.model.max_steps):  # every ACT step of the preset (16)
            carry_e, _, _, out_e = eager.step(carry_e, batch, ("preds", "q_halt_logits"))
            carry_c, _, _, out_c = step(carry_c, batch, ("preds", "q_halt_logits"))
            _close(out_c["q_halt_logits"], out_e["q_halt_logits"])
            _close(out_c["preds"], out_e["preds"])
    assert bool(carry_c.halted.all())
    assert evaluate.frame_count == 1
    torch._dynamo.reset()


def test_evaluation_the_embedding_hook_and_the_optimizers_do_not_import_dynamo() -> None:
    """Importing torch._dynamo costs 1.3-1.6 s of CPU per process. A CPU process that compiles nothing must not
    import it: an evaluation (every CPU `arcpipe evaluate` job), the puzzle embedding's gradient hook in a backward (it
    marks itself out of the graph only in a process that has dynamo), nor building arcpipe's optimizers and stepping
    them (torch.optim.Optimizer's own add_param_group and zero_grad would import it: arcpipe.optim.base), as every
    CPU training process and preflight does. SignSGD learns on that path."""
    code = """
import sys
import torch
sys.path.insert(0, sys.argv[1])
from modelkit import make_batch, tiny_head
from arcpipe.optim import Muon, make_optimizers
head = tiny_head("trm", batch_size=2, seq_len=16)
batch = make_batch(2, 0, seq_len=16)
batch["halt_min_steps"] = torch.zeros(2, dtype=torch.int32)
head.eval()
with torch.no_grad():
    carry = head.initial_carry(batch)
    for _ in range(head.model.max_steps):
        carry, *_ = head.step(carry, batch)
head.train()
_, loss, _, _ = head.step(head.initial_carry(batch), batch)
loss.backward()
emb = head.model.inner.puzzle_emb
assert len(emb.pending_ids) == 1, "the hook did not collect the rows"
print("torch._dynamo" in sys.modules)
before = emb.weights.clone()
emb.clear_pending()
(signsgd, _), (adam, _) = make_optimizers(head, lr=1e-3, puzzle_emb_lr=1e-2, weight_decay=0.1,
                                          puzzle_emb_weight_decay=0.1, compile=False)
_, loss, _, _ = head.step(head.initial_carry(batch), batch)
loss.backward()
signsgd.step()
for optimizer in (signsgd, adam, Muon.for_model(head, lr=1e-3, weight_decay=0.1)):
    optimizer.step()
    optimizer.zero_grad()
    optimizer.load_state_dict(optimizer.state_dict())
print("torch._dynamo" in sys.modules)
assert not torch.equal(emb.weights, before), "the embedding did not learn"
"""
    here = str(Path(__file__).parent)
    out = subprocess.run([sys.executable, "-c", code, here], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["False", "False"], out.stdout
