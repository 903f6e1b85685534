"""Test-time training of a canvas model (VARC), fanned out as jobs: upstream's per-task recipe, collected as one
evaluation.

    arcpipe ttt job --checkpoint CKPT --dataset DIR --config RUN_CONFIG --job J --out results/ttt/RUN/epoch_E/job_J.npz
    arcpipe ttt collect --dataset DIR --out results/eval/RUN/ttt_epoch_E results/ttt/RUN/epoch_E/job_*.npz

Upstream (upstream-varc.md 6) fine-tunes a copy of the offline model on each evaluation task separately, one
process per task, looping over the tasks in a shell script per GPU with no record of which finished. Here each
Snakemake job takes the test tasks j, j + jobs, j + 2 jobs, ... of the dataset's test split (`job_tasks`: known
before the data exist, so `snakemake -n` plans every job at once), and for each task, from the checkpoint's
weights:

1. the task's views (its dihedral x colour-permutation identifiers in the dataset) get a fresh task-token table of
   their own, one row per view, drawn as upstream draws its new table (trunc-normal, std 0.02), in place of the
   checkpoint's (whose rows are the offline dataset's tasks: the dataset answered may be another, `ttt.dataset`);
2. the whole model trains on the views' demonstrations (the train split's rows of the task) with upstream's recipe:
   AdamW (lr 3e-4, betas 0.9/0.999, no weight decay), batch 8, gradients clipped at 1 before each step, dropout on,
   epochs 0..E with the rate set per epoch (linear warm-up over `warmup_epochs` from 0, upstream's min(E // 5, 10)
   unless set, then half a cosine to 0 at epoch E), every row at a fresh scale and offset (`canvas_draws`, from the
   seed, the task and the step). `fit` is that loop alone, on any batches: tests/unit/train/test_varc_trainer_parity.py
   gives it upstream's and checks 122 steps against upstream's test_time_train_ARC.py;
3. the task's test views are answered `canvas_attempts` times each (eval/infer.predict), as any evaluation.

A task's answers are written to `<out>.tasks/<task>.npz` as soon as it is done, with the key of what they depend on
(the checkpoint's and the dataset's hashes, the recipe, the attempts), so a job killed after some of its tasks redoes
only the others, and never reuses answers of other weights or settings; the job's file (`job_J.npz`: rows, answers,
per-task statistics; a LoopViT's also each answer's loop steps) comes last, and the task files go.
`collect` votes over every job's answers and writes the evaluation files (metrics.json, submission.json,
per_puzzle.csv, votes.npz) as an evaluation of the checkpoint does, with the protocol in `info.ttt` (and, for LoopViT,
per_puzzle.csv's mean_loop_steps).

The training step is compiled as the run's other steps are (`compile` of the run; unset: on CUDA, not on CPU), once
per job: every task of a job reuses the compiled step (the model and its fresh table are the step's inputs, not
baked into it), and the path taken is recorded (`model_step` in each task's statistics and the job's summary, part
of the key of a kept task). On an H200 the published VARC-ViT's eager step took 53 ms in a job, the compiled one
19.8 ms (benchmarks/RESULTS.md, fourth GPU session).

`ttt.tasks_per_step: K` > 1 fits K of the job's tasks at once (eval/batched.py): the K fits stacked in one step,
each with its own weights, AdamW state, task tokens, rate and clipping, each task's batches the ones `fit_task`
draws for it (`task_batches`), so that with dropout off a task's weights equal its fit alone to rounding; a task
that finishes is answered and written at once, and the next one takes its slot. K is not part of a kept task's key
(a job retried with another K keeps its answered tasks); each task's statistics record it.

What differs from upstream, each deliberate: bf16 autocast on GPUs (upstream: fp16 with a GradScaler); compiled
steps without CUDA graphs (upstream compiles each task's model with them, so it compiles once per task); and the
views are those of the dataset answered: upstream's 51 with `views: varc` (data/augment.py; its colour permutations
drawn uniformly), else `num_aug` drawn ones.
"""

