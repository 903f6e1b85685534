"""No checkpoint is lost to a re-run: what stops Snakemake from deleting a trained checkpoint, and the one
explicit way to set a run's checkpoints aside.

Snakemake deletes a job's outputs before it runs the job again, and a training job's outputs are GPU-days. So:
* training and evaluation take the verified dataset as `ancient()`: re-verifying or rebuilding the same data never
  retrains by itself (the trainer checks the dataset's identity and its verification at start);
* `config_drift` (plan time, every Snakemake call): a run whose checkpoints exist and whose config changed in a
  field that changes what training computes stops the workflow with one line naming the fields and the action;
* `retraining` (the workflow's onstart, after the plan and before any job runs): any training job Snakemake
  would re-run over an existing checkpoint, for any other reason (a missing input it will rebuild, a changed rule,
  --forcerun), stops the workflow before anything is deleted, naming the checkpoint, the reason and the action;
* `archive_run` (`arcpipe runs archive RUN`) is the explicit, documented action: it moves the run's checkpoints,
  state and evaluations into results/archive/RUN-<time>/, after which Snakemake trains the run anew.
A job re-run because the previous attempt was killed (incomplete output) is allowed: the trainer continues from
its side checkpoint, and a boundary the killed cluster job had already finished comes back byte for byte from
the hard links kept under resume/boundaries/ (train/loop.py, `Trainer.restore_boundary`), not trained again. So
is such a finished boundary itself, which a re-run of its job would delete first: its checkpoint is one file with
its kept hard link (`restorable`). That happens when the driver died while a group job ran: the boundaries the job
finished are no longer marked incomplete, and the next driver re-runs the job whole.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import yaml

from arcpipe import paths
from arcpipe.config import ArcpipeError, DatasetConfig, WorkflowConfig, training_changes, with_defaults

DATASET_EXECUTION_FIELDS = frozenset({"workers"})


def run_dir(root: Path, run: str) -> Path:
    return root / paths.RUN.format(run=run)


def checkpoints(root: Path, run: str) -> list[Path]:
    return sorted((run_dir(root, run) / "ckpt").glob("epoch_*.pt"), key=lambda p: int(p.stem.split("_")[1]))


def config_drift(cfg: WorkflowConfig, root: Path = Path(".")) -> list[str]:
    """One line per run that has checkpoints and a config changed in a field that changes training."""
    problems = []
    for name, run in cfg.runs.items():
        kept = checkpoints(root, name)
        stored = run_dir(root, name) / "config.yaml"
        if not kept or not stored.is_file():
            continue
        try:
            saved = yaml.safe_load(stored.read_text()) or {}
            saved_run = saved["runs"][name]
            saved_data = with_defaults(next(iter(saved["datasets"].values())), DatasetConfig)
        except (OSError, yaml.YAMLError, KeyError, TypeError, StopIteration, AttributeError):
            continue  # unreadable: write_run_config rewrites it, and the trainer checks each state it resumes
        changes = training_changes(saved_run, run.model_dump(mode="json"))
        dataset = cfg.datasets[run.dataset].model_dump(mode="json")
        changes += [
            f"datasets.{run.dataset}.{k}: {saved_data.get(k)!r} -> {dataset.get(k)!r}"
            for k in sorted(dataset.keys() | saved_data.keys())
            if k not in DATASET_EXECUTION_FIELDS and saved_data.get(k) != dataset.get(k)
        ]
        if changes:
            problems.append(
                f"runs.{name}: the config changed since its {len(kept)} checkpoint(s) in {kept[0].parent} were "
                f"trained ({'; '.join(changes)}); they are kept: restore the old values, rename the run, or set "
                f"them aside with `arcpipe runs archive {name}` to train it anew"
            )
    return problems


@dataclass(frozen=True)
class PlannedJob:
    """What `retraining` needs of a Snakemake job: its rule, outputs, why it runs and whether it was cut off."""

    rule: str
    outputs: tuple[str, ...]
    reason: str
    incomplete: bool
    rebuilt_inputs: tuple[str, ...] = ()


def retraining(jobs: Iterable[PlannedJob]) -> list[str]:
    """One line per planned training job that would delete an existing checkpoint (see the module docstring)."""
    first: dict[str, tuple[int, str]] = {}  # run -> (epoch, line): the earliest checkpoint is the cause
    for job in jobs:
        if job.rule != "train_segment" or job.incomplete:
            continue
        kept = [Path(o) for o in job.outputs if "/ckpt/" in o and Path(o).exists()]
        if not kept:
            continue
        if restorable(kept[0]):
            continue  # the re-run puts it back from its kept hard link, byte for byte, untrained
        run, epoch = kept[0].parts[-3], int(kept[0].stem.split("_")[1])
        hint = f"`arcpipe runs archive {run}` sets the run's checkpoints aside to train it anew"
        upstream = [f for f in job.rebuilt_inputs if f"/runs/{run}/" not in f]  # not the run's own chain
        if upstream:
            hint = f"if only these inputs are being re-made, make them first (`snakemake {' '.join(upstream)}`); {hint}"
        line = f"{kept[0]}: Snakemake would train it again and delete it ({job.reason}); kept; {hint}"
        if run not in first or epoch < first[run][0]:
            first[run] = (epoch, line)
    return [line for _, line in sorted(first.values(), key=lambda e: e[1])]


def restorable(ckpt: Path) -> bool:
    """Whether the trainer kept this boundary under resume/boundaries/ (train/loop.py, `restore_boundary`): a hard
    link to the checkpoint itself (the same file: deleting the checkpoint's path loses nothing) and the state's
    copy. The copies last while their segment's cluster job runs; a re-run of that job (its driver died after a
    boundary of the job had finished) restores the boundary instead of training it."""
    boundaries = ckpt.parent.parent / "resume" / "boundaries"
    try:
        return (boundaries / f"ckpt_{ckpt.name}").samefile(ckpt) and (boundaries / f"state_{ckpt.name}").is_file()
    except OSError:
        return False


def planned_jobs(dag) -> list[PlannedJob]:  # noqa: ANN001  (a snakemake.dag.DAG; not imported here)
    """The jobs a Snakemake DAG is about to run, as PlannedJob (called from the workflow's onstart)."""
    jobs = []
    for job in dag.needrun_jobs():
        reason = dag.reason(job)
        rebuilt = tuple(sorted(str(f) for f in (reason._updated_input_run or ())))
        jobs.append(
            PlannedJob(
                rule=job.rule.name,
                outputs=tuple(str(f) for f in job.output),
                reason=str(reason) or "forced",
                incomplete=bool(reason._incomplete_output) or _marked_incomplete(dag, job),
                rebuilt_inputs=rebuilt,
            )
        )
    return jobs


def _marked_incomplete(dag, job) -> bool:  # noqa: ANN001
    """Whether Snakemake marked the job's outputs incomplete (a job that was running when its driver died).

    With --rerun-incomplete (every arcpipe profile) Snakemake reports such a job as "Forced execution", not as
    incomplete; its incomplete markers are what tell it apart from a job the user forced.
    """
    persistence = dag.workflow.persistence
    try:
        return bool(persistence._filter_incomplete_keys([persistence._get_key(f) for f in job.output]))
    except AttributeError:  # another Snakemake's persistence API: the files it forces are the incomplete ones
        return any(f in dag.forcefiles for f in job.output)


def archive_run(cfg_runs: Iterable[str], run: str, root: Path = Path(".")) -> Path:
    """Move a run's training and evaluation results into results/archive/<run>-<UTC time>/; returns that folder."""
    if run not in set(cfg_runs):
        raise ArcpipeError(f"runs.{run}: no such run in the config (runs: {', '.join(sorted(cfg_runs))})")
    sources = [p for p in (run_dir(root, run), root / paths.EVAL.format(run=run)) if p.exists()]
    if not sources:
        raise ArcpipeError(f"runs.{run}: nothing to archive (no results/runs/{run} or results/eval/{run})")
    dest = root / paths.ARCHIVE.format(name=f"{run}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
    dest.mkdir(parents=True)
    for src in sources:
        src.rename(dest / src.parent.name)  # same filesystem: a rename, nothing copied or lost
    return dest
