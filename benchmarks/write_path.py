"""This machine's write path: 7.3 GB written as two .npy-sized files from two threads, three ways, side by side.

    .venv/bin/python benchmarks/write_path.py [--modes plain,fallocate,direct] [--rows 4050000] [--dir results]

`plain`: ordinary unbuffered writes of 14.7 MB windows (what the builder did before); `fallocate`: the same after
`posix_fallocate` of the final size; `direct`: `O_DIRECT` writes of 4 MiB aligned blocks from a page-aligned
staging buffer (what data/_rowfile.py does, minus the staging copy). Prints wall time and this process's user and
system CPU for each, then the time of an `os.sync()` that follows (dirty pages still to write back).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import mmap
import os
import resource
import tempfile
import time
from pathlib import Path

import numpy as np

ROW = 900
WINDOW = 16384


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--modes", default="plain,fallocate,direct")
    parser.add_argument("--rows", type=int, default=4_050_000, help="rows per file (900 bytes each)")
    parser.add_argument("--dir", type=Path, default=Path("."), help="a folder on the filesystem to measure")
    args = parser.parse_args()
    writers = {"plain": plain, "fallocate": preallocated, "direct": direct}
    with tempfile.TemporaryDirectory(dir=args.dir, prefix=".write-path-") as tmp:
        for mode in args.modes.split(","):
            run(mode, writers[mode], Path(tmp), args.rows)


def plain(path: Path, rows: int, fallocate: bool = False) -> None:
    buf = np.random.default_rng(0).integers(0, 12, size=(WINDOW, ROW), dtype=np.uint8)
    with open(path, "wb", buffering=0) as f:
        if fallocate:
            os.posix_fallocate(f.fileno(), 0, 128 + rows * ROW)
        f.write(b"x" * 128)
        for start in range(0, rows, WINDOW):
            view = memoryview(buf[: min(WINDOW, rows - start)]).cast("B")
            while view:
                view = view[f.write(view) :]


def preallocated(path: Path, rows: int) -> None:
    plain(path, rows, fallocate=True)


def direct(path: Path, rows: int) -> None:
    block = 4 << 20
    stage = mmap.mmap(-1, block)
    staged = np.frombuffer(stage, dtype=np.uint8)
    src = np.random.default_rng(0).integers(0, 12, size=WINDOW * ROW, dtype=np.uint8)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o644)
    fill, written = 128, 0
    for start in range(0, rows, WINDOW):
        n, pos = min(WINDOW, rows - start) * ROW, 0
        while pos < n:
            take = min(block - fill, n - pos)
            staged[fill : fill + take] = src[pos : pos + take]
            fill, pos = fill + take, pos + take
            if fill == block:
                os.write(fd, stage)
                written, fill = written + block, 0
    os.close(fd)
    with open(path, "r+b") as f:
        f.seek(written)
        f.write(staged[:fill].tobytes())


def run(name: str, write, folder: Path, rows: int) -> None:
    paths = [folder / "inputs.npy", folder / "labels.npy"]
    os.sync()
    before, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda p: write(p, rows), paths))
    t1, after = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    os.sync()
    gb = 2 * rows * ROW / 1e9
    print(
        f"{name:<10} {gb:.2f} GB: wall {t1 - t0:6.2f} s, user {after.ru_utime - before.ru_utime:5.2f} s, "
        f"system {after.ru_stime - before.ru_stime:5.2f} s (then sync {time.perf_counter() - t1:5.2f} s)",
        flush=True,
    )
    for p in paths:
        p.unlink()


if __name__ == "__main__":
    main()
