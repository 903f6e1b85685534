"""Shim for rule pool_last_votes: pass@K with the votes of a run's last K checkpoints pooled, as a metrics.json."""

from arcpipe.config import WorkflowConfig
from arcpipe.eval.pool import write_pooled_last
from arcpipe.shim import logged

snakemake = snakemake  # noqa: F821  (injected by Snakemake)
with logged(snakemake):
    cfg = WorkflowConfig.model_validate(snakemake.config)
    write_pooled_last(snakemake.input.votes, snakemake.output[0], cfg.evaluation.pass_ks)
