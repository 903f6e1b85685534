"""Shim for rules write_run_config and write_eval_config: a run's resolved training config, or its evaluation
settings, validated, as YAML. Rewritten when, and only when, the resolved values change (the rules' params)."""

from pathlib import Path

from arcpipe.config import evaluation_config_from, validate_config, write_yaml_atomic
from arcpipe.shim import logged

snakemake = snakemake  # noqa: F821  (injected by Snakemake)
with logged(snakemake):
    resolved = snakemake.params.resolved
    source = f"runs.{snakemake.wildcards.run}"
    if "runs" in resolved:
        # evaluation.quick is no training setting (and a run's resolved config has no evaluation section)
        checked = validate_config(resolved, source=source).model_dump(mode="json", exclude={"evaluation": {"quick"}})
    else:
        # only the keys eval_config (rules/common.smk) gives: not ensemble_last or selection_tasks, no empty controls
        evaluation = evaluation_config_from(resolved, source).model_dump(mode="json", exclude_unset=True)
        checked = {"evaluation": evaluation}
    write_yaml_atomic(Path(snakemake.output[0]), checked)
