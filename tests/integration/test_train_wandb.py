"""A tiny real training and evaluation with W&B offline and a sentinel WANDB_API_KEY: the offline run files hold the
training curve under the run's id and group, the key lands in no file, and the evaluation (offline) writes no W&B run
of its own (train/tracking.py: an offline fragment with the training run's id could replace its history on sync)."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import wandb
from wandb.proto import wandb_internal_pb2 as pb

from arcpipe.train.tracking import log_ablation, wandb_run_id

SENTINEL = "arcpipe-wandb-sentinel-" + "fedcba9876543210" * 2


def test_offline_training_and_evaluation_keep_the_key_out_of_every_file(
    tmp_path: Path, tiny_dataset: Path, write_config
) -> None:
    config = write_config(tmp_path / "config.yaml", {"r": {"wandb": "offline", "epochs": 2, "eval_interval": 1}})
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env |= {"WANDB_API_KEY": SENTINEL, "HOME": str(home), "OMP_NUM_THREADS": "1"}
    out, evals = tmp_path / "runs/r", tmp_path / "eval/r/epoch_1"
    arcpipe = [sys.executable, "-m", "arcpipe"]
    train = [*arcpipe, "train", "--config", str(config), "--run", "r", "--data", str(tiny_dataset), "--out", str(out)]
    for epoch in (1, 2):  # two segments: two offline fragments of one W&B run
        done = subprocess.run([*train, "--until-epoch", str(epoch)], env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    evaluate = [*arcpipe, "evaluate", str(out / "ckpt/epoch_1.pt"), str(tiny_dataset), "--out", str(evals)]
    done = subprocess.run(
        [*evaluate, "--config", str(config), "--device", "cpu"], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "evaluation not mirrored (mode offline)" in done.stdout + done.stderr

    fragments = sorted(out.glob(f"wandb/offline-run-*-{wandb_run_id('r')}/run-*.wandb"))
    assert len(fragments) == 2, list(out.rglob("*.wandb"))
    logged = [json.loads(line)["step"] for m in sorted(out.glob("metrics/epoch_*.jsonl")) for line in m.open()]
    steps = []
    for fragment in fragments:
        records = list(_records(fragment.read_bytes()))
        run = next(r.run for r in records if r.WhichOneof("record_type") == "run")
        assert run.run_id == wandb_run_id("r") and run.run_group == "r" and run.display_name == "r"
        steps += [r.history.step.num for r in records if r.WhichOneof("record_type") == "history"]
    assert steps == logged and steps, (steps, logged)  # every training record, at its step, once
    assert not (evals / "wandb").exists() and (evals / "metrics.json").exists()

    hits = [p for p in tmp_path.rglob("*") if p.is_file() and SENTINEL.encode() in p.read_bytes()]
    assert hits == []


def test_a_sweeps_ablation_table_goes_to_wandb_beside_its_arms(tmp_path: Path, monkeypatch) -> None:
    for key in [k for k in os.environ if k.startswith("WANDB_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("WANDB_API_KEY", SENTINEL)
    monkeypatch.setenv("HOME", str(tmp_path))
    table = pd.DataFrame({"arm": ["base", "lr-lr_0.01"], "pass@2": [12.5, float("nan")], "seeds": [2, 2]})
    assert not log_ablation("lr", {"wandb": "disabled"}, table, None, tmp_path / "off")
    assert not (tmp_path / "off").exists()
    assert log_ablation("lr", {"wandb": "offline", "wandb_project": "p"}, table, None, tmp_path / "on")
    # the run's records reach the file from W&B's service process, which may still be writing when finish()
    # returns (in one of three runs here the file held its 7-byte header alone); a job's process flushes them at
    # exit (W&B's teardown), as this does
    wandb.teardown()
    (fragment,) = (tmp_path / "on").glob(f"wandb/offline-run-*-{wandb_run_id('sweep-lr-ablation')}/run-*.wandb")
    records = list(_records(fragment.read_bytes()))
    run = next(r.run for r in records if r.WhichOneof("record_type") == "run")
    # the arms' group (train/tracking.py's wandb_grouping for a sweep's runs), a job type of its own
    assert (run.run_group, run.job_type, run.display_name) == ("sweep-lr", "ablation", "sweep-lr-ablation")
    (history,) = [r.history for r in records if r.WhichOneof("record_type") == "history"]
    logged = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in history.item}
    assert logged["ablation/_type"] == "table-file" and logged["ablation/nrows"] == 2
    saved = next((tmp_path / "on").rglob("media/table/ablation_*.table.json"))
    assert json.loads(saved.read_text())["data"] == [["base", 12.5, 2], ["lr-lr_0.01", None, 2]]
    assert [p for p in tmp_path.rglob("*") if p.is_file() and SENTINEL.encode() in p.read_bytes()] == []


def _records(data: bytes) -> Iterator[pb.Record]:
    """The records of a .wandb file: a 7-byte header, then LevelDB log blocks of 32 KiB holding Record protobufs."""
    block, pos, chunk = 32768, 7, b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a chunk header is padding
            pos += block - pos % block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if length == 0 and kind == 0:
            break
        chunk += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL or LAST: the record is whole
            record = pb.Record()
            record.ParseFromString(chunk)
            yield record
            chunk = b""
