"""Checkpoint ensembles: the averaged weights against a hand computation (pooled votes: test_pool.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from arcpipe.config import ArcpipeError
from arcpipe.eval.ensemble import average_checkpoints
from arcpipe.models.io import core_of, load_weights, read_weights

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
import modelkit  # noqa: E402

DATASET = {"vocab_size": modelkit.VOCAB, "seq_len": modelkit.SEQ_LEN, "num_puzzle_identifiers": modelkit.NUM_IDS}


def _checkpoints(tmp_path: Path, tiny_checkpoint, fills: list[list[float]]) -> list[Path]:
    """results/runs/r/ckpt/epoch_{2i}.pt of a tiny TRM whose every floating tensor repeats `fills[i]`."""
    paths = []
    for i, fill in enumerate(fills, start=1):

        def repeat(head, fill=fill):
            for value in core_of(head).state_dict().values():
                flat = torch.tensor(fill, dtype=value.dtype).repeat(value.numel() // len(fill) + 1)
                value.copy_(flat[: value.numel()].view(value.shape))

        path = tmp_path / "runs/r/ckpt" / f"epoch_{2 * i}.pt"
        paths.append(tiny_checkpoint(path, DATASET, edit=repeat, step=10 * i, epoch=2 * i))
    return paths


def test_averaged_weights_are_the_float64_mean_of_each_tensor_cast_back(tmp_path, tiny_checkpoint):
    # 1e8 + 1 - 1e8 is 0 in float32 and 1 in float64: the mean is 1/3, not 0
    paths = _checkpoints(tmp_path, tiny_checkpoint, [[1e8, 2.0], [1.0, 4.0], [-1e8, 6.0]])
    out = average_checkpoints(paths, tmp_path / "runs/r/ckpt/avg_last3.pt")
    averaged = read_weights(out)
    expected = torch.tensor([1 / 3, 4.0], dtype=torch.float32)
    for key, value in averaged["model"].items():
        assert value.dtype == torch.float32
        flat = expected.repeat(value.numel() // 2 + 1)[: value.numel()]
        assert torch.equal(value.flatten(), flat), key
    assert "puzzle_emb.weights" in averaged["model"]  # the embedding table is averaged with the rest
    assert (averaged["step"], averaged["epoch"]) == (30, 6)  # the last checkpoint's
    assert averaged["averaged_from"] == ["epoch_2.pt", "epoch_4.pt", "epoch_6.pt"]
    head, meta = load_weights(out, "cpu")  # an ordinary checkpoint: `arcpipe evaluate` loads it the same way
    assert torch.equal(core_of(head).state_dict()["lm_head.weight"], averaged["model"]["lm_head.weight"])


def test_non_floating_tensors_come_from_the_last_checkpoint(tmp_path, tiny_checkpoint):
    paths = _checkpoints(tmp_path, tiny_checkpoint, [[1.0], [3.0]])
    for i, path in enumerate(paths):
        ckpt = read_weights(path)
        ckpt["model"]["counter"] = torch.tensor([i, 7], dtype=torch.int64)
        torch.save(ckpt, path)
    averaged = read_weights(average_checkpoints(paths, tmp_path / "avg.pt"))
    assert torch.equal(averaged["model"]["counter"], torch.tensor([1, 7]))
    assert torch.equal(averaged["model"]["q_head.bias"], torch.full((2,), 2.0))


def test_checkpoints_of_another_model_are_refused(tmp_path, tiny_checkpoint):
    paths = _checkpoints(tmp_path, tiny_checkpoint, [[1.0], [3.0]])
    ckpt = read_weights(paths[1])
    ckpt["dataset"] = {**DATASET, "num_puzzle_identifiers": 99}
    torch.save(ckpt, paths[1])
    with pytest.raises(ArcpipeError, match="epoch_4.pt: dataset differ from .*epoch_2.pt"):
        average_checkpoints(paths, tmp_path / "avg.pt")
