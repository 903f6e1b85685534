"""The whole config file: datasets x runs (each sweep expanded into one run per arm, then each `seeds` list into
one run per seed), evaluation, report and Kaggle, and the checks that cross them: references between sections
and limits that depend on more than one section. `config/schema.json` is this model's JSON schema."""

from __future__ import annotations

import logging
from typing import Any

from pydantic import Field, field_validator, model_validator

from arcpipe.config.base import CELL_ACCURACY, Strict, invalid, uncomputed_metric
from arcpipe.config.datasets import DatasetConfig
from arcpipe.config.evaluation import EvaluationConfig, KaggleConfig, ReportConfig
from arcpipe.config.runs import RunConfig
from arcpipe.config.stop import stop_problems
from arcpipe.config.sweeps import TARGET_PREFIX, SweepConfig, expand_sweeps
from arcpipe.names import case_collisions, check_name

log = logging.getLogger("arcpipe.config")

FEW_HELD_OUT = 10  # held-out tasks below which a patience rule mostly reads noise (a warning)
MAX_EVALUATIONS = 200  # more boundaries than this only warns: each checkpoint costs disk


class EnsembleConfig(Strict):
    """Runs whose answers are pooled into one vote (upstream VARC's ViT+U-Net ensemble, whose analysis.py
    majority-votes every answer of both models): each member's last evaluation (its test-time training's for a run
    with `ttt`, else its last checkpoint's), all on one test set, voted as one (eval/pool.py). A report row of its
    own, `results/eval/<name>/ensemble/`, with a submission.json."""

    # runs, or seed groups (a run declared with `seeds:`, standing for each of its seeds): at least two in all
    runs: list[str] = Field(min_length=1)


