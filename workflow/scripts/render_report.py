"""Shim for rule render_report: pass@K, comparison and dataset tables and the learning-curve PNGs."""

from pathlib import Path

from arcpipe.report.render import render_workflow_report
from arcpipe.shim import logged

snakemake = snakemake  # noqa: F821  (injected by Snakemake)
with logged(snakemake):
    out_dir = Path(snakemake.output[0]).parent  # every output lies in results/report/
    inputs = snakemake.input
    render_workflow_report(
        out_dir,
        snakemake.config,
        inputs.metrics,
        inputs.train_metrics,
        inputs.datasets,
        inputs.ensembles,
        quick_paths=inputs.get("quick", []),
    )
