"""Reading a config file and validating it once at the edge: for the CLI and every job (`load_config`), and for
the Snakefile (`workflow_config`); each problem becomes one `source: field=value: problem` line, with a
did-you-mean for a misspelt key."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, get_args

import yaml
from pydantic import BaseModel, ValidationError

from arcpipe.config.base import ArcpipeError, Strict, did_you_mean
from arcpipe.config.evaluation import EvaluationConfig
from arcpipe.config.workflow import WorkflowConfig


def load_config(path: str | Path) -> WorkflowConfig:
    """Read and validate a config file; errors name the file and the field."""
    return validate_config(read_config_yaml(path), source=str(path))


def load_configs(paths: Sequence[str | Path]) -> WorkflowConfig:
    """Several files merged as Snakemake merges `--configfile` over the Snakefile's configfile (each later file's
    mappings into the earlier ones key by key, any other value replaced), then validated; errors name every file.
    `arcpipe config check config/config.yaml config/sweeps-example.yaml` sees what `snakemake --configfile
    config/sweeps-example.yaml` sees."""
    raw: Any = {}
    for path in paths:
        raw = _merged(raw, read_config_yaml(path))
    return validate_config(raw, source=" + ".join(map(str, paths)))


def load_evaluation_config(path: str | Path) -> EvaluationConfig:
    """The `evaluation:` section of a workflow or resolved run config (defaults where it has none)."""
    return evaluation_config_from(read_config_yaml(path) or {}, str(path))


def evaluation_config_from(raw: dict, source: str) -> EvaluationConfig:
    """The `evaluation:` section of a loaded config (defaults where it has none); errors name `source`."""
    try:
        return EvaluationConfig.model_validate(raw.get("evaluation") or {})
    except ValidationError as err:
        raise ArcpipeError(f"{source}: evaluation: {format_validation_error(err)}") from None


def read_config_yaml(path: str | Path) -> Any:
    """A config file's YAML, unvalidated; errors name the file. A key given twice in one mapping is refused (plain
    YAML keeps the last one silently: two runs of one name would be one run)."""
    path = Path(path)
    try:
        return yaml.load(path.read_text(), Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader)
    except OSError as err:
        raise ArcpipeError(f"{path}: cannot read config ({err.strerror})") from None
    except _DuplicateKey as err:
        raise ArcpipeError(f"{path}: {err}") from None
    except yaml.YAMLError as err:
        raise ArcpipeError(f"{path}: not valid YAML ({yaml_problem(err)})") from None


class _DuplicateKey(Exception):
    pass


class _UniqueKeyLoader(yaml.SafeLoader):
    """safe_load's loader, refusing a mapping that names a key twice."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor`: its keys may be overridden here
                continue
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, (str, int, float, bool)):
                continue
            line = key_node.start_mark.line + 1
            if key in seen:
                raise _DuplicateKey(
                    f"key {key!r} is given twice, at line {seen[key]} and line {line}; YAML would keep only the "
                    "second: rename one or merge them"
                )
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def yaml_problem(err: yaml.YAMLError) -> str:
    """A YAML error on one line, with its place; a tag safe_load has no constructor for (`!!python/object/apply:`
    and the like, which would build objects and could run code) is named as refused."""
    if not isinstance(err, yaml.MarkedYAMLError):
        return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    mark = err.problem_mark or err.context_mark
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    if isinstance(err, yaml.constructor.ConstructorError) and "constructor for the tag" in (err.problem or ""):
        tag = (err.problem or "").rpartition("tag ")[2]
        return f"tag {tag}{where} refused: only plain values are read, never objects; remove the tag"
    return f"{err.problem or err.context}{where}"


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
        for path in dict.fromkeys(files):  # Snakemake's own reading keeps a duplicate key's last value silently
            if Path(path).is_file():
                read_config_yaml(path)
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
            fallback = " (check its spelling against docs/configuration.md)"
            msg = "unknown key" + did_you_mean(str(loc[-1]), _keys_beside(err.title, e["loc"]), fallback)
        if where and e["type"] != "missing" and isinstance(e["input"], (str, int, float, bool, type(None))):
            where += f"={e['input']!r}"
        problems.append(f"{where}: {msg}" if where else msg)
    return problems


def format_validation_error(err: ValidationError) -> str:
    """All problems of a ValidationError on one line."""
    return "; ".join(validation_problems(err))


def _merged(base: Any, overlay: Any) -> Any:
    if not isinstance(base, Mapping) or not isinstance(overlay, Mapping):
        return overlay
    return {**base, **{key: _merged(base.get(key), value) for key, value in overlay.items()}}


def _shown(path: str | Path) -> str:
    relative = os.path.relpath(path)  # Snakemake makes --configfile paths absolute
    return str(path) if relative.startswith("..") else relative


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
