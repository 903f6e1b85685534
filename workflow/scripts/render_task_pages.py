"""Shim for rule render_task_pages: a page per task, the task-by-run index and the report folder's front page."""

from pathlib import Path

from arcpipe.config import WorkflowConfig
from arcpipe.report.answers import write_report_pages
from arcpipe.shim import logged

snakemake = snakemake  # noqa: F821  (injected by Snakemake)
with logged(snakemake):
    cfg = WorkflowConfig.model_validate(snakemake.config)
    inputs, front = snakemake.input, Path(snakemake.output.front)
    datasets = [Path(p).parent for p in inputs.datasets]  # results/data/<dataset>/verify.json
    files = [*inputs.tables, *inputs.pooled, *inputs.plots]
    write_report_pages(front.parent, inputs.metrics, datasets, files, cfg.report.main_k)
