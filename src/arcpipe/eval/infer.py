"""Stage 1 of an evaluation, infer: a model and the rows of a split -> the model's answers per row (`Predictions`).

    predictions = predict(head, inputs, labels, example_ids, rows, batch_size, env, CandidateKeys(...))

Every row runs the full halt_max_steps (eval mode: halting before it happens only in training, as upstream), so
the loop runs exactly that many ACT steps without reading the halted flags on the host after each one (they are
checked once, at the end); in batches, under `torch.no_grad()`: tensors made here are
ordinary tensors, so nothing from an evaluation can break a later in-place update in training
(docs/reference/upstream-recursive.md 10.8, item 2). Under torchrun each rank takes a contiguous shard of the rows; rank
0 gathers the answers in global row order, so the result does not depend on the number of processes. A single process
needs no process group (docs/reference/upstream-recursive.md 10.8, item 1).

pass@K against depth needs every row's answer after every ACT step. Keeping the tokens takes rows x steps x 900
bytes: 5.6 GB for the ~386k rows x 16 steps of the ARC-AGI-1 aug-1000 test split, on every process (the torchrun
gather sends every shard to every rank). A row's answer only matters to the vote as a grid in its task's original
frame, so `CandidateKeys` crops, de-augments and hashes each step's tokens as soon as the step is computed
(grids.grid_keys, 128 bits: the same grid always gets the same key). What is kept is 16 bytes of key + 4 bytes of
q_halt per row and step, 124 MB for that split, in dense fixed-size arrays: the torchrun gather stays an
all_gather, and one process and several compute the same keys for the same rows. The other way, accumulating each
step's votes batch by batch as real grids, grows with the number of distinct answers (for an untrained model,
about one per row and step: the same order as the tokens), and merging the shards of several processes would add
each candidate's q values in another order than one process does, so full ties could break differently. The price
of the keys is CPU time in this loop: cropping, inverting and hashing cost about 4 us per row and step on a loaded
2-core CPU, some 25 s over the whole ARC-AGI-1 test split (shared by the processes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from arcpipe.config import compiles
from arcpipe.eval.grids import crop_shapes, grid_keys, invert_crops
from arcpipe.eval.puzzles import parse_identifiers
from arcpipe.train.sampler import canvas_draws

IGNORE_LABEL_ID = -100
METRIC_KEYS = ("accuracy", "exact_accuracy", "q_halt_accuracy", "steps", "lm_loss", "q_halt_loss")


@dataclass(frozen=True)
class Predictions:
    """The model's answers for some test examples, in global example order (rank 0 only after gathering).

    Made by `predict` (this stage); read by the top (evaluate.py), which hands the rows' inputs, answers and q_halt
    logits to vote.vote, and their per-step keys and q_halt logits to vote.vote_by_depth.
    """

    rows: np.ndarray  # (N,) int64 example indices into the test split
    preds: np.ndarray  # (N, seq_len) uint8 argmax tokens at the last ACT step
    q_halt_logits: np.ndarray  # (N,) float32
    metric_sums: dict[str, float]  # the loss head's metric sums over these examples (with "count")
    step_keys: np.ndarray | None = None  # (N, D, 2) int64 key of the answer after each ACT step (`CandidateKeys`)
    step_q_halt: np.ndarray | None = None  # (N, D) float32 q_halt logit after each ACT step
    loop_steps: np.ndarray | None = None  # (N,) int32 loop steps each row's answer took (a looped canvas model's)


def predict(
    head: torch.nn.Module,
    inputs: np.ndarray,
    labels: np.ndarray,
    example_ids: np.ndarray,
    rows: np.ndarray,
    batch_size: int,
    env: Any,
    step_keys: CandidateKeys | None = None,
    compile: bool | None = None,
    views: np.ndarray | None = None,
) -> Predictions | None:
    """Run `head` for the full halt_max_steps on `rows` of the split; rank 0 gets every rank's answers, in order.

    inputs, labels: (N_ex, seq_len) uint8 tokens (labels PAD 0 -> ignored); example_ids: (N_ex,) puzzle id of each
    example. Each rank takes the contiguous shard `rows[rank * S:(rank + 1) * S]`; the last batch of a shard is
    padded with blank rows (puzzle id 0, labels ignored), as upstream's loader pads a short batch. With
    `step_keys`, every row's answer and q_halt logit are also kept after each ACT step, the answer as its key
    (`CandidateKeys`), for pass@K against depth. `compile`: run the model's step through torch.compile (None: on
    CUDA only, as training compiles there; `step_is_compiled` says which). Batches are padded to `batch_size`, so one
    compilation serves every batch. `views`: (N_ex,) dihedral id of each example's view (`example_views`), which a
    canvas model needs to cut its answer's blocks as upstream does (data/canvas.decode); None: every row as the
    original. A head with `reports_loop_steps` (LoopViT's) also gives each row's loop steps (`loop_steps`: the
    passes its answer took, the exit step under dynamic exit); other heads' Predictions have None there.
    """
    shard_size = -(-len(rows) // env.world_size)
    mine = rows[env.rank * shard_size : (env.rank + 1) * shard_size]
    seq_len = inputs.shape[1]
    preds = torch.zeros((shard_size, seq_len), dtype=torch.uint8, device=env.device)
    q_halt = torch.zeros(shard_size, dtype=torch.float32, device=env.device)
    max_steps = head.model.max_steps
    num_steps = max_steps if step_keys is not None else 0
    keys = torch.zeros((shard_size, num_steps, 2), dtype=torch.int64, device=env.device)
    step_q = torch.zeros((shard_size, num_steps), dtype=torch.float32, device=env.device)
    sums = torch.zeros(len(METRIC_KEYS) + 1, dtype=torch.float64, device=env.device)  # + count
    looped = bool(getattr(head, "reports_loop_steps", False))
    wanted = ("preds", "q_halt_logits", "loop_steps") if looped else ("preds", "q_halt_logits")
    loops = torch.zeros(shard_size if looped else 0, dtype=torch.int32, device=env.device)
    # read once at the end, not after every step: the halted flags stay on the device (no host sync per step)
    all_halted = torch.ones((), dtype=torch.bool, device=env.device)
    step_fn = torch.compile(head.step, dynamic=False) if step_is_compiled(env.device, compile) else head.step
    was_training = head.training
    head.eval()
    try:
        with torch.no_grad():
            for start in range(0, len(mine), batch_size):
                chunk = mine[start : start + batch_size]
                batch = make_batch(inputs, labels, example_ids, chunk, batch_size, env.device)
                if getattr(head, "draws_per_row", 0):  # a canvas model: placements by place in `rows`, not by rank
                    places = np.arange(batch_size) + env.rank * shard_size + start
                    batch["canvas_draws"] = torch.from_numpy(canvas_draws(0, 0, places)).to(env.device)
                    row_views = np.zeros(batch_size, dtype=np.int64)  # padding rows: the original's
                    if views is not None:
                        row_views[: len(chunk)] = views[chunk]
                    batch["canvas_views"] = torch.from_numpy(row_views).to(env.device)
                carry = head.initial_carry(batch)
                n = len(chunk)
                for step in range(max_steps):  # eval mode: every row halts exactly at max_steps, none before
                    carry, _, metrics, outputs = step_fn(carry, batch, wanted)
                    if step_keys is not None:
                        step_preds = outputs["preds"][:n].to(torch.uint8).cpu().numpy()
                        keys[start : start + n, step] = torch.from_numpy(step_keys(chunk, step_preds)).to(env.device)
                        step_q[start : start + n, step] = outputs["q_halt_logits"][:n].float()
                all_halted &= carry.halted.all()
                preds[start : start + n] = outputs["preds"][:n].to(torch.uint8)
                q_halt[start : start + n] = outputs["q_halt_logits"][:n].float()
                if looped:  # the last ACT step's (a canvas model has one): the loop steps of the answer kept
                    loops[start : start + n] = outputs["loop_steps"][:n].to(torch.int32)
                sums += torch.stack([metrics[k].double() for k in (*METRIC_KEYS, "count")])
    finally:
        head.train(was_training)
    if not bool(all_halted):
        raise RuntimeError(f"a row had not halted after halt_max_steps={max_steps} ACT steps in eval mode")
    per_row = [preds, q_halt] + ([keys, step_q] if step_keys is not None else []) + ([loops] if looped else [])
    if env.world_size > 1:
        *per_row, sums = _gather_to_all(*per_row, sums, world_size=env.world_size)
    if env.rank != 0:
        return None
    n = len(rows)
    totals = dict(zip((*METRIC_KEYS, "count"), sums.cpu().tolist(), strict=True))
    arrays = [t[:n].cpu().numpy() for t in per_row]
    kept = dict(zip(("step_keys", "step_q_halt"), arrays[2:4], strict=False)) if step_keys is not None else {}
    return Predictions(rows, arrays[0], arrays[1], totals, **kept, loop_steps=arrays[-1] if looped else None)


def step_is_compiled(device: torch.device | None, compile: bool | None = None) -> bool:
    """Whether `predict` compiles the model's step on `device`: `compile` when given (a run's `compile`), else on
    CUDA. On an H200 the compiled evaluation step ran 2.5x the eager one's examples/s (benchmarks/RESULTS.md)."""
    return compiles(compile, torch.device(device).type if device is not None else "cpu")


