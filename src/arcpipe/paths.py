"""Every file and folder the workflow writes under results/, named once: the rules' inputs and outputs, the plan's
records and the report's folders are these patterns (`str.format` / Snakemake wildcards: {dataset}, {run}, {epoch},
{k}, {kind}, {job}, {ensemble}, {sweep}), relative to the workflow's directory.

    paths.CKPT.format(run="trm-arc1", epoch=8)       # results/runs/trm-arc1/ckpt/epoch_8.pt
    output: **paths.eval_files(paths.FULL_DIR)       # a rule's metrics, submission, per_puzzle and votes

The ground floor of the package: it imports nothing of arcpipe, so that the plan, the rules and the trainer can all
ask it. Renaming a folder is an edit here (and a `snakemake -n` of every target to see the same jobs).
"""

from __future__ import annotations

import re
from pathlib import Path

RESULTS = "results"

# a dataset (rules/data.smk): built, then verified
DATA = "results/data/{dataset}"
DATA_MANIFEST = DATA + "/build.json"
DATA_IDENTIFIERS = DATA + "/identifiers.json"
DATA_TEST_PUZZLES = DATA + "/test_puzzles.json"
DATA_TRAIN = DATA + "/train"
DATA_TEST = DATA + "/test"
DATA_VERIFIED = DATA + "/verify.json"

# a run (rules/train.smk): its config, the preflight, and each boundary's files
RUN = "results/runs/{run}"
RUN_CONFIG = RUN + "/config.yaml"
PREFLIGHT = RUN + "/preflight.json"
CKPT = RUN + "/ckpt/epoch_{epoch}.pt"
AVERAGED_CKPT = RUN + "/ckpt/avg_last{k}.pt"  # the weights of the last k checkpoints averaged
STATE = RUN + "/state/epoch_{epoch}.pt"
TRAIN_METRICS = RUN + "/metrics/epoch_{epoch}.jsonl"
# the records of the three decisions (arcpipe.plan reads them)
DECISION = RUN + "/decisions/epoch_{epoch}.json"
GATE = "results/gates/{run}.json"
RUNG = "results/sweeps/{sweep}/rungs/epoch_{epoch}.json"

# a run's evaluations (rules/eval.smk): each folder below holds `eval_files`
EVAL = "results/eval/{run}"
EVAL_CONFIG = EVAL + "/evaluation.yaml"
QUICK_TASKS = EVAL + "/quick_tasks.json"
SCHEDULE = EVAL + "/schedule/epoch_{epoch}.json"  # the record of which boundaries get a full evaluation
FULL_DIR = EVAL + "/epoch_{epoch}"
QUICK_DIR = FULL_DIR + "/quick"
TTT_DIR = EVAL + "/ttt_epoch_{epoch}"
ENSEMBLE_DIR = EVAL + "/{kind}_last{k}"  # kind: avg (averaged weights) or pooled (pooled votes)
AVERAGED_DIR = EVAL + "/avg_last{k}"
POOLED_DIR = EVAL + "/pooled_last{k}"
RUNS_ENSEMBLE_DIR = "results/eval/{ensemble}/ensemble"  # config `ensembles:`: runs pooled into one vote
TTT_JOB = "results/ttt/{run}/epoch_{epoch}/job_{job}.npz"  # one test-time training job's answers
FULL = FULL_DIR + "/metrics.json"
VOTES = FULL_DIR + "/votes.npz"
QUICK = QUICK_DIR + "/metrics.json"
TTT = TTT_DIR + "/metrics.json"
ENSEMBLE = ENSEMBLE_DIR + "/metrics.json"
RUNS_ENSEMBLE = RUNS_ENSEMBLE_DIR + "/metrics.json"
POOLED_LAST = POOLED_DIR + "/metrics.json"  # the votes of the last k checkpoints pooled (rule pool_last_votes)

KAGGLE = "results/kaggle/{run}/epoch_{epoch}"  # the folder `snakemake kaggle` makes (rule bundle_kaggle)
ARCHIVE = "results/archive/{name}"  # `arcpipe run archive`: a run's training and evaluation folders moved aside

# the report (rules/report.smk)
REPORT = "results/report"
FULL_REPORT = REPORT + "/full"  # the `full` target's runs
SWEEP_REPORT = REPORT + "/sweeps/{sweep}"


def under(results: str | Path, pattern: str, **where: object) -> Path:
    """`pattern` filled in (`where`), in the results folder `results` (the workflow's own, or another's)."""
    return Path(results) / pattern.format(**where).removeprefix(RESULTS + "/")


def _regex(pattern: str) -> str:
    """`pattern` as a regular expression, each wildcard a named group of one folder's name (never across a /)."""
    return "".join(
        f"(?P<{part[1:-1]}>[^/]+)" if part.startswith("{") else re.escape(part)
        for part in re.split(r"(\{[a-z]+\})", pattern)
    )


def parse(pattern: str, path: str | Path) -> dict[str, str] | None:
    """The wildcards of `path` if it ends as `pattern` does (a folder's name, never across a /), else None:
    parse(FULL, "results/eval/r/epoch_4/metrics.json") == {"run": "r", "epoch": "4"}."""
    match = re.search(_regex(pattern) + "$", str(path))
    return None if match is None else match.groupdict()


def run_of(path: str | Path) -> str | None:
    """The run a workflow file (relative to the workflow's directory) belongs to: a file in the run's RUN or EVAL
    folder, or its GATE record; None for any other (a dataset, the report, a sweep's rung)."""
    for regex in (_regex(RUN + "/"), _regex(EVAL + "/"), _regex(GATE) + "$"):
        if match := re.match(regex, str(path)):
            return match["run"]
    return None


def eval_files(folder: str) -> dict[str, str]:
    """The files of one evaluation folder, by the names the rules give them (eval/write.py writes them)."""
    return {name: f"{folder}/{file}" for name, file in EVAL_FILES.items()}


EVAL_FILES = {
    "metrics": "metrics.json",
    "submission": "submission.json",
    "per_puzzle": "per_puzzle.csv",
    "votes": "votes.npz",
}


def pooled_report(folder: str) -> dict[str, str]:
    """The pooled-votes table of a report folder, as rule pool_votes writes it (and `pooled_html`)."""
    return {"md": f"{folder}/pooled.md", "csv": f"{folder}/pooled.csv"}


def task_pages(folder: str) -> dict[str, str]:
    """A report folder's per-task pages, as rule render_task_pages writes them (report/answers.py): `pages`, a page
    per task and the task-by-run index.html; `one_file`, the same in one file, for `snakemake --report report.html`;
    `front`, the folder's front page, every table linked, every plot in place."""
    return {"pages": f"{folder}/tasks", "one_file": f"{folder}/tasks.html", "front": f"{folder}/index.html"}


def pooled_html(folder: str) -> str:
    """The pooled-votes table's page, which `snakemake --report` shows."""
    return f"{folder}/pooled.html"
