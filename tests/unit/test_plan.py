"""arcpipe.plan over generated configs and generated decision histories, in milliseconds each.

Each example is a config (1-4 runs of varied lengths, intervals and segment sizes; each with or without a stop rule
and a gate on an earlier run; with or without evaluation.quick and ensemble_last) and a history of decisions:
`simulate` plays the workflow's checkpoint loop, making each record the plan waits on with a drawn verdict, until
the plan waits on nothing. Every intermediate plan and the final one must hold the properties below; `producers`
says which files each planned job reads, with the same library functions the rules call (arcpipe.rule_inputs).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arcpipe import paths, plan
from arcpipe.config import GateConfig, QuickEvalConfig, StopConfig, WorkflowConfig, load_configs
from arcpipe.rule_inputs import RuleInputs

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = WorkflowConfig.model_validate(yaml.safe_load((ROOT / "config/config.yaml").read_text()))
BASE = SHIPPED.runs["smoke-trm"]


@st.composite
def configs(draw: st.DrawFn) -> WorkflowConfig:
    runs = {}
    for i in range(draw(st.integers(1, 4))):
        interval = draw(st.integers(1, 3))
        boundaries = draw(st.integers(1, 6))
        fields = {"epochs": interval * boundaries, "eval_interval": interval, "segment_evals": draw(st.integers(1, 3))}
        if draw(st.booleans()):
            target = draw(st.none() | st.sampled_from([0.0, 0.5, 1.0]))
            patience = draw(st.none() | st.integers(1, 3)) if target is not None else draw(st.integers(1, 3))
            min_epoch = draw(st.none() | st.integers(1, interval * boundaries))
            fields["stop"] = StopConfig(target=target, patience=patience, min_epoch=min_epoch)
        if runs and draw(st.booleans()):
            gate_run = draw(st.sampled_from(sorted(runs)))
            epoch = draw(st.none() | st.sampled_from(runs[gate_run].boundaries()))
            fields["gate"] = GateConfig(run=gate_run, metric="pass@1", min=0.0, epoch=epoch)
        runs[f"r{i}"] = BASE.model_copy(update=fields)
    quick = draw(st.none() | st.builds(QuickEvalConfig, full_every=st.none() | st.integers(1, 3)))
    evaluation = SHIPPED.evaluation.model_copy(
        update={"quick": quick, "ensemble_last": draw(st.none() | st.integers(1, 3))}
    )
    return SHIPPED.model_copy(update={"runs": runs, "evaluation": evaluation})


def simulate(
    cfg: WorkflowConfig, verdicts: st.DataObject, states: list[plan.MemoryRecords] | None = None
) -> tuple[plan.MemoryRecords, list[dict]]:
    """The checkpoint loop: while a plan waits on records, make each (a drawn verdict) whose own inputs are made.
    Returns the final records and every plan seen on the way; `states` gets a copy of the records at each."""
    records = plan.MemoryRecords({}, {}, {})
    seen = []
    for _ in range(200):
        plans = plan.plans(cfg, records)
        seen.append(plans)
        if states is not None:
            states.append(plan.MemoryRecords(dict(records.stops), dict(records.fulls), dict(records.gates)))
        waits = {w for p in plans.values() for w in p.waiting}
        if not waits:
            return records, seen
        made = False
        for wait in sorted(waits, key=lambda w: (w.kind != "decision", w.run, w.epoch or 0)):
            if any(need not in done(records) for need in record_inputs(cfg, records, wait)):
                continue
            verdict = verdicts.draw(st.booleans(), label=wait.path)
            if wait.kind == "decision":
                records.stops[(wait.run, wait.epoch)] = verdict
            elif wait.kind == "schedule":
                records.fulls[(wait.run, wait.epoch)] = verdict
            else:
                records.gates[wait.run] = verdict
            made = True
        assert made, f"every waited-on record needs one not made: {sorted(w.path for w in waits)}"
    raise AssertionError("the plan kept waiting")


def done(records: plan.MemoryRecords) -> set[str]:
    return (
        {paths.DECISION.format(run=r, epoch=e) for r, e in records.stops}
        | {paths.SCHEDULE.format(run=r, epoch=e) for r, e in records.fulls}
        | {paths.GATE.format(run=r) for r in records.gates}
    )


def record_inputs(cfg: WorkflowConfig, records: plan.Records, wait: plan.Wait) -> list[str]:
    """The records a waited-on record's job reads (its evaluations are made once their boundary trains)."""
    if wait.kind == "decision":
        return [p for p in plan.decision_inputs(cfg, wait.run, wait.epoch).values() if isinstance(p, str)]
    if wait.kind == "schedule":
        return [p for p in plan.schedule_inputs(cfg, wait.run, wait.epoch).values() if isinstance(p, str)]
    return []


