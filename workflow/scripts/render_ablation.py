"""Shim for a sweep's rule render_ablation_<sweep>: its ablation table and plot (report/ablation.py)."""

from pathlib import Path

from arcpipe.report.render import render_ablation
from arcpipe.shim import logged

snakemake = snakemake  # noqa: F821  (injected by Snakemake)
with logged(snakemake):
    render_ablation(
        Path(snakemake.output[0]).parent,
        snakemake.config,
        snakemake.params.sweep,
        snakemake.input.metrics,
        snakemake.input.train_metrics,
    )
