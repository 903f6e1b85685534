"""profiles/ice/submit.py renders Jobs and Services the Kubernetes API accepts, with every size from the job.

Validation uses the `kubernetes` client's models (pydantic, extra fields forbidden, strict types) and a round
trip: a snake_case key or a value of the wrong type would not survive it.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import pytest
from clusterlib import ROOT, SENTINEL
from kubernetes.client import V1Job, V1Service

spec = importlib.util.spec_from_file_location("ice_submit", ROOT / "profiles/ice/submit.py")
submit = importlib.util.module_from_spec(spec)
spec.loader.exec_module(submit)

DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
# what follower_plan.py reports for the jobscript below (planned for real in test_ice_followers.py)
FOLLOWERS = [
    {
        "rule": "train_segment",
        "jobid": 0,
        "wildcards": {"run": "trm-arc1-s0", "epoch": "48"},
        "input": ["results/runs/trm-arc1-s0/config.yaml"],
        "output": ["results/runs/trm-arc1-s0/ckpt/epoch_48.pt"],
        "log": ["logs/train_segment/trm-arc1-s0/epoch_48.log"],
        "threads": 8,
        "tmpdir": "/tmp",
        "nodes": 4,
        "shellcmd": "python -m arcpipe.launch --nodes 4 --gpus-per-node 8 -- arcpipe train --run trm-arc1-s0",
    }
]


def jobscript(rule: str = "train_segment", threads: int = 8, **resources: Any) -> str:
    """A jobscript as Snakemake's cluster-generic executor writes it (properties line and exec line)."""
    props = {
        "type": "single",
        "rule": rule,
        "local": False,
        "wildcards": {"run": "trm-arc1-s0", "epoch": "48"},
        "threads": threads,
        "resources": {"mem_mb": 64000, "shm_mb": 8000, "runtime": 1440, **resources},
        "jobid": 7,
    }
    return (
        "#!/bin/sh\n# properties = " + json.dumps(props) + "\n"
        "cd /workspace/arcpipe && /opt/venv/bin/python -m snakemake --target-jobs 'train_segment:run=trm-arc1-s0'"
        " --mode remote && exit 0 || exit 1\n"
    )


def validate(manifest: dict[str, Any]) -> None:
    model = {"Job": V1Job, "Service": V1Service}[manifest["kind"]]
    parsed = model.model_validate(manifest)
    assert parsed.model_dump(by_alias=True, exclude_none=True, mode="json") == manifest


def container(job: dict[str, Any]) -> dict[str, Any]:
    return job["spec"]["template"]["spec"]["containers"][0]


def env_of(job: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e for e in container(job).get("env", [])}


def test_one_node_cpu_job_is_a_plain_job_off_the_gpu_nodes() -> None:
    [job] = submit.render(jobscript("build_dataset", threads=4, gpu=0, nodes=1, gpus_per_node=0), env={})
    validate(job)
    pod = job["spec"]["template"]["spec"]
    assert "nvidia.com/gpu" not in container(job)["resources"]["limits"]
    assert "nodeSelector" not in pod and "completionMode" not in job["spec"]
    assert container(job)["resources"]["requests"]["cpu"] == "4"


def test_one_node_multi_gpu_job_gets_gpus_memory_shm_deadline_and_secret() -> None:
    [job] = submit.render(jobscript(gpu=8, nodes=1, gpus_per_node=8), env={}, suffix="ab12")
    validate(job)
    res = container(job)["resources"]
    assert res["limits"] == {"memory": "72000Mi", "nvidia.com/gpu": "8"}  # mem_mb + shm_mb
    assert res["requests"]["memory"] == "72000Mi"
    [dshm] = [v for v in job["spec"]["template"]["spec"]["volumes"] if v["name"] == "dshm"]
    assert dshm["emptyDir"] == {"medium": "Memory", "sizeLimit": "8000Mi"}
    assert {"mountPath": "/dev/shm", "name": "dshm"} in container(job)["volumeMounts"]
    assert job["spec"]["activeDeadlineSeconds"] == 1440 * 60 + 900
    assert job["spec"]["ttlSecondsAfterFinished"] > 0 and job["spec"]["backoffLimit"] == 0
    secret = env_of(job)["WANDB_API_KEY"]
    assert secret["valueFrom"]["secretKeyRef"]["name"] == "wandb" and "value" not in secret
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeSelector"] and any(t["key"] == "nvidia.com/gpu" for t in pod["tolerations"])
    assert job["metadata"]["name"] == "smk-train-segment-trm-arc1-s0-48-ab12"
    assert job["metadata"]["labels"]["arcpipe/run"] == "trm-arc1-s0"
    mounts = {m["mountPath"]: m.get("subPath") for m in container(job)["volumeMounts"]}
    assert mounts["/workspace/arcpipe"] == "arcpipe" and mounts["/workspace/arcpipe/results"]


