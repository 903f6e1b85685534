"""One device, the published recipes: training examples/s (eager and compiled), evaluation examples/s, memory, MFU.

    .venv/bin/python benchmarks/gpu.py                                  # every `full` run of config/config.yaml
    .venv/bin/python benchmarks/gpu.py --runs trm-arc1 urm-arc1 --upstream UPSTREAM
    .venv/bin/python benchmarks/gpu.py --cpu-archs trm --cpu-steps 1   # the quickest CPU check (no GPU needed)

GPU rows, one per `full` run, on one CUDA device in bf16 at seq_len 900, with the run's arch, preset, overrides,
optimizer, EMA and per-GPU micro-batch (global_batch_size / (nodes x gpus_per_node)), and the embedding table of its
dataset (876,406 puzzle ids for ARC-AGI-1, 1,191,730 for ARC-AGI-2):

* training: arcpipe's own step, `Trainer.train_step` (batch assembly from a memory-mapped split, compiled
  `head.step`, backward, the run's optimizers, EMA, the metric reduction), on a synthetic dataset with the recipe's
  shapes written to a temporary directory; one device trains the per-GPU micro-batch per step, as each GPU of the
  run does (without the gradient all-reduce). Eager, then `torch.compile`; `--warmup` steps untimed, then `--steps`
  timed one by one (examples/s from the median step: a shared machine's stalls do not count);
* evaluation: `arcpipe.eval.infer.predict`, the evaluator's loop (eval mode, no grad, every row for the full
  halt_max_steps, eager), on `--eval-batches` batches of the evaluation batch size after one warm-up batch;
* peak memory: torch.cuda.max_memory_allocated over the timed part; MFU: FLOPs from arcpipe.models.flops x examples/s
  / the GPU's dense bf16 peak (arcpipe.models.flops.peak_bf16_flops; "-" for an unknown GPU).

Without CUDA the GPU rows say "skipped (no CUDA)", and CPU rows run instead at a reduced size (`--cpu-preset tiny`,
micro-batch `--cpu-batch`, fp32) for the first full run of each arch, eager only (arcpipe trains eagerly on CPU;
`--cpu-compile` adds the compiled step), so the whole script runs in about a minute on 2 cores.

`--upstream PATH`: PATH holds checkouts of the upstream repositories outside this one, as `trm`, `hrm` and `urm`
(or `TRM`, `TinyRecursiveModels`, `HRM`, `URM`). For each row whose arch has a checkout, upstream's own model, loss
head and optimizers (imported from the checkout, unmodified) run the same shapes on the same device: its
`train_batch` (TRM/URM `pretrain.py`: forward, loss / global batch, backward, sparse SignSGD + AdamATan2 or Muon,
EMA when the run has it, metrics to the host), eager and `torch.compile`d (upstream compiles by default), and its
evaluation loop (inference mode, until every row halts; compiled on CUDA as upstream evaluates). Printed below each
arcpipe row, then the arcpipe / upstream ratios. Stand-ins, each said in the output:

* flash-attn (HRM and URM import it; TRM does not) when it does not import: a module whose `flash_attn_func` calls
  torch SDPA with flash-attn's layout and scale, which is also what arcpipe runs without flash-attn;
* `adam_atan2` (the CUDA package upstream trains with) when it does not import: torch.optim.AdamW (fused on CUDA,
  foreach on CPU), a single-kernel Adam of the same cost class;
* URM keeps its EMAHelper in pretrain.py, which imports hydra and wandb: the class alone is taken from that file's
  syntax tree and run unmodified.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import copy
import gc
import importlib
import json
import os
import re
import resource
import statistics
import sys
import tempfile
import time
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

import arcpipe
from arcpipe.config import DatasetConfig, RunConfig, WorkflowConfig, load_config
from arcpipe.eval.infer import predict, step_is_compiled
from arcpipe.models.flops import eval_flops_per_step, eval_steps, peak_bf16_flops, train_flops_per_example
from arcpipe.models.registry import build_model, count_parameters, make_arch_config
from arcpipe.train.distributed import DistEnv
from arcpipe.train.loop import Trainer
from arcpipe.train.sampler import batch_rows, collate, plan_pass

ROOT = Path(__file__).resolve().parents[1]
SEQ_LEN, VOCAB = 900, 12
# docs/reference/upstream-recursive.md 1.11
NUM_PUZZLE_IDENTIFIERS = {"arc1concept-aug-1000": 876_406, "arc2concept-aug-1000": 1_191_730}
CPU_PUZZLE_IDENTIFIERS = 1000
EXAMPLES_PER_PUZZLE = 4

# arch -> (checkout folder names, model module, model class) in the upstream repositories
UPSTREAM = {
    "trm": (
        ("trm", "TRM", "TinyRecursiveModels"),
        "models.recursive_reasoning.trm",
        "TinyRecursiveReasoningModel_ACTV1",
    ),
    "hrm": (("hrm", "HRM"), "models.hrm.hrm_act_v1", "HierarchicalReasoningModel_ACTV1"),
    "urm": (("urm", "URM"), "models.urm.urm", "URM"),
}


@dataclass(frozen=True)
class Case:
    """One row: a recipe's shapes on one device."""

    name: str
    run: RunConfig  # one device, global batch = the per-GPU micro-batch
    dataset: str
    dataset_cfg: DatasetConfig
    arch_cfg: Any
    device: torch.device
    num_puzzle_identifiers: int
    eval_batch: int
    warmup: int
    steps: int
    eval_batches: int
    compile: bool
    train: bool = True  # False (--eval-only): evaluation rows alone
    eager: bool = True  # False (--no-eager): the compiled training step alone
    evaluate: bool = True  # False (--no-eval): the training rows alone
    profile: int = 0  # --profile: compiled training steps profiled after the timed ones (CUDA)


