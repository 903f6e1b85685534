"""The workflow's driver (the Snakemake process that plans and submits): who holds `.snakemake/locks`, whether it
is still alive, and taking over from a dead one, so that the same command run again simply continues.

A driver killed with SIGKILL (an evicted ICE driver pod, a rebooted login node) leaves Snakemake's lock behind,
and its cluster jobs keep running. Run again, Snakemake would stop with a LockException, and after a manual
`--unlock` it would submit the unfinished jobs a second time while the first ones still train. Instead:

* every driver writes `.snakemake/arcpipe-driver.json` (host, boot id, pid and the pid's start time) when it
  starts, and touches it every HEARTBEAT_S seconds from a daemon thread; at onstart it adds its executor and the
  commands that cancel and query its jobs;
* a new driver that finds the lock decides whether the holder is alive:
  - same host (same hostname and boot id): alive if a process with that pid and that start time exists. This
    is exact; a reused pid has another start time;
  - another host (a re-created driver pod): alive if its heartbeat is younger than 3 x HEARTBEAT_S.
  An alive holder is left alone (Snakemake's LockException follows, with our line naming the holder);
* a dead holder's jobs that still run (SLURM: every job whose working directory is this workflow's; ICE: the
  Jobs profiles/ice/submit.py recorded in `.snakemake/arcpipe-submitted`) are cancelled through the dead
  driver's own executor (scancel, or the ICE profile's cancel command) and waited for until the scheduler no
  longer runs them; only then is the stale lock removed, and Snakemake re-runs them
  (`rerun-incomplete`), from their side checkpoints. So no two jobs ever train the same segment at once.

A killed driver also leaves Snakemake's incomplete markers on the outputs of the jobs it was running. For most
outputs that is right: the job runs again. But Snakemake (9.27) mis-plans one case: when the marked output is an
`ancient()` input of another job and is on disk, the plan holds only the marked job, and the run ends there,
"successfully", with nothing else done (a run's resolved config, which training takes as `ancient()`, is such an
output). The outputs in ATOMIC_OUTPUTS are written by a temporary file and a rename, and Snakemake deletes a job's
outputs before the job starts, so one on disk is the killed job's own whole output: `complete_atomic_outputs`
removes their markers at a driver's start, when no other driver runs, and the same command then continues.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shlex
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from arcpipe import paths

RECORD = Path(".snakemake") / "arcpipe-driver.json"
LOCKS = Path(".snakemake") / "locks"
LEDGER = Path(".snakemake") / "arcpipe-submitted"  # profiles/ice/submit.py appends "<time> <namespace>/<job>"
INCOMPLETE = Path(".snakemake") / "incomplete"  # Snakemake's markers: one file per output, its path in urlsafe base64
# outputs their rules write atomically (arcpipe.config.write_yaml_atomic): write_run_config, write_eval_config
ATOMIC_OUTPUTS = (paths.RUN_CONFIG.format(run="*"), paths.EVAL_CONFIG.format(run="*"))
HEARTBEAT_S = float(os.environ.get("ARCPIPE_DRIVER_HEARTBEAT_S", "30"))
CANCEL_WAIT_S = 600  # a cancelled job's processes must be gone before its segment is submitted again


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat), None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])  # the comm field may hold spaces and ')'


def identity() -> dict[str, Any]:
    return {
        "host": socket.gethostname(),
        "boot_id": _boot_id(),
        "pid": os.getpid(),
        "start_ticks": _start_ticks(os.getpid()),
    }


def _write(workdir: Path, record: dict[str, Any]) -> None:
    path = workdir / RECORD
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(record, indent=1))
    tmp.replace(path)


def read_record(workdir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((workdir / RECORD).read_text())
    except (OSError, ValueError):
        return None


def register(workdir: Path) -> None:
    """Record this process as the driver and keep its heartbeat going (a daemon thread; dies with the process)."""
    record = {**identity(), "started": time.time(), "executor": None}
    _write(workdir, record)

    def beat() -> None:
        path = workdir / RECORD
        while True:
            time.sleep(HEARTBEAT_S)
            with contextlib.suppress(OSError):
                os.utime(path)

    threading.Thread(target=beat, name="arcpipe-driver-heartbeat", daemon=True).start()


def record_executor(workdir: Path, name: str | None, cancel: str | None, status: str | None) -> None:
    """onstart: how this driver's jobs are cancelled and queried, for whoever takes over after it."""
    record = read_record(workdir) or identity()
    if record.get("pid") != os.getpid():
        return  # not ours (a dry run, or a driver that never registered)
    _write(workdir, {**record, "executor": name, "cancel": cancel, "status": status})


