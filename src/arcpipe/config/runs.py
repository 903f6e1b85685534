"""A run: what it trains (dataset, arch, preset and arch_overrides, checked against the arch's own config in
`arcpipe.config.arch`), its schedule of checkpoints and training jobs, and the devices it runs on; and which of
its fields may change between segments without changing what training computes."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import (
    BaseModel,
    Field,
    SerializerFunctionWrapHandler,
    StrictInt,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic_core import InitErrorDetails

from arcpipe.config.arch import VARC_ARCHS
from arcpipe.config.base import Metric, Strict, custom_error, did_you_mean, invalid
from arcpipe.config.stop import StopConfig
from arcpipe.gpus import GPUName


class GateConfig(Strict):
    """Another run's evaluation that must reach a threshold before this run's first training segment starts
    (rule check_gate, arcpipe.gates); a gate that falls short leaves the run untrained, not failed."""

    run: str  # the gate run: another run of this config
    metric: Metric  # a pass@K of evaluation.pass_ks as metrics.json names it (pass@1), or cell_accuracy
    min: float = Field(ge=0, le=1)  # the gate passes when metric >= min (pass@K is a fraction)
    epoch: int | None = Field(default=None, gt=0)  # the gate run's checkpoint; None: its last


class TTTConfig(Strict):
    """Test-time training of a canvas model (VARC), upstream's recipe by default (upstream-varc.md 6): after the
    run's last checkpoint, one job per `tasks_per_job` test tasks fits a copy of the model to each task's
    demonstration views with fresh task tokens, then answers the task's test views (eval/ttt.py)."""

    epochs: int = Field(default=100, gt=0)  # passes over the task's demonstrations (upstream: 0..100, 0 at lr 0)
    # linear warm-up, then cosine to 0 at the last epoch; None: upstream's min(epochs // 5, 10) (10 at 100 epochs)
    warmup_epochs: int | None = Field(default=None, ge=0)
    batch_size: int = Field(default=8, gt=0)
    lr: float = Field(default=3e-4, gt=0)  # AdamW, betas (0.9, 0.999), no weight decay
    grad_clip: float = Field(default=1.0, gt=0)  # the gradient norm clipped before each step (upstream's default 1)
    # job j of `jobs` takes test tasks j, j + jobs, ... (known before the data exist): 400 is one task per job on
    # ARC-AGI-1's evaluation set; fewer jobs work through several tasks each on one GPU
    jobs: int = Field(default=400, gt=0)
    # tasks a job fits at once, K (eval/batched.py): one step advances K fits, each with its own weights, AdamW
    # state, task tokens, rate and clipping, stacked along a leading dimension. 1: one task at a time (`fit`, held
    # to upstream's step for step). The default stays 1 until the batched step is measured on a GPU (docs/varc.md)
    tasks_per_step: int = Field(default=1, ge=1)
    # the dataset whose test tasks are fitted and answered, each on its demonstrations (every view) in that
    # dataset's train split; None: the run's own. Another one is upstream's protocol: offline training without the
    # evaluation tasks (test_demos_in_train: false, or training tasks only), then test-time training on a dataset of
    # the evaluation tasks, whose views (num_aug) are the ones each task is fitted and voted on (docs/varc.md)
    dataset: str | None = None


class SweepArm(Strict):
    """Which sweep and arm a run was expanded from, and the arm's values (config/sweeps.py): a label for the report,
    like seed_group; it never changes what the run computes."""

    name: str  # the sweep: sweeps.<name>
    arm: str  # the run's name before its seeds expand (its seed_group when it has seeds)
    values: dict[str, Any]  # grid field -> this arm's value, as typed by the run's schema