@dataclass
class Row:
    side: str
    params: int = 0
    eager: float | None = None  # training examples/s
    compiled: float | None = None
    evaluation: float | None = None  # evaluation examples/s (every row for the full halt_max_steps)
    train_peak: int | None = None  # bytes, the compiled step's (else the eager one's)
    eval_peak: int | None = None
    notes: list[str] = field(default_factory=list)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", type=Path, default=ROOT / "config" / "config.yaml")
    parser.add_argument("--runs", nargs="+", help="full runs to measure (default: every `target: full` run)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed training steps (compilation happens here)")
    parser.add_argument("--steps", type=int, default=10, help="timed training steps")
    parser.add_argument("--eval-batches", type=int, default=2, help="timed evaluation batches (after one warm-up)")
    parser.add_argument("--no-compile", action="store_true", help="GPU rows: skip the compiled training step")
    parser.add_argument("--no-eager", action="store_true", help="GPU rows: skip the eager training step")
    parser.add_argument(
        "--sides",
        choices=("both", "arcpipe", "upstream"),
        default="both",
        help="with --upstream: measure one side only (a short GPU slot; ratios need both in one invocation)",
    )
    parser.add_argument("--eval-only", action="store_true", help="measure evaluation alone (no training rows)")
    parser.add_argument("--no-eval", action="store_true", help="measure training alone (no evaluation rows)")
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="GPU rows: after the timed compiled steps, N more under torch.profiler; prints where the GPU time goes "
        "(kernel classes, the top kernels, kernels per step, the GPU's idle share) for each side",
    )
    parser.add_argument("--cpu-preset", default="tiny")
    parser.add_argument("--cpu-batch", type=int, default=4, help="CPU rows: micro-batch and evaluation batch")
    parser.add_argument("--cpu-steps", type=int, default=2)
    parser.add_argument("--cpu-archs", nargs="*", help="CPU rows: archs (default: each arch of the GPU rows)")
    parser.add_argument("--cpu-compile", action="store_true", help="CPU rows: also the compiled step (~30 s each)")
    parser.add_argument("--upstream", type=Path, help="folder of upstream checkouts: trm, hrm, urm")
    args = parser.parse_args()
    started = time.perf_counter()
    cfg = load_config(args.config)
    names = args.runs or cfg.runs_for("full")
    unknown = sorted(set(names) - set(cfg.runs))
    if unknown:
        parser.error(f"no run {', '.join(unknown)} in {args.config} (runs: {', '.join(cfg.runs)})")

    cuda = torch.cuda.is_available()
    device_name = torch.cuda.get_device_name() if cuda else "no CUDA"
    peak = peak_bf16_flops(device_name) if cuda else None
    print(
        f"arcpipe {arcpipe.__version__}, torch {torch.__version__}, {torch.get_num_threads()} CPU threads, "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; flash-attn: "
        f"{_flash_attn_version() or 'not installed'}; GPU: {device_name}"
        + (f", dense bf16 peak {peak / 1e12:.0f} TFLOP/s" if peak else (", peak unknown: no MFU" if cuda else ""))
    )
    if args.upstream:
        print(f"upstream checkouts under {args.upstream}: " + ", ".join(_describe_checkouts(args.upstream)))
    print(_HEADER)

    print(f"GPU rows: the `full` runs of {_shown(args.config)}, one device, bf16, seq_len {SEQ_LEN}")
    for name in names:
        if not cuda:
            print(f"{name:<22} skipped (no CUDA)")
            continue
        case = _case(cfg, name, cfg.runs[name].preset, None, torch.device("cuda"), args, compile=not args.no_compile)
        _measure(case, args.upstream, peak, args.sides)

    cpu_archs = args.cpu_archs if args.cpu_archs is not None else list(dict.fromkeys(cfg.runs[n].arch for n in names))
    if cpu_archs:
        print(
            f"CPU rows: preset {args.cpu_preset}, micro-batch {args.cpu_batch}, fp32, seq_len {SEQ_LEN}, "
            f"{CPU_PUZZLE_IDENTIFIERS} puzzle ids; " + ("eager and compiled" if args.cpu_compile else "eager only")
        )
    if cpu_archs and args.upstream:
        print(
            "(CPU rows show that the script's paths run; their ratios are not the GPU comparison: arcpipe's AdamATan2 "
            "runs its uncompiled update on CPU, upstream's stand-in is foreach AdamW, and a shared box is noisy)"
        )
    for arch in cpu_archs:
        name = next((n for n in names if cfg.runs[n].arch == arch), None)
        if name is None:
            print(f"{arch:<22} skipped (no selected full run of this arch)")
            continue
        cpu = _case(cfg, name, args.cpu_preset, args.cpu_batch, torch.device("cpu"), args, compile=args.cpu_compile)
        _measure(cpu, args.upstream, None, args.sides)

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"\nwall {time.perf_counter() - started:.1f} s, peak RSS {rss:.2f} GiB")


