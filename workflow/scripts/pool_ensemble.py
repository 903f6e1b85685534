"""Shim for rule pool_ensemble: the answers of an ensemble's runs pooled into one evaluation (eval/pool.py)."""

from pathlib import Path

from arcpipe.config import WorkflowConfig
from arcpipe.eval.pool import write_pooled_evaluation
from arcpipe.shim import logged

snakemake = snakemake  # noqa: F821  (injected by Snakemake)
with logged(snakemake):
    cfg = WorkflowConfig.model_validate(snakemake.config)
    name = snakemake.wildcards.ensemble
    info = {"run": name, "ensemble": cfg.ensemble_members(name)}
    metrics = write_pooled_evaluation(
        snakemake.input.votes, Path(snakemake.output.metrics).parent, cfg.evaluation.pass_ks, info
    )
    print(", ".join(f"{k} {100 * v:.2f}%" for k, v in metrics.items() if k.startswith("pass@")))
