"""Everything the report reads, each file once: evaluation metrics, per-puzzle results, training metrics, dataset
statistics; and what it knows of each run from the config.

    inputs = load_report_inputs(metrics_paths, train_metrics_paths, dataset_dirs, ensemble_paths, per_puzzle=True)
    evals = load_evaluations(metrics_paths)          # only the frame of the metrics.json files
    curves = read_train_curves(train_metrics_paths)  # only the training curves

The tables (tables.py, seeds.py, selection.py, summary.py) and plots are computed from what this module loaded,
never from files.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from arcpipe import plan
from arcpipe.config import ArcpipeError

if TYPE_CHECKING:
    from arcpipe.config import WorkflowConfig

CONTROL_LABELS = {"blank_puzzle_id": "blank id"}  # metrics.json "controls" -> the label in column names
# the training metrics the report uses (results/runs/{run}/metrics/epoch_*.jsonl, one record per optimizer step)
LOSS = "train/lm_loss"
ACCURACY = "train/accuracy"  # token accuracy of the rows that halted at the step
COUNT = "train/count"  # rows that halted at the step: 0 when nothing was measured
STEP_TIME = "time/step_s"
TRAIN_KEYS = (LOSS, ACCURACY, COUNT, STEP_TIME)
# a test-time training evaluation's metric (eval/ttt.collect): its jobs' fits and answers, summed (summary.hours_spent)
TTT_SECONDS = "ttt/wall_seconds"


@dataclass(frozen=True)
class RunInfo:
    arch: str  # hrm, trm, urm, transformer
    benchmark: str | None  # "ARC-AGI-1", "ARC-AGI-2", or None when the test set is neither
    epochs: int  # the run's configured total, for progress %
    seed: int | None = None
    seed_group: str | None = None  # the run's `seeds:` list (config.RunConfig); None: a group of its own
    preset: str | None = None  # the arch's preset: which published figure applies (tables.published_figure)


@dataclass(frozen=True)
class DatasetFiles:
    """A built dataset's statistics files (data/build.py), parsed."""

    meta: dict[str, dict[str, Any]]  # split ("train", "test") -> its dataset.json
    identifiers: list[str]  # identifiers.json
    test_puzzles: dict[str, Any]  # test_puzzles.json: task name -> {"test": [...], ...}


@dataclass(frozen=True)
class ReportInputs:
    """Everything one report is computed from, each file read once (`load_report_inputs`)."""

    metrics: dict[str, dict[str, Any]]  # path of each checkpoint's metrics.json -> its content
    evals: pd.DataFrame  # `evaluations_frame(metrics)`: one row per checkpoint, sorted by run and epoch
    ensembles: pd.DataFrame  # the same for the metrics.json of checkpoint ensembles (avg_last{K}, pooled_last{K})
    per_puzzle: dict[str, pd.DataFrame]  # metrics.json path -> the per_puzzle.csv beside it; {} unless asked for
    train: dict[str, pd.DataFrame]  # each of TRAIN_KEYS -> its curve (`read_train_curves`)
    datasets: dict[str, DatasetFiles]  # dataset name -> its statistics files


def runs_from_config(cfg: WorkflowConfig) -> dict[str, RunInfo]:
    """RunInfo of every run of a validated workflow config, and of every test-time training row that answers another
    dataset's tasks (`<run>@<dataset>`, plan.ttt_row): the run's arch and preset on that dataset's benchmark, so a
    VARC or LoopViT run trained offline on the training tasks has its published figure beside its TTT row; such a row
    is no seed of the run's group (seed and seed_group None: a group of its own)."""
    infos = {}
    for name, run in cfg.runs.items():
        infos[name] = RunInfo(run.arch, _benchmark(cfg, run.dataset), run.epochs, run.seed, run.seed_group, run.preset)
        row = plan.ttt_row(name, run) if run.ttt is not None else name
        if row != name:
            infos[row] = RunInfo(run.arch, _benchmark(cfg, run.answered_dataset), run.epochs, preset=run.preset)
    return infos


def load_report_inputs(
    metrics_paths: Sequence[str | Path],
    train_metrics_paths: Sequence[str | Path] = (),
    dataset_dirs: Mapping[str, str | Path] | None = None,
    ensemble_paths: Sequence[str | Path] = (),
    per_puzzle: bool = False,
) -> ReportInputs:
    """Read every file a report uses, once. per_puzzle: also each evaluation's per_puzzle.csv (checkpoint selection
    needs them; an evaluation's metrics.json alone makes every other table)."""
    metrics = read_metrics(metrics_paths)
    return ReportInputs(
        metrics=metrics,
        evals=evaluations_frame(metrics),
        ensembles=load_evaluations(ensemble_paths),
        per_puzzle=read_per_puzzle(metrics) if per_puzzle else {},
        train=read_train_curves(train_metrics_paths),
        datasets=read_datasets(dataset_dirs or {}),
    )


