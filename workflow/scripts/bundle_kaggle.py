"""Shim for rule bundle_kaggle: the offline bundle of a checkpoint (eval/kaggle.py), made as `kaggle:` says."""

from arcpipe.config import KaggleConfig
from arcpipe.eval.kaggle import make_bundle
from arcpipe.shim import logged

snakemake = snakemake  # noqa: F821  (injected by Snakemake)
with logged(snakemake):
    settings = KaggleConfig.model_validate(snakemake.params.settings)
    make_bundle(snakemake.input.ckpt, snakemake.input.identifiers, snakemake.output[0], settings)
