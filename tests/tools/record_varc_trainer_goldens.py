"""Record tests/data/trainer/varc_offline.pt and varc_ttt.pt (VARC-ViT) and varc_unet_offline.pt and
varc_unet_ttt.pt (VARC-Unet), the goldens of tests/unit/train/test_varc_trainer_parity.py, by running upstream VARC's
own trainers (`offline_train_ARC.py`, `test_time_train_ARC.py`) on a CPU.

    PYTHONPATH=TIMM_DIR python tests/tools/record_varc_trainer_goldens.py --varc VARC_DIR [--arch vit unet] \
        [--output tests/data/trainer]

VARC_DIR is a tree of lillian039/VARC at the commit in UPSTREAM (see tests/tools/record_varc_goldens.py, which also
says how to put timm beside the repository). Upstream's files are imported from there at run time, never copied
here; VARC picks its device itself (the CPU here), so the tree is used as it is (no tests/tools/upstream_cpu.py copy).

What runs is upstream's `train(args)` of each script, with upstream's data loader, optimizer, scheduler, gradient
clipping and loops, on a small synthetic dataset written in upstream's layout into a scratch folder. Changed, and
only this, through the modules' own names (never their files):

* the model is built in float64 (`utils.load_model.get_model_arch` wrapped: `.double()` on what it returns, before
  the optimizer is made): on a CPU upstream's autocast and GradScaler are off, so this is its full-precision path,
  one precision higher. No autocast anywhere, stated in the golden.
* `--no-compile` (the function is the same; compiling on a CPU takes minutes), `--dropout 0` (no masks to replay),
  `--eval-split ''` offline (the per-epoch validation changes no weight), and test-time training's answering
  (`generate_predictions`) is skipped: the golden is the fitted model.
* observers only: the collate function (each row's dataset index, task, scale and offset, and a digest of the canvas
  upstream built), an optimizer step pre-hook (the rate of every step), `F.cross_entropy` (each step's loss) and
  `clip_grad_norm_` (the norm before clipping).

The offline run (`offline_train_ARC.py`): 3 training tasks and RE-ARC pairs for 2 of them (sharing their task's
token), 14 examples in batches of 4 (the last of each epoch 2: upstream keeps it), 30 epochs = 120 optimizer steps,
the per-epoch warm-up (min(30 // 5, 10) = 6 epochs) and cosine, clipping at 0.3 (see OFFLINE). The test-time training
(`test_time_train_ARC.py`) of one task: 4 view files of 3 demonstrations each, batches of 8, epochs 0..60 = 122
steps, from the offline run's final weights with `--resume-skip-task-token` (a fresh task-token table, one row per
view file, drawn by upstream's constructor) and a fresh optimizer.

The goldens hold the examples, every step's rows and placements, losses, rates and norms, the initial and final
weights (upstream's keys) and the final AdamW state, all float64.

VARC-Unet (`--architecture unet`): the same two runs, the same data and trainer flags, with upstream's ARCUNet at
`--unet-size small` (one ResNet block per resolution, no mid block) on a 16 x 16 canvas (grids up to 7 x 7, scales
1 and 2), and, as tests/tools/record_varc_unet_goldens.py does, only the widths of its UNet2DConditionModel call
scaled down (UNET_WIDTHS, intercepted at the call; every other argument upstream's own) and its task-token table
rebuilt at that width (trunc-normal 0.02, upstream's init): 5,812 parameters, so that a replay takes seconds and the
goldens stay small. The rate is 1e-4 (upstream's U-Net recipe: 3e-4; at 3e-4 this small U-Net amplifies the last
bit of a difference in rounding to 8e-4 of the loss within 120 steps, see the test) and the clip norms 1.2 and 0.7
(UNET_OFFLINE, UNET_TTT). Its initial weights are stored in float32 (upstream builds the model in float32; `.double()`
converts them exactly) and the test-time run's starting weights as the offline golden's final ones (checked here)
with only the fresh task-token table stored.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib
import importlib.util
import json
import random
import sys
import tempfile
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from record_varc_goldens import _upstream_tree  # noqa: E402  (timm's PatchEmbed and upstream's packages)

UPSTREAM = ("lillian039/VARC", "537b01ed95944cfb080455b795f4888db8d0484b")
# upstream's CLI arguments of the tiny model (arcpipe's VARCConfig names): a 32 x 32 canvas (arcpipe's smallest)
# of 4 x 4 patches, 64 patch tokens, two heads of 8 channels
MODEL = dict(image_size=32, patch_size=4, embed_dim=16, depth=2, num_heads=2, mlp_dim=12, dropout=0.0, num_colors=12)
# the gradient norms of this model run from about 0.15 to 0.8: clipped at 0.3 (upstream's flag; its default is 1)
# about half of the steps clip, so a change of the clipping shows
OFFLINE = dict(batch_size=4, epochs=30, learning_rate=3e-3, max_grad_norm=0.3)
TTT = dict(batch_size=8, epochs=60, learning_rate=3e-3, max_grad_norm=0.3)
DATA_SEED = 7
TASKS = ["0a1b2c3d", "4e5f6a7b", "8c9d0e1f"]  # offline training tasks, sorted (upstream's token order)
DEMOS = [3, 3, 4]  # demonstrations per task; each task has one test pair too
RE_ARC = {"0a1b2c3d": 2, "8c9d0e1f": 2}  # extra pairs, read from <re_arc>/tasks/<task>.json
TTT_TASK = "5a6b7c8d"
TTT_VIEWS = ["", "_rotate_90_augmented", "_flip_0_augmented", "_rotate_90_perm0_augmented"]
TTT_DEMOS = 3
MAX_BYTES = 1_000_000
TABLE = "task_token_embed.weight"
# VARC-Unet: upstream's flags (--architecture unet --unet-size small), and the widths its UNet2DConditionModel call
# is given instead of small's 80/160/160, 160, 4 heads, 16 groups: channels 2, 4, 4, one head, one group (two groups
# of one channel each make a per-channel bias before a GroupNorm's gradient pure rounding noise, which AdamW turns
# into full-size steps)
UNET_MODEL = dict(architecture="unet", unet_size="small", image_size=16, dropout=0.0, num_colors=12)
UNET_EMBED_DIM = 4
UNET_WIDTHS = dict(
    block_out_channels=(UNET_EMBED_DIM // 2, UNET_EMBED_DIM, UNET_EMBED_DIM),
    cross_attention_dim=UNET_EMBED_DIM,
    attention_head_dim=1,
    norm_num_groups=1,
)
# the same model as arcpipe's config (VARCUNetConfig's fields)
UNET_CONFIG = dict(image_size=16, embed_dim=UNET_EMBED_DIM, layers_per_block=1, mid_block=False, num_heads=1,
                   norm_num_groups=1)  # fmt: skip
# the gradient norms of this model at 3e-4 run from about 0.5 to 12 offline (median 1.2) and 0.4 to 2.5 in
# test-time training (median 0.7): clipped there; at 1e-4 (see the module doc) most steps clip
UNET_OFFLINE = dict(OFFLINE, learning_rate=1e-4, max_grad_norm=1.2)
UNET_TTT = dict(TTT, learning_rate=1e-4, max_grad_norm=0.7)
ARCHS = {
    "vit": dict(model=MODEL, offline=OFFLINE, ttt=TTT, files=("varc_offline.pt", "varc_ttt.pt")),
    "unet": dict(model=UNET_MODEL, offline=UNET_OFFLINE, ttt=UNET_TTT,
                 files=("varc_unet_offline.pt", "varc_unet_ttt.pt")),
}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--varc", type=Path, required=True, help=f"{UPSTREAM[0]} at {UPSTREAM[1][:7]}")
    parser.add_argument("--output", type=Path, default=Path(__file__).parents[1] / "data" / "trainer")
    parser.add_argument("--arch", nargs="+", choices=list(ARCHS), default=list(ARCHS))
    args = parser.parse_args()
    torch.set_num_threads(1)
    args.output.mkdir(parents=True, exist_ok=True)
    for arch in args.arch:
        spec = ARCHS[arch]
        with tempfile.TemporaryDirectory() as scratch:
            offline = record_offline(args.varc, Path(scratch), arch)
            _save(_packed(offline) if arch == "unet" else offline, args.output / spec["files"][0])
            ttt = record_ttt(args.varc, Path(scratch), offline["final"], arch)
            if arch == "unet":  # its start is the offline golden's end, but for the fresh task tokens
                assert ttt["init"].keys() == offline["final"].keys()
                assert all(torch.equal(ttt["init"][k], v) for k, v in offline["final"].items() if k != TABLE)
                ttt["init"] = _float32({TABLE: ttt["init"][TABLE]})  # drawn by upstream's constructor
                ttt["init_from"] = f"{spec['files'][0]} final"
            _save(_packed(ttt) if arch == "unet" else ttt, args.output / spec["files"][1])


def record_offline(checkout: Path, scratch: Path, arch: str = "vit") -> dict[str, Any]:
    """Upstream's offline_train_ARC.train on the synthetic training tasks; the golden."""
    spec = ARCHS[arch]
    rng = random.Random(DATA_SEED)
    root = scratch / "ARC"
    (root / "data" / "training").mkdir(parents=True)
    (scratch / "re_arc" / "tasks").mkdir(parents=True)
    for task, demos in zip(TASKS, DEMOS, strict=True):
        pairs = [_pair(rng) for _ in range(demos + 1)]
        (root / "data" / "training" / f"{task}.json").write_text(json.dumps({"train": pairs[:-1], "test": pairs[-1:]}))
        if task in RE_ARC:
            extra = [_pair(rng) for _ in range(RE_ARC[task])]
            (scratch / "re_arc" / "tasks" / f"{task}.json").write_text(json.dumps(extra))
    argv = _argv(spec["model"], spec["offline"]) + [
        "--data-root", str(root), "--train-split", "training", "--eval-split", "",
        "--include-rearc", "--rearc-path", str(scratch / "re_arc"),
    ]  # fmt: skip
    with _upstream(checkout) as (sources, load_model):
        module = _load(checkout / "offline_train_ARC.py", "offline_train_ARC")
        run = _Recorder(module, load_model, arch)
        module.load_models = run.wrap_load(module.load_models)
        with run.observing():
            module.train(_parse(argv))
    return run.golden("offline_train_ARC.py", spec["offline"], sources)