def producers(cfg: WorkflowConfig, plans: dict[str, plan.RunPlan], records: plan.Records) -> dict[str, list[str]]:
    """Every file a planned job makes -> the files that job reads (rules/*.smk's inputs, through the library)."""
    made: dict[str, list[str]] = {}
    k = cfg.evaluation.ensemble_last
    for name, p in plans.items():
        run = cfg.runs[name]
        for epoch in p.trained:
            inputs = list(plan.previous_files(run, name, epoch).values())
            for pattern in (paths.CKPT, paths.STATE, paths.TRAIN_METRICS):
                made[pattern.format(run=name, epoch=epoch)] = inputs
            ckpt = [paths.CKPT.format(run=name, epoch=epoch)]
            made[paths.FULL.format(run=name, epoch=epoch)] = ckpt  # evaluate_checkpoint runs for any trained one
            made[paths.VOTES.format(run=name, epoch=epoch)] = ckpt
            if cfg.evaluation.quick is not None:
                made[paths.QUICK.format(run=name, epoch=epoch)] = ckpt
                made[paths.SCHEDULE.format(run=name, epoch=epoch)] = flat(plan.schedule_inputs(cfg, name, epoch))
        for epoch in p.decisions:
            made[paths.DECISION.format(run=name, epoch=epoch)] = flat(plan.decision_inputs(cfg, name, epoch))
        if p.ensemble:
            ckpts = [paths.CKPT.format(run=name, epoch=e) for e in p.ensemble]
            votes = [paths.VOTES.format(run=name, epoch=e) for e in p.ensemble]
            for path, inputs in zip(plan.ensemble_files(p, k), (ckpts, votes), strict=True):
                made[path] = inputs
        if p.gate is not None and p.gate.epoch is not None:
            made[paths.GATE.format(run=name)] = [paths.FULL.format(run=p.gate.gate_run, epoch=p.gate.epoch)]
    return made


def flat(files: dict) -> list[str]:
    return [f for v in files.values() for f in ([v] if isinstance(v, str) else v)]


def targets(cfg: WorkflowConfig, records: plan.Records) -> list[str]:
    """What `snakemake smoke` asks for, every run in the target: the workflow's own answer (arcpipe.rule_inputs, as
    the Snakefile's `smoke` rule asks it), each staged run's input function called once its records are made."""
    ask = RuleInputs(cfg, records)
    items = ask.evaluations_of("smoke") + ask.ensembles_of("smoke")
    return [path for item in items for path in (item(None) if callable(item) else [item])]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cfg=configs(), verdicts=st.data())
