"""Successive halving across a sweep's arms: the config's checks, the rung's ranking and record, and the plan of each
arm around a rung (arcpipe.halving, arcpipe.plan), in milliseconds."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from arcpipe import plan
from arcpipe.config import ArcpipeError, validate_config
from arcpipe.config.sweeps import HalvingConfig
from arcpipe.halving import decide_rung, rank_arms, rung_line
from arcpipe.report.render import _halving_columns

ROOT = Path(__file__).resolve().parents[2]
ARMS = ["lr-lr_0.0001", "lr-lr_0.001", "lr-lr_0.01"]  # the grid's order


def _config(halving: dict | None = None, **base: object) -> dict:
    raw = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    del raw["runs"]["smoke-varc"]
    raw["runs"]["smoke-trm"].update({"epochs": 6, "eval_interval": 2, "segment_evals": 1, **base})
    sweep = {"base": "smoke-trm", "grid": {"lr": [1e-4, 1e-3, 1e-2]}}
    raw["sweeps"] = {"lr": {**sweep, "halving": halving or {"rungs": [2, 4], "eta": 2}}}
    return raw


def test_rank_arms_keeps_the_best_ceil_n_over_eta_ties_in_grid_order() -> None:
    def eta(n: int) -> HalvingConfig:
        return HalvingConfig(rungs=[2], eta=n)

    assert rank_arms({"a": 0.1, "b": 0.3, "c": 0.3}, eta(2)) == (["b", "c"], {"b": 1, "c": 2, "a": 3})
    assert rank_arms({"a": 0.0, "b": 0.0, "c": 0.0, "d": 0.0, "e": 0.0}, eta(3)) == (
        ["a", "b"],
        dict(a=1, b=2, c=3, d=4, e=5),
    )
    assert rank_arms({"a": 0.5}, eta(2)) == (["a"], {"a": 1})  # at least one arm goes on


def test_each_arm_waits_on_the_rung_and_one_it_does_not_keep_ends_there() -> None:
    cfg = validate_config(_config())
    arm = {a: f"{a}" for a in ARMS}  # no seeds: each arm is one run named as the arm
    waiting = plan.run_plan(cfg, arm[ARMS[0]], plan.MemoryRecords())
    assert waiting.trained == (2,) and waiting.waiting == (plan.Wait("rung", "lr", 2),)
    assert waiting.full == (2,)
    quick = _config()
    quick["evaluation"] = {"quick": {"share": 0.5}}  # the schedule says no full evaluation at 2, the rung needs one
    due = plan.run_plan(validate_config(quick), arm[ARMS[0]], plan.MemoryRecords(fulls={(arm[ARMS[0]], 2): False}))
    assert due.full == (2,) and due.full_reasons[2] == "read by the halving rung of sweep lr"
    assert not plan.is_static(cfg, arm[ARMS[0]]) and plan.is_static(cfg, "smoke-trm")  # the reference trains on
    records = plan.MemoryRecords(rungs={("lr", 2): (ARMS[2], ARMS[0]), ("lr", 4): (ARMS[2],)})
    stopped = plan.run_plan(cfg, arm[ARMS[1]], records)
    assert (stopped.trained, stopped.stopped_at, stopped.final) == ((2,), 2, True)
    assert "halving did not keep arm lr-lr_0.001 at its rung at epoch 2" in (stopped.refusal(4) or "")
    assert "halving rung here: stopped" in stopped.fate(2)
    second = plan.run_plan(cfg, arm[ARMS[0]], records)
    assert (second.trained, second.stopped_at, second.rungs) == ((2, 4), 4, (2, 4))
    best = plan.run_plan(cfg, arm[ARMS[2]], records)
    assert (best.trained, best.stopped_at, best.full) == ((2, 4, 6), None, (2, 4, 6))
    # a training job of epoch 4 asks only the records before it: the rung at 4 is not its to wait on
    assert plan.run_plan(cfg, arm[ARMS[2]], plan.MemoryRecords(rungs={("lr", 2): tuple(ARMS)}), until=4).waiting == ()


def test_a_rung_reads_the_arms_still_training_and_the_rung_before() -> None:
    cfg = validate_config(_config())
    first = plan.rung_inputs(cfg, "lr", 2, plan.MemoryRecords())
    assert first == {"metrics": [f"results/eval/{a}/epoch_2/metrics.json" for a in ARMS], "previous": []}
    records = plan.MemoryRecords(rungs={("lr", 2): (ARMS[2], ARMS[0])})
    second = plan.rung_inputs(cfg, "lr", 4, records)
    assert second["metrics"] == [f"results/eval/{a}/epoch_4/metrics.json" for a in (ARMS[0], ARMS[2])]
    assert second["previous"] == ["results/sweeps/lr/rungs/epoch_2.json"]


def test_decide_rung_ranks_the_mean_over_seeds_and_writes_the_record(tmp_path: Path, monkeypatch) -> None:
    raw = _config({"rungs": [2], "eta": 2})
    raw["sweeps"]["lr"]["seeds"] = [0, 1]
    cfg = validate_config(raw)
    monkeypatch.chdir(tmp_path)
    solved = {ARMS[0]: (1, 0), ARMS[1]: (0, 0), ARMS[2]: (1, 1)}  # tasks solved of 4, seed 0 and seed 1
    paths = []
    for arm, per_seed in solved.items():
        for seed, n in enumerate(per_seed):
            out = Path(f"results/eval/{arm}-s{seed}/epoch_2")
            out.mkdir(parents=True)
            rows = [{"puzzle": f"t{i}", "test_index": 0, "pass@1": 0, "pass@2": int(i < n)} for i in range(4)]
            pd.DataFrame(rows).to_csv(out / "per_puzzle.csv", index=False)
            (out / "metrics.json").write_text("{}")
            paths.append(str(out / "metrics.json"))
    record = decide_rung("lr", 2, HalvingConfig(rungs=[2], eta=2), paths, cfg, "results/sweeps/lr/rungs/epoch_2.json")
    # means 12.5%, 0% and 25% of the tasks: ranks 2, 3, 1; ceil(3/2) = 2 go on
    assert record["kept"] == [ARMS[2], ARMS[0]] and record["stopped"] == [ARMS[1]]
    assert record["arms"][ARMS[0]]["score"] == pytest.approx(0.125) and record["arms"][ARMS[1]]["rank"] == 3
    assert "stopped at epoch 2" in record["arms"][ARMS[1]]["why"] and record["arms"][ARMS[0]]["seeds"] == [0, 1]
    assert json.loads(Path("results/sweeps/lr/rungs/epoch_2.json").read_text()) == record
    assert record["tie_at_cut"] is False and "WARNING" not in rung_line(record, "x")
    tied = decide_rung("lr", 2, HalvingConfig(rungs=[2], eta=2), paths[2:4], cfg, "tied.json")  # one arm's seeds
    assert tied["kept"] == [ARMS[1]] and tied["tie_at_cut"] is False  # nothing stopped: no cut
    flat = {**record, "tie_at_cut": True}
    assert "the grid's order chose between them" in rung_line(flat, "x")
    assert plan.DiskRecords(Path("results")).rung("lr", 2) == (ARMS[2], ARMS[0])


def test_a_rung_on_cell_accuracy_ranks_arms_that_tie_on_pass_at_k(tmp_path: Path, monkeypatch) -> None:
    cfg = validate_config(_config({"rungs": [2], "eta": 2, "metric": "cell_accuracy"}))
    monkeypatch.chdir(tmp_path)
    paths = []
    for arm, cells in zip(ARMS, (0.5, 0.9, 0.1), strict=True):  # every arm: pass@2 0 on every task
        out = Path(f"results/eval/{arm}/epoch_2")
        out.mkdir(parents=True)
        rows = [{"puzzle": f"t{i}", "test_index": 0, "pass@2": 0, "cell_accuracy": cells} for i in range(4)]
        pd.DataFrame(rows).to_csv(out / "per_puzzle.csv", index=False)
        paths.append(str(out / "metrics.json"))
    record = decide_rung("lr", 2, cfg.sweeps["lr"].halving, paths, cfg, "rung.json")
    assert record["metric"] == "cell_accuracy" and record["tie_at_cut"] is False
    assert record["kept"] == [ARMS[1], ARMS[0]] and record["stopped"] == [ARMS[2]]
    on_pass = decide_rung("lr", 2, HalvingConfig(rungs=[2], eta=2), paths, cfg, "rung-pass.json")
    assert on_pass["tie_at_cut"] is True  # on pass@2 the grid's order decides


def test_the_table_notes_what_halving_saved_with_a_base_run_on_several_seeds(tmp_path: Path, monkeypatch) -> None:
    cfg = validate_config(_config({"rungs": [2], "eta": 2}, seeds=[0, 1]))  # the base expands to smoke-trm-s0, -s1
    monkeypatch.chdir(tmp_path)
    Path("results/sweeps/lr/rungs").mkdir(parents=True)
    Path("results/sweeps/lr/rungs/epoch_2.json").write_text(json.dumps({"kept": [ARMS[2], ARMS[0]]}))
    arms = cfg.arm_seeds("lr")
    table = pd.DataFrame({"arm": list(arms), "gpu_hours": [1.0] * len(arms)})
    notes = _halving_columns(cfg, "lr", arms, table)
    stopped = table.set_index("arm")["stopped_at_rung"]
    assert list(stopped.dropna().items()) == [(ARMS[1], 2)]  # the others (the base too) went on
    # the stopped arm's 1 GPU-h for 2 of its 6 planned epochs: 2 GPU-h saved
    assert "halving saved about 2.00 GPU-h" in notes[1] and "its 6 planned epochs" in notes[1]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"halving": {"rungs": [3]}}, "sweeps.lr.halving.rungs[0]=3: not an epoch where the base's training segments"),
        ({"halving": {"rungs": [6]}}, "halving.rungs[0]=6: not an epoch where"),  # the last epoch: nothing to stop
        ({"halving": {"rungs": [4, 2]}}, "sweeps.lr.halving.rungs=[4, 2]: list each rung once, in ascending order"),
        ({"halving": {"rungs": [2], "eta": 1}}, "eta"),
        ({"grid": {"epochs": [4, 6]}}, "sweeps.lr.grid.epochs: moves the arms' boundaries"),
        ({"base": {"stop": {"patience": 1}}}, "sweeps.lr.halving: the base run smoke-trm has a stop"),
        ({"halving": {"rungs": [2], "metric": "pass@7"}}, "sweeps.lr.halving.metric='pass@7': evaluation.pass_ks"),
        ({"halving": {"rungs": [2], "metric": "accuracy"}}, "not a pass@K or cell_accuracy"),
    ],
)
def test_halving_that_cannot_work_is_refused_in_one_line(change: dict, message: str) -> None:
    raw = _config(change.get("halving"), **change.get("base", {}))
    if "grid" in change:
        raw["sweeps"]["lr"]["grid"] = change["grid"]
    with pytest.raises(ArcpipeError, match=None) as err:
        validate_config(raw)
    assert message in str(err.value)


def test_the_kaggle_bundle_of_an_arm_waits_on_its_rung_and_packs_where_halving_stopped_it() -> None:
    """`kaggle_run` set to an arm: before the rung's record the target waits on it (the workflow's first call must
    not name the arm's last epoch); an arm not kept is bundled at its rung, a kept one goes on."""
    raw = _config()
    raw["evaluation"] = {"kaggle_run": ARMS[1]}
    cfg = validate_config(raw)
    assert plan.kaggle_plan(cfg, plan.MemoryRecords()).waiting == (plan.Wait("rung", "lr", 2),)
    dropped = plan.MemoryRecords(rungs={("lr", 2): (ARMS[2], ARMS[0])})
    assert plan.kaggle_plan(cfg, dropped).files == [f"results/kaggle/{ARMS[1]}/epoch_2"]
    kept = plan.MemoryRecords(rungs={("lr", 2): (ARMS[1],)})
    assert plan.kaggle_plan(cfg, kept).waiting == (plan.Wait("rung", "lr", 4),)
    raw["evaluation"]["kaggle_epoch"] = 6
    refused = plan.kaggle_plan(validate_config(raw), dropped).refusal
    assert refused.startswith("evaluation.kaggle_epoch: the bundle's checkpoint is not trained: sweeps: halving did")