from __future__ import annotations

import io
import json
import logging
import math
import shutil
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from arcpipe.config import ArcpipeError, EvaluationConfig
from arcpipe.config.arch import VARC_ARCHS
from arcpipe.config.runs import TTTConfig, compiles
from arcpipe.data.dataset import example_puzzle_ids, identifiers_sha256, load_split
from arcpipe.eval import batched
from arcpipe.eval.evaluate import check_verified, evaluate_predictions, loop_steps_per_input
from arcpipe.eval.infer import example_views, make_batch, predict, rows_of_tasks
from arcpipe.eval.puzzles import load_identifiers, load_test_puzzles
from arcpipe.eval.write import write_results
from arcpipe.files import atomic_write_many, file_sha256
from arcpipe.models.io import model_from_checkpoint, read_weights
from arcpipe.optim.update import apply_update
from arcpipe.train import distributed
from arcpipe.train.sampler import canvas_draws
from arcpipe.train.schedule import lr_at

log = logging.getLogger(__name__)

TOKEN_STD = 0.02  # upstream's trunc-normal std of a new task-token table


def job_tasks(tasks: Sequence[str], job: int, jobs: int) -> list[str]:
    """The test tasks job `job` of `jobs` takes: every jobs-th of the sorted task names, from the job-th."""
    return [task for i, task in enumerate(sorted(tasks)) if i % jobs == job]


def lr_factor(epoch: int, cfg: TTTConfig) -> float:
    """The rate of epoch 0..cfg.epochs as a fraction of cfg.lr: linear warm-up from 0, then cosine to 0."""
    return lr_at(epoch, 1.0, warmup_epochs(cfg), cfg.epochs, 0.0)  # the trainer's schedule, counted in epochs