def record_ttt(checkout: Path, scratch: Path, start: dict[str, torch.Tensor], arch: str = "vit") -> dict[str, Any]:
    """Upstream's test_time_train_ARC.train on one task's view files, from `start` (the offline run's final
    weights, saved as upstream's checkpoint); the golden."""
    spec = ARCHS[arch]
    rng = random.Random(DATA_SEED + 1)
    base = [_pair(rng) for _ in range(TTT_DEMOS + 1)]
    perm = [0, *rng.sample(range(1, 10), 9)]  # colour 0 kept, as upstream's permutations
    views = {
        "": lambda g: g,
        "_rotate_90_augmented": lambda g: np.rot90(g),
        "_flip_0_augmented": lambda g: np.flipud(g),
        "_rotate_90_perm0_augmented": lambda g: np.asarray(perm)[np.rot90(g)],
    }
    folder = scratch / "ARC" / "data" / "ttt" / TTT_TASK
    folder.mkdir(parents=True)
    for suffix in TTT_VIEWS:
        f = views[suffix]
        pairs = [{k: np.asarray(f(np.asarray(v))).tolist() for k, v in p.items()} for p in base]
        (folder / f"{TTT_TASK}{suffix}.json").write_text(json.dumps({"train": pairs[:-1], "test": pairs[-1:]}))
    checkpoint = scratch / "offline.pt"
    torch.save({"model_state": start}, checkpoint)
    argv = _argv(spec["model"], spec["ttt"]) + [
        "--data-root", str(scratch / "ARC"), "--train-split", f"ttt/{TTT_TASK}", "--eval-split", "",
        "--resume-checkpoint", str(checkpoint), "--resume-skip-task-token", "--ttt-num-each", "1",
        "--eval-save-name", "unused",
    ]  # fmt: skip
    with _upstream(checkout) as (sources, load_model):
        module = _load(checkout / "test_time_train_ARC.py", "test_time_train_ARC")
        run = _Recorder(module, load_model, arch)
        module.load_optimizer = run.wrap_optimizer(module.load_optimizer)
        module.generate_predictions = lambda *a, **k: None  # the answers are not part of this golden
        module.args = _parse(argv)  # ttt_once reads the script's global `args`, as under __main__
        with run.observing():
            module.train(module.args)
    return run.golden("test_time_train_ARC.py", spec["ttt"], sources)


