"""Shim for rule build_dataset: build one dataset declared in config."""

from pathlib import Path

from arcpipe.config import DatasetConfig
from arcpipe.data.build import build_dataset
from arcpipe.shim import logged

snakemake = snakemake  # noqa: F821  (injected by Snakemake)
with logged(snakemake):
    output_dir = Path(snakemake.output.manifest).parent
    build_dataset(DatasetConfig.model_validate(snakemake.params.dataset), output_dir, workers=snakemake.threads)