def warmup_epochs(cfg: TTTConfig) -> int:
    """cfg.warmup_epochs, or upstream's min(epochs // 5, 10) where it is not set (utils/load_model.py)."""
    return cfg.warmup_epochs if cfg.warmup_epochs is not None else min(cfg.epochs // 5, 10)


def task_views(example_ids: np.ndarray, identifiers: Sequence[str], task: str) -> tuple[np.ndarray, np.ndarray]:
    """The train-split rows of `task`'s demonstrations (every view) and its views' identifiers, sorted."""
    rows = rows_of_tasks(example_ids, identifiers, [task])
    if len(rows) == 0:
        raise ArcpipeError(f"test task {task} has no demonstrations in the dataset's train split; rebuild the dataset")
    return rows, np.unique(example_ids[rows])


def local_ids(example_ids: np.ndarray, rows: np.ndarray, views: np.ndarray, task: str) -> np.ndarray:
    """`example_ids` with `rows`' identifiers renumbered 0..len(views) - 1 (their rows of the task's own table)."""
    slots = np.searchsorted(views, example_ids[rows])
    if (slots >= len(views)).any() or (views[np.minimum(slots, len(views) - 1)] != example_ids[rows]).any():
        raise ArcpipeError(
            f"test task {task}: a test view has no demonstrations in the train split; rebuild the dataset"
        )
    local = example_ids.copy()
    local[rows] = slots
    return local


def fit_task(
    head: torch.nn.Module,
    split: Any,
    example_ids: np.ndarray,
    demonstrations: tuple[np.ndarray, np.ndarray],
    task: str,
    cfg: TTTConfig,
    seed: int,
    device: torch.device,
    loss_fn: Callable[[torch.nn.Module, dict[str, torch.Tensor]], torch.Tensor] | None = None,
) -> dict[str, Any]:
    """Train `head` in place on the demonstrations of `task`'s views (module doc, steps 1 and 2); its statistics.
    demonstrations: `task_views`' rows and views. The head's task-token table becomes the task's own, one fresh row
    per view (as upstream's new table): rows 0..V-1 in the order of the views' identifiers (`local_ids` renumbers
    the task's rows to match). loss_fn: `step_loss` (default) or its compiled twin, shared by a job's tasks."""
    inner = head.model.inner
    old = inner.task_token_embed.weight
    fresh, epoch_batches = task_batches(old.shape[1], split, example_ids, demonstrations, task, cfg, seed, device)
    with torch.no_grad():
        inner.task_token_embed = torch.nn.Embedding(len(fresh), old.shape[1], device=old.device, dtype=old.dtype)
        inner.task_token_embed.weight.copy_(fresh)
    torch.manual_seed(seed * 1_000_003 + zlib.crc32(task.encode()))  # dropout
    stats = fit(head, epoch_batches, cfg, loss_fn)
    return {"views": len(fresh), "demonstrations": len(demonstrations[0]), **stats}


def task_batches(
    width: int,
    split: Any,
    example_ids: np.ndarray,
    demonstrations: tuple[np.ndarray, np.ndarray],
    task: str,
    cfg: TTTConfig,
    seed: int,
    device: torch.device,
) -> tuple[torch.Tensor, Callable[[int], Iterator[dict[str, torch.Tensor]]]]:
    """`task`'s fresh task-token table (views x width, float32, drawn from the seed and the task) and its batches
    of each epoch (the rows in an order of their own per epoch, each row's canvas placement from the seed, the task
    and the step): what `fit_task` fits alone and a batched job (`tasks_per_step` > 1) fits beside other tasks."""
    rows, views = demonstrations
    stream = zlib.crc32(task.encode())
    generator = torch.Generator().manual_seed(seed * 1_000_003 + stream)
    fresh = torch.empty((len(views), width), dtype=torch.float32)
    torch.nn.init.trunc_normal_(fresh, std=TOKEN_STD, generator=generator)
    example_ids = local_ids(example_ids, rows, views, task)
    order_rng = np.random.default_rng([seed, stream])
    B = cfg.batch_size
    steps_per_epoch = -(-len(rows) // B)
    drawn = 0  # batches drawn so far: each row's canvas placement comes from (seed, task, step)

    def epoch_batches(epoch: int) -> Iterator[dict[str, torch.Tensor]]:
        nonlocal drawn
        order = order_rng.permutation(rows)
        for b in range(steps_per_epoch):
            chunk = order[b * B : (b + 1) * B]
            batch = make_batch(split.inputs, split.labels, example_ids, chunk, B, device)
            drawn += 1
            batch["canvas_draws"] = torch.from_numpy(canvas_draws(seed, (stream << 20) + drawn, np.arange(B))).to(
                device
            )
            yield batch

    return fresh, epoch_batches


def task_steps(
    batches: Callable[[int], Iterable[dict[str, torch.Tensor]]], cfg: TTTConfig
) -> Iterator[tuple[float, dict[str, torch.Tensor]]]:
    """`fit`'s steps as a list: (rate, batch) for each batch of epochs 0..cfg.epochs, in `fit`'s order (a batched
    job's `TaskFit.steps`)."""
    for epoch in range(cfg.epochs + 1):
        rate = cfg.lr * lr_factor(epoch, cfg)
        for batch in batches(epoch):
            yield rate, batch


def fit(
    head: torch.nn.Module,
    batches: Callable[[int], Iterable[dict[str, torch.Tensor]]],
    cfg: TTTConfig,
    loss_fn: Callable[[torch.nn.Module, dict[str, torch.Tensor]], torch.Tensor] | None = None,
    on_step: Callable[[int, torch.optim.Optimizer, torch.Tensor], None] | None = None,
) -> dict[str, Any]:
    """Upstream's test-time-training loop on `head` as it is (its task tokens already the task's): a fresh AdamW
    over every parameter, epochs 0..cfg.epochs at the epoch's rate (`lr_factor`), and on each of `batches(epoch)`
    (cfg.batch_size rows each, blank rows padding a short one) one step: the loss's gradient, clipped to
    cfg.grad_clip, then the optimizer. fit_task gives it arcpipe's batches; a replay gives it another trainer's
    (tests/unit/train/test_varc_trainer_parity.py). on_step(step, optimizer, loss per row): an observer, after each
    step, for the replay.
    {steps, seconds, last_loss}."""
    loss_fn = loss_fn or step_loss
    params = [p for p in head.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.lr, betas=(0.9, 0.999), weight_decay=0.0)
    B = cfg.batch_size
    step, started, last_loss = 0, time.monotonic(), math.nan
    head.train()
    for epoch in range(cfg.epochs + 1):
        rate = cfg.lr * lr_factor(epoch, cfg)
        for batch in batches(epoch):
            step += 1
            loss = loss_fn(head, batch)
            (loss / B).backward()  # the head's loss is the pixel mean times the rows (models/varc_head.py)
            apply_update([(optimizer, rate)], params, cfg.grad_clip)
            if on_step is not None:
                on_step(step, optimizer, loss.detach() / B)
        last_loss = float(loss.detach()) / B
    return {"steps": step, "seconds": round(time.monotonic() - started, 3), "last_loss": last_loss}


def step_loss(head: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """One test-time-training forward: the head's summed loss over the batch's rows (what `fit_task` steps on)."""
    _, loss, _, _ = head.step(head.initial_carry(batch), batch)
    return loss


def run_job(
    checkpoint: str | Path,
    dataset_dir: str | Path,
    out: str | Path,
    job: int,
    cfg: TTTConfig,
    evaluation: EvaluationConfig | None = None,
    device: str | None = None,
    compile: bool | None = None,
) -> dict[str, Any]:
    """Test-time train and answer the test tasks of `job` (module doc); writes `out` (npz) last; its summary.
    compile: the run's `compile` (None: compiled on CUDA only, as its training and evaluation)."""
    started = time.monotonic()
    evaluation = evaluation or EvaluationConfig()
    checkpoint, dataset_dir, out = Path(checkpoint), Path(dataset_dir), Path(out)
    check_verified(dataset_dir)
    want_gpu = (device or ("cuda" if torch.cuda.is_available() else "cpu")) != "cpu"
    env = distributed.setup(None, gpus=1 if want_gpu else 0)
    try:
        ckpt = read_weights(checkpoint)
        if ckpt.get("arch") not in VARC_ARCHS:
            raise ArcpipeError(
                f"{checkpoint}: ttt fits a canvas model (arch varc, varc-unet or loopvit); this checkpoint is "
                f"{ckpt.get('arch')}"
            )
        run_config = ckpt.get("run_config") or {}
        seed = int(run_config.get("seed", 0))
        train, test = load_split(dataset_dir, "train"), load_split(dataset_dir, "test")
        identifiers = load_identifiers(dataset_dir / "identifiers.json")
        puzzles = load_test_puzzles(dataset_dir / "test_puzzles.json")
        train_ids = example_puzzle_ids(train)
        test_ids = example_puzzle_ids(test)
        views = example_views(test_ids, identifiers)  # each test row's dihedral id, from its dataset identifier
        tasks = job_tasks(puzzles.task_names, job, cfg.jobs)
        model_step = "compiled" if compiles(compile, env.device.type) else "eager"
        loss_fn = torch.compile(step_loss) if model_step == "compiled" else step_loss
        log.info("job %d: %d task(s), %s training steps on %s", job, len(tasks), model_step, env.device)
        done_dir = out.with_name(out.name + ".tasks")
        # what a task's answers depend on: a file of an attempt with other weights or settings is not reused
        key = json.dumps(
            {
                "checkpoint": file_sha256(checkpoint),
                "dataset": identifiers_sha256(dataset_dir),
                # not ttt.tasks_per_step: a task's fit is its own whatever K (eval/batched.py), so a job retried
                # with another K (after running out of memory) keeps the answered tasks; each says its K
                "ttt": cfg.model_dump(mode="json", exclude={"tasks_per_step"}),
                "attempts": evaluation.canvas_attempts,
                "model_step": model_step,
            },
            sort_keys=True,
        )
        parts: dict[str, dict[str, np.ndarray]] = {}
        stats: dict[str, dict[str, Any]] = {}
        todo = []
        for task in tasks:
            kept = _read_task(done_dir / f"{task}.npz", key)
            if kept is not None:  # answered before this job was killed
                parts[task], stats[task] = kept
                log.info("%s: answered by an earlier attempt of this job (%s)", task, done_dir / f"{task}.npz")
            else:
                todo.append(task)

        def answer(task: str, head: torch.nn.Module, views_of_task: np.ndarray, task_stats: dict[str, Any]) -> None:
            """The fitted `head`'s answers to the task's test views, kept in the task's file at once."""
            task_stats["model_step"] = model_step
            rows = rows_of_tasks(test_ids, identifiers, [task])
            task_ids = local_ids(test_ids, rows, views_of_task, task)  # the rows of the task's own table
            rows = np.repeat(rows, evaluation.canvas_attempts)
            batch = max(min(evaluation.batch_size, len(rows)), 1)
            answering = time.monotonic()
            answers = predict(head, test.inputs, test.labels, task_ids, rows, batch, env, compile=False, views=views)
            assert answers is not None  # one process
            task_stats["answer_seconds"] = round(time.monotonic() - answering, 3)  # every view's attempts
            part = {"rows": answers.rows, "preds": answers.preds, "q_halt_logits": answers.q_halt_logits}
            if answers.loop_steps is not None:  # a looped model's (LoopViT): each answer's loop steps
                part["loop_steps"] = answers.loop_steps
            parts[task], stats[task] = part, task_stats
            done_dir.mkdir(parents=True, exist_ok=True)
            record = {**part, "stats": np.array(json.dumps(task_stats)), "key": np.array(key)}
            atomic_write_many(done_dir, {f"{task}.npz": _npz(record)})
            log.info("%s: %s", task, task_stats)

        if cfg.tasks_per_step == 1:
            for task in todo:
                head, _ = model_from_checkpoint(ckpt, env.device, source=checkpoint, batch_size=cfg.batch_size)
                head.test_time = True  # LoopViT fits as upstream's test-time training (models/loopvit_head.py)
                demonstrations = task_views(train_ids, identifiers, task)
                task_stats = fit_task(head, train, train_ids, demonstrations, task, cfg, seed, env.device, loss_fn)
                answer(task, head, demonstrations[1], task_stats)
        elif todo:
            _fit_batched(ckpt, checkpoint, todo, train, train_ids, identifiers, cfg, seed, env, model_step, answer)
        ordered = [parts[task] for task in tasks]
        merged = {
            k: np.concatenate([p[k] for p in ordered]) if ordered else np.zeros((0,) + shape, dtype=dtype)
            for k, shape, dtype in (
                ("rows", (), np.int64),
                ("preds", (test.inputs.shape[1],), np.uint8),
                ("q_halt_logits", (), np.float32),
            )
        }
        if ordered and all("loop_steps" in p for p in ordered):  # a looped model's; a VARC job's file is as before
            merged["loop_steps"] = np.concatenate([p["loop_steps"] for p in ordered])
        summary = {"job": job, "jobs": cfg.jobs, "tasks": tasks, "stats": stats, "ttt": cfg.model_dump(mode="json")}
        summary["model_step"] = model_step
        # what the job spent: this attempt's wall time from its start (the checkpoint's and the dataset's loading,
        # the compilation, every fit and answer), plus the tasks kept from an earlier, killed attempt (their own
        # fits and answers; that attempt's start-up is not known)
        kept = [stats[task] for task in tasks if task not in todo]
        summary["wall_seconds"] = round(time.monotonic() - started + sum(_task_seconds(s) for s in kept), 3)
        out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_many(out.parent, {out.name: _npz({**merged, "summary": np.array(json.dumps(summary))})})
        shutil.rmtree(done_dir, ignore_errors=True)  # the job's file holds every task now
        return summary
    finally:
        distributed.teardown(env)


def collect(
    job_files: Sequence[str | Path],
    dataset_dir: str | Path,
    out_dir: str | Path,
    evaluation: EvaluationConfig | None = None,
    info: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Vote over the answers of every job and write the evaluation files into out_dir; the metrics."""
    evaluation = evaluation or EvaluationConfig()
    dataset_dir = Path(dataset_dir)
    started = time.perf_counter()
    test = load_split(dataset_dir, "test")
    identifiers = load_identifiers(dataset_dir / "identifiers.json")
    puzzles = load_test_puzzles(dataset_dir / "test_puzzles.json")
    example_ids = example_puzzle_ids(test)
    rows, preds, q, loops, summaries = [], [], [], [], []
    for path in map(Path, job_files):
        with np.load(path) as part:
            rows.append(part["rows"])
            preds.append(part["preds"])
            q.append(part["q_halt_logits"])
            loops.append(part["loop_steps"] if "loop_steps" in part.files else None)
            summaries.append(json.loads(str(part["summary"])))
    jobs = {s["jobs"] for s in summaries}
    covered = sorted(task for s in summaries for task in s["tasks"])
    if len(jobs) != 1 or covered != sorted(puzzles.task_names):
        raise ArcpipeError(
            f"{out_dir}: the job files answer {len(covered)} of the {puzzles.num_tasks} test tasks (jobs={jobs}); "
            "every job of one ttt.jobs setting must be collected: re-run the missing jobs"
        )
    all_rows = np.concatenate(rows)
    order = np.argsort(all_rows, kind="stable")  # global example order: ties break as in one evaluation
    all_rows = all_rows[order]
    result = evaluate_predictions(
        np.asarray(test.inputs[all_rows]),
        np.concatenate(preds)[order],
        example_ids[all_rows],
        np.concatenate(q)[order],
        identifiers,
        puzzles,
        evaluation.pass_ks,
    )
    # a looped model's loop steps per test input (per_puzzle.csv's mean_loop_steps), when every job kept them
    loop_steps = None
    if loops and all(x is not None for x in loops):
        row_steps = np.concatenate(loops)[order]
        loop_steps = loop_steps_per_input(
            np.asarray(test.inputs[all_rows]), row_steps, example_ids[all_rows], identifiers, puzzles
        )
    stats = [task_stats for s in summaries for task_stats in s["stats"].values()]
    task_seconds = [_task_seconds(s) for s in stats]
    # a job file's own wall time, start-up included; one written before jobs recorded it: its tasks' seconds
    job_seconds = [s.get("wall_seconds", sum(_task_seconds(t) for t in s["stats"].values())) for s in summaries]
    extra = {
        "ttt/steps_per_task": float(np.mean([s["steps"] for s in stats])) if stats else 0.0,
        "ttt/seconds_per_task": float(np.mean([s["seconds"] for s in stats])) if stats else 0.0,  # the fit's
        # the fit and the answers (a task answered by an earlier version of this code has no answer time)
        "ttt/wall_seconds_per_task": float(np.mean(task_seconds)) if stats else 0.0,
        # what the jobs spent, summed over the job files (each job's wall time from its start, loading and
        # compilation included, and a task kept from an attempt that was killed with its own attempt's time): the
        # test-time training's device time in what the run spent (report.load.TTT_SECONDS, summary.hours_spent)
        "ttt/wall_seconds": float(np.sum(job_seconds)),
    }
    protocol = {
        **(info or {}),
        "ttt": summaries[0]["ttt"] if summaries else None,
        "canvas": {"attempts_per_view": evaluation.canvas_attempts},
        "jobs": len(summaries),
        # how the jobs stepped: "compiled", "eager", or both joined by "+" when jobs differed (a job file of an
        # earlier version of this code says nothing: "unrecorded")
        "model_step": "+".join(sorted({s.get("model_step", "unrecorded") for s in summaries})) or None,
    }
    return write_results(
        out_dir,
        result,
        epoch=(info or {}).get("epoch"),
        wall_time_s=time.perf_counter() - started,
        extra_metrics=extra,
        info=protocol,
        loop_steps=loop_steps,
    )


def _fit_batched(
    ckpt: Mapping[str, Any],
    checkpoint: Path,
    tasks: Sequence[str],
    train: Any,
    train_ids: np.ndarray,
    identifiers: Sequence[str],
    cfg: TTTConfig,
    seed: int,
    env: Any,
    model_step: str,
    answer: Callable[[str, torch.nn.Module, np.ndarray, dict[str, Any]], None],
) -> None:
    """Fit `tasks` cfg.tasks_per_step at a time (eval/batched.py), each from the checkpoint's weights with its own
    table and batches (`task_batches`, as `fit_task`'s), and answer each as it finishes."""
    head, _ = model_from_checkpoint(ckpt, env.device, source=checkpoint, batch_size=cfg.batch_size)
    head.test_time = True  # LoopViT fits as upstream's test-time training (models/loopvit_head.py)
    width = head.model.inner.task_token_embed.weight.shape[1]
    demonstrations = {task: task_views(train_ids, identifiers, task) for task in tasks}

    def fits() -> Iterator[batched.TaskFit]:
        for task in tasks:
            table, epoch_batches = task_batches(
                width, train, train_ids, demonstrations[task], task, cfg, seed, env.device
            )
            info = {"views": len(table), "demonstrations": len(demonstrations[task][0])}
            yield batched.TaskFit(task, table, task_steps(epoch_batches, cfg), info)

    def done(fit: batched.TaskFit, weights: dict[str, torch.Tensor], task_stats: dict[str, Any]) -> None:
        fitted, _ = model_from_checkpoint(ckpt, env.device, source=checkpoint, batch_size=cfg.batch_size)
        inner = fitted.model.inner
        old = inner.task_token_embed.weight
        inner.task_token_embed = torch.nn.Embedding(len(fit.table), old.shape[1], device=old.device, dtype=old.dtype)
        with torch.no_grad():
            for name, p in inner.named_parameters():
                p.copy_(weights[name])
        answer(fit.name, fitted, demonstrations[fit.name][1], task_stats)

    compiled = model_step == "compiled"
    loss_fn = torch.compile(batched.batched_loss, fullgraph=True) if compiled else batched.batched_loss
    update_fn = torch.compile(batched.adamw_update, fullgraph=True) if compiled else batched.adamw_update
    torch.manual_seed(seed * 1_000_003 + zlib.crc32(tasks[0].encode()))  # the batched steps' dropout
    head.train()
    max_views = max(len(views) for _, views in demonstrations.values())
    batched.fit_tasks(head, fits(), cfg, cfg.tasks_per_step, done, loss_fn, update_fn, max_views)


def _task_seconds(stats: Mapping[str, Any]) -> float:
    """A task's fit and answers, in seconds (a task answered by an earlier version of this code: its fit only)."""
    return stats["seconds"] + stats.get("answer_seconds", 0.0)


def _read_task(path: Path, key: str) -> tuple[dict[str, np.ndarray], dict[str, Any]] | None:
    """A task's answers kept by an earlier attempt of the job, if that attempt had the same inputs (`key`)."""
    try:
        with np.load(path) as part:
            if str(part["key"]) != key:
                return None
            kept = ("rows", "preds", "q_halt_logits") + (("loop_steps",) if "loop_steps" in part.files else ())
            return {k: part[k] for k in kept}, json.loads(str(part["stats"]))
    except (OSError, KeyError, ValueError):
        return None


def _npz(arrays: Mapping[str, np.ndarray]) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()
