"""benchmarks/learning_parity.py's family table and seed loop: what a run of it (tens of minutes a seed on a CPU)
would otherwise find out late."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from arcpipe.config.arch import make_arch_config


@pytest.fixture(scope="module")
def lp(benchmark_script: Callable[[str], ModuleType]) -> ModuleType:
    return benchmark_script("learning_parity.py")


@pytest.mark.parametrize("family", ["trm", "hrm", "urm"])
def test_each_family_model_is_an_arcpipe_config_under_upstream_names(lp: Any, family: str) -> None:
    fam = lp.FAMILIES[family]
    cfg = make_arch_config(fam.arch, "tiny", fam.model)
    # every field the upstream side is given (`arch.<name>=`) is one arcpipe's config has and takes as given
    assert {k: getattr(cfg, k) for k in fam.model} == fam.model
    assert cfg.hidden_size == 64 and cfg.prefix_len == 1  # TRM's width and one puzzle-embedding position, all three
    assert cfg.halt_kwargs()["halt_max_steps"] == 4  # URM's `loops`: its ACT limit


def _fake_side(tmp: Path, marker: str) -> Any:
    """A `command(side, seed, dest)` for run_seeds: a process that writes a minimal result.json (and appends
    `marker` to a log of the runs it made)."""
    script = tmp / "side.py"
    script.write_text(
        "import json, sys\n"
        "from pathlib import Path\n"
        "dest, marker = Path(sys.argv[1]), sys.argv[2]\n"
        "with open(Path(sys.argv[3]), 'a') as f: f.write(marker + '\\n')\n"
        "ev = {'step': 2, 'test_accuracy': 0.5, 'test_exact_accuracy': 0.0, 'pass@1': 0.0, 'pass@2': 0.0}\n"
        "row = dict(step=1, lm_loss=1.0, accuracy=0.5, exact_accuracy=0.0, count=16.0, lr=1e-3)\n"
        "(dest / 'result.json').write_text(json.dumps(dict(steps=2, total_steps=2, train=[row], evals=[ev],"
        " steps_per_s=1.0, inner_wall_s=0.1)))\n"
    )
    return lambda side, seed, dest: [
        sys.executable,
        str(script),
        str(dest),
        f"{marker}-{side}-{seed}",
        str(tmp / "ran"),
    ]


def test_run_seeds_one_at_a_time_and_reuse(lp: Any, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    runs = lp.run_seeds([0, 1], work, _fake_side(tmp_path, "a"), {}, sequential=True)
    assert [r["seed"] for r in runs["upstream"]] == [0, 1] and [r["seed"] for r in runs["arcpipe"]] == [0, 1]
    ran = (tmp_path / "ran").read_text().split()
    # one process at a time, upstream's side first
    assert ran == ["a-upstream-0", "a-arcpipe-0", "a-upstream-1", "a-arcpipe-1"]
    kept = json.loads((work / "upstream-s1" / "final.json").read_text())
    assert kept["result"]["seed"] == 1 and "wall_s" in kept["result"]

    # the same commands with reuse: nothing runs again, a new seed does
    (tmp_path / "ran").unlink()
    again = lp.run_seeds([0, 1, 2], work, _fake_side(tmp_path, "a"), {}, sequential=True, reuse=True)
    assert (tmp_path / "ran").read_text().split() == ["a-upstream-2", "a-arcpipe-2"]
    assert again["upstream"][:2] == runs["upstream"]
    # another command (another length, another tree) is not reused
    (tmp_path / "ran").unlink()
    lp.run_seeds([0], work, _fake_side(tmp_path, "b"), {}, sequential=True, reuse=True)
    assert (tmp_path / "ran").read_text().split() == ["b-upstream-0", "b-arcpipe-0"]
