"""A test-time-training job with ttt.tasks_per_step > 1 (eval/ttt.run_job over eval/batched.py): its answers are
the one-task-a-step job's, a job killed after some tasks redoes only the others (with any K), and each task records
the K it was fitted with.

The tiny dataset (3 ARC-AGI-1 evaluation tasks x 4 views) and an untrained tiny VARC-ViT; the model is loaded in
float64 with dropout off (the test's own change to the loaded model), so that the jobs' answers can be compared
exactly: a batched fit equals the fit alone to rounding (test_ttt_batched.py), far below any answer's margin.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from arcpipe.config import EvaluationConfig
from arcpipe.config.runs import TTTConfig
from arcpipe.eval import batched, ttt

pytestmark = pytest.mark.numeric


def test_a_batched_job_answers_as_the_one_task_job_and_a_killed_one_redoes_only_unanswered_tasks(
    tiny_dataset: Path, tmp_path: Path, tiny_checkpoint: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch.set_num_threads(1)
    ckpt = tiny_checkpoint(tmp_path / "varc.pt", tiny_dataset, arch="varc")
    load = ttt.model_from_checkpoint

    def float64_without_dropout(*args: Any, **kwargs: Any) -> Any:
        head, rest = load(*args, **kwargs)
        for module in head.modules():
            if isinstance(module, torch.nn.Dropout):
                module.p = 0.0
            if isinstance(getattr(module, "dropout", None), float):
                module.dropout = 0.0  # the attention's SDPA dropout_p
        return head.double(), rest

    monkeypatch.setattr(ttt, "model_from_checkpoint", float64_without_dropout)
    cfg = TTTConfig(epochs=2, warmup_epochs=1, jobs=1)
    two_attempts = EvaluationConfig(canvas_attempts=2)
    one = ttt.run_job(ckpt, tiny_dataset, tmp_path / "one/job_0.npz", 0, cfg, two_attempts, device="cpu")
    assert len(one["tasks"]) == 3 and {s["views"] for s in one["stats"].values()} == {4}

    # killed while answering its second task: the first's answers are kept
    predict, answered = ttt.predict, []

    def killed_at_the_second(*args: Any, **kwargs: Any) -> Any:
        answered.append(1)
        if len(answered) == 2:
            raise KeyboardInterrupt
        return predict(*args, **kwargs)

    out = tmp_path / "two/job_0.npz"
    monkeypatch.setattr(ttt, "predict", killed_at_the_second)
    with pytest.raises(KeyboardInterrupt):
        ttt.run_job(
            ckpt, tiny_dataset, out, 0, cfg.model_copy(update={"tasks_per_step": 2}), two_attempts, device="cpu"
        )
    kept = [p.stem for p in out.with_name("job_0.npz.tasks").iterdir()]
    assert len(kept) == 1 and not out.exists()
    monkeypatch.setattr(ttt, "predict", predict)

    # retried with another K: only the two others are fitted (together), the kept one is not redone
    fit_tasks, fitted = batched.fit_tasks, []

    def recorded(head: Any, fits: Any, *args: Any, **kwargs: Any) -> int:
        fits = list(fits)
        fitted.extend(f.name for f in fits)
        return fit_tasks(head, fits, *args, **kwargs)

    monkeypatch.setattr(batched, "fit_tasks", recorded)
    two = ttt.run_job(
        ckpt, tiny_dataset, out, 0, cfg.model_copy(update={"tasks_per_step": 3}), two_attempts, device="cpu"
    )
    assert sorted(fitted) == sorted(set(one["tasks"]) - set(kept)) and two["tasks"] == one["tasks"]
    # the kept task was fitted 2 a step; the other two 3 a step, with 2 tasks left: 2 slots
    assert [s["tasks_per_step"] for s in two["stats"].values()] == [2, 2, 2]
    assert {t: s["steps"] for t, s in two["stats"].items()} == {t: s["steps"] for t, s in one["stats"].items()}
    assert two["ttt"]["tasks_per_step"] == 3

    with np.load(tmp_path / "one/job_0.npz") as a, np.load(out) as b:
        assert np.array_equal(a["rows"], b["rows"]) and np.array_equal(a["preds"], b["preds"])