_HEADER = (
    f"{'run':<22} {'side':<18} {'micro':>5} {'params':>7} {'GFLOP/ex':>9} {'train ex/s':>10} {'compiled':>9} "
    f"{'comp/eag':>8} {'MFU':>6} {'GiB':>6} | {'eval batch':>10} {'eval ex/s':>9} {'MFU':>6} {'GiB':>6}"
)


def _case(
    cfg: WorkflowConfig,
    name: str,
    preset: str,
    micro: int | None,
    device: torch.device,
    args: argparse.Namespace,
    compile: bool,
) -> Case:
    run = cfg.runs[name]
    on_cpu = device.type == "cpu"
    micro = micro or run.micro_batch
    eval_batch = micro if on_cpu else (run.eval_batch_size or cfg.evaluation.batch_size) // max(run.evaluation_gpus, 1)
    one_device = RunConfig.model_validate(
        {
            **run.model_dump(),
            "preset": preset,
            "nodes": 1,
            "gpus_per_node": 0 if on_cpu else 1,
            "global_batch_size": micro,
            "micro_batch_size": None,
            "compile": compile,
            "wandb": "disabled",
            "simulate_gpus": False,
            "gate": None,  # a staged run's gate names its validation run, which this one-run config does not hold
        }
    )
    return Case(
        name=f"{name}@{preset}" if on_cpu else name,
        run=one_device,
        dataset=run.dataset,
        dataset_cfg=cfg.datasets[run.dataset],
        arch_cfg=make_arch_config(run.arch, preset, run.arch_overrides),
        device=device,
        num_puzzle_identifiers=CPU_PUZZLE_IDENTIFIERS if on_cpu else NUM_PUZZLE_IDENTIFIERS.get(run.dataset, 1000),
        eval_batch=eval_batch,
        warmup=1 if on_cpu else args.warmup,
        steps=args.cpu_steps if on_cpu else args.steps,
        eval_batches=args.cpu_steps if on_cpu else args.eval_batches,
        compile=compile,
        train=not args.eval_only,
        eager=on_cpu or not args.no_eager,
        evaluate=not args.no_eval,
        profile=0 if on_cpu else args.profile,
    )


def _measure(case: Case, upstream: Path | None, peak: float | None, sides: str = "both") -> None:
    with tempfile.TemporaryDirectory(prefix="arcpipe-gpu-bench-") as tmp:
        data = _synthetic_dataset(Path(tmp) / "data", case)
        ours = None
        if sides != "upstream" or upstream is None:
            ours = _arcpipe(case, data, Path(tmp) / "out")
            _print(case, ours, peak)
        if upstream is None or sides == "arcpipe":
            return
        checkout = _checkout(upstream, case.run.arch)
        if checkout is None:
            print(f"{'':<22} upstream: skipped (no checkout of {case.run.arch} under {upstream})")
            return
        theirs = _upstream(case, data, checkout)
        _print(case, theirs, peak, named=ours is None)
        if ours is not None:
            _print_ratios(ours, theirs)


# ----------------------------------------------------------------------------------------------------------------
# arcpipe


def _arcpipe(case: Case, data: Path, out: Path) -> Row:
    row = Row("arcpipe")
    if case.train and case.eager:
        row.eager, row.train_peak, row.params = _arcpipe_train(case, data, out / "eager", compiled=False)
    if case.train and case.compile:
        row.compiled, row.train_peak, row.params = _arcpipe_train(case, data, out / "compiled", compiled=True)
    if case.evaluate:
        row.evaluation, row.eval_peak = _arcpipe_evaluate(case)
    if case.evaluate and step_is_compiled(case.device):
        row.notes.append("evaluation: the step compiled, as `arcpipe evaluate` runs it on CUDA")
    return row


