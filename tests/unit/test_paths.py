"""arcpipe.paths is the one owner of the workflow's results paths: the rules and the plan name its patterns instead
of spelling them (the dry-run job lists of every target were the same before and after the move)."""

from __future__ import annotations

import re
from pathlib import Path

from arcpipe import paths, plan

ROOT = Path(__file__).resolve().parents[2]


def test_the_rules_spell_no_results_path() -> None:
    """No quoted results/ path in the Snakefile or rules/, but in a shell command's `--out` (left as the line that
    runs: a changed command text makes Snakemake re-run a finished job)."""
    spelled = []
    for path in [ROOT / "Snakefile", *sorted((ROOT / "rules").glob("*.smk"))]:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if re.search(r"""["'](results/|results["'])""", code) and "--out results/" not in code:
                spelled.append(f"{path.name}:{number}: {line.strip()}")
    assert not spelled, "results paths spelled out; name them in arcpipe.paths:\n" + "\n".join(spelled)


def test_the_plan_asks_the_same_patterns() -> None:
    for name in ("CKPT", "STATE", "FULL", "QUICK", "DECISION", "SCHEDULE", "GATE", "RUNG", "TTT", "TTT_JOB", "KAGGLE"):
        assert getattr(plan, name) is getattr(paths, name), name
    assert paths.eval_files(paths.FULL_DIR)["votes"] == paths.VOTES
    assert paths.eval_files(paths.FULL_DIR)["metrics"] == paths.FULL
    assert paths.eval_files(paths.QUICK_DIR)["metrics"] == paths.QUICK
    assert paths.ENSEMBLE_DIR.format(kind="pooled", run="r", k=2) == paths.POOLED_DIR.format(run="r", k=2)
    assert paths.CKPT.format(run="r", epoch=4) == "results/runs/r/ckpt/epoch_4.pt"


def test_a_path_is_read_back_into_its_wildcards() -> None:
    assert paths.parse(paths.FULL, "/w/results/eval/trm-a.1/epoch_40/metrics.json") == {"run": "trm-a.1", "epoch": "40"}
    assert paths.parse(paths.FULL, "results/eval/r/epoch_4/quick/metrics.json") is None  # a quick one is not a full one
    assert paths.parse(paths.RUNG, paths.RUNG.format(sweep="s", epoch=6)) == {"sweep": "s", "epoch": "6"}
    assert paths.under("/elsewhere/res", paths.GATE, run="g") == Path("/elsewhere/res/gates/g.json")


def test_a_workflow_file_names_its_run() -> None:
    """paths.run_of (the driver's end-of-run lines: which runs a workflow made files of)."""
    for pattern in (paths.CKPT, paths.STATE, paths.DECISION, paths.FULL, paths.TTT, paths.ENSEMBLE, paths.GATE):
        assert paths.run_of(pattern.format(run="trm-arc1-s0", epoch=8, kind="avg", k=2)) == "trm-arc1-s0", pattern
    for path in (
        paths.DATA_VERIFIED.format(dataset="d"),
        paths.REPORT + "/summary.csv",
        paths.RUNG.format(sweep="s", epoch=2),
        paths.GATE.format(run="r") + ".tmp",  # a gate record's run is its file's name, not a prefix
        "other/results/runs/r/config.yaml",
    ):
        assert paths.run_of(path) is None, path