def holder_alive(record: dict[str, Any], workdir: Path) -> tuple[bool, str]:
    """(alive, how we know) for the driver a record describes."""
    me = identity()
    who = f"pid {record.get('pid')} on host {record.get('host')}"
    if record.get("host") == me["host"] and record.get("boot_id") == me["boot_id"]:
        ticks = _start_ticks(int(record.get("pid", 0)))
        if ticks is not None and ticks == record.get("start_ticks"):
            return True, f"{who} is running"
        return False, f"{who}: no such process since it started (same host and boot)"
    try:
        age = time.time() - (workdir / RECORD).stat().st_mtime
    except OSError:
        return False, f"{who}: no heartbeat file"
    if age < 3 * HEARTBEAT_S:
        return True, f"{who} (another host) beat {age:.0f} s ago"
    return False, f"{who} (another host): last heartbeat {age:.0f} s ago (> 3 x {HEARTBEAT_S:.0f} s)"


def orphan_candidates(record: dict[str, Any], workdir: Path) -> list[str]:
    """Jobs the dead driver may have left running: on SLURM, every job whose working directory is this workflow's
    (no other driver is alive here); on ICE, what its submit program recorded in `.snakemake/arcpipe-submitted`
    since it started. (Snakemake's own incomplete markers cannot tell: the job wrapper inside each cluster job
    rewrites them without the external id.)"""
    executor = record.get("executor")
    if executor == "slurm":
        out = subprocess.run(["squeue", "-h", "-o", "%i|%Z"], capture_output=True, text=True, timeout=60).stdout
        here = workdir.resolve()
        return sorted(i for i, _, d in (line.partition("|") for line in out.splitlines()) if Path(d).resolve() == here)
    return _unfinished(workdir / LEDGER, float(record.get("started") or 0) - 60)


def _unfinished(ledger: Path, since: float) -> list[str]:
    """The Jobs submitted since `since` (a time) that the ledger does not record as finished: submit.py appends
    "<time> <namespace>/<job>", status.py "<time> <namespace>/<job> <success|failed>" once it sees one end."""
    try:
        lines = ledger.read_text().splitlines()
    except OSError:
        return []
    submitted, finished = set(), set()
    for fields in (line.split() for line in lines):
        if len(fields) == 3:
            finished.add(fields[1])
        elif len(fields) == 2 and _time(fields[0]) >= since:
            submitted.add(fields[1])
    return sorted(submitted - finished)


def _time(field: str) -> float:
    """A ledger line's time; an unreadable one (garbled by a crash) counts as this run's: a Job left running costs
    more than deleting one that has ended."""
    try:
        return float(field)
    except ValueError:
        return float("inf")


def cancel_leftovers(workdir: Path) -> str | None:
    """onerror (a failed or interrupted run): cancel what this driver submitted that may still run; the line to
    print, or None when nothing was left. Snakemake cancels its active jobs on Ctrl-C, but a job whose status is
    being queried at that moment is missing from its list (snakemake-interface-executor-plugins' RemoteExecutor
    takes every job out of the list while it checks them), so such a job would train on, unseen and paid for, until
    its time limit. A run that failed without Ctrl-C waited for its running jobs, so this finds nothing then."""
    record = read_record(workdir)
    if record is None or record.get("pid") != os.getpid():
        return None  # not the driver (a dry run, a job inside the cluster)
    executor = record.get("executor")
    if executor != "slurm" and not (executor == "cluster-generic" and record.get("cancel")):
        return None
    try:
        ids = orphan_candidates(record, workdir)  # SLURM: what squeue lists here; ICE: the ledger's unfinished Jobs
        if ids:
            _cancel(record, ids)  # the ICE profile's cancel.sh deletes without waiting and returns at once
    except (OSError, subprocess.SubprocessError) as err:
        return f"could not cancel this driver's jobs that may still run ({err}); look for them with your scheduler"
    if not ids:
        return None
    return (
        f"cancelled the {len(ids)} {executor} job(s) of this run not seen to end (Snakemake's own cancel misses a job "
        f"whose status it is checking): {', '.join(ids)}"
    )