def _arcpipe_train(case: Case, data: Path, out: Path, compiled: bool) -> tuple[float, int | None, int]:
    _fresh(case.device)
    run = RunConfig.model_validate({**case.run.model_dump(), "compile": compiled})
    cfg = WorkflowConfig.model_validate({"datasets": {case.dataset: case.dataset_cfg}, "runs": {"bench": run}})
    trainer = Trainer(cfg, "bench", data, out)
    plan = plan_pass(trainer.split, run.seed, 0, 1, run.global_batch_size)
    assert plan.num_batches >= case.warmup + case.steps + case.profile
    rate, peak = _rate(lambda _: trainer.train_step(plan), run.global_batch_size, case, case.warmup, case.steps)
    if compiled:
        _profile(lambda _: trainer.train_step(plan), case, "arcpipe", case.warmup + case.steps)
    return rate, peak, count_parameters(trainer.head)


def _arcpipe_evaluate(case: Case) -> tuple[float, int | None]:
    _fresh(case.device)
    head = build_model(
        case.arch_cfg,
        vocab_size=VOCAB,
        seq_len=SEQ_LEN,
        num_puzzle_identifiers=case.num_puzzle_identifiers,
        batch_size=case.eval_batch,
        device=case.device,
    )
    inputs, labels, ids = _eval_arrays(case)
    env = DistEnv(0, 0, 1, case.device)
    B = case.eval_batch
    return _rate(
        lambda i: predict(head, inputs, labels, ids, np.arange(i * B, (i + 1) * B), B, env),
        B,
        case,
        1,
        case.eval_batches,
    )


# ----------------------------------------------------------------------------------------------------------------
# upstream


def _upstream(case: Case, data: Path, checkout: Path) -> Row:
    row = Row("upstream")
    with _upstream_tree(checkout, row.notes):
        build = _upstream_builder(case)
        optimizers = _upstream_optimizer_maker(case, checkout, row.notes)
        if case.train and case.eager:
            row.eager, row.train_peak, row.params = _upstream_train(case, data, build, optimizers, compiled=False)
        if case.train and case.compile:
            row.compiled, row.train_peak, row.params = _upstream_train(case, data, build, optimizers, compiled=True)
        # upstream evaluates the model it trains: compiled on CUDA (pretrain.py), eager on CPU unless --cpu-compile
        if case.evaluate:
            row.evaluation, row.eval_peak = _upstream_evaluate(case, build)
    return row


def _upstream_builder(case: Case) -> Callable[[int, bool], torch.nn.Module]:
    """(batch_size, compiled) -> upstream's loss head around its model, built on the device (pretrain.py)."""
    _, module, model_class = UPSTREAM[case.run.arch]
    model_cls = getattr(importlib.import_module(module), model_class)
    loss_cls = importlib.import_module("models.losses").ACTLossHead
    model_cfg = {
        **case.arch_cfg.model_dump(exclude={"name", "loss_type", "conv_dtype", "conv_impl"}),  # upstream's field names
        "seq_len": SEQ_LEN,
        "vocab_size": VOCAB,
        "num_puzzle_identifiers": case.num_puzzle_identifiers,
        "causal": False,
        "forward_dtype": "bfloat16" if case.device.type == "cuda" else "float32",
    }

    def build(batch_size: int, compiled: bool) -> torch.nn.Module:
        torch.manual_seed(case.run.seed)
        with torch.device(case.device):
            model = loss_cls(model_cls({**model_cfg, "batch_size": batch_size}), loss_type=case.arch_cfg.loss_type)
        if not compiled:
            return model
        return torch.compile(model, dynamic=False) if case.run.arch == "urm" else torch.compile(model)

    return build


def _upstream_train(case: Case, data: Path, build, make_optimizers, compiled: bool) -> tuple[float, int | None, int]:
    _fresh(case.device)
    run = case.run
    batches = _upstream_batches(case, data)
    model = build(run.global_batch_size, compiled)
    optimizers, ema = make_optimizers(model)
    state: dict[str, Any] = {"carry": None}

    def step(i: int) -> None:
        _upstream_train_batch(model, optimizers, state, batches[i], run, case.device)
        if ema is not None:
            ema.update(model)

    rate, peak = _rate(step, run.global_batch_size, case, case.warmup, case.steps)
    if compiled:
        _profile(step, case, "upstream", case.warmup + case.steps)
    return rate, peak, sum(p.numel() for p in model.parameters())


