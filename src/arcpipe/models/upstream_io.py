"""Import and export of the upstream repositories' checkpoints, into and out of arcpipe's own format (models/io.py).

    arcpipe model import --arch trm CKPT --config all_config.yaml OUT.pt [--dataset results/data/arc1]
    arcpipe model import --arch varc checkpoint_best.pt OUT.pt [--dataset results/data/arc1]
    arcpipe model import --arch varc-unet checkpoint_best.pt OUT.pt [--dataset results/data/arc1]
    arcpipe model import --arch loopvit checkpoint_best.pt OUT.pt [--dataset results/data/arc1]
    arcpipe model export OUT.pt step_N

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
LoopViT's (WenjieShu/LoopViT) are VARC's layout too, with its trainer's arguments (docs/loopvit.md).
"""

from __future__ import annotations

import logging
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
from arcpipe.models.io import (
    FORMAT,
    check_keys,
    core_of,
    read_weights,
    torch_load_checkpoint,
    write_checkpoint,
)
from arcpipe.models.loopvit import LoopViT
from arcpipe.models.registry import CONFIGS, VARC_ARCHS, build_model, make_arch_config
from arcpipe.models.varc import EMBED_INIT_STD, VARCViT
from arcpipe.models.varc_unet import VARCUNet

log = logging.getLogger(__name__)

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

    raw = torch_load_checkpoint(ckpt_path)
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
    version = getattr(arcpipe, "__version__", None)
    write_checkpoint(out_path, {"format": FORMAT, "arcpipe_version": version, **meta_out, "model": state})
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
    write_checkpoint(out, payload)
    config_file = out.parent / "all_config.yaml"
    if not config_file.exists():
        config_file.write_text(yaml.safe_dump(_upstream_config(data), sort_keys=False))
    log.info("exported %s -> %s (%s layout, prefix %r)", ckpt, out, data["arch"], prefix)
    return out


def _import_varc(arch: str, ckpt_path: Path, out_path: Path, dataset_dir: str | Path | None) -> dict[str, Any]:
    """An upstream VARC checkpoint (ViT or U-Net, `arch`) to arcpipe weights: one `_orig_mod.` stripped from the keys
    (as upstream's loader does), the config from the checkpoint's `config` (upstream's args), num_puzzle_identifiers
    from the task tokens.

    With `dataset_dir` whose number of puzzle identifiers differs from the table's rows, the table starts afresh
    from upstream's init (trunc-normal, std 0.02; seeded, so an import is reproducible), as upstream's test-time
    training does with `--resume-skip-task-token`: task tokens belong to the task ids the model was trained on.
    """
    raw = torch_load_checkpoint(ckpt_path)
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
    version = getattr(arcpipe, "__version__", None)
    write_checkpoint(out_path, {"format": FORMAT, "arcpipe_version": version, **meta_out, "model": state})
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
    write_checkpoint(out, payload)
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


__all__ = ["export_upstream", "import_upstream"]
