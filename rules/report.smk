# Report: pass@K tables and plots for every run and checkpoint; rebuilt when, and only when, an evaluation changes.


rule render_report:
    input:
        metrics=ask.evaluations_for_report,
        train_metrics=ask.train_metrics_for_report,
        datasets=ask.verified_datasets_for_report,
        ensembles=ask.ensembles_for_report,  # [] without evaluation.ensemble_last
        quick=ask.quick_evaluations_for_report,  # [] without evaluation.quick
    output:
        report_files(paths.REPORT),  # common.smk: tables (.html in the report, .md, .csv), plots
    log:
        "logs/render_report/report.log",
    conda:
        "../envs/arcpipe.yaml"
    resources:
        mem_mb=4000,
        runtime=30,
    script:
        "../workflow/scripts/render_report.py"


# a page per task of every evaluation in the report and the task-by-run index (report/answers.py), in a folder and
# in one file (the Snakemake report's "tasks"); and the report folder's front page; rebuilt when an evaluation
# changes. Part of the `report` target (Snakefile), not of `smoke`'s files.
rule render_task_pages:
    input:
        **task_page_links(paths.REPORT),  # common.smk: what the front page links
        metrics=ask.task_page_evaluations,  # arcpipe.rule_inputs: the report's evaluations and ensembles
        datasets=ask.answered_datasets_for_report,  # their demonstrations (test_puzzles.json)
    output:
        **task_page_files(paths.REPORT, "tasks"),  # common.smk: the pages, in a folder and in one file
    log:
        "logs/render_task_pages/report.log",
    conda:
        "../envs/arcpipe.yaml"
    resources:
        mem_mb=4000,
        runtime=30,
    script:
        "../workflow/scripts/render_task_pages.py"


# the `report` target's files beyond REPORT (Snakefile)
TASK_PAGES = list(paths.task_pages(paths.REPORT).values())


# the same for the `full` target's report (results/report/full/): its runs' planned evaluations and ensembles, and
# the tables, plots and pooled votes of that report
use rule render_task_pages as render_full_task_pages with:
    input:
        **task_page_links(paths.FULL_REPORT),
        metrics=ask.one_input(
            ask.full_evaluations_of("full") + ask.ensembles_of("full")
        ),
        datasets=ask.answered_datasets_of("full"),
    output:
        **task_page_files(paths.FULL_REPORT, "full runs"),
    log:
        "logs/render_task_pages/full.log",


FULL_TASK_PAGES = list(paths.task_pages(paths.FULL_REPORT).values())


rule pool_votes:
    input:
        votes=ask.evaluation_votes_for_report,
    output:
        **paths.pooled_report(paths.REPORT),
        html=report(
            paths.pooled_html(paths.REPORT),
            caption="../workflow/report/pooled.rst",
            category="pass@K",
        ),
    log:
        "logs/pool_votes/report.log",
    conda:
        "../envs/arcpipe.yaml"
    resources:
        mem_mb=4000,
        runtime=30,
    script:
        "../workflow/scripts/pooled_report.py"


# config `ensembles:`: the answers of several runs on one test set pooled into one vote (eval/pool.py; upstream
# VARC's ViT+U-Net ensemble), each member's last evaluation (its test-time training's where it has ttt); a row of
# its own in the report, with a submission
rule pool_ensemble:
    input:
        votes=ask.ensemble_votes,  # arcpipe.rule_inputs: in the order of the ensemble's runs
    output:
        **paths.eval_files(paths.RUNS_ENSEMBLE_DIR),
    log:
        "logs/pool_ensemble/{ensemble}.log",
    wildcard_constraints:
        ensemble="|".join(map(re.escape, CFG.ensembles)) or "(?!)",  # the config's ensembles, nothing else
    conda:
        "../envs/arcpipe.yaml"
    threads: 1
    resources:
        mem_mb=4000,
        runtime=30,
    script:
        "../workflow/scripts/pool_ensemble.py"


# evaluation.ensemble_last: K: pass@K with the votes of a run's last K checkpoints pooled (pool_votes pools each
# checkpoint with every earlier one); a row of passk.md beside the averaged weights' evaluation
rule pool_last_votes:
    input:
        votes=ask.last_votes,  # arcpipe.rule_inputs: the run's last {k} checkpoints' votes.npz, oldest first
    output:
        paths.POOLED_LAST,
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
        metrics=ask.one_input(ask.full_evaluations_of("full")),
        decisions=ask.one_input(ask.decisions_of("full")),  # waited on, not read: the plan behind `metrics`
        train_metrics=ask.one_input(ask.train_metrics_of("full")),
        datasets=ask.datasets_for("full"),
        ensembles=ask.one_input(ask.ensembles_of("full")),
        quick=ask.one_input(ask.quick_evaluations_of("full")),
    output:
        report_files(paths.FULL_REPORT, category="full runs"),
    log:
        "logs/render_report/full.log",


use rule pool_votes as pool_full_votes with:
    input:
        votes=ask.one_input(ask.evaluation_votes_of("full")),
    output:
        **paths.pooled_report(paths.FULL_REPORT),
        html=report(
            paths.pooled_html(paths.FULL_REPORT),
            caption="../workflow/report/pooled.rst",
            category="full runs",
        ),
    log:
        "logs/pool_votes/full.log",