def _upstream_evaluate(case: Case, build) -> tuple[float, int | None]:
    _fresh(case.device)
    model = build(case.eval_batch, case.compile)
    inputs, labels, ids = _eval_arrays(case)
    B = case.eval_batch
    return _rate(
        lambda i: _upstream_eval_batch(model, inputs, labels, ids, slice(i * B, (i + 1) * B), case.device),
        B,
        case,
        1,
        case.eval_batches,
    )


def _upstream_train_batch(
    model: torch.nn.Module,
    optimizers: list[tuple[torch.optim.Optimizer, float]],
    state: dict[str, Any],
    batch: dict[str, torch.Tensor],
    run: RunConfig,
    device: torch.device,
) -> None:
    # TRM pretrain.py `train_batch` at world size 1 (URM's is the same without accumulation); the lr schedule
    # is a constant here (its cosine formula is a few float operations on the host)
    batch = {k: v.to(device) for k, v in batch.items()}
    if state["carry"] is None:
        with torch.device(device):
            state["carry"] = model.initial_carry(batch)
    state["carry"], loss, metrics, _, _ = model(carry=state["carry"], batch=batch, return_keys=[])
    ((1 / run.global_batch_size) * loss).backward()
    for optim, base_lr in optimizers:
        for group in optim.param_groups:
            group["lr"] = base_lr
        optim.step()
        optim.zero_grad()
    keys = sorted(metrics)
    torch.stack([metrics[k] for k in keys]).cpu().numpy()  # rank 0 reduces the metrics on the host every step


def _upstream_eval_batch(model, inputs: np.ndarray, labels: np.ndarray, ids: np.ndarray, rows: slice, device) -> None:
    # TRM pretrain.py `evaluate`: inference mode, a fresh carry per batch, steps until every row has halted
    model.eval()
    batch = _upstream_batch(inputs[rows], labels[rows], ids[rows])
    with torch.inference_mode():
        batch = {k: v.to(device) for k, v in batch.items()}
        with torch.device(device):
            carry = model.initial_carry(batch)
        while True:
            carry, _, _, _, all_finish = model(carry=carry, batch=batch, return_keys={"preds", "q_halt_logits"})
            if all_finish:
                break


def _upstream_optimizer_maker(case: Case, checkout: Path, notes: list[str]) -> Callable[[torch.nn.Module], Any]:
    """model -> ([(optimizer, base lr)], EMA helper or None), as TRM/URM pretrain.py `create_model` and its loop."""
    run = case.run
    sparse_sgd = importlib.import_module("models.sparse_embedding").CastedSparseEmbeddingSignSGD_Distributed
    adam_atan2 = _adam_atan2(case.device, notes) if run.optimizer == "adam_atan2" else None
    muon = importlib.import_module("models.muon").Muon if run.optimizer == "muon" else None
    ema_helper = _ema_helper(checkout) if run.ema else None

    def make(model: torch.nn.Module) -> tuple[list[tuple[torch.optim.Optimizer, float]], Any]:
        # the sparse SignSGD on the puzzle-embedding buffers, then AdamATan2 on every parameter, or URM's Muon on
        # the 2-D parameters with its internal AdamW for the rest (URM pretrain.py, use_muon)
        sparse = sparse_sgd(
            model.model.puzzle_emb.buffers(), lr=0, weight_decay=run.puzzle_emb_weight_decay, world_size=1
        )
        params = list(model.parameters())
        if muon is not None:
            dense = muon(
                [
                    {"params": [p for p in params if p.ndim == 2], "use_muon": True, "lr": 1e-4},
                    {
                        "params": [p for p in params if p.ndim != 2],
                        "use_muon": False,
                        "lr": 1e-4,
                        "weight_decay": 0.1,
                        "adamw_betas": (0.9, 0.95),
                        "adamw_eps": 1e-8,
                    },
                ]
            )
        else:
            dense = adam_atan2(params, lr=0, weight_decay=run.weight_decay, betas=(run.beta1, run.beta2))
        ema = None
        if ema_helper is not None:
            ema = ema_helper(mu=run.ema_rate)
            ema.register(model)
        return [(sparse, run.puzzle_emb_lr), (dense, run.lr)], ema

    return make