class WorkflowConfig(Strict):
    datasets: dict[str, DatasetConfig]
    runs: dict[str, RunConfig] = Field(default_factory=dict)
    evaluation: EvaluationConfig = EvaluationConfig()
    report: ReportConfig = ReportConfig()
    kaggle: KaggleConfig = KaggleConfig()
    # name -> a base run copied over a grid of values into runs of their own (config/sweeps.py, docs/sweeps.md)
    sweeps: dict[str, SweepConfig] = Field(default_factory=dict)
    # name -> runs pooled into one vote (EnsembleConfig)
    ensembles: dict[str, EnsembleConfig] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _expand(cls, data: Any) -> Any:
        """Sweeps first, so that a sweep's `seeds` (or its base's) expands each arm as any run's would."""
        return cls._expand_seeds(cls._expand_sweeps(data))

    @classmethod
    def _expand_sweeps(cls, data: Any) -> Any:
        """Each sweep's arms become runs after the declared ones (config/sweeps.py); the base runs stay as they are."""
        runs = data.get("runs") if isinstance(data, dict) else None
        if not isinstance(runs, dict) or not data.get("sweeps"):
            return data
        datasets = data.get("datasets")
        expanded, problems = expand_sweeps(runs, data["sweeps"], datasets if isinstance(datasets, dict) else None)
        if problems:
            raise invalid("WorkflowConfig", [((), problem, data["sweeps"]) for problem in problems])
        return {**data, "runs": expanded}

    @classmethod
    def _expand_seeds(cls, data: Any) -> Any:
        """Each run with `seeds: [a, b]` becomes runs `{run}-s{a}`, `{run}-s{b}` in its place, with `seed: a` or b
        and `seed_group: {run}`; every later check, and every job, sees only the expanded runs."""
        runs = data.get("runs") if isinstance(data, dict) else None
        if not isinstance(runs, dict):
            return data
        problems, expanded = [], {}
        for name, body in runs.items():
            seeds = body.get("seeds") if isinstance(body, dict) else None
            if not isinstance(seeds, list) or not all(type(seed) is int for seed in seeds):
                expanded[name] = body  # no seeds, or not a list of integers: RunConfig's own field reports it
                continue
            duplicates = sorted({seed for seed in seeds if seeds.count(seed) > 1})
            if not seeds:
                problems.append(f"runs.{name}.seeds: empty; list at least one seed, or remove seeds")
            if duplicates:
                problems.append(f"runs.{name}.seeds={seeds}: {_seeds_listed_twice(duplicates)}; list each seed once")
            for key in ("seed", "seed_group"):
                if key in body:
                    problems.append(
                        f"runs.{name}: {key}={body[key]!r} and seeds={seeds} are both set; "
                        f"remove {key} (seeds expands into one run per seed, grouped under {name})"
                    )
            rest = {key: value for key, value in body.items() if key != "seeds"}
            for seed in seeds:
                if f"{name}-s{seed}" in runs:
                    problems.append(
                        f"runs.{name}.seeds: seed {seed} makes run {name}-s{seed}, which is already declared under "
                        "runs; rename one of them"
                    )
                expanded[f"{name}-s{seed}"] = {**rest, "seed": seed, "seed_group": name}
        if problems:
            raise invalid("WorkflowConfig", [((), problem, runs) for problem in problems])
        return {**data, "runs": expanded}

    @field_validator("datasets", "runs", "sweeps", "ensembles")
    @classmethod
    def _names(cls, value: dict[str, Any]) -> dict[str, Any]:
        # a run's or dataset's name becomes folders under results/, log files, job names and Kubernetes/SLURM specs;
        # a sweep's begins each of its arms' names and names its target rule
        for name in value:
            check_name(name, "name")
        problems = case_collisions(value, "name")
        if problems:
            raise ValueError(problems[0])
        return value

    @model_validator(mode="after")
    def _references(self) -> WorkflowConfig:
        problems = []
        for name, run in self.runs.items():
            if run.dataset not in self.datasets:
                problems.append(
                    f"runs.{name}.dataset={run.dataset!r} is not declared under datasets "
                    f"(declared: {', '.join(sorted(self.datasets))})"
                )
            elif run.ttt is not None and run.ttt.dataset is not None and run.ttt.dataset not in self.datasets:
                problems.append(
                    f"runs.{name}.ttt.dataset={run.ttt.dataset!r} is not declared under datasets "
                    f"(declared: {', '.join(sorted(self.datasets))})"
                )
            elif run.ttt is not None and not self.datasets[run.answered_dataset].test_demos_in_train:
                where = "ttt.dataset" if run.ttt.dataset else "dataset"
                problems.append(
                    f"runs.{name}.ttt fits each test task on its demonstrations in the train split, which "
                    f"{where} {run.answered_dataset} leaves out (test_demos_in_train: false); set "
                    "ttt.dataset to a dataset that holds them (docs/varc.md)"
                )
        last = self.evaluation.ensemble_last
        short = [
            f"{name} ({run.num_evaluations})" for name, run in self.runs.items() if run.num_evaluations < (last or 0)
        ]
        if short:
            problems.append(
                f"evaluation.ensemble_last={last} is more than the checkpoints of run {', '.join(short)} "
                "(epochs / eval_interval); lower ensemble_last"
            )
        kaggle = self.evaluation.kaggle_run
        if kaggle is not None and kaggle not in self.runs:
            problems.append(f"evaluation.kaggle_run={kaggle!r} is not a run (runs: {', '.join(sorted(self.runs))})")
        elif (
            kaggle is not None
            and self.evaluation.kaggle_epoch is not None
            and self.evaluation.kaggle_epoch not in self.runs[kaggle].boundaries()
        ):
            problems.append(
                f"evaluation.kaggle_epoch={self.evaluation.kaggle_epoch} is not a checkpoint of run {kaggle} "
                f"(multiples of eval_interval={self.runs[kaggle].eval_interval})"
            )
        problems += _gate_problems(self.runs, self.evaluation.pass_ks)
        problems += stop_problems({name: run.stop for name, run in self.runs.items()}, self.evaluation.pass_ks)
        for name, sweep in self.sweeps.items():
            where = f"sweeps.{name}.halving.metric"
            if sweep.halving and (problem := uncomputed_metric(where, sweep.halving.metric, self.evaluation.pass_ks)):
                problems.append(problem)
        for name, run in self.runs.items():
            if run.stop is None:
                continue
            if len(run.segment_ends()) < 2:
                problems.append(
                    f"runs.{name}.stop: the run trains in one segment (segment_evals={run.segment_evals} of its "
                    f"{run.num_evaluations} checkpoints), so no boundary is left to stop at; lower segment_evals "
                    "or remove the stop rule"
                )
            elif run.stop.min_epoch is not None and run.stop.min_epoch > run.segment_ends()[-2]:
                problems.append(
                    f"runs.{name}.stop.min_epoch={run.stop.min_epoch} is after the run's last decision (epoch "
                    f"{run.segment_ends()[-2]}: the last segment end but one), so the rule never fires; lower it"
                )
        held_out = self.evaluation.selection_tasks
        for name in sorted({run.dataset for run in self.runs.values()} & set(self.datasets)):
            # max_puzzles caps the test subset, so a dataset never has more test tasks than that
            most = self.datasets[name].max_puzzles
            if held_out and most is not None and held_out >= most:
                problems.append(
                    f"evaluation.selection_tasks={held_out} leaves no test task to report on: dataset {name} has at "
                    f"most max_puzzles={most}; lower selection_tasks"
                )
        problems += self._ensemble_problems()
        if problems:
            raise invalid("WorkflowConfig", [((), problem, self) for problem in problems])
        for name, run in self.runs.items():
            if run.num_evaluations > MAX_EVALUATIONS:
                log.warning(
                    "runs.%s has %d evaluations (> %d): each checkpoint is a full copy of the weights on disk",
                    name,
                    run.num_evaluations,
                    MAX_EVALUATIONS,
                )
            few = self.evaluation.selection_tasks
            coarse = run.stop is not None and run.stop.metric != CELL_ACCURACY  # a pass@K moves in whole tasks
            if coarse and run.stop.patience is not None and 0 < few < FEW_HELD_OUT:
                # benchmarks/RESULTS.md (2026-11-26, staged runs on a curve that learns): on 2 held-out tasks a
                # patience of 3 stopped a run at epoch 80 of 160 whose test pass@2 rose to 22.9% at epoch 120
                log.warning(
                    "runs.%s.stop: patience reads %s on evaluation.selection_tasks=%d held-out tasks, a score in "
                    "steps of %.0f%%: a plateau there mostly measures how few they are; hold out %d or more, or set "
                    "stop.min_epoch past where the curve starts to rise",
                    name,
                    run.stop.metric,
                    few,
                    100 / few,
                    FEW_HELD_OUT,
                )
        return self

    def _ensemble_problems(self) -> list[str]:
        problems = []
        for name, ensemble in self.ensembles.items():
            where = f"ensembles.{name}"
            if name in self.runs or any(run.seed_group == name for run in self.runs.values()):
                problems.append(f"{where}: {name} is a run's name too, and names a report row of its own; rename it")
                continue
            unknown = [m for m in ensemble.runs if m not in self.runs and not self.seeds_of(m)]
            if unknown:
                problems.append(f"{where}.runs: {', '.join(unknown)} not a run or a seed group; name declared runs")
                continue
            members = self.ensemble_members(name)
            if len(members) < 2:
                problems.append(f"{where}.runs: {members} is one run: pool at least two")
            datasets = {self.runs[m].answered_dataset for m in members}
            if len(datasets) > 1:
                problems.append(
                    f"{where}.runs answer other test sets ({', '.join(sorted(datasets))}): pool runs whose last "
                    "evaluations (test-time training's where the run has ttt) score one dataset"
                )
            targets = {self.runs[m].target for m in members}
            if len(targets) > 1:
                problems.append(f"{where}.runs mixes smoke and full runs: pool runs of one target")
            staged = [m for m in members if self.runs[m].stop is not None or self.runs[m].gate is not None]
            if staged:
                problems.append(
                    f"{where}.runs: {', '.join(staged)} has a stop rule or gate, so its last evaluation is decided "
                    "while it runs; not pooled yet: pool runs without them"
                )
            halved = [m for m in members if (tag := self.runs[m].sweep) is not None and self.sweeps[tag.name].halving]
            if halved:
                problems.append(
                    f"{where}.runs: {', '.join(halved)} is an arm of a sweep with halving, which decides while it runs "
                    "where the arm ends; not pooled yet: pool runs outside it, or remove the sweep's halving"
                )
        return problems

    def seeds_of(self, group: str) -> list[str]:
        """The runs a `seeds:` list expanded run `group` into (none when it is no seed group)."""
        return [name for name, run in self.runs.items() if run.seed_group == group and run.sweep is None]

    def ensemble_members(self, ensemble: str) -> list[str]:
        """The runs of ensemble `ensemble`, seed groups expanded, in the order listed."""
        members: list[str] = []
        for name in self.ensembles[ensemble].runs:
            for run in [name] if name in self.runs else self.seeds_of(name):
                if run not in members:
                    members.append(run)
        return members

    def ensembles_for(self, target: str) -> list[str]:
        """The ensembles a target builds: those whose runs all belong to it."""
        runs = set(self.runs_for(target))
        return [name for name in self.ensembles if set(self.ensemble_members(name)) <= runs]

    def runs_for(self, target: str) -> list[str]:
        """The runs a Snakemake target builds: `smoke` and `full` by each run's tag; `sweep_<name>` the sweep's base
        run (its reference) and every arm of sweep <name>, each with its seeds."""
        sweep = target.removeprefix(TARGET_PREFIX)
        if target.startswith(TARGET_PREFIX) and sweep in self.sweeps:
            return self.reference_of(sweep) + self.arms_of(sweep)
        return [name for name, run in self.runs.items() if run.target == target]

    @property
    def targets(self) -> list[str]:
        """Every Snakemake target that builds runs: smoke, full, then each sweep's."""
        return ["smoke", "full", *self.sweep_targets]

    @property
    def sweep_targets(self) -> list[str]:
        """`sweep_<name>` per sweep: the Snakefile's target rule of its arms (`runs_for`)."""
        return [f"{TARGET_PREFIX}{sweep}" for sweep in self.sweeps]

    def reference_of(self, sweep: str) -> list[str]:
        """The sweep's base run with its seeds (`base` itself, or `base-s0`, ...): the reference every arm is
        compared with in the sweep's ablation table (report/ablation.py)."""
        base = self.sweeps[sweep].base
        return [n for n, r in self.runs.items() if r.sweep is None and (n == base or r.seed_group == base)]

    def arm_seeds(self, sweep: str) -> dict[str, dict[int, str]]:
        """arm -> seed -> run of sweep `sweep`, the reference first (under the base run's name), then each arm."""
        arms: dict[str, dict[int, str]] = {}
        for name in self.reference_of(sweep):
            arms.setdefault(self.sweeps[sweep].base, {})[self.runs[name].seed] = name
        for name in self.arms_of(sweep):
            arms.setdefault(self.runs[name].sweep.arm, {})[self.runs[name].seed] = name
        return arms

    def arms_of(self, sweep: str) -> list[str]:
        """Every run expanded from sweep `sweep`, in the grid's order (each arm's seeds together)."""
        return [name for name, run in self.runs.items() if run.sweep is not None and run.sweep.name == sweep]


