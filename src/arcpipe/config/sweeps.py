"""A sweep: one run of the config copied over a grid of field values into ordinary runs (its arms), each named for
its values, so that adding a value later adds arms and renames none: every artifact path is keyed by the run's
name, so only the new arms train.

    sweeps:
      depth:
        base: trm-arc1                      # a run of this config; each arm is a copy of it
        grid:                               # a run field, arch_overrides.<arch field> or <section>.<field>
          arch_overrides.H_cycles: [1, 2, 3]
          ema: [true, false]
        seeds: [0, 1]                       # optional: each arm expands as runs.<run>.seeds does

makes runs depth-H_cycles_1-ema_false, ..., depth-H_cycles_3-ema_true, then -s0 and -s1 of each. WorkflowConfig
expands sweeps before seeds, so every later check and every job sees only ordinary runs; each carries
`sweep: {name, arm, values}` (RunConfig.sweep), a label like seed_group that changes nothing the run computes.
`snakemake sweep_<name>` builds every arm's evaluations (docs/sweeps.md).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Collection, Mapping
from typing import Any, get_args

from pydantic import BaseModel, Field, StrictInt, ValidationError

from arcpipe.config.base import Metric, Strict, did_you_mean
from arcpipe.config.runs import RunConfig, SweepArm
from arcpipe.names import check_name

TARGET_PREFIX = "sweep_"  # `snakemake sweep_<name>`: every arm of sweep <name>, evaluated
ARCH_FIELD = "arch_overrides."  # a grid key under it sets one field of the arch; the arm's name drops the prefix
# run fields a grid may not set: the seeds are the sweep's own `seeds`, the labels are the expansion's
NOT_SWEPT = {
    "seed": "list seeds under sweeps.{name}.seeds instead",
    "seeds": "list them under sweeps.{name}.seeds instead",
    "seed_group": "a label the seeds expansion sets; remove it from the grid",
    "sweep": "a label the sweep expansion sets; remove it from the grid",
}


class HalvingConfig(Strict):
    """Successive halving across a sweep's arms (docs/sweeps.md): at each rung, an epoch where every arm's training
    segment ends, the arms still training are ranked on `metric` over the held-out selection tasks (each seed's
    full evaluation there, the mean over the arm's seeds); the best ceil(n / eta) go on and the others stop there,
    through a record of the rung (results/sweeps/<name>/rungs/epoch_<E>.json, arcpipe.plan) as a stop rule stops a
    run. The base run (the reference) is not an arm and always trains to its end."""

    rungs: list[StrictInt] = Field(min_length=1)  # epochs, ascending; each a segment end before the last epoch
    eta: int = Field(default=2, ge=2)  # keep the best 1/eta of the arms at each rung (at least one)
    metric: Metric = "pass@2"  # a pass@K of evaluation.pass_ks, or cell_accuracy (dense: early rungs rank apart)

    def kept(self, arms: int) -> int:
        """How many of `arms` arms a rung keeps: ceil(arms / eta), at least one (the rung's decision, halving.py,
        and the forecast's bill, forecast.py, both ask this)."""
        return max(1, math.ceil(arms / self.eta))


class SweepConfig(Strict):
    base: str  # a run of this config (its name before its seeds expand); every arm is a copy of it
    # field -> its values; every combination is an arm. A field is a run field (ema), an arch field under
    # arch_overrides. (arch_overrides.H_cycles) or a field of a run's section (stop.patience, ttt.lr)
    grid: dict[str, list[Any]]
    # each arm crossed with these seeds, as runs.<run>.seeds (arm-s0, arm-s1, ...); None: the base's seed or seeds
    seeds: list[StrictInt] | None = None
    halving: HalvingConfig | None = None  # successive halving across the arms; None: every arm trains to its end


def expand_sweeps(
    runs: Mapping[str, Any], sweeps: Any, datasets: Collection[str] | None = None
) -> tuple[dict[str, Any], list[str]]:
    """`runs` with every sweep's arms added after them (raw run bodies, seeds not expanded yet), and one line per
    problem; `datasets`: the names a swept `dataset` may take (None: not checked here). A sweep block that is not
    a SweepConfig, or whose base is not a valid run, adds no arm: the field's own validation reports it (under
    sweeps.<name> or runs.<base>), once rather than once per arm."""
    if not isinstance(sweeps, dict):
        return dict(runs), []
    expanded, problems = dict(runs), []
    made_by: dict[str, str] = {}  # arm -> its sweep
    for name, body in sweeps.items():
        try:
            sweep = SweepConfig.model_validate(body)
        except ValidationError:
            continue
        arms, found = _arms(str(name), sweep, runs, datasets)
        problems += found
        for arm, arm_body in arms.items():
            if arm in runs:
                problems.append(
                    f"sweeps.{name}: arm {arm} ({_described(arm_body['sweep']['values'])}) is already a run under "
                    "runs; rename the sweep or the run"
                )
            elif arm in made_by:
                problems.append(f"sweeps.{name}: arm {arm} is also an arm of sweep {made_by[arm]}; rename a sweep")
            made_by[arm] = str(name)
            expanded.setdefault(arm, arm_body)
    return expanded, problems


def arm_name(sweep: str, values: Mapping[str, Any]) -> str:
    """`{sweep}-{field}_{value}-...`, fields in sorted order: a function of the arm's values alone, never of their
    positions in the grid or of the grid's layout. A field is spelt without its `arch_overrides.` prefix, and always
    with `_` before its value (beta2_0.95, never beta20.95)."""
    return "-".join([sweep, *(f"{_short(key)}_{spelling(values[key])}" for key in sorted(values, key=_short))])


def spelling(value: Any) -> str:
    """A value as it appears in an arm's name: true/false, none, a float in Python's shortest round-trip form without
    `.0` (so 1 and 1.0 spell alike) and with a plain exponent (0.0003, 1e-5, 2.5e20), an int or text as it is."""
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "none"
    if isinstance(value, float):
        mantissa, _, exponent = repr(value).partition("e")
        mantissa = mantissa.removesuffix(".0")
        return f"{mantissa}e{int(exponent)}" if exponent else mantissa
    return str(value)


def _arms(
    name: str, sweep: SweepConfig, runs: Mapping[str, Any], datasets: Collection[str] | None
) -> tuple[dict[str, Any], list[str]]:
    """Sweep `name`'s arms (arm -> raw run body), or the problems that stop it."""
    where = f"sweeps.{name}"
    if sweep.base not in runs:
        return {}, [
            f"{where}.base={sweep.base!r} is not a run"
            + did_you_mean(sweep.base, map(str, runs), "; name a run under runs (its name before its seeds expand)")
        ]
    base_body = runs[sweep.base]
    try:
        base = RunConfig.model_validate(base_body)
    except ValidationError:
        return {}, []  # reported at runs.<base>; each arm would only repeat it
    problems = _grid_problems(where, name, sweep, base, datasets) + _halving_problems(where, sweep, base)
    if problems:
        return {}, problems
    keys = list(sweep.grid)
    alone: dict[tuple[str, int], str | None] = {}  # (field, index) -> what the run schema says of that value alone
    arms: dict[str, Any] = {}
    combinations: dict[str, list[dict[str, Any]]] = {}
    for combination in itertools.product(*(enumerate(values) for values in sweep.grid.values())):
        raw = {key: value for key, (_, value) in zip(keys, combination, strict=True)}
        try:
            run = RunConfig.model_validate(_with(base_body, raw))
        except ValidationError as err:
            culprits = [
                (key, i)
                for key, (i, value) in zip(keys, combination, strict=True)
                if _alone(alone, base_body, key, i, value)
            ]
            if not culprits:
                problems.append(f"{where}: the arm {_described(raw)} is not a valid run: {_messages(err)}")
            continue
        values = _typed(run, keys)
        arm = arm_name(name, values)
        combinations.setdefault(arm, []).append(raw)
        body = {**_with(base_body, values), "sweep": SweepArm(name=name, arm=arm, values=values).model_dump()}
        if sweep.seeds is not None:
            body = {key: value for key, value in body.items() if key != "seed"} | {"seeds": sweep.seeds}
        arms.setdefault(arm, body)
    for (key, i), message in alone.items():
        if message is not None:
            problems.append(f"{where}.grid.{key}[{i}]={sweep.grid[key][i]!r}: {message}")
    for arm, raws in combinations.items():
        if len(raws) > 1:
            problems.append(
                f"{where}.grid: {' and '.join(_described(raw) for raw in raws[:2])} both make arm {arm}; list each "
                "value once (1 and 1.0 are one value) and spell text values apart"
            )
            continue
        try:
            check_name(arm, "arm name")
        except ValueError as err:
            problems.append(f"{where}: {err} (the sweep's name, then each field_value); shorten the sweep's name")
    return ({}, problems) if problems else (arms, [])


# the fields that place a run's boundaries and segments: the rungs are epochs of every arm only when no arm moves them
RUNG_FIELDS = ("epochs", "eval_interval", "segment_evals")


def _halving_problems(where: str, sweep: SweepConfig, base: RunConfig) -> list[str]:
    """One line per rung that is not a segment end of the base before its last epoch, per grid field that would move
    the arms' boundaries, for a base with its own gate or stop rule (not combined with halving), and for arms with
    test-time training."""
    halving = sweep.halving
    if halving is None:
        return []
    problems = []
    ends = base.segment_ends()[:-1]  # where a training job ends and another may start: where an arm can stop
    for i, rung in enumerate(halving.rungs):
        if rung not in ends:
            problems.append(
                f"{where}.halving.rungs[{i}]={rung}: not an epoch where the base's training segments end before its "
                f"last ({', '.join(map(str, ends)) or 'none: one segment'}; eval_interval x segment_evals); pick "
                "among them"
            )
    if halving.rungs != sorted(set(halving.rungs)):
        problems.append(f"{where}.halving.rungs={halving.rungs}: list each rung once, in ascending order")
    for key in RUNG_FIELDS:
        if key in sweep.grid:
            problems.append(f"{where}.grid.{key}: moves the arms' boundaries, which the halving rungs are; sweep it "
                            "without halving, or remove halving")  # fmt: skip
    for key in ("gate", "stop"):
        if getattr(base, key) is not None:
            problems.append(
                f"{where}.halving: the base run {sweep.base} has a {key}, which halving does not combine with yet; "
                f"remove runs.{sweep.base}.{key} or halving"
            )
    # test-time training follows a run's last boundary, which halving may never train: an arm stopped at a rung would
    # be scored without it against test-time-trained arms and base (as a stop rule with ttt is refused, RunConfig)
    swept = [
        key for key, values in sweep.grid.items() if key.split(".")[0] == "ttt" and any(v is not None for v in values)
    ]
    if base.ttt is not None or swept:
        where_ttt = f"runs.{sweep.base}.ttt" if base.ttt is not None else f"{where}.grid.{swept[0]}"
        problems.append(
            f"{where}.halving with {where_ttt}: test-time training follows an arm's last boundary, which halving "
            "may never train (an arm stopped at a rung would be scored without it, against test-time-trained "
            f"scores); remove halving, or ttt from runs.{sweep.base} and the grid"
        )
    return problems


def _grid_problems(
    where: str, name: str, sweep: SweepConfig, base: RunConfig, datasets: Collection[str] | None
) -> list[str]:
    """One line per grid field that no run schema knows or that the sweep sets itself, per empty value list, per
    value that is not a plain number, true/false, text or null, per dataset not declared; an empty grid or seeds."""
    problems = []
    if not sweep.grid:
        problems.append(f"{where}.grid: empty; list at least one field and its values")
    if sweep.seeds is not None and not sweep.seeds:
        problems.append(f"{where}.seeds: empty; list at least one seed, or remove seeds")
    if sweep.seeds is not None and len(set(sweep.seeds)) < len(sweep.seeds):
        problems.append(f"{where}.seeds={sweep.seeds}: a seed is listed twice; list each seed once")
    fields = _fields(base, sweep.grid)
    for key, values in sweep.grid.items():
        if key in NOT_SWEPT:
            problems.append(f"{where}.grid.{key}: not swept; {NOT_SWEPT[key].format(name=name)}")
        elif key not in fields:
            fallback = f" nor arch_overrides.<a field of {base.arch}>; see docs/sweeps.md"
            problems.append(f"{where}.grid.{key}: not a field of a run" + did_you_mean(key, fields, fallback))
        if not values:
            problems.append(f"{where}.grid.{key}: no values; list at least one, or remove the field")
        for i, value in enumerate(values):
            if not isinstance(value, (bool, int, float, str, type(None))):
                problems.append(
                    f"{where}.grid.{key}[{i}]: not a plain value (a number, true/false, text or null); sweep the "
                    f"fields inside it instead, e.g. {key}.<field>"
                )
            elif key == "dataset" and datasets is not None and value not in datasets:
                problems.append(
                    f"{where}.grid.dataset[{i}]={value!r} is not declared under datasets (declared: "
                    f"{', '.join(sorted(datasets))})"
                )
    shorts: dict[str, list[str]] = {}
    for key in sweep.grid:
        shorts.setdefault(_short(key), []).append(key)
    for keys in shorts.values():
        if len(keys) > 1:
            problems.append(f"{where}.grid: {' and '.join(keys)} are spelt alike in arm names; sweep one of them")
    return problems


def _fields(base: RunConfig, grid: Mapping[str, list[Any]]) -> list[str]:
    """Every grid key the run schema knows: run fields, arch_overrides.<field> of the base's arch (or of an arch the
    grid sweeps), and <section>.<field> of each section that is a model of its own (gate, stop, ttt)."""
    from arcpipe.config.arch import CONFIGS  # torch-free; imported where runs are validated, as runs.py does

    fields = [key for key in RunConfig.model_fields if key not in NOT_SWEPT]
    for key, info in RunConfig.model_fields.items():
        for section in get_args(info.annotation):
            if isinstance(section, type) and issubclass(section, BaseModel) and section is not SweepArm:
                fields += [f"{key}.{field}" for field in section.model_fields]
    arches = {base.arch, *(arch for arch in grid.get("arch", []) if isinstance(arch, str) and arch in CONFIGS)}
    for arch in sorted(arches):
        fields += [f"{ARCH_FIELD}{field}" for field in CONFIGS[arch].model_fields if field != "name"]
    return list(dict.fromkeys(fields))


def _with(body: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a raw run body with each grid value set; `section.field` sets one key of that section."""
    result = dict(body)
    for key, value in values.items():
        section, _, field = key.partition(".")
        if field:
            result[section] = {**(result.get(section) or {}), field: value}
        else:
            result[key] = value
    return result


def _typed(run: RunConfig, keys: list[str]) -> dict[str, Any]:
    """Each grid field's value as the run's schema typed it (1.0e-4 and "1e-4" are both 0.0001): what the arm's
    name spells and its body holds, so how a value was written in YAML never renames or retrains an arm."""
    values = {}
    for key in keys:
        section, _, field = key.partition(".")
        if not field:
            values[key] = getattr(run, key)
        elif key.startswith(ARCH_FIELD):
            from arcpipe.config.arch import make_arch_config

            values[key] = getattr(make_arch_config(run.arch, run.preset, run.arch_overrides), field)
        else:
            values[key] = getattr(getattr(run, section), field)
    return values


def _alone(cache: dict[tuple[str, int], str | None], base: Mapping[str, Any], key: str, i: int, value: Any) -> bool:
    """Whether value `i` of grid field `key` is refused on the base run by itself (remembering what the schema said),
    so a bad value is reported once at sweeps.<name>.grid.<field>[i], not once per arm it is in."""
    if (key, i) not in cache:
        try:
            RunConfig.model_validate(_with(base, {key: value}))
            cache[key, i] = None
        except ValidationError as err:
            cache[key, i] = _messages(err, key)
    return cache[key, i] is not None


def _messages(err: ValidationError, key: str = "") -> str:
    """A run's errors on one line, each after its field unless that is `key`, the grid field already named."""
    located = [(".".join(map(str, e["loc"])), e["msg"].removeprefix("Value error, ")) for e in err.errors()]
    return "; ".join(f"{loc}: {msg}" if loc and loc != key else msg for loc, msg in located)


def _described(values: Mapping[str, Any]) -> str:
    return ", ".join(f"{key}={value!r}" for key, value in values.items())


def _short(key: str) -> str:
    return key.removeprefix(ARCH_FIELD)
