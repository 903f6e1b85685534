"""`arcpipe predict` under a real 2-process gloo torchrun writes what one process writes, from rank 0 only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from arcpipe.config import EvaluationConfig
from arcpipe.eval.evaluate import predict_challenges

CONFIG = "evaluation:\n  batch_size: 8\n  pass_ks: [1, 2]\n"  # 1 process: batches of 8; 2: 4 rows per rank


@pytest.fixture(scope="module")
def checkpoints(tiny_dataset, tiny_checkpoint, tmp_path_factory) -> dict[str, Path]:
    """Untrained tiny TRMs with random table rows (a trained table is not all zeros), by q_head (tests/conftest.py):

    random: candidates get different q_halt (ties are not what ranks them);
    untrained: q_halt < 0, so in training mode no row halts before halt_max_steps, whatever the exploration draws;
    always: every row halts after one ACT step, unless exploration holds it for two.
    """
    folder = tmp_path_factory.mktemp("ckpt")
    run_config = {"global_batch_size": 8, "puzzle_emb_lr": 0.01, "puzzle_emb_weight_decay": 0.1}
    meta = {"table": 0.1, "run_config": run_config, "step": 7, "epoch": 2}
    q_heads = ("random", "untrained", "always")
    return {q: tiny_checkpoint(folder / f"{q}.pt", tiny_dataset, q_head=q, **meta) for q in q_heads}


def _predict(processes: int, args: list[str], out_dir: Path) -> str:
    """`arcpipe predict ARGS --out OUT_DIR/submission.json` in 1 plain or 2 torchrun processes; its stdout."""
    out_dir.mkdir(parents=True)
    if processes == 1:
        prefix = [sys.executable]
    else:
        torchrun = Path(sys.executable).with_name("torchrun")
        prefix = [str(torchrun), "--standalone", f"--nproc-per-node={processes}"]
    cmd = [*prefix, "-m", "arcpipe", "predict", *args, "--device", "cpu", "--out", str(out_dir / "submission.json")]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # rank 0 writes the submission and nothing else; rank 1 writes nothing (no partial or temporary file left)
    assert [p.name for p in out_dir.iterdir()] == ["submission.json"]
    return proc.stdout


@pytest.mark.slow  # 3 torch imports on 2 busy cores
def test_two_gloo_processes_predict_the_same_submission_and_pass_at_k_as_one(checkpoints, tiny_dataset, tmp_path):
    # the untrained model solves nothing, so its own answers become the truth (as in tests/unit/eval/test_evaluate.py):
    # the first task's first attempt and the second task's second attempt, so that 0 < pass@1 < pass@2
    checkpoint = checkpoints["random"]
    challenges, identifiers = tiny_dataset / "test_puzzles.json", tiny_dataset / "identifiers.json"
    config = EvaluationConfig(batch_size=8, pass_ks=[1, 2])
    predict_challenges(challenges, checkpoint, identifiers, tmp_path / "truth.json", config=config, device="cpu")
    answers = json.loads((tmp_path / "truth.json").read_text())
    puzzles = json.loads(challenges.read_text())
    solutions = {name: [pair["output"] for pair in task["test"]] for name, task in puzzles.items()}
    first, second = list(puzzles)[:2]
    solutions[first][0] = answers[first][0]["attempt_1"]
    solutions[second][0] = answers[second][0]["attempt_2"]
    (tmp_path / "solutions.json").write_text(json.dumps(solutions))
    (tmp_path / "config.yaml").write_text(CONFIG)
    args = [str(challenges), str(checkpoint), "--identifiers", str(identifiers)]
    args += ["--solutions", str(tmp_path / "solutions.json"), "--config", str(tmp_path / "config.yaml")]
    one, two = (_predict(n, args, tmp_path / f"p{n}") for n in (1, 2))
    assert one == two and one.startswith("pass@1 ") and one.count("pass@") == 2, (one, two)
    pass_at = dict(part.split(" ") for part in one.strip().split(", "))
    assert 0 < float(pass_at["pass@1"].rstrip("%")) < float(pass_at["pass@2"].rstrip("%"))
    assert (tmp_path / "p1" / "submission.json").read_bytes() == (tmp_path / "p2" / "submission.json").read_bytes()
    assert (tmp_path / "p1" / "submission.json").read_bytes() == (tmp_path / "truth.json").read_bytes()


@pytest.mark.slow
def test_two_gloo_processes_adapt_and_predict_unseen_tasks_as_one(checkpoints, unseen, tiny_dataset, tmp_path):
    # With the untrained q_head no row halts early while adapting, so both launches train on the same rows in the
    # same ACT steps: each rank draws the same global batch (seeded numpy generator) and takes its slice, its carry
    # is the slice of the one process's carry, and SparseSignSGD gathers the rows in rank order (= the one
    # process's row order) before summing per id and taking the sign. Per-row gradients come from batches of 4
    # instead of 8, which could change the last bits of a sum, but only its sign counts: the tables, and so the
    # submissions, are equal. (With early halting they are not: see test_adapted_rows_... below.)
    challenges, solutions = unseen
    (tmp_path / "config.yaml").write_text(CONFIG)
    args = [str(challenges), str(checkpoints["untrained"]), "--identifiers", str(tiny_dataset / "identifiers.json")]
    args += ["--solutions", str(solutions), "--config", str(tmp_path / "config.yaml")]
    args += ["--adapt", "5", "--adapt-steps", "3", "--seed", "0"]
    one, two = (_predict(n, args, tmp_path / f"p{n}") for n in (1, 2))
    assert one == two and one.startswith("pass@1 "), (one, two)
    assert (tmp_path / "p1" / "submission.json").read_bytes() == (tmp_path / "p2" / "submission.json").read_bytes()
    assert set(json.loads((tmp_path / "p1" / "submission.json").read_text())) == set(json.loads(challenges.read_text()))


# what `arcpipe predict --adapt 5 --adapt-steps 3 --seed 0` fits (eval/evaluate.py _adapted_head, through the public
# eval/adapt.py functions), saved by rank 0: the submission of a tiny untrained model hardly depends on the puzzle
# embedding, so the table itself is compared
WORKER = textwrap.dedent(
    """
    import sys
    from pathlib import Path

    import torch

    from arcpipe.data.arc import load_challenges
    from arcpipe.eval.adapt import demonstrations, extend_checkpoint, fit_rows, views_per_task
    from arcpipe.eval.puzzles import load_identifiers
    from arcpipe.models.io import core_of, model_from_checkpoint, read_weights
    from arcpipe.train import distributed

    checkpoint, challenges, identifiers_path, out = (Path(a) for a in sys.argv[1:5])
    identifiers = load_identifiers(identifiers_path)
    demos = demonstrations(load_challenges(challenges), len(identifiers), views_per_task(identifiers) - 1, 0)
    env = distributed.setup(None, gpus=0)
    grown = extend_checkpoint(read_weights(checkpoint), len(demos.names), source=checkpoint)
    head, _ = model_from_checkpoint(grown, env.device, source=checkpoint, batch_size=8 // env.world_size)
    fit_rows(head, demos, batch_size=8, lr=0.01, weight_decay=0.1, minutes=5, max_steps=3, seed=0, env=env)
    if env.rank == 0:
        torch.save(core_of(head).puzzle_emb.weights.detach().clone(), out)
    distributed.teardown(env)
    """
)


@pytest.mark.slow
# "always": rows may halt early, so the halting exploration decides which rows load new data: it is drawn from the
# step and each row's place in the global batch (train.sampler.halt_min_steps), not from each rank's torch generator
@pytest.mark.parametrize("q_head", ["always"])  # rows halt early; without early halts the tables match trivially
def test_adapted_rows_are_the_same_in_two_processes_as_in_one(checkpoints, unseen, tiny_dataset, tmp_path, q_head):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    challenges, _ = unseen
    args = [str(checkpoints[q_head]), str(challenges), str(tiny_dataset / "identifiers.json")]
    torchrun = Path(sys.executable).with_name("torchrun")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for name, prefix in (("one", [sys.executable]), ("two", [str(torchrun), "--standalone", "--nproc-per-node=2"])):
        proc = subprocess.run(
            [*prefix, str(script), *args, str(tmp_path / f"{name}.pt")],
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
    one, two = (torch.load(tmp_path / f"{name}.pt") for name in ("one", "two"))
    new = slice(len(json.loads((tiny_dataset / "identifiers.json").read_text())), None)
    assert not torch.equal(one[new], one[new].mean(0).expand_as(one[new]))  # the new rows moved apart from their start
    changed = (one != two).any(1).nonzero().flatten().tolist()
    assert changed == [], f"rows {changed} differ by up to {(one - two).abs().max().item():g}"
