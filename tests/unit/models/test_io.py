"""Weights checkpoints and upstream import/export: round trips, layouts, and clear errors on bad input."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from modelkit import NUM_IDS, SEQ_LEN, VOCAB, make_batch, tiny_head

from arcpipe.config import ArcpipeError
from arcpipe.models.io import check_identifiers, load_weights, save_weights
from arcpipe.models.registry import make_arch_config
from arcpipe.models.upstream_io import export_upstream, import_upstream

DATASET = {"vocab_size": VOCAB, "seq_len": SEQ_LEN, "num_puzzle_identifiers": NUM_IDS}


def _randomised(arch: str):
    head = tiny_head(arch)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for t in head.state_dict().values():
            if t.is_floating_point():
                t.copy_(torch.randn(t.shape, generator=g))
    return head


def _upstream_files(tmp_path: Path, arch: str, *, compiled: bool, urm_dict: bool = False) -> tuple[Path, Path]:
    """An upstream-layout checkpoint (bf16 initial states, as upstream saves them) and its all_config.yaml."""
    head = _randomised(arch)
    prefix = "_orig_mod.model.inner." if compiled else "model.inner."
    state = {}
    for k, v in head.model.inner.state_dict().items():
        low = k in ("H_init", "L_init", "init_hidden") or ".dwconv." in k
        state[prefix + k] = v.to(torch.bfloat16) if low else v
    fields = make_arch_config(arch, "tiny", {}).model_dump(mode="json")
    loss = {"name": "losses@ACTLossHead", "loss_type": fields.pop("loss_type")}
    fields.pop("name")
    cfg = {"arch": {"name": "x@Y", "loss": loss, **fields}, "global_batch_size": 8, "lr": 1e-4}
    if urm_dict:
        cfg["grad_accum_steps"] = 4
    config = tmp_path / "all_config.yaml"
    config.write_text(yaml.safe_dump(cfg))
    ckpt = tmp_path / ("step_7.pt" if urm_dict else "step_7")
    torch.save({"step": 7, "model_state_dict": state, "optimizer_states": []} if urm_dict else state, ckpt)
    return ckpt, config


@pytest.mark.parametrize("arch", ["trm", "hrm", "urm", "transformer"])
def test_save_then_load_gives_identical_outputs(tmp_path: Path, arch: str) -> None:
    head = _randomised(arch).eval()
    path = tmp_path / "w.pt"
    cfg = make_arch_config(arch, "tiny", {})
    save_weights(path, head, arch=arch, arch_cfg=cfg, dataset=DATASET, identifiers_sha256="ab" * 32, step=5, epoch=2)
    loaded, meta = load_weights(path, "cpu")
    assert meta["step"] == 5 and meta["epoch"] == 2 and meta["identifiers_sha256"] == "ab" * 32
    assert set(torch.load(path, weights_only=True)["model"]) == set(head.model.inner.state_dict())
    batch = make_batch(2)
    with torch.no_grad():
        _, a = head.model(head.initial_carry(batch), batch)
        _, b = loaded.model(loaded.initial_carry(batch), batch)
    assert torch.equal(a["logits"], b["logits"]) and torch.equal(a["q_halt_logits"], b["q_halt_logits"])
    assert not list(tmp_path.glob(".*tmp*"))  # the temporary file was renamed away


@pytest.mark.parametrize(
    ("arch", "compiled", "urm_dict"), [("trm", True, False), ("hrm", False, False), ("urm", True, True)]
)
def test_import_then_export_round_trips_tensors_byte_for_byte(
    tmp_path: Path, arch: str, compiled: bool, urm_dict: bool
) -> None:
    ckpt, config = _upstream_files(tmp_path, arch, compiled=compiled, urm_dict=urm_dict)
    ours = tmp_path / "imported.pt"
    meta = import_upstream(arch, ckpt, config, ours)
    assert meta["step"] == 7
    if urm_dict:  # URM's batch size is per micro-batch; arcpipe's is per optimizer step
        assert meta["run_config"]["global_batch_size"] == 8 * 4
    head, _ = load_weights(ours, "cpu")  # loads into the fp32 CPU model
    assert head.model.inner.state_dict().keys()
    back = tmp_path / "out" / ckpt.name
    export_upstream(ours, back)
    original = torch.load(ckpt, weights_only=True)
    exported = torch.load(back, weights_only=True)
    if urm_dict:
        original, exported = original["model_state_dict"], exported["model_state_dict"]
    assert list(original) == list(exported)
    for k, v in original.items():
        assert v.dtype == exported[k].dtype and v.shape == exported[k].shape, k
        assert v.contiguous().view(torch.uint8).equal(exported[k].contiguous().view(torch.uint8)), k
    assert yaml.safe_load((back.parent / "all_config.yaml").read_text())["arch"]["name"]


def test_imported_weights_give_the_same_outputs_as_the_source(tmp_path: Path) -> None:
    ckpt, config = _upstream_files(tmp_path, "trm", compiled=True)
    import_upstream("trm", ckpt, config, tmp_path / "w.pt")
    head, _ = load_weights(tmp_path / "w.pt", "cpu")
    source = tiny_head("trm").eval()
    source.model.inner.load_state_dict(
        {k.removeprefix("_orig_mod.model.inner."): v for k, v in torch.load(ckpt, weights_only=True).items()}
    )
    batch = make_batch(2)
    with torch.no_grad():
        _, a = head.model(head.initial_carry(batch), batch)
        _, b = source.model(source.initial_carry(batch), batch)
    assert torch.equal(a["logits"], b["logits"])


def test_import_with_the_wrong_arch_lists_missing_and_unexpected_keys(tmp_path: Path) -> None:
    ckpt, _ = _upstream_files(tmp_path, "hrm", compiled=True)
    _, config = _upstream_files(tmp_path / "t", "trm", compiled=True) if (tmp_path / "t").mkdir() is None else (0, 0)
    with pytest.raises(ArcpipeError, match=r"step_7: weights do not match the model: .*unexpected \(first: H_level"):
        import_upstream("trm", ckpt, config, tmp_path / "w.pt")


def test_truncated_checkpoint_is_a_clear_error(tmp_path: Path, tiny_checkpoint) -> None:
    path = tiny_checkpoint(tmp_path / "w.pt", DATASET)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ArcpipeError, match=r"w\.pt: cannot read the checkpoint \(truncated or corrupt"):
        load_weights(path, "cpu")


def test_checkpoint_with_other_keys_names_them(tmp_path: Path, tiny_checkpoint) -> None:
    path = tiny_checkpoint(tmp_path / "w.pt", DATASET)
    ckpt = torch.load(path, weights_only=True)
    ckpt["model"]["extra.weight"] = ckpt["model"].pop("lm_head.weight")
    torch.save(ckpt, path)
    with pytest.raises(
        ArcpipeError, match=r"1 missing \(first: lm_head.weight\); 1 unexpected \(first: extra.weight\)"
    ):
        load_weights(path, "cpu")


def test_upstream_file_given_to_load_weights_points_to_import(tmp_path: Path) -> None:
    ckpt, _ = _upstream_files(tmp_path, "trm", compiled=True)
    with pytest.raises(ArcpipeError, match="arcpipe model import"):
        load_weights(ckpt, "cpu")


def test_identifiers_mismatch_is_refused() -> None:
    check_identifiers({"identifiers_sha256": "a" * 64}, "a" * 64, source="w.pt", dataset="d")
    with pytest.raises(ArcpipeError, match="w.pt: trained with identifiers.json sha256 aaaaaaaaaaaa"):
        check_identifiers({"identifiers_sha256": "a" * 64}, "b" * 64, source="w.pt", dataset="d")


def test_cli_lists_presets_with_upstream_parameter_counts(capsys: pytest.CaptureFixture[str]) -> None:
    from arcpipe.cli import main

    assert main(["models"]) == 0
    out = capsys.readouterr().out
    for arch, count in (("trm", "6,829,058"), ("hrm", "27,276,290"), ("urm", "13,663,234")):
        assert any(line.split()[:3] == [arch, "arc", count] for line in out.splitlines()), (arch, out)


def test_cli_import_error_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from arcpipe.cli import main

    _, config = _upstream_files(tmp_path, "trm", compiled=True)
    code = main(["model", "import", "--arch", "trm", str(tmp_path / "missing"), "--config", str(config), "o.pt"])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "missing: no such checkpoint file" in err


def test_config_of_another_arch_names_the_missing_fields(tmp_path: Path) -> None:
    ckpt, config = _upstream_files(tmp_path, "urm", compiled=True)
    with pytest.raises(
        ArcpipeError,
        match=r"all_config.yaml: unsupported arch settings: arch.H_layers, arch.halt_max_steps, .* missing",
    ):
        import_upstream("transformer", ckpt, config, tmp_path / "w.pt")
