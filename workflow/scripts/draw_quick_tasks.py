"""Shim for rule draw_quick_tasks: the fixed subset of run {run}'s test tasks its quick evaluations score."""

from pathlib import Path

from arcpipe.config import QuickEvalConfig
from arcpipe.shim import logged
from arcpipe.stopping import write_quick_tasks

snakemake = snakemake  # noqa: F821  (injected by Snakemake)
with logged(snakemake):
    settings = snakemake.params.settings
    test_puzzles = Path(snakemake.params.data) / "test_puzzles.json"
    schedule = QuickEvalConfig(**settings["schedule"])
    write_quick_tasks(test_puzzles, snakemake.output[0], schedule, settings["selection_tasks"], settings["seed"])
