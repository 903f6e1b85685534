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
include: "rules/eval.smk"
include: "rules/report.smk"


REPORT = [
    "results/report/passk.md",
    "results/report/comparison.md",
    "results/report/datasets.md",
    "results/report/pooled.md",
    "results/report/passk_vs_step.png",
    "results/report/loss_vs_step.png",
]
# the full runs' report (rule render_full_report below)
FULL_REPORT = [f.replace("results/report/", "results/report/full/") for f in REPORT]


rule smoke:
    input:
        datasets_for("smoke"),
        evaluations_of("smoke"),
        REPORT,


rule full:
    input:
        datasets_for("full"),
        evaluations_of("full"),
        FULL_REPORT,


rule report:
    input:
        REPORT,


# `snakemake full` ends with the report of every full-run boundary, planned from the config alone (`snakemake
# report` tabulates only the checkpoints already on disk). The same shims as rules/report.smk's render_report and
# pool_votes, with the full runs' files, in results/report/full/. (Not `use rule ... with:` here: Snakemake would
# resolve the inherited script and conda paths against this file's folder instead of rules/.)
rule render_full_report:
    input:
        metrics=evaluations_of("full"),
        train_metrics=train_metrics_of("full"),
        datasets=datasets_for("full"),
    output:
        report(
            "results/report/full/passk.md",
            caption="workflow/report/passk.rst",
            category="full runs",
        ),
        "results/report/full/passk.csv",
        report(
            "results/report/full/comparison.md",
            caption="workflow/report/comparison.rst",
            category="full runs",
        ),
        "results/report/full/comparison.csv",
        report(
            "results/report/full/datasets.md",
            caption="workflow/report/datasets.rst",
            category="full runs",
        ),
        "results/report/full/datasets.csv",
        report(
            "results/report/full/passk_vs_step.png",
            caption="workflow/report/passk_vs_step.rst",
            category="full runs",
        ),
        report(
            "results/report/full/loss_vs_step.png",
            caption="workflow/report/loss_vs_step.rst",
            category="full runs",
        ),
    log:
        "logs/render_report/full.log",
    conda:
        "envs/arcpipe.yaml"
    script:
        "workflow/scripts/render_report.py"


rule pool_full_votes:
    input:
        votes=evaluation_votes_of("full"),
    output:
        md=report(
            "results/report/full/pooled.md",
            caption="workflow/report/pooled.rst",
            category="full runs",
        ),
        csv="results/report/full/pooled.csv",
    log:
        "logs/pool_votes/full.log",
    conda:
        "envs/arcpipe.yaml"
    script:
        "workflow/scripts/pooled_report.py"


rule kaggle:
    input:
        kaggle_bundle(),


rule preflight:
    input:
        preflights_for("full"),
