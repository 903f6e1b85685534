"""Shim for rule write_run_config: the run's resolved config, validated, as YAML."""

from pathlib import Path

from arcpipe.config import validate_config, write_yaml_atomic
from arcpipe.shim import logged

snakemake = snakemake  # noqa: F821  (injected by Snakemake)
with logged(snakemake):
    resolved = validate_config(snakemake.params.resolved, source=f"runs.{snakemake.wildcards.run}")
    write_yaml_atomic(Path(snakemake.output[0]), resolved.model_dump(mode="json"))
