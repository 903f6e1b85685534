"""Per-task pages and the task-by-run index (report/answers.py) on synthetic evaluations written by the evaluator's
own writer (eval/write.py): what each page draws is read back from its SVG and compared with the files."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from arcpipe.eval.grids import Grids
from arcpipe.eval.puzzles import load_tasks_from_json
from arcpipe.eval.score import score
from arcpipe.eval.vote import Votes
from arcpipe.eval.write import EvalResult, build_submission, write_results
from arcpipe.report import answers
from arcpipe.report.answers import columns_of, grids_on_page, read_evaluation, svg_grid, write_task_pages

A = [[1, 2, 0], [0, 3, 4]]  # 2 x 3: a transposed drawing is caught
A_OUT = [[5, 5], [6, 0], [7, 8]]
B = [[2, 2], [2, 0]]
B_OUT = [[9, 1], [1, 9]]
TASKS = {
    "aaa": {"train": [{"input": A, "output": A_OUT}], "test": [{"input": A, "output": A_OUT}]},
    "bbb": {
        "train": [{"input": B, "output": B_OUT}],
        "test": [{"input": B, "output": B_OUT}, {"input": A, "output": A_OUT}],
    },
}
WRONG = [[5, 5], [6, 0], [7, 7]]  # A_OUT's shape, one cell off
SMALL = [[3]]  # another shape


def _evaluate(folder: Path, candidates: list[list[tuple[list, int]]]) -> Path:
    """Write an evaluation of TASKS whose test pair p has `candidates[p]` (grid, votes), best first."""
    test = load_tasks_from_json(json.loads(json.dumps(TASKS)), "synthetic")
    grids = [np.array(g, dtype=np.uint8) for pair in candidates for g, _ in pair]
    count = np.array([n for pair in candidates for _, n in pair], dtype=np.int64)
    start = np.concatenate([[0], np.cumsum([len(pair) for pair in candidates])]).astype(np.int64)
    votes = Votes(start, Grids.from_list(grids), count, count * 0.5, np.arange(len(count), dtype=np.int64))
    submission, stats = build_submission(votes, test)
    write_results(folder, EvalResult(test, votes, score(votes, test, (1, 2)), submission, stats, 0.0), epoch=4)
    return folder / "metrics.json"


@pytest.fixture
def results(tmp_path) -> tuple[Path, list[Path]]:
    """A dataset folder with TASKS and two runs' evaluations: run-a solves aaa (attempt 2) and bbb; run-b gets aaa
    wrong (right shape) and bbb's second input wrong in shape; run-a's epoch_2 is an earlier checkpoint."""
    data = tmp_path / "results/data/toy"
    data.mkdir(parents=True)
    (data / "test_puzzles.json").write_text(json.dumps(TASKS))
    evals = tmp_path / "results/eval"
    metrics = [
        _evaluate(evals / "run-a/epoch_2", [[(WRONG, 3)], [(B_OUT, 1)], [(SMALL, 1)]]),
        _evaluate(evals / "run-a/epoch_4", [[(WRONG, 6), (A_OUT, 4)], [(B_OUT, 5)], [(A_OUT, 2), (SMALL, 1)]]),
        _evaluate(evals / "run-b/epoch_4", [[(WRONG, 7), (SMALL, 3)], [(B_OUT, 9)], [(SMALL, 2)]]),
    ]
    return data, metrics


def test_a_drawn_grid_reads_back_as_the_grid():
    grid = np.array([[0, 1, 1, 9], [2, 2, 0, 0], [10, 3, 3, 3]])
    ((title, drawn),) = grids_on_page(svg_grid(grid, "g <1>"))
    assert title == "g <1>" and drawn.shape == (3, 4) and np.array_equal(drawn, grid)


def test_columns_are_each_runs_last_epoch_and_every_other_checkpoint(tmp_path):
    paths = [tmp_path / f"eval/{run}/{ckpt}/metrics.json" for run, ckpt in [
        ("r", "epoch_2"), ("r", "epoch_10"), ("r", "ttt_epoch_10"), ("r", "pooled_last2"), ("s", "epoch_4"),
        ("r", "avg_last2"), ("both", "ensemble"),
    ]]  # fmt: skip
    assert [f"{p.parent.name}/{p.name}" for p in columns_of(paths)] == [
        "r/epoch_10", "r/ttt_epoch_10", "s/epoch_4", "r/avg_last2", "both/ensemble",
    ]  # fmt: skip


def test_the_index_marks_each_task_of_each_run_as_its_per_puzzle_csv_says(results, tmp_path):
    data, metrics = results
    out = tmp_path / "results/report/tasks"
    written = write_task_pages(out, metrics, [data])
    assert [p.name for p in written] == ["index.html", "aaa.html", "bbb.html"]
    index = (out / "index.html").read_text()
    head = re.findall(r'<th data-col="\d+">([^<]*)</th>', index)
    assert head == ["task", "size", "solved by", "run-a/epoch_4", "run-b/epoch_4"]
    cells = {
        (task, col): state
        for task, row in re.findall(r'<tr data-size="\d+"><td data-sort="(\w+)">(.*?)</tr>', index)
        for col, state in enumerate(re.findall(r'data-status="([^"]+)"', row))
    }
    assert cells == {
        ("aaa", 0): "solved",  # attempt 2 right: pass@2
        ("aaa", 1): "wrong",
        ("bbb", 0): "solved",
        ("bbb", 1): "partly",  # one of two test inputs
    }
    assert 'href="aaa.html#c1"' in index and "js-error" in index  # the onerror hook


def test_a_task_page_draws_the_demonstrations_the_truth_and_each_runs_candidates(results, tmp_path):
    data, metrics = results
    out = tmp_path / "tasks"
    write_task_pages(out, metrics, [data])
    drawn = dict(grids_on_page((out / "aaa.html").read_text()))
    assert np.array_equal(drawn["demonstration 1 input"], A) and np.array_equal(drawn["demonstration 1 output"], A_OUT)
    assert np.array_equal(drawn["test input 1"], A) and np.array_equal(drawn["expected output 1"], A_OUT)
    assert np.array_equal(drawn["run-a/epoch_4 attempt 1: 6 votes (60%)"], WRONG)
    assert np.array_equal(drawn["run-a/epoch_4 attempt 2: 4 votes (40%), right"], A_OUT)
    assert np.array_equal(drawn["run-b/epoch_4 attempt 2: 3 votes (30%)"], SMALL)
    page = (out / "bbb.html").read_text()
    assert "✓ solved</span> <b>run-a/epoch_4</b>" in page and "▭ wrong shape</span> <b>run-b/epoch_4</b>" in page


def test_the_vote_margin_is_the_closest_test_inputs(results, tmp_path):
    data, metrics = results
    b = read_evaluation(metrics[2].parent)
    assert answers.margin(b.answers["aaa"]) == pytest.approx(0.4)  # (7 - 3) / 10
    assert answers.margin(b.answers["bbb"]) == pytest.approx(1.0)  # one candidate per input


def test_an_evaluation_without_votes_and_a_task_not_in_the_dataset_get_a_line_not_a_crash(results, tmp_path):
    data, metrics = results
    (metrics[2].parent / "votes.npz").unlink()
    other = tmp_path / "other"
    other.mkdir()
    (other / "test_puzzles.json").write_text(json.dumps({"aaa": TASKS["aaa"]}))  # no bbb
    out = tmp_path / "tasks"
    write_task_pages(out, metrics, [other])
    index, page = (out / "index.html").read_text(), (out / "bbb.html").read_text()
    assert "run-b/epoch_4: " in index and "votes.npz is missing: the attempts are not shown" in index
    assert "task bbb is not in the dataset: no demonstrations" in page
    assert "no votes.npz: the attempts are not shown" in page
    # the truth still comes from run-a's votes, and run-b's marks from its per_puzzle.csv
    drawn = dict(grids_on_page(page))
    assert np.array_equal(drawn["expected output 2"], A_OUT) and not any(t.startswith("run-b") for t in drawn)
    assert re.search(r'data-status="partly"[^>]*title="run-b/epoch_4', index)


def test_an_evaluation_without_per_puzzle_csv_is_marked_from_its_votes(results, tmp_path):
    data, metrics = results
    (metrics[1].parent / "per_puzzle.csv").unlink()
    e = read_evaluation(metrics[1].parent)
    assert answers.status(e.answers["aaa"]) == "solved" and answers.status(e.answers["bbb"]) == "solved"
    assert any("per_puzzle.csv cannot be read" in p for p in e.problems)


def test_a_missing_evaluation_folder_is_not_evaluated(results, tmp_path):
    data, metrics = results
    shutil.rmtree(metrics[2].parent)
    out = tmp_path / "tasks"
    write_task_pages(out, metrics, [data])
    assert 'data-status="not evaluated"' in (out / "index.html").read_text()


def test_the_front_page_links_every_table_and_shows_every_plot(tmp_path):
    report = tmp_path / "report"
    report.mkdir()
    files = [report / name for name in ("passk.html", "passk.md", "passk.csv", "summary.html", "loss_vs_step.png")]
    page = answers.write_front_page(report, files, report / "tasks/index.html").read_text()
    assert '<a href="tasks/index.html">' in page
    assert '<a href="passk.html">passk</a> <a href="passk.md">.md</a> <a href="passk.csv">.csv</a>' in page
    assert '<a href="summary.html">summary</a> </li>' in page and '<img src="loss_vs_step.png"' in page


def test_an_ensemble_page_says_which_members_votes_carried_each_candidate(results, tmp_path):
    from arcpipe.eval.pool import write_pooled_evaluation

    data, metrics = results
    members = [metrics[1].parent / "votes.npz", metrics[2].parent / "votes.npz"]
    folder = tmp_path / "results/eval/both/ensemble"
    write_pooled_evaluation(members, folder, (1, 2), {"run": "both", "ensemble": ["run-a", "run-b"]})
    out = tmp_path / "tasks"
    write_task_pages(out, [folder / "metrics.json"], [data])
    page = (out / "aaa.html").read_text()
    drawn = dict(grids_on_page(page))
    assert np.array_equal(drawn["both/ensemble attempt 1: 13 votes (65%)"], WRONG)  # 6 + 7 of 20
    assert "run-a/epoch_4 6, run-b/epoch_4 7" in page and "run-a/epoch_4 4, run-b/epoch_4 0" in page
    assert "attempt 1 carried by run-b/epoch_4's votes" in page


def test_loop_steps_and_a_test_time_trainings_fit_loss_are_shown_where_recorded(results, tmp_path):
    data, metrics = results
    folder = tmp_path / "results/eval/run-a/ttt_epoch_4"
    shutil.copytree(metrics[1].parent, folder)
    per_puzzle = (folder / "per_puzzle.csv").read_text().splitlines()
    steps = ["mean_loop_steps", "3.5", "", "2.25"]
    (folder / "per_puzzle.csv").write_text("".join(f"{a},{b}\n" for a, b in zip(per_puzzle, steps, strict=True)))
    job = tmp_path / "results/ttt/run-a/epoch_4/job_0.npz"
    job.parent.mkdir(parents=True)
    summary = {"tasks": ["aaa", "bbb"], "stats": {"aaa": {"steps": 8, "last_loss": 0.125}, "bbb": {"steps": 8}}}
    np.savez(job, summary=np.array(json.dumps(summary)))
    out = tmp_path / "tasks"
    write_task_pages(out, [folder / "metrics.json"], [data])
    aaa, bbb = (out / "aaa.html").read_text(), (out / "bbb.html").read_text()
    assert "mean loop steps 3.50" in aaa and "test-time training's last fit loss 0.1250" in aaa
    assert "mean loop steps 2.25" in bbb and "fit loss" not in bbb and bbb.count("mean loop steps") == 1


def test_arcpipe_report_writes_the_tables_the_task_pages_and_a_front_page_linking_them(results, tmp_path):
    from arcpipe.cli import main

    data, metrics = results
    out = tmp_path / "report"
    args = ["report", "--out", str(out), "--metrics", *map(str, metrics), "--datasets", str(data)]
    args += ["--votes", str(metrics[0].parent / "votes.npz"), str(metrics[1].parent / "votes.npz")]
    assert main(args) == 0
    front = (out / "index.html").read_text()
    assert '<a href="tasks/index.html">' in front and '<a href="passk.html">passk</a>' in front
    assert '<a href="pooled.html">pooled</a>' in front and '<img src="passk_vs_step.png"' in front
    assert (out / "tasks/aaa.html").is_file() and "run-b/epoch_4" in (out / "tasks/index.html").read_text()
    assert 'id="t-aaa"' in (out / "tasks.html").read_text()


def test_the_one_file_view_holds_the_index_and_every_task_page_as_a_section(results, tmp_path):
    data, metrics = results
    one = tmp_path / "tasks.html"
    written = write_task_pages(tmp_path / "tasks", metrics, [data], one_file=one)
    assert written[-1] == one
    text = one.read_text()
    assert re.findall(r'<section class="task" id="([^"]+)">', text) == ["t-aaa", "t-bbb"]
    assert 'href="#t-aaa"' in text and 'href="aaa.html' not in text and 'href="index.html"' not in text
    bbb = text[text.index('id="t-bbb"') :]
    assert dict(grids_on_page(bbb)).keys() == dict(grids_on_page((tmp_path / "tasks/bbb.html").read_text())).keys()
