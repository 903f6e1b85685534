"""The plan of a workflow: what each (run, boundary) is owed, decided from the config and the decision records.

    records = DiskRecords("results")                 # or rule_inputs.WaitingRecords: a job waits for a record
    p = run_plan(cfg, "urm-arc1", records)          # RunPlan: gate, trained boundaries, evaluations, stop, waits
    p.trained, p.full, p.quick, p.decisions, p.ensemble, p.gate.state, p.waiting
    fates(cfg, "urm-arc1", records)                 # one line per boundary: trained or not, which evaluations, why

Three kinds of decision are made from results while a workflow runs, each by a Snakemake checkpoint that writes a
record (one reader each, below):

* a gate (`runs.<run>.gate`, arcpipe.gates; record results/gates/<run>.json): the run trains only if another
  run's full evaluation reaches a threshold;
* a stop rule (`runs.<run>.stop`, arcpipe.stopping; results/runs/<run>/decisions/epoch_<E>.json at every segment end
  but the last): the run ends at the first boundary whose decision says stop;
* the quick/full schedule (`evaluation.quick`; results/eval/<run>/schedule/epoch_<E>.json at every boundary): whether
  the boundary's full evaluation is due, besides its quick one;
* a halving rung (`sweeps.<name>.halving`, arcpipe.halving; results/sweeps/<name>/rungs/epoch_<E>.json at each rung):
  which of a sweep's arms go on; an arm it does not keep ends there, as a stop rule ends a run. Its full evaluation
  at the rung is due whatever the quick schedule says (the rung reads it).

This module is the only place that turns them into a plan: arcpipe.rule_inputs asks it (the rules' input functions are
wiring: each asks `run_plan` and formats paths), so do the report, the driver's end-of-run lines and the forecast.
It reads no torch and never touches Snakemake: a `Records` answers each question with the record's verdict, or None
while the record does not exist; the plan then says it waits on it (`RunPlan.waiting`). Snakemake's own Records
raises instead, which makes the asking job wait for the checkpoint and ask again (arcpipe.rule_inputs). Records are
asked in the order the decisions are made, and no further than the first one missing, so a job waits on exactly the
record that decides what comes next.

Where two features meet (docs/staged-runs.md):

* a gate reads the gate run's full evaluation at gate.epoch, else at its last planned boundary; when the gate run
  stopped before that boundary, at the boundary where it stopped (its last trained one). That full evaluation is
  due whatever the quick schedule says (`full_reasons`: "read by the gate of <run>");
* a gate on a run that itself never started (its own gate closed) is closed;
* a stopped run's ensembles (evaluation.ensemble_last: averaged weights and pooled votes) use its last trained
  boundaries; a run with fewer trained boundaries than ensemble_last has none;
* a stop rule decides on the quick evaluations under evaluation.quick (on the held-out selection tasks either way),
  and the boundary where it stops gets the full evaluation (arcpipe.stopping.full_evaluation_due);
* a run whose gate is closed trains nothing, is evaluated nowhere and is in the report as "not started".
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from arcpipe.paths import (  # the files of a boundary and the records of the decisions (their one owner)
    CKPT,
    DECISION,
    ENSEMBLE,
    FULL,
    GATE,
    KAGGLE,
    QUICK,
    RESULTS,
    RUNG,
    RUNS_ENSEMBLE,
    SCHEDULE,
    STATE,
    TTT,
    TTT_JOB,
    under,
)

if TYPE_CHECKING:
    from arcpipe.config import RunConfig, WorkflowConfig

# -- records: one reader for each kind ------------------------------------------------------------------------------


def read_json(path: str | Path) -> dict[str, Any] | None:
    """A record, or None when there is none."""
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        return None


def read_decision(path: str | Path) -> dict[str, Any] | None:
    """A stop rule's decision record (arcpipe.stopping.decision_record): `stop`, `reason`, `epoch`, the scores."""
    return read_json(path)