def json_schema() -> dict[str, Any]:
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **WorkflowConfig.model_json_schema()}


def _gate_problems(runs: dict[str, RunConfig], pass_ks: list[int]) -> list[str]:
    """One line per gate that names no other run, a pass@K the evaluation does not compute, an epoch that is not a
    checkpoint of its run, or that closes a cycle of gates (each cycle reported once, at its first run)."""
    problems = []
    for name, run in runs.items():
        gate = run.gate
        if gate is None:
            continue
        where = f"runs.{name}.gate"
        if gate.run == name:
            problems.append(f"{where}.run={gate.run!r}: a run cannot gate itself; name another run")
        elif gate.run not in runs:
            problems.append(f"{where}.run={gate.run!r} is not a run (runs: {', '.join(sorted(runs))})")
        elif gate.epoch is not None and gate.epoch not in runs[gate.run].boundaries():
            other = runs[gate.run]
            problems.append(
                f"{where}.epoch={gate.epoch} is not a checkpoint of run {gate.run} (multiples of "
                f"eval_interval={other.eval_interval} up to epochs={other.epochs}); pick one, or remove epoch for "
                "its last"
            )
        if gate.run in runs and runs[gate.run].target != run.target:
            problems.append(
                f"{where}.run={gate.run!r} is a {runs[gate.run].target} run and {name} a {run.target} run: "
                f"`snakemake {run.target}` would train {gate.run} to check the gate; gate on a {run.target} run"
            )
        if problem := uncomputed_metric(f"{where}.metric", gate.metric, pass_ks):
            problems.append(problem)
    reported: set[str] = set()
    for name in runs:
        chain = [name]
        while (gate := runs[chain[-1]].gate) is not None and gate.run in runs and gate.run != chain[-1]:
            if gate.run in chain:
                cycle = chain[chain.index(gate.run) :]
                if not reported & set(cycle):
                    problems.append(
                        f"runs.{cycle[0]}.gate: gates form a cycle ({' -> '.join([*cycle, cycle[0]])}), so none of "
                        "these runs would ever train; remove one of the gates"
                    )
                reported |= set(cycle)
                break
            chain.append(gate.run)
    return problems


def _seeds_listed_twice(duplicates: list[int]) -> str:
    listed = ", ".join(map(str, duplicates))
    return f"seed {listed} is listed twice" if len(duplicates) == 1 else f"seeds {listed} are listed twice"
