"""Record the golden files of tests/unit/models/test_upstream_parity.py by running the upstream models' own code.

    python tests/tools/record_goldens.py --trm TRM_DIR --hrm HRM_DIR --urm URM_DIR [--output tests/data/models]

Each *_DIR is a tree of the upstream repository at the commit in UPSTREAM below, for example
`git --git-dir=<clone>/.git archive <commit> | tar -x -C TRM_DIR`. The upstream model code is imported from those
trees at run time and is never copied here. flash-attn (HRM, URM) is replaced by a stub module that calls torch SDPA
with the same layout and scale, so everything runs on CPU; no upstream file is edited.

    TRM  SamsungSAILMontreal/TinyRecursiveModels  e7b68717f0a6c4cbb4ce6fbef787b14f42083bd9
    HRM  sapientinc/HRM                            42410daaaf6ac8b266536d105a6e2362ffe40929
    URM  zitian-gao/URM                            52ee34b62fe68ef00d2784e4d4addfcd8c2a7615

The regime is chosen so that a golden holds on any CPU (AVX-512, AVX2, no SIMD):

* upstream's own initialisation (its constructors under torch.manual_seed), with two changes so that every path
  matters, drawn with upstream's trunc_normal_init_: the Q head like any other CastedLinear instead of weight 0 /
  bias -5 (else q is a constant and halting never depends on the model), and the puzzle-embedding table, zero at
  init, like the token embedding (else the puzzle identifiers change nothing). Post-norm blocks with these
  weights are well conditioned: a rounding difference stays a rounding difference;
* forward_dtype float64. Some parts stay in lower precision whatever the forward dtype: RMSNorm and rotary
  embeddings (fp32), Q values and Q losses (fp32), URM's conv (bf16). Their float64 inputs agree to ~1e-16 on every
  machine, so they round the same way almost always; what differs between instruction sets is float64 rounding,
  an fp32 sum (the Q losses) by an ulp, and in URM's conv a bf16 matmul by a bf16 step now and then. The test's
  tolerances say how much.

Variants: trm (RoPE), trm_mlpt (the token-mixing MLP), trm_learned (learned positions), hrm (a two-position puzzle
prefix), urm (upstream's bf16 conv; arcpipe's default), urm_conv_forward (the same weights with upstream's dwconv
moved to the forward dtype after construction: arcpipe's `conv_dtype: forward`), transformer (TRM's baseline).
`--tag avx2 --only urm` wrote golden_urm_avx2.pt on a 2-core AMD EPYC (AVX2): URM's bf16 kernels round differently
on an AVX-512 machine (where golden_urm.pt was recorded), so each golden records its machine's `bf16_kernels`
fingerprint, and the test compares tightly against the golden whose fingerprint is the test machine's. The
fingerprint covers the bf16 kernels' backward since 2026-11-29 (an AVX-512 BF16 machine's forward matched the AVX2
one's, its backward did not); golden_urm_avx2.pt's was then computed again on such a machine under
ONEDNN_MAX_CPU_ISA=AVX2, where the replay matches that golden at the tight tolerances.

Each golden holds the upstream state dict (the weights both sides load), six training ACT steps and then six
evaluation steps on seeded batches (logits, Q values, loss, metrics, halting, step counts), the puzzle-embedding
gradient of every training step, and the gradient of every parameter summed over the training steps; the URM
files also hold one call of the first block's ConvSwiGLU (`conv_probe`), which shows the conv alone. The script
refuses to write a golden whose discrete outcomes (halting, q >= 0, argmax where the label is one of the top two)
sit closer than MIN_MARGIN to their threshold, where rounding on another machine could flip them.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib
import math
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "models"))
from roundoff import bf16_kernel_fingerprint  # noqa: E402

UPSTREAM = {
    "trm": ("SamsungSAILMontreal/TinyRecursiveModels", "e7b68717f0a6c4cbb4ce6fbef787b14f42083bd9"),
    "hrm": ("sapientinc/HRM", "42410daaaf6ac8b266536d105a6e2362ffe40929"),
    "urm": ("zitian-gao/URM", "52ee34b62fe68ef00d2784e4d4addfcd8c2a7615"),
}
DATASET = dict(vocab_size=12, seq_len=24, num_puzzle_identifiers=7)
BATCH_SIZE = 3
NUM_STEPS = 6  # per mode: train, then eval
STEP_SEEDS = [100 + i for i in range(NUM_STEPS)]  # torch.manual_seed before each step (exploration draws)
# distance a discrete outcome must keep from its threshold: far above the rounding differences between machines
# (float64: ~1e-15; URM's bf16 conv: logits ~5e-3; see the test's tolerances)
MIN_MARGIN = 1e-6
MIN_MARGIN_BF16_CONV = 2e-2
RETURN_KEYS = ["logits", "q_halt_logits", "q_continue_logits"]

_SMALL = dict(hidden_size=16, expansion=2, num_heads=4, pos_encodings="rope")  # the MLP is 256 wide anyway
_ACT = dict(halt_max_steps=4, halt_exploration_prob=0.5)
_TRM = dict(**_SMALL, **_ACT, H_cycles=2, L_cycles=2, H_layers=0, L_layers=2, puzzle_emb_len=4)


@dataclass(frozen=True)
class Variant:
    repo: str  # key of UPSTREAM
    module: str  # upstream module, relative to the checkout
    model_class: str
    arch: str  # arcpipe arch
    arch_config: dict[str, Any]  # arcpipe arch fields (upstream names); all but arcpipe_only go to upstream too
    arcpipe_only: dict[str, Any] = field(default_factory=dict)
    conv_follows_forward_dtype: bool = False  # URM: make upstream's bf16 dwconv run in the forward dtype
    weight_seed: int = 0


VARIANTS = {
    "trm": Variant("trm", "models.recursive_reasoning.trm", "TinyRecursiveReasoningModel_ACTV1", "trm", _TRM),
    "trm_mlpt": Variant(
        "trm",
        "models.recursive_reasoning.trm",
        "TinyRecursiveReasoningModel_ACTV1",
        "trm",
        {**_TRM, "pos_encodings": "none", "mlp_t": True},
    ),
    "trm_learned": Variant(
        "trm",
        "models.recursive_reasoning.trm",
        "TinyRecursiveReasoningModel_ACTV1",
        "trm",
        {**_TRM, "pos_encodings": "learned"},
    ),
    # puzzle_emb_ndim 24 on hidden 16: a two-position prefix, the second one padded
    "hrm": Variant(
        "hrm",
        "models.hrm.hrm_act_v1",
        "HierarchicalReasoningModel_ACTV1",
        "hrm",
        dict(**_SMALL, **_ACT, H_cycles=2, L_cycles=2, H_layers=2, L_layers=2, puzzle_emb_ndim=24),
    ),
    "urm": Variant(
        "urm",
        "models.urm.urm",
        "URM",
        "urm",
        dict(**_SMALL, num_layers=2, loops=4, H_cycles=2, L_cycles=2),
        weight_seed=9,  # the first seed whose argmax and halting margins clear MIN_MARGIN_BF16_CONV
    ),
    "urm_conv_forward": Variant(
        "urm",
        "models.urm.urm",
        "URM",
        "urm",
        dict(**_SMALL, num_layers=2, loops=4, H_cycles=2, L_cycles=2),
        arcpipe_only={"conv_dtype": "forward"},
        conv_follows_forward_dtype=True,
        weight_seed=9,  # the weights of "urm"
    ),
    # 5 heads on 24: head size 4, attention output 20 wide (upstream's hidden // heads)
    "transformer": Variant(
        "trm",
        "models.recursive_reasoning.transformers_baseline",
        "Model_ACTV2",
        "transformer",
        {**_SMALL, **_ACT, "hidden_size": 24, "num_heads": 5, "H_cycles": 1, "H_layers": 2},
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for repo in UPSTREAM:
        parser.add_argument(f"--{repo}", type=Path, help=f"{UPSTREAM[repo][0]} at {UPSTREAM[repo][1][:7]}")
    parser.add_argument("--output", type=Path, default=Path(__file__).parents[1] / "data" / "models")
    parser.add_argument("--only", nargs="*", choices=sorted(VARIANTS), help="variants to record (default: all)")
    parser.add_argument(
        "--tag", help="write golden_<variant>_<tag>.pt (a second golden of a variant, from another kind of CPU)"
    )
    args = parser.parse_args()
    names = args.only or list(VARIANTS)
    missing = sorted({f"--{VARIANTS[n].repo}" for n in names if getattr(args, VARIANTS[n].repo) is None})
    if missing:
        parser.error(f"{', '.join(missing)} required for {', '.join(names)}")
    for name in names:
        golden = record(VARIANTS[name], getattr(args, VARIANTS[name].repo))
        path = args.output / (f"golden_{name}_{args.tag}.pt" if args.tag else f"golden_{name}.pt")
        torch.save(golden, path)
        print(f"{path}: margins {golden['margins']}, {path.stat().st_size // 1024} KiB")


def record(variant: Variant, checkout: Path) -> dict[str, Any]:
    """Run one upstream model from `checkout` through the steps and return the golden dictionary."""
    upstream_config = {
        **DATASET,
        "batch_size": BATCH_SIZE,
        "forward_dtype": "float64",
        "puzzle_emb_ndim": variant.arch_config["hidden_size"],  # arcpipe's default, upstream's yaml interpolation
        **variant.arch_config,
    }
    with _upstream_tree(checkout) as sources:
        model_cls = getattr(importlib.import_module(variant.module), variant.model_class)
        loss_head_cls = importlib.import_module("models.losses").ACTLossHead
        trunc_normal_init_ = importlib.import_module("models.common").trunc_normal_init_
        torch.manual_seed(variant.weight_seed)
        head = loss_head_cls(model_cls(upstream_config), loss_type="stablemax_cross_entropy")
    inner = head.model.inner
    hidden = upstream_config["hidden_size"]
    with torch.no_grad():  # upstream's own init function, as its CastedLinear and CastedEmbedding use it
        trunc_normal_init_(inner.q_head.weight, std=hidden**-0.5)
        inner.q_head.bias.zero_()
        trunc_normal_init_(inner.puzzle_emb.weights, std=hidden**-0.5)
    if variant.conv_follows_forward_dtype:
        for module in head.modules():
            if hasattr(module, "dwconv"):
                module.dwconv.to(torch.float64)

    g = torch.Generator().manual_seed(variant.weight_seed + 1)
    batches = [_batch(g) for _ in range(NUM_STEPS)]
    probes = {}
    if variant.repo == "urm":
        # one call of the first block's ConvSwiGLU on a float64 hidden state (B, P+L, D): the bf16 conv seen alone
        shape = (BATCH_SIZE, DATASET["seq_len"] + inner.puzzle_emb_len, hidden)
        x = torch.randn(shape, generator=g, dtype=torch.float64)
        with torch.no_grad():
            probes["conv_probe"] = {"module": "model.inner.layers.0.mlp", "input": x, "output": inner.layers[0].mlp(x)}
    steps: list[dict[str, Any]] = []
    margins = {"halt": math.inf, "argmax": math.inf, "q_sign": math.inf}
    for mode in ("train", "eval"):
        head.train(mode == "train")
        carry = head.initial_carry(batches[0])
        for seed, batch in zip(STEP_SEEDS, batches, strict=True):
            torch.manual_seed(seed)
            carry, loss, metrics, outputs, _ = head(return_keys=RETURN_KEYS, carry=carry, batch=batch)
            step = {
                "mode": mode,
                "seed": seed,
                "batch": batch,
                "loss": loss.detach(),
                "logits": outputs["logits"],
                "q_halt": outputs["q_halt_logits"],
                "q_continue": outputs["q_continue_logits"],
                "halted": carry.halted.clone(),
                "steps": carry.steps.clone(),
                "metrics": {k: v.detach() for k, v in metrics.items()},
            }
            if mode == "train":
                loss.backward()
                local = inner.puzzle_emb.local_weights
                step["puzzle_emb_grad"] = local.grad.clone()
                local.grad = None
                _update_margins(margins, step, variant, carry.current_data["labels"])
            steps.append(step)
    bf16_conv = variant.repo == "urm" and not variant.conv_follows_forward_dtype
    too_close = {k: v for k, v in margins.items() if v < (MIN_MARGIN_BF16_CONV if bf16_conv else MIN_MARGIN)}
    if too_close:
        raise RuntimeError(f"{variant}: discrete outcomes too close to their threshold {too_close}; change the seeds")
    repo, commit = UPSTREAM[variant.repo]
    return {
        "upstream": {
            "repo": repo,
            "commit": commit,
            "module": variant.module,
            "class": variant.model_class,
            "config": upstream_config,
            "sources_sha256": dict(sorted(sources.items())),
            "conv_follows_forward_dtype": variant.conv_follows_forward_dtype,
            "changes_to_init": "q_head: weight trunc_normal_init_(std=hidden**-0.5), bias 0; "
            "puzzle_emb.weights: trunc_normal_init_(std=hidden**-0.5)",
        },
        "torch_version": str(torch.__version__),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "bf16_kernels": bf16_kernel_fingerprint(),
        "arch": variant.arch,
        "arch_config": {**variant.arch_config, **variant.arcpipe_only},
        "dataset": DATASET,
        "batch_size": BATCH_SIZE,
        "forward_dtype": "float64",
        "weights": {k: v.clone() for k, v in head.state_dict().items()},
        "first_batch": batches[0],
        "steps": steps,
        "grads": {k: p.grad.clone() for k, p in head.named_parameters() if p.grad is not None},
        "margins": margins,
        **probes,
    }


def _batch(g: torch.Generator) -> dict[str, torch.Tensor]:
    # row 0 ends in ignored padding, as the loader writes it; ids include 0 (the blank puzzle)
    labels = torch.randint(0, DATASET["vocab_size"], (BATCH_SIZE, DATASET["seq_len"]), generator=g, dtype=torch.int32)
    labels[0, DATASET["seq_len"] // 2 :] = -100
    inputs = torch.randint(0, DATASET["vocab_size"], (BATCH_SIZE, DATASET["seq_len"]), generator=g, dtype=torch.int32)
    ids = torch.randint(0, DATASET["num_puzzle_identifiers"], (BATCH_SIZE,), generator=g, dtype=torch.int32)
    return {"inputs": inputs, "labels": labels, "puzzle_identifiers": ids}


def _update_margins(margins: dict[str, float], step: dict[str, Any], variant: Variant, labels: torch.Tensor) -> None:
    q_halt, q_continue = step["q_halt"].double(), step["q_continue"].double()
    threshold = q_continue if variant.arch in ("hrm", "transformer") else torch.zeros_like(q_halt)
    margins["halt"] = min(margins["halt"], (q_halt - threshold).abs().min().item())
    margins["q_sign"] = min(margins["q_sign"], q_halt.abs().min().item())
    # a near tie changes a metric only when the label is one of the two tied classes
    top2 = step["logits"].double().topk(2, dim=-1)
    gap = top2.values[..., 0] - top2.values[..., 1]
    label_in_top2 = (top2.indices == labels.unsqueeze(-1).long()).any(-1)
    margins["argmax"] = min([margins["argmax"], *gap[label_in_top2].tolist()])


@contextlib.contextmanager
def _upstream_tree(checkout: Path) -> Iterator[dict[str, str]]:
    """Import upstream's top-level `models` package from `checkout` (each repository has its own), with a
    flash-attn stub; yields {relative path: sha256} of the upstream files imported, filled on exit."""
    checkout = checkout.resolve()
    if not (checkout / "models" / "layers.py").is_file():
        raise ValueError(f"{checkout}: no models/layers.py; pass the root of an upstream checkout")
    saved = {k: sys.modules.pop(k) for k in list(sys.modules) if _is_upstream_module(k)}
    stub = types.ModuleType("flash_attn")
    stub.flash_attn_func = _flash_attn_func  # type: ignore[attr-defined]
    sys.modules["flash_attn"] = sys.modules["flash_attn_interface"] = stub
    sys.path.insert(0, str(checkout))
    sources: dict[str, str] = {}
    try:
        yield sources
    finally:
        sys.path.remove(str(checkout))
        for name in [k for k in sys.modules if _is_upstream_module(k)]:
            file = getattr(sys.modules.pop(name), "__file__", None)
            if file and Path(file).is_relative_to(checkout):
                rel = Path(file).relative_to(checkout).as_posix()
                sources[rel] = hashlib.sha256(Path(file).read_bytes()).hexdigest()
        sys.modules.update(saved)


def _is_upstream_module(name: str) -> bool:
    return name in ("models", "flash_attn", "flash_attn_interface") or name.startswith("models.")


def _flash_attn_func(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    # flash-attn's layout (B, S, H, hd) and default scale hd^-0.5, through SDPA's (B, H, S, hd)
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal)
    return out.transpose(1, 2).contiguous()


if __name__ == "__main__":
    main()
