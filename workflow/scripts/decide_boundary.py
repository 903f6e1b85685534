"""Shim for checkpoint decide_boundary: run {run}'s stop-rule decision at epoch {epoch}, its line in log and stderr."""

import sys

from arcpipe.config import StopConfig
from arcpipe.shim import logged
from arcpipe.stopping import decide_at_boundary, decision_line

snakemake = snakemake  # noqa: F821  (injected by Snakemake)
with logged(snakemake):
    p, inputs, out = snakemake.params, snakemake.input, snakemake.output[0]
    args = (snakemake.wildcards.run, StopConfig(**p.rule), inputs.metrics, inputs.get("previous"), out)
    record = decide_at_boundary(*args, **p.settings)
print(f"arcpipe: {decision_line(record, out)}", file=sys.stderr)  # the driver's output: a stop is no error
