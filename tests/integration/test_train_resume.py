"""Exact resume: killed at a random moment (SIGKILL) and re-run, training ends with bitwise-identical weights.

The uninterrupted run the tests compare with (fixture `straight`: run `r` with the tiny defaults, epochs 2 and 4 in
two processes) is trained once for the module; a test that needs another config trains its own.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch


def _train(config: Path, out: Path, data: Path, epoch: int, *extra: str, run: str = "r", env=None) -> subprocess.Popen:
    cmd = [
        sys.executable,
        "-m",
        "arcpipe",
        "train",
        "--config",
        str(config),
        "--run",
        run,
        "--data",
        str(data),
        "--out",
        str(out),
        "--until-epoch",
        str(epoch),
        *extra,
    ]
    return subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})},
    )


def _finish(proc: subprocess.Popen) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=600)
    return proc.returncode, out


def _weights(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, map_location="cpu", weights_only=True)["model"]


def _assert_bitwise_equal(a: Path, b: Path) -> None:
    wa, wb = _weights(a), _weights(b)
    assert wa.keys() == wb.keys()
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k


def _train_chain(config, out, data, epochs=(2, 4)):
    for epoch in epochs:
        code, log = _finish(_train(config, out, data, epoch))
        assert code == 0, log


def _wait_for_training(proc: subprocess.Popen) -> list[str]:
    """Read `proc`'s output until it says where it resumed (its training steps come next); a thread reads the rest
    into the returned list. Returns at the end of the output if the line never comes."""
    lines: list[str] = []
    for line in proc.stdout:
        lines.append(line)
        if "resumed from" in line:
            break
    threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()
    return lines


@pytest.fixture(scope="module")
def straight(tiny_dataset, tmp_path_factory, write_config) -> tuple[Path, Path, float]:
    """(config, out, seconds): run `r` (no changes to the tiny run) trained without interruption to epochs 2 and 4,
    one process each, and how long the second one's training took (its steps and boundary, not its start). Read
    only."""
    root = tmp_path_factory.mktemp("straight")
    config = write_config(root / "config.yaml", {"r": {}})
    out = root / "out"
    _train_chain(config, out, tiny_dataset, epochs=(2,))
    proc = _train(config, out, tiny_dataset, 4)
    lines = _wait_for_training(proc)
    started = time.monotonic()
    assert proc.wait(timeout=600) == 0, "".join(lines)
    return config, out, time.monotonic() - started


def test_killed_and_rerun_ends_bitwise_identical(tiny_dataset, tmp_path, straight):
    config, straight, training_s = straight  # training_s: segment 2's steps and its boundary, on this machine now
    killed = tmp_path / "killed"
    code, log = _finish(_train(config, killed, tiny_dataset, 2))
    assert code == 0, log
    # kill segment 2 three times in a row at random moments of its training (process start and loading excluded),
    # each attempt resuming from what the one before left. The moments are fractions of the straight run's training
    # time, measured under another load: an attempt that finishes first (the machine got faster) has nothing left
    # to kill, so the chain starts again from segment 1's end with moments half as late.
    segment_1 = tmp_path / "segment-1"
    shutil.copytree(killed, segment_1)
    rng = random.Random(0)
    kills, scale = 0, 1.0
    for _ in range(12):
        proc = _train(config, killed, tiny_dataset, 4)
        _wait_for_training(proc)
        time.sleep(rng.uniform(0.1, 0.7) * scale * training_s)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait(timeout=600)
        if kills == 3:
            break
        if proc.returncode == 0:  # finished before its kill
            shutil.rmtree(killed)
            shutil.copytree(segment_1, killed)
            kills, scale = 0, scale / 2
    assert kills == 3, f"no three kills in a row in 12 attempts (last moments at {scale:.3g} x {training_s:.2f} s)"
    code, log = _finish(_train(config, killed, tiny_dataset, 4))
    assert code == 0, log
    _assert_bitwise_equal(straight / "ckpt/epoch_4.pt", killed / "ckpt/epoch_4.pt")
    # the metrics were cut back to each resume point: every step appears once, as in the straight run
    assert _steps(killed / "metrics/epoch_4.jsonl") == _steps(straight / "metrics/epoch_4.jsonl")


def _steps(path: Path) -> list[int]:
    return [json.loads(line)["step"] for line in path.read_text().splitlines()]


def test_deadline_saves_exits_75_and_the_retry_finishes_identically(tiny_dataset, tmp_path, straight):
    config, straight, _ = straight
    timed = tmp_path / "timed"
    code, log = _finish(_train(config, timed, tiny_dataset, 2, "--deadline", "1s"))
    assert code == 75, log
    assert "deadline reached" in log and (timed / "resume/side.pt").exists()
    assert not (timed / "ckpt/epoch_2.pt").exists()
    code, log = _finish(_train(config, timed, tiny_dataset, 2))
    assert code == 0, log
    _assert_bitwise_equal(straight / "ckpt/epoch_2.pt", timed / "ckpt/epoch_2.pt")


def test_max_hours_stops_every_attempt_with_how_to_raise_it(tiny_dataset, tmp_path, write_config):
    config = write_config(tmp_path / "config.yaml", {"r": {"max_hours": 1e-7}})
    for _ in range(2):
        code, log = _finish(_train(config, tmp_path / "capped", tiny_dataset, 2))
        assert code == 3, log
        assert "max_hours" in log and "runs.r.max_hours" in log


def test_a_re_run_segment_job_puts_its_finished_boundaries_back_untrained(
    tiny_dataset, tmp_path, write_config, straight
):
    """One cluster job trains both boundaries of a segment (segment_evals: 2), one `arcpipe train` after the other.
    Killed during the second, the job is re-run whole and Snakemake first deletes all of its outputs, the finished
    first boundary's too. The re-run puts that boundary back byte for byte from resume/boundaries/ without a
    training step; without those copies it trains it again. Every file equals an uninterrupted run's (`straight`:
    segment_evals decides which boundaries one job trains, nothing of the training)."""
    config = write_config(tmp_path / "config.yaml", {"r": {"segment_evals": 2}})
    _, straight, _ = straight
    outputs = [f"{kind}/epoch_{e}.{ext}" for e in (2, 4) for kind, ext in (("ckpt", "pt"), ("metrics", "jsonl"))]

    for copies_survive in (True, False):
        out = tmp_path / f"rerun-{copies_survive}"
        _train_chain(config, out, tiny_dataset, epochs=(2,))
        proc = _train(config, out, tiny_dataset, 4)
        while not (out / "resume/side.pt").exists() or _side_step(out) <= 2:  # the second boundary is training
            assert proc.poll() is None, proc.communicate()[0]
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
        first = (out / "ckpt/epoch_2.pt").read_bytes()
        for name in [*outputs, "state/epoch_2.pt", "state/epoch_4.pt"]:  # what Snakemake deletes before the re-run
            (out / name).unlink(missing_ok=True)
        if not copies_survive:
            shutil.rmtree(out / "resume/boundaries")
        code, log = _finish(_train(config, out, tiny_dataset, 2))
        assert code == 0, log
        assert ("restored from" in log) == copies_survive, log
        assert (out / "ckpt/epoch_2.pt").read_bytes() == first
        _train_chain(config, out, tiny_dataset, epochs=(4,))
        for name in outputs:
            if name.endswith(".pt"):
                _assert_bitwise_equal(straight / name, out / name)
            else:
                assert _steps(out / name) == _steps(straight / name), name
        # the kept copies are hard links to the outputs, no second copy on disk
        assert os.stat(out / "resume/boundaries/ckpt_epoch_4.pt").st_ino == os.stat(out / "ckpt/epoch_4.pt").st_ino

    # one boundary per segment: the second segment's start dropped the first one's copies (its job finished)
    assert sorted(p.name for p in (straight / "resume/boundaries").iterdir()) == [
        "ckpt_epoch_4.pt",
        "metrics_epoch_4.jsonl",
        "state_epoch_4.pt",
    ]


def _side_step(out: Path) -> int:
    try:
        return torch.load(out / "resume/side.pt", map_location="cpu", weights_only=True)["position"]["step"]
    except Exception:  # being replaced at this moment
        return 0


def test_a_run_stopped_at_a_boundary_continues_from_its_kept_state_copy(tiny_dataset, tmp_path, write_config):
    """A stop rule ended the run at epoch 2 and Snakemake deleted that boundary's state (a temp file no job asked
    for); raised patience later, the next segment resumes from the kept copy under resume/boundaries/ and ends with
    an uninterrupted run's weights. The copy stays until the segment after it starts, for a killed retry."""
    config = write_config(tmp_path / "config.yaml", {"r": {"epochs": 6}})
    straight = tmp_path / "straight"
    _train_chain(config, straight, tiny_dataset, epochs=(2, 4))

    stopped = tmp_path / "stopped"
    _train_chain(config, stopped, tiny_dataset, epochs=(2,))
    (stopped / "state/epoch_2.pt").unlink()
    code, log = _finish(_train(config, stopped, tiny_dataset, 4))
    assert code == 0, log
    assert "resume/boundaries/state_epoch_2.pt" in log, log
    _assert_bitwise_equal(straight / "ckpt/epoch_4.pt", stopped / "ckpt/epoch_4.pt")
    assert _steps(stopped / "metrics/epoch_4.jsonl") == _steps(straight / "metrics/epoch_4.jsonl")
    assert (stopped / "resume/boundaries/state_epoch_2.pt").exists()
    _train_chain(config, stopped, tiny_dataset, epochs=(6,))
    assert not (stopped / "resume/boundaries/state_epoch_2.pt").exists()
