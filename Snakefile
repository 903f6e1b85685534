# arcpipe: ARC-AGI puzzles -> verified datasets -> trained HRM/TRM/URM -> pass@K tables.
#   snakemake smoke              tiny data, tiny model, CPU, end to end
#   snakemake -n full            the plan of every full run, touching nothing
#   snakemake --profile ice full the published configs on the ICE Kubernetes cluster
from snakemake.utils import min_version

min_version("9.0")

from arcpipe.outcome import on_failure, on_success


configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"  # `snakemake --report` opens on the results summary


include: "rules/common.smk"
include: "rules/data.smk"
include: "rules/train.smk"
include: "rules/eval.smk"
include: "rules/report.smk"


# the last lines of a run: per run its pass@K, training accuracy and GPU-hours, or each failed job's own error (after
# a failure or Ctrl-C, first the cancelling of cluster jobs Snakemake missed: arcpipe.driver.cancel_leftovers)
onsuccess:
    on_success(workflow, CFG)


onerror:
    on_driver_error()
    on_failure(workflow, log)


REPORT_FILES = [
    "summary.html",
    "passk.md",
    "comparison.md",
    "seeds.md",
    "datasets.md",
    "pooled.md",
    "passk_vs_step.png",
    "loss_vs_step.png",
    "passk_vs_depth.png",
]
REPORT = [f"{paths.REPORT}/{name}" for name in REPORT_FILES]
# the full runs' report (rules/report.smk: render_full_report, pool_full_votes)
FULL_REPORT = [f"{paths.FULL_REPORT}/{name}" for name in REPORT_FILES]


rule smoke:
    input:
        ask.datasets_for("smoke"),
        ask.evaluations_of("smoke"),
        ask.ensembles_of_runs("smoke"),  # config `ensembles:` (rule pool_ensemble); none without
        REPORT,


rule full:
    input:
        ask.datasets_for("full"),
        ask.evaluations_of("full"),
        ask.ensembles_of_runs("full"),
        FULL_REPORT,
        FULL_TASK_PAGES,  # rules/report.smk: its task pages, task index and front page


# `snakemake sweep_<name>`: sweep <name>'s base run and every arm (config `sweeps:`, docs/sweeps.md), trained and
# evaluated, and the sweep's ablation table (results/report/sweeps/<name>/); its arms are ordinary runs with the base
# run's target, so `snakemake full` builds them too
for target in CFG.sweep_targets:
    sweep = target.removeprefix("sweep_")

    rule:
        name:
            f"render_ablation_{sweep}"
        input:
            metrics=ask.one_input(ask.full_evaluations_of(target)),
            decisions=ask.one_input(ask.decisions_of(target)),  # waited on, not read
            train_metrics=ask.one_input(ask.train_metrics_of(target)),
        output:
            [
                (
                    report(
                        f,
                        caption=f"workflow/report/{caption}.rst",
                        category=f"sweep {sweep}",
                    )
                    if caption
                    else f
                )
                for f, caption in zip(
                    ask.ablation_files(sweep), ("", "", "ablation", "ablation_plot")
                )
            ],
        log:
            f"logs/render_ablation/{sweep}.log",
        conda:
            "envs/arcpipe.yaml"
        resources:
            mem_mb=4000,
            runtime=30,
        params:
            sweep=sweep,
        script:
            "workflow/scripts/render_ablation.py"

    rule:
        name:
            target
        input:
            ask.datasets_for(target),
            ask.evaluations_of(target),
            ask.ablation_files(sweep),


rule report:
    input:
        REPORT,
        TASK_PAGES,  # rules/report.smk: a page per task, the task index and the front page


rule kaggle:
    input:
        ask.kaggle_bundle(),


rule preflight:
    input:
        ask.preflights_for("full"),
