"""ACT semantics, gradient reach, config errors, and compiled == eager."""

from __future__ import annotations

import pytest
import torch
from modelkit import ARCHS, make_batch, tiny_head

from arcpipe.models.registry import make_arch_config


@pytest.mark.parametrize("arch", ARCHS)
def test_eval_runs_exactly_halt_max_steps(arch: str) -> None:
    head = tiny_head(arch, halt_max_steps=3) if arch != "urm" else tiny_head(arch, loops=3)
    # a q head that always says "halt": eval must ignore it
    with torch.no_grad():
        head.model.inner.q_head.bias.fill_(10.0)
    head.eval()
    batch = make_batch(2)
    carry = head.initial_carry(batch)
    finished = []
    with torch.no_grad():
        for _ in range(3):
            carry, _, _, _, done = head(carry, batch)
            finished.append(done)
    assert finished == [False, False, True]
    assert carry.steps.tolist() == [3, 3]


def test_training_halts_on_the_q_signal_unless_exploring() -> None:
    head = tiny_head("trm", batch_size=4, halt_max_steps=4)
    with torch.no_grad():
        head.model.inner.q_head.bias.fill_(10.0)  # q_halt > 0 everywhere
    head.train()
    batch = make_batch(4)
    carry = head.initial_carry(batch)
    batch["halt_min_steps"] = torch.tensor([0, 0, 3, 3], dtype=torch.int32)
    carry, *_ = head(carry, batch)
    assert carry.halted.tolist() == [True, True, False, False]  # rows 2, 3 explore: at least 3 steps


def test_exploration_drawn_with_torch_rng_when_not_given() -> None:
    head = tiny_head("trm", batch_size=8, halt_max_steps=16, halt_exploration_prob=1.0)
    with torch.no_grad():
        head.model.inner.q_head.bias.fill_(10.0)
    head.train()
    batch = make_batch(8)
    torch.manual_seed(0)
    carry, *_ = head(head.initial_carry(batch), batch)
    assert not carry.halted.any()  # every row explores with min_halt >= 2


def test_halted_rows_take_new_data_and_others_keep_theirs() -> None:
    head = tiny_head("trm", halt_max_steps=4)
    head.train()
    first, second = make_batch(2, seed=1), make_batch(2, seed=2)
    carry, *_ = head(head.initial_carry(first), {**first, "halt_min_steps": torch.tensor([0, 0], dtype=torch.int32)})
    carry.halted = torch.tensor([True, False])
    carry, *_ = head(carry, second)
    assert torch.equal(carry.current_data["inputs"][0], second["inputs"][0])
    assert torch.equal(carry.current_data["inputs"][1], first["inputs"][1])
    assert carry.steps.tolist() == [1, 2]


@pytest.mark.parametrize(
    ("arch", "overrides"), [("trm", {"H_cycles": 2}), ("hrm", {"H_cycles": 2}), ("urm", {"H_cycles": 2})]
)
def test_gradients_reach_only_the_last_cycle_and_never_the_carry(arch: str, overrides: dict[str, int]) -> None:
    head = tiny_head(arch, **overrides)
    head.train()
    batch = make_batch(2)
    carry = head.initial_carry(batch)
    carry, loss, *_ = head(carry, batch)
    assert all(not t.requires_grad for t in carry.inner)
    loss.backward()
    named = dict(head.named_parameters())
    assert all(p.grad is not None for p in named.values())  # every parameter is in the grad cycle
    # the initial states are buffers: never trained
    assert all(not b.requires_grad for n, b in head.named_buffers() if n.endswith(("_init", "init_hidden")))


def test_no_grad_cycles_do_not_change_the_gradient_graph_size() -> None:
    # more no-grad cycles must not add autograd nodes: same parameter gradients' graph, different values only
    def count_nodes(h_cycles: int) -> int:
        head = tiny_head("trm", H_cycles=h_cycles)
        head.train()
        batch = make_batch(2)
        _, loss, *_ = head(head.initial_carry(batch), batch)
        seen, stack = set(), [loss.grad_fn]
        while stack:
            fn = stack.pop()
            if fn is None or fn in seen:
                continue
            seen.add(fn)
            stack.extend(f for f, _ in fn.next_functions)
        return len(seen)

    assert count_nodes(1) == count_nodes(3)


@pytest.mark.parametrize(
    ("arch", "overrides", "message"),
    [
        ("gpt", {}, "unknown arch 'gpt'; choose one of hrm, trm, urm, transformer"),
        ("trm", {"hiden_size": 64}, "unknown field\\(s\\) hiden_size for arch trm; valid fields: .*hidden_size"),
        ("trm", {"puzzle_emb_len": 1, "puzzle_emb_ndim": 128}, "puzzle_emb_ndim=128 does not fit in puzzle_emb_len=1"),
        ("trm", {"puzzle_emb_ndim": 0, "puzzle_emb_len": 4}, "puzzle_emb_len=4 needs a puzzle embedding"),
        ("hrm", {"hidden_size": 60, "num_heads": 4}, "hidden_size=60 // num_heads=4 = 15 is odd"),
        ("urm", {"loops": 0}, "loops: Input should be greater than 0"),
    ],
)
def test_bad_config_is_a_value_error_naming_the_field(arch: str, overrides: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_arch_config(arch, "tiny", overrides)


def test_unknown_preset_lists_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="unknown preset 'big' for arch urm; choose one of arc, default, tiny"):
        make_arch_config("urm", "big", {})


def test_transformer_baseline_12_heads_on_512_is_valid() -> None:
    cfg = make_arch_config("transformer", "arc", {})
    assert cfg.hidden_size // cfg.num_heads == 42


def test_config_is_frozen() -> None:
    cfg = make_arch_config("trm", "tiny", {})
    with pytest.raises(ValueError):
        cfg.hidden_size = 8  # type: ignore[misc]


@pytest.mark.numeric
@pytest.mark.parametrize(
    "backend",
    [
        "eager",  # dynamo capture (graph breaks, guards, side effects): seconds
        pytest.param("aot_eager", marks=pytest.mark.slow),  # + AOT autograd
        pytest.param("inductor", marks=pytest.mark.slow),  # generated kernels; minutes on 2 busy cores
    ],
)
def test_compiled_step_equals_eager(backend: str) -> None:
    torch._dynamo.reset()
    head = tiny_head("trm", seq_len=16)
    head.train()
    batch = make_batch(2, seq_len=16)
    batch["halt_min_steps"] = torch.zeros(2, dtype=torch.int32)
    compiled = torch.compile(head.step, backend=backend)
    c1 = head.initial_carry(batch)
    c2 = head.initial_carry(batch)
    for _ in range(2):
        c1, l1, m1, o1 = head.step(c1, batch, ("logits",))
        c2, l2, m2, o2 = compiled(c2, batch, ("logits",))
        torch.testing.assert_close(o2["logits"], o1["logits"], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(l2, l1, atol=1e-5, rtol=1e-5)
        assert torch.equal(c1.halted, c2.halted)
        l1.backward()
        l2.backward()
        head.model.inner.puzzle_emb.clear_pending()
