"""The ACT wrapper shared by every model: carry, halting, exploration and HRM's bootstrapped Q target.

One call is one ACT step (docs/reference/upstream-recursive.md 5.2). Rows that halted at the previous call restart from
the initial state with this batch's rows; the other rows keep their state, step count and *old* data, and the batch rows
at their positions are ignored. The trainer makes one forward, backward and optimizer update per ACT step and keeps
the carry across batches.

Halting: steps >= max_steps always halts. In training (and max_steps > 1) a row also halts on the model's signal
(`q_halt > 0`, or `q_halt > q_continue`), but not before its exploration minimum: with probability
`halt_exploration_prob` a row draws min_halt ~ UniformInt[2, max_steps], else 0. The trainer may decide exploration
itself with `batch["halt_min_steps"]` (int32 (B,), 0 = none), which keeps runs independent of the process count;
without it the draw uses torch's RNG as upstream. In eval mode every row runs exactly max_steps steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from arcpipe.models.layers import InnerCarry, RecursiveCore

DATA_KEYS = ("inputs", "labels", "puzzle_identifiers")


@dataclass
class Carry:
    inner: InnerCarry  # (z_H, z_L) or (hidden,), each (B, P+L, D) in the forward dtype, detached
    steps: Tensor  # (B,) int32 ACT steps taken by the row's current sequence
    halted: Tensor  # (B,) bool: the row takes new data at the next call
    current_data: dict[str, Tensor]  # the rows being processed: inputs, labels (B, L), puzzle_identifiers (B,)

    def state_dict(self) -> dict[str, Tensor]:
        """Plain tensors, for a trainer checkpoint that resumes mid-sequence (torch.load weights_only works)."""
        out = {f"inner.{i}": t for i, t in enumerate(self.inner)}
        out |= {"steps": self.steps, "halted": self.halted}
        return out | {f"data.{k}": v for k, v in self.current_data.items()}

    @classmethod
    def from_state_dict(cls, state: dict[str, Tensor]) -> Carry:
        inner = tuple(state[f"inner.{i}"] for i in range(sum(k.startswith("inner.") for k in state)))
        data = {k.removeprefix("data."): v for k, v in state.items() if k.startswith("data.")}
        return cls(inner, state["steps"], state["halted"], data)


class ACT(nn.Module):
    def __init__(self, inner: RecursiveCore) -> None:
        super().__init__()
        self.inner = inner
        self.max_steps = inner.halt_max_steps  # an evaluator may raise it (URM's loop extrapolation)

    def initial_carry(self, batch: dict[str, Tensor]) -> Carry:
        """Every row halted, so the first call loads the batch; the state is uninitialised until then."""
        B = batch["inputs"].shape[0]
        device = batch["inputs"].device
        return Carry(
            inner=self.inner.empty_carry(B, device),
            steps=torch.zeros(B, dtype=torch.int32, device=device),
            halted=torch.ones(B, dtype=torch.bool, device=device),
            current_data={k: torch.empty_like(batch[k]) for k in DATA_KEYS},
        )

    def forward(self, carry: Carry, batch: dict[str, Tensor]) -> tuple[Carry, dict[str, Tensor]]:
        inner = self.inner.reset_carry(carry.halted, carry.inner)
        steps = torch.where(carry.halted, 0, carry.steps)
        data = {
            k: torch.where(carry.halted.view((-1,) + (1,) * (v.ndim - 1)), batch[k], v)
            for k, v in carry.current_data.items()
        }

        x = self.inner.input_embeddings(data["inputs"], data["puzzle_identifiers"])
        inner, z = self.inner.recur(inner, x)
        logits, q_halt, q_continue = self.inner.heads(z)
        outputs = {"logits": logits, "q_halt_logits": q_halt, "q_continue_logits": q_continue}

        with torch.no_grad():
            steps = steps + 1
            is_last = steps >= self.max_steps
            halted = is_last
            if self.training and self.max_steps > 1 and self.inner.halt_rule != "none":
                threshold = 0 if self.inner.halt_rule == "q_halt>0" else q_continue
                halted = halted | (q_halt > threshold)
                if "halt_min_steps" in batch:
                    min_steps = batch["halt_min_steps"]
                else:
                    explore = torch.rand_like(q_halt) < self.inner.halt_exploration_prob
                    min_steps = explore * torch.randint_like(steps, low=2, high=self.max_steps + 1)
                halted = halted & (steps >= min_steps)
                if self.inner.bootstrap_q:
                    # no replay buffer or target network: one more step from the new state on the same data
                    _, z_next = self.inner.recur(inner, x.detach())
                    _, next_halt, next_continue = self.inner.heads(z_next)
                    target = torch.where(is_last, next_halt, torch.maximum(next_halt, next_continue))
                    outputs["target_q_continue"] = torch.sigmoid(target)

        return Carry(inner, steps, halted, data), outputs
