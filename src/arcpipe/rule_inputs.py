"""What each rule of the workflow asks: its input functions, params and resources, from the validated config and
arcpipe.plan. rules/common.smk makes one `RuleInputs` (named `ask` there) and every rule calls it, as `ask.run_config`
or `ask.eval_resource("gpus")`; Snakemake's own objects stay in the .smk files (`checkpoints`, reaching here as the
`waiting` records; `report()` and `ancient()`).

Being a module, not a .smk file, it is importable: tests/unit/test_plan.py asks it what a target asks for instead
of restating the rules' targets, and a change here is one change for the workflow and its tests.

Staged runs (gates, stop rules, the quick/full schedule, halving): what each (run, boundary) is owed is
arcpipe.plan's to decide, from the config and the decision records; the functions below only ask it and format
paths. A record not made yet raises Snakemake's IncompleteCheckpointException when the plan asks for it
(`WaitingRecords`): the asking job waits for the checkpoint that makes it and is asked again after it. A run
without staged features is planned from the config alone (a plain list of files), so `snakemake -n full` shows its
whole chain.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from arcpipe import paths, plan
from arcpipe.config import WorkflowConfig
from arcpipe.data import arc
from arcpipe.jobs import device_flag, evaluation_launch, evaluation_resources, preflight_resources, ttt_resources
from arcpipe.launch import job_resources


class WaitingRecords:
    """arcpipe.plan.Records as Snakemake's checkpoints give them: a record not made yet makes the asking job wait.
    `checkpoints` is the workflow's (rules/common.smk)."""

    def __init__(self, checkpoints: Any) -> None:
        self.checkpoints = checkpoints

    def stop(self, run: str, epoch: int) -> bool:
        path = self.checkpoints.decide_boundary.get(run=run, epoch=epoch).output[0]
        return plan.read_decision(path)["stop"]

    def full(self, run: str, epoch: int) -> bool:
        path = self.checkpoints.schedule_full.get(run=run, epoch=epoch).output[0]
        return plan.read_schedule(path)["full"]

    def gate(self, run: str) -> bool:
        return plan.read_gate(self.checkpoints.check_gate.get(run=run).output[0])["passed"]

    def rung(self, sweep: str, epoch: int) -> tuple[str, ...]:
        path = self.checkpoints.decide_rung.get(sweep=sweep, epoch=epoch).output[0]
        return tuple(plan.read_rung(path)["kept"])


