"""Shim for checkpoint schedule_full: whether run {run}'s full evaluation at epoch {epoch} is due."""

from arcpipe.config import QuickEvalConfig
from arcpipe.shim import logged
from arcpipe.stopping import schedule_at_boundary

snakemake = snakemake  # noqa: F821  (injected by Snakemake)
with logged(snakemake):
    s, inputs = dict(snakemake.params.settings), snakemake.input
    schedule = QuickEvalConfig(**s.pop("schedule"))
    args = (snakemake.wildcards.run, inputs.metrics, s.pop("epochs"), inputs.get("decision"), snakemake.output[0])
    schedule_at_boundary(*args, schedule=schedule, **s)
