"""Weights checkpoints: arcpipe's own format, and import/export of the upstream repositories' checkpoints.

    arcpipe model import --arch trm CKPT --config all_config.yaml OUT.pt [--dataset results/data/arc1]
    arcpipe model import --arch varc checkpoint_best.pt OUT.pt [--dataset results/data/arc1]
    arcpipe model import --arch varc-unet checkpoint_best.pt OUT.pt [--dataset results/data/arc1]
    arcpipe model export OUT.pt step_N

An arcpipe weights checkpoint is one `torch.save` dict, written to a temporary file and renamed:

    {"format": "arcpipe-weights/1", "arcpipe_version", "arch", "arch_config": dict,
     "dataset": {"vocab_size", "seq_len", "num_puzzle_identifiers"}, "identifiers_sha256": str | None,
     "model": state dict with upstream's names (no `_orig_mod.`/`model.`/`inner.` prefix),
     "run_config": dict | None, "config_hash": str | None, "step": int, "epoch": int, ...}

The weights are the *evaluated* ones: EMA parameters (when EMA is on) plus the live puzzle embeddings and initial
states (optim/ema.py). Tensors keep the dtype they were trained in (fp32 parameters; H_init/L_init and URM's conv
in the forward dtype); loading casts them to the model built for the device.

Upstream layouts (docs/reference/upstream-recursive.md 9.1 and 4.1): TRM and HRM save a bare state dict (`step_N`) whose
keys are `_orig_mod.model.inner.<name>` (or `model.inner.<name>` without torch.compile); URM saves a dict with
`model_state_dict`, `step`, optimizer and RNG states (`step_N.pt`). Import keeps tensors bit for bit, so import
followed by export gives back the same tensors under the same keys.

VARC (upstream-varc.md 2.11) saves `{"model_state": {"_orig_mod." + key: tensor}, "config": vars(args), ...}`
(`checkpoint_best.pt` adds `epoch`, `best_eval_accuracy` and optimizer, scheduler and scaler states): the keys are
models/varc.VARCViT's own, so `model` holds them without the prefix, and the config comes from the checkpoint itself
(upstream's argument names are VARCConfig's fields), not from an all_config.yaml. The task-token table's rows give
`num_puzzle_identifiers`. An arcpipe VARC head keeps the ViT as `model.inner`, so `core_of` serves it unchanged.
VARC-Unet's checkpoints have the same layout, with `architecture: unet` and `unet_size` (small, medium, big: the
`varc-unet` presets small, medium, arc) in `config`, and models/varc_unet.VARCUNet's keys (diffusers' names).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import yaml
from torch import Tensor, nn

import arcpipe
from arcpipe.config import ArcpipeError
from arcpipe.config.load import yaml_problem
from arcpipe.models.loopvit import LoopViT
from arcpipe.models.losses import ACTLossHead
from arcpipe.models.registry import (
    CONFIGS,
    VARC_ARCHS,
    arch_config_from_dict,
    build_model,
    default_forward_dtype,
    make_arch_config,
)
from arcpipe.models.varc import EMBED_INIT_STD, VARCViT
from arcpipe.models.varc_unet import VARCUNet
from arcpipe.safeload import torch_load

log = logging.getLogger(__name__)

FORMAT = "arcpipe-weights/1"
UPSTREAM_PREFIX = "_orig_mod.model.inner."  # the default upstream layout (compiled model)
# upstream `arch.name` per arch, for the all_config.yaml written on export
UPSTREAM_NAMES = {
    "trm": "recursive_reasoning.trm@TinyRecursiveReasoningModel_ACTV1",
    "hrm": "hrm.hrm_act_v1@HierarchicalReasoningModel_ACTV1",
    "urm": "urm.urm@URM",
    "transformer": "recursive_reasoning.transformers_baseline@Model_ACTV2",
}
# keys of an upstream `arch:` section that are not model fields (trainer keys URM's yaml puts there, etc.)
_IGNORED_ARCH_KEYS = {
    "name", "loss", "forward_dtype", "causal", "batch_size", "seq_len", "vocab_size", "num_puzzle_identifiers",
    "profile", "eval_interval", "checkpoint_every_eval", "checkpoint_path", "ema", "ema_rate", "loop_deltas",
    "attn_dropout", "mlp_dropout", "act_inference",
}  # fmt: skip
# fields upstream's config classes require (no default there): an all_config.yaml must have them
_REQUIRED = {
    "trm": ("H_cycles", "L_cycles", "L_layers", "hidden_size", "expansion", "num_heads", "pos_encodings",
            "halt_max_steps", "halt_exploration_prob"),
    "hrm": ("H_cycles", "L_cycles", "H_layers", "L_layers", "hidden_size", "expansion", "num_heads",
            "pos_encodings", "halt_max_steps", "halt_exploration_prob"),
    "urm": ("num_layers", "hidden_size", "expansion", "num_heads", "pos_encodings", "loops", "L_cycles", "H_cycles"),
    "transformer": ("H_layers", "hidden_size", "expansion", "num_heads", "pos_encodings", "halt_max_steps",
                    "halt_exploration_prob"),
}  # fmt: skip
VARC_PREFIX = "_orig_mod."  # upstream VARC compiles its model before saving it
VARC_ARGS = ("image_size", "patch_size", "embed_dim", "depth", "num_heads", "mlp_dim", "dropout", "num_colors")
VARC_TASK_TABLE = "task_token_embed.weight"
# upstream's --unet-size -> the varc-unet preset; upstream's other U-Net arguments are image_size and num_colors
UNET_SIZES = {"small": "small", "medium": "medium", "big": "arc"}
UNET_ARGS = ("image_size", "num_colors")
_LOW_PRECISION_KEYS = re.compile(r"(^|\.)(H_init|L_init|init_hidden|dwconv\.weight|dwconv\.bias)$")


def save_weights(
    path: str | Path,
    head: nn.Module,
    *,
    arch: str,
    arch_cfg: Any,
    dataset: Any,
    identifiers_sha256: str | None = None,
    run_config: Mapping[str, Any] | None = None,
    config_hash: str | None = None,
    step: int = 0,
    epoch: int = 0,
    **extra: Any,
) -> None:
    """Write the weights of `head` (an ACTLossHead, compiled or not) with its metadata, atomically.

    `dataset` is a mapping or an object (e.g. data.dataset.Metadata) with vocab_size, seq_len and
    num_puzzle_identifiers.
    """
    state = {k: v.detach().cpu().clone() for k, v in core_of(head).state_dict().items()}
    _write(
        path,
        {
            "format": FORMAT,
            "arcpipe_version": arcpipe.__version__ if hasattr(arcpipe, "__version__") else None,
            "arch": arch,
            "arch_config": arch_cfg.model_dump(mode="json"),
            "dataset": _dataset_dict(dataset),
            "identifiers_sha256": identifiers_sha256,
            "model": state,
            "run_config": dict(run_config) if run_config is not None else None,
            "config_hash": config_hash,
            "step": int(step),
            "epoch": int(epoch),
            **extra,
        },
    )


def read_weights(path: str | Path) -> dict[str, Any]:
    """The checkpoint dict of an arcpipe weights file, checked for format; clear errors for bad files."""
    path = Path(path)
    ckpt = _torch_load(path)
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        found = ckpt.get("format") if isinstance(ckpt, dict) else type(ckpt).__name__
        raise ArcpipeError(
            f"{path}: not an arcpipe weights checkpoint (format {found!r}, expected {FORMAT!r}); "
            "for an upstream checkpoint run `arcpipe model import` first"
        )
    return ckpt


def load_weights(
    path: str | Path,
    device: torch.device | str,
    *,
    forward_dtype: torch.dtype | None = None,
    batch_size: int = 1,
) -> tuple[ACTLossHead, dict[str, Any]]:
    """Build the model a checkpoint describes on `device` and load its weights; returns (head, metadata).

    The head is in eval mode. `batch_size` only sizes the training buffer of the puzzle embedding.
    """
    path = Path(path)
    return model_from_checkpoint(
        read_weights(path), device, source=path, forward_dtype=forward_dtype, batch_size=batch_size
    )


def model_from_checkpoint(
    ckpt: Mapping[str, Any],
    device: torch.device | str,
    *,
    source: str | Path,
    forward_dtype: torch.dtype | None = None,
    batch_size: int = 1,
) -> tuple[ACTLossHead, dict[str, Any]]:
    """`load_weights` for a checkpoint dict already read with `read_weights` (so a caller that needs its metadata
    first reads the file once); `source` names it in errors."""
    cfg = arch_config_from_dict(ckpt["arch_config"])
    head = build_model(cfg, **ckpt["dataset"], batch_size=batch_size, device=device, forward_dtype=forward_dtype)
    load_state(core_of(head), ckpt["model"], source=source)
    head.eval()
    return head, {k: v for k, v in ckpt.items() if k != "model"}


def load_state(core: nn.Module, state: Mapping[str, Tensor], *, source: str | Path) -> None:
    """load_state_dict with an error that names the file and the first missing/unexpected/mis-shaped keys."""
    expected = core.state_dict()
    check_keys(expected, state, source=source)
    core.load_state_dict(dict(state), strict=True)  # copies cast to each tensor's dtype (e.g. bf16 -> fp32 on CPU)


def check_keys(expected: Mapping[str, Tensor], got: Mapping[str, Tensor], *, source: str | Path) -> None:
    missing = [k for k in expected if k not in got]
    unexpected = [k for k in got if k not in expected]
    shapes = [
        f"{k} {list(got[k].shape)} != {list(v.shape)}"
        for k, v in expected.items()
        if k in got and tuple(got[k].shape) != tuple(v.shape)
    ]
    if missing or unexpected or shapes:
        parts = []
        if missing:
            parts.append(f"{len(missing)} missing (first: {', '.join(missing[:5])})")
        if unexpected:
            parts.append(f"{len(unexpected)} unexpected (first: {', '.join(unexpected[:5])})")
        if shapes:
            parts.append(f"{len(shapes)} with other shapes (first: {'; '.join(shapes[:3])})")
        raise ArcpipeError(
            f"{source}: weights do not match the model: {'; '.join(parts)}; check --arch and the config it was "
            "trained with"
        )


def check_identifiers(meta: Mapping[str, Any], dataset_sha256: str, *, source: str | Path, dataset: str | Path) -> None:
    """Refuse a dataset whose identifiers.json differs from the one the checkpoint was trained with."""
    recorded = meta.get("identifiers_sha256")
    if recorded is None:
        log.warning("%s records no identifiers.json hash; cannot check it against %s", source, dataset)
    elif recorded != dataset_sha256:
        raise ArcpipeError(
            f"{source}: trained with identifiers.json sha256 {recorded[:12]}..., but {dataset} has "
            f"{dataset_sha256[:12]}...: puzzle-embedding rows belong to identifiers; use the dataset it was trained on"
        )


def import_upstream(
    arch: str,
    ckpt_path: str | Path,
    config_path: str | Path | None,
    out_path: str | Path,
    dataset_dir: str | Path | None = None,
) -> dict[str, Any]:
    """Convert an upstream checkpoint plus its `all_config.yaml` to an arcpipe weights checkpoint at out_path.

    TRM/HRM: a bare state dict, with or without `_orig_mod.`; URM: the dict form. With `dataset_dir`, the
    checkpoint records that dataset's identifiers.json sha256 and its sizes; a different number of puzzle ids is
    handled as upstream's loader does (every row becomes the mean embedding) with a warning. Returns the metadata.
    VARC: its checkpoint holds its config, so `config_path` is None (see `_import_varc`).
    """
    ckpt_path = Path(ckpt_path)
    if arch not in CONFIGS:
        raise ArcpipeError(f"model import: unknown --arch {arch!r}; choose one of {', '.join(CONFIGS)}")
    if not ckpt_path.is_file():
        raise ArcpipeError(f"{ckpt_path}: no such checkpoint file")
    if arch in VARC_ARCHS:
        if config_path is not None:
            raise ArcpipeError(
                f"model import --arch {arch}: {config_path} not read: an upstream VARC checkpoint holds its own "
                "config; leave out --config"
            )
        return _import_varc(arch, ckpt_path, Path(out_path), dataset_dir)
    if config_path is None:
        raise ArcpipeError(f"model import --arch {arch}: --config is required (the all_config.yaml saved with it)")
    config_path = Path(config_path)
    upstream_cfg = _read_yaml(config_path)
    arch_cfg = _arch_config_from_upstream(arch, upstream_cfg, config_path)

    raw = _torch_load(ckpt_path)
    if isinstance(raw, dict) and "model_state_dict" in raw:
        layout, flat, step = "urm-dict", raw["model_state_dict"], int(raw.get("step", 0))
    elif isinstance(raw, dict) and raw and all(isinstance(v, Tensor) for v in raw.values()):
        match = re.search(r"step_(\d+)", ckpt_path.name)
        layout, flat, step = "state-dict", raw, int(match.group(1)) if match else 0
    else:
        raise ArcpipeError(
            f"{ckpt_path}: not an upstream checkpoint (expected a state dict of tensors, or URM's dict with "
            "model_state_dict)"
        )
    prefix = _common_prefix(flat)
    state = {k.removeprefix(prefix): v for k, v in flat.items()}

    emb = state.get("puzzle_emb.weights")
    vocab = state["embed_tokens.embedding_weight"].shape[0] if "embed_tokens.embedding_weight" in state else 12
    dataset = {"vocab_size": vocab, "seq_len": 900, "num_puzzle_identifiers": emb.shape[0] if emb is not None else 1}
    identifiers = None
    if dataset_dir is not None:
        from arcpipe.data.dataset import identifiers_sha256, load_split

        meta = load_split(dataset_dir, "train").metadata
        dataset = {k: getattr(meta, k) for k in ("vocab_size", "seq_len", "num_puzzle_identifiers")}
        identifiers = identifiers_sha256(dataset_dir)
        if emb is not None and emb.shape[0] != meta.num_puzzle_identifiers:
            log.warning(
                "%s: puzzle_emb.weights has %d rows but %s has %d identifiers: every row starts from the mean "
                "embedding (upstream's rule for fine-tuning on other puzzles)",
                ckpt_path,
                emb.shape[0],
                dataset_dir,
                meta.num_puzzle_identifiers,
            )
            state["puzzle_emb.weights"] = emb.mean(0, keepdim=True).expand(meta.num_puzzle_identifiers, -1).clone()
    else:
        log.info("%s: no --dataset given: seq_len 900 assumed and no identifiers.json hash recorded", ckpt_path)

    expected = core_of(
        build_model(arch_cfg, **dataset, batch_size=1, device="meta", forward_dtype=torch.bfloat16)
    ).state_dict()
    check_keys(expected, state, source=ckpt_path)

    run_config = dict(upstream_cfg)
    accum = int(upstream_cfg.get("grad_accum_steps", 1) or 1)
    if layout == "urm-dict" or arch == "urm":
        # URM's global_batch_size is one micro-batch; arcpipe's always means examples per optimizer step
        run_config["global_batch_size"] = int(upstream_cfg.get("global_batch_size", 0)) * accum
        run_config["upstream_global_batch_size"] = upstream_cfg.get("global_batch_size")
    meta_out = {
        "arch": arch,
        "arch_config": arch_cfg.model_dump(mode="json"),
        "dataset": dataset,
        "identifiers_sha256": identifiers,
        "run_config": run_config,
        "config_hash": None,
        "step": step,
        "epoch": 0,
        "imported_from": {
            "checkpoint": ckpt_path.name,
            "layout": layout,
            "prefix": prefix,
            "forward_dtype": upstream_cfg.get("arch", {}).get("forward_dtype", "bfloat16"),
            "ema": bool(upstream_cfg.get("ema", False)),  # TRM/URM saved the EMA copy when it was on
        },
    }
    _write(out_path, {"format": FORMAT, "arcpipe_version": getattr(arcpipe, "__version__", None), **meta_out,
                      "model": state})  # fmt: skip
    log.info("imported %s (%s, step %d) -> %s", ckpt_path, layout, step, out_path)
    return meta_out


def export_upstream(ckpt: str | Path, out: str | Path) -> Path:
    """Write an arcpipe weights checkpoint in the upstream layout, plus `all_config.yaml` beside it.

    TRM/HRM/transformer: a bare state dict; URM: its dict form. Keys get the prefix the checkpoint was imported
    with (default `_orig_mod.model.inner.`); initial states and URM's conv go back to the upstream forward dtype.
    VARC: upstream's dict (`model_state`, `config`), no all_config.yaml (see `_export_varc`).
    """
    ckpt, out = Path(ckpt), Path(out)
    data = read_weights(ckpt)
    if data["arch"] in VARC_ARCHS:
        return _export_varc(data, ckpt, out)
    imported = data.get("imported_from") or {}
    prefix = imported.get("prefix", UPSTREAM_PREFIX)
    low = getattr(torch, imported.get("forward_dtype", "bfloat16"))
    state = {
        prefix + k: (v.to(low) if _LOW_PRECISION_KEYS.search(k) and v.is_floating_point() else v)
        for k, v in data["model"].items()
    }
    if data["arch"] == "urm":
        payload: Any = {"step": data["step"], "model_state_dict": state, "optimizer_states": []}
    else:
        payload = state
    _write(out, payload)
    config_file = out.parent / "all_config.yaml"
    if not config_file.exists():
        config_file.write_text(yaml.safe_dump(_upstream_config(data), sort_keys=False))
    log.info("exported %s -> %s (%s layout, prefix %r)", ckpt, out, data["arch"], prefix)
    return out


def core_of(head: nn.Module) -> nn.Module:
    """The bare model (upstream's `inner`) inside an ACTLossHead, compiled or not."""
    head = getattr(head, "_orig_mod", head)
    return head.model.inner  # type: ignore[union-attr,return-value]


def _import_varc(arch: str, ckpt_path: Path, out_path: Path, dataset_dir: str | Path | None) -> dict[str, Any]:
    """An upstream VARC checkpoint (ViT or U-Net, `arch`) to arcpipe weights: one `_orig_mod.` stripped from the keys
    (as upstream's loader does), the config from the checkpoint's `config` (upstream's args), num_puzzle_identifiers
    from the task tokens.

    With `dataset_dir` whose number of puzzle identifiers differs from the table's rows, the table starts afresh
    from upstream's init (trunc-normal, std 0.02; seeded, so an import is reproducible), as upstream's test-time
    training does with `--resume-skip-task-token`: task tokens belong to the task ids the model was trained on.
    """
    raw = _torch_load(ckpt_path)
    if not (isinstance(raw, dict) and isinstance(raw.get("model_state"), Mapping)):
        raise ArcpipeError(
            f"{ckpt_path}: not an upstream VARC checkpoint (expected a dict with `model_state` and `config`, as "
            "upstream's offline_train_ARC.py and test_time_train_ARC.py save)"
        )
    args = raw.get("config")
    if not isinstance(args, Mapping):
        raise ArcpipeError(f"{ckpt_path}: no `config` (upstream's arguments) in the checkpoint; cannot size the model")
    if arch == "loopvit":
        arch_cfg = _loopvit_config_from_args(args, ckpt_path)
    else:
        arch_cfg = _varc_config_from_args(arch, args, ckpt_path)
    flat = raw["model_state"]
    prefix = VARC_PREFIX if flat and all(k.startswith(VARC_PREFIX) for k in flat) else ""
    state = {k.removeprefix(prefix): v for k, v in flat.items()}
    table = state.get(VARC_TASK_TABLE)
    if not (isinstance(table, Tensor) and table.ndim == 2):
        table = None  # check_keys names it below
    rows = table.shape[0] if table is not None else 1
    dataset = {"vocab_size": 12, "seq_len": 900, "num_puzzle_identifiers": rows}
    identifiers = None
    if dataset_dir is not None:
        from arcpipe.data.dataset import identifiers_sha256, load_split

        meta = load_split(dataset_dir, "train").metadata
        dataset = {k: getattr(meta, k) for k in ("vocab_size", "seq_len", "num_puzzle_identifiers")}
        identifiers = identifiers_sha256(dataset_dir)
        if table is not None and rows != meta.num_puzzle_identifiers:
            log.warning(
                "%s: %s has %d rows but %s has %d identifiers: the task tokens start afresh from upstream's init "
                "(upstream's --resume-skip-task-token)",
                ckpt_path,
                VARC_TASK_TABLE,
                rows,
                dataset_dir,
                meta.num_puzzle_identifiers,
            )
            fresh = torch.empty(meta.num_puzzle_identifiers, table.shape[1], dtype=table.dtype)
            state[VARC_TASK_TABLE] = nn.init.trunc_normal_(
                fresh, std=EMBED_INIT_STD, generator=torch.Generator().manual_seed(0)
            )
    else:
        log.info("%s: no --dataset given: no identifiers.json hash recorded", ckpt_path)

    with torch.device("meta"):
        backbone = {"varc-unet": VARCUNet, "loopvit": LoopViT}.get(arch, VARCViT)
        expected = backbone(arch_cfg, num_tasks=dataset["num_puzzle_identifiers"]).state_dict()
    check_keys(expected, state, source=ckpt_path)
    meta_out = {
        "arch": arch,
        "arch_config": arch_cfg.model_dump(mode="json"),
        "dataset": dataset,
        "identifiers_sha256": identifiers,
        "run_config": dict(args),
        "config_hash": None,
        "step": 0,
        "epoch": 0,
        "imported_from": {
            "checkpoint": ckpt_path.name,
            "layout": "varc",
            "prefix": prefix,
            # upstream's checkpoint_best.pt: the epoch it was saved at and its accuracy on the selection split
            **{k: raw[k] for k in ("epoch", "best_eval_accuracy") if k in raw},
        },
    }
    _write(out_path, {"format": FORMAT, "arcpipe_version": getattr(arcpipe, "__version__", None), **meta_out,
                      "model": state})  # fmt: skip
    log.info("imported %s (%s, prefix %r) -> %s", ckpt_path, arch, prefix, out_path)
    return meta_out


def _varc_config_from_args(arch: str, args: Mapping[str, Any], source: Path) -> Any:
    """VARCConfig or VARCUNetConfig from upstream's `vars(args)` (utils/args.py: --image-size is `image_size`, and so
    on; the U-Net's widths come from --unet-size alone, as upstream's ARCUNet picks them)."""
    problems = []
    architecture = args.get("architecture", "vit")
    if architecture != ("unet" if arch == "varc-unet" else "vit"):
        other = "varc-unet" if architecture == "unet" else "varc"
        problems.append(f"architecture={architecture!r}: import it with --arch {other}")
    names = UNET_ARGS + ("unet_size",) if arch == "varc-unet" else VARC_ARGS
    if arch == "varc-unet" and "unet_size" in args and args["unet_size"] not in UNET_SIZES:
        problems.append(f"unet_size={args['unet_size']!r}, not one of {', '.join(UNET_SIZES)}")
    missing = [k for k in names if k not in args]
    if missing:
        problems.append(f"{', '.join(missing)} missing from its config")
    if args.get("num_task_tokens", 1) != 1:
        # upstream's get_model_arch never passes it on, so its models always have one; a table says otherwise
        log.warning("%s: num_task_tokens=%s ignored (upstream builds one task token)", source, args["num_task_tokens"])
    if problems:
        raise ArcpipeError(f"{source}: unsupported VARC checkpoint: {'; '.join(problems)}")
    try:
        if arch == "varc-unet":
            return make_arch_config(arch, UNET_SIZES[args["unet_size"]], {k: args[k] for k in UNET_ARGS})
        return make_arch_config("varc", "arc", {k: args[k] for k in VARC_ARGS})
    except ValueError as err:
        raise ArcpipeError(f"{source}: {err}") from None


def _export_varc(data: Mapping[str, Any], ckpt: Path, out: Path) -> Path:
    """upstream VARC's checkpoint layout: `model_state` under the prefix it was imported with (default
    `_orig_mod.`, as upstream's compiled models save), `config` = upstream's arguments (those it was imported with,
    if it was, with the model's own always from `arch_config`), and `epoch`/`best_eval_accuracy` when imported."""
    imported = data.get("imported_from") or {}
    from_upstream = imported.get("layout") == "varc"
    prefix = imported.get("prefix", VARC_PREFIX) if from_upstream else VARC_PREFIX
    args = dict(data.get("run_config") or {}) if from_upstream else {}
    cfg = data["arch_config"]
    if data["arch"] == "varc-unet":
        args.update(architecture="unet", unet_size=_unet_size(cfg, ckpt), **{k: cfg[k] for k in UNET_ARGS})
    elif data["arch"] == "loopvit":
        args.update(_loopvit_args(cfg))
    else:
        args.update(architecture="vit", **{k: cfg[k] for k in VARC_ARGS})
    payload: dict[str, Any] = {"model_state": {prefix + k: v for k, v in data["model"].items()}, "config": args}
    payload.update({k: imported[k] for k in ("epoch", "best_eval_accuracy") if k in imported})
    _write(out, payload)
    log.info("exported %s -> %s (varc layout, prefix %r)", ckpt, out, prefix)
    return out


def _unet_size(cfg: Mapping[str, Any], source: Path) -> str:
    """Upstream's --unet-size of a varc-unet config: upstream builds only its three sizes (any image_size)."""
    for size, preset in UNET_SIZES.items():
        widths = make_arch_config("varc-unet", preset, {"image_size": cfg["image_size"]}).model_dump()
        if widths == dict(cfg):
            return size
    raise ArcpipeError(
        f"{source}: this varc-unet config is none of upstream's sizes ({', '.join(UNET_SIZES)}: presets "
        f"{', '.join(UNET_SIZES.values())}); upstream's ARCUNet could not build it"
    )


def _arch_config_from_upstream(arch: str, cfg: Mapping[str, Any], source: Path) -> Any:
    section = cfg.get("arch")
    if not isinstance(section, Mapping):
        raise ArcpipeError(f"{source}: no `arch:` section; pass the all_config.yaml saved next to the checkpoint")
    fields = set(CONFIGS[arch].model_fields) - {"name"}
    problems = []
    missing = [k for k in _REQUIRED[arch] if k not in section]
    if missing:
        problems.append(f"arch.{', arch.'.join(missing)} missing (is this the config of a {arch} run?)")
    if section.get("act_inference"):
        problems.append("act_inference=True (arcpipe always runs the full halt_max_steps at evaluation)")
    for key in ("attn_dropout", "mlp_dropout"):
        if section.get(key):
            problems.append(f"{key}={section[key]} (unused upstream and not supported)")
    if problems:
        raise ArcpipeError(f"{source}: unsupported arch settings: {'; '.join(problems)}")
    values = {k: v for k, v in section.items() if k in fields}
    dropped = sorted(set(section) - fields - _IGNORED_ARCH_KEYS)
    if dropped:
        log.warning("%s: arch keys that are not %s fields are ignored: %s", source, arch, ", ".join(dropped))
    loss = section.get("loss") or {}
    if isinstance(loss, Mapping) and "loss_type" in loss:
        values["loss_type"] = loss["loss_type"]
    values.setdefault("puzzle_emb_ndim", 0)  # upstream's class default (its yamls always set it)
    try:
        # required upstream fields are in the file; the `arc` preset only fills fields with upstream class defaults
        return make_arch_config(arch, "arc", values)
    except ValueError as err:
        raise ArcpipeError(f"{source}: {err}") from None


def _upstream_config(data: Mapping[str, Any]) -> dict[str, Any]:
    arch_cfg = {k: v for k, v in data["arch_config"].items() if k not in ("name", "loss_type")}
    forward_dtype = (data.get("imported_from") or {}).get("forward_dtype", "bfloat16")
    arch_section = {
        "name": UPSTREAM_NAMES[data["arch"]],
        "loss": {"name": "losses@ACTLossHead", "loss_type": data["arch_config"]["loss_type"]},
        **arch_cfg,
    }
    if data["arch"] != "urm":
        arch_section["forward_dtype"] = forward_dtype
    run = dict(data.get("run_config") or {})
    out = {k: v for k, v in run.items() if k not in ("arch", "upstream_global_batch_size")}
    if "upstream_global_batch_size" in run:
        out["global_batch_size"] = run["upstream_global_batch_size"]
    return {"arch": arch_section, **out}


def _common_prefix(state: Mapping[str, Tensor]) -> str:
    """The wrapper prefix of upstream keys: `_orig_mod.`, then `model.` and `inner.` where every key has it."""
    prefix = ""
    for part in ("_orig_mod.", "model.", "inner."):
        if state and all(k.startswith(prefix + part) for k in state):
            prefix += part
    return prefix


def _dataset_dict(dataset: Any) -> dict[str, int]:
    keys = ("vocab_size", "seq_len", "num_puzzle_identifiers")
    if isinstance(dataset, Mapping):
        return {k: int(dataset[k]) for k in keys}
    return {k: int(getattr(dataset, k)) for k in keys}


def _torch_load(path: Path) -> Any:
    if not path.is_file():
        raise ArcpipeError(f"{path}: no such checkpoint file")
    return torch_load(path, what="checkpoint", fix="copy it again or rerun the step that wrote it")


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as err:
        raise ArcpipeError(f"{path}: cannot read config ({err.strerror})") from None
    except yaml.YAMLError as err:
        raise ArcpipeError(f"{path}: not valid YAML ({yaml_problem(err)})") from None
    if not isinstance(data, dict):
        raise ArcpipeError(f"{path}: expected a mapping (upstream's all_config.yaml)")
    return data


def _write(path: str | Path, payload: Any) -> None:
    """torch.save to a temporary file in the same directory, then rename: readers never see a partial file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        torch.save(payload, tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


__all__ = [
    "FORMAT",
    "check_identifiers",
    "core_of",
    "default_forward_dtype",
    "export_upstream",
    "import_upstream",
    "load_weights",
    "read_weights",
    "save_weights",
]


# --- LoopViT (WenjieShu/LoopViT): its checkpoints are VARC's layout (`model_state`, `config` = the trainer's
# arguments), read and written by _import_varc and _export_varc; only the arguments differ ---------------------------

# upstream's --architecture and arcpipe's `block`
LOOPVIT_BLOCKS = {"loop_vit": "vit", "loop_vit1": "hybrid"}
# the arguments that shape the model and its loop, under the same names in both
LOOPVIT_ARGS = (
    "image_size", "patch_size", "embed_dim", "loop_core_depth", "max_loop_steps", "min_loop_steps", "num_heads",
    "mlp_dim", "dropout", "num_colors",
)  # fmt: skip
# the loss and exit settings, with upstream's offline trainer defaults where a checkpoint (a test-time one) lacks them
LOOPVIT_TRAIN_ARGS = {
    "exit_gate_threshold": 0.6,
    "gate_entropy_weight": 1e-3,
    "loop_penalty_weight": 5e-4,
    "train_dynamic_exit": False,
    "eval_dynamic_exit": False,
}


def _loopvit_config_from_args(args: Mapping[str, Any], source: Path) -> Any:
    """LoopViTConfig from upstream's `vars(args)`: --architecture loop_vit / loop_vit1 is `block` vit / hybrid,
    --disable-exit-gate and --no-step-embedding are `exit_gate` and `step_embedding` inverted."""
    problems = []
    architecture = args.get("architecture", "loop_vit")
    if architecture not in LOOPVIT_BLOCKS:
        problems.append(f"architecture={architecture!r}, not one of {', '.join(LOOPVIT_BLOCKS)}")
    missing = [k for k in LOOPVIT_ARGS if k not in args]
    if missing:
        problems.append(f"{', '.join(missing)} missing from its config")
    if args.get("num_task_tokens", 1) != 1:
        problems.append(f"num_task_tokens={args['num_task_tokens']} (arcpipe's LoopViT has one task token)")
    if problems:
        raise ArcpipeError(f"{source}: unsupported LoopViT checkpoint: {'; '.join(problems)}")
    defaulted = sorted(set(LOOPVIT_TRAIN_ARGS) - set(args))
    if defaulted:
        log.info("%s: %s not in its config: upstream's defaults", source, ", ".join(defaulted))
    fields = {k: args[k] for k in LOOPVIT_ARGS}
    fields.update({k: args.get(k, v) for k, v in LOOPVIT_TRAIN_ARGS.items()})
    fields.update(
        block=LOOPVIT_BLOCKS[architecture],
        exit_gate=not args.get("disable_exit_gate", False),
        step_embedding=not args.get("no_step_embedding", False),
    )
    try:
        return make_arch_config("loopvit", "arc", fields)
    except ValueError as err:
        raise ArcpipeError(f"{source}: {err}") from None


def _loopvit_args(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """Upstream's arguments of a LoopViT config (what `_loopvit_config_from_args` reads back)."""
    blocks = {v: k for k, v in LOOPVIT_BLOCKS.items()}
    return {
        "architecture": blocks[cfg["block"]],
        **{k: cfg[k] for k in LOOPVIT_ARGS},
        **{k: cfg[k] for k in LOOPVIT_TRAIN_ARGS},
        "num_task_tokens": 1,
        "disable_exit_gate": not cfg["exit_gate"],
        "no_step_embedding": not cfg["step_embedding"],
    }
