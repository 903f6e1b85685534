"""What every config model and check builds on: the user-input error, the strict base model, and the way a
validator turns problems into located pydantic errors."""

from __future__ import annotations

import re
from collections.abc import Iterable
from difflib import get_close_matches
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError


class ArcpipeError(ValueError):
    """An error in user input; the CLI prints each line of it as `arcpipe: error: ...` and exits non-zero."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)  # a typo is an error, not a default


CELL_ACCURACY = "cell_accuracy"  # attempt 1's share of right cells (eval/score.py): dense where pass@K is still 0


def _metric(metric: str) -> str:
    if metric != CELL_ACCURACY and not re.fullmatch(r"pass@[1-9][0-9]*", metric):
        raise ValueError(f"not a pass@K or {CELL_ACCURACY}; name it as metrics.json does, e.g. pass@1")
    return metric


# a metric the stop rules, gates and halving rungs read: pass@1, pass@2, ... or cell_accuracy
Metric = Annotated[str, AfterValidator(_metric)]


def uncomputed_metric(where: str, metric: str, pass_ks: Iterable[int]) -> str | None:
    """A line when `where`'s Metric is a pass@K the evaluation does not compute (evaluation.pass_ks), else None
    (cell_accuracy: every evaluation computes it)."""
    pass_ks = list(pass_ks)
    if metric == CELL_ACCURACY or int(metric.removeprefix("pass@")) in pass_ks:
        return None
    return (
        f"{where}={metric!r}: evaluation.pass_ks does not compute it; use one of "
        + ", ".join(f"pass@{k}" for k in pass_ks)
        + f" or {CELL_ACCURACY}"
    )


def invalid(title: str, problems: Iterable[tuple[tuple[str, ...], str, Any]]) -> ValidationError:
    # raised inside a validator, pydantic puts the validator's own location before each of these: one line each
    return ValidationError.from_exception_data(title, [custom_error(loc, msg, value) for loc, msg, value in problems])


def custom_error(loc: tuple[str, ...], message: str, value: Any) -> InitErrorDetails:
    return InitErrorDetails(
        type=PydanticCustomError("arcpipe", "{message}", {"message": message}), loc=loc, input=value
    )


def did_you_mean(key: str, candidates: Iterable[str], otherwise: str) -> str:
    close = get_close_matches(key, list(candidates), n=1)
    return f"; did you mean {close[0]}?" if close else otherwise
