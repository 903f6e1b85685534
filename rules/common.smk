# Config validated once; input functions and resource lookups for the rules. No rules here.
import os
import re
import sys

from arcpipe.config import workflow_config
from pathlib import Path

from arcpipe import paths, plan
from arcpipe.data import arc
from arcpipe.hooks import (
    on_driver_error,
    on_driver_start,
    print_forecast,
    start_driver,
    stop_on_drift,
)
from arcpipe.jobs import (
    device_flag,
    evaluation_launch,
    evaluation_resources,
    ttt_resources,
    preflight_resources,
)
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
    sweep=r"[A-Za-z0-9._-]+",


# the driver: take over from a dead one (its lock, its still-running cluster jobs), then record this one; a run whose
# checkpoints exist and whose training config changed stops every call; then the bill (arcpipe.hooks)
if workflow.is_main_process:
    start_driver(Path("."), sys.argv[1:])
stop_on_drift(CFG)
if workflow.is_main_process:
    print_forecast(CFG, Path(paths.RESULTS), sys.argv[1:])


def datasets_for(target):
    names = sorted({CFG.runs[run].dataset for run in CFG.runs_for(target)})
    if target == "smoke":
        names = sorted(
            set(names) | {name for name in CFG.datasets if name.startswith("smoke")}
        )
    return [paths.DATA_VERIFIED.format(dataset=name) for name in names]


def preflights_for(target):
    return [paths.PREFLIGHT.format(run=run) for run in CFG.runs_for(target)]


def dataset_config(wildcards):
    return CFG.datasets[wildcards.dataset].build_params()


def re_arc_files(wildcards):
    return arc.re_arc_files(CFG.datasets[wildcards.dataset].sources)


