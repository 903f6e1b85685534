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


def _pass_at_k(metric: str) -> str:
    if not re.fullmatch(r"pass@[1-9][0-9]*", metric):
        raise ValueError("not a pass@K; name it as metrics.json does, e.g. pass@1")
    return metric


PassAtK = Annotated[str, AfterValidator(_pass_at_k)]  # a metric the stop rules and gates read: pass@1, pass@2, ...


def uncomputed_metric(where: str, metric: str, pass_ks: Iterable[int]) -> str | None:
    """A line when `where`'s PassAtK is not among the pass@K the evaluation computes (evaluation.pass_ks), else None."""
    pass_ks = list(pass_ks)
    if int(metric.removeprefix("pass@")) in pass_ks:
        return None
    return f"{where}={metric!r}: evaluation.pass_ks does not compute it; use one of " + ", ".join(
        f"pass@{k}" for k in pass_ks
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