def _adam_atan2(device: torch.device, notes: list[str]) -> Callable[..., torch.optim.Optimizer]:
    try:
        from adam_atan2 import AdamATan2  # type: ignore[import-not-found]

        renamed = "_accelerator_graph_capture_health_check"
        if not hasattr(torch.optim.Optimizer, "_cuda_graph_capture_health_check") and hasattr(AdamATan2, renamed):
            # adam-atan2 0.0.3's step calls the name torch 2.11 renamed (AttributeError on the H200, 2026-11-27):
            # the same check under its new name, the package otherwise unmodified
            AdamATan2._cuda_graph_capture_health_check = getattr(AdamATan2, renamed)
            notes.append(f"adam_atan2: Optimizer._cuda_graph_capture_health_check aliased to torch's {renamed}")
        return AdamATan2
    except ImportError:
        fused = device.type == "cuda"
        notes.append(f"adam_atan2 not importable: torch.optim.AdamW ({'fused' if fused else 'foreach'}) in its place")

        def adamw(params, lr: float, weight_decay: float, betas: tuple[float, float]) -> torch.optim.Optimizer:
            return torch.optim.AdamW(
                params, lr=lr, weight_decay=weight_decay, betas=betas, fused=fused or None, foreach=not fused or None
            )

        return adamw


def _ema_helper(checkout: Path) -> type:
    """Upstream's EMAHelper: TRM's models/ema.py, else the class from pretrain.py's syntax tree (URM)."""
    with contextlib.suppress(ModuleNotFoundError):
        return importlib.import_module("models.ema").EMAHelper
    source = (checkout / "pretrain.py").read_text()
    node = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == "EMAHelper")
    namespace: dict[str, Any] = {"nn": torch.nn, "copy": copy}
    exec(compile(ast.Module(body=[node], type_ignores=[]), str(checkout / "pretrain.py"), "exec"), namespace)
    return namespace["EMAHelper"]


def _upstream_batches(case: Case, data: Path) -> list[dict[str, torch.Tensor]]:
    """The training batches arcpipe's trainer reads, as upstream's loader hands them over (CPU, int32)."""
    from arcpipe.data.dataset import load_split

    split = load_split(data, "train")
    micro = case.run.global_batch_size
    plan = plan_pass(split, case.run.seed, 0, 1, micro)
    out = []
    for i in range(case.warmup + case.steps + case.profile):
        examples, puzzles = batch_rows(split, plan, i, micro, case.run.seed, 0)
        rows = collate(split, examples, puzzles)
        out.append({k: torch.from_numpy(v) for k, v in rows.items()})
    if case.device.type == "cuda":
        out = [{k: v.pin_memory() for k, v in b.items()} for b in out]
    return out


def _upstream_batch(inputs: np.ndarray, labels: np.ndarray, ids: np.ndarray) -> dict[str, torch.Tensor]:
    y = labels.astype(np.int32)
    return {
        "inputs": torch.from_numpy(inputs.astype(np.int32)),
        "labels": torch.from_numpy(np.where(y == 0, -100, y)),
        "puzzle_identifiers": torch.from_numpy(ids.astype(np.int32)),
    }


@contextlib.contextmanager
def _upstream_tree(checkout: Path, notes: list[str]) -> Iterator[None]:
    """Import upstream's top-level `models` package from `checkout`; flash-attn stood in by SDPA when missing."""
    saved = {k: sys.modules.pop(k) for k in list(sys.modules) if k == "models" or k.startswith("models.")}
    stubbed = []
    if _flash_attn_version() is None:  # neither flash-attn 3 nor 2: upstream's import of either finds the stand-in
        stub = types.ModuleType("flash_attn")
        stub.flash_attn_func = _flash_attn_func  # type: ignore[attr-defined]
        for name in ("flash_attn_interface", "flash_attn"):
            sys.modules[name] = stub
            stubbed.append(name)
        if re.search(r"^\s*from flash_attn", (checkout / "models" / "layers.py").read_text(), re.MULTILINE):
            notes.append("flash_attn not importable: torch SDPA in its place")
    sys.path.insert(0, str(checkout))
    _forget_dynamo_imports()
    try:
        yield
    finally:
        sys.path.remove(str(checkout))
        for name in [k for k in sys.modules if k == "models" or k.startswith("models.")]:
            del sys.modules[name]
        for name in stubbed:
            del sys.modules[name]
        sys.modules.update(saved)
        _forget_dynamo_imports()


def _forget_dynamo_imports() -> None:
    # dynamo caches the modules its guards import by name (functools.cache): every upstream repository has its own
    # top-level `models`, so a second repository's compiled model would be guarded against the first one's modules
    cached = getattr(torch._dynamo.symbolic_convert, "_import_module", None)
    if cached is not None and hasattr(cached, "cache_clear"):
        cached.cache_clear()


