# Config validated once; input functions and resource lookups for the rules. No rules here.
import json
import os
import sys

from arcpipe.config import workflow_config
from pathlib import Path

from arcpipe.jobs import (
    device_flag,
    evaluation_launch,
    evaluation_resources,
    partition_problems,
    preflight_resources,
    slurm_partitions,
)
from arcpipe.driver import (
    cancel_leftovers,
    complete_atomic_outputs,
    record_executor,
    register,
    take_over,
)
from arcpipe.doctor.memory import fit_problems
from arcpipe.forecast import forecast_header, forecast_line, forecast_runs
from arcpipe.gates import gate_epoch, gate_status, read_record
from arcpipe.keep import config_drift, planned_jobs, retraining
from arcpipe.launch import job_resources

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


# a run whose checkpoints exist and whose training config changed stops every Snakemake call (arcpipe.keep)
# the driver: take over from a dead one (its lock, its still-running cluster jobs), then record this one
# (arcpipe.driver); only in the process that plans and submits, never in dry runs or inside cluster jobs
NOT_DRIVING = {
    "-n",
    "--dry-run",
    "--dryrun",
    "--unlock",
    "--lint",
    "--list",
    "--list-rules",
    "--summary",
}
NOT_DRIVING |= {
    "--detailed-summary",
    "--dag",
    "--rulegraph",
    "--filegraph",
    "--d3dag",
    "--report",
}
NOT_DRIVING |= {
    "--cleanup-metadata",
    "--list-changes",
    "--lc",
    "--list-input-changes",
    "--li",
}


def driving(argv):
    return not any(
        a in NOT_DRIVING
        or (a[:1] == "-" and a[1:2] != "-" and "n" in a[1:] and a[1:].isalpha())
        for a in argv
    )


if workflow.is_main_process and driving(sys.argv[1:]):
    try:
        _may_drive, _lines = take_over(Path("."))
    except RuntimeError as err:
        print(f"arcpipe: {err}", file=sys.stderr)
        raise SystemExit(2)
    for _line in _lines:
        print(f"arcpipe: {_line}", file=sys.stderr)
    if _may_drive:
        register(Path("."))
        # a killed driver's config jobs left whole files, which Snakemake would mis-plan (arcpipe.driver)
        _whole = complete_atomic_outputs(Path("."))
        if _whole:
            print(
                f"arcpipe: {len(_whole)} config file(s) written whole by jobs cut off: kept "
                f"({', '.join(_whole)})",
                file=sys.stderr,
            )

_DRIFT = config_drift(CFG)
for _problem in _DRIFT:
    print(f"arcpipe: {_problem}", file=sys.stderr)
if _DRIFT:
    raise SystemExit(2)

# the bill before any job runs: per run of the targets named (every run otherwise), steps, FLOPs, GPU-hours and cost
# (arcpipe.forecast, as `arcpipe config check` prints it); to stderr, once, in the planning process only, after the
# config checks passed; `arcpipe forecast:` lines, apart from the `arcpipe:` lines that report problems
if workflow.is_main_process:
    _named = [target for target in ("smoke", "full") if target in sys.argv[1:]]
    _forecast = forecast_runs(CFG, Path("results"))
    print(
        f"arcpipe forecast: {forecast_header(CFG.report.gpu_hour_price, Path('results'))}",
        file=sys.stderr,
    )
    _listed = (
        sorted({r for t in _named for r in CFG.runs_for(t)})
        if _named
        else sorted(_forecast)
    )
    for _run in _listed:
        print(
            f"arcpipe forecast: {forecast_line(_run, _forecast[_run])}", file=sys.stderr
        )
    _total = sum(_forecast[_run].gpu_hours for _run in _listed)
    _cost = sum(_forecast[_run].cost for _run in _listed)
    print(
        f"arcpipe forecast: in all: {_total:,.0f} GPU-h, cost {_cost:,.0f}",
        file=sys.stderr,
    )
    # a micro-batch that will not fit its GPU, by the memory model's shipped or cached figures (nothing computed)
    for _problem in fit_problems(CFG, _listed, Path("results"))[0]:
        print(f"arcpipe: warning: {_problem}", file=sys.stderr)