def read_schedule(path: str | Path) -> dict[str, Any] | None:
    """A quick/full schedule record (arcpipe.stopping.schedule_at_boundary): `full`, `reason`."""
    return read_json(path)


def read_gate(path: str | Path) -> dict[str, Any] | None:
    """A gate record (arcpipe.gates.decide): `passed`, `value`, `min`, `epoch`."""
    return read_json(path)


def read_rung(path: str | Path) -> dict[str, Any] | None:
    """A halving rung's record (arcpipe.halving.rung_record): `kept`, `stopped`, each arm's score and rank."""
    return read_json(path)


class Records(Protocol):
    """The verdict of each decision record; None while the record does not exist (the plan waits on it)."""

    def stop(self, run: str, epoch: int) -> bool | None: ...

    def full(self, run: str, epoch: int) -> bool | None: ...

    def gate(self, run: str) -> bool | None: ...

    def rung(self, sweep: str, epoch: int) -> tuple[str, ...] | None: ...  # the arms kept there


@dataclass(frozen=True)
class DiskRecords:
    """The records as they are on disk in the workflow's results folder."""

    results: Path = Path(RESULTS)

    def _read(self, reader: Any, pattern: str, key: str, **where: Any) -> bool | None:
        record = reader(under(self.results, pattern, **where))
        return None if record is None else bool(record[key])

    def stop(self, run: str, epoch: int) -> bool | None:
        return self._read(read_decision, DECISION, "stop", run=run, epoch=epoch)

    def full(self, run: str, epoch: int) -> bool | None:
        return self._read(read_schedule, SCHEDULE, "full", run=run, epoch=epoch)

    def gate(self, run: str) -> bool | None:
        return self._read(read_gate, GATE, "passed", run=run)

    def rung(self, sweep: str, epoch: int) -> tuple[str, ...] | None:
        record = read_rung(under(self.results, RUNG, sweep=sweep, epoch=epoch))
        return None if record is None else tuple(record["kept"])


@dataclass(frozen=True)
class MemoryRecords:
    """Records held in dictionaries (tests, and what-if plans): {(run, epoch): stop}, {(run, epoch): full},
    {run: passed}, {(sweep, epoch): kept arms}; a missing key is a record not made yet."""

    stops: Mapping[tuple[str, int], bool] = field(default_factory=dict)
    fulls: Mapping[tuple[str, int], bool] = field(default_factory=dict)
    gates: Mapping[str, bool] = field(default_factory=dict)
    rungs: Mapping[tuple[str, int], tuple[str, ...]] = field(default_factory=dict)

    def stop(self, run: str, epoch: int) -> bool | None:
        return self.stops.get((run, epoch))

    def full(self, run: str, epoch: int) -> bool | None:
        return self.fulls.get((run, epoch))

    def gate(self, run: str) -> bool | None:
        return self.gates.get(run)

    def rung(self, sweep: str, epoch: int) -> tuple[str, ...] | None:
        return self.rungs.get((sweep, epoch))


# -- the plan -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Wait:
    """A decision record the rest of a run's plan depends on, not made yet."""

    kind: Literal["gate", "decision", "schedule", "rung"]
    run: str  # for a rung: the sweep
    epoch: int | None = None

    @property
    def path(self) -> str:
        pattern = {"gate": GATE, "decision": DECISION, "schedule": SCHEDULE, "rung": RUNG}[self.kind]
        return pattern.format(run=self.run, sweep=self.run, epoch=self.epoch)


@dataclass(frozen=True)
class GatePlan:
    """A run's gate: the gate run's boundary it reads (None until known), and whether it is waiting, open or
    closed, and why."""

    gate_run: str
    epoch: int | None
    state: Literal["waiting", "open", "closed"]
    why: str


