# Report: pass@K tables and plots for every run and checkpoint; rebuilt when, and only when, an evaluation changes.


rule render_report:
    input:
        metrics=evaluations_for_report,
        train_metrics=train_metrics_for_report,
        datasets=verified_datasets_for_report,
        ensembles=ensembles_for_report,  # [] without evaluation.ensemble_last
    output:
        report(
            "results/report/passk.md",
            caption="../workflow/report/passk.rst",
            category="pass@K",
        ),
        "results/report/passk.csv",
        report(
            "results/report/comparison.md",
            caption="../workflow/report/comparison.rst",
            category="pass@K",
        ),
        "results/report/comparison.csv",
        report(
            "results/report/seeds.md",
            caption="../workflow/report/seeds.rst",
            category="pass@K",
        ),
        "results/report/seeds.csv",
        report(
            "results/report/datasets.md",
            caption="../workflow/report/datasets.rst",
            category="datasets",
        ),
        "results/report/datasets.csv",
        report(
            "results/report/passk_vs_step.png",
            caption="../workflow/report/passk_vs_step.rst",
            category="curves",
        ),
        report(
            "results/report/loss_vs_step.png",
            caption="../workflow/report/loss_vs_step.rst",
            category="curves",
        ),
        report(
            "results/report/accuracy_vs_step.png",
            caption="../workflow/report/accuracy_vs_step.rst",
            category="curves",
        ),
        report(
            "results/report/learning.md",
            caption="../workflow/report/learning.rst",
            category="curves",
        ),
        "results/report/learning.csv",
        report(
            "results/report/passk_vs_depth.png",
            caption="../workflow/report/passk_vs_depth.rst",
            category="curves",
        ),
        report(
            "results/report/selection.md",
            caption="../workflow/report/selection.rst",
            category="pass@K",
        ),
        "results/report/selection.csv",
        "results/report/selection_tasks.json",
    log:
        "logs/render_report/report.log",
    conda:
        "../envs/arcpipe.yaml"
    resources:
        mem_mb=4000,
        runtime=30,
    script:
        "../workflow/scripts/render_report.py"


rule pool_votes:
    input:
        votes=evaluation_votes_for_report,
    output:
        md=report(
            "results/report/pooled.md",
            caption="../workflow/report/pooled.rst",
            category="pass@K",
        ),
        csv="results/report/pooled.csv",
    log:
        "logs/pool_votes/report.log",
    conda:
        "../envs/arcpipe.yaml"
    resources:
        mem_mb=4000,
        runtime=30,
    script:
        "../workflow/scripts/pooled_report.py"


# evaluation.ensemble_last: K: pass@K with the votes of a run's last K checkpoints pooled (pool_votes pools each
# checkpoint with every earlier one); a row of passk.md beside the averaged weights' evaluation
rule pool_last_votes:
    input:
        votes=last_votes,  # common.smk: the run's last {k} checkpoints' votes.npz, oldest first
    output:
        "results/eval/{run}/pooled_last{k}/metrics.json",
    log:
        "logs/pool_last_votes/{run}/pooled_last{k}.log",
    conda:
        "../envs/arcpipe.yaml"
    threads: 1
    resources:
        mem_mb=4000,
        runtime=30,
    script:
        "../workflow/scripts/pool_last_votes.py"


# `snakemake full` ends with the report of every full-run boundary, planned from the config alone (`snakemake
# report` tabulates only the checkpoints already on disk): the same rules with the full runs' files, in
# results/report/full/.
use rule render_report as render_full_report with:
    input:
        metrics=evaluations_of("full"),
        train_metrics=train_metrics_of("full"),
        datasets=datasets_for("full"),
        ensembles=ensembles_of("full"),
    output:
        report(
            "results/report/full/passk.md",
            caption="../workflow/report/passk.rst",
            category="full runs",
        ),
        "results/report/full/passk.csv",
        report(
            "results/report/full/comparison.md",
            caption="../workflow/report/comparison.rst",
            category="full runs",
        ),
        "results/report/full/comparison.csv",
        report(
            "results/report/full/seeds.md",
            caption="../workflow/report/seeds.rst",
            category="full runs",
        ),
        "results/report/full/seeds.csv",
        report(
            "results/report/full/datasets.md",
            caption="../workflow/report/datasets.rst",
            category="full runs",
        ),
        "results/report/full/datasets.csv",
        report(
            "results/report/full/passk_vs_step.png",
            caption="../workflow/report/passk_vs_step.rst",
            category="full runs",
        ),
        report(
            "results/report/full/loss_vs_step.png",
            caption="../workflow/report/loss_vs_step.rst",
            category="full runs",
        ),
        report(
            "results/report/full/accuracy_vs_step.png",
            caption="../workflow/report/accuracy_vs_step.rst",
            category="full runs",
        ),
        report(
            "results/report/full/learning.md",
            caption="../workflow/report/learning.rst",
            category="full runs",
        ),
        "results/report/full/learning.csv",
        report(
            "results/report/full/passk_vs_depth.png",
            caption="../workflow/report/passk_vs_depth.rst",
            category="full runs",
        ),
        report(
            "results/report/full/selection.md",
            caption="../workflow/report/selection.rst",
            category="full runs",
        ),
        "results/report/full/selection.csv",
        "results/report/full/selection_tasks.json",
    log:
        "logs/render_report/full.log",


use rule pool_votes as pool_full_votes with:
    input:
        votes=evaluation_votes_of("full"),
    output:
        md=report(
            "results/report/full/pooled.md",
            caption="../workflow/report/pooled.rst",
            category="full runs",
        ),
        csv="results/report/full/pooled.csv",
    log:
        "logs/pool_votes/full.log",
