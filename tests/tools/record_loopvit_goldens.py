"""Record tests/data/models/golden_loopvit.pt, the golden of tests/unit/models/test_loopvit.py, by running upstream
LoopViT's own model and loss code.

    PYTHONPATH=TIMM_DIR python tests/tools/record_loopvit_goldens.py --loopvit LOOPVIT_DIR [--output tests/data/models]

LOOPVIT_DIR is a tree of WenjieShu/LoopViT at the commit in UPSTREAM below; its src/ARC_LoopViT.py, src/ARC_ViT.py,
src/ARC_ViT1.py and utils/pos_embed.py are imported from there at run time and never copied here, and the regularizer
`_compute_gate_regularizers` is compiled from the text of its offline_train_loop_ARC.py (the function alone: that
module's imports need wandb, PIL and the data loader). timm as for record_varc_goldens.py (whose importer this uses).

Two blocks, upstream's `--architecture loop_vit` (VARC's layer) and `loop_vit1` (the hybrid layer: RMSNorm,
attention, convolutional GLU), each at a small shape that takes every path: an embedding of 16 in two heads, a core
of two layers, 4 loop steps, the exit allowed from step 2, a 16 x 16 canvas of 2 x 2 patches. For each:

* `init`/`weights` as in record_varc_goldens.py, plus the step embedding scaled up and the exit gate's two linear
  layers scaled up (std 0.5 and 0.1) and its LayerNorm drawn, so that its probabilities differ by row and step;
* three cases on the same four rows (record_varc_goldens' inputs): `fixed` (no dynamic exit: every row runs 4 steps,
  as in upstream's test-time training), `early` (dynamic exit at a threshold where the rows exit at different steps,
  all before the last, so upstream's loop breaks early) and `late` (rows exit at different steps, some never);
  each with upstream's logits, every step's logits (`return_intermediates`, kept as `project_steps`), the gate
  probabilities, the exit steps, upstream's training loss (pixel cross entropy + 5e-4 x negative gate entropy +
  1e-3 x loop penalty, each term kept) and every parameter's gradient of it;
* `checkpoint`: a float32 model at a 32 x 32 canvas (the smallest arcpipe accepts) saved as upstream's trainer saves
  it ({"model_state", "config": the parsed arguments}), with upstream's logits on four rows: the import test.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib
import sys
import types
from importlib.metadata import version
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))
import record_varc_goldens as varc_rec  # noqa: E402  (its importer and its inputs)

UPSTREAM = ("WenjieShu/LoopViT", "4cdbdf4")
# upstream LoopARCViT's arguments
CONFIG = dict(
    image_size=16,
    patch_size=2,
    embed_dim=16,
    loop_core_depth=2,
    max_loop_steps=4,
    min_loop_steps=2,
    num_heads=2,
    mlp_dim=12,
    dropout=0.1,
    num_colors=12,
)
LAYERS = {"vit": ("src.ARC_ViT", "loop_vit"), "hybrid": ("src.ARC_ViT1", "loop_vit1")}
NUM_TASKS = 5
INIT_SEED = 0
DATA_SEED = 1
GATE_ENTROPY_WEIGHT, LOOP_PENALTY_WEIGHT = 5e-4, 1e-3
IGNORE_INDEX = 10
GATE_SCALE = 5  # the gate's last layer x this: probabilities spread over (0, 1), not saturated
TASK_IDS = varc_rec.TASK_IDS
MAX_BYTES = 1_000_000
PROJECTIONS, PROJECTION_SEED = 16, 7
# the import checkpoint: upstream's trainer arguments that shape the model (the rest at upstream's defaults)
CKPT_ARGS = dict(
    architecture="loop_vit1",
    image_size=32,
    patch_size=2,
    embed_dim=16,
    mlp_dim=24,
    num_heads=2,
    loop_core_depth=2,
    max_loop_steps=3,
    min_loop_steps=2,
    dropout=0.1,
    num_colors=12,
    num_task_tokens=1,
    disable_exit_gate=False,
    exit_gate_threshold=0.6,
    no_step_embedding=False,
    gate_entropy_weight=5e-4,
    loop_penalty_weight=1e-3,
    train_dynamic_exit=True,
    eval_dynamic_exit=True,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loopvit", type=Path, required=True, help=f"{UPSTREAM[0]} at {UPSTREAM[1]}")
    parser.add_argument("--output", type=Path, default=Path(__file__).parents[1] / "data" / "models")
    args = parser.parse_args()
    torch.set_num_threads(1)
    golden = record(args.loopvit)
    path = args.output / "golden_loopvit.pt"
    torch.save(golden, path)
    size = path.stat().st_size
    for block, cases in golden["blocks"].items():
        for name, case in cases["cases"].items():
            print(f"{block} {name}: exit steps {case['exit_steps'].tolist()}, loss {case['loss'].item():.6f}")
    print(f"{path}: {size // 1024} KiB")
    if size > MAX_BYTES:
        raise SystemExit(f"{path} is {size} bytes, over {MAX_BYTES}")


def record(checkout: Path) -> dict[str, Any]:
    checkout = checkout.resolve()
    regularizers = _upstream_function(checkout / "offline_train_loop_ARC.py", "_compute_gate_regularizers")
    blocks = {}
    with varc_rec._upstream_tree(checkout) as sources:
        loop = importlib.import_module("src.ARC_LoopViT")
        for block, (module, architecture) in LAYERS.items():
            layer = importlib.import_module(module).ARCTransformerEncoderLayer
            blocks[block] = _record_block(loop, layer, architecture, regularizers)
        checkpoint = _record_checkpoint(loop, importlib.import_module("src.ARC_ViT1").ARCTransformerEncoderLayer)
    sources["offline_train_loop_ARC.py"] = hashlib.sha256(
        (checkout / "offline_train_loop_ARC.py").read_bytes()
    ).hexdigest()
    return {
        "upstream": {
            "repo": UPSTREAM[0],
            "commit": UPSTREAM[1],
            "class": "src.ARC_LoopViT.LoopARCViT",
            "arguments": {**CONFIG, "num_tasks": NUM_TASKS},
            "sources_sha256": dict(sorted(sources.items())),
            "timm": version("timm"),
            "changes_to_init": "color_embed, task_token_embed, positional_embed, step_embed x 32; norm weights 1 + "
            "0.3 N(0, 1), norm biases and head.bias 0.3 N(0, 1); exit_gate.1.weight x 25, exit_gate.3.weight x "
            f"{GATE_SCALE}, exit_gate.3.bias 0.5 N(0, 1)",
        },
        "torch_version": str(torch.__version__),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "config": CONFIG,
        "num_tasks": NUM_TASKS,
        "init_seed": INIT_SEED,
        "weights_of": {"gate_entropy_weight": GATE_ENTROPY_WEIGHT, "loop_penalty_weight": LOOP_PENALTY_WEIGHT},
        "blocks": blocks,
        "checkpoint": checkpoint,
    }


def _record_block(loop: Any, layer: type, architecture: str, regularizers: Any) -> dict[str, Any]:
    torch.manual_seed(INIT_SEED)
    model = loop.LoopARCViT(num_tasks=NUM_TASKS, layer_class=layer, **CONFIG)
    init = {k: v.clone() for k, v in model.state_dict().items()}
    g = torch.Generator().manual_seed(DATA_SEED)
    changed = {}
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name in ("color_embed.weight", "task_token_embed.weight", "positional_embed", "step_embed.weight"):
                p.mul_(32)
            elif name == "exit_gate.1.weight":
                p.mul_(25)
            elif name == "exit_gate.3.weight":
                p.mul_(GATE_SCALE)
            elif name == "exit_gate.3.bias":
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            elif "norm" in name and name.endswith(("weight", "scale")) or name == "exit_gate.0.weight":
                p.copy_(1 + 0.3 * torch.randn(p.shape, generator=g))
            elif "norm" in name or name in ("head.bias", "exit_gate.0.bias"):
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
            else:
                continue
            changed[name] = init[name]
    model = model.double().eval()
    pixels, mask, targets = varc_rec._inputs(g)
    task_ids = torch.tensor(TASK_IDS)

    with torch.no_grad():  # the gates without exit: pick thresholds that give the cases their shapes
        _, meta = model(pixels, task_ids, attention_mask=mask, dynamic_exit=False)
    probs = torch.stack(meta.gate_probs, dim=1)  # (B, steps)
    thresholds = {"fixed": 0.6, "early": _threshold(probs, early=True), "late": _threshold(probs, early=False)}
    cases = {}
    for name, threshold in thresholds.items():
        model.zero_grad(set_to_none=True)
        dynamic = name != "fixed"
        logits, meta, steps = model(
            pixels,
            task_ids,
            attention_mask=mask,
            dynamic_exit=dynamic,
            gate_threshold=threshold,
            return_intermediates=True,
        )
        C = logits.shape[1]
        pixel_loss = F.cross_entropy(
            logits.permute(0, 2, 3, 1).reshape(-1, C), targets.view(-1), ignore_index=IGNORE_INDEX
        )
        args = types.SimpleNamespace(disable_exit_gate=False)
        neg_entropy, penalty = regularizers(meta, args)
        loss = pixel_loss + GATE_ENTROPY_WEIGHT * neg_entropy + LOOP_PENALTY_WEIGHT * penalty
        loss.backward()
        cases[name] = {
            "dynamic_exit": dynamic,
            "threshold": threshold,
            # the full logits of one case a block; the others' projected, as the steps' (the size limit)
            "logits": logits.detach() if name == "fixed" else project_steps(logits.detach()[None])[0],
            "step_logits": project_steps(torch.stack([s.detach() for s in steps])),
            "gate_probs": torch.stack([p.detach() for p in meta.gate_probs], dim=1),
            "exit_steps": meta.exit_steps.clone(),
            "pixel_loss": pixel_loss.detach(),
            "neg_entropy": neg_entropy.detach(),
            "loop_penalty": penalty.detach(),
            "loss": loss.detach(),
            "grads": {k: p.grad.clone() for k, p in model.named_parameters()},
        }
    return {
        "architecture": architecture,
        "init": changed,
        "weights": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "pixels": pixels,
        "task_ids": task_ids,
        "mask": mask,
        "targets": targets,
        "cases": cases,
    }


def project_steps(step_logits: torch.Tensor) -> torch.Tensor:
    """(steps, B, C, S, S) -> (steps, B, PROJECTIONS): each step's logits of each row against PROJECTIONS fixed
    random float64 directions (drawn from PROJECTION_SEED; the test draws the same). The full per-step logits are
    12 x 256 numbers a row and step, too many to keep for every case; any change of them moves the projections."""
    g = torch.Generator().manual_seed(PROJECTION_SEED)
    directions = torch.randn((PROJECTIONS, *step_logits.shape[2:]), generator=g, dtype=torch.float64)
    return torch.einsum("sbchw,kchw->sbk", step_logits.double(), directions)


def _threshold(probs: torch.Tensor, early: bool) -> float:
    """A threshold at which, with exit allowed from min_loop_steps, the rows exit at two or more different steps, and
    every row before the last step (`early`: upstream's loop breaks) or some row never (it runs every step): the
    first midpoint between two gate values that does it."""
    T = probs.shape[1]
    first = CONFIG["min_loop_steps"] - 1
    values = sorted(set(probs[:, first:].flatten().tolist()))
    for low, high in zip(values, values[1:], strict=False):
        threshold = (low + high) / 2
        hits = probs[:, first:] >= threshold
        exits = torch.where(hits.any(1), hits.float().argmax(1) + first + 1, T)
        never = ~hits[:, :-1].any(1)  # runs to the last step
        if len(set(exits.tolist())) >= 2 and (not never.any() if early else bool(never.any())):
            return threshold
    raise SystemExit("no threshold gives the exits wanted: change the seeds or GATE_SCALE")


def _record_checkpoint(loop: Any, layer: type) -> dict[str, Any]:
    torch.manual_seed(INIT_SEED + 1)
    a = CKPT_ARGS
    model = loop.LoopARCViT(
        num_tasks=NUM_TASKS,
        image_size=a["image_size"],
        num_colors=a["num_colors"],
        embed_dim=a["embed_dim"],
        loop_core_depth=a["loop_core_depth"],
        max_loop_steps=a["max_loop_steps"],
        min_loop_steps=a["min_loop_steps"],
        num_heads=a["num_heads"],
        mlp_dim=a["mlp_dim"],
        dropout=a["dropout"],
        num_task_tokens=a["num_task_tokens"],
        patch_size=a["patch_size"],
        use_exit_gate=not a["disable_exit_gate"],
        gate_threshold=a["exit_gate_threshold"],
        add_step_embeddings=not a["no_step_embedding"],
        layer_class=layer,
    )
    g = torch.Generator().manual_seed(DATA_SEED + 1)
    with torch.no_grad():
        model.exit_gate[3].weight.mul_(50)  # gates away from 0.5, so that some rows exit
        model.exit_gate[1].weight.mul_(25)
    model.eval()
    S = a["image_size"]
    pixels = torch.randint(0, 10, (4, S, S), generator=g)
    mask = torch.zeros((4, S, S), dtype=torch.bool)
    for row, side in enumerate((3, 7, 12, 30)):
        mask[row, 1 : 1 + side, 1 : 1 + side] = True
    pixels = torch.where(mask, pixels, IGNORE_INDEX)
    task_ids = torch.tensor([0, 1, 4, 2])
    with torch.no_grad():
        logits, meta = model(pixels, task_ids, attention_mask=mask, dynamic_exit=True, gate_threshold=0.6)
    # what upstream's trainer writes at the end of training (offline_train_loop_ARC.py's `payload`)
    payload = {"model_state": model.state_dict(), "config": dict(a), "scaler_state": None}
    return {
        "payload": payload,
        "pixels": pixels,
        "mask": mask,
        "task_ids": task_ids,
        "logits": project_steps(logits[None])[0],
        "exit_steps": meta.exit_steps.clone(),
    }


def _upstream_function(path: Path, name: str) -> Any:
    """The function `name` of the module at `path`, compiled from its own text alone (torch in its namespace)."""
    tree = ast.parse(path.read_text())
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    namespace: dict[str, Any] = {"torch": torch, "Tuple": tuple}
    exec(compile(ast.Module(body=[node], type_ignores=[]), str(path), "exec"), namespace)
    return namespace[name]


if __name__ == "__main__":
    main()
