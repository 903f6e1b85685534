"""Shim for rule bundle_kaggle: an offline bundle (checkpoint, identifiers, config, predict entry point)."""

from arcpipe.eval.kaggle import make_bundle
from arcpipe.shim import logged

snakemake = snakemake  # noqa: F821  (injected by Snakemake)
with logged(snakemake):
    make_bundle(snakemake.input.ckpt, snakemake.input.identifiers, snakemake.output[0])