@dataclass(frozen=True)
class RunPlan:
    """What one run is owed, as far as the records decide it.

    trained: the boundaries the run trains (every planned one without staged features); decisions: the segment ends
    whose stop decision is asked for; quick: the boundaries with a quick evaluation; full: those whose full
    evaluation is due (`full_reasons` says why); stopped_at: where a stop rule ended it; ensemble: the boundaries
    of its ensembles (averaged weights, pooled votes), () when none; waiting: the records not made yet that decide
    the rest (empty: the plan is final)."""

    run: str
    gate: GatePlan | None
    trained: tuple[int, ...]
    decisions: tuple[int, ...]
    quick: tuple[int, ...]
    full: tuple[int, ...]
    full_reasons: Mapping[int, str]
    stopped_at: int | None
    ensemble: tuple[int, ...]
    waiting: tuple[Wait, ...]
    planned: tuple[int, ...]  # every boundary of the config, trained or not
    rungs: tuple[int, ...] = ()  # the halving rungs this arm reached (their records asked for)
    halted_by: str = ""  # the record that ended the run at stopped_at: its stop decision, or its sweep's rung

    @property
    def final(self) -> bool:
        return not self.waiting

    @property
    def started(self) -> bool:
        return self.gate is None or self.gate.state == "open"

    def refusal(self, epoch: int) -> str | None:
        """Why boundary `epoch` is not trained (the config key to change), or None when it is."""
        if epoch in self.trained:
            return None
        if self.gate is not None and self.gate.state == "closed":
            return f"runs.{self.run}.gate: {self.gate.why}: the run does not train; lower gate.min or remove the gate"
        if self.stopped_at is not None and epoch > self.stopped_at and "/rungs/" in self.halted_by:
            return (
                f"sweeps: halving did not keep arm {self.run} at its rung at epoch {self.stopped_at} (record "
                f"{self.halted_by}); epochs after it are not trained: raise the sweep's halving.eta or move its rungs "
                "to keep more arms"
            )
        if self.stopped_at is not None and epoch > self.stopped_at:
            return (
                f"runs.{self.run}.stop: the run stopped at epoch {self.stopped_at} (record "
                f"{DECISION.format(run=self.run, epoch=self.stopped_at)}); epochs after it are not trained: raise "
                "stop.target or stop.patience to go on"
            )
        if epoch not in self.planned:
            return f"runs.{self.run}: epoch {epoch} is not one of the run's boundaries (runs.{self.run}.eval_interval)"
        return f"runs.{self.run}: epoch {epoch} waits on {', '.join(w.path for w in self.waiting)}"

    def fate(self, epoch: int) -> str:
        """One line: what boundary `epoch` gets, and why."""
        if epoch not in self.trained:
            refusal = self.refusal(epoch) or ""
            return f"{self.run} epoch {epoch}: not trained ({refusal.partition(': ')[2]})"
        evaluations = ["quick"] if epoch in self.quick else []
        if epoch in self.full:
            evaluations.append(f"full ({self.full_reasons[epoch]})")
        elif epoch in self.quick:
            pending = Wait("schedule", self.run, epoch) in self.waiting
            evaluations.append("full: waits on its schedule" if pending else "no full evaluation (not due)")
        if epoch in self.decisions:
            evaluations.append("stop decision here" + (": stop" if epoch == self.stopped_at else ""))
        if epoch in self.rungs:
            evaluations.append("halving rung here" + (": stopped" if epoch == self.stopped_at else ""))
        return f"{self.run} epoch {epoch}: trained; " + "; ".join(evaluations)


def is_static(cfg: WorkflowConfig, name: str) -> bool:
    """Whether a run's plan comes from the config alone (no gate, no stop rule, no quick schedule): then every
    boundary is trained and fully evaluated, and no record is asked for."""
    run = cfg.runs[name]
    return run.gate is None and run.stop is None and cfg.evaluation.quick is None and halving_of(cfg, name) is None


def halving_of(cfg: WorkflowConfig, name: str) -> Any:
    """The HalvingConfig of the sweep whose arm run `name` is, or None (not an arm, or a sweep without halving)."""
    tag = cfg.runs[name].sweep
    return None if tag is None or tag.name not in cfg.sweeps else cfg.sweeps[tag.name].halving


