"""Evaluate a checkpoint: the stages of eval/ called in order, and the files they leave.

    arcpipe evaluate results/runs/trm-smoke/ckpt/epoch_2.pt results/data/smoke --out results/eval/trm-smoke/epoch_2
    torchrun --standalone --nproc-per-node 4 -m arcpipe evaluate CKPT DATASET --out DIR --config config.yaml
    arcpipe predict CHALLENGES.json CKPT --identifiers identifiers.json --out submission.json [--adapt MINUTES]

One checkpoint's evaluation is a line of stages, each a module that takes the previous one's output:

    infer.predict        model + the rows of a split -> infer.Predictions (answers per view; per-step keys)
    vote.vote            answers of every view -> vote.Votes (ranked candidates per test input)
    score.score          candidates -> score.Scores (pass@K, label ranks, task scores)
    write.write_results  -> metrics.json, submission.json, per_puzzle.csv, votes.npz

beside which pass@K against depth runs vote.vote_by_depth -> score.score_by_depth on the per-step keys. Below the
stages: puzzles.py (identifiers, ground truth) and grids.py (canvases and grids). `evaluate_predictions` is the
vote -> score -> submission part, for predictions made elsewhere (benchmarks, tests).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from arcpipe.config import ArcpipeError, EvaluationConfig
from arcpipe.config.arch import VARC_ARCHS
from arcpipe.data.arc import load_challenges
from arcpipe.data.augment import parse_identifier, to_canvas
from arcpipe.data.dataset import example_puzzle_ids, identifiers_sha256, load_split
from arcpipe.eval.adapt import (
    AdaptStats,
    Demonstrations,
    Hyperparameters,
    demonstrations,
    extend_checkpoint,
    fit,
    views_per_task,
)
from arcpipe.eval.infer import (
    METRIC_KEYS,
    CandidateKeys,
    example_views,
    predict,
    rows_of_tasks,
    step_is_compiled,
)
from arcpipe.eval.puzzles import (
    TestPuzzles,
    load_identifiers,
    load_tasks_from_json,
    load_test_puzzles,
    parse_identifiers,
)
from arcpipe.eval.score import DEFAULT_KS, score, score_by_depth
from arcpipe.eval.vote import assign_rows, vote, vote_by_depth
from arcpipe.eval.write import (
    EvalResult,
    build_submission,
    depth_metrics,
    validate_submission,
    write_results,
)
from arcpipe.files import atomic_write_many, file_sha256
from arcpipe.models.io import check_identifiers, model_from_checkpoint, read_weights
from arcpipe.models.varc_head import CANVAS_RULE
from arcpipe.train import distributed
from arcpipe.train.tracking import log_evaluation

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PredictSummary:
    """What `predict_challenges` found: pass@K when solutions were given, the adaptation's figures when it ran."""

    pass_at: dict[int, float] | None
    adaptation: AdaptStats | None = None


