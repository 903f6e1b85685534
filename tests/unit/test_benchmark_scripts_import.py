"""Every benchmark script imports: the names it takes from arcpipe still exist (a script is run by hand or on a lent
GPU, where a renamed constant would only show after minutes of set-up)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.mark.parametrize("script", sorted(p.name for p in BENCHMARKS.glob("*.py")))
def test_benchmark_script_imports(script: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # as `python benchmarks/X.py` runs: its siblings import
    name = f"benchmark_{script[:-3]}"
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)  # the script's imports and definitions; main() runs under __main__ only
    finally:
        del sys.modules[name]
    assert callable(getattr(module, "main", None)), f"benchmarks/{script} has no main()"
