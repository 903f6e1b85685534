#!/usr/bin/env python3
"""A stand-in for `kubectl` that runs Jobs as local processes: enough of the API for profiles/ice's programs.

    FAKE_KUBECTL_STATE=/tmp/k8s fake_kubectl.py create -f - -o json < job.json
    fake_kubectl.py get job NAME -n NS -o json
    fake_kubectl.py delete job NAME... -n NS --ignore-not-found --wait=false

Each pod (one per completion index) is a detached process group running the container's command with only the
container's env (plus PATH/HOME/LANG/TMPDIR of this process, standing in for the image), `secretKeyRef` values
from the JSON file FAKE_KUBECTL_SECRETS ({"secret": {"key": "value"}}), JOB_COMPLETION_INDEX for Indexed Jobs
and `timeout` for activeDeadlineSeconds. There is no DNS, so ARCPIPE_MASTER_ADDR becomes 127.0.0.1 and
ARCPIPE_MASTER_PORT a free port. FAKE_KUBECTL_FAIL_EVERY=N makes every Nth `get` fail like an unreachable API
server, FAKE_KUBECTL_GET_DELAY_S=S every `get` take S seconds (a file get-busy-PID exists meanwhile). Everything
(objects, pod logs, exit codes, the call log) lives under FAKE_KUBECTL_STATE.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

STATE = Path(os.environ.get("FAKE_KUBECTL_STATE", "/tmp/fake-kubectl"))
IMAGE_ENV = ("PATH", "HOME", "LANG", "TMPDIR", "VIRTUAL_ENV")
MARKER = "FAKE_KUBECTL_POD"  # every process of a pod inherits it: how delete finds them all


def main(argv: list[str]) -> int:
    STATE.mkdir(parents=True, exist_ok=True)
    with open(STATE / "calls.log", "a") as calls:
        calls.write(json.dumps(argv) + "\n")
    if not argv:
        return _error("no command")
    verb, rest = argv[0], argv[1:]
    if verb == "create":
        return _create(rest)
    if verb == "get":
        return _get(rest)
    if verb == "delete":
        return _delete(rest)
    if verb == "_pod":
        return _run_pod(rest[0], rest[1], int(rest[2]))
    if verb == "_kill-all":  # test teardown: every pod process of this state directory
        print(len(kill_pods("", "", prefix=True)))
        return 0
    return _error(f'unknown command "{verb}" for "kubectl"')


def _create(args: list[str]) -> int:
    if args[:2] != ["-f", "-"]:
        return _error("fake kubectl only supports create -f -")
    obj = json.loads(sys.stdin.read())  # JSON is YAML: submit.py sends JSON
    kind, meta = obj["kind"], obj["metadata"]
    ns, name = meta.get("namespace", "default"), meta["name"]
    path = _path(ns, kind, name)
    if path.exists():
        return _error(f'Error from server (AlreadyExists): {kind.lower()}s "{name}" already exists')
    meta["uid"] = str(uuid.uuid4())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=1))
    if kind == "Job":
        spec = obj["spec"]
        for index in range(spec.get("completions", 1) if spec.get("completionMode") == "Indexed" else 1):
            pod = subprocess.Popen(
                [sys.executable, __file__, "_pod", ns, name, str(index)],
                start_new_session=True,  # its own process group: delete kills the whole pod
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            _pod_dir(ns, name).mkdir(parents=True, exist_ok=True)
            (_pod_dir(ns, name) / f"{index}.pid").write_text(str(pod.pid))
    print(json.dumps(obj))
    return 0


def _get(args: list[str]) -> int:
    every = int(os.environ.get("FAKE_KUBECTL_FAIL_EVERY", "0"))
    if every:
        counter = STATE / "get-count"
        count = int(counter.read_text()) + 1 if counter.exists() else 1
        counter.write_text(str(count))
        if count % every == 0:
            return _error("Unable to connect to the server: net/http: TLS handshake timeout")
    kind, name, ns = args[0], args[1], _option(args, "-n", "default")
    if kind not in ("job", "jobs"):
        return _error("fake kubectl only supports get job")
    delay = float(os.environ.get("FAKE_KUBECTL_GET_DELAY_S", "0"))
    if delay:  # a slow API server; the file says a `get` is under way
        busy = STATE / f"get-busy-{os.getpid()}"
        busy.write_text(name)
        time.sleep(delay)
        busy.unlink()
    path = _path(ns, "Job", name)
    if not path.exists():
        return _error(f'Error from server (NotFound): jobs.batch "{name}" not found')
    job = json.loads(path.read_text())
    job["status"] = _job_status(ns, name, job["spec"])
    print(json.dumps(job))
    return 0


def _delete(args: list[str]) -> int:
    kind, ns = args[0], _option(args, "-n", "default")
    names = [a for a in args[1:] if not a.startswith("-") and a != ns]
    if kind not in ("job", "jobs"):
        return _error("fake kubectl only supports delete job")
    for name in names:
        path = _path(ns, "Job", name)
        if not path.exists():
            if "--ignore-not-found" in args:
                continue
            return _error(f'Error from server (NotFound): jobs.batch "{name}" not found')
        kill_pods(ns, name)
        uid = json.loads(path.read_text())["metadata"]["uid"]
        path.unlink()
        # garbage collection of owned objects (the multi-node Service)
        for owned in (STATE / ns).glob("*/*.json"):
            refs = json.loads(owned.read_text())["metadata"].get("ownerReferences", [])
            if any(ref.get("uid") == uid for ref in refs):
                owned.unlink()
        print(f'job.batch "{name}" deleted')
    return 0


def kill_pods(ns: str, name: str, prefix: bool = False) -> list[int]:
    """SIGKILL every process of the Job's pods, as a container runtime would: found by the marker env var that
    every descendant inherits (torchrun's workers start their own sessions, so process groups miss them).
    prefix=True: every Job under this state directory whose namespace/name starts with ns/name.

    A runtime kills the whole cgroup at once; a scan of /proc can miss a process forked while it ran (torchrun
    starting a worker on a busy machine), so the scan repeats until one finds nothing left."""
    target = f"{STATE}/{ns}/{name}" if ns else f"{STATE}/"
    marker = f"\0{MARKER}={target}".encode() + (b"" if prefix else b"\0")
    killed: list[int] = []
    for _ in range(50):
        found = []
        for environ in Path("/proc").glob("[0-9]*/environ"):
            try:
                pid = int(environ.parent.name)
                if pid in killed or marker not in b"\0" + environ.read_bytes() + b"\0":
                    continue
                os.kill(pid, signal.SIGKILL)
                found.append(pid)
            except (OSError, ValueError):
                continue
        if not found:
            break
        killed += found
    return killed


def _run_pod(ns: str, name: str, index: int) -> int:
    job = json.loads(_path(ns, "Job", name).read_text())
    spec, pod_spec = job["spec"], job["spec"]["template"]["spec"]
    container = pod_spec["containers"][0]
    env = {k: os.environ[k] for k in IMAGE_ENV if k in os.environ}
    env[MARKER] = f"{STATE}/{ns}/{name}"
    secrets_file = os.environ.get("FAKE_KUBECTL_SECRETS")
    stored = json.loads(Path(secrets_file).read_text()) if secrets_file else {}
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = var["value"]
        elif "secretKeyRef" in var.get("valueFrom", {}):
            ref = var["valueFrom"]["secretKeyRef"]
            if ref["key"] in stored.get(ref["name"], {}):
                env[var["name"]] = stored[ref["name"]][ref["key"]]
            elif not ref.get("optional"):
                return _finish(ns, name, index, 1, f"secret {ref['name']}/{ref['key']} not found")
    if spec.get("completionMode") == "Indexed":
        env["JOB_COMPLETION_INDEX"] = str(index)
        if "ARCPIPE_MASTER_ADDR" in env:
            env["ARCPIPE_MASTER_ADDR"] = "127.0.0.1"
            env["ARCPIPE_MASTER_PORT"] = str(_port_for(ns, name))
    argv = container["command"] + container.get("args", [])
    log_path = _pod_dir(ns, name) / f"{index}.log"
    with open(log_path, "w") as log:
        # volumes are not simulated: the jobscript's own `cd <workdir>` finds the shared directory
        cwd = container.get("workingDir") if os.path.isdir(container.get("workingDir", "")) else None
        proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=log, stderr=log)
        try:
            code = proc.wait(timeout=spec.get("activeDeadlineSeconds"))
        except subprocess.TimeoutExpired:  # the Job's deadline: Kubernetes kills its pods, the Job fails
            kill_pods(ns, name)  # this wrapper does not carry the marker: it survives to record the failure
            proc.wait()
            code = 124
    return _finish(ns, name, index, code, "")


def _finish(ns: str, name: str, index: int, code: int, message: str) -> int:
    if message:
        (_pod_dir(ns, name) / f"{index}.log").write_text(message + "\n")
    (_pod_dir(ns, name) / f"{index}.exit").write_text(str(code))
    return code


def _job_status(ns: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    pods = spec.get("completions", 1) if spec.get("completionMode") == "Indexed" else 1
    codes = [_exit_code(ns, name, i) for i in range(pods)]
    failed = [c for c in codes if c not in (None, 0)]
    if failed:
        reason = "DeadlineExceeded" if 124 in failed else "BackoffLimitExceeded"
        return {"failed": len(failed), "conditions": [{"type": "Failed", "status": "True", "reason": reason}]}
    if all(c == 0 for c in codes):
        return {"succeeded": pods, "conditions": [{"type": "Complete", "status": "True"}]}
    return {"active": sum(c is None for c in codes)}


def _exit_code(ns: str, name: str, index: int) -> int | None:
    """The pod's exit code; None while it runs. A pod whose process is gone without an exit code (killed from
    outside, or it died before it could write one) has failed, as the kubelet reports a lost pod: without this a
    Job would stay active for ever and the driver would wait on it."""
    path = _pod_dir(ns, name) / f"{index}.exit"
    if path.exists():
        return int(path.read_text())
    try:
        pid = int((_pod_dir(ns, name) / f"{index}.pid").read_text())
    except (OSError, ValueError):  # not written yet: the pod is starting
        return None
    if not _alive(pid) and not path.exists():
        return 137
    return None


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")  # a zombie has exited


def _port_for(ns: str, name: str) -> int:
    path = _pod_dir(ns, name) / "port"
    try:  # the first pod picks the port, the others read it
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        while not path.read_text():
            time.sleep(0.01)
        return int(path.read_text())
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    os.write(fd, str(port).encode())
    os.close(fd)
    return port


def _path(ns: str, kind: str, name: str) -> Path:
    return STATE / ns / kind.lower() / f"{name}.json"


def _pod_dir(ns: str, name: str) -> Path:
    return STATE / ns / "pods" / name


def _option(args: list[str], flag: str, default: str) -> str:
    return args[args.index(flag) + 1] if flag in args else default


def _error(message: str) -> int:
    print(message, file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
