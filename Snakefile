# arcpipe: ARC-AGI puzzles -> verified datasets -> trained HRM/TRM/URM -> pass@K tables.
#   snakemake smoke              tiny data, tiny model, CPU, end to end
#   snakemake -n full            the plan of every full run, touching nothing
#   snakemake --profile ice full the published configs on the ICE Kubernetes cluster
from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"


include: "rules/common.smk"
include: "rules/data.smk"
include: "rules/train.smk"


rule smoke:
    input:
        datasets_for("smoke"),
        final_checkpoints_for("smoke"),


rule full:
    input:
        datasets_for("full"),
        final_checkpoints_for("full"),


rule preflight:
    input:
        preflights_for("full"),
