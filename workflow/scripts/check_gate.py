"""Shim for checkpoint check_gate: the gate's record of run {run}, and its one line in the log and on stderr."""

import sys
from pathlib import Path

from arcpipe.config import GateConfig
from arcpipe.gates import check_gate, gate_line
from arcpipe.shim import logged

snakemake = snakemake  # noqa: F821  (injected by Snakemake)
with logged(snakemake):
    gate, epoch, out = GateConfig(**snakemake.params.gate), snakemake.params.epoch, snakemake.output[0]
    record = check_gate(snakemake.wildcards.run, gate, epoch, Path(snakemake.input.metrics), Path(out))
print(f"arcpipe: {gate_line(record, out)}", file=sys.stderr)  # the driver's output: a gate that falls short is no error
