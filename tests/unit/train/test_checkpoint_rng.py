"""The generators a training state carries: the CPU's always, the GPU's when training on one."""

from __future__ import annotations

import io

import pytest
import torch

from arcpipe.train.checkpoint import restore_rng, rng_state


def _through_a_file(state: dict) -> dict:
    buf = io.BytesIO()
    torch.save(state, buf)
    return torch.load(io.BytesIO(buf.getvalue()), map_location="cpu", weights_only=True)  # as load_state reads it


def test_cpu_state_restores_the_cpu_generator_and_carries_no_cuda_state() -> None:
    cpu = torch.device("cpu")
    state = _through_a_file(rng_state(cpu))
    assert state["cuda_rng"] is None
    drawn = torch.rand(5)
    torch.rand(100)
    restore_rng(state, cpu)
    assert torch.equal(torch.rand(5), drawn)


@pytest.mark.gpu
def test_cuda_state_carries_and_restores_the_gpus_generator() -> None:
    cuda = torch.device("cuda", torch.cuda.current_device())
    state = _through_a_file(rng_state(cuda))
    assert isinstance(state["cuda_rng"], torch.Tensor) and state["cuda_rng"].device.type == "cpu"
    drawn = torch.rand(5, device=cuda)
    torch.rand(100, device=cuda)
    restore_rng(state, cuda)
    assert torch.equal(torch.rand(5, device=cuda), drawn)
    # a state written before cuda_rng was saved (or on a CPU) resumes on a GPU, leaving its generator alone
    before = torch.cuda.get_rng_state(cuda)
    restore_rng({"torch_rng": state["torch_rng"]}, cuda)
    assert torch.equal(torch.cuda.get_rng_state(cuda), before)
