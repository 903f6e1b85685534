"""Shim for rule verify_dataset: the report is the output; a failed verification fails the job."""

import sys
from pathlib import Path

from arcpipe.data.verify import verify_dataset
from arcpipe.shim import logged

snakemake = snakemake  # noqa: F821  (injected by Snakemake)
with logged(snakemake):
    report = verify_dataset(Path(snakemake.output[0]).parent)
    for problem in report["failures"]:
        print(f"FAIL {problem}")
if not report["ok"]:
    sys.exit(1)
