"""Upstream VARC checkpoints: import to arcpipe weights, export back bit for bit, and clear errors on bad files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from arcpipe.config import ArcpipeError
from arcpipe.models.io import read_weights
from arcpipe.models.registry import make_arch_config
from arcpipe.models.upstream_io import export_upstream, import_upstream
from arcpipe.models.varc import VARCViT

NUM_TASKS = 6
# upstream's `vars(args)` (utils/args.py names) for the tiny preset, with some training arguments beside them
ARGS = {
    "architecture": "vit", "image_size": 32, "patch_size": 2, "embed_dim": 64, "depth": 2, "num_heads": 4,
    "mlp_dim": 64, "dropout": 0.1, "num_colors": 12, "num_task_tokens": 1, "learning_rate": 3e-4,
    "batch_size": 32, "epochs": 10, "data_root": "raw_data/ARC-AGI", "best_save_path": None, "no_compile": False,
}  # fmt: skip


def _model() -> VARCViT:
    torch.manual_seed(0)
    return VARCViT(make_arch_config("varc", "tiny", {}), num_tasks=NUM_TASKS).eval()


def _upstream_checkpoint(tmp_path: Path, model: VARCViT, *, prefix: str = "_orig_mod.", **changes: Any) -> Path:
    """As upstream's offline_train_ARC.py saves checkpoint_best.pt (the optimizer state stands in small)."""
    payload = {
        "model_state": {prefix + k: v for k, v in model.state_dict().items()},
        "config": dict(ARGS),
        "best_eval_accuracy": 0.25,
        "epoch": 7,
        "optimizer_state": {"state": {0: {"step": torch.tensor(3.0)}}, "param_groups": [{"lr": 3e-4, "params": [0]}]},
        "scaler_state": {"scale": 65536.0, "growth_factor": 2.0},
    }
    payload.update(changes)
    path = tmp_path / "checkpoint_best.pt"
    torch.save(payload, path)
    return path


@pytest.mark.parametrize("prefix", ["_orig_mod.", ""])
def test_import_then_export_round_trips_tensors_bit_for_bit(tmp_path: Path, prefix: str) -> None:
    model = _model()
    ckpt = _upstream_checkpoint(tmp_path, model, prefix=prefix)
    meta = import_upstream("varc", ckpt, None, tmp_path / "w.pt")
    assert meta["arch_config"] == make_arch_config("varc", "tiny", {}).model_dump(mode="json")
    assert meta["dataset"] == {"vocab_size": 12, "seq_len": 900, "num_puzzle_identifiers": NUM_TASKS}
    assert meta["imported_from"]["epoch"] == 7 and meta["imported_from"]["best_eval_accuracy"] == 0.25
    weights = read_weights(tmp_path / "w.pt")
    assert list(weights["model"]) == list(model.state_dict())  # VARCViT's own keys, no prefix

    export_upstream(tmp_path / "w.pt", tmp_path / "back.pt")
    original, back = torch.load(ckpt, weights_only=True), torch.load(tmp_path / "back.pt", weights_only=True)
    assert list(back["model_state"]) == list(original["model_state"])
    for key, tensor in original["model_state"].items():
        got = back["model_state"][key]
        assert got.dtype == tensor.dtype and torch.equal(got.view(torch.uint8), tensor.view(torch.uint8)), key
    assert back["config"] == original["config"]
    assert (back["epoch"], back["best_eval_accuracy"]) == (7, 0.25)
    assert not (tmp_path / "all_config.yaml").exists()  # VARC keeps its config in the checkpoint


def test_imported_weights_give_the_same_logits(tmp_path: Path) -> None:
    model = _model()
    import_upstream("varc", _upstream_checkpoint(tmp_path, model), None, tmp_path / "w.pt")
    weights = read_weights(tmp_path / "w.pt")
    again = VARCViT(make_arch_config("varc", "tiny", {}), NUM_TASKS).eval()
    again.load_state_dict(weights["model"], strict=True)
    pixels = torch.randint(0, 12, (2, 32, 32), generator=torch.Generator().manual_seed(0))
    mask, ids = pixels < 10, torch.tensor([1, 5])
    with torch.no_grad():
        assert torch.equal(model(pixels, ids, mask), again(pixels, ids, mask))


def test_weights_trained_in_arcpipe_export_to_upstream_layout(tmp_path: Path) -> None:
    # a weights file that was never imported: `_orig_mod.` keys as upstream's compiled models, its config from the
    # arch config (upstream's argument names), nothing of arcpipe's run config
    from arcpipe.models.io import save_weights

    model = _model()

    class Head(torch.nn.Module):  # an arcpipe head keeps the ViT as model.inner (models/varc_head.py)
        def __init__(self) -> None:
            super().__init__()
            self.model = torch.nn.Module()
            self.model.inner = model

    dataset = {"vocab_size": 12, "seq_len": 900, "num_puzzle_identifiers": NUM_TASKS}
    cfg = make_arch_config("varc", "tiny", {})
    save_weights(tmp_path / "w.pt", Head(), arch="varc", arch_cfg=cfg, dataset=dataset, run_config={"lr": 1e-3})
    export_upstream(tmp_path / "w.pt", tmp_path / "up.pt")
    up = torch.load(tmp_path / "up.pt", weights_only=True)
    assert list(up["model_state"]) == [f"_orig_mod.{k}" for k in model.state_dict()]
    assert up["config"] == {"architecture": "vit", **{k: ARGS[k] for k in cfg.model_dump() if k != "name"}}


