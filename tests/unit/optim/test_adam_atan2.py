"""AdamATan2's foreach torch backend against the per-parameter loop it replaced: same bits, same state, same files."""

from __future__ import annotations

import io
import logging
import math

import pytest
import torch
from adam_atan2_per_parameter import PerParameterAdamATan2

from arcpipe.optim import AdamATan2
from arcpipe.optim.adam_atan2 import bias_corrections

# sizes off the vector width and past the parallel grain size; a bf16 pair as URM's conv has
SHAPES = [(64, 33), (768, 128), (12, 64), (2, 64), (2,), (1,), (40_003,), (5, 7)]
DTYPES = [torch.float32] * 6 + [torch.bfloat16] * 2


def _params(seed: int = 0) -> list[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter((torch.randn(s, generator=g) * 0.02).to(d)) for s, d in zip(SHAPES, DTYPES, strict=True)]


def _train(opt: torch.optim.Optimizer, params: list[torch.nn.Parameter], steps: range, seed: int = 1) -> None:
    """Steps with warm-up lr, gradients from 1e-9 to 10 in scale, and param 3 without a gradient every third step
    (so the step counts differ between tensors)."""
    for step in steps:
        g = torch.Generator().manual_seed(seed * 100_003 + step)
        for i, p in enumerate(params):
            scale = 10.0 ** int(torch.randint(-9, 2, (), generator=g))
            p.grad = None if i == 3 and step % 3 == 0 else (torch.randn(p.shape, generator=g) * scale).to(p.dtype)
        for group in opt.param_groups:
            group["lr"] = 1e-3 * min(1.0, (step + 1) / 8)
        opt.step()


def _assert_same(a: torch.optim.Optimizer, pa: list, b: torch.optim.Optimizer, pb: list) -> None:
    for x, y in zip(pa, pb, strict=True):
        assert torch.equal(x, y), (x.shape, x.dtype)
        for key in ("step", "exp_avg", "exp_avg_sq"):
            assert torch.equal(a.state[x][key], b.state[y][key]), (x.shape, key)


@pytest.mark.numeric
def test_foreach_path_is_bitwise_the_per_parameter_loop() -> None:
    old_params, new_params = _params(), _params()
    old = PerParameterAdamATan2(old_params, lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    new = AdamATan2(new_params, lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1, compile=False)
    assert new.backend == "torch"
    _train(old, old_params, range(40))
    _train(new, new_params, range(40))
    _assert_same(old, old_params, new, new_params)
    assert float(new.state[new_params[3]]["step"]) == 26 and float(new.state[new_params[0]]["step"]) == 40


@pytest.mark.numeric
def test_bias_corrections_on_the_device_equal_pythons_float64_in_fp32() -> None:
    # the per-parameter loop computed these on the host: lr / (1 - beta1**t) and sqrt(1 - beta2**t) in Python
    # floats, then fp32; here pow runs in torch's float64, which can differ from libm's in the last bit
    t = torch.arange(1, 1_000_001, dtype=torch.float32)
    for lr, beta1, beta2 in [(1e-4, 0.9, 0.95), (3e-4, 0.9, 0.999), (7.5e-5, 0.8, 0.99)]:
        step_size, bc2_sqrt = bias_corrections(t, lr, beta1, beta2)
        host_step_size = torch.tensor([lr / (1 - beta1**n) for n in range(1, 1_000_001)], dtype=torch.float32)
        host_bc2_sqrt = torch.tensor([math.sqrt(1 - beta2**n) for n in range(1, 1_000_001)], dtype=torch.float32)
        assert torch.equal(step_size, host_step_size) and torch.equal(bc2_sqrt, host_bc2_sqrt), (lr, beta1, beta2)


@pytest.mark.numeric
def test_state_dict_keys_and_an_old_optimizer_state_continue_bitwise() -> None:
    # a state file written before the rewrite (same keys) resumes into the new path, through torch.save/load
    old_params, new_params = _params(), _params()
    old = PerParameterAdamATan2(old_params, lr=1e-3)
    _train(old, old_params, range(10))
    buf = io.BytesIO()
    torch.save(old.state_dict(), buf)
    state = torch.load(io.BytesIO(buf.getvalue()), map_location="cpu")
    assert all(set(s) == {"step", "exp_avg", "exp_avg_sq"} for s in state["state"].values())
    with torch.no_grad():
        for x, y in zip(old_params, new_params, strict=True):
            y.copy_(x)
    new = AdamATan2(new_params, lr=1e-3, compile=False)
    new.load_state_dict(state)
    assert all(s["step"].dtype == torch.float32 and s["step"].ndim == 0 for s in new.state.values())
    _train(old, old_params, range(10, 30))
    _train(new, new_params, range(10, 30))
    _assert_same(old, old_params, new, new_params)


@pytest.mark.numeric
def test_saved_and_reloaded_mid_run_ends_as_a_straight_run() -> None:
    straight_params, resumed_params = _params(), _params()
    straight = AdamATan2(straight_params, lr=1e-3, compile=False)
    _train(straight, straight_params, range(20))
    first = AdamATan2(resumed_params, lr=1e-3, compile=False)
    _train(first, resumed_params, range(10))
    buf = io.BytesIO()
    torch.save(first.state_dict(), buf)
    second = AdamATan2(resumed_params, lr=1e-3, compile=False)
    second.load_state_dict(torch.load(io.BytesIO(buf.getvalue()), map_location="cpu"))
    _train(second, resumed_params, range(10, 20))
    _assert_same(straight, straight_params, second, resumed_params)


def test_backend_is_said_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="arcpipe.optim.adam_atan2"):
        opt = AdamATan2([torch.nn.Parameter(torch.zeros(3))], compile=False)
    assert opt.backend == "torch"
    assert "AdamATan2 backend: torch" in caplog.text