def test_multi_node_job_is_an_indexed_job_with_a_headless_service_and_rendezvous() -> None:
    text = jobscript(gpu=0, nodes=4, gpus_per_node=8, tasks=4, mpi="srun")
    job, service = submit.render(text, env={}, followers=FOLLOWERS)
    service["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": job["metadata"]["name"], "uid": "0-0"}
    ]
    validate(job)
    validate(service)
    name = job["metadata"]["name"]
    assert DNS_1035.match(name) and len(f"{name}-3") <= 63
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == 4
    assert job["spec"]["template"]["spec"]["subdomain"] == name
    assert container(job)["resources"]["limits"]["nvidia.com/gpu"] == "8"  # per pod, not the job's total
    env = env_of(job)
    assert env["ARCPIPE_NNODES"]["value"] == "4"
    assert env["ARCPIPE_MASTER_ADDR"]["value"] == f"{name}-0.{name}"
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["selector"] == {"job-name": name}
    assert service["spec"]["publishNotReadyAddresses"] is True
    # pod 0 runs Snakemake's job wrapper; the other pods only the rule's command, in the jobscript's workdir
    bash, flag, dispatch, _, pod0, follower = container(job)["command"]
    assert (bash, flag, dispatch, pod0) == ("/bin/bash", "-c", submit.POD_DISPATCH, text)
    assert "snakemake" not in follower and "cd /workspace/arcpipe\n" in follower
    assert "'python -m arcpipe.launch --nodes 4 --gpus-per-node 8 -- arcpipe train --run trm-arc1-s0'" in follower
    assert "wait_for_files 5 results/runs/trm-arc1-s0/config.yaml" in follower  # no --latency-wait: 5 s
    assert "mkdir -p logs/train_segment/trm-arc1-s0 results/runs/trm-arc1-s0/ckpt" in follower


def test_group_jobs_long_names_and_overrides_stay_valid() -> None:
    text = jobscript(gpu=4, nodes=1, gpus_per_node=4).replace(
        '"type": "single", "rule": "train_segment"', '"type": "group", "groupid": "train-' + "x" * 80 + '"'
    )
    env = {"ARCPIPE_IMAGE": "reg.example/arcpipe:1", "ARCPIPE_NAMESPACE": "team-a", "ARCPIPE_KUEUE_QUEUE": "gpu-q"}
    [job] = submit.render(text, env=env)
    validate(job)
    assert DNS_1035.match(job["metadata"]["name"]) and len(job["metadata"]["name"]) <= submit.NAME_MAX
    assert job["metadata"]["namespace"] == "team-a" and container(job)["image"] == "reg.example/arcpipe:1"
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpu-q"
    assert all(len(v) <= 63 for v in job["metadata"]["labels"].values())


def test_the_jobscript_is_the_command_and_no_secret_is_rendered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_API_KEY", SENTINEL)
    text = jobscript(gpu=0, nodes=1, gpus_per_node=1)
    manifests = submit.render(text)  # the driver's real environment, with the key in it
    assert container(manifests[0])["command"] == ["/bin/bash", "-c", text]
    multi = submit.render(jobscript(gpu=0, nodes=2, gpus_per_node=1), followers=FOLLOWERS)
    assert SENTINEL not in json.dumps([*manifests, *multi])


def test_the_driver_mounts_what_the_jobs_mount() -> None:
    # the jobscript cds into the driver's workdir and runs the driver's python: same image paths, same mounts
    import yaml

    job = yaml.safe_load((ROOT / "profiles/ice/job.yaml").read_text())
    driver = yaml.safe_load((ROOT / "cluster/ice/driver.yaml").read_text())
    driver_pod = driver["spec"]["template"]["spec"]
    validate_driver = V1Job.model_validate(driver)
    assert validate_driver.spec.template.spec.service_account_name
    job_mounts = container(job)["volumeMounts"]
    driver_mounts = driver_pod["containers"][0]["volumeMounts"]
    assert [m for m in driver_mounts if m["name"] != "dshm"] == [m for m in job_mounts if m["name"] != "dshm"]
    assert driver_pod["containers"][0]["workingDir"] == container(job)["workingDir"]
    claims = {v["name"]: v.get("persistentVolumeClaim") for v in driver_pod["volumes"]}
    assert (
        claims["work"]
        == {v["name"]: v.get("persistentVolumeClaim") for v in job["spec"]["template"]["spec"]["volumes"]}["work"]
    )


def test_print_mode_shows_yaml_and_creates_nothing(tmp_path: Path) -> None:
    import subprocess
    import sys

    script = tmp_path / "jobscript.sh"
    script.write_text(jobscript(gpu=2, nodes=1, gpus_per_node=2))
    out = subprocess.run(
        [sys.executable, str(ROOT / "profiles/ice/submit.py"), "--print", str(script)],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/nonexistent", "KUBECTL": "/nonexistent/kubectl"},
    )
    assert "kind: Job" in out.stdout and "nvidia.com/gpu: '2'" in out.stdout


def test_every_example_manifest_in_cluster_ice_is_valid() -> None:
    import yaml
    from kubernetes.client import (
        V1PersistentVolumeClaim,
        V1Pod,
        V1Role,
        V1RoleBinding,
        V1Secret,
        V1ServiceAccount,
    )

    models = {
        "Job": V1Job,
        "Pod": V1Pod,
        "ServiceAccount": V1ServiceAccount,
        "Role": V1Role,
        "RoleBinding": V1RoleBinding,
        "PersistentVolumeClaim": V1PersistentVolumeClaim,
        "Secret": V1Secret,
    }
    kinds = []
    for path in sorted((ROOT / "cluster/ice").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            parsed = models[doc["kind"]].model_validate(doc)
            assert parsed.model_dump(by_alias=True, exclude_none=True, mode="json") == doc, path
            kinds.append(doc["kind"])
    assert sorted(set(kinds)) == sorted(models)
    role = yaml.safe_load_all((ROOT / "cluster/ice/rbac.yaml").read_text())
    rules = next(d for d in role if d["kind"] == "Role")["rules"]
    jobs = next(r for r in rules if "jobs" in r["resources"])
    assert {"create", "get", "delete"} <= set(jobs["verbs"])  # what submit.py, status.py, cancel.sh call
    services = next(r for r in rules if "services" in r["resources"])
    assert {"create", "delete"} <= set(services["verbs"])
