"""What the follower pods of a multi-node ICE job run, planned from jobscripts Snakemake really wrote.

Snakemake submits a group of chained multi-node jobs (and one single-node job in it) through cluster-generic to a
submit command that runs `submit.py --print` on the jobscript, as the ICE profile would while the job's tmp dir
exists. The rendered follower script then runs here as pod 1 would.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from clusterlib import ROOT, base_env, snakemake

pytestmark = pytest.mark.cluster
spec = importlib.util.spec_from_file_location("ice_submit", ROOT / "profiles/ice/submit.py")
submit = importlib.util.module_from_spec(spec)
spec.loader.exec_module(submit)

SNAKEFILE = """
def previous(wildcards):
    i = int(wildcards.i)
    return f"out/step{i - 1}.txt" if i > 1 else "data.txt"


rule all:
    input: "out/step3.txt", "out/note.txt", "out/twin_a.txt", "out/twin_b.txt"


rule step:  # a chain of multi-node jobs in one group, like train_segment's segments
    input: previous
    output: "out/step{i}.txt"
    log: "logs/step{i}.log"
    group: "chain"
    threads: 3
    resources: nodes=2, runtime=7
    shell: "echo \\"{wildcards.i} $OMP_NUM_THREADS {resources.runtime}\\" >> trace.txt; touch {output} 2>> {log}"


rule note:  # one node, same group: pod 0 runs it, the followers do not
    input: "out/step1.txt"
    output: "out/note.txt"
    group: "chain"
    shell: "echo note >> trace.txt; touch {output}"


rule seed:  # one node; the twins below depend on it, so all three form one group job
    input: "data.txt"
    output: "out/seed.txt"
    group: "twins"
    shell: "touch {output}"


rule twin:  # two multi-node jobs of one group that could start together: refused
    input: "out/seed.txt"
    output: "out/twin_{x}.txt"
    group: "twins"
    resources: nodes=2
    shell: "touch {output}"
"""


def test_followers_run_the_groups_multi_node_commands_in_order(tmp_path: Path) -> None:
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    (tmp_path / "data.txt").write_text("1\n")
    submit_sh = tmp_path / "submit.sh"  # render, keep the result, then report a job id; status says it failed
    submit_sh.write_text(
        "#!/bin/sh\n"
        'out=$(mktemp -p "$PWD" rendered.XXXXXX)\n'
        f'{sys.executable} {ROOT / "profiles/ice/submit.py"} --print "$1" > "$out.yaml" 2> "$out.err"\n'
        "echo fake-1\n"
    )
    status = tmp_path / "status.sh"
    status.write_text("#!/bin/sh\necho failed\n")
    for script in (submit_sh, status):
        script.chmod(0o755)
    args = ["--executor", "cluster-generic", "--cluster-generic-submit-cmd", str(submit_sh)]
    args += ["--cluster-generic-status-cmd", str(status), "--jobs", "2", "--latency-wait", "3", "--keep-going"]
    done = snakemake(args, tmp_path, base_env(), timeout_s=240)
    assert done.returncode == 1, done.stdout[-3000:]  # the stand-in status fails every job

    rendered = {
        p: (Path(f"{p}.yaml").read_text(), Path(f"{p}.err").read_text()) for p in tmp_path.glob("rendered.??????")
    }
    assert len(rendered) == 2, done.stdout[-3000:]
    [(chain_yaml, _)] = [v for v in rendered.values() if "arcpipe/group: chain" in v[0]]
    [(_, twins_err)] = [v for v in rendered.values() if not v[0]]
    assert "twin {'x': 'a'}, twin {'x': 'b'}" in twins_err and "could run in any order" in twins_err

    job, service = yaml.safe_load_all(chain_yaml)
    assert job["spec"]["completionMode"] == "Indexed" and service["kind"] == "Service"
    _, _, _, _, pod0, follower = job["spec"]["template"]["spec"]["containers"][0]["command"]
    assert "-m snakemake" in pod0 and "snakemake" not in follower
    assert follower.count("run_shell 3 ") == 3 and "echo note" not in follower

    # run it as pod 1 would: each step after the step before it, with Snakemake's thread variables and
    # resources; it waits for each step's input (here the follower itself touches them)
    env = {**os.environ, "JOB_COMPLETION_INDEX": "1"}
    ran = subprocess.run(["/bin/bash", "-c", follower], env=env, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    threads = min(3, os.cpu_count() or 1)
    assert (tmp_path / "trace.txt").read_text().splitlines() == [f"{i} {threads} 7" for i in (1, 2, 3)]
    assert "follower 1: rule step (i=1)" in ran.stderr


def test_a_follower_fails_when_an_input_never_appears(tmp_path: Path) -> None:
    job = {
        "rule": "r",
        "jobid": 0,
        "wildcards": {},
        "input": ["missing.txt"],
        "output": [],
        "threads": 1,
        "tmpdir": None,
        "nodes": 2,
        "shellcmd": "echo ran > ran.txt",
    }
    jobscript = f"#!/bin/sh\ncd {tmp_path} && /py -m snakemake --latency-wait 1 --mode 'remote' && exit 0 || exit 1\n"
    script = submit.follower_script(jobscript, [job])
    ran = subprocess.run(
        ["/bin/bash", "-c", script],
        env={**os.environ, "JOB_COMPLETION_INDEX": "1"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert ran.returncode != 0 and "missing.txt missing after the latency wait" in ran.stderr
    assert not (tmp_path / "ran.txt").exists()
