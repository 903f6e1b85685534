"""Ground truth from test_puzzles.json, pass@K from ranked votes, and the ARC Prize submission.json.

pass@K (upstream.md 5.3): a test pair is solved at K when its true output is among its K best candidates; a task
scores the fraction of its test pairs solved (fractional credit); pass@K is the mean over every task of
test_puzzles.json, so a pair without any prediction counts as wrong.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from arcpipe.config import ArcpipeError
from arcpipe.eval.grids import CANVAS, Grids, match_grids

if TYPE_CHECKING:
    from arcpipe.eval.vote import Votes

log = logging.getLogger(__name__)

SCHEMA_PATH = Path(__file__).with_name("submission.schema.json")
FALLBACK_GRID: list[list[int]] = [[0]]  # the attempt written when a test input has no (non-empty) candidate
DEFAULT_KS = (1, 2, 5, 10, 100, 1000)


@dataclass(frozen=True)
class TestPuzzles:
    """The tasks to score, in file order, and their test pairs (P) with distinct inputs per task (G groups)."""

    task_names: list[str]
    task_pair_start: np.ndarray  # (T + 1,) int64: pairs of task t are task_pair_start[t]:task_pair_start[t + 1]
    pair_group: np.ndarray  # (P,) int64 input group of each pair
    group_inputs: Grids  # (G,) distinct test inputs, task by task
    task_group_start: np.ndarray  # (T + 1,) int64
    labels: Grids  # (P,) true outputs ((0, 0) where unknown)
    has_label: np.ndarray  # (P,) bool
    source: str = "test_puzzles.json"

    @property
    def num_tasks(self) -> int:
        return len(self.task_names)

    @property
    def num_pairs(self) -> int:
        return len(self.pair_group)

    @property
    def num_groups(self) -> int:
        return len(self.group_inputs)

    @property
    def pair_task(self) -> np.ndarray:
        return np.repeat(np.arange(self.num_tasks), np.diff(self.task_pair_start))

    @property
    def pair_index(self) -> np.ndarray:
        """(P,) position of each pair among its task's test inputs."""
        return np.arange(self.num_pairs) - self.task_pair_start[self.pair_task]

    def subset(self, task_names: Sequence[str]) -> TestPuzzles:
        """The same ground truth restricted to some tasks (quick mode), in the given order."""
        tasks = load_tasks_from_json(self._as_json(task_names), self.source)
        return tasks

    def _as_json(self, task_names: Sequence[str]) -> dict[str, Any]:
        index = {name: t for t, name in enumerate(self.task_names)}
        out: dict[str, Any] = {}
        for name in task_names:
            t = index[name]
            pairs = []
            for p in range(self.task_pair_start[t], self.task_pair_start[t + 1]):
                pair: dict[str, Any] = {"input": self.group_inputs[self.pair_group[p]].tolist()}
                if self.has_label[p]:
                    pair["output"] = self.labels[p].tolist()
                pairs.append(pair)
            out[name] = {"test": pairs}
        return out


@dataclass(frozen=True)
class Scores:
    ks: tuple[int, ...]
    label_rank: np.ndarray  # (P,) int64 0-based rank of the true output among the candidates, -1 if absent
    task_score: np.ndarray  # (T, len(ks)) fraction of the task's test pairs solved at each K
    pass_at: dict[int, float] = field(default_factory=dict)  # K -> mean task score

    def solved(self, k: int) -> np.ndarray:
        """(P,) bool: the pair's true output is among its k best candidates."""
        return (self.label_rank >= 0) & (self.label_rank < k)


@dataclass(frozen=True)
class SubmissionStats:
    num_entries: int  # one per test input of every task
    pairs_without_candidates: int  # entries written entirely with the fallback grid
    empty_attempts: int  # attempts whose candidate was the empty grid, written as the fallback grid


def load_test_puzzles(path: str | Path) -> TestPuzzles:
    """Read test_puzzles.json (upstream.md 1.5), or any ARC challenges file with optional "output" per test pair."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ArcpipeError(f"{path}: cannot read test puzzles ({err}); rebuild the dataset") from err
    return load_tasks_from_json(raw, str(path))


def load_tasks_from_json(raw: Any, source: str) -> TestPuzzles:
    """Tasks as parsed JSON `{task: {"test": [{"input": grid, "output": grid?}, ...], ...}}` -> TestPuzzles."""
    if not isinstance(raw, dict) or not raw:
        raise ArcpipeError(f"{source}: expected a non-empty JSON object mapping task ids to tasks")
    problems: list[str] = []
    task_names: list[str] = []
    inputs: list[np.ndarray] = []
    labels: list[np.ndarray] = []
    has_label: list[bool] = []
    task_pair_start = [0]
    pair_group: list[int] = []
    task_group_start = [0]
    for name, task in raw.items():
        tests = task.get("test") if isinstance(task, dict) else None
        if not isinstance(tests, list) or not tests:
            problems.append(f"task {name}: no 'test' list")
            continue
        task_names.append(name)
        groups: list[np.ndarray] = []  # distinct inputs of this task
        for j, pair in enumerate(tests):
            grid = _grid(pair.get("input") if isinstance(pair, dict) else None, f"task {name} test {j} input", problems)
            label = pair.get("output") if isinstance(pair, dict) else None
            has_label.append(label is not None)
            labels.append(
                _grid(label, f"task {name} test {j} output", problems)
                if label is not None
                else np.zeros((0, 0), np.uint8)
            )
            same = [g for g, other in enumerate(groups) if np.array_equal(other, grid) and other.shape == grid.shape]
            if same:
                pair_group.append(task_group_start[-1] + same[0])
            else:
                pair_group.append(task_group_start[-1] + len(groups))
                groups.append(grid)
        inputs += groups
        task_pair_start.append(task_pair_start[-1] + len(tests))
        task_group_start.append(task_group_start[-1] + len(groups))
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise ArcpipeError(f"{source}: {'; '.join(problems[:3])}{more}; fix or regenerate the file")
    return TestPuzzles(
        task_names=task_names,
        task_pair_start=np.array(task_pair_start, dtype=np.int64),
        pair_group=np.array(pair_group, dtype=np.int64),
        group_inputs=Grids.from_list(inputs),
        task_group_start=np.array(task_group_start, dtype=np.int64),
        labels=Grids.from_list(labels),
        has_label=np.array(has_label, dtype=bool),
        source=source,
    )


def score(votes: Votes, test: TestPuzzles, ks: Sequence[int] = DEFAULT_KS) -> Scores:
    """pass@K for each K in `ks`: per test pair, averaged per task, then over all tasks of `test`."""
    return score_ranks(_label_ranks(votes, test), test, ks)


def score_ranks(label_rank: np.ndarray, test: TestPuzzles, ks: Sequence[int] = DEFAULT_KS) -> Scores:
    """pass@K from each test pair's 0-based label rank among its ranked candidates ((P,) int64, -1: absent)."""
    ks = tuple(int(k) for k in ks)
    if not ks or min(ks) < 1:
        raise ArcpipeError(f"evaluation.pass_ks: {list(ks)} must be positive integers")
    solved = (label_rank[:, None] >= 0) & (label_rank[:, None] < np.array(ks)[None, :])  # (P, len(ks))
    per_task_sum = np.add.reduceat(solved.astype(np.float64), test.task_pair_start[:-1], axis=0)
    task_score = per_task_sum / np.diff(test.task_pair_start)[:, None]
    means = task_score.sum(axis=0) / test.num_tasks
    return Scores(ks, label_rank, task_score, {k: float(m) for k, m in zip(ks, means, strict=True)})