class RunConfig(Strict):
    dataset: str
    arch: Literal["trm", "hrm", "urm", "transformer", "varc", "varc-unet", "loopvit"]
    preset: str
    arch_overrides: dict[str, Any] = Field(default_factory=dict)  # upstream arch field names: H_cycles, ...
    target: Literal["smoke", "full"]

    epochs: int = Field(gt=0)  # required: no None default
    eval_interval: int = Field(gt=0)  # epochs between checkpoints
    segment_evals: int = Field(default=1, gt=0)  # evaluation boundaries per training job
    global_batch_size: int = Field(default=768, gt=0)  # examples per optimizer step, always
    micro_batch_size: int | None = Field(default=None, gt=0)  # per device; None: global / devices
    # None: upstream HRM/TRM/URM's puzzle sampler (groups shuffled per epoch, one puzzle per group, train/sampler.py
    # plan_pass); examples: upstream VARC's offline loader, every example once per epoch (plan_examples_pass);
    # upstream: the upstream loader's own draws, row for row (VARC's: train/upstream_order.py; HRM's, TRM's and
    # URM's PuzzleDataset: train/upstream_puzzles.py; docs/reproduce.md)
    sampler: Literal["examples", "upstream"] | None = None

    lr: float = Field(default=1e-4, gt=0)
    lr_min_ratio: float = Field(default=1.0, ge=0, le=1)
    lr_warmup_steps: int = Field(default=2000, ge=0)
    # set: the rate is set per epoch as upstream VARC's offline trainer steps its scheduler (constant within an
    # epoch; epoch e, counted from 0, at the warm-up + cosine factor of e with this many warm-up epochs and `epochs`
    # in all; upstream: min(epochs // 5, 10)), and lr_warmup_steps is unused; None: per step (HRM, TRM, URM)
    lr_warmup_epochs: int | None = Field(default=None, ge=0)
    beta1: float = 0.9
    beta2: float = 0.95
    weight_decay: float = Field(default=0.1, ge=0)
    puzzle_emb_lr: float = Field(default=1e-2, ge=0)
    puzzle_emb_weight_decay: float = Field(default=0.1, ge=0)
    optimizer: Literal["adam_atan2", "muon", "adamw"] = "adam_atan2"  # adamw: torch.optim.AdamW (VARC's)
    # the dense parameters' global gradient norm clipped to this before each optimizer step (VARC's offline recipe:
    # 1.0); None: no clipping, as HRM, TRM and URM train upstream
    grad_clip: float | None = Field(default=None, gt=0)
    ema: bool = False
    ema_rate: float = Field(default=0.999, gt=0, lt=1)
    seed: int = 0
    # `seeds: [0, 1, 2]` instead of `seed`: WorkflowConfig expands the run into runs {run}-s0, {run}-s1, ... (each
    # with its own outputs and W&B run) whose seed_group is {run}; the report aggregates each group over seeds
    seeds: list[StrictInt] | None = Field(default=None, exclude=True)
    seed_group: str | None = None  # dumped only when set: runs without seeds hash and compare as before
    sweep: SweepArm | None = None  # set by a sweep's expansion (config/sweeps.py); dumped only when set

    nodes: int = Field(default=1, gt=0)
    gpus_per_node: int = Field(default=0, ge=0)  # 0: CPU
    # the GPU model the run is planned for (arcpipe.gpus): the forecast's peak and doctor record; dumped only when set
    gpu: GPUName | None = None  # None: H100-80GB
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
    # train only after another run's evaluation reaches a threshold; dumped only when set
    gate: GateConfig | None = None
    # end before the last epoch once the answer is in (config/stop.py, arcpipe.stopping); dumped only when set
    stop: StopConfig | None = None
    # varc only: per-task test-time training after the last checkpoint (eval/ttt.py); dumped only when set
    ttt: TTTConfig | None = None

    # the registry imports torch (seconds): only validating a run loads it, never `import arcpipe.config`
    @field_validator("preset")
    @classmethod
    def _preset_of_arch(cls, preset: str, info: ValidationInfo) -> str:
        from arcpipe.config.arch import PRESETS

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
        if self.ttt is not None and self.arch not in VARC_ARCHS:
            problems.append(
                f"ttt is test-time training of a canvas model (arch varc or varc-unet), not of {self.arch}; remove it"
            )
        if self.ttt is not None and self.stop is not None:
            problems.append(
                "ttt follows the run's last boundary, which a stop rule may never train: remove ttt or stop"
            )
        if problems:
            raise invalid("RunConfig", [((), problem, self) for problem in problems])
        return self

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        for key in (
            "lr_warmup_epochs",
            "sampler",
            "seed_group",
            "sweep",
            "gpu",
            "gate",
            "stop",
            "ttt",
        ):  # absent unless set: runs without them hash and compare as before
            if data.get(key) is None:
                data.pop(key, None)
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
    def train_gpus(self) -> int:
        """GPUs a training job of the run holds: every device of its nodes; none on CPUs."""
        return self.num_devices if self.uses_gpus else 0

    @property
    def ttt_gpus(self) -> int:
        """GPUs a test-time training job holds: the evaluation's, one at most (it fits and answers on one device)."""
        return min(self.evaluation_gpus, 1)

    def gpu_hours(self, train_hours: float, eval_hours: float, ttt_hours: float = 0.0) -> float:
        """GPU-hours of the run's jobs from their wall hours: training on train_gpus, evaluations on evaluation_gpus,
        test-time training on ttt_gpus (CPU jobs: none). The one formula of GPU-hours, forecast and spent: the
        forecast (arcpipe.forecast), the report's summary and ablation tables, and the driver's last lines."""
        return train_hours * self.train_gpus + eval_hours * self.evaluation_gpus + ttt_hours * self.ttt_gpus

    @property
    def answered_dataset(self) -> str:
        """The dataset whose test set the run's last evaluation answers: ttt.dataset where its test-time training
        answers another dataset's tasks, else the run's own (also with ttt: it fits the run's own test tasks)."""
        return (self.ttt.dataset if self.ttt is not None else None) or self.dataset

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

    def segment_start(self, epoch: int) -> int:
        """The epoch the training segment holding boundary `epoch` starts from: the last segment end before it, or 0
        (the plan's segment_epochs and the trainer's train_until both ask)."""
        return max([0, *(e for e in self.segment_ends() if e < epoch)])