def test_every_plan_of_a_generated_history_holds(cfg: WorkflowConfig, verdicts: st.DataObject) -> None:
    records, seen = simulate(cfg, verdicts)
    final = seen[-1]
    for before, after in zip(seen, seen[1:], strict=False):  # a record only adds to a plan
        for name in cfg.runs:
            assert set(before[name].trained) <= set(after[name].trained), name
            assert set(before[name].full) <= set(after[name].full), name

    # no planned job asks for a file that no planned job makes
    made = producers(cfg, final, records)
    todo, needed = targets(cfg, records), set()
    while todo:
        path = todo.pop()
        if path in needed:
            continue
        needed.add(path)
        assert path in made, f"{path} is asked for and no planned job makes it"
        todo += made[path]

    for name, p in final.items():
        run = cfg.runs[name]
        assert p.final and set(p.trained) <= set(run.boundaries())
        # every planned evaluation is of a trained boundary; nothing after a stop is asked for
        assert set(p.full) <= set(p.trained) and set(p.quick) <= set(p.trained)
        assert set(p.decisions) <= set(p.trained) and set(p.ensemble) <= set(p.trained)
        if p.stopped_at is not None:
            assert max(p.trained) == p.stopped_at and records.stop(name, p.stopped_at) is True
            assert all(p.refusal(e) and "stopped at" in p.refusal(e) for e in run.boundaries() if e > p.stopped_at)
        elif p.started:
            assert p.trained == tuple(run.boundaries())
        else:
            assert p.trained == () and p.gate.state == "closed" and p.refusal(run.boundaries()[0])
        # a training job asks only for the records decided before its boundary, and is refused nothing planned
        for epoch in p.trained:
            before = plan.run_plan(cfg, name, records, until=epoch, evaluations=False)
            assert before.refusal(epoch) is None and before.final
        # a gate never waits on an evaluation that will not exist: the boundary it reads is trained and fully
        # evaluated, and where the gate run stopped early, it is where it stopped
        if run.gate is not None and p.gate.epoch is not None:
            source = final[run.gate.run]
            assert p.gate.epoch in source.trained and p.gate.epoch in source.full
            wanted = run.gate.epoch or cfg.runs[run.gate.run].epochs
            assert p.gate.epoch == min(wanted, source.stopped_at or wanted)
        elif run.gate is not None:
            assert final[run.gate.run].gate.state == "closed"  # only a gate run that never started reads nothing
        k = cfg.evaluation.ensemble_last
        if k and p.ensemble:
            assert p.ensemble == p.trained[-k:]
        elif k:
            assert len(p.trained) < k


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cfg=configs(), verdicts=st.data(), choice=st.data())
def test_the_kaggle_target_waits_for_the_plan_and_bundles_a_checkpoint_it_trains(
    cfg: WorkflowConfig, verdicts: st.DataObject, choice: st.DataObject
) -> None:
    """`snakemake kaggle` (arcpipe.rule_inputs: kaggle_bundle asks plan.kaggle_plan): at every point of a generated
    history it either waits on a record the run's plan waits on, or names the checkpoint it names at the end, which
    the final plan trains (a planned job makes it); a checkpoint the plan never trains is refused, not asked for."""
    name = choice.draw(st.sampled_from(sorted(cfg.runs)), label="kaggle_run")
    epoch = choice.draw(st.none() | st.sampled_from(cfg.runs[name].boundaries()), label="kaggle_epoch")
    evaluation = cfg.evaluation.model_copy(update={"kaggle_run": name, "kaggle_epoch": epoch})
    cfg = cfg.model_copy(update={"evaluation": evaluation})
    states: list[plan.MemoryRecords] = []
    records, seen = simulate(cfg, verdicts, states)
    final_plan = seen[-1][name]
    final = plan.kaggle_plan(cfg, records)
    wanted = epoch or (final_plan.trained[-1] if final_plan.trained else None)
    if wanted is not None and wanted in final_plan.trained:
        assert (final.epoch, final.refusal) == (wanted, None)
        assert final.files == [paths.KAGGLE.format(run=name, epoch=wanted)]
        assert paths.CKPT.format(run=name, epoch=wanted) in producers(cfg, seen[-1], records)
    else:  # the run never started, or kaggle_epoch is after where it stopped
        assert final.epoch is None and final.files == [] and not final.waiting
        why = final_plan.refusal(wanted or final_plan.planned[-1])
        assert why and final.refusal.endswith(why) and final.refusal.startswith("evaluation.kaggle_")
    for state, plans in zip(states, seen, strict=True):
        asked = plan.kaggle_plan(cfg, state)
        if asked.waiting:  # a record the run's own plan waits on, and nothing named yet
            assert asked.epoch is None and asked.refusal is None
            assert set(asked.waiting) <= set(plans[name].waiting)
        else:  # decided: the same answer as at the end
            assert asked == final