def datasets_for(target):
    names = sorted({CFG.runs[run].dataset for run in CFG.runs_for(target)})
    if target == "smoke":
        names = sorted(
            set(names) | {name for name in CFG.datasets if name.startswith("smoke")}
        )
    return [f"results/data/{name}/verify.json" for name in names]


def preflights_for(target):
    return [f"results/runs/{run}/preflight.json" for run in CFG.runs_for(target)]


def dataset_config(wildcards):
    return CFG.datasets[wildcards.dataset].model_dump(mode="json")


def run_config(wildcards):
    """The run's resolved training config: the run and its dataset (not other runs, not the evaluation settings:
    changing those must not retrain anything)."""
    run = CFG.runs[wildcards.run]
    # not its gate nor its stop rule: deciding whether to start or where to end is not training
    return {
        "datasets": {run.dataset: CFG.datasets[run.dataset].model_dump(mode="json")},
        "runs": {wildcards.run: run.model_dump(mode="json", exclude={"gate", "stop"})},
    }


def eval_config(wildcards):
    """The evaluation settings of one run's checkpoints: the shared section with the run's batch size."""
    run = CFG.runs[wildcards.run]
    # ensemble_last makes jobs of its own (average_checkpoints, pool_last_votes): not a setting of this evaluation
    # selection_tasks is the report's (held-out tasks); without controls the file, and so every evaluation, is as
    # before controls existed; quick is the schedule's (draw_quick_tasks, schedule_full), not this evaluation's
    evaluation = CFG.evaluation.model_dump(
        mode="json", exclude={"ensemble_last", "selection_tasks", "quick"}
    )
    if not evaluation["controls"]:
        del evaluation["controls"]
    if run.eval_batch_size is not None:
        evaluation["batch_size"] = run.eval_batch_size
    return {"evaluation": evaluation}


def dataset_dir_for_run(wildcards):
    return f"results/data/{CFG.runs[wildcards.run].dataset}"


def verified_dataset(wildcards):
    return f"{dataset_dir_for_run(wildcards)}/verify.json"


def previous_boundary(wildcards):
    """[] for the first segment, else the previous boundary's checkpoint and state.

    Runs with a stop rule take no state from the end of the previous segment. After a stop, Snakemake deletes
    that temp file, and going on later (a raised target or patience) must not make it re-run a finished segment
    for it; the trainer resumes from the state's kept copy (resume/boundaries/, train/loop.py) instead.
    """
    run = CFG.runs[wildcards.run]
    previous = int(wildcards.epoch) - run.eval_interval
    if previous <= 0:
        return {}
    files = {
        "previous_ckpt": f"results/runs/{wildcards.run}/ckpt/epoch_{previous}.pt",
        "previous_state": f"results/runs/{wildcards.run}/state/epoch_{previous}.pt",
    }
    if run.stop is not None and previous in run.segment_ends():
        del files["previous_state"]
    return files


def first_segment_gate(wildcards):
    """A full run's first segment waits for its preflight, so a broken config fails in minutes."""
    run = CFG.runs[wildcards.run]
    if run.target == "full" and int(wildcards.epoch) == run.eval_interval:
        return f"results/runs/{wildcards.run}/preflight.json"
    return []