def read_metrics(metrics_paths: Sequence[str | Path]) -> dict[str, dict[str, Any]]:
    """path -> content of each metrics.json, in the order given."""
    metrics = {}
    for path in map(Path, metrics_paths):
        try:
            metrics[str(path)] = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise ArcpipeError(f"{path}: cannot read evaluation metrics ({err}); re-run its evaluation") from err
    return metrics


def evaluations_frame(metrics: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """One row per metrics.json (`read_metrics`): run, epoch, step and every number in it, sorted by run and epoch.

    The run is metrics["info"]["run"], else the directory above `epoch_<N>/` (results/eval/{run}/epoch_{N}/); the
    epoch is metrics["epoch"], else N.
    """
    rows = []
    for path, record in ((Path(p), m) for p, m in metrics.items()):
        info = record.get("info") or {}
        match = re.fullmatch(r"epoch_(\d+)", path.parent.name)
        epoch = record.get("epoch") if record.get("epoch") is not None else (int(match[1]) if match else None)
        run = info.get("run") or (path.parent.parent.name if match else path.parent.name)
        rows.append(
            {
                "run": run,
                "epoch": epoch,
                "step": record.get("step"),
                **{k: v for k, v in record.items() if isinstance(v, int | float) and k not in ("epoch", "step")},
                **_control_columns(record),
                "path": str(path),
            }
        )
    if not rows:
        return pd.DataFrame(columns=["run", "epoch", "step", "path"])
    return pd.DataFrame(rows).sort_values(["run", "epoch"], kind="stable").reset_index(drop=True)


def load_evaluations(metrics_paths: Sequence[str | Path]) -> pd.DataFrame:
    """`evaluations_frame` of the metrics.json files at metrics_paths."""
    return evaluations_frame(read_metrics(metrics_paths))


def read_per_puzzle(metrics_paths: Sequence[str] | Mapping[str, Any]) -> dict[str, pd.DataFrame]:
    """metrics.json path -> the per_puzzle.csv beside it (one row per test input, 0/1 per K; eval/write.py), which
    is complete when metrics.json is."""
    frames = {}
    for path in map(str, metrics_paths):
        csv = Path(path).with_name("per_puzzle.csv")
        try:
            frames[path] = pd.read_csv(csv, dtype={"puzzle": str})
        except (OSError, pd.errors.ParserError) as err:
            raise ArcpipeError(f"{csv}: cannot read per-puzzle results ({err}); re-run its evaluation") from err
    return frames


def read_train_curves(
    train_metrics_paths: Sequence[str | Path], keys: Sequence[str] = TRAIN_KEYS
) -> dict[str, pd.DataFrame]:
    """key -> (run, step, epoch, key) of every step that recorded it, from results/runs/{run}/metrics/epoch_*.jsonl,
    sorted by run and step (a step written twice, by a resumed segment: its last record)."""
    rows: dict[str, list[tuple]] = {key: [] for key in keys}
    for path in map(Path, train_metrics_paths):
        run = path.parent.parent.name
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            record = json.loads(line)
            for key in keys:
                if key in record:
                    rows[key].append((run, record["step"], record.get("epoch"), record[key]))
    curves = {}
    for key, key_rows in rows.items():
        frame = pd.DataFrame(key_rows, columns=["run", "step", "epoch", key])
        curves[key] = frame.sort_values(["run", "step"], kind="stable").drop_duplicates(["run", "step"], keep="last")
    return curves


def read_datasets(dataset_dirs: Mapping[str, str | Path]) -> dict[str, DatasetFiles]:
    """name -> the statistics files of each built dataset directory (results/data/{dataset}/)."""
    datasets = {}
    for name, directory in dataset_dirs.items():
        directory = Path(directory)
        meta = {split: _read_json(directory / split / "dataset.json") for split in ("train", "test")}
        identifiers = _read_json(directory / "identifiers.json")
        datasets[name] = DatasetFiles(meta, identifiers, _read_json(directory / "test_puzzles.json"))
    return datasets


# --------------------------------------------------------------------------------------------------------------


def _benchmark(cfg: WorkflowConfig, dataset_name: str) -> str | None:
    # upstream's test subset names; a dataset cut down by max_puzzles is not the published benchmark
    dataset = cfg.datasets.get(dataset_name)
    if dataset is None:
        return None
    name = {"evaluation": "ARC-AGI-1", "evaluation2": "ARC-AGI-2"}.get(dataset.test_set)
    if name and dataset.max_puzzles:
        return f"{name} (subset)"
    return name


def _control_columns(metrics: Mapping[str, Any]) -> dict[str, float]:
    # {"controls": {"blank_puzzle_id": {"pass@2": x}}} -> {"pass@2 (blank id)": x}
    controls = metrics.get("controls") or {}
    return {
        f"{key} ({CONTROL_LABELS.get(name, name)})": v for name, by_k in controls.items() for key, v in by_k.items()
    }


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ArcpipeError(f"{path}: cannot read ({err}); rebuild the dataset") from err
