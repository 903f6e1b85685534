"""Inference on the tiny real dataset (eval mode, answers gathered in row order) and the per-step answer keys."""

from __future__ import annotations

import numpy as np
import torch

from arcpipe.data.dataset import load_split
from arcpipe.eval.infer import CandidateKeys, predict, step_is_compiled
from arcpipe.models.io import load_weights
from arcpipe.optim import make_optimizers
from arcpipe.train.distributed import DistEnv

X, Y, W = [[1, 2], [3, 4]], [[5, 6], [7, 8]], [[5, 6], [7, 0]]
ROT = "t|||t1|||0123456789"  # rotated view
PERM = "t|||t6|||0912345678"  # transposed, colours shifted


def test_train_evaluate_train_in_one_process(tiny_dataset, tiny_checkpoint, tmp_path):
    # evaluation tensors must never poison a later in-place update (docs/reference/upstream-recursive.md 10.8 item 2)
    train, test = load_split(tiny_dataset, "train"), load_split(tiny_dataset, "test")
    head, _ = load_weights(tiny_checkpoint(tmp_path / "ckpt.pt", tiny_dataset), "cpu", batch_size=4)
    optimizers = make_optimizers(
        head, lr=1e-3, puzzle_emb_lr=1e-2, weight_decay=0.1, puzzle_emb_weight_decay=0.1, compile=False
    )
    ids = np.repeat(train.puzzle_identifiers, np.diff(train.puzzle_indices))
    batch = {
        "inputs": torch.from_numpy(train.inputs[:4].astype(np.int32)),
        "labels": torch.from_numpy(np.where(train.labels[:4] == 0, -100, train.labels[:4].astype(np.int32))),
        "puzzle_identifiers": torch.from_numpy(ids[:4].astype(np.int32)),
    }

    def train_step(carry):
        head.train()
        carry, loss, _, _, _ = head(carry, batch)
        loss.backward()
        for opt, _ in optimizers:
            opt.step()
            opt.zero_grad()
        return carry

    carry = train_step(head.initial_carry(batch))
    test_ids = np.repeat(test.puzzle_identifiers, np.diff(test.puzzle_indices))
    env = DistEnv(0, 0, 1)
    first = predict(head, test.inputs, test.labels, test_ids, np.arange(len(test_ids)), 4, env)
    assert head.training  # restored
    before = {k: v.clone() for k, v in head.state_dict().items()}
    carry = train_step(carry)  # the carry and weights after an evaluation still take in-place updates
    assert any(not torch.equal(before[k], v) for k, v in head.state_dict().items())
    second = predict(head, test.inputs, test.labels, test_ids, np.arange(len(test_ids)), 4, env)
    assert first.preds.shape == second.preds.shape == (len(test_ids), 900)


def test_the_compiled_evaluation_step_gives_the_eager_answers(tiny_dataset, tiny_checkpoint, tmp_path):
    # on CUDA predict compiles the step (2.5x the eager examples/s on an H200); here inductor's CPU kernels stand in:
    # the same answers, one compilation for every batch (the last one padded)
    test = load_split(tiny_dataset, "test")
    head, _ = load_weights(tiny_checkpoint(tmp_path / "ckpt.pt", tiny_dataset), "cpu", batch_size=4)
    ids = np.repeat(test.puzzle_identifiers, np.diff(test.puzzle_indices))
    rows = np.arange(len(ids) - 1)  # the last batch is a padded one
    assert len(rows) % 4
    keys = CandidateKeys(ids, [f"p{i}" for i in range(int(ids.max()) + 1)], rows)
    env = DistEnv(0, 0, 1)
    assert not step_is_compiled(env.device) and step_is_compiled(torch.device("cuda"))
    eager = predict(head, test.inputs, test.labels, ids, rows, 4, env, keys)
    torch._dynamo.reset()
    with torch._dynamo.config.patch(error_on_recompile=True):
        compiled = predict(head, test.inputs, test.labels, ids, rows, 4, env, keys, compile=True)
    torch._dynamo.reset()
    assert np.array_equal(compiled.preds, eager.preds)
    assert np.array_equal(compiled.step_keys, eager.step_keys)
    np.testing.assert_allclose(compiled.q_halt_logits, eager.q_halt_logits, rtol=1e-4, atol=1e-5)
    assert compiled.metric_sums["count"] == eager.metric_sums["count"] == len(rows)


def test_the_same_answer_in_every_view_has_one_key(make_rows):
    arrays = make_rows([("t", X, Y, 0.0), (ROT, X, Y, 0.0), (PERM, X, Y, 0.0), (PERM, X, W, 0.0)])
    n = len(arrays["puzzle_identifiers"])
    keys = CandidateKeys(arrays["puzzle_identifiers"], arrays["identifiers"], np.arange(n))(
        np.arange(n), arrays["preds"]
    )
    assert keys.shape == (4, 2) and keys.dtype == np.int64
    assert (keys[:3] == keys[0]).all() and (keys[3] != keys[0]).any()