def _flash_attn_version() -> str | None:
    for name in ("flash_attn_interface", "flash_attn"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        return f"{name} {getattr(module, '__version__', '')}".strip()
    return None


def _flash_attn_func(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    # flash-attn's layout (B, S, H, hd) and default scale hd^-0.5, through SDPA's (B, H, S, hd)
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal)
    return out.transpose(1, 2)


def _checkout(folder: Path, arch: str) -> Path | None:
    for name in UPSTREAM[arch][0]:
        if (folder / name / "models" / "layers.py").is_file():
            return (folder / name).resolve()
    return None


def _describe_checkouts(folder: Path) -> list[str]:
    out = []
    for arch in UPSTREAM:
        path = _checkout(folder, arch)
        out.append(f"{arch} {path.name if path else 'missing'}")
    return out


# ----------------------------------------------------------------------------------------------------------------
# data, timing, printing


def _synthetic_dataset(root: Path, case: Case) -> Path:
    """A train split with the recipe's shapes (seq_len, vocab, embedding-table size) and just enough rows.

    Token values do not change the work of a dense model; a quarter of each label row is PAD (ignored), as the
    canvas around a grid is. verify.json records that it was written here, not built and verified.
    """
    micro = case.run.global_batch_size
    num_puzzles = -(-micro * (case.warmup + case.steps + case.profile + 1) // EXAMPLES_PER_PUZZLE)
    n = num_puzzles * EXAMPLES_PER_PUZZLE
    rng = np.random.default_rng(0)
    split = root / "train"
    split.mkdir(parents=True)
    inputs = rng.integers(1, VOCAB, (n, SEQ_LEN), dtype=np.uint8)
    labels = rng.integers(1, VOCAB, (n, SEQ_LEN), dtype=np.uint8)
    labels[:, -SEQ_LEN // 4 :] = 0
    ids = rng.choice(np.arange(1, case.num_puzzle_identifiers), num_puzzles, replace=False).astype(np.int32)
    arrays = {
        "inputs": inputs,
        "labels": labels,
        "puzzle_identifiers": ids,
        "puzzle_indices": np.arange(0, n + 1, EXAMPLES_PER_PUZZLE, dtype=np.int32),
        "group_indices": np.arange(num_puzzles + 1, dtype=np.int32),
    }
    for key, value in arrays.items():
        np.save(split / f"all__{key}.npy", value)
    meta = {
        "pad_id": 0,
        "ignore_label_id": 0,
        "blank_identifier_id": 0,
        "vocab_size": VOCAB,
        "seq_len": SEQ_LEN,
        "num_puzzle_identifiers": case.num_puzzle_identifiers,
        "total_groups": num_puzzles,
        "mean_puzzle_examples": float(EXAMPLES_PER_PUZZLE),
        "total_puzzles": num_puzzles,
        "sets": ["all"],
    }
    (split / "dataset.json").write_text(json.dumps(meta))
    (root / "identifiers.json").write_text(json.dumps(["<blank>"]))
    (root / "verify.json").write_text(json.dumps({"ok": True, "note": "synthetic benchmark data (benchmarks/gpu.py)"}))
    return root


def _eval_arrays(case: Case) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = case.eval_batch * (case.eval_batches + 1)
    rng = np.random.default_rng(1)
    inputs = rng.integers(1, VOCAB, (n, SEQ_LEN), dtype=np.uint8)
    labels = rng.integers(1, VOCAB, (n, SEQ_LEN), dtype=np.uint8)
    ids = rng.integers(1, case.num_puzzle_identifiers, n).astype(np.int64)
    return inputs, labels, ids


def _rate(step: Callable[[int], Any], rows: int, case: Case, warmup: int, steps: int) -> tuple[float, int | None]:
    """Examples/s of the median of `steps` timed calls after `warmup` untimed ones (the median: a shared machine's
    stalls do not count), and the peak memory allocated over the timed calls (CUDA). Each call already waits for
    the device (the metrics reach the host), so the synchronisation per call costs nothing extra."""
    for i in range(warmup):
        step(i)
    _sync(case.device)
    if case.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(case.device)
    seconds = []
    for i in range(warmup, warmup + steps):
        started = time.perf_counter()
        step(i)
        _sync(case.device)
        seconds.append(time.perf_counter() - started)
    peak = torch.cuda.max_memory_allocated(case.device) if case.device.type == "cuda" else None
    return rows / statistics.median(seconds), peak


# kernel classes, first match wins (CUDA kernel names: cuBLAS/CUTLASS matrix products, flash or cuDNN attention,
# inductor's generated Triton kernels, eager ATen kernels, optimizer kernels)
_KERNEL_CLASSES = (
    ("attention", re.compile(r"flash|fmha|attention|sdpa|softmax", re.I)),  # first: cuDNN's SDPA kernels say wgmma
    ("matmul", re.compile(r"gemm|cutlass|xmma|nvjet|cublas|sm\d+_.*(hmma|wgmma)", re.I)),
    ("convolution", re.compile(r"conv|depthwise|implicit|winograd", re.I)),
    ("optimizer", re.compile(r"multi_tensor|adam|fused_sgd|foreach", re.I)),
    ("triton (fused)", re.compile(r"^triton_", re.I)),
    ("copy/fill", re.compile(r"copy|memcpy|memset|fill|cat|transpose|index", re.I)),
    ("elementwise/reduce", re.compile(r"elementwise|reduce|vectorized|unrolled", re.I)),
)


def _profile(step: Callable[[int], Any], case: Case, side: str, start: int) -> None:
    """Where the GPU time of `case.profile` compiled steps goes: each kernel class's share of the kernels' time,
    the top kernels, kernels launched per step, and the share of the wall time the GPU ran no kernel."""
    if not case.profile or case.device.type != "cuda":
        return
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    _sync(case.device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        started = time.perf_counter()
        for i in range(start, start + case.profile):
            step(i)
        _sync(case.device)
        wall = time.perf_counter() - started
    kernels = [e for e in prof.key_averages() if e.device_type == DeviceType.CUDA]

    def us(e: Any) -> float:
        return float(getattr(e, "self_device_time_total", 0) or getattr(e, "self_cuda_time_total", 0))

    busy = sum(us(e) for e in kernels)
    if not busy:
        print(f"{'':<22} profile {side}: no CUDA kernels recorded")
        return
    classes: dict[str, float] = {}
    for e in kernels:
        name = next((c for c, pattern in _KERNEL_CLASSES if pattern.search(e.key)), "other")
        classes[name] = classes.get(name, 0.0) + us(e)
    n = case.profile
    print(
        f"{'':<22} profile {side}, {n} compiled steps: {wall / n * 1e3:.1f} ms/step wall, kernels "
        f"{busy / n / 1e3:.1f} ms/step ({busy / 1e6 / wall:.0%} of the wall; the rest is the GPU waiting for the "
        f"host), {sum(e.count for e in kernels) / n:.0f} kernels/step"
    )
    shares = sorted(classes.items(), key=lambda item: -item[1])
    print(f"{'':<24}by class: " + ", ".join(f"{c} {t / busy:.1%}" for c, t in shares))
    for e in sorted(kernels, key=us, reverse=True)[:12]:
        print(f"{'':<24}{us(e) / busy:6.1%} {e.count / n:6.0f}/step {us(e) / max(e.count, 1):8.1f} us  {e.key[:110]}")


def _fresh(device: torch.device) -> None:
    torch._dynamo.reset()  # one compiled step per model; head.step is one code object for every model
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _print(case: Case, row: Row, peak: float | None, named: bool = False) -> None:
    train = train_flops_per_example(case.arch_cfg, SEQ_LEN, VOCAB).total
    evaluation = eval_flops_per_step(case.arch_cfg, SEQ_LEN, VOCAB).total * eval_steps(case.arch_cfg)
    best = row.compiled or row.eager
    speed_up = row.compiled / row.eager if row.compiled and row.eager else None
    print(
        f"{case.name if row.side == 'arcpipe' or named else '':<22} {row.side:<18} {case.run.global_batch_size:>5} "
        f"{row.params / 1e6:>6.2f}M {train / 1e9:>9.2f} {_f(row.eager, 10)} {_f(row.compiled, 9)} "
        f"{_x(speed_up, 8)} {_mfu(best, train, peak)} {_gib(row.train_peak)} | {case.eval_batch:>10} "
        f"{_f(row.evaluation, 9)} {_mfu(row.evaluation, evaluation, peak)} {_gib(row.eval_peak)}"
    )
    for note in row.notes:
        print(f"{'':<22} ({note})")


def _print_ratios(ours: Row, theirs: Row) -> None:
    def ratio(a: float | None, b: float | None, width: int) -> str:
        return _x(a / b if a and b else None, width)

    print(
        f"{'':<22} {'arcpipe / upstream':<18} {'':>5} {'':>7} {'':>9} {ratio(ours.eager, theirs.eager, 10)} "
        f"{ratio(ours.compiled, theirs.compiled, 9)} {'':>8} {'':>6} {'':>6} | {'':>10} "
        f"{ratio(ours.evaluation, theirs.evaluation, 9)}"
    )


def _f(value: float | None, width: int) -> str:
    return f"{value:{width}.1f}" if value is not None else f"{'-':>{width}}"


def _x(value: float | None, width: int) -> str:
    return f"{value:{width - 1}.2f}x" if value is not None else f"{'-':>{width}}"


def _mfu(rate: float | None, flops: int, peak: float | None) -> str:
    return f"{100 * rate * flops / peak:5.1f}%" if rate and peak else f"{'-':>6}"


def _gib(value: int | None) -> str:
    return f"{value / 2**30:6.1f}" if value is not None else f"{'-':>6}"


def _shown(path: Path) -> str:
    path = path.resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


if __name__ == "__main__":
    main()
