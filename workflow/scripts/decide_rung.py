"""Shim for checkpoint decide_rung: sweep {sweep}'s halving rung at epoch {epoch}, its line in log and stderr."""

import sys

from arcpipe.config import WorkflowConfig
from arcpipe.config.sweeps import HalvingConfig
from arcpipe.halving import decide_rung, rung_line
from arcpipe.shim import logged

snakemake = snakemake  # noqa: F821  (injected by Snakemake)
with logged(snakemake):
    cfg = WorkflowConfig.model_validate(snakemake.config)
    wildcards, out = snakemake.wildcards, snakemake.output[0]
    halving = HalvingConfig(**snakemake.params.halving)
    record = decide_rung(wildcards.sweep, int(wildcards.epoch), halving, snakemake.input.metrics, cfg, out)
print(f"arcpipe: {rung_line(record, out)}", file=sys.stderr)  # the driver's output: a stopped arm is no error
