"""Shim for rule pool_votes: pass@K with votes pooled across each run's checkpoints (upstream's in-training numbers)."""

from arcpipe.config import WorkflowConfig
from arcpipe.report.render import render_pooled
from arcpipe.shim import logged

snakemake = snakemake  # noqa: F821  (injected by Snakemake)
with logged(snakemake):
    cfg = WorkflowConfig.model_validate(snakemake.config)
    render_pooled(snakemake.output.csv, snakemake.output.md, snakemake.input.votes, cfg.evaluation.pass_ks)
