# Config validated once; input functions and resource lookups for the rules. No rules here.
import os

from snakemake.utils import validate

from arcpipe.config import validate_config
from arcpipe.launch import job_resources
from arcpipe.launch import torchrun_launch as _torchrun_launch

validate(config, "../config/schema.json")
CFG = validate_config(config, source="config/config.yaml")


wildcard_constraints:
    dataset=r"[A-Za-z0-9._-]+",
    run=r"[A-Za-z0-9._-]+",
    epoch=r"[1-9][0-9]*",


def datasets_for(target):
    names = sorted({CFG.runs[run].dataset for run in CFG.runs_for(target)})
    if target == "smoke":
        names = sorted(
            set(names) | {name for name in CFG.datasets if name.startswith("smoke")}
        )
    return [f"results/data/{name}/verify.json" for name in names]


def preflights_for(target):
    return [f"results/runs/{run}/preflight.json" for run in CFG.runs_for(target)]


def dataset_config(wildcards):
    return CFG.datasets[wildcards.dataset].model_dump(mode="json")


def run_config(wildcards):
    """The run's resolved config: the run, its dataset and the evaluation settings (not other runs)."""
    run = CFG.runs[wildcards.run]
    return {
        "datasets": {run.dataset: CFG.datasets[run.dataset].model_dump(mode="json")},
        "runs": {wildcards.run: run.model_dump(mode="json")},
        "evaluation": CFG.evaluation.model_dump(mode="json"),
        "report": CFG.report.model_dump(mode="json"),
    }


def dataset_dir_for_run(wildcards):
    return f"results/data/{CFG.runs[wildcards.run].dataset}"


def verified_dataset(wildcards):
    return f"{dataset_dir_for_run(wildcards)}/verify.json"


def previous_boundary(wildcards):
    """[] for the first segment, else the previous boundary's checkpoint and state."""
    run = CFG.runs[wildcards.run]
    previous = int(wildcards.epoch) - run.eval_interval
    if previous <= 0:
        return {}
    return {
        "previous_ckpt": f"results/runs/{wildcards.run}/ckpt/epoch_{previous}.pt",
        "previous_state": f"results/runs/{wildcards.run}/state/epoch_{previous}.pt",
    }


def first_segment_gate(wildcards):
    """A full run's first segment waits for its preflight, so a broken config fails in minutes."""
    run = CFG.runs[wildcards.run]
    if run.target == "full" and int(wildcards.epoch) == run.eval_interval:
        return f"results/runs/{wildcards.run}/preflight.json"
    return []


def segment_group(wildcards):
    """Consecutive boundaries of one segment share a group: one cluster job trains segment_evals boundaries."""
    run = CFG.runs[wildcards.run]
    index = (int(wildcards.epoch) // run.eval_interval - 1) // run.segment_evals
    return f"train-{wildcards.run}-segment{index}"


def shape_resource(name):
    """A resource of the run's job shape (arcpipe.launch.job_resources); None leaves it unset."""

    def lookup(wildcards):
        run = CFG.runs[wildcards.run]
        return job_resources(run.nodes, run.gpus_per_node)[name]

    lookup.__name__ = f"{name}_for_run"
    return lookup


def runtime_for_run(wildcards):
    """Job time limit in minutes: the trainer saves and exits before it (--deadline)."""
    return 30 if CFG.runs[wildcards.run].target == "smoke" else 24 * 60


def torchrun_launch(wildcards):
    """ "" for one process (CPU or one GPU, no process group), else a torchrun prefix with the run's shape."""
    run = CFG.runs[wildcards.run]
    # a fresh rendezvous port per segment
    segment = int(wildcards.epoch) // run.eval_interval
    return _torchrun_launch(run.nodes, run.gpus_per_node, segment=segment)


def per_boundary(target, pattern):
    """`pattern` ({run}, {epoch}) at every evaluation boundary of every run of `target`, from the config alone:
    `snakemake -n full` plans with them without looking for checkpoints on disk."""
    return [
        pattern.format(run=run, epoch=epoch)
        for run in CFG.runs_for(target)
        for epoch in CFG.runs[run].boundaries()
    ]


def evaluations_of(target):
    return per_boundary(target, "results/eval/{run}/epoch_{epoch}/metrics.json")


# the inputs of the full runs' report (rules/report.smk: render_full_report, pool_full_votes)
def train_metrics_of(target):
    return per_boundary(target, "results/runs/{run}/metrics/epoch_{epoch}.jsonl")


def evaluation_votes_of(target):
    return per_boundary(target, "results/eval/{run}/epoch_{epoch}/votes.npz")


def report_boundaries():
    """(run, epoch) pairs in the report: every smoke boundary, and full-run checkpoints already on disk.

    So `snakemake report` never starts GPU training; after a full run it evaluates and tabulates what exists.
    """
    pairs = []
    for name, run in CFG.runs.items():
        for epoch in run.boundaries():
            if run.target == "smoke" or os.path.exists(
                f"results/runs/{name}/ckpt/epoch_{epoch}.pt"
            ):
                pairs.append((name, epoch))
    return pairs


def evaluations_for_report(wildcards):
    return [
        f"results/eval/{run}/epoch_{epoch}/metrics.json"
        for run, epoch in report_boundaries()
    ]


def evaluation_votes_for_report(wildcards):
    return [
        f"results/eval/{run}/epoch_{epoch}/votes.npz"
        for run, epoch in report_boundaries()
    ]


def train_metrics_for_report(wildcards):
    return [
        f"results/runs/{run}/metrics/epoch_{epoch}.jsonl"
        for run, epoch in report_boundaries()
    ]


def verified_datasets_for_report(wildcards):
    return sorted(
        {
            f"results/data/{CFG.runs[run].dataset}/verify.json"
            for run, _ in report_boundaries()
        }
    )


def eval_gpus(wildcards):
    return min(CFG.evaluation.gpus, 1)


def eval_device(wildcards):
    return "--device cuda" if CFG.evaluation.gpus else "--device cpu"


def identifiers_for_run(wildcards):
    return f"{dataset_dir_for_run(wildcards)}/identifiers.json"


def kaggle_bundle():
    """The bundle `snakemake kaggle` makes: evaluation.kaggle_run (default: the first run) at its chosen epoch."""
    name = CFG.evaluation.kaggle_run or next(iter(CFG.runs))
    epoch = CFG.evaluation.kaggle_epoch or CFG.runs[name].epochs
    return f"results/kaggle/{name}/epoch_{epoch}"
