# Config validated once; what the rules ask (`ask`: arcpipe.rule_inputs) and the Snakemake-only helpers. No rules here.
import os
import re
import sys

from arcpipe.config import workflow_config
from pathlib import Path

from arcpipe import paths
from arcpipe.hooks import (
    on_driver_error,
    on_driver_start,
    print_forecast,
    start_driver,
    stop_on_drift,
)
from arcpipe.rule_inputs import RuleInputs, WaitingRecords

# every check, the arch's presets and fields included; a bad config stops here with one line per problem
CFG = workflow_config(
    config,
    workflow.configfiles,
    workflow.overwrite_configfiles,
    workflow.config_settings.config,
)


wildcard_constraints:
    dataset=r"[A-Za-z0-9._-]+",
    run=r"[A-Za-z0-9._-]+",
    epoch=r"[1-9][0-9]*",
    k=r"[1-9][0-9]*",  # an ensemble's number of checkpoints: avg_last{k}, pooled_last{k}
    sweep=r"[A-Za-z0-9._-]+",


# the driver: take over from a dead one (its lock, its still-running cluster jobs), then record this one; a run whose
# checkpoints exist and whose training config changed stops every call; then the bill (arcpipe.hooks)
if workflow.is_main_process:
    start_driver(Path("."), sys.argv[1:])
stop_on_drift(CFG)
if workflow.is_main_process:
    print_forecast(CFG, Path(paths.RESULTS), sys.argv[1:])


# every rule's input functions, params and resources (arcpipe.rule_inputs): the staged runs' records waited on
# through Snakemake's checkpoints
ask = RuleInputs(CFG, WaitingRecords(checkpoints))


# what render_report writes into a folder (report/render.py, from tables.py, selection.py, summary.py): each table
# as .csv, .md and .html, the HTML one in Snakemake's report, where it is shown in place; the plots; the held-out
# task list
REPORT_TABLES = {
    "summary": "summary",
    "passk": "pass@K",
    "comparison": "pass@K",
    "seeds": "pass@K",
    "selection": "pass@K",
    "datasets": "datasets",
    "learning": "curves",
}
REPORT_PLOTS = [
    "passk_vs_step",
    "loss_vs_step",
    "accuracy_vs_step",
    "passk_vs_depth",
    "passk_vs_loop_steps",
]


def report_files(folder, category=None):
    """render_report's outputs in folder; category: one report category for all (else each file's own)."""
    files = []
    for stem, own in REPORT_TABLES.items():
        caption, cat = f"../workflow/report/{stem}.rst", category or own
        html = report(f"{folder}/{stem}.html", caption=caption, category=cat)
        files += [html, f"{folder}/{stem}.md", f"{folder}/{stem}.csv"]
    for stem in REPORT_PLOTS:
        caption, cat = f"../workflow/report/{stem}.rst", category or "curves"
        png = report(f"{folder}/{stem}.png", caption=caption, category=cat)
        files.append(png)
    return files + [f"{folder}/selection_tasks.json"]


def task_page_links(folder):
    """What the front page of a report folder links (render_task_pages's inputs, report/answers.py):
    render_report's tables and plots and pool_votes's table."""
    return {
        "tables": [
            f"{folder}/{t}.{x}" for t in REPORT_TABLES for x in ("html", "md", "csv")
        ],
        "pooled": [paths.pooled_html(folder), *paths.pooled_report(folder).values()],
        "plots": [f"{folder}/{stem}.png" for stem in REPORT_PLOTS],
    }


def task_page_files(folder, category):
    """render_task_pages's outputs in folder (paths.task_pages): the pages, the front page, and the same pages in
    one file (a report.html embeds no folder of pages), in the Snakemake report under `category` once it is made:
    `snakemake smoke && snakemake --report report.html report` then still renders, without it.
    """
    files = paths.task_pages(folder)
    one = files["one_file"]
    if os.path.exists(one):
        one = report(one, caption="../workflow/report/tasks.rst", category=category)
    return {
        "pages": directory(files["pages"]),
        "one_file": one,
        "front": files["front"],
    }


def ancient_input(lookup):
    """An input function whose file counts as old: a newer copy (re-verified, rebuilt the same) re-runs nothing."""

    def wrapped(wildcards):
        return ancient(lookup(wildcards))

    wrapped.__name__ = f"ancient_{lookup.__name__}"
    return wrapped
