"""Shim for rule average_checkpoints: the parameter average of a run's last K checkpoints, as a checkpoint."""

from arcpipe.eval.ensemble import average_checkpoints
from arcpipe.shim import logged

snakemake = snakemake  # noqa: F821  (injected by Snakemake)
with logged(snakemake):
    average_checkpoints(snakemake.input.ckpts, snakemake.output[0])
