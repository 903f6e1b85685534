"""Where a command's CPU goes, the whole machine's: how busy the cores were, and the CPU seconds by kind of process.

    .venv/bin/python benchmarks/ci_cpu.py [--every 2] [--out timeline.json] -- bash .ci/run

Runs the command and samples /proc every --every seconds: the machine's busy share (1 - idle and iowait over all
time, from /proc/stat) and every process's CPU seconds (utime + stime) with its command line. A process is counted
from its first sample to its last, so one that lives less than a sample is missed and the last sample's CPU of each
is what is kept (a long run's total is within a few percent of process accounting's), with its last command line (a
process that exec()s another program, as `arcpipe.launch` does, counts as the program it became). Processes running
before the command started are left out (their CPU since boot is no part of it). Prints the command's wall time, the
busy share per minute, and the CPU seconds by kind: an arcpipe subcommand, a Snakemake run or a cluster job's
Snakemake, a pytest worker, Snakemake's rule scripts, and the rest by executable.

Unlike `time` around the command, this counts CPU spent outside the command's process tree: a SLURM job runs under
slurmd, not under the test that submitted it. On 2026-11-28 `time` said CI kept 79% of 2 cores busy; /proc/stat said
98%: the rest was the SLURM lab's jobs and the fake cluster's pods (benchmarks/RESULTS.md).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def busy_jiffies() -> tuple[int, int]:
    """(all, idle + iowait) jiffies since boot, from /proc/stat's cpu line."""
    fields = [int(value) for value in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return sum(fields), fields[3] + fields[4]


def processes() -> dict[str, tuple[float, str]]:
    """{pid-starttime: (CPU seconds, command line)} of every process now."""
    found = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone meanwhile
            continue
        found[f"{pid}-{stat[19]}"] = ((int(stat[11]) + int(stat[12])) / TICK, argv.strip()[:400])
    return found


def _arcpipe(rest: list[str]) -> str:
    """`arcpipe SUBCOMMAND`, the group's subcommand too where it has one (`arcpipe ttt job`)."""
    return "arcpipe " + " ".join(rest[:2] if rest[:1] in (["ttt"], ["model"], ["data"], ["config"]) else rest[:1])


def kind(argv: str) -> str:
    """A process's kind, from its command line: what the tables group by."""
    words = argv.split()
    if not words:
        return "(no command line)"
    names = [word.rsplit("/", 1)[-1] for word in words[:4]]
    if names[0].startswith("python") and len(words) > 2 and words[1] == "-m":  # python -m module ...
        module = words[2]
        if module == "snakemake":
            return "snakemake job (python -m snakemake: a cluster job or group)"
        if module in ("arcpipe", "arcpipe.cli", "arcpipe.launch"):
            rest = words[3:]
            if module == "arcpipe.launch" and "--" in rest:
                rest = rest[rest.index("--") + 2 :]
            return _arcpipe(rest)
        if module == "pytest":
            return "pytest (the main process)"
        return f"python -m {module}"
    for i, name in enumerate(names):
        if name == "arcpipe":
            return _arcpipe(words[i + 1 :])
        if name == "snakemake":
            return "snakemake"
        if name == "pytest":
            return "pytest (the main process, or the numeric pass)"
        if script := re.fullmatch(r"tmp\w+\.(\w+)\.py", name):
            return "snakemake rule script " + script.group(1)
    if "exec(eval(sys.stdin.readline()))" in argv:  # execnet's bootstrap: a pytest-xdist worker
        return "pytest-xdist worker (its tests in-process)"
    return names[0][:40]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--every", type=float, default=2.0, help="seconds between samples")
    parser.add_argument("--out", type=Path, help="write the samples as JSON here")
    parser.add_argument("--top", type=int, default=25, help="kinds to print")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command after --")
    before = set(processes())
    seen: dict[str, list] = {}  # key -> [cpu, argv]
    busy: list[tuple[float, float]] = []
    started = time.monotonic()
    last = busy_jiffies()
    child = subprocess.Popen(command)
    while True:
        ended = child.poll() is not None
        if not ended:
            time.sleep(args.every)
        now = busy_jiffies()
        total, idle = now[0] - last[0], now[1] - last[1]
        last = now
        busy.append((time.monotonic() - started, 1 - idle / max(total, 1)))
        for key, (cpu, argv) in processes().items():
            if key in before:
                continue
            seen[key] = [cpu, argv or seen.get(key, [0, ""])[1]]  # the latest: an exec() changes the command line
        if ended:
            break
    wall = time.monotonic() - started
    by_kind: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
    for cpu, argv in seen.values():
        group = by_kind[kind(argv)]
        group[0] += 1
        group[1] += cpu
    counted = sum(cpu for _, cpu in by_kind.values())
    mean_busy = sum(share for _, share in busy) / max(len(busy), 1)
    print(f"ci_cpu: {' '.join(command)}: exit {child.returncode}, {wall:.0f} s wall, {os.cpu_count()} cores")
    print(f"ci_cpu: cores busy {100 * mean_busy:.0f}% on average; {counted:.0f} CPU-s in processes it started")
    per_minute: dict[int, list[float]] = collections.defaultdict(list)
    for at, share in busy:
        per_minute[int(at // 60)].append(share)
    print("busy % per minute: " + " ".join(f"{100 * sum(v) / len(v):.0f}" for _, v in sorted(per_minute.items())))
    print(f"{'CPU-s':>8} {'share':>6} {'procs':>6} {'CPU-s each':>10}  kind")
    for name, (count, cpu) in sorted(by_kind.items(), key=lambda item: -item[1][1])[: args.top]:
        print(f"{cpu:8.0f} {100 * cpu / max(counted, 1):5.1f}% {count:6d} {cpu / count:10.1f}  {name}")
    if args.out:
        processes_out = [{"cpu_s": cpu, "argv": argv} for cpu, argv in seen.values()]
        args.out.write_text(json.dumps({"wall_s": wall, "busy": busy, "processes": processes_out}))
    sys.exit(child.returncode)


if __name__ == "__main__":
    main()
