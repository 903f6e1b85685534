"""A bad config stops `snakemake -n smoke` at parse time: one line per problem naming the field, no traceback.

Each case runs the real Snakefile in a scratch working directory holding a copy of config/config.yaml with one
mistake, as a new user would make it; the arch checks (presets, arch_overrides) need the model registry.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SHIPPED = yaml.safe_load((ROOT / "config/config.yaml").read_text())
# Snakemake's own lines before the Snakefile is parsed; everything else printed must be a problem line
SNAKEMAKE_INFO = ("Using workflow specific profile", "Config file config/config.yaml is extended")

MISTAKES = {
    "unknown preset": (
        {"preset": "tine"},
        "config/config.yaml: runs.trm-arc1.preset='tine': not a preset of trm (presets: arc, default, tiny)",
    ),
    "unknown arch field": (
        {"arch_overrides": {"H_cycle": 2}},
        "config/config.yaml: runs.trm-arc1.arch_overrides.H_cycle=2: not a field of trm; did you mean H_cycles?",
    ),
    "bad arch value": (
        {"arch_overrides": {"H_cycles": "two"}},
        "config/config.yaml: runs.trm-arc1.arch_overrides.H_cycles='two': Input should be a valid integer",
    ),
    "unknown run key": (
        {"eval_intervl": 5},
        "config/config.yaml: runs.trm-arc1.eval_intervl=5: unknown key; did you mean eval_interval?",
    ),
    "not divisible": (
        {"epochs": 100001},
        "config/config.yaml: runs.trm-arc1: epochs=100001 is not a multiple of eval_interval=10000",
    ),
}


def _dry_run(tmp: Path, raw: dict, *args: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    (tmp / "config").mkdir(parents=True, exist_ok=True)
    (tmp / "config/config.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    cmd = [str(BIN / "snakemake"), "-s", str(ROOT / "Snakefile"), "--directory", str(tmp), "-n", "smoke", *args]
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=tmp)
    lines = (proc.stdout + proc.stderr).splitlines()
    return proc, [line for line in lines if not line.startswith(SNAKEMAKE_INFO)]


@pytest.mark.parametrize("mistake", MISTAKES)
def test_a_mistake_stops_the_dry_run_with_one_line_naming_the_field(mistake, tmp_path):
    changes, expected = MISTAKES[mistake]
    raw = copy.deepcopy(SHIPPED)
    raw["runs"]["trm-arc1"].update(changes)
    proc, problems = _dry_run(tmp_path, raw)
    assert proc.returncode != 0
    assert len(problems) == 1, problems
    assert problems[0].startswith(expected)
    assert "Traceback" not in proc.stderr and len((proc.stdout + proc.stderr).splitlines()) < 10
    assert not (tmp_path / "results").exists()


def test_config_overrides_on_the_command_line_are_checked_the_same_way(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("runs:\n  smoke-trm:\n    arch_overrides: {H_cycle: 2}\n")
    proc, problems = _dry_run(tmp_path, SHIPPED, "--configfile", str(bad), "--config", "evaluation={quick_puzzles: 0}")
    assert proc.returncode != 0
    source = "config/config.yaml + bad.yaml + --config"
    assert problems == [
        f"{source}: runs.smoke-trm.arch_overrides.H_cycle=2: not a field of trm; did you mean H_cycles?",
        f"{source}: evaluation.quick_puzzles='0': Input should be greater than 0",
    ]


HOSTILE_NAMES = {
    "parent folder": ("../x", "is not a safe name"),
    "leading dash": ("-x", "is not a safe name"),
    "space": ("a b", "is not a safe name"),
    "shell": ("a;rm", "is not a safe name"),
    "over-long": ("r" * 101, "characters long"),
    "case twin": ("Smoke-trm", "differ only by case"),
}


@pytest.mark.parametrize("case", HOSTILE_NAMES)
def test_a_run_name_that_would_leave_its_folder_or_a_command_line_is_refused_in_one_line(case, tmp_path):
    """A run's name becomes folders under results/, log files and job names: checked where it enters
    (arcpipe.names.check_name), before anything is written."""
    name, expected = HOSTILE_NAMES[case]
    raw = copy.deepcopy(SHIPPED)
    raw["runs"][name] = copy.deepcopy(raw["runs"]["smoke-trm"])
    proc, problems = _dry_run(tmp_path, raw)
    assert proc.returncode != 0
    assert len(problems) == 1 and expected in problems[0], problems
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "results").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["config"]