def _arch_errors(arch: str, preset: str, overrides: Mapping[str, Any]) -> list[InitErrorDetails]:
    """What `make_arch_config(arch, preset, overrides)` would reject, located at each override's field."""
    from arcpipe.config.arch import CONFIGS, PRESETS

    fields = sorted(set(CONFIGS[arch].model_fields) - {"name"})
    errors = [
        custom_error(
            (key,), f"not a field of {arch}" + did_you_mean(key, fields, f" (fields: {', '.join(fields)})"), value
        )
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


def compiles(compile: bool | None, device_type: str) -> bool:
    """Whether a model step is torch.compile'd: a run's `compile` when set, else on CUDA only (training, evaluation
    and the doctor's measurements all follow this)."""
    return compile if compile is not None else device_type == "cuda"


def cost_per_hour(run: RunConfig, price: float) -> float:
    return math.prod((run.nodes, run.gpus_per_node, price))


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
        "sweep",  # a label too: which sweep and arm, and the arm's values (already in the run's own fields)
        "gate",  # decides whether the run starts, not what it computes
        "stop",  # decides where the run ends, not what it computes
        "gpu",  # only the forecast reads it
        "ttt",  # what follows the last checkpoint, not what training computes
    }
)


def training_changes(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """`field: old -> new` for every field of two run configs (model_dump) that changes what training computes. A
    field the saved config does not have (written before arcpipe had it) reads as its default, which is what that
    training did."""
    saved = with_defaults(saved, RunConfig)
    differing = sorted(
        k for k in current.keys() | saved.keys() if k not in EXECUTION_FIELDS and saved.get(k) != current.get(k)
    )
    return [f"{k}: {saved.get(k)!r} -> {current.get(k)!r}" for k in differing]


def with_defaults(saved: dict[str, Any], model: type[BaseModel]) -> dict[str, Any]:
    """`saved` (a model_dump in JSON mode, perhaps from an older arcpipe) with every field of `model` it lacks set to
    the field's default, as JSON: a field added later with a default equal to the old behaviour is no change."""
    return {**_json_defaults(model), **saved}


@functools.cache
def _json_defaults(model: type[BaseModel]) -> dict[str, Any]:
    """Every optional field of `model` and its default as JSON (once per model: every drift check reads them)."""
    return {
        name: TypeAdapter(field.annotation).dump_python(field.get_default(call_default_factory=True), mode="json")
        for name, field in model.model_fields.items()
        if not field.is_required()
    }
