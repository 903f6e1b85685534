"""The only schema of config/config.yaml: pydantic models that reject unknown keys.

Every check runs when these models validate: types, sizes, divisibility, references, and each run's arch, preset
and arch_overrides against the arch's own config in `arcpipe.models.registry`. `rules/common.smk` validates the
workflow config once (`workflow_config`: one line per problem, then Snakemake stops); the CLI, and so every job,
loads the same models from the file it is given (`load_config`). `config/schema.json`, for editors, is generated
from these models by `arcpipe config schema`.

One module per part of the design, each importing only those above it:

    base.py        ArcpipeError, the Strict base model, problems turned into located pydantic errors
    datasets.py    the four kinds of data source and DatasetConfig
    stop.py        StopConfig (a run's stop rule), QuickEvalConfig (quick and full evaluations), stop_problems
    runs.py        RunConfig (arch checks, checkpoint and segment schedule, devices, GateConfig, SweepArm); which
                   fields only say how a run is executed (EXECUTION_FIELDS, training_changes); cost_per_hour
    evaluation.py  EvaluationConfig, ReportConfig, KaggleConfig
    sweeps.py      SweepConfig (a base run over a grid of values), expand_sweeps, arm_name
    workflow.py    WorkflowConfig: sweeps and seeds expansion and the checks across sections; json_schema
    load.py        read and validate a file, one line per problem, did-you-mean for misspelt keys
    dump.py        config_hash, write_yaml_atomic

This package is the config's public face: import from `arcpipe.config`, not from its modules.
"""

from arcpipe.config.base import ArcpipeError, Strict
from arcpipe.config.datasets import (
    ArckitSource,
    DatasetConfig,
    DirectorySource,
    KaggleSource,
    ReArcSource,
    Source,
    UrlSource,
)
from arcpipe.config.dump import config_hash, write_yaml_atomic
from arcpipe.config.evaluation import EvaluationConfig, KaggleConfig, ReportConfig
from arcpipe.config.load import (
    evaluation_config_from,
    format_validation_error,
    load_config,
    load_configs,
    load_evaluation_config,
    read_config_yaml,
    validate_config,
    validation_problems,
    workflow_config,
)
from arcpipe.config.runs import (
    EXECUTION_FIELDS,
    GateConfig,
    RunConfig,
    compiles,
    cost_per_hour,
    training_changes,
    with_defaults,
)
from arcpipe.config.stop import QuickEvalConfig, StopConfig, stop_problems
from arcpipe.config.workflow import MAX_EVALUATIONS, WorkflowConfig, json_schema

__all__ = [
    "EXECUTION_FIELDS",
    "MAX_EVALUATIONS",
    "ArckitSource",
    "ArcpipeError",
    "DatasetConfig",
    "DirectorySource",
    "EvaluationConfig",
    "GateConfig",
    "KaggleConfig",
    "KaggleSource",
    "QuickEvalConfig",
    "ReArcSource",
    "ReportConfig",
    "RunConfig",
    "Source",
    "StopConfig",
    "Strict",
    "UrlSource",
    "WorkflowConfig",
    "config_hash",
    "compiles",
    "cost_per_hour",
    "evaluation_config_from",
    "format_validation_error",
    "json_schema",
    "load_config",
    "load_configs",
    "load_evaluation_config",
    "read_config_yaml",
    "stop_problems",
    "training_changes",
    "with_defaults",
    "validate_config",
    "validation_problems",
    "workflow_config",
    "write_yaml_atomic",
]