class CandidateKeys:
    """`keys(rows, preds)`: the key of each row's answer in its task's original frame, (n, 2) int64."""

    def __init__(self, example_ids: np.ndarray, identifiers: Sequence[str], rows: np.ndarray) -> None:
        # example_ids: (N_ex,) puzzle id of every example of the split; rows: the examples that will be asked for
        self._example_ids = np.asarray(example_ids, dtype=np.int64)
        self._unique = np.unique(self._example_ids[rows])
        _, self._tid, self._colours = parse_identifiers([identifiers[i] for i in self._unique.tolist()])

    def __call__(self, rows: np.ndarray, preds: np.ndarray) -> np.ndarray:
        """rows: (n,) example indices; preds: (n, 900) uint8 argmax tokens of those rows at one ACT step."""
        u = np.searchsorted(self._unique, self._example_ids[rows])
        grids = invert_crops(preds, np.arange(len(rows)), crop_shapes(preds), self._tid[u], self._colours[u])
        return grid_keys(grids)


def example_views(example_ids: np.ndarray, identifiers: Sequence[str]) -> np.ndarray:
    """(N_ex,) int64 dihedral id of each example's view, from its puzzle identifier (`predict`'s `views`)."""
    return parse_identifiers(identifiers)[1].astype(np.int64)[np.asarray(example_ids)]