def _cancel(record: dict[str, Any], ids: list[str]) -> None:
    """Cancel jobs through the driver's executor: scancel on SLURM, else the profile's cancel command."""
    argv = ["scancel"] if record.get("executor") == "slurm" else shlex.split(record["cancel"])
    subprocess.run([*argv, *ids], check=False, timeout=60)


def _slurm_running(ids: list[str]) -> list[str]:
    out = subprocess.run(
        ["squeue", "-h", "-o", "%i", "-j", ",".join(ids)], capture_output=True, text=True, timeout=60
    ).stdout
    return [i for i in out.split() if i in ids]


def _status_running(status: str) -> Callable[[list[str]], list[str]]:
    def running(ids: list[str]) -> list[str]:
        left = []
        for job_id in ids:
            out = subprocess.run(
                f"{status} {shlex.quote(job_id)}", shell=True, capture_output=True, text=True, timeout=60
            ).stdout
            if out.strip() == "running":
                left.append(job_id)
        return left

    return running


def cancel_and_wait(record: dict[str, Any], ids: list[str]) -> str:
    """Cancel the dead driver's unfinished jobs through its executor; wait until none runs. Returns what was done."""
    executor = record.get("executor")
    if executor in (None, "local", "dryrun", "touch"):
        return "no cluster job to cancel"
    if executor == "slurm":
        running = _slurm_running
    elif executor == "cluster-generic" and record.get("cancel") and record.get("status"):
        running = _status_running(record["status"])
    else:
        raise RuntimeError(
            f"the dead driver used executor {executor!r}, which arcpipe cannot cancel jobs of: cancel {ids} "
            "by hand, then run `snakemake --unlock` and the same command again"
        )
    ids = running(ids) if ids else []
    if ids:
        _cancel(record, ids)
    deadline = time.monotonic() + CANCEL_WAIT_S
    left = running(ids)
    while left and time.monotonic() < deadline:
        time.sleep(2)
        left = running(ids)
    if left:
        raise RuntimeError(f"jobs {left} of the dead driver still run {CANCEL_WAIT_S} s after cancelling them")
    if not ids:
        return f"none of its {executor} jobs was still running"
    return f"cancelled its {len(ids)} unfinished {executor} job(s) ({', '.join(ids)}) and waited until they ended"


def take_over(workdir: Path) -> tuple[bool, list[str]]:
    """At a driver's start: (may this process drive, lines to print). Clears a dead driver's lock (module doc)."""
    locks = [p for p in (workdir / LOCKS).glob("*.lock")] if (workdir / LOCKS).is_dir() else []
    if not locks:
        return True, []
    record = read_record(workdir)
    if record is None:
        return False, [
            "the workflow is locked (.snakemake/locks) by a driver that left no arcpipe record; if no other "
            "snakemake runs in this directory, run `snakemake --unlock` and the same command again"
        ]
    alive, how = holder_alive(record, workdir)
    if alive:
        return False, [f"another driver holds the workflow's lock: {how}; wait for it, or stop it"]
    done = cancel_and_wait(record, orphan_candidates(record, workdir))
    for lock in locks:
        lock.unlink(missing_ok=True)
    (workdir / LEDGER).unlink(missing_ok=True)  # all of it ended: the next driver starts a ledger of its own
    return True, [f"took over from a dead driver ({how}): {done}; removed its stale lock"]


def complete_atomic_outputs(workdir: Path) -> list[str]:
    """Remove the incomplete markers of ATOMIC_OUTPUTS that are on disk and parse (module doc); call it only as the
    driver that may drive (take_over). Returns their paths."""
    import yaml

    if not (workdir / INCOMPLETE).is_dir():
        return []
    marked = []
    for pattern in ATOMIC_OUTPUTS:
        for path in sorted(workdir.glob(pattern)):
            name = path.relative_to(workdir).as_posix()
            marker = workdir / INCOMPLETE / base64.urlsafe_b64encode(name.encode()).decode()
            if not marker.is_file():
                continue
            try:
                yaml.safe_load(path.read_text())
            except (OSError, yaml.YAMLError):
                continue  # not whole after all: Snakemake writes it again
            marker.unlink()
            marked.append(name)
    return marked
