"""Unit tests run with one intra-op torch thread: tiny matmuls on a shared 2-core machine run 5x faster without
OpenMP threads spinning against other processes. Restored after each test.

`benchmark_script` imports a script of benchmarks/ for the tests of its pure parts (a script runs for minutes, or
only on a lent GPU, where a fault would show late)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def benchmark_script() -> Iterator[Callable[[str], ModuleType]]:
    """load("x.py"): benchmarks/x.py imported as `python benchmarks/x.py` imports it (its siblings on the path), its
    main() not run. The module stays in sys.modules until the test module ends (a dataclass looks its module up
    there); then the module and the path entry go."""
    loaded: list[str] = []
    sys.path.insert(0, str(BENCHMARKS))

    def load(script: str) -> ModuleType:
        name = f"benchmark_{script.removesuffix('.py')}"
        spec = importlib.util.spec_from_file_location(name, BENCHMARKS / script)
        assert spec is not None and spec.loader is not None, f"benchmarks/{script} is not a Python file"
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        loaded.append(name)
        spec.loader.exec_module(module)
        return module

    try:
        yield load
    finally:
        for name in loaded:
            sys.modules.pop(name, None)
        sys.path.remove(str(BENCHMARKS))
