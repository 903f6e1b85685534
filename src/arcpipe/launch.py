"""How a training job starts its processes: the torchrun prefix and the executor resources for a run's shape.

`arcpipe.rule_inputs` calls the two public functions with a run's `nodes` and `gpus_per_node` (from config, never
from a profile) and puts the results into the rule:

    resources: **job_resources(run.nodes, run.gpus_per_node)   # gpu, nodes, gpus_per_node, tasks, mpi, ...
    params:    launch=torchrun_launch(run.nodes, run.gpus_per_node)
    shell:     "{params.launch} arcpipe train --config ... > {log} 2>&1"

The launch string must be identical in the driver and inside the cluster job (Snakemake's `params` rerun
trigger compares them), so the default `executor="auto"` gives a string that does not depend on where it runs:
one-node shapes are a plain `torchrun --standalone`, and multi-node shapes call this module, which looks at the
job's environment when it starts and then `exec`s the real launcher:

    python -m arcpipe.launch --nodes 2 --gpus-per-node 4 -- arcpipe train --config ...

* ICE (Indexed Job, rendered by profiles/ice/submit.py): `ARCPIPE_NNODES`, `ARCPIPE_MASTER_ADDR`,
  `ARCPIPE_MASTER_PORT` and Kubernetes' `JOB_COMPLETION_INDEX` give a static torchrun rendezvous; pod 0 hosts it.
* SLURM (`SLURM_JOB_ID` set; the rule runs in the batch script because `mpi` is set): the head node comes from
  `squeue`/`scontrol` and one `srun` task per node runs torchrun with a c10d rendezvous.
* anywhere else (a laptop, CI): one `torchrun --standalone` with the same world size, nodes x processes.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence

log = logging.getLogger(__name__)

EXECUTORS = ("auto", "local", "ice", "slurm")
DEFAULT_PORT = 29500
PORT_SPREAD = 100  # consecutive segments rendezvous on different ports (see torchrun_launch)


def torchrun_launch(nodes: int, gpus_per_node: int, executor: str = "auto", segment: int = 0) -> str:
    """The shell prefix that starts the training command with the run's shape.

    Contract:
    * "" when the run is one process (1 node with 0 or 1 GPU): the command runs as it is.
    * otherwise the prefix ends in `--no-python --` (torchrun) or `--` (this module), so the words after it are
      an executable and its arguments (`arcpipe train ...`), not a Python script path, and torchrun's parser
      never reads them (without `--`, `--run` is an ambiguous abbreviation of torchrun's `--run-path`).
    * processes per node = `gpus_per_node`, or 1 for a CPU run (gloo); world size = nodes x that.
    * `executor="auto"` (use this in rules): the same string on every executor, resolved at run time (see the
      module docstring). "local", "ice", "slurm" give that executor's literal shell form, which only works
      there; they exist for reading and debugging, and the "auto" launcher runs exactly these commands.
    * `segment` (the boundary's index in its run) moves a multi-node rendezvous port by `segment % PORT_SPREAD`:
      the segments of one cluster job run back to back, and a node that starts segment k + 1 first must not
      reach the store of segment k that another node is still closing.
    """
    _check_shape(nodes, gpus_per_node, executor)
    per_node = max(gpus_per_node, 1)
    if nodes * per_node == 1:
        return ""
    if nodes == 1:
        return f"torchrun --standalone --nproc-per-node={per_node} --no-python --"
    if executor == "auto":
        return f"python -m arcpipe.launch --nodes {nodes} --gpus-per-node {gpus_per_node} --segment {segment} --"
    if executor == "local":
        return f"torchrun --standalone --nproc-per-node={nodes * per_node} --no-python --"
    if executor == "ice":
        return (
            f"torchrun --nnodes={nodes} --node-rank=${{JOB_COMPLETION_INDEX:?not in an ICE Indexed Job}} "
            f"--nproc-per-node={per_node} --master-addr=${{ARCPIPE_MASTER_ADDR:?not in an ICE Indexed Job}} "
            f"--master-port=$((${{ARCPIPE_MASTER_PORT:-{DEFAULT_PORT}}} + {segment % PORT_SPREAD})) --no-python --"
        )
    # slurm: the batch script runs on the first node; squeue/scontrol are all the stripped jobstep env allows
    head = (
        '$(scontrol show node "$(scontrol show hostnames "$(squeue -h -j "$SLURM_JOB_ID" -o %N)" | head -n1)"'
        " | sed -n 's/.*NodeAddr=\\([^ ]*\\).*/\\1/p')"
    )
    return (
        f"srun --nodes={nodes} --ntasks={nodes} --ntasks-per-node=1 --kill-on-bad-exit=1 "
        f"torchrun --nnodes={nodes} --nproc-per-node={per_node} --rdzv-backend=c10d "
        f'--rdzv-endpoint="{head}:$((20000 + SLURM_JOB_ID % 20000 + {segment % PORT_SPREAD}))" '
        f'--rdzv-id="$SLURM_JOB_ID-{segment}" --no-python --'
    )


def job_resources(nodes: int, gpus_per_node: int) -> dict[str, int | str | None]:
    """Snakemake resources for a job of this shape, understood by every profile (None: leave unset).

    * `gpu`: GPUs of a one-node job (SLURM `--gpus`, Snakemake's local `--resources gpu=N` limit); 0 for
      multi-node, where `--gpus` would turn `tasks` into `--ntasks-per-gpu` in the slurm plugin.
    * `nodes`, `gpus_per_node`: the shape; ICE's submit.py renders one pod per node with
      `nvidia.com/gpu: gpus_per_node`.
    * `mem_mb`, `shm_mb`: per node (SLURM `--mem`; ICE memory limit = mem_mb + shm_mb, /dev/shm = shm_mb),
      growing with the GPUs on the node: one DataLoader and model replica per GPU process.
    * `tasks`, `mpi`, `slurm_extra`: multi-node SLURM only. `mpi` makes the jobstep run the rule's shell in the
      batch script (no srun wrapper) so `srun` in the launch prefix starts one task per node;
      `--gpus-per-node` asks for the GPUs. They override a profile's `slurm_extra` for these jobs.
    """
    _check_shape(nodes, gpus_per_node, "auto")
    resources: dict[str, int | str | None] = {
        "gpu": gpus_per_node if nodes == 1 else 0,
        "nodes": nodes,
        "gpus_per_node": gpus_per_node,
        "mem_mb": 8000 + 16000 * gpus_per_node,
        "shm_mb": 1000 + 4000 * gpus_per_node,
        "tasks": None,
        "mpi": None,
        "slurm_extra": None,
    }
    if nodes > 1:
        extra = "--ntasks-per-node=1" + (f" --gpus-per-node={gpus_per_node}" if gpus_per_node else "")
        resources.update(tasks=nodes, mpi="srun", slurm_extra=extra)
    return resources


def launch_command(
    nodes: int, gpus_per_node: int, command: Sequence[str], env: dict[str, str] | None = None, segment: int = 0
) -> list[str]:
    """The argv that `python -m arcpipe.launch` execs here, chosen from the job's environment."""
    env = dict(os.environ if env is None else env)
    per_node = max(gpus_per_node, 1)
    if nodes * per_node == 1:
        return list(command)
    if nodes == 1:
        return ["torchrun", "--standalone", f"--nproc-per-node={per_node}", "--no-python", "--", *command]
    executor = detect_executor(env)
    if executor == "ice":
        found = int(env["ARCPIPE_NNODES"])
        if found != nodes:
            raise RuntimeError(f"the Job has {found} pods but the run asks for nodes={nodes}")
        return [
            "torchrun",
            f"--nnodes={nodes}",
            f"--node-rank={env['JOB_COMPLETION_INDEX']}",
            f"--nproc-per-node={per_node}",
            f"--master-addr={env['ARCPIPE_MASTER_ADDR']}",
            f"--master-port={int(env.get('ARCPIPE_MASTER_PORT', DEFAULT_PORT)) + segment % PORT_SPREAD}",
            "--no-python",
            "--",
            *command,
        ]
    if executor == "slurm":
        return _slurm_command(nodes, per_node, command, env, segment)
    log.warning("no cluster around: simulating %d nodes as %d local processes", nodes, nodes * per_node)
    return ["torchrun", "--standalone", f"--nproc-per-node={nodes * per_node}", "--no-python", "--", *command]


def detect_executor(env: dict[str, str]) -> str:
    """'ice' inside an Indexed Job pod, 'slurm' inside a SLURM allocation, else 'local'."""
    if "ARCPIPE_NNODES" in env and "JOB_COMPLETION_INDEX" in env:
        return "ice"
    if "SLURM_JOB_ID" in env:
        return "slurm"
    return "local"


def main(argv: Sequence[str] | None = None) -> None:
    """python -m arcpipe.launch --nodes 2 --gpus-per-node 4 -- arcpipe train --config ..."""
    parser = argparse.ArgumentParser(prog="python -m arcpipe.launch", description=main.__doc__, allow_abbrev=False)
    parser.add_argument("--nodes", type=int)
    parser.add_argument("--gpus-per-node", type=int)
    parser.add_argument("--config", help="read the shape (nodes, gpus_per_node) of --run from this config")
    parser.add_argument("--run", help="the run whose shape --config gives")
    parser.add_argument("--segment", type=int, default=0, help="the boundary's index in its run (rendezvous port)")
    parser.add_argument("--dry-run", action="store_true", help="print the command instead of running it")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the program and its arguments")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to launch after --")
    logging.basicConfig(level=logging.INFO, format="arcpipe.launch: %(message)s")
    if args.config:
        # the rules launch this way: the shape is read when the job starts, so it is no Snakemake param, and
        # changing nodes or gpus_per_node between segments never marks finished segments for a re-run
        from arcpipe.config import load_config

        if not args.run:
            parser.error("--config needs --run")
        cfg = load_config(args.config)
        if args.run not in cfg.runs:
            parser.error(f"{args.config}: no run {args.run!r}")
        args.nodes, args.gpus_per_node = cfg.runs[args.run].nodes, cfg.runs[args.run].gpus_per_node
        from arcpipe.doctor.shm import shm_problem

        problem = shm_problem(cfg.runs[args.run], args.run)  # NCCL would fail minutes later, less clearly
        if problem:
            print(f"arcpipe.launch: error: {problem}", file=sys.stderr)
            sys.exit(2)
    elif args.nodes is None or args.gpus_per_node is None:
        parser.error("give --nodes and --gpus-per-node, or --config and --run")
    argv_out = launch_command(args.nodes, args.gpus_per_node, command, segment=args.segment)
    if args.dry_run:
        print(shlex.join(argv_out))
        return
    _separate_follower_log(os.environ)
    log.info("%s", shlex.join(argv_out))
    sys.stdout.flush()
    os.execvp(argv_out[0], argv_out)  # the launcher takes our PID: signals from the scheduler reach it


def _separate_follower_log(env: Mapping[str, str]) -> None:
    # every pod of an ICE Indexed Job runs the rule's shell, so all of them redirect into the same log file on
    # the shared volume; pods other than 0 write beside it instead (<log>.pod<index>)
    index = env.get("JOB_COMPLETION_INDEX", "0")
    if detect_executor(dict(env)) != "ice" or index == "0" or not os.path.isfile("/proc/self/fd/1"):
        return
    # a log pod 0's job wrapper removed after this pod opened it reads "<path> (deleted)"
    target = os.readlink("/proc/self/fd/1").removesuffix(" (deleted)")
    fd = os.open(f"{target}.pod{index}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    for stream in (1, 2):
        os.dup2(fd, stream)
    os.close(fd)


def _slurm_command(
    nodes: int, per_node: int, command: Sequence[str], env: dict[str, str], segment: int = 0
) -> list[str]:
    job = env["SLURM_JOB_ID"]
    hosts = _run(["scontrol", "show", "hostnames", _run(["squeue", "-h", "-j", job, "-o", "%N"])]).split()
    if len(hosts) != nodes:
        raise RuntimeError(f"SLURM job {job} has nodes {hosts} but the run asks for nodes={nodes}")
    head_addr = _field(_run(["scontrol", "show", "node", hosts[0]]), "NodeAddr")
    # srun no longer inherits --cpus-per-task from the allocation (Slurm >= 22.05) and the jobstep strips
    # SLURM_CPUS_PER_TASK, so read it back from the job record
    cpus = _field(_run(["scontrol", "show", "job", job]), "CPUs/Task")
    port = int(env.get("ARCPIPE_MASTER_PORT", 20000 + int(job) % 20000))  # two jobs may share a head node
    port += segment % PORT_SPREAD
    return [
        "srun",
        f"--nodes={nodes}",
        f"--ntasks={nodes}",
        "--ntasks-per-node=1",
        f"--cpus-per-task={cpus}",
        "--kill-on-bad-exit=1",
        "torchrun",
        f"--nnodes={nodes}",
        f"--nproc-per-node={per_node}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={head_addr}:{port}",
        f"--rdzv-id={job}-{segment}",
        "--no-python",
        "--",
        *command,
    ]


def _run(argv: list[str]) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True, timeout=60).stdout.strip()


def _field(record: str, name: str) -> str:
    # scontrol prints `Key=value` pairs separated by spaces and newlines
    match = re.search(rf"(?:^|\s){re.escape(name)}=(\S+)", record)
    if match is None:
        raise RuntimeError(f"no {name}= in scontrol output: {record[:200]!r}")
    return match.group(1)


def _check_shape(nodes: int, gpus_per_node: int, executor: str) -> None:
    if nodes < 1 or gpus_per_node < 0:
        raise ValueError(f"nodes={nodes}, gpus_per_node={gpus_per_node}: need nodes >= 1 and gpus_per_node >= 0")
    if executor not in EXECUTORS:
        raise ValueError(f"executor={executor!r}: pick one of {', '.join(EXECUTORS)}")


if __name__ == "__main__":
    main()
