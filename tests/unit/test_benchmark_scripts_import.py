"""Every benchmark script imports: the names it takes from arcpipe still exist (a script is run by hand or on a lent
GPU, where a renamed constant would only show after minutes of set-up)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.mark.parametrize("script", sorted(p.name for p in BENCHMARKS.glob("*.py")))
def test_benchmark_script_imports(script: str, benchmark_script: Callable[[str], ModuleType]) -> None:
    module = benchmark_script(script)
    if callable(getattr(module, "main", None)):
        return
    # a script's library (learning_parity_varc.py: learning_parity.py --varc's side) has no main of its own, and a
    # sibling that does imports it
    stem = script[:-3]
    users = [p.name for p in BENCHMARKS.glob("*.py") if re.search(rf"^\s*(import|from) {stem}\b", p.read_text(), re.M)]
    assert users, f"benchmarks/{script} has no main(), and no other benchmark script imports it"


def test_ttt_batched_mfu_is_a_share_of_the_peak(benchmark_script: Callable[[str], ModuleType]) -> None:
    # printed on CUDA only, so a type error there shows after minutes of a lent GPU (2026-11-28: Flops / float)
    module = benchmark_script("ttt_batched.py")
    one = module.mfu("arc", 1_000, 1.0, "NVIDIA H200")
    assert isinstance(one, float) and 0 < one < 1
    assert module.mfu("arc", 2_000, 1.0, "NVIDIA H200") == pytest.approx(2 * one)  # linear in the rows trained