def evaluate_checkpoint(
    checkpoint: str | Path,
    dataset_dir: str | Path,
    out_dir: str | Path,
    config: EvaluationConfig | None = None,
    quick: int | None = None,
    device: str | None = None,
    quick_tasks: str | Path | None = None,
) -> dict[str, Any] | None:
    """Evaluate one checkpoint on its dataset's test split; rank 0 writes out_dir and returns the metrics.

    quick: score only the first `quick` tasks of test_puzzles.json (a fixed subset, for fast feedback).
    quick_tasks: score only the tasks of this record (`arcpipe.stopping.write_quick_tasks`, evaluation.quick); its
    task list, held-out tasks and hash go into metrics.json as info.quick, so the score carries its protocol.
    """
    start = time.perf_counter()
    config = config or EvaluationConfig()
    quick = quick or config.quick_puzzles
    subset = json.loads(Path(quick_tasks).read_text()) if quick_tasks else None
    checkpoint, dataset_dir = Path(checkpoint), Path(dataset_dir)
    want_gpu = (device or ("cuda" if torch.cuda.is_available() else "cpu")) != "cpu"
    env = distributed.setup(None, gpus=1 if want_gpu else 0)
    try:
        check_verified(dataset_dir)
        split = load_split(dataset_dir, "test")
        ckpt = read_weights(checkpoint)  # read once: metadata checks first, then the weights
        meta = {k: v for k, v in ckpt.items() if k != "model"}
        if (meta.get("run_config") or {}).get("simulate_gpus"):
            torch.set_num_threads(1)  # a rehearsal's checkpoint: one thread per process (distributed.setup)
        check_identifiers(meta, identifiers_sha256(dataset_dir), source=checkpoint, dataset=dataset_dir)
        check_sizes(meta, split.metadata, checkpoint, dataset_dir)
        test = load_test_puzzles(dataset_dir / "test_puzzles.json")
        identifiers = load_identifiers(dataset_dir / "identifiers.json")
        example_ids = example_puzzle_ids(split)
        rows = np.arange(len(example_ids), dtype=np.int64)
        if quick:
            test = test.subset(test.task_names[:quick])
            rows = rows_of_tasks(example_ids, identifiers, test.task_names)
        if subset:
            test = test.subset(subset["tasks"])
            rows = rows_of_tasks(example_ids, identifiers, test.task_names)
        # the global batch split over processes, but no larger than a process's share of the examples
        local_batch = max(min(config.batch_size // env.world_size, -(-len(rows) // env.world_size)), 1)
        head, _ = model_from_checkpoint(ckpt, env.device, source=checkpoint, batch_size=local_batch)
        del ckpt  # the weights live in the model now; a full ARC table is gigabytes
        # a canvas model (VARC) answers each view `canvas_attempts` times, each at its own scale and offset, and
        # every answer votes (upstream's --num-attempts): the rows repeat, in order
        attempts = config.canvas_attempts if getattr(head, "draws_per_row", 0) else 1
        rows = np.repeat(rows, attempts)
        log.info(
            "%s on %s: %d test examples (%d tasks), %d process(es), batch %d per process, device %s",
            checkpoint, dataset_dir, len(rows), test.num_tasks, env.world_size, local_batch, env.device,
        )  # fmt: skip
        keys = CandidateKeys(example_ids, identifiers, rows)
        compile = (meta.get("run_config") or {}).get("compile")  # a run that trains eagerly evaluates eagerly
        views = example_views(example_ids, identifiers)
        predictions = predict(
            head, split.inputs, split.labels, example_ids, rows, local_batch, env, keys, compile, views
        )
        inference_s = time.perf_counter() - start
        controls = {}
        if "blank_puzzle_id" in config.controls:  # every rank runs the second pass; rank 0 scores it
            controls["blank_puzzle_id"] = blank_id_control(
                head, split, example_ids, rows, local_batch, env, identifiers, test, config.pass_ks, compile, views
            )
        if env.rank != 0:
            return None
        assert predictions is not None
        result = evaluate_predictions(
            np.asarray(split.inputs[predictions.rows]),
            predictions.preds,
            example_ids[predictions.rows],
            predictions.q_halt_logits,
            identifiers,
            test,
            config.pass_ks,
        )
        assert predictions.step_keys is not None and predictions.step_q_halt is not None
        depth_votes = vote_by_depth(
            np.asarray(split.inputs[predictions.rows]),
            predictions.step_keys,
            predictions.step_q_halt,
            example_ids[predictions.rows],
            identifiers,
            test,
        )
        depth = score_by_depth(depth_votes, test, config.pass_ks)
        sums = predictions.metric_sums
        count = max(sums.get("count", 0.0), 1.0)
        extra = {f"eval/{k}": sums[k] / count for k in METRIC_KEYS if k in sums}
        extra["eval/examples_per_s"] = len(rows) / max(inference_s, 1e-9)
        info = {
            "checkpoint": str(checkpoint),
            "dataset": str(dataset_dir),
            "run": _run_name(checkpoint),
            "arch": meta.get("arch"),
            "quick_tasks": quick,
            "processes": env.world_size,
            "device": str(env.device),
            "model_step": "compiled" if step_is_compiled(env.device, compile) else "eager",
        }
        if getattr(head, "draws_per_row", 0):
            info["canvas"] = {"attempts_per_view": attempts, "placement": CANVAS_RULE}
        if subset:
            info["quick_tasks"] = len(subset["tasks"])
            info["quick"] = subset
        metrics = write_results(
            out_dir,
            result,
            step=meta.get("step"),
            epoch=meta.get("epoch"),
            wall_time_s=time.perf_counter() - start,
            extra_metrics=extra,
            depth=depth_metrics(depth),
            info=info,
            controls=controls,
            loop_steps=None
            if predictions.loop_steps is None
            else loop_steps_per_input(
                np.asarray(split.inputs[predictions.rows]),
                predictions.loop_steps,
                example_ids[predictions.rows],
                identifiers,
                test,
            ),
        )
        log.info("%s", ", ".join(f"pass@{k} {100 * result.scores.pass_at[k]:.2f}%" for k in result.scores.ks))
        if info["run"] is not None and checkpoint.stem.startswith("epoch_"):  # avg_last{k} is no point of the curve
            _mirror_to_wandb(meta.get("run_config") or {}, info["run"], metrics, Path(out_dir))
        return metrics
    finally:
        distributed.barrier(env)
        distributed.teardown(env)


def evaluate_predictions(
    inputs: np.ndarray,
    preds: np.ndarray,
    puzzle_identifiers: np.ndarray,
    q_halt_logits: np.ndarray,
    identifiers: Sequence[str] | str | Path,
    test: TestPuzzles | str | Path,
    ks: Sequence[int] = DEFAULT_KS,
) -> EvalResult:
    """Vote, score and build the submission for one set of predictions (fresh votes: one checkpoint): stages 2 and
    3 and the submission of stage 4, for `write_results`.

    identifiers: the dataset's identifiers.json (path or loaded list); test: its test_puzzles.json (path or loaded).
    """
    start = time.perf_counter()
    if not isinstance(identifiers, Sequence) or isinstance(identifiers, str):
        identifiers = load_identifiers(identifiers)
    if not isinstance(test, TestPuzzles):
        test = load_test_puzzles(test)
    votes = vote(inputs, preds, puzzle_identifiers, q_halt_logits, identifiers, test)
    scores = score(votes, test, ks)
    submission, stats = build_submission(votes, test)
    validate_submission(submission, test)
    seconds = time.perf_counter() - start
    log.info(
        "%d predictions (%d used, %d unmatched, %d other) -> %s in %.2f s",
        votes.num_used + votes.num_unmatched + votes.num_other,
        votes.num_used,
        votes.num_unmatched,
        votes.num_other,
        ", ".join(f"pass@{k} {v:.4f}" for k, v in scores.pass_at.items()),
        seconds,
    )
    return EvalResult(test, votes, scores, submission, stats, seconds)


def loop_steps_per_input(
    inputs: np.ndarray,
    loop_steps: np.ndarray,
    puzzle_identifiers: np.ndarray,
    identifiers: Sequence[str],
    test: TestPuzzles,
) -> np.ndarray:
    """(P,) float64 mean loop steps of the rows that answer each test input (per_puzzle.csv's `mean_loop_steps`).

    The rows are those the vote counts for the input (vote.assign_rows: every view and canvas attempt of it); NaN
    for an input no row answered. inputs: (N, 900) tokens; loop_steps: (N,) infer.Predictions.loop_steps;
    puzzle_identifiers: (N,) ids into `identifiers`.
    """
    rows = assign_rows(inputs, puzzle_identifiers, identifiers, test, what=f"loop_steps ({len(loop_steps)},)")
    steps = np.asarray(loop_steps, dtype=np.float64)[rows.used]
    total = np.bincount(rows.group, weights=steps, minlength=test.num_groups)
    count = np.bincount(rows.group, minlength=test.num_groups)
    mean = np.where(count > 0, total / np.maximum(count, 1), np.nan)
    return mean[test.pair_group]


def blank_id_control(
    head: torch.nn.Module,
    split: Any,
    example_ids: np.ndarray,
    rows: np.ndarray,
    batch_size: int,
    env: Any,
    identifiers: Sequence[str],
    test: TestPuzzles,
    ks: Sequence[int],
    compile: bool | None = None,
    views: np.ndarray | None = None,
) -> dict[str, float] | None:
    """pass@K of a second pass with every row's puzzle embedding replaced by the blank row; rank 0's, else None.

    The model sees the dataset's blank identifier instead of the row's own; the vote still reads each row's real
    identifier, which names the augmentation to undo. How far this falls below the normal pass@K is how much the
    answers depend on the memorised per-puzzle embedding. `views`: the rows' dihedral ids (`example_views`), when the
    caller has them.
    """
    blank = np.full_like(example_ids, split.metadata.blank_identifier_id)
    if views is None:
        views = example_views(example_ids, identifiers)  # the rows' real views, as the vote reads them
    control = predict(head, split.inputs, split.labels, blank, rows, batch_size, env, compile=compile, views=views)
    if control is None:
        return None
    result = evaluate_predictions(
        np.asarray(split.inputs[control.rows]),
        control.preds,
        example_ids[control.rows],
        control.q_halt_logits,
        identifiers,
        test,
        ks,
    )
    log.info(
        "blank puzzle id control: %s", ", ".join(f"pass@{k} {100 * v:.2f}%" for k, v in result.scores.pass_at.items())
    )
    return {f"pass@{k}": v for k, v in result.scores.pass_at.items()}


def predict_challenges(
    challenges: str | Path,
    checkpoint: str | Path,
    identifiers_path: str | Path,
    out: str | Path,
    solutions: str | Path | None = None,
    config: EvaluationConfig | None = None,
    device: str | None = None,
    adapt_minutes: float | None = None,
    adapt_steps: int | None = None,
    adapt_mode: str = "rows",
    seed: int = 0,
) -> PredictSummary | None:
    """submission.json for an ARC challenges file, straight from the checkpoint, without a built dataset.

    Every task's test inputs are shown under each view the checkpoint has a puzzle embedding for (the names in
    the identifiers.json it was trained with: the original and its augmentations), then voted on as in
    `arcpipe evaluate`. With `solutions`, the summary (rank 0's) has pass@K. A task without an embedding is
    refused, unless `adapt_minutes` is given: then its views get new embedding rows, fitted on its demonstrations
    for that time (or `adapt_steps` steps, whichever ends first) with what `adapt_mode` trains: the rows alone
    (`rows`), the rows then every weight (`rows+full`), everything (`full`) or low-rank adapters and the rows
    (`lora`) (eval/adapt.py). The checkpoint file is only read.
    """
    config = config or EvaluationConfig()
    challenges, identifiers_path, checkpoint = Path(challenges), Path(identifiers_path), Path(checkpoint)
    raw = _read_tasks(challenges)
    if solutions is not None:
        answers = _read_tasks(Path(solutions))
        for name, task in raw.items():
            for j, pair in enumerate(task.get("test", []) if isinstance(task, dict) else []):
                if isinstance(pair, dict) and name in answers and j < len(answers[name]):
                    pair["output"] = answers[name][j]
    test = load_tasks_from_json(raw, str(challenges))
    ckpt = read_weights(checkpoint)  # read once: metadata checks first, then the weights
    meta = {k: v for k, v in ckpt.items() if k != "model"}
    check_identifiers(meta, _sha256(identifiers_path), source=checkpoint, dataset=identifiers_path)
    identifiers = load_identifiers(identifiers_path)
    names, _, _ = parse_identifiers(identifiers)
    views: dict[str, list[int]] = {}
    for i, task in enumerate(names):
        if i:  # 0 is the blank identifier
            views.setdefault(task, []).append(i)
    unknown = [name for name in test.task_names if name not in views]
    if unknown and adapt_minutes is None:
        raise ArcpipeError(
            f"{challenges}: {len(unknown)} task(s) have no puzzle embedding in {checkpoint} (e.g. {unknown[0]}); "
            "the checkpoint can only answer tasks of the dataset it was trained with, or pass --adapt MINUTES to "
            "fit new embedding rows on their demonstrations first"
        )
    demos = None
    if unknown:
        tasks = load_challenges(challenges)
        num_aug = views_per_task(identifiers) - 1  # as many views as the checkpoint's own tasks have
        demos = demonstrations({name: tasks[name] for name in unknown}, len(identifiers), num_aug, seed)
        for offset, name in enumerate(demos.names):
            views.setdefault(parse_identifier(name)[0], []).append(len(identifiers) + offset)
        identifiers = [*identifiers, *demos.names]
    inputs, label_tokens, example_ids = _view_rows(test, identifiers, views)
    want_gpu = (device or ("cuda" if torch.cuda.is_available() else "cpu")) != "cpu"
    env = distributed.setup(None, gpus=1 if want_gpu else 0)
    try:
        local_batch = max(min(config.batch_size // env.world_size, -(-len(example_ids) // env.world_size)), 1)
        adaptation = None
        if demos is None:
            head, _ = model_from_checkpoint(ckpt, env.device, source=checkpoint, batch_size=local_batch)
        else:
            head, adaptation = _adapted_head(
                ckpt, checkpoint, demos, config, env, adapt_minutes or 0.0, adapt_steps, seed, adapt_mode
            )
        del ckpt  # the weights live in the model now
        attempts = config.canvas_attempts if getattr(head, "draws_per_row", 0) else 1  # as evaluate_checkpoint
        rows = np.repeat(np.arange(len(example_ids), dtype=np.int64), attempts)
        compile = (meta.get("run_config") or {}).get("compile")
        dihedral = example_views(example_ids, identifiers)
        predictions = predict(
            head, inputs, label_tokens, example_ids, rows, local_batch, env, compile=compile, views=dihedral
        )
        if env.rank != 0:
            return None
        assert predictions is not None
        result = evaluate_predictions(
            inputs[rows],
            predictions.preds,
            example_ids[rows],
            predictions.q_halt_logits,
            identifiers,
            test,
            config.pass_ks,
        )
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_many(out.parent, {out.name: json.dumps(result.submission, separators=(",", ":")).encode()})
        log.info("%s: %d tasks, %d views -> %s", challenges, test.num_tasks, len(example_ids), out)
        if solutions is None:
            return PredictSummary(None, adaptation)
        log.info("%s", ", ".join(f"pass@{k} {100 * v:.2f}%" for k, v in result.scores.pass_at.items()))
        return PredictSummary(dict(result.scores.pass_at), adaptation)
    finally:
        distributed.barrier(env)
        distributed.teardown(env)


def _adapted_head(
    ckpt: Mapping[str, Any],
    checkpoint: Path,
    demos: Demonstrations,
    config: EvaluationConfig,
    env: Any,
    minutes: float,
    max_steps: int | None,
    seed: int,
    mode: str = "rows",
) -> tuple[torch.nn.Module, AdaptStats]:
    """The checkpoint's model with its table extended by the rows of `demos`, adapted in `mode` (eval/adapt.py)."""
    if ckpt.get("arch") in VARC_ARCHS:
        raise ArcpipeError(
            f"{checkpoint}: --adapt fits a recursive model's puzzle-embedding rows; a {ckpt.get('arch')} checkpoint "
            "has no such rows to fit: predict without --adapt, on tasks whose views the checkpoint was trained with"
        )
    run = ckpt.get("run_config") or {}
    # the run's global batch when it is known (the batch its embeddings were trained with), within the evaluator's
    batch = min(int(run.get("global_batch_size", config.batch_size)), config.batch_size)
    batch = max(batch // env.world_size, 1) * env.world_size
    grown = extend_checkpoint(ckpt, len(demos.names), source=checkpoint)  # copies: `ckpt` is never changed
    head, _ = model_from_checkpoint(grown, env.device, source=checkpoint, batch_size=batch // env.world_size)
    stats = fit(
        head,
        demos,
        mode=mode,
        hyper=Hyperparameters.of_run(run),
        batch_size=batch,
        minutes=minutes,
        max_steps=max_steps,
        seed=seed,
        env=env,
    )
    log.info("%s", stats.describe())
    return head, stats  # in eval mode again (fit restores the mode)


def check_verified(dataset_dir: Path) -> None:
    """Refuse a dataset without a passing verify.json (written by `arcpipe data verify`)."""
    path = dataset_dir / "verify.json"
    try:
        report = json.loads(path.read_text())
    except FileNotFoundError:
        raise ArcpipeError(f"{path}: missing; run `arcpipe data verify {dataset_dir}` first") from None
    except json.JSONDecodeError as err:
        raise ArcpipeError(f"{path}: not valid JSON ({err.msg}); run `arcpipe data verify {dataset_dir}`") from None
    if not report.get("ok"):
        failures = report.get("failures") or []
        first = f" (first: {failures[0]})" if failures else ""
        raise ArcpipeError(f"{path}: the dataset failed verification{first}; rebuild it before evaluating")


def check_sizes(meta: Mapping[str, Any], metadata: Any, checkpoint: Path, dataset_dir: Path) -> None:
    """Refuse a checkpoint whose vocabulary, sequence length or puzzle-id count differs from the dataset's."""
    trained = meta.get("dataset") or {}
    problems = [
        f"{key} {trained[key]} (checkpoint) != {getattr(metadata, key)} (dataset)"
        for key in ("vocab_size", "seq_len", "num_puzzle_identifiers")
        if key in trained and trained[key] != getattr(metadata, key)
    ]
    if problems:
        raise ArcpipeError(
            f"{checkpoint}: does not match {dataset_dir}: {'; '.join(problems)}; evaluate on the dataset it was "
            "trained with"
        )


# --------------------------------------------------------------------------------------------------------------


def _view_rows(
    test: TestPuzzles, identifiers: Sequence[str], views: Mapping[str, list[int]]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(inputs, labels, example_ids) of every test input under every view of its task: (N, 900) uint8 tokens twice
    (labels all PAD where unknown), (N,) int64 puzzle ids."""
    # task by task, view by view (identifier order), test input by test input, like a built test split
    canvases, labels, ids = [], [], []
    for t, task in enumerate(test.task_names):
        pairs = range(test.task_pair_start[t], test.task_pair_start[t + 1])
        for pid in views[task]:
            augmentation = parse_identifier(identifiers[pid])[1]
            for p in pairs:
                x = augmentation.apply(test.group_inputs[test.pair_group[p]])
                y = augmentation.apply(test.labels[p]) if test.has_label[p] else None
                canvases.append(to_canvas(np.ascontiguousarray(x)))
                labels.append(to_canvas(np.ascontiguousarray(y)) if y is not None else np.zeros(900, np.uint8))
                ids.append(pid)
    return np.stack(canvases), np.stack(labels), np.array(ids, dtype=np.int64)


def _sha256(path: Path) -> str:
    try:
        return file_sha256(path)
    except OSError as err:
        raise ArcpipeError(f"{path}: cannot read identifiers ({err.strerror})") from None


def _read_tasks(path: Path) -> dict[str, Any]:
    try:
        raw = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ArcpipeError(f"{path}: cannot read ARC tasks ({err})") from None
    if not isinstance(raw, dict):
        raise ArcpipeError(f"{path}: expected a JSON object mapping task ids to tasks")
    return raw


def _mirror_to_wandb(run_config: Mapping[str, Any], run_name: str, metrics: Mapping[str, Any], out_dir: Path) -> None:
    try:
        log_evaluation(run_config, run_name, metrics, out_dir)
    except Exception as err:  # noqa: BLE001  (W&B is a mirror: metrics.json, written above, is the record)
        log.warning("W&B: could not mirror the evaluation of %s (%s); metrics.json has it", run_name, err)


def _run_name(checkpoint: Path) -> str | None:
    # results/runs/{run}/ckpt/epoch_{N}.pt
    return checkpoint.parent.parent.name if checkpoint.parent.name == "ckpt" else None