def run_config(wildcards):
    """The run's resolved training config: the run and its dataset, and the dataset its test-time training answers
    (not other runs, not the evaluation settings: changing those must not retrain anything).
    """
    run = CFG.runs[wildcards.run]
    names = list(dict.fromkeys([run.dataset, run.answered_dataset]))
    # not its gate nor its stop rule: deciding whether to start or where to end is not training. A dataset as its
    # build's params: a dataset field added since, at its default, leaves the file (and the jobs reading it) as it was
    return {
        "datasets": {name: CFG.datasets[name].build_params() for name in names},
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
    # which checkpoint `snakemake kaggle` bundles is the bundle's choice: written at its default, so choosing another
    # run or epoch re-evaluates nothing
    evaluation.update(kaggle_run=None, kaggle_epoch=None)
    if run.eval_batch_size is not None:
        evaluation["batch_size"] = run.eval_batch_size
    return {"evaluation": evaluation}


def dataset_dir_for_run(wildcards):
    return paths.DATA.format(dataset=CFG.runs[wildcards.run].dataset)


def verified_dataset(wildcards):
    return paths.DATA_VERIFIED.format(dataset=CFG.runs[wildcards.run].dataset)


def ttt_dataset_dir(wildcards):
    """The dataset a run's test-time training answers (runs.<run>.ttt.dataset, else the run's own)."""
    return paths.DATA.format(dataset=CFG.runs[wildcards.run].answered_dataset)


def verified_ttt_dataset(wildcards):
    return paths.DATA_VERIFIED.format(dataset=CFG.runs[wildcards.run].answered_dataset)


def ttt_row(wildcards):
    """The report's name of the run's test-time training evaluation (arcpipe.plan.ttt_row)."""
    return plan.ttt_row(wildcards.run, CFG.runs[wildcards.run])


def previous_boundary(wildcards):
    """[] for the first segment, else the previous boundary's checkpoint and state (arcpipe.plan.previous_files)."""
    run = CFG.runs[wildcards.run]
    return plan.previous_files(run, wildcards.run, int(wildcards.epoch))


def first_segment_gate(wildcards):
    """A full run's first segment waits for its preflight, so a broken config fails in minutes."""
    run = CFG.runs[wildcards.run]
    if run.target == "full" and int(wildcards.epoch) == run.eval_interval:
        return paths.PREFLIGHT.format(run=wildcards.run)
    return []


def segment_group(wildcards):
    """Consecutive boundaries of one segment share a group: one cluster job trains segment_evals boundaries."""
    index = plan.segment_index(CFG.runs[wildcards.run], int(wildcards.epoch))
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


# Staged runs (gates, stop rules, the quick/full schedule): what each (run, boundary) is owed is arcpipe.plan's to
# decide, from the config and the decision records; the functions below only ask it and format paths. A record not
# made yet raises Snakemake's IncompleteCheckpointException when the plan asks for it (WaitingRecords): the asking
# job waits for the checkpoint that makes it and is asked again after it. A run without staged features is planned
# from the config alone (a plain list of files), so `snakemake -n full` shows its whole chain.
class WaitingRecords:
    """arcpipe.plan.Records as Snakemake's checkpoints give them: a record not made yet makes the asking job wait."""

    def stop(self, run, epoch):
        path = checkpoints.decide_boundary.get(run=run, epoch=epoch).output[0]
        return plan.read_decision(path)["stop"]

    def full(self, run, epoch):
        path = checkpoints.schedule_full.get(run=run, epoch=epoch).output[0]
        return plan.read_schedule(path)["full"]

    def gate(self, run):
        return plan.read_gate(checkpoints.check_gate.get(run=run).output[0])["passed"]

    def rung(self, sweep, epoch):
        path = checkpoints.decide_rung.get(sweep=sweep, epoch=epoch).output[0]
        return tuple(plan.read_rung(path)["kept"])


WAITING = WaitingRecords()
ON_DISK = plan.DiskRecords(Path(paths.RESULTS))


def plan_of(name, wait=True, evaluations=False, until=None):
    """arcpipe.plan.run_plan of run `name`: waiting for its records, or as they are on disk (wait=False)."""
    records = WAITING if wait else ON_DISK
    return plan.run_plan(CFG, name, records, evaluations=evaluations, until=until)


def at(which, pattern):
    """A selector: `pattern` ({run}, {epoch}) at a plan's `which` boundaries (trained, full, quick, decisions)."""
    return lambda p: plan.files(p, pattern, which)


def per_run(target, select, evaluations=False):
    """select(plan) for each run of `target`: files for a run planned from the config alone; for a staged run one
    input function of its own, so that Snakemake waits on every run's next record at once.
    """
    items = []
    for name in CFG.runs_for(target):
        if plan.is_static(CFG, name):
            items += select(plan_of(name, wait=False))
        else:
            items.append(asking(name, select, evaluations))
    return items


def asking(name, select, evaluations):
    def lookup(wildcards):
        return select(plan_of(name, evaluations=evaluations))

    lookup.__name__ = f"planned_for_{name}"
    return lookup


def one_input(items):
    """Files and `per_run` input functions as one input: a named input takes one function, not a list of them."""
    if not any(callable(item) for item in items):
        return items

    def lookup(wildcards):
        return [
            name
            for item in items
            for name in (item(wildcards) if callable(item) else [item])
        ]

    return lookup


def planned_boundary(wildcards):
    """train_segment: waits for what decides whether its boundary is trained (the gate, the stop decision before
    it) and refuses one the plan does not train (asked for by path). No file: a gate or a rule changed after
    training never retrains the run."""
    epoch = int(wildcards.epoch)
    refusal = plan_of(wildcards.run, until=epoch).refusal(epoch)
    if refusal:
        raise ValueError(refusal)
    return []


def gate_metrics(wildcards):
    """check_gate: the gate run's full evaluation at the boundary the gate reads (arcpipe.plan.gate_reading)."""
    gate_run, epoch, _, why = plan.gate_reading(CFG, wildcards.run, WAITING)
    if epoch is None:
        raise ValueError(f"runs.{wildcards.run}.gate: {why}: nothing to check")
    return paths.FULL.format(run=gate_run, epoch=epoch)


def gate_checkpoint(wildcards):
    return plan.gate_reading(CFG, wildcards.run, WAITING)[1]


def gate_settings(wildcards):
    """check_gate's params: the gate as configured, so a changed threshold re-checks it."""
    return CFG.runs[wildcards.run].gate.model_dump(mode="json")


def decision_inputs(wildcards):
    return plan.decision_inputs(CFG, wildcards.run, int(wildcards.epoch))


def rung_inputs(wildcards):
    """decide_rung's inputs: the arms still training at the rung (their full evaluations there), the rung before."""
    return plan.rung_inputs(CFG, wildcards.sweep, int(wildcards.epoch), WAITING)


def halving_settings(wildcards):
    """decide_rung's params: the halving as configured, so a changed eta or metric decides again."""
    return CFG.sweeps[wildcards.sweep].halving.model_dump(mode="json")


def segment_epochs(wildcards):
    return plan.segment_epochs(CFG.runs[wildcards.run], int(wildcards.epoch))


def stop_rule(wildcards):
    """decide_boundary's params: the rule as configured, so a raised target or patience decides again."""
    return CFG.runs[wildcards.run].stop.model_dump(mode="json")


def decision_settings(wildcards):
    run = CFG.runs[wildcards.run]
    return {
        "boundaries": run.boundaries(),
        "epochs": segment_epochs(wildcards),
        "selection_tasks": CFG.evaluation.selection_tasks,
        "seed": CFG.datasets[
            run.dataset
        ].seed,  # the report's held-out draw (report/selection.py)
    }


def quick_settings(wildcards):
    """draw_quick_tasks' params: the quick share, and the held-out draw it must contain (the run's dataset seed)."""
    run = CFG.runs[wildcards.run]
    return {
        "schedule": CFG.evaluation.quick.model_dump(mode="json"),
        "selection_tasks": CFG.evaluation.selection_tasks,
        "seed": CFG.datasets[run.dataset].seed,
    }


def schedule_inputs(wildcards):
    return plan.schedule_inputs(CFG, wildcards.run, int(wildcards.epoch))


def schedule_settings(wildcards):
    run = CFG.runs[wildcards.run]
    return {
        "boundaries": run.boundaries(),
        "epochs": [e for e in run.boundaries() if e <= int(wildcards.epoch)],
        "schedule": CFG.evaluation.quick.model_dump(mode="json"),
        "metric": f"pass@{CFG.report.main_k}",
    }


def evaluations_of(target, quick=True):
    """Every due full evaluation of the target's runs and their stop decisions (asked for by name: a record is made
    again when its settings change, and the plan grows when it now says go on); quick: every quick evaluation.
    """
    files = full_evaluations_of(target) + decisions_of(target)
    if quick and CFG.evaluation.quick is not None:
        files += per_run(target, at("quick", paths.QUICK))
    return files


def full_evaluations_of(target):
    """The metrics.json of every due full evaluation of the target's runs, test-time training's included."""
    return per_run(target, at("full", paths.FULL), evaluations=True) + per_run(
        target, ttt_evaluation
    )


def ablation_files(sweep):
    """A sweep's ablation table and plot (Snakefile: render_ablation_<sweep>, report/render.render_ablation)."""
    out = paths.SWEEP_REPORT.format(sweep=sweep)
    return [f"{out}/ablation.{ext}" for ext in ("csv", "md", "html", "png")]


def decisions_of(target):
    """The stop decisions of the target's runs (records, not metrics: a report waits on them, never reads them)."""
    return per_run(target, at("decisions", paths.DECISION))


def ttt_evaluation(p):
    """The run's test-time training evaluation after its last boundary (runs.<run>.ttt); none without it."""
    return plan.ttt_files(p, CFG.runs[p.run])


def ttt_jobs_of_run(wildcards):
    """Every job of a run's test-time training after boundary {epoch} (rule ttt_collect)."""
    return plan.ttt_jobs(wildcards.run, CFG.runs[wildcards.run], int(wildcards.epoch))


def quick_evaluations_of(target):
    """The quick evaluations of the target's runs (render_full_report); none without evaluation.quick."""
    if CFG.evaluation.quick is None:
        return []
    return per_run(target, at("quick", paths.QUICK))


# the inputs of the full runs' report (rules/report.smk: render_full_report, pool_full_votes)
def train_metrics_of(target):
    return per_run(target, at("trained", paths.TRAIN_METRICS))


def evaluation_votes_of(target):
    return per_run(target, at("full", paths.VOTES), evaluations=True)


def ensembles_of(target):
    """The metrics of each run's ensembles (evaluation.ensemble_last: averaged weights and pooled votes of its last
    trained checkpoints; none without ensemble_last), then of the target's ensembles of runs (config `ensembles:`).
    """
    k = CFG.evaluation.ensemble_last
    files = per_run(target, lambda p: plan.ensemble_files(p, k)) if k else []
    return files + ensembles_of_runs(target)


def ensembles_of_runs(target):
    """The metrics of each ensemble of runs the target builds (config `ensembles:`, rule pool_ensemble)."""
    return [plan.ensemble_of_runs(CFG, e)[0] for e in CFG.ensembles_for(target)]


def ensemble_votes(wildcards):
    """The votes that pool_ensemble pools, each member's last evaluation's (arcpipe.plan.last_votes)."""
    return plan.ensemble_of_runs(CFG, wildcards.ensemble)[1]


def report_boundaries(which="trained"):
    """(run, epoch) in the report (arcpipe.plan.report_boundaries): every trained smoke boundary; a full run's
    trained checkpoints on disk, by its records on disk, so `snakemake report` never trains. which="full": those
    whose full evaluation is due."""
    return plan.report_boundaries(CFG, plan_of, os.path.exists, which)


def evaluations_for_report(wildcards):
    return [paths.FULL.format(run=r, epoch=e) for r, e in report_boundaries("full")]


def evaluation_votes_for_report(wildcards):
    return [paths.VOTES.format(run=r, epoch=e) for r, e in report_boundaries("full")]


def quick_evaluations_for_report(wildcards):
    """The quick evaluation of every boundary in the report; none without evaluation.quick."""
    if CFG.evaluation.quick is None:
        return []
    return [paths.QUICK.format(run=r, epoch=e) for r, e in report_boundaries()]


def train_metrics_for_report(wildcards):
    return [paths.TRAIN_METRICS.format(run=r, epoch=e) for r, e in report_boundaries()]


def ensembles_for_report(wildcards):
    """The ensembles of the runs whose ensemble checkpoints are all in the report, and the test-time training
    evaluations of the runs whose last boundary is (a row of their run, as an ensemble is).
    """
    k = CFG.evaluation.ensemble_last
    reported = set(report_boundaries())
    files = []
    for run in CFG.runs:
        if not k and CFG.runs[run].ttt is None:
            continue
        p = plan_of(run, wait=CFG.runs[run].target == "smoke")
        if k and p.ensemble and all((run, e) in reported for e in p.ensemble):
            files += plan.ensemble_files(p, k)
        files += [
            f
            for f in plan.ttt_files(p, CFG.runs[run])
            if (run, p.trained[-1]) in reported
        ]
    for (
        ensemble
    ) in (
        CFG.ensembles
    ):  # an ensemble of runs once every member's last boundary is in the report
        members = CFG.ensemble_members(ensemble)
        if all((m, CFG.runs[m].epochs) in reported for m in members):
            files.append(plan.ensemble_of_runs(CFG, ensemble)[0])
    return files


def last_boundaries(wildcards):
    """The boundaries of the run's ensemble of its last {k} trained checkpoints, oldest first (eval/ensemble.py)."""
    p = plan_of(wildcards.run)
    k = int(wildcards.k)
    if len(p.trained) < k:
        raise ValueError(
            f"run {wildcards.run} has {len(p.trained)} trained checkpoints, fewer than {k}"
        )
    return p.trained[-k:]


def last_checkpoints(wildcards):
    return [
        paths.CKPT.format(run=wildcards.run, epoch=e)
        for e in last_boundaries(wildcards)
    ]


def last_votes(wildcards):
    return [
        paths.VOTES.format(run=wildcards.run, epoch=e)
        for e in last_boundaries(wildcards)
    ]


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


def verified_datasets_for_report(wildcards):
    return sorted(
        {
            paths.DATA_VERIFIED.format(dataset=CFG.runs[run].dataset)
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


def ttt_resource(name):
    """A resource of a run's test-time-training job (arcpipe.jobs.ttt_resources): one GPU at most, and a time
    limit that covers its share of the test-time training."""

    def lookup(wildcards):
        return ttt_resources(
            CFG,
            wildcards.run,
            Path(dataset_dir_for_run(wildcards)),
            Path(paths.RESULTS),
        )[name]

    lookup.__name__ = f"ttt_{name}_for_run"
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
    """The bundle `snakemake kaggle` makes (arcpipe.plan.kaggle_plan): evaluation.kaggle_run (default: the first
    run) at evaluation.kaggle_epoch, else at its last trained boundary. A run without staged features: from the
    config alone; a staged one's is asked of the plan when the target is built, waiting on the records that decide
    it (where a stop rule or halving ends it)."""
    name = CFG.evaluation.kaggle_run or next(iter(CFG.runs))
    if plan.is_static(CFG, name):
        return plan.kaggle_plan(CFG, ON_DISK).files

    def planned_kaggle_bundle(wildcards):
        chosen = plan.kaggle_plan(CFG, WAITING)
        if chosen.refusal:
            raise ValueError(chosen.refusal)
        return chosen.files

    return planned_kaggle_bundle


def ancient_input(lookup):
    """An input function whose file counts as old: a newer copy (re-verified, rebuilt the same) re-runs nothing."""

    def wrapped(wildcards):
        return ancient(lookup(wildcards))

    wrapped.__name__ = f"ancient_{lookup.__name__}"
    return wrapped
