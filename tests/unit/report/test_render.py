"""One workflow report reads each file once and builds each table once, then hands it to whoever shows it."""

from __future__ import annotations

import builtins
import io
import json
import sys
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
import yaml

from arcpipe.report import render

# (puzzle, test_index) -> (pass@1, pass@2) per epoch
CHECKPOINTS = {
    2: {("a", 0): (0, 1), ("a", 1): (0, 0), ("b", 0): (1, 1), ("c", 0): (0, 0)},
    4: {("a", 0): (1, 1), ("a", 1): (1, 1), ("b", 0): (0, 0), ("c", 0): (1, 1)},
}
RUNS = ("trm-a", "trm-b")
# every function that builds a table or the curves a plot or table is drawn from, once per report
BUILDERS = (
    "passk_table",
    "comparison_table",
    "seed_table",
    "dataset_table",
    "selection_table",
    "summary_table",
    "hours_spent",
    "accuracy_curves",
    "learning_table",
    "depth_curves",
)


@pytest.fixture
def results(tmp_path) -> tuple[list[Path], list[Path]]:
    """metrics.json, per_puzzle.csv and training metrics of two runs with two checkpoints each."""
    metrics, train = [], []
    for run in RUNS:
        for epoch, cells in CHECKPOINTS.items():
            folder = tmp_path / "eval" / run / f"epoch_{epoch}"
            folder.mkdir(parents=True)
            rows = [{"puzzle": p, "test_index": i, "pass@1": a, "pass@2": b} for (p, i), (a, b) in cells.items()]
            pd.DataFrame(rows).to_csv(folder / "per_puzzle.csv", index=False)
            scores = pd.DataFrame(rows).groupby("puzzle")[["pass@1", "pass@2"]].mean().mean().to_dict()
            depth = {"1": scores, "2": scores}
            record = {"epoch": epoch, "step": 10 * epoch, **scores, "wall_time_s": 60.0, "depth": depth}
            (folder / "metrics.json").write_text(json.dumps(record | {"info": {"run": run}}))
            metrics.append(folder / "metrics.json")
            jsonl = tmp_path / "runs" / run / "metrics" / f"epoch_{epoch}.jsonl"
            jsonl.parent.mkdir(parents=True, exist_ok=True)
            steps = range(10 * epoch - 19, 10 * epoch + 1)
            lines = [{"step": s, "train/lm_loss": 1 / s, "train/accuracy": 0.5, "train/count": 2.0} for s in steps]
            jsonl.write_text("".join(json.dumps(line | {"time/step_s": 1.0}) + "\n" for line in lines))
            train.append(jsonl)
    return metrics, train


def test_one_report_reads_each_file_once_and_builds_each_table_once(results, tmp_path, write_config, monkeypatch):
    metrics, train = results
    config = yaml.safe_load(write_config(tmp_path / "config.yaml", {run: {} for run in RUNS}).read_text())
    config["datasets"]["tiny"] |= {"max_puzzles": None}
    config["evaluation"] = {"selection_tasks": 1}
    opened: Counter[str] = Counter()
    builtin_open = builtins.open

    def counting_open(file, *args, **kwargs):
        if isinstance(file, str | Path):
            opened[str(file)] += 1
        return builtin_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", counting_open)  # pandas.read_csv
    monkeypatch.setattr(io, "open", counting_open)  # Path.read_text
    built: Counter[str] = Counter()
    for module in [m for name, m in sys.modules.items() if name.startswith("arcpipe.report.")]:
        for name in BUILDERS:
            if hasattr(module, name):
                monkeypatch.setattr(module, name, _counted(getattr(module, name), name, built))

    render.render_workflow_report(tmp_path / "report", config, metrics, train, [])

    read = {path for path in opened if Path(path).parent.parent.parent.name in ("eval", "runs")}
    expected = {str(p) for p in metrics} | {str(p.with_name("per_puzzle.csv")) for p in metrics} | set(map(str, train))
    assert read == expected
    assert all(opened[path] == 1 for path in expected), {p: n for p, n in opened.items() if p in expected and n > 1}
    assert built == Counter({name: 1 for name in BUILDERS if name != "dataset_table"})  # no dataset: no table
    assert "trm-a" in (tmp_path / "report" / "summary.md").read_text()


def _counted(function, name: str, calls: Counter):
    def wrapper(*args, **kwargs):
        calls[name] += 1
        return function(*args, **kwargs)

    return wrapper