def test_dataset_with_other_task_count_gets_a_fresh_seeded_task_table(tmp_path: Path) -> None:
    model = _model()
    ckpt = _upstream_checkpoint(tmp_path, model)
    dataset = _dataset(tmp_path / "data", num_puzzle_identifiers=9)
    meta = import_upstream("varc", ckpt, None, tmp_path / "w.pt", dataset)
    again = import_upstream("varc", ckpt, None, tmp_path / "w2.pt", dataset)
    assert meta["dataset"]["num_puzzle_identifiers"] == 9 and meta["identifiers_sha256"] is not None
    table = read_weights(tmp_path / "w.pt")["model"]["task_token_embed.weight"]
    assert table.shape == (9, 64) and table.abs().max() <= 2 and 0.01 < table.std() < 0.03
    assert torch.equal(table, read_weights(tmp_path / "w2.pt")["model"]["task_token_embed.weight"])
    assert again == meta
    # the rest is kept
    weights = read_weights(tmp_path / "w.pt")["model"]
    assert torch.equal(weights["head.weight"], model.head.weight)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"config": {**ARGS, "architecture": "unet"}}, r"architecture='unet': import it with --arch varc-unet"),
        ({"config": {k: v for k, v in ARGS.items() if k != "mlp_dim"}}, r"mlp_dim missing from its config"),
        ({"config": {**ARGS, "num_colors": 10}}, r"num_colors: Input should be 12"),
        ({"config": {**ARGS, "depth": 3}}, r"weights do not match the model: 14 missing \(first: encoder.layers.2"),
        ({"config": None}, r"no `config` \(upstream's arguments\)"),
        ({"model_state": None}, r"not an upstream VARC checkpoint"),
    ],
)
def test_bad_checkpoints_are_refused_by_name(tmp_path: Path, changes: dict[str, Any], message: str) -> None:
    ckpt = _upstream_checkpoint(tmp_path, _model(), **changes)
    with pytest.raises(ArcpipeError, match=message):
        import_upstream("varc", ckpt, None, tmp_path / "w.pt")
    assert not (tmp_path / "w.pt").exists()


def test_config_file_is_refused_for_varc_and_required_for_the_others(tmp_path: Path) -> None:
    ckpt = _upstream_checkpoint(tmp_path, _model())
    with pytest.raises(ArcpipeError, match="holds its own config; leave out --config"):
        import_upstream("varc", ckpt, tmp_path / "all_config.yaml", tmp_path / "w.pt")
    with pytest.raises(ArcpipeError, match="--config is required"):
        import_upstream("trm", ckpt, None, tmp_path / "w.pt")


def test_cli_imports_varc_without_config_and_lists_its_presets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from arcpipe.cli import main

    ckpt = _upstream_checkpoint(tmp_path, _model())
    assert main(["model", "import", "--arch", "varc", str(ckpt), str(tmp_path / "w.pt")]) == 0
    assert read_weights(tmp_path / "w.pt")["arch"] == "varc"
    assert main(["models"]) == 0
    lines = [line.split()[:3] for line in capsys.readouterr().out.splitlines()]
    assert ["varc", "arc", "17,385,008"] in lines and ["varc", "tiny", "87,280"] in lines


def _dataset(path: Path, num_puzzle_identifiers: int) -> Path:
    """The smallest built dataset `load_split` reads: its metadata, empty arrays, an identifiers.json."""
    split = path / "train"
    split.mkdir(parents=True)
    meta = {
        "pad_id": 0, "ignore_label_id": 0, "blank_identifier_id": 0, "vocab_size": 12, "seq_len": 900,
        "num_puzzle_identifiers": num_puzzle_identifiers, "total_groups": 0, "mean_puzzle_examples": 0.0,
        "sets": ["all"],
    }  # fmt: skip
    (split / "dataset.json").write_text(json.dumps(meta))
    for field in ("inputs", "labels"):
        np.save(split / f"all__{field}.npy", np.zeros((0, 900), dtype=np.uint8))
    for field in ("puzzle_identifiers", "puzzle_indices", "group_indices"):
        np.save(split / f"all__{field}.npy", np.zeros(1 if field != "puzzle_identifiers" else 0, dtype=np.int32))
    (path / "identifiers.json").write_text(json.dumps([f"t{i}" for i in range(num_puzzle_identifiers)]))
    return path
