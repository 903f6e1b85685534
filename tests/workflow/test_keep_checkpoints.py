"""No checkpoint is lost to a re-run (arcpipe.keep): after a failed verification by hand, a by-hand rebuild, a
missing input Snakemake would re-make, a changed training config or changed evaluation settings, every checkpoint
is still on disk, byte for byte; only `arcpipe runs archive` moves them, and then the run trains anew.

One smoke run (a copy of the session's shared one, tests/workflow/conftest.py); the scenarios run in order on it,
each checking every checkpoint's bytes. First, while it is as the uninterrupted run left it, it is the reference of
a run killed at every stage.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
import yaml
from scratch import SHARED_RUN_ONLY, drop_runs

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]  # the kill test: 55-80 s


def run(work: Path, *argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "WANDB_MODE": "disabled"}
    return subprocess.run(argv, cwd=work, capture_output=True, text=True, timeout=900, env=env)


def snakemake(work: Path, *args: str) -> subprocess.CompletedProcess:
    return run(work, str(BIN / "snakemake"), *args)


def digests(work: Path) -> dict[str, str]:
    return {
        str(p.relative_to(work)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted((work / "results/runs").glob("*/ckpt/*.pt"))
    }


@pytest.fixture(scope="module")
def smoke(smoke_run, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A copy of the session's `snakemake smoke` (tests/workflow/conftest.py: the repository's config, as here)
    with the workflow copied beside it; the scenarios change this copy, never the shared run."""
    shared, done, _, _ = smoke_run
    assert done.returncode == 0, done.stderr[-4000:]
    work = tmp_path_factory.mktemp("keep") / "work"
    shutil.copytree(shared, work, symlinks=True)
    for name in ("Snakefile", "rules", "config", "workflow", "profiles", "envs"):
        copy = partial(shutil.copytree, dirs_exist_ok=True) if (ROOT / name).is_dir() else shutil.copy2
        copy(ROOT / name, work / name)
    # smoke-trm alone (scratch.SHARED_RUN_ONLY): every scenario below re-runs `snakemake smoke`, several of them
    # many times; the other runs' files go, and the report is rendered again without them
    raw = yaml.safe_load((work / "config/config.yaml").read_text())
    for name in drop_runs(raw, SHARED_RUN_ONLY):  # the ensembles that pooled them
        shutil.rmtree(work / "results/eval" / name)
    for name in SHARED_RUN_ONLY:
        for folder in ("results/runs", "results/eval", "results/ttt"):
            shutil.rmtree(work / folder / name, ignore_errors=True)
    (work / "config/config.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    settled = snakemake(work, "smoke")
    assert settled.returncode == 0, settled.stderr[-4000:]
    assert "train_segment" not in settled.stderr and "evaluate_checkpoint" not in settled.stderr, settled.stderr
    plan = snakemake(work, "-n", "smoke")  # the copy is a finished run: nothing to do, nothing to retrain
    assert plan.returncode == 0 and "Nothing to be done" in plan.stdout + plan.stderr, plan.stdout + plan.stderr
    kept = digests(work)
    assert len(kept) == 2, kept
    return work, kept


def test_a_kill_at_every_stage_then_the_same_command_ends_as_an_uninterrupted_run(
    smoke: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    """SIGKILL the whole Snakemake process group while each stage runs (build, verify, train, evaluate, report),
    running `snakemake smoke` again after each kill: the last call finishes, and the checkpoints and pass@K equal
    the uninterrupted run's (the module fixture). No manual step between the calls."""
    import json
    import random
    import signal
    import time

    import torch

    reference, _ = smoke
    work = tmp_path / "killed"
    work.mkdir()
    for name in ("Snakefile", "rules", "config", "workflow", "profiles", "envs"):
        source = reference if name == "config" else ROOT  # the fixture's config: smoke-trm alone, as the reference
        (shutil.copytree if (source / name).is_dir() else shutil.copy2)(source / name, work / name)
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "WANDB_MODE": "disabled"}
    rng = random.Random(13)
    killed_in = []
    for stage in ("build_dataset", "verify_dataset", "train_segment", "evaluate_checkpoint", "render_report"):
        proc = subprocess.Popen(
            [str(BIN / "snakemake"), "smoke"], cwd=work, env=env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )  # fmt: skip
        seen = []
        for line in proc.stdout:  # Snakemake announces each job with "rule <name>:" / "localrule <name>:"
            seen.append(line)
            if line.strip() in (f"rule {stage}:", f"localrule {stage}:"):
                time.sleep(rng.uniform(0.2, 1.5))  # a random moment inside the job (or just after it)
                break
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        assert proc.returncode == -signal.SIGKILL, "".join(seen)[-3000:]  # it was still running: a real kill
        killed_in.append(stage)
    assert killed_in == ["build_dataset", "verify_dataset", "train_segment", "evaluate_checkpoint", "render_report"]

    done = snakemake(work, "smoke")
    assert done.returncode == 0, done.stderr[-4000:]
    assert not any((work / ".snakemake/locks").glob("*"))
    ckpts = sorted((reference / "results/runs").glob("*/ckpt/*.pt"))
    assert ckpts
    for path in ckpts:
        got = torch.load(work / path.relative_to(reference), map_location="cpu", weights_only=True)["model"]
        want = torch.load(path, map_location="cpu", weights_only=True)["model"]
        assert got.keys() == want.keys()
        assert all(torch.equal(got[k], want[k]) for k in want), path.relative_to(reference)
    for path in sorted((reference / "results/eval").glob("*/*/metrics.json")):
        got = json.loads((work / path.relative_to(reference)).read_text())
        want = json.loads(path.read_text())
        assert {k: v for k, v in got.items() if k.startswith("pass@")} == {
            k: v for k, v in want.items() if k.startswith("pass@")
        }, path.relative_to(reference)
    assert (work / "results/report/passk.md").read_text() == (reference / "results/report/passk.md").read_text()


def test_a_config_job_cut_off_leaves_a_whole_file_and_the_same_command_finishes(smoke_run, tmp_path: Path) -> None:
    """A driver killed while write_run_config ran leaves Snakemake's incomplete marker on the run's config, a whole
    file (written atomically, after Snakemake deleted the old one). Snakemake 9.27 would plan only that job, as the
    file is an ancient() input of training, and end there with exit 0 and nothing else done (found by the kill test
    above); the driver keeps the file (arcpipe.driver.complete_atomic_outputs), and the same command does the rest."""
    shared, done, _, _ = smoke_run
    assert done.returncode == 0, done.stderr[-4000:]
    work = tmp_path / "work"
    shutil.copytree(shared, work, symlinks=True)
    for name in ("Snakefile", "rules", "config", "workflow", "profiles", "envs"):
        copy = partial(shutil.copytree, dirs_exist_ok=True) if (ROOT / name).is_dir() else shutil.copy2
        copy(ROOT / name, work / name)
    kept = digests(work)
    (work / "results/report/passk.md").unlink()  # what is left to do: the report
    config = "results/runs/smoke-trm/config.yaml"
    marker = work / ".snakemake/incomplete" / base64.urlsafe_b64encode(config.encode()).decode()
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.touch()
    proc = snakemake(work, "smoke")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert (work / "results/report/passk.md").is_file(), proc.stderr[-4000:]  # the rest was done, in the same call
    assert f"arcpipe: 1 config file(s) written whole by jobs cut off: kept ({config})" in proc.stderr, proc.stderr
    assert not marker.exists()
    assert digests(work) == kept  # nothing trained again


def test_a_failed_verification_by_hand_loses_no_checkpoint(smoke: tuple[Path, dict[str, str]]) -> None:
    # the reproduction: truncate a data file, verify by hand (fails), run the workflow again
    work, kept = smoke
    data = work / "results/data/smoke/train/all__inputs.npy"
    data.write_bytes(data.read_bytes()[:1000])
    verify = run(work, str(BIN / "arcpipe"), "data", "verify", "results/data/smoke")
    assert verify.returncode != 0
    snakemake(work, "smoke")
    assert digests(work) == kept


def test_a_rebuild_of_the_same_data_retrains_nothing(smoke: tuple[Path, dict[str, str]]) -> None:
    work, kept = smoke
    done = snakemake(work, "--forcerun", "build_dataset", "smoke")  # rebuilds the truncated file, re-verifies
    assert done.returncode == 0, done.stderr[-4000:]
    assert "rule train_segment" not in done.stdout + done.stderr
    assert digests(work) == kept


def test_a_missing_input_snakemake_would_remake_stops_before_anything_runs(
    smoke: tuple[Path, dict[str, str]],
) -> None:
    work, kept = smoke
    (work / "results/data/smoke/verify.json").unlink()
    done = snakemake(work, "smoke")
    assert done.returncode == 3, done.stderr[-4000:]
    lines = [line for line in done.stderr.splitlines() if line.startswith("arcpipe:")]
    assert any("ckpt/epoch_2.pt: Snakemake would train it again" in line for line in lines), done.stderr[-3000:]
    assert "snakemake results/data/smoke/verify.json" in done.stderr  # the way out
    assert "Traceback" not in done.stderr
    assert digests(work) == kept
    assert not list((work / ".snakemake/locks").glob("*"))  # the next run is not locked out
    # the way out the message names: re-make the input first, then the run has nothing to retrain
    assert snakemake(work, "results/data/smoke/verify.json").returncode == 0
    done = snakemake(work, "smoke")
    assert done.returncode == 0, done.stderr[-4000:]
    assert digests(work) == kept


def test_changed_evaluation_settings_re_evaluate_without_retraining(smoke: tuple[Path, dict[str, str]]) -> None:
    work, kept = smoke
    config = yaml.safe_load((work / "config/config.yaml").read_text())
    config.setdefault("evaluation", {})["pass_ks"] = [1, 2, 3]
    (work / "config/config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    mtimes = {p: p.stat().st_mtime_ns for p in (work / "results/runs").glob("*/ckpt/*.pt")}
    done = snakemake(work, "smoke")
    assert done.returncode == 0, done.stderr[-4000:]
    out = done.stdout + done.stderr
    assert "rule evaluate_checkpoint" in out and "rule train_segment" not in out
    assert digests(work) == kept
    assert {p: p.stat().st_mtime_ns for p in mtimes} == mtimes


def test_a_changed_training_config_stops_every_call_in_one_line(smoke: tuple[Path, dict[str, str]]) -> None:
    work, kept = smoke
    original = (work / "config/config.yaml").read_text()
    config = yaml.safe_load(original)
    config["runs"]["smoke-trm"]["lr"] = 2.5e-3
    (work / "config/config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    for args in (["-n", "smoke"], ["smoke"]):
        done = snakemake(work, *args)
        assert done.returncode != 0
        lines = [line for line in done.stderr.splitlines() if line.startswith("arcpipe:")]
        assert len(lines) == 1 and "runs.smoke-trm" in lines[0] and "lr: 0.001 -> 0.0025" in lines[0], done.stderr
        assert "arcpipe runs archive smoke-trm" in lines[0] and "Traceback" not in done.stderr
    assert digests(work) == kept
    (work / "config/config.yaml").write_text(original)


def test_archive_is_the_one_way_to_train_a_run_anew(smoke: tuple[Path, dict[str, str]]) -> None:
    work, kept = smoke
    done = run(work, str(BIN / "arcpipe"), "runs", "archive", "smoke-trm")
    assert done.returncode == 0, done.stderr
    [archive] = (work / "results/archive").iterdir()
    moved = {
        str(p.relative_to(archive)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(archive.glob("runs/ckpt/*.pt"))
    }
    assert sorted(moved.values()) == sorted(kept.values())
    plan = snakemake(work, "-n", "smoke")
    assert plan.returncode == 0 and "train_segment" in plan.stdout
    missing = run(work, str(BIN / "arcpipe"), "runs", "archive", "no-such-run")
    assert missing.returncode == 2 and "runs.no-such-run" in missing.stderr