def gate_reading(cfg: WorkflowConfig, name: str, records: Records) -> tuple[str, int | None, tuple[Wait, ...], str]:
    """The gate run's boundary that run `name`'s gate reads: (gate run, epoch or None, waits, why).

    gate.epoch, else the gate run's last planned boundary; when the gate run stopped before it, the boundary where it
    stopped. None while a decision of the gate run before that boundary is not made (waits names it), or when the
    gate run never trains (its own gate closed; why says so). Asks only for the records up to that boundary."""
    gate = cfg.runs[name].gate
    assert gate is not None, name
    wanted = gate.epoch or cfg.runs[gate.run].epochs
    source = run_plan(cfg, gate.run, records, until=wanted, evaluations=False)
    if source.gate is not None and source.gate.state == "closed":
        return gate.run, None, (), f"gate run {gate.run} never started ({source.gate.why})"
    epoch = _gate_boundary(wanted, source.stopped_at)
    if epoch < wanted:
        return gate.run, epoch, (), f"{gate.run} stopped at epoch {epoch}"
    if wanted in source.trained and not source.waiting:
        return gate.run, wanted, (), f"{gate.run} epoch {wanted}"
    return gate.run, None, source.waiting, f"{gate.run} has not reached epoch {wanted} yet"


def run_plan(
    cfg: WorkflowConfig, name: str, records: Records, *, until: int | None = None, evaluations: bool = True
) -> RunPlan:
    """The plan of run `name` from the config and `records` (see the module's docstring).

    until: only the boundaries up to this epoch, and only the records needed to train them (the stop decisions
    before it; the gate): what a training job asks. evaluations=False: no schedule record is asked for (`full` then
    holds only the boundaries due without one)."""
    run = cfg.runs[name]
    planned = tuple(e for e in run.boundaries() if until is None or e <= until)
    gate, gate_waits = _gate_plan(cfg, name, records) if run.gate is not None else (None, ())
    if gate is not None and gate.state != "open":
        return RunPlan(name, gate, (), (), (), (), {}, None, (), gate_waits, planned)

    trained, decisions, waiting, rungs = [], [], [], []
    stopped_at, halted_by = None, ""
    ends = set(run.segment_ends()[:-1]) if run.stop is not None else set()  # the last: nothing left to decide
    halving = halving_of(cfg, name)
    rung_epochs = set(halving.rungs) if halving is not None else set()
    for epoch in planned:
        trained.append(epoch)
        if epoch in rung_epochs and (until is None or epoch < until):
            rungs.append(epoch)
            kept = records.rung(run.sweep.name, epoch)
            if kept is None:
                waiting.append(Wait("rung", run.sweep.name, epoch))
                break
            if run.sweep.arm not in kept:
                stopped_at, halted_by = epoch, RUNG.format(sweep=run.sweep.name, epoch=epoch)
                break
        if epoch in ends and (until is None or epoch < until):
            decisions.append(epoch)
            verdict = records.stop(name, epoch)
            if verdict is None:
                waiting.append(Wait("decision", name, epoch))
                break
            if verdict:
                stopped_at, halted_by = epoch, DECISION.format(run=name, epoch=epoch)
                break

    quick = tuple(trained) if cfg.evaluation.quick is not None else ()
    reasons: dict[int, str] = {}
    if cfg.evaluation.quick is None:
        reasons = {e: "every boundary (no evaluation.quick)" for e in trained}
    elif evaluations:
        for epoch in trained:
            verdict = records.full(name, epoch)
            if verdict is None:
                waiting.append(Wait("schedule", name, epoch))
            elif verdict:
                reasons[epoch] = "due by the quick schedule"
    for reader, epoch in _gate_readers(cfg, name, trained, stopped_at):
        reasons.setdefault(epoch, f"read by the gate of {reader}")
    for epoch in rungs:
        reasons.setdefault(epoch, f"read by the halving rung of sweep {run.sweep.name}")

    k = cfg.evaluation.ensemble_last or 0
    finished = until is None and not any(w.kind in ("decision", "rung") for w in waiting)
    return RunPlan(
        run=name,
        gate=gate,
        trained=tuple(trained),
        decisions=tuple(decisions),
        quick=quick,
        full=tuple(e for e in trained if e in reasons),
        full_reasons=reasons,
        stopped_at=stopped_at,
        ensemble=tuple(trained[-k:]) if k and finished and len(trained) >= k else (),
        waiting=tuple(waiting),
        planned=planned,
        rungs=tuple(rungs),
        halted_by=halted_by,
    )