def test_halving_on_a_base_with_test_time_training_is_refused_naming_the_sweep_and_the_fix() -> None:
    """An arm halving stops never reaches its last boundary, after which test-time training runs: its plain score
    would sit against the base's test-time-trained one. Refused at the config, as a stop rule with ttt is; the same
    sweep without halving is accepted (every arm reaches its end and is test-time trained as the base)."""
    raw = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    raw["sweeps"] = {"wd": {"base": "smoke-varc", "grid": {"weight_decay": [0.0, 0.1]}, "halving": {"rungs": [2]}}}
    with pytest.raises(ArcpipeError) as err:
        validate_config(raw)
    assert (
        "sweeps.wd.halving with runs.smoke-varc.ttt: test-time training follows an arm's last boundary, which "
        "halving may never train (an arm stopped at a rung would be scored without it, against test-time-trained "
        "scores); remove halving, or ttt from runs.smoke-varc and the grid"
    ) in str(err.value)
    del raw["sweeps"]["wd"]["halving"]
    assert all(run.ttt is not None for run in validate_config(raw).runs.values() if run.sweep is not None)


def test_an_ensemble_of_an_arm_that_halving_may_stop_is_refused() -> None:
    """config `ensembles:` pools each member's last evaluation, which halving decides while the arm runs."""
    raw = _config({"rungs": [2]})
    raw["ensembles"] = {"pool": {"runs": ["smoke-trm", ARMS[0]]}}
    with pytest.raises(ArcpipeError) as err:
        validate_config(raw)
    assert f"ensembles.pool.runs: {ARMS[0]} is an arm of a sweep with halving" in str(err.value)
