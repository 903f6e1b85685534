"""Checkpoint ensembles: the averaged weights against a hand computation, pooled last-K votes with a known answer."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
from conftest import tasks

from arcpipe.config import ArcpipeError
from arcpipe.eval.ensemble import average_checkpoints, pooled_last_metrics, write_pooled_last
from arcpipe.eval.results import evaluate_predictions, pool_votes, write_results
from arcpipe.models.io import _write, core_of, load_weights, read_weights, save_weights
from arcpipe.models.registry import make_arch_config
from arcpipe.report.tables import render_report

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
import modelkit  # noqa: E402

X, Y, W = [[1, 2], [3, 4]], [[5, 6], [7, 8]], [[5, 6], [7, 0]]
DATASET = {"vocab_size": modelkit.VOCAB, "seq_len": modelkit.SEQ_LEN, "num_puzzle_identifiers": modelkit.NUM_IDS}


def _checkpoints(tmp_path: Path, fills: list[list[float]]) -> list[Path]:
    """results/runs/r/ckpt/epoch_{2i}.pt of a tiny TRM whose every floating tensor repeats `fills[i]`."""
    paths = []
    for i, fill in enumerate(fills, start=1):
        head = modelkit.tiny_head("trm")
        with torch.no_grad():
            for value in core_of(head).state_dict().values():
                flat = torch.tensor(fill, dtype=value.dtype).repeat(value.numel() // len(fill) + 1)
                value.copy_(flat[: value.numel()].view(value.shape))
        path = tmp_path / "runs/r/ckpt" / f"epoch_{2 * i}.pt"
        cfg = make_arch_config("trm", "tiny", {})
        save_weights(path, head, arch="trm", arch_cfg=cfg, dataset=DATASET, step=10 * i, epoch=2 * i)
        paths.append(path)
    return paths


def test_averaged_weights_are_the_float64_mean_of_each_tensor_cast_back(tmp_path):
    # 1e8 + 1 - 1e8 is 0 in float32 and 1 in float64: the mean is 1/3, not 0
    paths = _checkpoints(tmp_path, [[1e8, 2.0], [1.0, 4.0], [-1e8, 6.0]])
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


def test_non_floating_tensors_come_from_the_last_checkpoint(tmp_path):
    paths = _checkpoints(tmp_path, [[1.0], [3.0]])
    for i, path in enumerate(paths):
        ckpt = read_weights(path)
        ckpt["model"]["counter"] = torch.tensor([i, 7], dtype=torch.int64)
        _write(path, ckpt)
    averaged = read_weights(average_checkpoints(paths, tmp_path / "avg.pt"))
    assert torch.equal(averaged["model"]["counter"], torch.tensor([1, 7]))
    assert torch.equal(averaged["model"]["q_head.bias"], torch.full((2,), 2.0))


def test_checkpoints_of_another_model_are_refused(tmp_path):
    paths = _checkpoints(tmp_path, [[1.0], [3.0]])
    ckpt = read_weights(paths[1])
    ckpt["dataset"] = {**DATASET, "num_puzzle_identifiers": 99}
    _write(paths[1], ckpt)
    with pytest.raises(ArcpipeError, match="epoch_4.pt: dataset differ from .*epoch_2.pt"):
        average_checkpoints(paths, tmp_path / "avg.pt")


def _hand_votes(tmp_path: Path, make_rows) -> list[Path]:
    """Task a (answer Y) at epochs 2, 4, 6: W W W | Y Y W | W Y (W's q higher)."""
    test = tasks({"a": [(X, Y)]})
    views = {2: [(W, 0.0)] * 3, 4: [(Y, 0.0), (Y, 0.0), (W, 0.0)], 6: [(W, 2.0), (Y, 0.0)]}
    paths = []
    for epoch, rows in views.items():
        arrays = make_rows([("a", X, pred, q) for pred, q in rows])
        out = tmp_path / "eval/r" / f"epoch_{epoch}"
        write_results(out, evaluate_predictions(**arrays, test=test, ks=(1, 2)), epoch=epoch)
        paths.append(out / "votes.npz")
    return paths


def test_pooled_last_k_votes_pool_only_the_last_k_checkpoints(tmp_path, make_rows):
    paths = _hand_votes(tmp_path, make_rows)
    # last 2: Y 3 votes, W 2; all 3: W 5, Y 3; the last alone: a 1-1 tie that W's q wins
    assert pooled_last_metrics(paths[-2:], ks=(1, 2)) == {
        "pass@1": 1.0,
        "pass@2": 1.0,
        "epoch": 6,
        "info": {"run": "r", "pooled_epochs": [4, 6]},
    }
    assert pool_votes(paths, ks=(1,))[0].pass_at[1] == 0.0
    assert pool_votes(paths[-1:], ks=(1,))[0].pass_at[1] == 0.0
    out = tmp_path / "eval/r/pooled_last2/metrics.json"
    write_pooled_last(paths[-2:], out, ks=(1, 2))
    assert json.loads(out.read_text())["pass@1"] == 1.0


def test_both_ensembles_are_rows_of_the_passk_table(tmp_path, make_rows):
    paths = _hand_votes(tmp_path, make_rows)
    write_pooled_last(paths[-2:], tmp_path / "eval/r/pooled_last2/metrics.json", ks=(1, 2))
    avg = tmp_path / "eval/r/avg_last2"
    test = tasks({"a": [(X, Y)]})
    arrays = make_rows([("a", X, Y, 0.0)])
    write_results(avg, evaluate_predictions(**arrays, test=test, ks=(1, 2)), step=60, epoch=6, info={"run": "r"})
    metrics = [p.parent / "metrics.json" for p in paths]
    ensembles = [avg / "metrics.json", tmp_path / "eval/r/pooled_last2/metrics.json"]
    render_report(tmp_path / "report", metrics, ensemble_paths=ensembles)
    passk = pd.read_csv(tmp_path / "report/passk.csv")
    assert list(passk["checkpoint"]) == ["epoch_2", "epoch_4", "epoch_6", "avg_last2", "pooled_last2"]
    assert list(passk["epoch"]) == [2, 4, 6, 6, 6]
    assert list(passk["pass@1"]) == [0.0, 100.0, 0.0, 100.0, 100.0]
    assert "pooled_lastK, their votes pooled" in (tmp_path / "report/passk.md").read_text()
    comparison = pd.read_csv(tmp_path / "report/comparison.csv")
    assert list(comparison["checkpoints"]) == [3]  # ensembles are not checkpoints of the comparison