class RuleInputs:
    """The rules' questions, answered from `cfg`: `waiting` gives the records the plan waits on (WaitingRecords in
    a workflow; any arcpipe.plan.Records elsewhere), `results` is where the records on disk are."""

    def __init__(self, cfg: WorkflowConfig, waiting: plan.Records, results: str | Path = paths.RESULTS) -> None:
        self.cfg = cfg
        self.waiting = waiting
        self.on_disk = plan.DiskRecords(Path(results))

    def datasets_for(self, target):
        names = sorted({self.cfg.runs[run].dataset for run in self.cfg.runs_for(target)})
        if target == "smoke":
            names = sorted(set(names) | {name for name in self.cfg.datasets if name.startswith("smoke")})
        return [paths.DATA_VERIFIED.format(dataset=name) for name in names]

    def preflights_for(self, target):
        return [paths.PREFLIGHT.format(run=run) for run in self.cfg.runs_for(target)]

    def dataset_config(self, wildcards):
        return self.cfg.datasets[wildcards.dataset].build_params()

    def re_arc_files(self, wildcards):
        return arc.re_arc_files(self.cfg.datasets[wildcards.dataset].sources)

    def run_config(self, wildcards):
        """The run's resolved training config: the run and its dataset, and the dataset its test-time training answers
        (not other runs, not the evaluation settings: changing those must not retrain anything).
        """
        run = self.cfg.runs[wildcards.run]
        names = list(dict.fromkeys([run.dataset, run.answered_dataset]))
        # not its gate nor its stop rule: deciding whether to start or where to end is not training. A dataset as
        # its build's params: a dataset field added since, at its default, leaves the file (and the jobs reading it)
        # as it was
        return {
            "datasets": {name: self.cfg.datasets[name].build_params() for name in names},
            "runs": {wildcards.run: run.model_dump(mode="json", exclude={"gate", "stop"})},
        }

    def eval_config(self, wildcards):
        """The evaluation settings of one run's checkpoints: the shared section with the run's batch size."""
        run = self.cfg.runs[wildcards.run]
        # ensemble_last makes jobs of its own (average_checkpoints, pool_last_votes): not a setting of this evaluation
        # selection_tasks is the report's (held-out tasks); without controls the file, and so every evaluation, is as
        # before controls existed; quick is the schedule's (draw_quick_tasks, schedule_full), not this evaluation's
        evaluation = self.cfg.evaluation.model_dump(mode="json", exclude={"ensemble_last", "selection_tasks", "quick"})
        if not evaluation["controls"]:
            del evaluation["controls"]
        # which checkpoint `snakemake kaggle` bundles is the bundle's choice: written at its default, so choosing
        # another run or epoch re-evaluates nothing
        evaluation.update(kaggle_run=None, kaggle_epoch=None)
        if run.eval_batch_size is not None:
            evaluation["batch_size"] = run.eval_batch_size
        return {"evaluation": evaluation}

    def dataset_dir_for_run(self, wildcards):
        return paths.DATA.format(dataset=self.cfg.runs[wildcards.run].dataset)

    def verified_dataset(self, wildcards):
        return paths.DATA_VERIFIED.format(dataset=self.cfg.runs[wildcards.run].dataset)

    def ttt_dataset_dir(self, wildcards):
        """The dataset a run's test-time training answers (runs.<run>.ttt.dataset, else the run's own)."""
        return paths.DATA.format(dataset=self.cfg.runs[wildcards.run].answered_dataset)

    def verified_ttt_dataset(self, wildcards):
        return paths.DATA_VERIFIED.format(dataset=self.cfg.runs[wildcards.run].answered_dataset)

    def ttt_row(self, wildcards):
        """The report's name of the run's test-time training evaluation (arcpipe.plan.ttt_row)."""
        return plan.ttt_row(wildcards.run, self.cfg.runs[wildcards.run])

    def previous_boundary(self, wildcards):
        """[] for the first segment, else the previous boundary's checkpoint and state (arcpipe.plan.previous_files)."""
        run = self.cfg.runs[wildcards.run]
        return plan.previous_files(run, wildcards.run, int(wildcards.epoch))

    def first_segment_gate(self, wildcards):
        """A full run's first segment waits for its preflight, so a broken config fails in minutes."""
        run = self.cfg.runs[wildcards.run]
        if run.target == "full" and int(wildcards.epoch) == run.eval_interval:
            return paths.PREFLIGHT.format(run=wildcards.run)
        return []

    def segment_group(self, wildcards):
        """Consecutive boundaries of one segment share a group: one cluster job trains segment_evals boundaries."""
        index = plan.segment_index(self.cfg.runs[wildcards.run], int(wildcards.epoch))
        return f"train-{wildcards.run}-segment{index}"

    def shape_resource(self, name):
        """A resource of the run's job shape (arcpipe.launch.job_resources); None leaves it unset."""

        def lookup(wildcards):
            run = self.cfg.runs[wildcards.run]
            return job_resources(run.nodes, run.gpus_per_node)[name]

        lookup.__name__ = f"{name}_for_run"
        return lookup

    def runtime_for_run(self, wildcards):
        """Job time limit in minutes: the trainer saves and exits before it (--deadline)."""
        return 30 if self.cfg.runs[wildcards.run].target == "smoke" else 24 * 60

    def segment_index(self, wildcards):
        """The boundary's index in its run: a fresh rendezvous port per segment (arcpipe.launch)."""
        return int(wildcards.epoch) // self.cfg.runs[wildcards.run].eval_interval

    def plan_of(self, name, wait=True, evaluations=False, until=None):
        """arcpipe.plan.run_plan of run `name`: waiting for its records, or as they are on disk (wait=False)."""
        records = self.waiting if wait else self.on_disk
        return plan.run_plan(self.cfg, name, records, evaluations=evaluations, until=until)

    def at(self, which, pattern):
        """A selector: `pattern` ({run}, {epoch}) at a plan's `which` boundaries (trained, full, quick, decisions)."""
        return lambda p: plan.files(p, pattern, which)

    def per_run(self, target, select, evaluations=False):
        """select(plan) for each run of `target`: files for a run planned from the config alone; for a staged run one
        input function of its own, so that Snakemake waits on every run's next record at once.
        """
        items = []
        for name in self.cfg.runs_for(target):
            if plan.is_static(self.cfg, name):
                items += select(self.plan_of(name, wait=False))
            else:
                items.append(self.asking(name, select, evaluations))
        return items

    def asking(self, name, select, evaluations):
        def lookup(wildcards):
            return select(self.plan_of(name, evaluations=evaluations))

        lookup.__name__ = f"planned_for_{name}"
        return lookup

    def one_input(self, items):
        """Files and `per_run` input functions as one input: a named input takes one function, not a list of them."""
        if not any(callable(item) for item in items):
            return items

        def lookup(wildcards):
            return [name for item in items for name in (item(wildcards) if callable(item) else [item])]

        return lookup

    def planned_boundary(self, wildcards):
        """train_segment: waits for what decides whether its boundary is trained (the gate, the stop decision before
        it) and refuses one the plan does not train (asked for by path). No file: a gate or a rule changed after
        training never retrains the run."""
        epoch = int(wildcards.epoch)
        refusal = self.plan_of(wildcards.run, until=epoch).refusal(epoch)
        if refusal:
            raise ValueError(refusal)
        return []

    def gate_metrics(self, wildcards):
        """check_gate: the gate run's full evaluation at the boundary the gate reads (arcpipe.plan.gate_reading)."""
        gate_run, epoch, _, why = plan.gate_reading(self.cfg, wildcards.run, self.waiting)
        if epoch is None:
            raise ValueError(f"runs.{wildcards.run}.gate: {why}: nothing to check")
        return paths.FULL.format(run=gate_run, epoch=epoch)

    def gate_checkpoint(self, wildcards):
        return plan.gate_reading(self.cfg, wildcards.run, self.waiting)[1]

    def gate_settings(self, wildcards):
        """check_gate's params: the gate as configured, so a changed threshold re-checks it."""
        return self.cfg.runs[wildcards.run].gate.model_dump(mode="json")

    def decision_inputs(self, wildcards):
        return plan.decision_inputs(self.cfg, wildcards.run, int(wildcards.epoch))

    def rung_inputs(self, wildcards):
        """decide_rung's inputs: the arms still training at the rung (their full evaluations there), the rung before."""
        return plan.rung_inputs(self.cfg, wildcards.sweep, int(wildcards.epoch), self.waiting)

    def halving_settings(self, wildcards):
        """decide_rung's params: the halving as configured, so a changed eta or metric decides again."""
        return self.cfg.sweeps[wildcards.sweep].halving.model_dump(mode="json")

    def segment_epochs(self, wildcards):
        return plan.segment_epochs(self.cfg.runs[wildcards.run], int(wildcards.epoch))

    def stop_rule(self, wildcards):
        """decide_boundary's params: the rule as configured, so a raised target or patience decides again."""
        return self.cfg.runs[wildcards.run].stop.model_dump(mode="json")

    def decision_settings(self, wildcards):
        run = self.cfg.runs[wildcards.run]
        return {
            "boundaries": run.boundaries(),
            "epochs": self.segment_epochs(wildcards),
            "selection_tasks": self.cfg.evaluation.selection_tasks,
            "seed": self.cfg.datasets[run.dataset].seed,  # the report's held-out draw (report/selection.py)
        }

    def quick_settings(self, wildcards):
        """draw_quick_tasks' params: the quick share, and the held-out draw it must contain (the run's dataset seed)."""
        run = self.cfg.runs[wildcards.run]
        return {
            "schedule": self.cfg.evaluation.quick.model_dump(mode="json"),
            "selection_tasks": self.cfg.evaluation.selection_tasks,
            "seed": self.cfg.datasets[run.dataset].seed,
        }

    def schedule_inputs(self, wildcards):
        return plan.schedule_inputs(self.cfg, wildcards.run, int(wildcards.epoch))

    def schedule_settings(self, wildcards):
        run = self.cfg.runs[wildcards.run]
        return {
            "boundaries": run.boundaries(),
            "epochs": [e for e in run.boundaries() if e <= int(wildcards.epoch)],
            "schedule": self.cfg.evaluation.quick.model_dump(mode="json"),
            "metric": f"pass@{self.cfg.report.main_k}",
        }

    def evaluations_of(self, target, quick=True):
        """Every due full evaluation of the target's runs and their stop decisions (asked for by name: a record is made
        again when its settings change, and the plan grows when it now says go on); quick: every quick evaluation.
        """
        files = self.full_evaluations_of(target) + self.decisions_of(target)
        if quick and self.cfg.evaluation.quick is not None:
            files += self.per_run(target, self.at("quick", paths.QUICK))
        return files

    def full_evaluations_of(self, target):
        """The metrics.json of every due full evaluation of the target's runs, test-time training's included."""
        return self.per_run(target, self.at("full", paths.FULL), evaluations=True) + self.per_run(
            target, self.ttt_evaluation
        )

    def ablation_files(self, sweep):
        """A sweep's ablation table and plot (Snakefile: render_ablation_<sweep>, report/render.render_ablation)."""
        out = paths.SWEEP_REPORT.format(sweep=sweep)
        return [f"{out}/ablation.{ext}" for ext in ("csv", "md", "html", "png")]

    def decisions_of(self, target):
        """The stop decisions of the target's runs (records, not metrics: a report waits on them, never reads them)."""
        return self.per_run(target, self.at("decisions", paths.DECISION))

    def ttt_evaluation(self, p):
        """The run's test-time training evaluation after its last boundary (runs.<run>.ttt); none without it."""
        return plan.ttt_files(p, self.cfg.runs[p.run])

    def ttt_jobs_of_run(self, wildcards):
        """Every job of a run's test-time training after boundary {epoch} (rule ttt_collect)."""
        return plan.ttt_jobs(wildcards.run, self.cfg.runs[wildcards.run], int(wildcards.epoch))

    def quick_evaluations_of(self, target):
        """The quick evaluations of the target's runs (render_full_report); none without evaluation.quick."""
        if self.cfg.evaluation.quick is None:
            return []
        return self.per_run(target, self.at("quick", paths.QUICK))

    # the inputs of the full runs' report (rules/report.smk: render_full_report, pool_full_votes)
    def train_metrics_of(self, target):
        return self.per_run(target, self.at("trained", paths.TRAIN_METRICS))

    def answered_datasets_of(self, target):
        """The verify.json of every dataset whose tasks the target's runs answer (render_full_task_pages)."""
        return self._answered_datasets(self.cfg.runs_for(target))

    def _answered_datasets(self, runs):
        """The verify.json of every dataset whose tasks `runs` answer: each run's own and the one its test-time
        training answers (the per-task pages draw their demonstrations)."""
        names = {self.cfg.runs[run].dataset for run in runs} | {self.cfg.runs[run].answered_dataset for run in runs}
        return sorted(paths.DATA_VERIFIED.format(dataset=name) for name in names)

    def evaluation_votes_of(self, target):
        return self.per_run(target, self.at("full", paths.VOTES), evaluations=True)

    def ensembles_of(self, target):
        """The metrics of each run's ensembles (evaluation.ensemble_last: averaged weights and pooled votes of its last
        trained checkpoints; none without ensemble_last), then of the target's ensembles of runs (config `ensembles:`).
        """
        k = self.cfg.evaluation.ensemble_last
        files = self.per_run(target, lambda p: plan.ensemble_files(p, k)) if k else []
        return files + self.ensembles_of_runs(target)

    def ensembles_of_runs(self, target):
        """The metrics of each ensemble of runs the target builds (config `ensembles:`, rule pool_ensemble)."""
        return [plan.ensemble_of_runs(self.cfg, e)[0] for e in self.cfg.ensembles_for(target)]

    def ensemble_votes(self, wildcards):
        """The votes that pool_ensemble pools, each member's last evaluation's (arcpipe.plan.last_votes)."""
        return plan.ensemble_of_runs(self.cfg, wildcards.ensemble)[1]

    def report_boundaries(self, which="trained"):
        """(run, epoch) in the report (arcpipe.plan.report_boundaries): every trained smoke boundary; a full run's
        trained checkpoints on disk, by its records on disk, so `snakemake report` never trains. which="full": those
        whose full evaluation is due."""
        return plan.report_boundaries(self.cfg, self.plan_of, os.path.exists, which)

    def evaluations_for_report(self, wildcards):
        return [paths.FULL.format(run=r, epoch=e) for r, e in self.report_boundaries("full")]

    def evaluation_votes_for_report(self, wildcards):
        return [paths.VOTES.format(run=r, epoch=e) for r, e in self.report_boundaries("full")]

    def quick_evaluations_for_report(self, wildcards):
        """The quick evaluation of every boundary in the report; none without evaluation.quick."""
        if self.cfg.evaluation.quick is None:
            return []
        return [paths.QUICK.format(run=r, epoch=e) for r, e in self.report_boundaries()]

    def train_metrics_for_report(self, wildcards):
        return [paths.TRAIN_METRICS.format(run=r, epoch=e) for r, e in self.report_boundaries()]

    def ensembles_for_report(self, wildcards):
        """The ensembles of the runs whose ensemble checkpoints are all in the report, and the test-time training
        evaluations of the runs whose last boundary is (a row of their run, as an ensemble is).
        """
        k = self.cfg.evaluation.ensemble_last
        reported = set(self.report_boundaries())
        files = []
        for run in self.cfg.runs:
            if not k and self.cfg.runs[run].ttt is None:
                continue
            p = self.plan_of(run, wait=self.cfg.runs[run].target == "smoke")
            if k and p.ensemble and all((run, e) in reported for e in p.ensemble):
                files += plan.ensemble_files(p, k)
            files += [f for f in plan.ttt_files(p, self.cfg.runs[run]) if (run, p.trained[-1]) in reported]
        for ensemble in self.cfg.ensembles:  # an ensemble of runs once every member's last boundary is in the report
            members = self.cfg.ensemble_members(ensemble)
            if all((m, self.cfg.runs[m].epochs) in reported for m in members):
                files.append(plan.ensemble_of_runs(self.cfg, ensemble)[0])
        return files

    def last_boundaries(self, wildcards):
        """The boundaries of the run's ensemble of its last {k} trained checkpoints, oldest first (eval/ensemble.py)."""
        p = self.plan_of(wildcards.run)
        k = int(wildcards.k)
        if len(p.trained) < k:
            raise ValueError(f"run {wildcards.run} has {len(p.trained)} trained checkpoints, fewer than {k}")
        return p.trained[-k:]

    def last_checkpoints(self, wildcards):
        return [paths.CKPT.format(run=wildcards.run, epoch=e) for e in self.last_boundaries(wildcards)]

    def last_votes(self, wildcards):
        return [paths.VOTES.format(run=wildcards.run, epoch=e) for e in self.last_boundaries(wildcards)]

    def verified_datasets_for_report(self, wildcards):
        return sorted(
            {paths.DATA_VERIFIED.format(dataset=self.cfg.runs[run].dataset) for run, _ in self.report_boundaries()}
        )

    def task_page_evaluations(self, wildcards):
        """The evaluations the per-task pages show (rule render_task_pages, report/answers.columns_of picks its
        columns): every full evaluation in the report, its runs' test-time training, checkpoint ensembles and
        ensembles of runs."""
        return self.evaluations_for_report(wildcards) + self.ensembles_for_report(wildcards)

    def answered_datasets_for_report(self, wildcards):
        """The verify.json of every dataset whose tasks the report's runs answer (render_task_pages)."""
        return self._answered_datasets({run for run, _ in self.report_boundaries()})

    def eval_resource(self, name, quick=False):
        """A resource of a run's evaluation job (arcpipe.jobs.evaluation_resources): GPUs, memory, and a time limit
        from the forecast's cost of the evaluation (quick: of a quick evaluation, on its share of the tasks)."""

        def lookup(wildcards):
            return evaluation_resources(self.cfg, wildcards.run, Path(paths.RESULTS), quick)[name]

        lookup.__name__ = f"{'quick' if quick else 'eval'}_{name}_for_run"
        return lookup

    def ttt_resource(self, name):
        """A resource of a run's test-time-training job (arcpipe.jobs.ttt_resources): one GPU at most, and a time
        limit that covers its share of the test-time training."""

        def lookup(wildcards):
            return ttt_resources(self.cfg, wildcards.run, Path(paths.RESULTS))[name]

        lookup.__name__ = f"ttt_{name}_for_run"
        return lookup

    def preflight_resource(self, name):
        def lookup(wildcards):
            return preflight_resources(self.cfg.runs[wildcards.run])[name]

        lookup.__name__ = f"preflight_{name}_for_run"
        return lookup

    def eval_device(self, wildcards):
        run = self.cfg.runs[wildcards.run]
        return device_flag(run, run.evaluation_gpus)

    def eval_launch(self, wildcards):
        return evaluation_launch(self.cfg.runs[wildcards.run])

    def identifiers_for_run(self, wildcards):
        return f"{self.dataset_dir_for_run(wildcards)}/identifiers.json"

    def kaggle_bundle(self):
        """The bundle `snakemake kaggle` makes (arcpipe.plan.kaggle_plan): evaluation.kaggle_run (default: the first
        run) at evaluation.kaggle_epoch, else at its last trained boundary. A run without staged features: from the
        config alone; a staged one's is asked of the plan when the target is built, waiting on the records that decide
        it (where a stop rule or halving ends it)."""
        name = self.cfg.evaluation.kaggle_run or next(iter(self.cfg.runs))
        if plan.is_static(self.cfg, name):
            return plan.kaggle_plan(self.cfg, self.on_disk).files

        def planned_kaggle_bundle(wildcards):
            chosen = plan.kaggle_plan(self.cfg, self.waiting)
            if chosen.refusal:
                raise ValueError(chosen.refusal)
            return chosen.files

        return planned_kaggle_bundle