def test_a_stopped_run_is_bundled_where_it_stopped_on_the_first_call() -> None:
    """The issue's reproduction at the plan: nothing on disk when the workflow starts, a stop rule on the Kaggle run.
    The bundle waits on the first decision instead of naming the last epoch (which the run never trains); once the
    decision says stop, it is the checkpoint where the run stopped; kaggle_epoch past it is refused."""
    run = BASE.model_copy(update={"epochs": 8, "eval_interval": 2, "segment_evals": 1, "stop": StopConfig(patience=1)})
    evaluation = SHIPPED.evaluation.model_copy(update={"kaggle_run": "r"})
    cfg = SHIPPED.model_copy(update={"runs": {"r": run}, "evaluation": evaluation})
    start = plan.kaggle_plan(cfg, plan.MemoryRecords())
    assert (start.epoch, start.waiting, start.files) == (None, (plan.Wait("decision", "r", 2),), [])
    went_on = plan.MemoryRecords({("r", 2): False})
    assert plan.kaggle_plan(cfg, went_on).waiting == (plan.Wait("decision", "r", 4),)
    stopped = plan.MemoryRecords({("r", 2): False, ("r", 4): True})
    assert plan.kaggle_plan(cfg, stopped).files == ["results/kaggle/r/epoch_4"]
    assert plan.kaggle_plan(cfg, plan.MemoryRecords({("r", e): False for e in (2, 4, 6)})).epoch == 8
    fixed = cfg.model_copy(update={"evaluation": evaluation.model_copy(update={"kaggle_epoch": 6})})
    refused = plan.kaggle_plan(fixed, stopped)
    assert refused.epoch is None and refused.refusal.startswith(
        "evaluation.kaggle_epoch: the bundle's checkpoint is not trained: runs.r.stop: the run stopped at epoch 4"
    )
    early = cfg.model_copy(update={"evaluation": evaluation.model_copy(update={"kaggle_epoch": 4})})
    assert plan.kaggle_plan(early, went_on).epoch == 4  # asks only the decisions before epoch 4
    closed = cfg.model_copy(update={"runs": {"g": BASE, "r": run.model_copy(update={"gate": GateConfig(
        run="g", metric="pass@1", min=1.0)})}})  # fmt: skip
    shut = plan.kaggle_plan(closed, plan.MemoryRecords(gates={"r": False}))
    assert shut.epoch is None and "gate" in shut.refusal and "lower gate.min" in shut.refusal


def test_every_ensemble_of_runs_pools_the_last_evaluation_its_members_plans_make() -> None:
    """config `ensembles:` (arcpipe.rule_inputs: ensembles_of_runs, ensemble_votes): each member's votes are those of
    the last evaluation its plan makes (test-time training's where it has ttt, else the last boundary's full one),
    from the config alone: the config refuses members whose plan depends on records (stop rule, gate, halving)."""
    cfg = load_configs([ROOT / "config/config.yaml", ROOT / "config/varc.yaml"])  # the shipped ensemble
    assert cfg.ensembles
    for ensemble in cfg.ensembles:
        _, votes = plan.ensemble_of_runs(cfg, ensemble)
        for member, path in zip(cfg.ensemble_members(ensemble), votes, strict=True):
            assert plan.is_static(cfg, member), member
            p = plan.run_plan(cfg, member, plan.MemoryRecords())
            last = plan.ttt_files(p, cfg.runs[member]) or plan.files(p, paths.FULL, "full")[-1:]
            assert path == last[0].replace("metrics.json", "votes.npz")


@pytest.mark.parametrize("target", ["smoke", "full"])
def test_without_staged_features_every_boundary_is_trained_and_fully_evaluated(target: str) -> None:
    """The shipped config's runs without gates or stop rules: the plan of the config alone, job for job, and it
    asks for no record. (tests/run.sh's dry runs list the same jobs as before the plan library.)"""

    class NoRecords:
        def stop(self, run: str, epoch: int) -> bool:
            raise AssertionError(f"asked for {run}'s decision at {epoch}")

        full = stop

        def gate(self, run: str) -> bool:
            raise AssertionError(f"asked for {run}'s gate")

    for name in SHIPPED.runs_for(target):
        run = SHIPPED.runs[name]
        if run.gate is not None or run.stop is not None:
            continue
        assert plan.is_static(SHIPPED, name)
        p = plan.run_plan(SHIPPED, name, NoRecords())
        boundaries = tuple(run.boundaries())
        assert p.trained == p.full == boundaries and p.decisions == p.quick == () and p.final