def segment_group(wildcards):
    """Consecutive boundaries of one segment share a group: one cluster job trains segment_evals boundaries."""
    run = CFG.runs[wildcards.run]
    index = (int(wildcards.epoch) // run.eval_interval - 1) // run.segment_evals
    return f"train-{wildcards.run}-segment{index}"


def shape_resource(name):
    """A resource of the run's job shape (arcpipe.launch.job_resources); None leaves it unset."""

    def lookup(wildcards):
        run = CFG.runs[wildcards.run]
        return job_resources(run.nodes, run.gpus_per_node)[name]

    lookup.__name__ = f"{name}_for_run"
    return lookup


def runtime_for_run(wildcards):
    """Job time limit in minutes: the trainer saves and exits before it (--deadline)."""
    return 30 if CFG.runs[wildcards.run].target == "smoke" else 24 * 60


def segment_index(wildcards):
    """The boundary's index in its run: a fresh rendezvous port per segment (arcpipe.launch)."""
    return int(wildcards.epoch) // CFG.runs[wildcards.run].eval_interval


def per_boundary(target, pattern, decisions=False, full=False):
    """`pattern` ({run}, {epoch}) at every evaluation boundary of every run of `target`, from the config alone:
    `snakemake -n full` plans with them without looking for checkpoints on disk. A gated run's files come from an
    input function of their own (`gated`): one per gate, so the plan shows every gate; so do the files of runs
    with stop rules (`stopped`), which end where the run stopped. With decisions: the decision records instead.
    full: only where the full evaluation is due (`full_due`; every boundary without evaluation.quick).
    """
    return [
        item
        for run in CFG.runs_for(target)
        for item in gated(run, stopped(run, pattern, decisions, full))
    ]


# Gates (runs.<run>.gate, arcpipe.gates): check_gate is a Snakemake checkpoint whose record says whether the run may
# train. Until it has run, asking for the record raises Snakemake's IncompleteCheckpointException, which makes the
# asking job wait for check_gate and be asked again after it. A gate that falls short drops the run's files from
# every target: its training is never asked for, and nothing fails.
def gate_passed(run):
    """True when the run has no gate or its gate passed; False when it fell short; waits for check_gate before."""
    if CFG.runs[run].gate is None:
        return True
    return read_record(checkpoints.check_gate.get(run=run).output[0])["passed"]


def gated(run, files):
    """A run's files for a target: as they are without a gate; with one, an input function giving them once the
    gate passed and none when it fell short."""
    if CFG.runs[run].gate is None:
        return files

    def after_gate(wildcards):
        return expand_items(files, wildcards) if gate_passed(run) else []

    after_gate.__name__ = f"after_gate_of_{run}"
    return [after_gate]


def one_input(items):
    """Files and `gated` input functions as one input: a named input takes one function, not a list of them."""
    if not any(callable(item) for item in items):
        return items

    def lookup(wildcards):
        return expand_items(items, wildcards)

    return lookup


def expand_items(items, wildcards):
    """Files and input functions (`gated`, `stopped`) as the list of files they give."""
    return [
        name
        for item in items
        for name in (item(wildcards) if callable(item) else [item])
    ]


def gate_decision(wildcards):
    """A gated run's first segment waits for its gate's decision and refuses a gate that fell short (asked for by
    path). The record is no input: a gate added or re-checked after training never retrains the run.
    """
    run = CFG.runs[wildcards.run]
    if run.gate is None or int(wildcards.epoch) != run.eval_interval:
        return []
    if not gate_passed(wildcards.run):
        raise ValueError(
            f"runs.{wildcards.run}.gate: {gate_status('results', wildcards.run)} "
            f"(record results/gates/{wildcards.run}.json): the run does not train; lower gate.min or remove the gate"
        )
    return []


def gate_metrics(wildcards):
    """The gate run's metrics.json at the gate's checkpoint (gate.epoch, else the gate run's last)."""
    gate = CFG.runs[wildcards.run].gate
    return f"results/eval/{gate.run}/epoch_{gate_epoch(CFG.runs, wildcards.run)}/metrics.json"


def gate_settings(wildcards):
    """check_gate's params: the gate as configured, so a changed threshold re-checks it."""
    return CFG.runs[wildcards.run].gate.model_dump(mode="json")


def gate_checkpoint(wildcards):
    return gate_epoch(CFG.runs, wildcards.run)


# Stop rules (runs.<run>.stop, arcpipe.stopping): decide_boundary is a Snakemake checkpoint at the end of every
# training segment but the last; its record says whether the run goes on. As for gates, asking for a record before
# it exists makes the asking job wait for it and be asked again after it. A run whose rule fired keeps its files up
# to that boundary; its later segments and evaluations are never asked for, so none is faked. Runs with no stop
# rules plan exactly as before: the chain from the config alone.
DECISION = "results/runs/{run}/decisions/epoch_{epoch}.json"


def goes_on(name, epoch, wait=True):
    """Whether run `name`'s decision at segment end `epoch` says go on; wait: for the checkpoint to decide, else
    read the record on disk (a missing one: no)."""
    path = DECISION.format(run=name, epoch=epoch)
    if wait:
        path = checkpoints.decide_boundary.get(run=name, epoch=epoch).output[0]
    elif not os.path.exists(path):
        return False
    with open(path) as f:
        return not json.load(f)["stop"]


def planned_epochs(name, wait=True, decisions=False):
    """The run's boundaries the targets ask for: every one without a stop rule; with one, those up to the first
    segment end whose decision says stop. decisions: the segment ends decided on, instead.
    """
    run = CFG.runs[name]
    if run.stop is None:
        return [] if decisions else run.boundaries()
    ends = run.segment_ends()[:-1]  # the last segment end: nothing left to decide
    epochs, decided = [], []
    for epoch in run.boundaries():
        epochs.append(epoch)
        if epoch in ends:
            decided.append(epoch)
            if not goes_on(name, epoch, wait):
                break
    return decided if decisions else epochs


def stopped(run, pattern, decisions=False, full=False):
    """`pattern` ({run}, {epoch}) at the run's planned boundaries (`planned_epochs`): a list for a run without a
    stop rule, an input function with one. full: only those whose full evaluation is due (`full_due`), an input
    function with evaluation.quick."""
    scheduled = full and CFG.evaluation.quick is not None
    if CFG.runs[run].stop is None and not scheduled:
        return [
            pattern.format(run=run, epoch=e)
            for e in planned_epochs(run, decisions=decisions)
        ]

    def until_stop(wildcards):
        return [
            pattern.format(run=run, epoch=e)
            for e in planned_epochs(run, decisions=decisions)
            if not scheduled or full_due(run, e)
        ]

    until_stop.__name__ = f"until_stop_of_{run}"
    return [until_stop]


def stop_decision(wildcards):
    """A stop-rule run's first segment after a decision waits for it and refuses a stop (asked for by path). The
    record is no input: a rule changed after training never retrains the run."""
    run = CFG.runs[wildcards.run]
    previous = int(wildcards.epoch) - run.eval_interval
    if run.stop is None or previous not in run.segment_ends():
        return []
    if not goes_on(wildcards.run, previous):
        raise ValueError(
            f"runs.{wildcards.run}.stop: the run stopped at epoch {previous} (record "
            f"{DECISION.format(run=wildcards.run, epoch=previous)}); epochs after it are not trained: raise "
            "stop.target or stop.patience to go on"
        )
    return []


def decision_inputs(wildcards):
    """decide_boundary's inputs: the evaluations of the segment that ends at {epoch}, and the previous decision,
    whose history this one adds to."""
    run = CFG.runs[wildcards.run]
    epoch = int(wildcards.epoch)
    ends = [e for e in run.segment_ends() if e < epoch]
    # with evaluation.quick the decision reads the quick evaluations: training waits for them only
    metrics = QUICK if CFG.evaluation.quick is not None else FULL
    files = {
        "metrics": [
            metrics.format(run=wildcards.run, epoch=e)
            for e in segment_epochs(wildcards)
        ]
    }
    if ends:
        files["previous"] = DECISION.format(run=wildcards.run, epoch=ends[-1])
    return files


def segment_epochs(wildcards):
    run = CFG.runs[wildcards.run]
    start = max([0, *(e for e in run.segment_ends() if e < int(wildcards.epoch))])
    return [e for e in run.boundaries() if start < e <= int(wildcards.epoch)]


def stop_rule(wildcards):
    """decide_boundary's params: the rule as configured, so a raised target or patience decides again."""
    return CFG.runs[wildcards.run].stop.model_dump(mode="json")


def decision_settings(wildcards):
    run = CFG.runs[wildcards.run]
    return {
        "boundaries": run.boundaries(),
        "epochs": segment_epochs(wildcards),
        "selection_tasks": CFG.evaluation.selection_tasks,
        # the report's held-out draw (report/selection.py)
        "seed": CFG.datasets[run.dataset].seed,
    }


# Quick evaluations (evaluation.quick, arcpipe.stopping): every boundary is evaluated on a fixed subset of the test
# tasks (draw_quick_tasks, evaluate_quick); schedule_full, a Snakemake checkpoint per boundary, decides from the quick
# scores so far whether the full evaluation is due there. The targets and the report ask for full evaluations only
# where their record says so. Without evaluation.quick every boundary is fully evaluated, as before.
FULL = "results/eval/{run}/epoch_{epoch}/metrics.json"
QUICK = "results/eval/{run}/epoch_{epoch}/quick/metrics.json"
SCHEDULE = "results/eval/{run}/schedule/epoch_{epoch}.json"


def full_due(name, epoch, wait=True):
    """Whether run `name`'s full evaluation at `epoch` is due; wait: for schedule_full to decide, else read the
    record on disk (a missing one: no). Always without evaluation.quick."""
    if CFG.evaluation.quick is None:
        return True
    path = SCHEDULE.format(run=name, epoch=epoch)
    if wait:
        path = checkpoints.schedule_full.get(run=name, epoch=epoch).output[0]
    elif not os.path.exists(path):
        return False
    with open(path) as f:
        return json.load(f)["full"]


def quick_settings(wildcards):
    """draw_quick_tasks' params: the quick share, and the held-out draw it must contain (the run's dataset seed)."""
    run = CFG.runs[wildcards.run]
    return {
        "schedule": CFG.evaluation.quick.model_dump(mode="json"),
        "selection_tasks": CFG.evaluation.selection_tasks,
        "seed": CFG.datasets[run.dataset].seed,
    }


def schedule_inputs(wildcards):
    """schedule_full's inputs: the quick evaluations up to {epoch}; at a decided segment end of a run with a stop
    rule, its decision (a stop makes this the stopping checkpoint)."""
    run = CFG.runs[wildcards.run]
    files = {
        "metrics": [
            QUICK.format(run=wildcards.run, epoch=e)
            for e in run.boundaries()
            if e <= int(wildcards.epoch)
        ]
    }
    if run.stop is not None and int(wildcards.epoch) in run.segment_ends()[:-1]:
        files["decision"] = DECISION.format(run=wildcards.run, epoch=wildcards.epoch)
    return files


def schedule_settings(wildcards):
    run = CFG.runs[wildcards.run]
    return {
        "boundaries": run.boundaries(),
        "epochs": [e for e in run.boundaries() if e <= int(wildcards.epoch)],
        "schedule": CFG.evaluation.quick.model_dump(mode="json"),
        "metric": f"pass@{CFG.report.main_k}",
    }


def in_report(name):
    """Whether a run's checkpoints may be in the report: not when its gate fell short. A smoke run waits for its
    gate; a full run's record is only read from disk: `snakemake report` never trains a gate run.
    """
    run = CFG.runs[name]
    if run.gate is None:
        return True
    if run.target == "smoke":
        return gate_passed(name)
    record = read_record(f"results/gates/{name}.json")
    return record is None or record["passed"]


def evaluations_of(target, quick=True):
    """Every evaluation of the target's runs, and the stop rules' decision records: asked for by name, a record is
    made again when its stopping settings change (params), and the plan grows when it now says go on. With evaluation.quick:
    the full evaluations where due, and (quick) every boundary's quick one.
    """
    files = per_boundary(target, FULL, full=True) + per_boundary(
        target, DECISION, decisions=True
    )
    if quick and CFG.evaluation.quick is not None:
        files += per_boundary(target, QUICK)
    return files


def quick_evaluations_of(target):
    """The quick evaluations of the target's runs (render_full_report); none without evaluation.quick."""
    return per_boundary(target, QUICK) if CFG.evaluation.quick is not None else []


# the inputs of the full runs' report (rules/report.smk: render_full_report, pool_full_votes)
def train_metrics_of(target):
    return per_boundary(target, "results/runs/{run}/metrics/epoch_{epoch}.jsonl")


def evaluation_votes_of(target):
    return per_boundary(target, "results/eval/{run}/epoch_{epoch}/votes.npz", full=True)


def report_boundaries():
    """(run, epoch) pairs in the report: every smoke boundary, and full-run checkpoints already on disk; of a run
    with a stop rule, those up to where it stopped (a full run's decisions as they are on disk).

    So `snakemake report` never starts GPU training; after a full run it evaluates and tabulates what exists.
    """
    pairs = []
    for name, run in CFG.runs.items():
        if not in_report(name):
            continue
        for epoch in planned_epochs(name, wait=run.target == "smoke"):
            if run.target == "smoke" or os.path.exists(
                f"results/runs/{name}/ckpt/epoch_{epoch}.pt"
            ):
                pairs.append((name, epoch))
    return pairs


def evaluations_for_report(wildcards):
    return [
        f"results/eval/{run}/epoch_{epoch}/metrics.json"
        for run, epoch in full_report_boundaries()
    ]


def evaluation_votes_for_report(wildcards):
    return [
        f"results/eval/{run}/epoch_{epoch}/votes.npz"
        for run, epoch in full_report_boundaries()
    ]


def full_report_boundaries():
    """`report_boundaries` whose full evaluation is due (all of them without evaluation.quick); a full run's
    schedule records as they are on disk."""
    return [
        (run, epoch)
        for run, epoch in report_boundaries()
        if full_due(run, epoch, wait=CFG.runs[run].target == "smoke")
    ]


def quick_evaluations_for_report(wildcards):
    """The quick evaluation of every boundary in the report; none without evaluation.quick."""
    if CFG.evaluation.quick is None:
        return []
    return [QUICK.format(run=run, epoch=epoch) for run, epoch in report_boundaries()]


def last_boundaries(wildcards):
    """The last {k} boundaries of the run, oldest first: the checkpoints of its ensemble (eval/ensemble.py)."""
    boundaries = planned_epochs(wildcards.run)
    if int(wildcards.k) > len(boundaries):
        raise ValueError(
            f"run {wildcards.run} has {len(boundaries)} checkpoints, fewer than {wildcards.k}"
        )
    return boundaries[-int(wildcards.k) :]


def last_checkpoints(wildcards):
    return [
        f"results/runs/{wildcards.run}/ckpt/epoch_{epoch}.pt"
        for epoch in last_boundaries(wildcards)
    ]


def last_votes(wildcards):
    return [
        f"results/eval/{wildcards.run}/epoch_{epoch}/votes.npz"
        for epoch in last_boundaries(wildcards)
    ]


def ensembles_of(target, runs=None):
    """The metrics of each run's ensembles of its last evaluation.ensemble_last checkpoints, averaged weights and
    pooled votes (rules evaluate_average, pool_last_votes); none without ensemble_last.
    """
    k = CFG.evaluation.ensemble_last
    if not k:
        return []
    # a target's runs: a gated run's ensembles wait for its gate (`gated`)
    if runs is None:
        return [
            item
            for run in CFG.runs_for(target)
            for item in gated(run, ensembles_of(None, [run]))
        ]
    return [
        f"results/eval/{run}/{kind}_last{k}/metrics.json"
        for run in runs
        for kind in ("avg", "pooled")
    ]


def ensembles_for_report(wildcards):
    """`ensembles_of` for the runs whose last ensemble_last checkpoints are all in the report."""
    in_report = set(report_boundaries())
    k = CFG.evaluation.ensemble_last or 0
    runs = [
        name
        for name, run in CFG.runs.items()
        if k
        and all(
            (name, epoch) in in_report
            for epoch in planned_epochs(name, wait=False)[-k:]
        )
    ]
    return ensembles_of(None, runs)


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
REPORT_PLOTS = ["passk_vs_step", "loss_vs_step", "accuracy_vs_step", "passk_vs_depth"]


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


def train_metrics_for_report(wildcards):
    return [
        f"results/runs/{run}/metrics/epoch_{epoch}.jsonl"
        for run, epoch in report_boundaries()
    ]


def verified_datasets_for_report(wildcards):
    return sorted(
        {
            f"results/data/{CFG.runs[run].dataset}/verify.json"
            for run, _ in report_boundaries()
        }
    )


def eval_resource(name):
    """A resource of a run's evaluation job (arcpipe.jobs.evaluation_resources): GPUs, memory, time limit."""

    def lookup(wildcards):
        run = CFG.runs[wildcards.run]
        data = CFG.datasets[run.dataset]
        return evaluation_resources(run, data, Path(dataset_dir_for_run(wildcards)))[
            name
        ]

    lookup.__name__ = f"eval_{name}_for_run"
    return lookup


def preflight_resource(name):
    def lookup(wildcards):
        return preflight_resources(CFG.runs[wildcards.run])[name]

    lookup.__name__ = f"preflight_{name}_for_run"
    return lookup


def eval_device(wildcards):
    run = CFG.runs[wildcards.run]
    return device_flag(run, run.evaluation_gpus)


def eval_launch(wildcards):
    return evaluation_launch(CFG.runs[wildcards.run])


def preflight_device(wildcards):
    run = CFG.runs[wildcards.run]
    return device_flag(run, min(run.gpus_per_node, 1))


def identifiers_for_run(wildcards):
    return f"{dataset_dir_for_run(wildcards)}/identifiers.json"


def kaggle_bundle():
    """The bundle `snakemake kaggle` makes: evaluation.kaggle_run (default: the first run) at its chosen epoch."""
    name = CFG.evaluation.kaggle_run or next(iter(CFG.runs))
    epoch = CFG.evaluation.kaggle_epoch or CFG.runs[name].epochs
    return f"results/kaggle/{name}/epoch_{epoch}"


def ancient_input(lookup):
    """An input function whose file counts as old: a newer copy (re-verified, rebuilt the same) re-runs nothing."""

    def wrapped(wildcards):
        return ancient(lookup(wildcards))

    wrapped.__name__ = f"ancient_{lookup.__name__}"
    return wrapped


def on_driver_start(workflow):
    """onstart: record how this driver's jobs are cancelled (arcpipe.driver), then the checkpoint guard."""
    settings = workflow.executor_settings
    record_executor(
        Path("."),
        workflow.executor_plugin.name if workflow.executor_plugin else None,
        getattr(settings, "cancel_cmd", None),
        getattr(settings, "status_cmd", None),
    )
    stop_if_retraining(workflow)
    if workflow.executor_plugin and workflow.executor_plugin.name == "slurm":
        stop_if_partitions_missing(workflow)


def on_driver_error():
    """onerror (a failed or interrupted run): cancel this driver's cluster jobs that may still run (arcpipe.driver)."""
    line = cancel_leftovers(Path("."))
    if line:
        print(f"arcpipe: {line}", file=sys.stderr)


def stop_workflow(workflow, problems):
    """Print one line per problem and end the driver before any job runs (its own locks released)."""
    for problem in problems:
        print(f"arcpipe: {problem}", file=sys.stderr)
    print(
        "arcpipe: stopped before running anything; no file was changed (docs/reliability.md: After a crash)",
        file=sys.stderr,
    )
    workflow.persistence.unlock()  # this run's own locks: the next run must not find them stale
    os._exit(3)  # at once: the scheduler has not started, no output was touched


def stop_if_partitions_missing(workflow):
    """Every slurm_partition the planned jobs name must exist (a typo would fail each job at sbatch)."""
    available = slurm_partitions()
    if available is None:
        return  # sbatch will say it
    wanted = {}
    for job in workflow.dag.needrun_jobs():
        jobs = job.jobs if job.is_group() else [job]
        for one in jobs:
            name = one.resources.get("slurm_partition")
            if name and not one.is_local:
                wanted.setdefault(str(name), set()).add(one.rule.name)
    problems = partition_problems(
        wanted, available, "your SLURM profile (profiles/slurm/config.yaml)"
    )
    if problems:
        stop_workflow(workflow, problems)


def stop_if_retraining(workflow):
    """Stop before any job runs if Snakemake would retrain over an existing checkpoint (arcpipe.keep)."""
    problems = retraining(planned_jobs(workflow.dag))
    if problems:
        stop_workflow(workflow, problems)