def _gate_plan(cfg: WorkflowConfig, name: str, records: Records) -> tuple[GatePlan, tuple[Wait, ...]]:
    """Run `name`'s gate, and the records it waits on (empty unless it is waiting)."""
    gate_run, epoch, waits, why = gate_reading(cfg, name, records)
    if epoch is None:
        return GatePlan(gate_run, None, "waiting" if waits else "closed", why), waits
    verdict = records.gate(name)
    if verdict is None:
        return GatePlan(gate_run, epoch, "waiting", f"{why}: not checked yet"), (Wait("gate", name),)
    gate = cfg.runs[name].gate
    verb = "passed" if verdict else "fell short"
    why = f"{gate.metric} at {why} {verb} (min {gate.min:g})"
    return GatePlan(gate_run, epoch, "open" if verdict else "closed", why), ()


def _gate_readers(cfg: WorkflowConfig, name: str, trained: list[int], stopped_at: int | None) -> list[tuple[str, int]]:
    """(run, epoch) for each run whose gate reads one of `name`'s trained boundaries: its full evaluation is due."""
    readers = []
    for other, run in cfg.runs.items():
        if run.gate is None or run.gate.run != name:
            continue
        epoch = _gate_boundary(run.gate.epoch or cfg.runs[name].epochs, stopped_at)
        if epoch in trained:  # a stopped run's last trained boundary is where it stopped
            readers.append((other, epoch))
    return readers


def _gate_boundary(wanted: int, stopped_at: int | None) -> int:
    """The gate run's boundary a gate wanting `wanted` reads: where the gate run stopped, if before it."""
    return stopped_at if stopped_at is not None and stopped_at < wanted else wanted


def plans(cfg: WorkflowConfig, records: Records, names: list[str] | None = None) -> dict[str, RunPlan]:
    """The plan of every run (or of `names`)."""
    return {name: run_plan(cfg, name, records) for name in (names if names is not None else cfg.runs)}


def fates(cfg: WorkflowConfig, name: str, records: Records) -> list[str]:
    """One line per planned boundary of run `name`: trained or not, which evaluations, and why."""
    plan = run_plan(cfg, name, records)
    lines = [plan.fate(epoch) for epoch in plan.planned]
    if plan.gate is not None:
        lines.insert(0, f"{name}: gate {plan.gate.state}: {plan.gate.why}")
    return lines


# -- what the rules ask for -----------------------------------------------------------------------------------------


def previous_files(run: RunConfig, name: str, epoch: int) -> dict[str, str]:
    """A segment's inputs from the one before: {} for the first; else the previous boundary's checkpoint and state.

    Runs with a stop rule take no state from the end of the previous segment: after a stop Snakemake deletes that
    temp file, and going on later (a raised target or patience) must not re-run a finished segment for it; the
    trainer resumes from the state's kept copy (resume/boundaries/, train/loop.py) instead."""
    previous = epoch - run.eval_interval
    if previous <= 0:
        return {}
    files = {"previous_ckpt": CKPT.format(run=name, epoch=previous)}
    if run.stop is None or previous not in run.segment_ends():
        files["previous_state"] = STATE.format(run=name, epoch=previous)
    return files


def segment_epochs(run: RunConfig, epoch: int) -> list[int]:
    """The boundaries of the training segment that ends at `epoch`."""
    start = run.segment_start(epoch)
    return [e for e in run.boundaries() if start < e <= epoch]


