"""`sampler: upstream` for the recursive models (HRM, TRM, URM, the transformer): the rows upstream's own
`PuzzleDataset` draws, drawn the way it draws them (docs/reference/upstream-recursive.md 2.2; docs/reproduce.md).

arcpipe's default sampler (train/sampler.plan_pass) draws from counter-based hashes of (seed, position), so that a
run does not depend on its number of processes and resumes exactly; its distributions are upstream's, its rows are
not. This mode draws upstream's very rows, for a run that must sit beside an upstream run row for row, or to rule
the draws out when two runs disagree. Upstream, pass p of the loader (counted from 1, as its `_iters` counts):

* `rng = Generator(Philox(seed + p))`; the group order is `epochs` permutations `rng.permutation(groups)`;
* each visit, in order, picks its puzzle with `rng.integers(first, end)` and its min(examples, room left) examples
  with `choice(examples, taken, replace=False)`, in the order drawn: TRM and HRM (and here the transformer, which
  trains with TRM's loader) call NumPy's global generator (`np.random.choice`), URM the pass's `rng`;
* the packing is arcpipe's (sampler._pack): a puzzle that does not fit is cut, the last partial batch dropped.
  Its visits' draws are made all the same, so NumPy's global generator leaves the pass where upstream's does.

The global generator is the loader worker's: PyTorch seeds it in the worker from a base seed, one int64 draw of the
main process's torch generator when the loader is first iterated (`np.random.seed(_generate_state(base, 0))`).
Here the base seed is drawn from torch's global generator when the run's first pass is planned, after arcpipe's own
initialisation: the group order and the puzzles are upstream's for any seed (they depend on the seed alone), and
URM's examples too; TRM's and HRM's examples are the upstream run's of the same seed where arcpipe's initialisation
consumes torch's generator as upstream's does (TRM's does, below), and otherwise drawn as upstream's are.

URM's rank 0 walks the train loader once before every pass it trains, to count its batches, so each pass it trains
is the loader's second: pass k (from 0) draws with seed + 2 (k + 1). That is what one upstream URM process trains;
this mode follows it.

What differs from upstream: on several processes every rank takes its rows of the same global batch (the one rank
0's draws make); upstream's ranks draw the examples of a puzzle from generators of their own (TRM, HRM) or train
other passes (URM's rank 0), so they may disagree on the visits their batches share.

The ACT exploration is upstream's too: each step, torch's generator of the device draws `rand` then `randint` as
upstream's model does in its forward (upstream_halt_min_steps), where arcpipe's default hashes (seed, step, row);
and after the first pass one more int64 is drawn, as upstream's evaluation loader draws its base seed there. With
arcpipe's initialisation, which consumes torch's generator as upstream's does (TRM: the same initial weights and
the same next draw for a seed), a run on a CPU then draws upstream's very batches and exploration.

Resume: a pass is planned at its first batch. The global generator's state at the start of the latest planned pass
and after it go into every saved state, so a run resumed at a boundary or in the middle of a pass plans the same
rows as one that was not stopped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from arcpipe.train.sampler import PassPlan, _pack

if TYPE_CHECKING:
    from arcpipe.data.dataset import Split

PHILOX_EXAMPLES = ("urm",)  # families whose examples come from the pass's Philox generator, not NumPy's global one
WALKS_BEFORE_PASS = {"urm": 1}  # loader passes upstream's rank 0 walks (and does not train) before each it trains


def upstream_halt_min_steps(rows: int, prob: float, max_steps: int, device: torch.device) -> torch.Tensor:
    """(rows,) int32: the ACT exploration upstream's model draws each training step, on torch's generator of the
    device (`torch.rand_like(q_halt_logits) < prob` times `torch.randint_like(steps, 2, max_steps + 1)`, in that
    order): a row may not halt before it, 0 for none (the meaning of arcpipe's `halt_min_steps`)."""
    explore = torch.rand(rows, dtype=torch.float32, device=device) < prob
    return explore * torch.randint(2, max_steps + 1, (rows,), dtype=torch.int32, device=device)


def family_of(arch: str) -> str:
    """The upstream loader an arch trains with: URM's, or TRM's (HRM's is TRM's, the transformer trains with it)."""
    return "urm" if arch == "urm" else "trm"


def worker_generator(base_seed: int) -> np.random.RandomState:
    """NumPy's global generator as PyTorch seeds it in the loader's only worker (worker id 0) from `base_seed`."""
    from torch.utils.data._utils.worker import _generate_state

    return np.random.RandomState(_generate_state(base_seed, 0))


def pass_seed(family: str, seed: int, pass_index: int) -> int:
    """The Philox seed of the loader pass that trains arcpipe's pass `pass_index` (from 0)."""
    return seed + (WALKS_BEFORE_PASS.get(family, 0) + 1) * (pass_index + 1)


def draw_visits(
    split: Split,
    family: str,
    philox_seed: int,
    epochs: int,
    global_batch_size: int,
    global_rng: np.random.RandomState | None,
) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """Every visit of a loader pass whose generator is Philox(`philox_seed`) (pass_seed), as upstream's loader draws
    them, the dropped last batch's included: (V,) puzzles, (V,) their examples' counts, and each visit's chosen
    positions within its puzzle, in the order drawn.
    `global_rng` (TRM, HRM) is NumPy's global generator, advanced as upstream's worker advances it."""
    puzzle_indices = np.asarray(split.puzzle_indices, dtype=np.int64)
    group_indices = np.asarray(split.group_indices, dtype=np.int64)
    rng = np.random.Generator(np.random.Philox(seed=philox_seed))
    groups = np.concatenate([rng.permutation(len(group_indices) - 1) for _ in range(epochs)]).astype(np.int64)
    chooser = rng if family in PHILOX_EXAMPLES else global_rng
    if chooser is None:
        raise ValueError(f"sampler upstream: the {family} loader draws examples from NumPy's global generator")
    puzzles = np.empty(len(groups), dtype=np.int64)
    counts = np.empty(len(groups), dtype=np.int64)
    chosen: list[np.ndarray] = []
    room = global_batch_size
    for v, g in enumerate(groups.tolist()):  # sequential: a visit's two draws interleave on URM's one generator
        puzzle = int(rng.integers(group_indices[g], group_indices[g + 1]))
        size = int(puzzle_indices[puzzle + 1] - puzzle_indices[puzzle])
        take = min(size, room)  # a puzzle that does not fit is cut at the batch's end
        chosen.append(chooser.choice(size, take, replace=False))
        puzzles[v], counts[v] = puzzle, size
        room = room - take or global_batch_size
    return puzzles, counts, chosen


def draw_pass(
    split: Split,
    family: str,
    philox_seed: int,
    epochs: int,
    global_batch_size: int,
    global_rng: np.random.RandomState | None,
) -> PassPlan:
    """A loader pass (draw_visits) packed as arcpipe's sampler packs (sampler._pack): the kept rows' examples and
    puzzles, one row each (PassPlan.examples)."""
    puzzles, counts, chosen = draw_visits(split, family, philox_seed, epochs, global_batch_size, global_rng)
    taken, row_start, num_batches = _pack(counts, global_batch_size)
    rows = num_batches * global_batch_size
    starts = np.asarray(split.puzzle_indices, dtype=np.int64)[puzzles]
    examples = np.empty(rows, dtype=np.int64)
    row_puzzles = np.empty(rows, dtype=np.int64)
    for v in np.flatnonzero(taken).tolist():
        lo, n = int(row_start[v]), int(taken[v])
        examples[lo : lo + n] = starts[v] + chosen[v][:n]
        row_puzzles[lo : lo + n] = puzzles[v]
    return PassPlan(
        puzzles=row_puzzles,
        taken=np.ones(rows, dtype=np.int64),
        row_start=np.arange(rows, dtype=np.int64),
        num_batches=num_batches,
        examples=examples,
    )


@dataclass
class UpstreamPuzzles:
    """A run's upstream draws: `plan` draws a pass at its first batch (again, from the saved start, on resume)."""

    family: str  # "trm" (TRM's and HRM's loader) or "urm"
    seed: int
    rng: np.random.RandomState | None = None  # NumPy's global generator (TRM, HRM); None until the first pass
    start: dict[str, Any] | None = None  # {"pass_index", "state"}: the generator when the latest pass began

    def plan(self, split: Split, pass_index: int, epochs: int, global_batch_size: int) -> PassPlan:
        philox_seed = pass_seed(self.family, self.seed, pass_index)
        if self.family in PHILOX_EXAMPLES:
            return draw_pass(split, self.family, philox_seed, epochs, global_batch_size, None)
        if self.rng is None:  # the first pass: the worker's seeding, from torch's generator as the loader draws it
            self.rng = worker_generator(int(torch.empty((), dtype=torch.int64).random_().item()))
        elif self.start is not None and self.start["pass_index"] == pass_index:
            self.rng.set_state(self.start["state"])  # the pass again (a resumed run): from its start
        elif self.start is not None and self.start["pass_index"] != pass_index - 1:
            raise RuntimeError(
                f"sampler upstream: pass {pass_index} follows no planned pass (the latest began pass "
                f"{self.start['pass_index']}); upstream's draws are made pass after pass"
            )
        self.start = {"pass_index": pass_index, "state": self.rng.get_state()}
        return draw_pass(split, self.family, philox_seed, epochs, global_batch_size, self.rng)

    def first_evaluation_draw(self) -> None:
        """The one draw of torch's generator upstream's trainer makes after its first pass: its evaluation loader's
        iterator, first iterated there, draws its base seed (later evaluations reuse the persistent worker)."""
        torch.empty((), dtype=torch.int64).random_()

    def state_dict(self) -> dict[str, Any]:
        """Tensors and plain values only (a training state loads with weights_only=True)."""
        return {
            "family": self.family,
            "start": {"pass_index": self.start["pass_index"], "state": _pack_state(self.start["state"])}
            if self.start is not None
            else None,
            "state": _pack_state(self.rng.get_state()) if self.rng is not None else None,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["family"] != self.family:
            raise ValueError(
                f"sampler upstream: the saved draws are the {state['family']} loader's, not {self.family}'s"
            )
        start = state["start"]
        self.start = {"pass_index": start["pass_index"], "state": _unpack_state(start["state"])} if start else None
        self.rng = None
        if state["state"] is not None:
            self.rng = np.random.RandomState()
            self.rng.set_state(_unpack_state(state["state"]))


def _pack_state(state: tuple) -> dict[str, Any]:
    """A RandomState's legacy state tuple as a tensor and plain values."""
    name, key, pos, has_gauss, gauss = state
    assert name == "MT19937"
    return {
        "key": torch.from_numpy(np.asarray(key, dtype=np.int64)),
        "pos": int(pos),
        "gauss": (int(has_gauss), float(gauss)),
    }


def _unpack_state(packed: dict[str, Any]) -> tuple:
    key = packed["key"].numpy().astype(np.uint32)
    return ("MT19937", key, packed["pos"], *packed["gauss"])