@pytest.mark.numeric
def test_a_float64_parameter_steps_in_float64_as_the_kernel() -> None:
    """The CUDA kernel computes in at::opmath_type of the parameter's dtype: double for a float64 parameter (URM's
    conv in a float64 parity run), so its update is not rounded to fp32. A float64 parameter here takes the update
    of the kernel's formula in float64, next to an fp32 one that is unchanged; fp32 maths would be ~1e-9 away."""
    g = torch.Generator().manual_seed(0)
    start = torch.randn(257, generator=g, dtype=torch.float64) * 0.3
    p64, p32 = torch.nn.Parameter(start.clone()), torch.nn.Parameter(start.float())
    reference_p32 = torch.nn.Parameter(start.float())
    lr, (beta1, beta2), wd = 1e-3, (0.9, 0.95), 0.1
    opt = AdamATan2([p64, p32], lr=lr, betas=(beta1, beta2), weight_decay=wd, compile=False)
    fp32_only = AdamATan2([reference_p32], lr=lr, betas=(beta1, beta2), weight_decay=wd, compile=False)
    want, m, v = start.clone(), torch.zeros_like(start), torch.zeros_like(start)
    for t in range(1, 31):
        grad = torch.randn(257, generator=g, dtype=torch.float64) * 10.0 ** (t % 5 - 3)
        p64.grad, p32.grad, reference_p32.grad = grad.clone(), grad.float(), grad.float()
        opt.step()
        fp32_only.step()
        want = want * (1 - lr * wd)
        m = m.lerp(grad, 1 - beta1)
        v = v.lerp(grad * grad, 1 - beta2)
        want = want - lr / (1 - beta1**t) * torch.atan2(m, v.sqrt() / math.sqrt(1 - beta2**t))
    assert p64.dtype == torch.float64 and opt.state[p64]["exp_avg"].dtype == torch.float64
    # torch's float64 pow in the bias corrections may differ from Python's in the last bit
    torch.testing.assert_close(p64.detach(), want, rtol=1e-14, atol=1e-15)
    torch.testing.assert_close(opt.state[p64]["exp_avg"], m, rtol=1e-14, atol=0)
    assert (p64.detach() - want).abs().max() < 1e-3 * (p64.detach().float().double() - want).abs().max()
    assert torch.equal(p32, reference_p32)  # the fp32 parameter's update is what it was
