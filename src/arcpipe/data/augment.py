"""ARC augmentations: the 8 dihedral transforms x colour permutations fixing colour 0, and their names.

The semantics are upstream's (docs/reference/upstream-recursive.md 1.8): a view is made by mapping colours first and
then applying the dihedral transform; it is undone by inverting the dihedral transform first and then the colours. A
view is named `task|||t{tid}|||{digits}`, where digit c is the new colour of original colour c; a name without `|||` is
the identity. The evaluator inverts predictions through `parse_identifier(name).invert(grid)`.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

import numpy as np

from arcpipe.config import ArcpipeError

Grid = np.ndarray  # (H, W) uint8, colours 0..9

CANVAS = 30  # side of the token canvas; PAD = 0, EOS = 1, colour c = c + 2
SEPARATOR = "|||"
NUM_COLOURS = 10
NUM_DIHEDRALS = 8
ALL_DIHEDRALS = tuple(range(NUM_DIHEDRALS))
DIHEDRAL_INVERSE = (0, 3, 2, 1, 4, 5, 6, 7)  # DIHEDRAL_INVERSE[t] undoes t
TRANSPOSING = (False, True, False, True, False, False, True, True)  # tids that swap height and width


# upstream VARC's test-time views (upstream-varc.md 4.4): after the original, Rotate(90), Rotate(270), Rotate(180),
# Flip(0) (up-down) and Flip(1) (left-right), each with the identity colours and VARC_TTT_PERMUTATIONS others
VARC_TTT_DIHEDRALS = (1, 3, 2, 5, 4)
VARC_TTT_PERMUTATIONS = 9
VARC_TTT_VIEWS = 1 + len(VARC_TTT_DIHEDRALS) * (1 + VARC_TTT_PERMUTATIONS)  # 51


def varc_ttt_views(task_ids: list[str], seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Upstream VARC's 51 test-time views of each task, in its order: (T, 51) dihedral ids and (T, 51, 10) colour
    maps. Colour 0 stays 0; the other nine are permuted uniformly, from numpy's generator seeded with (seed, the
    task id's hash, the view), where upstream prefers colours the task does not use (a documented difference). A
    geometry's colourings are distinct (a view's name is its transform: a repeat would name two views alike): a
    permutation drawn already in its geometry, the identity included, is drawn again from the same generator."""
    tids = np.zeros((len(task_ids), VARC_TTT_VIEWS), dtype=np.uint8)
    colours = np.tile(np.arange(NUM_COLOURS, dtype=np.uint8), (len(task_ids), VARC_TTT_VIEWS, 1))
    for t, task_id in enumerate(task_ids):
        stream = int.from_bytes(hashlib.sha256(task_id.encode()).digest()[:4], "little")
        view = 1
        for tid in VARC_TTT_DIHEDRALS:
            drawn = {tuple(range(NUM_COLOURS))}
            for k in range(1 + VARC_TTT_PERMUTATIONS):
                tids[t, view] = tid
                if k:
                    rng = np.random.default_rng([seed, stream, view])
                    while (new := (0, *(1 + rng.permutation(NUM_COLOURS - 1)).tolist())) in drawn:
                        pass
                    drawn.add(new)
                    colours[t, view] = new
                view += 1
    return tids, colours


def dihedral(grid: Grid, tid: int) -> Grid:
    """Dihedral transform `tid` with numpy semantics (tid 1 is `np.rot90`, counter-clockwise); returns a view."""
    if tid == 0:
        return grid
    if tid == 1:
        return np.rot90(grid, k=1)
    if tid == 2:
        return np.rot90(grid, k=2)
    if tid == 3:
        return np.rot90(grid, k=3)
    if tid == 4:
        return np.fliplr(grid)
    if tid == 5:
        return np.flipud(grid)
    if tid == 6:
        return grid.T
    if tid == 7:
        return np.fliplr(np.rot90(grid, k=1))  # the anti-transpose
    raise ValueError(f"dihedral transform id {tid} is not in 0..7")


@dataclass(frozen=True)
class Augmentation:
    """One view of a task: `colours[c]` is the new colour of original colour c, then dihedral transform `tid`."""

    tid: int
    colours: tuple[int, ...]

    def __post_init__(self) -> None:
        assert _is_valid(self.tid, self.colours), (self.tid, self.colours)

    @property
    def is_identity(self) -> bool:
        return self.tid == 0 and self.colours == IDENTITY_COLOURS

    def apply(self, grid: Grid) -> Grid:
        """The augmented view of an original grid: map colours, then transform."""
        return dihedral(self._table()[grid], self.tid)

    def invert(self, grid: Grid) -> Grid:
        """The original-frame grid of an augmented view: undo the transform first, then the colours."""
        inverse = np.argsort(self._table()).astype(np.uint8)
        return inverse[dihedral(np.asarray(grid), DIHEDRAL_INVERSE[self.tid])]

    def name(self, task_id: str) -> str:
        """Upstream's identifier of this view of `task_id`; the identity is the bare task id."""
        if self.is_identity:
            return task_id
        return f"{task_id}{SEPARATOR}t{self.tid}{SEPARATOR}{''.join(map(str, self.colours))}"

    def _table(self) -> np.ndarray:
        return np.asarray(self.colours, dtype=np.uint8)


IDENTITY_COLOURS = tuple(range(NUM_COLOURS))


def parse_identifier(name: str) -> tuple[str, Augmentation]:
    """Task id and augmentation of a puzzle name, as upstream's `inverse_aug` reads it (no `|||`: identity)."""
    if SEPARATOR not in name:
        return name, IDENTITY
    fields = name.split(SEPARATOR)
    tid_text, digits = fields[-2], fields[-1]
    if len(fields) >= 3 and re.fullmatch(r"t[0-7]", tid_text) and re.fullmatch(r"[0-9]{10}", digits):
        tid, colours = int(tid_text[1:]), tuple(int(d) for d in digits)
        if _is_valid(tid, colours):
            return fields[0], Augmentation(tid, colours)
    raise ArcpipeError(
        f"puzzle name {name!r} is not 'task|||t<0-7>|||<10 digits>' with the digits a permutation of 0-9 "
        "starting with 0"
    )


def to_canvas(grid: Grid, row: int = 0, col: int = 0) -> np.ndarray:
    """A grid as upstream's (900,) uint8 token row: colours + 2 at (row, col) on a 30x30 PAD canvas, EOS (1) on the
    row below and the column right of the grid where they fit, the corner between them left PAD."""
    h, w = grid.shape
    assert 0 <= row <= CANVAS - h and 0 <= col <= CANVAS - w, (grid.shape, row, col)
    canvas = np.zeros((CANVAS, CANVAS), dtype=np.uint8)
    canvas[row : row + h, col : col + w] = grid + 2
    if row + h < CANVAS:
        canvas[row + h, col : col + w] = 1
    if col + w < CANVAS:
        canvas[row : row + h, col + w] = 1
    return canvas.reshape(-1)


def grid_hash(grid: Grid) -> str:
    """Upstream's grid hash: sha256 of the two side lengths as single bytes, then the C-order uint8 cells."""
    grid = np.ascontiguousarray(grid, dtype=np.uint8)
    assert grid.ndim == 2 and max(grid.shape) < 256, grid.shape
    return hashlib.sha256(bytes(grid.shape) + grid.tobytes()).hexdigest()


def _is_valid(tid: int, colours: tuple[int, ...]) -> bool:
    return 0 <= tid < NUM_DIHEDRALS and colours[:1] == (0,) and sorted(colours) == list(range(NUM_COLOURS))


IDENTITY = Augmentation(0, IDENTITY_COLOURS)
