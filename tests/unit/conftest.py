"""Unit tests run with one intra-op torch thread: tiny matmuls on a shared 2-core machine run 5x faster without
OpenMP threads spinning against other processes. Restored after each test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