def rows_of_tasks(example_ids: np.ndarray, identifiers: Sequence[str], tasks: Sequence[str]) -> np.ndarray:
    """(R,) indices of the examples whose puzzle belongs to one of `tasks`."""
    unique, inverse = np.unique(example_ids, return_inverse=True)
    names, _, _ = parse_identifiers([identifiers[i] for i in unique.tolist()])
    wanted = set(tasks)
    keep = np.array([name in wanted for name in names], dtype=bool)
    return np.flatnonzero(keep[inverse]).astype(np.int64)


def make_batch(
    inputs: np.ndarray,
    labels: np.ndarray,
    example_ids: np.ndarray,
    rows: np.ndarray,
    batch_size: int,
    device: torch.device,
) -> dict[str, torch.Tensor]:
    """The model's batch of `rows`: (B, L) int32 inputs and labels (PAD 0 -> ignored), (B,) puzzle ids.

    A short batch is padded with blank rows: id 0, inputs PAD, labels ignored. Adaptation (adapt.py) builds its
    training batches with it too.
    """
    seq_len = inputs.shape[1]
    x = np.zeros((batch_size, seq_len), dtype=np.int32)
    y = np.full((batch_size, seq_len), IGNORE_LABEL_ID, dtype=np.int32)
    ids = np.zeros(batch_size, dtype=np.int32)
    n = len(rows)
    x[:n] = inputs[rows]
    label_rows = labels[rows].astype(np.int32)
    y[:n] = np.where(label_rows == 0, IGNORE_LABEL_ID, label_rows)
    ids[:n] = example_ids[rows]
    return {
        "inputs": torch.from_numpy(x).to(device),
        "labels": torch.from_numpy(y).to(device),
        "puzzle_identifiers": torch.from_numpy(ids).to(device),
    }


# --------------------------------------------------------------------------------------------------------------


def _gather_to_all(*per_row: torch.Tensor, world_size: int) -> tuple[torch.Tensor, ...]:
    # per_row: tensors with one row per example of the shard, then the metric sums (reduced, not gathered); every
    # shard has the same padded size, so all_gather works on NCCL and gloo alike; rank order = row order
    *shards, sums = per_row
    gathered = []
    for shard in shards:
        parts = [torch.empty_like(shard) for _ in range(world_size)]
        dist.all_gather(parts, shard)
        gathered.append(torch.cat(parts))
    dist.all_reduce(sums)
    return (*gathered, sums)