def build_submission(
    votes: Votes, test: TestPuzzles, attempts: int = 2
) -> tuple[dict[str, list[dict[str, list[list[int]]]]], SubmissionStats]:
    """`{task: [{"attempt_1": grid, ..., "attempt_<attempts>": grid} for every test input]}` (ARC Prize layout).

    The attempts are the best `attempts` candidates; with fewer candidates the first is repeated (upstream). A test
    input without any candidate, and any empty-grid candidate (never a valid answer), is written as FALLBACK_GRID
    so that every test input of every task has an entry; both cases are counted in the stats.
    """
    submission: dict[str, list[dict[str, list[list[int]]]]] = {}
    without, empty = 0, 0
    for t, name in enumerate(test.task_names):
        entries = []
        for p in range(test.task_pair_start[t], test.task_pair_start[t + 1]):
            cands = range(votes.start[p], min(votes.start[p] + attempts, votes.start[p + 1]))
            grids = [votes.grids.tolist(c) for c in cands]
            if not grids:
                without += 1
                grids = [FALLBACK_GRID]
            grids += [grids[0]] * (attempts - len(grids))
            for i, grid in enumerate(grids):
                if not grid:
                    empty += 1
                    grids[i] = FALLBACK_GRID
            entries.append({f"attempt_{i + 1}": grid for i, grid in enumerate(grids)})
        submission[name] = entries
    return submission, SubmissionStats(test.num_pairs, without, empty)


def validate_submission(submission: Mapping[str, Any], test: TestPuzzles | None = None) -> None:
    """Check `submission` against the stored JSON schema, rectangular grids and, given `test`, full coverage."""
    import jsonschema

    schema = json.loads(SCHEMA_PATH.read_text())
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(submission), key=lambda e: list(e.path))
    problems = [f"{'/'.join(str(x) for x in e.path) or '(root)'}: {e.message[:200]}" for e in errors[:3]]
    for name, entries in submission.items() if isinstance(submission, Mapping) else ():
        for j, entry in enumerate(entries if isinstance(entries, list) else []):
            for key, grid in entry.items() if isinstance(entry, dict) else ():
                if isinstance(grid, list) and len({len(row) for row in grid if isinstance(row, list)}) > 1:
                    problems.append(f"{name}/{j}/{key}: rows of different lengths")
    if test is not None:
        sizes = np.diff(test.task_pair_start)
        for name, size in zip(test.task_names, sizes, strict=True):
            got = len(submission.get(name, []))
            if got != size:
                problems.append(f"{name}: {got} entries for {size} test inputs")
        extra = set(submission) - set(test.task_names)
        if extra:
            problems.append(f"tasks not in {test.source}: {sorted(extra)[:3]}")
    if problems:
        raise ArcpipeError(f"submission.json does not match {SCHEMA_PATH.name}: {'; '.join(problems[:5])}")


# --------------------------------------------------------------------------------------------------------------


def _label_ranks(votes: Votes, test: TestPuzzles) -> np.ndarray:
    # each pair's label is a query; its "bucket" is the pair's own candidate range
    found = match_grids(
        test.labels,
        np.where(test.has_label, np.arange(test.num_pairs), -1),
        votes.grids,
        votes.start[:-1],
        votes.start[1:],
    )
    return np.where(found >= 0, found - votes.start[:-1], -1).astype(np.int64)


def _grid(value: Any, where: str, problems: list[str]) -> np.ndarray:
    ok = (
        isinstance(value, list)
        and 1 <= len(value) <= CANVAS
        and all(isinstance(row, list) and 1 <= len(row) <= CANVAS for row in value)
        and len({len(row) for row in value}) == 1
        and all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= 9 for row in value for x in row)
    )
    if not ok:
        problems.append(f"{where} is not a rectangular 1..30 x 1..30 grid of colours 0-9")
        return np.zeros((1, 1), np.uint8)
    return np.array(value, dtype=np.uint8)
