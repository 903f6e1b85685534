"""`sampler: upstream`: the rows and canvas placements upstream VARC's offline loader draws, drawn the way it draws
them (docs/varc.md, "Upstream's very draws"; docs/reference/upstream-varc.md 4.3, 4.5).

arcpipe's own samplers hash (seed, position), so that a run does not depend on its number of processes and resumes
exactly. Upstream's `offline_train_ARC.py` draws otherwise, and a run may need upstream's very draws: to put an
arcpipe run beside an upstream run row for row, or to rule the draws out when two runs disagree. Upstream:

* its dataset lists the tasks' files sorted by name and each file's train pairs in order; here the same order is
  arcpipe's puzzles sorted by name (identifiers.json), each puzzle's examples in order;
* one process (arcpipe's run on one device): a PyTorch DataLoader with `shuffle=True`. Each epoch, iterating it
  takes two int64 draws from torch's global generator (the iterator's base seed, then RandomSampler's seed) and
  orders the examples by `torch.randperm` on a generator seeded with the second. After each epoch upstream's
  default flags (`--eval-split training`) run a validation, whose loader's iterator takes one more draw: taken
  here before the next epoch's two;
* several processes (`--distributed`, the published recipe on 8 GPUs; here the run's nodes x gpus_per_node, the
  global batch split evenly): a DistributedSampler, whose order does not depend on the run's seed: `torch.randperm`
  on a generator seeded with 0 + epoch (epochs counted from 1), padded to a multiple of the ranks by repeating its
  start, rank r taking every ranks-th example from r. The global batch k here is rank 0's batch k, then rank 1's,
  ..., so arcpipe's rank r trains upstream's rank r's rows. The iterators' base-seed draws, which change no row,
  are not taken in this case;
* each row's scale and offsets come from the dataset's `random.Random(42)` (one per process, never reseeded), in
  the order the process reads its rows: scale uniform in 1..(canvas - 2) // largest side, then the column offset,
  then the row offset (canvas.draw_placement's distribution). They are given to the model as the `canvas_draws`
  that make draw_placement choose exactly those values.

What differs from upstream, and only this: an epoch's last batch when it is short (upstream trains it; arcpipe's
step takes full global batches) is drawn, placements included, and not trained. With one process, torch's global
generator is the one arcpipe's model initialisation and (on a CPU) dropout use, as upstream's are; arcpipe's
initialisation is its own, so the generator's state at the first epoch, and with it the order, is not that of an
upstream run with the same seed: the orders are drawn as upstream draws them, tested against upstream's own loader
from the same generator state (tests/unit/train/test_upstream_order.py). The distributed order and the placements
do not depend on that state: they are upstream's rows for any seed.

Resume: the draws of an epoch are made at its first batch. The generators' states at that moment (torch's and the
Random(42)s) and the Random(42)s' current states go into every saved state, so a run resumed at a boundary or from a
side checkpoint in the middle of an epoch draws the same rows as one that was not stopped.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from arcpipe.data import canvas

if TYPE_CHECKING:
    from arcpipe.data.dataset import Split
    from arcpipe.train.sampler import PassPlan

PLACEMENT_SEED = 42  # upstream's ARCDataset: random.Random(42), whatever the run's seed
DISTRIBUTED_SAMPLER_SEED = 0  # upstream passes none: DistributedSampler's default
VALIDATION_DRAWS = 1  # upstream's default `--eval-split training`: after each epoch one loader iterator, one draw


def upstream_sample_order(names: list[str], puzzle_identifiers: np.ndarray, puzzle_indices: np.ndarray) -> np.ndarray:
    """(N,) int64: arcpipe's example index of each of upstream's dataset indices (puzzles by name, stable; each
    puzzle's examples in order)."""
    puzzle_names = [names[int(i)] for i in puzzle_identifiers]
    order = sorted(range(len(puzzle_names)), key=lambda q: puzzle_names[q])
    return np.concatenate(
        [np.arange(puzzle_indices[q], puzzle_indices[q + 1], dtype=np.int64) for q in order] or [np.zeros(0, np.int64)]
    )


def example_sizes(split: Split, chunk: int = 65536) -> np.ndarray:
    """(N, 2) int64: each example's height and width as upstream's loader sizes it, the larger of input and output
    in each direction (the output alone is missing only on hidden test rows, which training never reads)."""
    n = len(split.inputs)
    sizes = np.zeros((n, 2), dtype=np.int64)
    for lo in range(0, n, chunk):
        inputs = torch.from_numpy(np.asarray(split.inputs[lo : lo + chunk], dtype=np.int64))
        labels = torch.from_numpy(np.asarray(split.labels[lo : lo + chunk], dtype=np.int64))
        _, _, in_h, in_w = canvas.grid_boxes(inputs)
        _, _, out_h, out_w = canvas.grid_boxes(labels)
        sizes[lo : lo + chunk, 0] = torch.maximum(in_h, out_h).numpy()
        sizes[lo : lo + chunk, 1] = torch.maximum(in_w, out_w).numpy()
    return sizes


def upstream_placement(rng: random.Random, height: int, width: int, canvas_size: int) -> tuple[int, int, int]:
    """(scale, x offset, y offset) as upstream's ARCDataset draws them for a pair of this size, advancing `rng`."""
    interior = canvas_size - 2  # upstream's max_img_size
    scale = rng.randint(1, interior // max(height, width, 1))
    room_x, room_y = interior - scale * width, interior - scale * height
    x = rng.randint(1, room_x) if room_x > 0 else 1
    y = rng.randint(1, room_y) if room_y > 0 else 1
    return scale, x, y


@dataclass
class UpstreamOrder:
    """A run's upstream draws: `fill` writes an epoch's rows and canvas_draws into a pass plan at its first batch."""

    sample_to_example: np.ndarray  # (N,) upstream's dataset index -> arcpipe's example index
    puzzle_indices: np.ndarray  # (P + 1,) the split's
    sizes: np.ndarray  # (N, 2) height, width per arcpipe example (example_sizes)
    canvas_size: int
    world_size: int  # upstream's processes: 1 is its DataLoader with shuffle=True, more its DistributedSampler
    rngs: list[random.Random] = field(default_factory=list)  # per upstream process, Random(42)
    epoch_start: dict[str, Any] | None = None  # the generators' states when the latest epoch's draws began

    def __post_init__(self) -> None:
        if not self.rngs:
            self.rngs = [random.Random(PLACEMENT_SEED) for _ in range(self.world_size)]

    @classmethod
    def for_split(cls, split: Split, names: list[str], canvas_size: int, world_size: int) -> UpstreamOrder:
        return cls(
            sample_to_example=upstream_sample_order(names, split.puzzle_identifiers, split.puzzle_indices),
            puzzle_indices=np.asarray(split.puzzle_indices),
            sizes=example_sizes(split),
            canvas_size=canvas_size,
            world_size=world_size,
        )

    # ------------------------------------------------------------------------------------------------------------

    def epoch_samples(self, epoch: int) -> list[np.ndarray]:
        """Each upstream process's dataset indices for `epoch` (upstream's count, from 1), in the order it reads
        them; with one process, advances torch's global generator as upstream's DataLoader does."""
        n = len(self.sample_to_example)
        if self.world_size == 1:
            for _ in range(VALIDATION_DRAWS if epoch > 1 else 0):  # the previous epoch's validation
                torch.empty((), dtype=torch.int64).random_()
            torch.empty((), dtype=torch.int64).random_()  # the DataLoader iterator's base seed (unused here)
            seed = int(torch.empty((), dtype=torch.int64).random_().item())  # RandomSampler's
            generator = torch.Generator()
            generator.manual_seed(seed)
            return [torch.randperm(n, generator=generator).numpy().astype(np.int64)]
        generator = torch.Generator()
        generator.manual_seed(DISTRIBUTED_SAMPLER_SEED + epoch)
        order = torch.randperm(n, generator=generator).numpy().astype(np.int64)
        total = -(-n // self.world_size) * self.world_size
        padded = np.resize(order, total)  # repeats the order's start, as DistributedSampler pads
        return [padded[rank :: self.world_size] for rank in range(self.world_size)]

    def draw_epoch(self, epoch: int, global_batch_size: int) -> tuple[np.ndarray, np.ndarray, int]:
        """(examples (B * G,), canvas_draws (B * G, 3), B): the epoch's B full global batches as arcpipe trains
        them (rank-major within a batch); every row of the epoch, trained or not, advances its process's Random(42)."""
        per_rank = global_batch_size // self.world_size
        parts = []
        for rank, samples in enumerate(self.epoch_samples(epoch)):
            examples = self.sample_to_example[samples]
            draws = np.empty((len(examples), 3), dtype=np.float64)
            for i, example in enumerate(examples.tolist()):
                height, width = (int(v) for v in self.sizes[example])
                where = upstream_placement(self.rngs[rank], height, width, self.canvas_size)
                draws[i] = canvas.placement_draws(*where, height, width, self.canvas_size)
            parts.append((examples, draws))
        batches = min(len(examples) for examples, _ in parts) // per_rank

        def interleave(arrays: list[np.ndarray]) -> np.ndarray:  # (ranks, B, per_rank, ...) -> batch, rank, row
            stacked = np.stack([a[: batches * per_rank].reshape(batches, per_rank, *a.shape[1:]) for a in arrays], 1)
            return stacked.reshape(batches * global_batch_size, *arrays[0].shape[1:])

        return interleave([e for e, _ in parts]), interleave([d for _, d in parts]), batches

    def fill(self, plan: PassPlan, batch_index: int, first_epoch: int, epochs: int, global_batch_size: int) -> None:
        """Make sure the epoch of `batch_index` is drawn into `plan` (a pass starting at upstream epoch
        `first_epoch`, from 1, of `epochs` epochs): drawn now at the epoch's first batch; in its middle (a resumed
        run) redrawn from the generators' states saved at its start."""
        assert plan.examples is not None and plan.draws is not None
        per_epoch = plan.num_batches // epochs
        epoch_in_pass, offset = divmod(batch_index, per_epoch)
        lo = epoch_in_pass * per_epoch * global_batch_size
        hi = lo + per_epoch * global_batch_size
        if offset and plan.examples[lo] >= 0:
            return
        epoch = first_epoch + epoch_in_pass
        if offset == 0:
            self.epoch_start = {
                "epoch": epoch,
                "torch_rng": torch.get_rng_state(),
                "rngs": [rng.getstate() for rng in self.rngs],
            }
            examples, draws, batches = self.draw_epoch(epoch, global_batch_size)
        else:  # resumed mid-epoch: the same draws again from the epoch's start, torch's generator put back after
            if self.epoch_start is None or self.epoch_start["epoch"] != epoch:
                raise RuntimeError(f"sampler upstream: no saved start of epoch {epoch} to resume its draws from")
            now = torch.get_rng_state()
            torch.set_rng_state(self.epoch_start["torch_rng"])
            for rng, state in zip(self.rngs, self.epoch_start["rngs"], strict=True):
                rng.setstate(state)
            examples, draws, batches = self.draw_epoch(epoch, global_batch_size)
            torch.set_rng_state(now)
        if batches != per_epoch:
            raise RuntimeError(f"sampler upstream: epoch {epoch} has {batches} full batches, the plan {per_epoch}")
        plan.examples[lo:hi] = examples
        plan.puzzles[lo:hi] = np.searchsorted(self.puzzle_indices, examples, side="right") - 1
        plan.draws[lo:hi] = draws

    def state_dict(self) -> dict[str, Any]:
        return {"rngs": [rng.getstate() for rng in self.rngs], "epoch_start": self.epoch_start}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for rng, saved in zip(self.rngs, state["rngs"], strict=True):
            rng.setstate(saved)
        self.epoch_start = state["epoch_start"]