class _Recorder:
    """Wraps and observes one upstream run: its model, optimizer and every step."""

    def __init__(self, module: ModuleType, load_model: ModuleType, arch: str = "vit") -> None:
        self.module, self.load_model, self.arch = module, load_model, arch
        self.unet_kwargs: dict[str, Any] = {}
        self.model: torch.nn.Module | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.init: dict[str, torch.Tensor] = {}
        self.dataset: Any = None
        self.steps: list[dict[str, Any]] = []  # one per optimizer step
        self.pending_rows: list[dict[str, Any]] = []
        self.pending_digest = ""
        get_model_arch = load_model.get_model_arch

        def double_model(args: Any, train_dataset: Any) -> torch.nn.Module:
            self.dataset = train_dataset
            assert args.architecture == self.arch
            model = get_model_arch(args, train_dataset)
            if self.arch == "unet":  # upstream's table is `small`'s 160 wide: the only width ARCUNet sets itself
                model.task_token_embed = torch.nn.Embedding(train_dataset.num_tasks, UNET_EMBED_DIM)
                torch.nn.init.trunc_normal_(model.task_token_embed.weight, std=0.02)
            return model.double()

        load_model.get_model_arch = double_model
        if arch == "unet":
            arc_unet = importlib.import_module("src.ARC_UNet")
            unet = arc_unet.UNet2DConditionModel

            def narrow_unet(**kwargs: Any) -> torch.nn.Module:
                self.unet_kwargs = {**kwargs, **UNET_WIDTHS}
                return unet(**self.unet_kwargs)

            arc_unet.UNet2DConditionModel = narrow_unet

    def wrap_load(self, load_models: Any) -> Any:
        def wrapped(**kwargs: Any) -> Any:
            out = load_models(**kwargs)
            model, _, optimizer = out[:3]
            self._start(model, optimizer)
            return out

        return wrapped

    def wrap_optimizer(self, load_optimizer: Any) -> Any:
        def wrapped(**kwargs: Any) -> Any:
            out = load_optimizer(**kwargs)
            self._start(kwargs["model"], out[0])
            return out

        return wrapped

    def _start(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        self.model, self.optimizer = model, optimizer
        self.init = {k: v.detach().clone() for k, v in model.state_dict().items()}
        names = {id(p): n for n, p in model.named_parameters()}
        self.param_names = [names[id(p)] for p in optimizer.param_groups[0]["params"]]

        def before_step(opt: torch.optim.Optimizer, *_: Any) -> None:
            self.steps[-1]["lr"] = opt.param_groups[0]["lr"]

        optimizer.register_step_pre_hook(before_step)

    @contextlib.contextmanager
    def observing(self) -> Iterator[None]:
        loader = importlib.import_module("src.ARC_loader")
        collate, getitem = loader.collate_fn, loader.ARCDataset.__getitem__
        cross_entropy, clip = self.module.F.cross_entropy, torch.nn.utils.clip_grad_norm_

        def observed_getitem(dataset: Any, idx: int) -> dict[str, Any]:
            item = getitem(dataset, idx)
            self.pending_rows.append(
                {"sample": int(idx), "task": int(item["task_id"]), "scale": int(item["scale_factor"]),
                 "x": int(item["offset"][0]), "y": int(item["offset"][1])}
            )  # fmt: skip
            return item

        def observed_collate(batch: list[dict[str, Any]]) -> dict[str, Any]:
            out = collate(batch)
            digest = hashlib.sha256()
            for key in ("inputs", "attention_mask", "targets"):
                digest.update(out[key].to(torch.int64).numpy().tobytes())
            self.steps.append({"rows": self.pending_rows, "canvas_sha256": digest.hexdigest()})
            self.pending_rows = []
            return out

        def observed_cross_entropy(*args: Any, **kwargs: Any) -> torch.Tensor:
            loss = cross_entropy(*args, **kwargs)
            assert "reduction" not in kwargs  # the training loss (validation, reduction="sum", is off)
            self.steps[-1]["loss"] = loss.item()
            return loss

        def observed_clip(parameters: Any, max_norm: float, *args: Any, **kwargs: Any) -> torch.Tensor:
            norm = clip(parameters, max_norm, *args, **kwargs)
            self.steps[-1]["grad_norm"] = norm.item()
            return norm

        loader.collate_fn = observed_collate  # build_dataloaders reads the module's name when it makes the loaders
        loader.ARCDataset.__getitem__ = observed_getitem
        self.module.F = SimpleNamespace(cross_entropy=observed_cross_entropy)
        torch.nn.utils.clip_grad_norm_ = observed_clip
        try:
            yield
        finally:
            loader.collate_fn, loader.ARCDataset.__getitem__ = collate, getitem
            torch.nn.utils.clip_grad_norm_ = clip

    def golden(self, script: str, recipe: dict[str, Any], sources: dict[str, str]) -> dict[str, Any]:
        assert self.model is not None and self.optimizer is not None
        state = self.optimizer.state
        params = self.optimizer.param_groups[0]["params"]
        names = self.param_names
        samples = [
            {"task": s["task_name"], "task_index": s["task_index"], "input": s["example"]["input"],
             "output": s["example"]["output"]}
            for s in self.dataset.samples
        ]  # fmt: skip
        steps = self.steps
        assert all({"lr", "loss", "grad_norm"} <= set(s) for s in steps), "a batch without an optimizer step"
        norms = [s["grad_norm"] for s in steps]
        group = self.optimizer.param_groups[0]
        init = self.init
        if self.arch == "unet" and script == "offline_train_ARC.py":  # built in float32 by upstream
            init = _float32(init)
        unet = {}
        if self.arch == "unet":
            unet = {"unet_kwargs": self.unet_kwargs, "arch_config": UNET_CONFIG}
        return {
            "upstream": {
                "repo": UPSTREAM[0],
                "commit": UPSTREAM[1],
                "script": script,
                "sources_sha256": dict(sorted(sources.items())),
                "timm": version("timm"),
                **({"diffusers": version("diffusers")} if self.arch == "unet" else {}),
                "changes": "float64 model (get_model_arch(...).double()), no autocast or GradScaler (CPU), "
                "--no-compile, --dropout 0, no validation or answering; observers on the loader, the optimizer, "
                "cross_entropy and clip_grad_norm_"
                + (
                    f"; UNet2DConditionModel widths {UNET_WIDTHS}, task_token_embed rebuilt {UNET_EMBED_DIM} wide"
                    if self.arch == "unet"
                    else ""
                ),
            },
            "torch_version": str(torch.__version__),
            "model": ARCHS[self.arch]["model"],
            **unet,
            "recipe": recipe,
            "adamw": {k: group[k] for k in ("betas", "eps", "weight_decay", "amsgrad", "maximize")},
            "task_lookup": dict(self.dataset.task_lookup),
            "samples": samples,
            "steps": steps,
            "steps_clipped": sum(n > recipe["max_grad_norm"] for n in norms),
            "init": init,
            "final": {k: v.detach().clone() for k, v in self.model.state_dict().items()},
            "adamw_state": {
                name: {k: (v.clone() if torch.is_tensor(v) else v) for k, v in state[p].items()}
                for name, p in zip(names, params, strict=True)
            },
        }


@contextlib.contextmanager
def _upstream(checkout: Path) -> Iterator[tuple[dict[str, str], ModuleType]]:
    """Upstream's packages importable (and timm's PatchEmbed); its script's directory first on sys.path."""
    # utils.load_model imports upstream's U-Net, so diffusers: loaded first, while `timm` is still the real package
    # (diffusers looks it up by its spec, which the bare module standing in for it has not)
    importlib.import_module("diffusers").UNet2DConditionModel  # noqa: B018  (a lazy attribute: this loads it)
    with _upstream_tree(checkout) as sources:
        sys.path.insert(0, str(checkout.resolve()))
        try:
            yield sources, importlib.import_module("utils.load_model")
        finally:
            sys.path.remove(str(checkout.resolve()))


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _argv(model: dict[str, Any], recipe: dict[str, Any]) -> list[str]:
    args = {**model, **recipe, "weight_decay": 0.0, "lr_scheduler": "cosine", "seed": 42}
    return [*(x for k, v in args.items() for x in (f"--{k.replace('_', '-')}", str(v))), "--no-compile"]


def _parse(argv: list[str]) -> argparse.Namespace:
    parse_args = importlib.import_module("utils.args").parse_args
    saved = sys.argv
    sys.argv = ["upstream", *argv]
    try:
        return parse_args()
    finally:
        sys.argv = saved


def _packed(golden: dict[str, Any]) -> dict[str, Any]:
    """The golden with each dict of tensors over every parameter (init, final, each AdamW state field) as one flat
    tensor in the order and shapes of `layout` (AdamW's step counts: one entry each), since a file of hundreds of
    small tensors is mostly their headers; a dict of fewer tensors (the test-time run's init) stays as it is."""
    final = golden["final"]
    layout = {"names": list(final), "shapes": [list(v.shape) for v in final.values()]}

    def pack(tensors: dict[str, torch.Tensor]) -> torch.Tensor | dict[str, torch.Tensor]:
        if list(tensors) != layout["names"]:
            return tensors
        if all(v.dim() == 0 for v in tensors.values()):  # AdamW's step count of each parameter
            return torch.stack(list(tensors.values()))
        assert [list(v.shape) for v in tensors.values()] == layout["shapes"]
        return torch.cat([v.reshape(-1) for v in tensors.values()])

    state = golden["adamw_state"]
    assert list(state) == layout["names"]  # the optimizer's parameters are the state dict's, in its order
    fields = next(iter(state.values())).keys()
    assert all(s.keys() == fields and all(torch.is_tensor(v) for v in s.values()) for s in state.values())
    return {
        **golden,
        "layout": layout,
        "init": pack(golden["init"]),
        "final": pack(final),
        "adamw_state": {k: pack({name: s[k] for name, s in state.items()}) for k in fields},
    }


def _float32(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Float64 tensors that float32 holds exactly (upstream's float32 init, `.double()`'d), in float32."""
    assert all(torch.equal(v.float().double(), v) for v in tensors.values())
    return {k: v.float() for k, v in tensors.items()}


def _pair(rng: random.Random) -> dict[str, list[list[int]]]:
    """An input grid of 1..7 rows and columns and an output of another shape."""
    h, w = rng.randint(1, 7), rng.randint(1, 7)
    oh, ow = rng.randint(1, 7), rng.randint(1, 7)
    return {
        "input": [[rng.randint(0, 9) for _ in range(w)] for _ in range(h)],
        "output": [[rng.randint(0, 9) for _ in range(ow)] for _ in range(oh)],
    }


def _save(golden: dict[str, Any], path: Path) -> None:
    torch.save(golden, path)
    size = path.stat().st_size
    losses = [s["loss"] for s in golden["steps"]]
    print(
        f"{path}: {len(golden['steps'])} steps, loss {losses[0]:.4f} -> {losses[-1]:.4f}, "
        f"{golden['steps_clipped']} steps clipped, {size // 1024} KiB"
    )
    if size > MAX_BYTES:
        raise SystemExit(f"{path} is {size} bytes, over {MAX_BYTES}: make the model or the run smaller")


if __name__ == "__main__":
    main()