def segment_index(run: RunConfig, epoch: int) -> int:
    """The group of boundary `epoch`: consecutive boundaries of one segment share one cluster job."""
    return (epoch // run.eval_interval - 1) // run.segment_evals


def files(plan: RunPlan, pattern: str, which: str) -> list[str]:
    """`pattern` ({run}, {epoch}) at the plan's `which` boundaries: trained, full, quick, decisions or ensemble."""
    return [pattern.format(run=plan.run, epoch=e) for e in getattr(plan, which)]


def report_boundaries(cfg: WorkflowConfig, plan_of: Any, on_disk: Any, which: str = "trained") -> list[tuple[str, int]]:
    """(run, epoch) pairs in the report: every trained boundary of a smoke run (`plan_of(name, wait, evaluations)`
    waits for its records); of a full run, the trained boundaries whose checkpoint is on disk, by the records on disk
    (wait=False), so that `snakemake report` never trains. which="full": only those whose full evaluation is due. A
    run whose gate is closed has none."""
    pairs = []
    for name, run in cfg.runs.items():
        smoke = run.target == "smoke"
        plan = plan_of(name, smoke, which == "full")
        pairs += [(name, e) for e in getattr(plan, which) if smoke or on_disk(CKPT.format(run=name, epoch=e))]
    return pairs


def ensemble_files(plan: RunPlan, k: int) -> list[str]:
    """The metrics of the run's two ensembles of its last `k` trained checkpoints (averaged weights, pooled
    votes); none when the plan has no ensemble (fewer trained boundaries, or not final yet)."""
    if not plan.ensemble:
        return []
    return [ENSEMBLE.format(run=plan.run, kind=kind, k=k) for kind in ("avg", "pooled")]


def ttt_files(plan: RunPlan, run: RunConfig) -> list[str]:
    """The evaluation of the run's test-time training (`ttt:`, eval/ttt.py) after its last boundary, once the plan
    is final and that boundary trained; none without `ttt`."""
    if run.ttt is None or not plan.final or not plan.trained or plan.trained[-1] != plan.planned[-1]:
        return []
    return [TTT.format(run=plan.run, epoch=plan.trained[-1])]


def ttt_row(run_name: str, run: RunConfig) -> str:
    """The name of the test-time training's row in the report: the run's own where it answers the run's test set;
    `<run>@<dataset>` where it answers another dataset's (its tasks are not the ones the run's checkpoints scored,
    so it is not one more checkpoint of the run in the checkpoint selection)."""
    dataset = run.answered_dataset
    return run_name if dataset == run.dataset else f"{run_name}@{dataset}"


def last_votes(run_name: str, run: RunConfig) -> str:
    """The votes an ensemble of runs (config `ensembles:`) pools from a member: its test-time training's, else its
    last checkpoint's full evaluation's (a member has no stop rule or gate: its last boundary is its last epoch)."""
    metrics = TTT if run.ttt is not None else FULL
    return metrics.format(run=run_name, epoch=run.epochs).replace("metrics.json", "votes.npz")


def ensemble_of_runs(cfg: WorkflowConfig, ensemble: str) -> tuple[str, list[str]]:
    """An ensemble of runs' metrics.json and the votes of its members it pools, in the order of its config."""
    members = cfg.ensemble_members(ensemble)
    return RUNS_ENSEMBLE.format(ensemble=ensemble), [last_votes(m, cfg.runs[m]) for m in members]


def ttt_jobs(run_name: str, run: RunConfig, epoch: int) -> list[str]:
    """Every job file of the run's test-time training after boundary `epoch`."""
    assert run.ttt is not None, run_name
    return [TTT_JOB.format(run=run_name, epoch=epoch, job=j) for j in range(run.ttt.jobs)]


def stop_records(cfg: WorkflowConfig, results: Path, names: list[str]) -> dict[str, dict[str, Any]]:
    """Each of `names` that a stop rule ended: its stopping decision record (the report's and the summary's)."""
    stopped = {}
    for name in names:
        if name not in cfg.runs or cfg.runs[name].stop is None:
            continue
        plan = run_plan(cfg, name, DiskRecords(results), evaluations=False)
        if plan.stopped_at is not None:
            stopped[name] = read_decision(under(results, DECISION, run=name, epoch=plan.stopped_at))
    return stopped


def rung_inputs(cfg: WorkflowConfig, sweep: str, epoch: int, records: Records) -> dict[str, list[str]]:
    """A halving rung's inputs (rule decide_rung): the full evaluation at `epoch` of every seed of each arm still
    training there (kept at every earlier rung: the record of the one before is asked for), and that record."""
    earlier = [r for r in cfg.sweeps[sweep].halving.rungs if r < epoch]
    alive = None
    if earlier:
        kept = records.rung(sweep, earlier[-1])
        alive = set(kept or ())
    arms = [n for n in cfg.arms_of(sweep) if alive is None or cfg.runs[n].sweep.arm in alive]
    return {
        "metrics": [FULL.format(run=name, epoch=epoch) for name in arms],
        "previous": [RUNG.format(sweep=sweep, epoch=earlier[-1])] if earlier else [],
    }


def decision_inputs(cfg: WorkflowConfig, name: str, epoch: int) -> dict[str, Any]:
    """decide_boundary's inputs at segment end `epoch`: the segment's evaluations (the quick ones under
    evaluation.quick: training waits for them only) and the previous decision, whose history this one extends."""
    run = cfg.runs[name]
    pattern = QUICK if cfg.evaluation.quick is not None else FULL
    files: dict[str, Any] = {"metrics": [pattern.format(run=name, epoch=e) for e in segment_epochs(run, epoch)]}
    if previous := run.segment_start(epoch):
        files["previous"] = DECISION.format(run=name, epoch=previous)
    return files


def schedule_inputs(cfg: WorkflowConfig, name: str, epoch: int) -> dict[str, Any]:
    """schedule_full's inputs at `epoch`: the quick evaluations up to it; at a decided segment end of a run with a
    stop rule, its decision (a stop makes this the stopping boundary, whose full evaluation is due)."""
    run = cfg.runs[name]
    files: dict[str, Any] = {"metrics": [QUICK.format(run=name, epoch=e) for e in run.boundaries() if e <= epoch]}
    if run.stop is not None and epoch in run.segment_ends()[:-1]:
        files["decision"] = DECISION.format(run=name, epoch=epoch)
    return files


@dataclass(frozen=True)
class KagglePlan:
    """What `snakemake kaggle` bundles: run `run` at boundary `epoch`; None while a record it depends on is not made
    (`waiting`) or when the plan never trains the checkpoint (`refusal` says why and what to change)."""

    run: str
    epoch: int | None
    waiting: tuple[Wait, ...] = ()
    refusal: str | None = None

    @property
    def files(self) -> list[str]:
        return [] if self.epoch is None else [KAGGLE.format(run=self.run, epoch=self.epoch)]


def kaggle_plan(cfg: WorkflowConfig, records: Records) -> KagglePlan:
    """The checkpoint the Kaggle bundle packs, as the plan decides it: evaluation.kaggle_run (default: the first
    run) at evaluation.kaggle_epoch, else at the run's last trained boundary (where a stop rule or its sweep's
    halving ended it). Asks only the records that decide it (the gate, the stop decisions and rungs before it; no
    schedule), so the target waits on exactly those; a checkpoint the plan does not train is refused, never asked
    for."""
    name = cfg.evaluation.kaggle_run or next(iter(cfg.runs))
    wanted = cfg.evaluation.kaggle_epoch
    p = run_plan(cfg, name, records, until=wanted, evaluations=False)
    if p.waiting:
        return KagglePlan(name, None, p.waiting)
    epoch = wanted if wanted is not None else (p.trained[-1] if p.trained else p.planned[-1])
    refusal = p.refusal(epoch)
    if refusal is None:
        return KagglePlan(name, epoch)
    field_ = "kaggle_epoch" if wanted is not None else "kaggle_run"
    return KagglePlan(name, None, refusal=f"evaluation.{field_}: the bundle's checkpoint is not trained: {refusal}")
