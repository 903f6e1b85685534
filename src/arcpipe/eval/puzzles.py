"""What the stages are told about the puzzles: the names of the puzzle ids, and the ground truth of the test pairs.

Below every stage (imports only grids.py). A row's puzzle id names its puzzle in identifiers.json; the name gives
the task and the augmentation to undo (`parse_identifiers`, docs/reference/upstream-recursive.md 1.8). test_puzzles.json
gives, per task, the test inputs and their true outputs (`load_test_puzzles` -> `TestPuzzles`,
docs/reference/upstream-recursive.md 1.5).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from arcpipe.config import ArcpipeError
from arcpipe.eval.grids import CANVAS, Grids

# TRM/URM name grammar: "<task>|||t<tid>|||<10 colour digits>" (docs/reference/upstream-recursive.md 1.8)
SEPARATOR = "|||"


@dataclass(frozen=True)
class TestPuzzles:
    """The tasks to score, in file order, and their test pairs (P) with distinct inputs per task (G groups).

    Made by `load_test_puzzles` (a dataset's test_puzzles.json, or a challenges file with its solutions) before the
    stages run, and by write.load_votes from a votes.npz; read by vote (which test input a row answers), score
    (the true outputs) and write (task names and test inputs of every file).
    """

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


def load_test_puzzles(path: str | Path) -> TestPuzzles:
    """Read test_puzzles.json (docs/reference/upstream-recursive.md 1.5), or any ARC challenges file with optional
    "output" per test pair."""
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


def load_identifiers(path: str | Path) -> list[str]:
    """A dataset's identifiers.json: puzzle name of every puzzle id (0 is the blank identifier)."""
    path = Path(path)
    try:
        names = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ArcpipeError(f"{path}: cannot read identifiers ({err}); rebuild the dataset") from err
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ArcpipeError(f"{path}: expected a JSON list of puzzle names; rebuild the dataset")
    return names


def parse_identifiers(names: Sequence[str]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Puzzle names -> (task names, (U,) int8 dihedral ids, (U, 10) uint8 augmented -> original colour).

    A name without "|||" is an original task (identity). Otherwise the first field is the task and the last two
    are "t<tid>" and the 10 colour digits, where digit c is the new colour of original colour c
    (docs/reference/upstream-recursive.md 1.8).
    """
    # the builder's names end in the fixed-width "|||t<d>|||<10 digits>": read every name's last 18 characters
    # out of one joined buffer as a (U, 18) array; for a shorter name the window holds a newline and fails
    suffix_len = len(SEPARATOR) * 2 + 12
    joined = "\n".join(names)
    encoded = joined.encode("utf-8")
    if len(encoded) == len(joined):
        chars = np.frombuffer(encoded, dtype=np.uint8)
    else:  # non-ASCII names: one code point per element
        chars = np.frombuffer(joined.encode("utf-32-le"), dtype=np.uint32)
    chars = np.concatenate([np.full(suffix_len, ord("\n"), chars.dtype), chars])
    ends = np.cumsum(np.fromiter(map(len, names), dtype=np.int64, count=len(names)) + 1) - 1
    window = chars[ends[:, None] + np.arange(suffix_len)].astype(np.int64)  # (U, 18): the last 18 characters
    digits = window - ord("0")
    augmented = (
        (window[:, 0:3] == ord("|")).all(1)
        & (window[:, 3] == ord("t"))
        & (window[:, 5:8] == ord("|")).all(1)
        & (digits[:, 4] >= 0)
        & (digits[:, 4] <= 7)
        & ((digits[:, 8:] >= 0) & (digits[:, 8:] <= 9)).all(1)
    )
    forward = np.where(augmented[:, None], digits[:, 8:], np.arange(10))  # (U, 10) new colour of each colour
    tids = np.where(augmented, digits[:, 4], 0).astype(np.int8)
    tasks = [name[:-suffix_len] if aug else name for name, aug in zip(names, augmented.tolist(), strict=True)]
    bad = [names[u] for u in np.flatnonzero((np.sort(forward, axis=1) != np.arange(10)).any(axis=1))]
    bad += [task for task in set(tasks) if SEPARATOR in task]  # a separator anywhere else: not this grammar
    if bad:
        raise ArcpipeError(
            f"identifiers.json: {len(bad)} puzzle name(s) do not follow '<task>|||t<0-7>|||<permutation of "
            f"0123456789>', e.g. {bad[0]!r}; rebuild the dataset with arcpipe data build"
        )
    colour_inverse = np.argsort(forward, axis=1).astype(np.uint8).reshape(-1, 10)
    return tasks, tids, colour_inverse


# --------------------------------------------------------------------------------------------------------------


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
