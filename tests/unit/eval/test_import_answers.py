"""Imported upstream checkpoints answer as upstream's code does, end to end: submission grid for grid, and pass@K.

tests/data/answers/<family>/ holds an upstream checkpoint (TRM and HRM: `step_0`; URM: `step_0.pt`), the
all_config.yaml upstream writes beside it, and `upstream.json`: the submission.json and pass@K of upstream's own
evaluation of that checkpoint on the tiny dataset's test split (tests/conftest.py's TINY_DATASET), recorded by
tests/tools/record_answer_goldens.py from the upstream repositories' code. Here the checkpoint goes through what a
user runs, `arcpipe model import --arch <family> CKPT --config all_config.yaml OUT --dataset DIR` and then
`arcpipe evaluate OUT DIR --device cpu`, and its submission must be upstream's.

The one documented difference of the submission (docs/evaluation.md): an empty-grid candidate, written `[]` by
upstream, is written `[[0]]` by arcpipe; the comparison maps it, and counts it. The recorder refused any golden
whose answers sit within rounding of a threshold (a cell's two best logits, two candidates' mean q), so rounding
differences between machines do not move these answers; what does is a different model, import or vote.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import answerkit
import pytest
import torch

from arcpipe.cli import main

ANSWERS = Path(__file__).parents[2] / "data" / "answers"
FAMILIES = ["hrm", "trm", "urm"]
EMPTY = [[0]]  # arcpipe's submission entry for an empty-grid candidate (upstream writes [])


@pytest.mark.numeric
@pytest.mark.parametrize("family", FAMILIES)
def test_imported_checkpoint_answers_as_upstream(family: str, tiny_dataset: Path, tmp_path: Path) -> None:
    golden = _golden(family)
    submission, metrics = _import_and_evaluate(family, tiny_dataset, tmp_path)
    compared, differ = _compare(submission, golden["submission"])
    assert compared == 2 * sum(len(v) for v in golden["submission"].values()) >= 6
    assert not differ, f"{family}: {len(differ)} of {compared} submission grids differ from upstream's: {differ}"
    assert {k: metrics[f"pass@{k}"] for k in golden["pass_at"]} == pytest.approx(golden["pass_at"], abs=1e-12)


@pytest.mark.numeric
def test_comparison_sees_a_changed_model(tiny_dataset: Path, tmp_path: Path) -> None:
    # the planted change: the imported TRM's puzzle embeddings set to zero (a wrong import of the table); its
    # answers move, and the comparison says so
    def zero_table(ckpt: dict[str, Any]) -> None:
        ckpt["model"]["puzzle_emb.weights"].zero_()

    submission, _ = _import_and_evaluate("trm", tiny_dataset, tmp_path, edit=zero_table)
    compared, differ = _compare(submission, _golden("trm")["submission"])
    assert differ, f"none of {compared} grids moved"


def _golden(family: str) -> dict[str, Any]:
    return json.loads((ANSWERS / family / "upstream.json").read_text())


def _import_and_evaluate(
    family: str, dataset: Path, tmp_path: Path, edit: Any = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """`arcpipe model import` then `arcpipe evaluate` on CPU: (submission.json, metrics.json)."""
    golden = _golden(family)
    _check_dataset(golden["dataset"], dataset)
    folder = ANSWERS / family
    imported = tmp_path / "imported.pt"
    args = ["model", "import", "--arch", family, str(folder / golden["checkpoint"])]
    assert main([*args, "--config", str(folder / "all_config.yaml"), str(imported), "--dataset", str(dataset)]) == 0
    if edit is not None:
        ckpt = torch.load(imported, weights_only=True)
        edit(ckpt)
        torch.save(ckpt, imported)
    out = tmp_path / "eval"
    assert main(["evaluate", str(imported), str(dataset), "--out", str(out), "--device", "cpu"]) == 0
    return json.loads((out / "submission.json").read_text()), json.loads((out / "metrics.json").read_text())


def _compare(got: dict[str, Any], upstream: dict[str, Any]) -> tuple[int, list[str]]:
    """(grids compared, `task[test]/attempt` of those that differ); upstream's `[]` is arcpipe's [[0]]."""
    assert set(got) == set(upstream)
    compared, differ = 0, []
    for task, entries in upstream.items():
        assert len(got[task]) == len(entries), task  # upstream wrote every test input: each had predictions
        for i, (mine, theirs) in enumerate(zip(got[task], entries, strict=True)):
            for attempt, grid in theirs.items():
                compared += 1
                if mine[attempt] != (grid if grid else EMPTY):
                    differ.append(f"{task}[{i}]/{attempt}")
    return compared, differ


def _check_dataset(recorded: dict[str, Any], dataset: Path) -> None:
    """The dataset the fixture built is the one upstream answered (same names, test puzzles, test split)."""
    got = answerkit.dataset_hashes(dataset)
    want = {k: recorded[k] for k in got}
    assert got == want, "the tiny dataset is not the one the goldens were recorded on: re-record them"