def test_the_ice_scenario_validate_then_launch() -> None:
    """urm-arc1-validate with a stop rule and quick evaluation gating urm-arc1: it stops at its second checkpoint,
    the gate reads that one (its full evaluation due though the quick schedule did not ask for it), urm-arc1
    trains; with the gate short of its minimum, urm-arc1 trains nothing and says why."""
    validate = SHIPPED.runs["urm-arc1-validate"].model_copy(update={"stop": StopConfig(target=0.05)})
    runs = {**SHIPPED.runs, "urm-arc1-validate": validate}
    cfg = SHIPPED.model_copy(
        update={"runs": runs, "evaluation": SHIPPED.evaluation.model_copy(update={"quick": QuickEvalConfig()})}
    )
    b = validate.boundaries()
    ends = validate.segment_ends()
    stop_at = ends[0]
    history = plan.MemoryRecords({("urm-arc1-validate", stop_at): True}, dict.fromkeys(
        [("urm-arc1-validate", e) for e in b if e <= stop_at], False), {"urm-arc1": True})  # fmt: skip
    gate = plan.run_plan(cfg, "urm-arc1", history).gate
    assert (gate.gate_run, gate.epoch, gate.state) == ("urm-arc1-validate", stop_at, "open")
    source = plan.run_plan(cfg, "urm-arc1-validate", history)
    assert source.full == (stop_at,) and source.full_reasons[stop_at] == "read by the gate of urm-arc1"
    assert source.trained == tuple(e for e in b if e <= stop_at)
    main = plan.run_plan(cfg, "urm-arc1", history, evaluations=False)
    assert main.trained == tuple(cfg.runs["urm-arc1"].boundaries())

    closed = plan.MemoryRecords(history.stops, history.fulls, {"urm-arc1": False})
    main = plan.run_plan(cfg, "urm-arc1", closed)
    assert main.trained == () and main.gate.state == "closed"
    assert "fell short" in main.refusal(cfg.runs["urm-arc1"].boundaries()[0])
    assert plan.fates(cfg, "urm-arc1", closed)[0].startswith("urm-arc1: gate closed: pass@1 at urm-arc1-validate")


def test_test_time_training_follows_the_last_boundary_once_trained_and_never_a_gated_out_run() -> None:
    varc = SHIPPED.runs["smoke-varc"]
    assert varc.ttt is not None and varc.ttt.jobs == 2
    gated = varc.model_copy(update={"gate": GateConfig(run="smoke-varc", metric="pass@1", min=0.5)})
    cfg = SHIPPED.model_copy(update={"runs": {"smoke-varc": varc, "gated": gated}})
    open_plans = plan.plans(cfg, plan.MemoryRecords({}, {}, {"gated": True}))
    assert plan.ttt_files(open_plans["smoke-varc"], varc) == ["results/eval/smoke-varc/ttt_epoch_4/metrics.json"]
    assert plan.ttt_jobs("smoke-varc", varc, 4) == [
        "results/ttt/smoke-varc/epoch_4/job_0.npz",
        "results/ttt/smoke-varc/epoch_4/job_1.npz",
    ]
    assert plan.ttt_files(open_plans["gated"], gated) == ["results/eval/gated/ttt_epoch_4/metrics.json"]
    closed = plan.plans(cfg, plan.MemoryRecords({}, {}, {"gated": False}))
    assert plan.ttt_files(closed["gated"], gated) == []  # never trained: nothing to fit
    waiting = plan.plans(cfg, plan.MemoryRecords({}, {}, {}))
    assert plan.ttt_files(waiting["gated"], gated) == []  # asked for once the gate has decided
    without = varc.model_copy(update={"ttt": None})
    assert plan.ttt_files(open_plans["smoke-varc"], without) == []


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"arch": "trm", "preset": "tiny"},
            "ttt is test-time training of a canvas model (arch varc or varc-unet), not of trm",
        ),
        ({"stop": {"target": 1.0}}, "ttt follows the run's last boundary, which a stop rule may never train"),
    ],
)
def test_ttt_is_refused_where_it_cannot_run(changes: dict, message: str) -> None:
    raw = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    raw["runs"]["smoke-varc"].update(changes)
    with pytest.raises(ValueError, match=re.escape(message)):
        WorkflowConfig.model_validate(raw)
