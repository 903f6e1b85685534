# Config validated once; input functions and resource lookups for the rules. No rules here.
from snakemake.utils import validate

from arcpipe.config import validate_config
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


def final_checkpoints_for(target):
    return [
        f"results/runs/{run}/ckpt/epoch_{CFG.runs[run].epochs}.pt"
        for run in CFG.runs_for(target)
    ]


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


def gpus_for_run(wildcards):
    run = CFG.runs[wildcards.run]
    return run.nodes * run.gpus_per_node


def nodes_for_run(wildcards):
    return CFG.runs[wildcards.run].nodes


def gpus_per_node_for_run(wildcards):
    return CFG.runs[wildcards.run].gpus_per_node


def runtime_for_run(wildcards):
    """Job time limit in minutes: the trainer saves and exits before it (--deadline)."""
    return 30 if CFG.runs[wildcards.run].target == "smoke" else 24 * 60


def torchrun_launch(wildcards):
    """"" for one process (CPU or one GPU, no process group), else a torchrun prefix with the run's shape."""
    run = CFG.runs[wildcards.run]
    return _torchrun_launch(run.nodes, run.gpus_per_node)
