"""What each evaluation answered, task by task: one static HTML page per task and a task-by-run index.

    write_report_pages(report_dir, metrics_paths, dataset_dirs, files)   # tasks/ and the front page: rule and CLI
    write_task_pages(out_dir, metrics_paths, dataset_dirs, main_k=2)   # out_dir/index.html + one page per task
    one_file_view(names, tasks, evaluations, main_k)                     # the same in one file (tasks.html)
    write_front_page(report_dir, files)                                  # report_dir/index.html: tables, plots, tasks
    grids_on_page(html_text)                                             # [(title, grid)] of every grid drawn

A column of the index is one evaluation folder (results/eval/RUN/CHECKPOINT/, named RUN/CHECKPOINT): of the folders
given, each run's last epoch_N and every other checkpoint (test-time training, averaged weights, an ensemble of
runs); pooled_lastK folders hold a metrics.json only and are left out (`columns_of`). A task's page shows its
demonstrations, each test input, the expected output and, for every column, the best CANDIDATES_DRAWN candidates
(the first two are pass@2's attempts) with their votes and share of the votes, right or wrong at a glance; the
per-task fit loss of a test-time training (its job files, results/ttt/RUN/epoch_N/job_*.npz, where they are kept),
the mean loop steps per test input (per_puzzle.csv's mean_loop_steps, a looped model's) and, for an ensemble of runs,
each member's votes behind each candidate (info.pooled lists the members' votes.npz).

Grids are inline SVG in ARC's ten colours (data/show.PALETTE), one path per colour; nothing is fetched and nothing
is served: a copied folder opens offline. A task is right when every test input's label is among the first main_k
candidates (per_puzzle.csv's pass@K, the evaluation's own record; without it, the votes'). A missing per_puzzle.csv
or votes.npz, or a task not in the dataset, is a line on the page, never an error.
"""

from __future__ import annotations

import html
import json
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from arcpipe import paths
from arcpipe.config import ArcpipeError
from arcpipe.data.show import PALETTE
from arcpipe.eval.puzzles import TestPuzzles
from arcpipe.eval.vote import Votes
from arcpipe.eval.write import load_votes
from arcpipe.files import atomic_write_many

log = logging.getLogger(__name__)

CANDIDATES_DRAWN = 3  # candidates drawn per test input and evaluation (pass@2's two attempts and the next)
CANDIDATES_LISTED = 5  # candidates whose votes are listed
CELL = 12  # pixels per cell on the page, at most
BOX = 240  # pixels a grid's longer side takes at most (a 30 x 30 grid: 8 per cell)
INDEX = "index.html"
_HERE = paths.task_pages(".")
TASKS = Path(_HERE["pages"]).as_posix()  # the pages' folder in a report folder
ONE_FILE = Path(_HERE["one_file"]).as_posix()  # the pages in one file, beside it

# a task's status in one evaluation, its mark and what it means (the index's legend)
STATUSES = {
    "solved": ("✓", "every test input right within the attempts"),
    "partly": ("◐", "some test inputs right"),
    "wrong": ("✗", "wrong answer of the right shape"),
    "wrong shape": ("▭", "attempt 1 has another shape than the expected output"),
    "no answer": ("∅", "no candidate for any test input"),
    "not evaluated": ("·", "not in this evaluation, or its per-task files are missing"),
}


@dataclass(frozen=True)
class Answer:
    """One evaluation's answer to one test input."""

    right: bool | None  # the label among the first main_k candidates (per_puzzle.csv, else the votes); None: unknown
    candidates: list[tuple[np.ndarray, int, float | None]]  # (grid, votes, mean q), best first, CANDIDATES_LISTED
    total_votes: int | None  # None: no votes.npz
    loop_steps: float | None = None
    expected_shape: tuple[int, int] | None = None  # of the expected output, where known
    num_candidates: int = 0  # distinct candidates in all
    members: list[dict[str, int]] = field(default_factory=list)  # per listed candidate: member -> its votes


@dataclass
class Evaluation:
    """One column: an evaluation folder read once."""

    label: str
    folder: Path
    info: dict[str, Any]
    answers: dict[str, list[Answer]]  # task -> one Answer per test input
    test: TestPuzzles | None  # the ground truth votes.npz was scored on
    pairs: dict[tuple[str, int], int]  # (task, test index) -> pair index in `test`
    fit_loss: dict[str, float]  # task -> last fit loss of its test-time training
    problems: list[str]


def columns_of(metrics_paths: Sequence[str | Path]) -> list[Path]:
    """The evaluation folders of the index, in the order given: each run's last epoch_N, and every folder that is no
    epoch_N and no pooled_lastK (which holds a metrics.json only)."""
    folders = [Path(p).parent for p in metrics_paths]
    last: dict[Path, int] = {}
    for folder in folders:
        if match := re.fullmatch(r"epoch_(\d+)", folder.name):
            last[folder.parent] = max(last.get(folder.parent, -1), int(match[1]))
    kept = []
    for folder in folders:
        match = re.fullmatch(r"epoch_(\d+)", folder.name)
        if match and int(match[1]) != last[folder.parent] or re.fullmatch(r"pooled_last\d+", folder.name):
            continue
        if folder not in kept:
            kept.append(folder)
    return kept


def write_task_pages(
    out_dir: str | Path,
    metrics_paths: Sequence[str | Path],
    dataset_dirs: Sequence[str | Path] = (),
    main_k: int = 2,
    one_file: str | Path | None = None,
) -> list[Path]:
    """Write out_dir/index.html and one page per task of the evaluations at metrics_paths (`columns_of` picks the
    columns); the files written, index first (and `one_file`, the same in one file, last: `one_file_view`).
    dataset_dirs: built datasets (results/data/NAME/) whose test_puzzles.json hold the tasks' demonstrations; the
    dataset an evaluation names in its info is read too."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    evaluations = [read_evaluation(folder, main_k) for folder in columns_of(metrics_paths)]
    datasets = [Path(d) for d in dataset_dirs] + [
        Path(e.info["dataset"]) for e in evaluations if isinstance(e.info.get("dataset"), str)
    ]
    tasks = read_tasks(datasets)
    names = sorted({task for e in evaluations for task in e.answers})
    files = page_names(names)
    contents = {files[task]: task_page(task, tasks.get(task), evaluations, main_k, names, files) for task in names}
    contents[INDEX] = index_page(names, tasks, evaluations, files, main_k)
    atomic_write_many(out_dir, {name: text.encode() for name, text in contents.items()})
    log.info("task pages: %d tasks x %d evaluations -> %s", len(names), len(evaluations), out_dir)
    written = [out_dir / INDEX, *(out_dir / files[task] for task in names)]
    if one_file is not None:
        one_file = Path(one_file)
        atomic_write_many(one_file.parent, {one_file.name: one_file_view(names, tasks, evaluations, main_k).encode()})
        written.append(one_file)
    return written


def read_evaluation(folder: Path, main_k: int = 2) -> Evaluation:
    """One evaluation folder's answers per task and test input, and a line for each file it lacks."""
    problems: list[str] = []
    info = _json(folder / "metrics.json").get("info") or {}
    label = f"{info.get('run') or folder.parent.name}/{folder.name}"
    frame = _per_puzzle(folder / "per_puzzle.csv", problems)
    votes, test = None, None
    if (folder / "votes.npz").is_file():
        try:
            votes, test = load_votes(folder / "votes.npz")
        except ArcpipeError as err:
            problems.append(str(err))
    else:
        problems.append(f"{folder}/votes.npz is missing: the attempts are not shown")
    members = _members(info, test, problems)
    pairs = _pairs(test) if test is not None else {}
    column = f"pass@{main_k}"
    if frame is not None:
        records = frame.to_dict("records")
    else:  # no record of right and wrong: the votes say it (the label among the first main_k candidates)
        records = [{"puzzle": task, "test_index": i} for task, i in pairs]
    answers: dict[str, list[Answer]] = {}
    for record in records:
        task, index = str(record["puzzle"]), int(record["test_index"])
        right = bool(record[column]) if column in record else None
        loop = record.get("mean_loop_steps")
        loop = None if loop is None or pd.isna(loop) else float(loop)
        p = pairs.get((task, index))
        if p is None or votes is None or test is None:
            answers.setdefault(task, []).append(Answer(right, [], None, loop))
            continue
        cands = range(int(votes.start[p]), int(votes.start[p + 1]))
        listed = [
            (votes.grids[c], int(votes.count[c]), float(votes.q_sum[c] / votes.count[c]) if votes.count[c] else None)
            for c in cands[:CANDIDATES_LISTED]
        ]
        truth = test.labels[p] if test.has_label[p] else None
        if right is None and truth is not None:
            right = any(g.shape == truth.shape and np.array_equal(g, truth) for g, _, _ in listed[:main_k])
        by_member = (
            [{name: _votes_for(mv, p, grid) for name, mv in members} for grid, _, _ in listed] if members else []
        )
        total = int(votes.count[cands.start : cands.stop].sum())
        shape = None if truth is None else (int(truth.shape[0]), int(truth.shape[1]))
        answers.setdefault(task, []).append(Answer(right, listed, total, loop, shape, len(cands), by_member))
    return Evaluation(label, folder, info, answers, test, pairs, _fit_losses(folder, problems), problems)


def read_tasks(dataset_dirs: Iterable[Path]) -> dict[str, dict[str, Any]]:
    """task -> its JSON ({"train": [...], "test": [...]}) from each dataset's test_puzzles.json (the first dataset
    that has a task wins); a dataset folder that is missing is skipped."""
    tasks: dict[str, dict[str, Any]] = {}
    for directory in dict.fromkeys(dataset_dirs):
        path = directory / "test_puzzles.json"
        if not path.is_file():
            log.warning("%s is missing: tasks from it are shown without demonstrations", path)
            continue
        for name, task in json.loads(path.read_text()).items():
            tasks.setdefault(name, task)
    return tasks


def page_names(tasks: Sequence[str]) -> dict[str, str]:
    """task -> its page's file name: the name with anything but letters, digits, '-', '_' and '.' replaced."""
    names: dict[str, str] = {}
    used = {INDEX}
    for task in tasks:
        stem = re.sub(r"[^A-Za-z0-9_.-]", "_", task) or "task"
        name, n = f"{stem}.html", 1
        while name in used:
            n += 1
            name = f"{stem}-{n}.html"
        used.add(name)
        names[task] = name
    return names


def status(answers: Sequence[Answer] | None) -> str:
    """The task's status in one evaluation (STATUSES) from its answers to each test input."""
    if not answers or any(a.right is None for a in answers):
        return "not evaluated"
    if all(a.right for a in answers):
        return "solved"
    if any(a.right for a in answers):
        return "partly"
    if all(a.total_votes == 0 for a in answers):
        return "no answer"
    shapes = [a.candidates[0][0].shape != a.expected_shape for a in answers if a.candidates and a.expected_shape]
    return "wrong shape" if any(shapes) else "wrong"


def margin(answers: Sequence[Answer] | None) -> float | None:
    """How close the vote was: over the task's test inputs, the least (winner's votes - runner-up's) / all votes;
    None without votes."""
    shares = []
    for a in answers or ():
        if not a.total_votes:
            continue
        counts = [c for _, c, _ in a.candidates] + [0, 0]
        shares.append((counts[0] - counts[1]) / a.total_votes)
    return min(shares) if shares else None


# --------------------------------------------------------------------------------------------------------------
# grids


def svg_grid(grid: np.ndarray, title: str) -> str:
    """`grid` as an inline SVG: a black background, one path per other colour (a run of cells per row and colour is
    one rectangle), grid lines; CELL pixels a cell, fewer where the grid would be over BOX pixels; `title` is its
    tooltip (and what `grids_on_page` reads back)."""
    grid = np.asarray(grid)
    h, w = (int(x) for x in grid.shape)
    if h == 0 or w == 0:
        return f'<span class="empty" title="{html.escape(title)}">empty grid</span>'
    cell = max(1, min(CELL, BOX // max(h, w)))
    runs: dict[int, list[str]] = {}
    for y in range(h):
        row = grid[y]
        x = 0
        while x < w:
            end = x + 1
            while end < w and row[end] == row[x]:
                end += 1
            if row[x]:
                runs.setdefault(int(row[x]), []).append(f"M{x} {y}h{end - x}v1h-{end - x}z")
            x = end
    shapes = "".join(f'<path fill="{_colour(c)}" d="{"".join(d)}"/>' for c, d in sorted(runs.items()))
    lines = "".join(f"M0 {y}H{w}" for y in range(1, h)) + "".join(f"M{x} 0V{h}" for x in range(1, w))
    grid_lines = f'<path class="gl" d="{lines}"/>' if lines else ""
    return (
        f'<svg class="grid" viewBox="0 0 {w} {h}" width="{w * cell}" height="{h * cell}">'
        f"<title>{html.escape(title)}</title>"
        f'<rect width="{w}" height="{h}" fill="{PALETTE[0]}"/>{shapes}{grid_lines}</svg>'
    )


def grids_on_page(text: str) -> list[tuple[str, np.ndarray]]:
    """(title, grid) of every grid `svg_grid` drew in an HTML text, in page order: what a reader sees, read back."""
    found = []
    for match in re.finditer(r'<svg class="grid" viewBox="0 0 (\d+) (\d+)"[^>]*>(.*?)</svg>', text, re.S):
        w, h, body = int(match[1]), int(match[2]), match[3]
        title = html.unescape(re.search(r"<title>(.*?)</title>", body, re.S)[1])
        grid = np.zeros((h, w), dtype=np.int64)
        for fill, d in re.findall(r'<path fill="(#[0-9A-Fa-f]{6})" d="([^"]*)"', body):  # "/>" or "></path>"
            colour = [c.upper() for c in PALETTE].index(fill.upper()) if fill.upper() != "#FFFFFF" else 10
            for x, y, n in re.findall(r"M(\d+) (\d+)h(\d+)v1h-\d+z", d):
                grid[int(y), int(x) : int(x) + int(n)] = colour
        found.append((title, grid))
    return found


# --------------------------------------------------------------------------------------------------------------
# pages

STYLE = """
body{font-family:system-ui,sans-serif;margin:1rem;color:#1f2328}a{color:#0969da}
.grid{margin:2px;vertical-align:top}.grid .gl{stroke:#555;stroke-width:.04;fill:none}
.pair,.answer{display:inline-block;margin:.3rem .8rem .3rem 0;vertical-align:top}
.cand{display:inline-block;margin:0 .4rem;vertical-align:top;text-align:center;font-size:.8rem}
.right,.wrongc{display:inline-block;line-height:0}.right{outline:3px solid #2da44e}
.wrongc{outline:3px solid #cf222e}.problem{color:#9a6700}
.col{border-top:1px solid #d0d7de;padding:.3rem 0}.mark{font-size:1.2rem;font-weight:600}
.s-solved{background:#dafbe1}.s-partly{background:#fff8c5}.s-wrong{background:#ffebe9}
section.task{display:none;border-top:3px solid #d0d7de;margin-top:1rem}section.task:target{display:block}
.s-wrong-shape{background:#ffd8d3}.s-no-answer{background:#eaeef2}.s-not-evaluated{color:#8c959f}
table{border-collapse:collapse}th,td{border:1px solid #d0d7de;padding:.1rem .35rem;text-align:center}
th{background:#f6f8fa;cursor:pointer}small{color:#59636e}.empty{font-size:.8rem;color:#59636e}
"""
ON_ERROR = (
    "<script>window.onerror=function(m){var p=document.createElement('p');p.id='js-error';"
    "p.textContent='script error: '+m;document.body.prepend(p)};</script>"
)


def task_page(
    task: str,
    spec: Mapping[str, Any] | None,
    evaluations: Sequence[Evaluation],
    main_k: int,
    names: Sequence[str],
    files: Mapping[str, str],
    section: bool = False,
) -> str:
    """One task's page: demonstrations, test inputs, expected outputs, and every evaluation's candidates; section:
    as a <section> of the one-file view (`one_file_view`), `files` holding each task's anchor there."""
    at = names.index(task)
    nav = [f'<a href="{"#top" if section else INDEX}">index</a>']
    if at > 0:
        nav.append(f'<a href="{files[names[at - 1]]}">previous: {html.escape(names[at - 1])}</a>')
    if at + 1 < len(names):
        nav.append(f'<a href="{files[names[at + 1]]}">next: {html.escape(names[at + 1])}</a>')
    start = f'<section class="task" id="{files[task][1:]}">' if section else _head(f"task {task}")
    parts = [start, f"<p>{' · '.join(nav)}</p>", f"<h1>task {html.escape(task)}</h1>"]
    if spec is None:
        parts.append(f'<p class="problem">task {html.escape(task)} is not in the dataset: no demonstrations</p>')
    else:
        parts.append("<h2>demonstrations</h2>")
        for i, pair in enumerate(spec.get("train", [])):
            parts.append(
                f'<div class="pair">{svg_grid(np.array(pair["input"]), f"demonstration {i + 1} input")} → '
                f"{svg_grid(np.array(pair['output']), f'demonstration {i + 1} output')}</div>"
            )
    inputs = max((len(e.answers.get(task, [])) for e in evaluations), default=0)
    for i in range(inputs):
        given, expected = _truth(task, i, spec, evaluations)
        parts.append(f"<h2>test input {i + 1}</h2><div>")
        parts.append(f'<div class="pair">input<br>{_maybe_grid(given, f"test input {i + 1}")}</div>')
        parts.append(f'<div class="pair">expected<br>{_maybe_grid(expected, f"expected output {i + 1}")}</div></div>')
        for c, e in enumerate(evaluations):
            parts.append(_answer_block(task, i, c, e, expected, main_k, anchor=not section))
    parts.append("</section>" if section else "</body></html>\n")
    return "".join(parts)


def index_page(
    names: Sequence[str],
    tasks: Mapping[str, Mapping[str, Any]],
    evaluations: Sequence[Evaluation],
    files: Mapping[str, str],
    main_k: int,
    sections: Sequence[str] = (),
) -> str:
    """The task-by-run matrix: a row per task, a column per evaluation, each cell its status linking to the task's
    page at that evaluation; sortable by any column (click its head), filterable with a few lines of JS. sections:
    the one-file view's task sections (`one_file_view`), after the table; `files` then holds their anchors."""
    labels = [e.label for e in evaluations]
    head = "".join(f'<th data-col="{c + 3}">{html.escape(label)}</th>' for c, label in enumerate(labels))
    counts = [sum(status(e.answers.get(t)) == "solved" for t in names) for e in evaluations]
    rows = []
    for task in names:
        size = _size(task, tasks.get(task), evaluations)
        cells = []
        for c, e in enumerate(evaluations):
            s = status(e.answers.get(task))
            m = margin(e.answers.get(task))
            at = "" if sections else f"#c{c}"  # the one-file view's sections have no column anchors
            shown = "" if m is None else f" {m:.2f}"
            cells.append(
                f'<td class="s-{s.replace(" ", "-")}" data-status="{s}" data-sort="{list(STATUSES).index(s)}" '
                f'data-margin="{"" if m is None else f"{m:.4f}"}" title="{html.escape(labels[c])}: {s}'
                f'{"" if m is None else f", vote margin {m:.2f}"}"><a href="{files[task]}{at}">'
                f"{STATUSES[s][0]}</a><small>{shown}</small></td>"
            )
        rows.append(
            f'<tr data-size="{size}"><td data-sort="{html.escape(task)}"><a href="{files[task]}">'
            f'{html.escape(task)}</a></td><td data-sort="{size}">{size}</td>'
            f'<td data-sort="{_solved_by(task, evaluations)}">{_solved_by(task, evaluations)}</td>{"".join(cells)}</tr>'
        )
    options = "".join(f'<option value="{c + 3}">{html.escape(label)}</option>' for c, label in enumerate(labels))
    legend = " ".join(
        f'<span class="s-{s.replace(" ", "-")}">{mark} {s}</span> <small>({why})</small>'
        for s, (mark, why) in STATUSES.items()
    )
    problems = "".join(
        f'<p class="problem">{html.escape(e.label)}: {html.escape(p)}</p>' for e in evaluations for p in e.problems
    )
    solved = "".join(f"<td>{n}</td>" for n in counts)
    return (
        _head("tasks by evaluation")
        + '<h1 id="top">Tasks by evaluation</h1>'
        + f"<p>{len(names)} tasks x {len(evaluations)} evaluations; right means every "
        f"test input's expected output among the first {main_k} candidates (pass@{main_k}). Each cell links to the "
        "task's page; the number beside a mark is the vote margin (winner minus runner-up, share of the votes; the "
        "closest test input). Click a column head to sort.</p>"
        + f"<p>{legend}</p>{problems}"
        + '<p id="filters">solved by <select id="fa"><option value="">any</option>'
        + options
        + '</select> and not by <select id="fb"><option value="">none</option>'
        + options
        + '</select> · size (cells) from <input id="smin" type="number" size="5"> to '
        '<input id="smax" type="number" size="5"> · vote margin in the first chosen column at most '
        '<input id="mmax" type="number" step="0.05" size="5"> · <span id="shown"></span></p>'
        + '<table id="tasks"><thead><tr><th data-col="0">task</th><th data-col="1">size</th>'
        + f'<th data-col="2">solved by</th>{head}</tr><tr><td>solved</td><td></td><td></td>{solved}</tr></thead>'
        + f"<tbody>{''.join(rows)}</tbody></table>"
        + "".join(sections)
        + f"<script>{INDEX_JS}</script></body></html>\n"
    )


INDEX_JS = """
var body=document.querySelector('#tasks tbody'),rows=Array.from(body.rows);
function val(id){return document.getElementById(id).value}
function filter(){var a=val('fa'),b=val('fb'),lo=parseFloat(val('smin')),hi=parseFloat(val('smax')),
 mm=parseFloat(val('mmax')),n=0;rows.forEach(function(r){var ok=true,s=+r.dataset.size;
 if(a&&r.cells[a].dataset.status!=='solved')ok=false;if(b&&r.cells[b].dataset.status==='solved')ok=false;
 if(!isNaN(lo)&&s<lo)ok=false;if(!isNaN(hi)&&s>hi)ok=false;
 if(!isNaN(mm)){var m=parseFloat(r.cells[a||3]&&r.cells[a||3].dataset.margin);if(isNaN(m)||m>mm)ok=false}
 r.hidden=!ok;if(ok)n++});document.getElementById('shown').textContent=n+' of '+rows.length+' tasks shown'}
['fa','fb','smin','smax','mmax'].forEach(function(id){document.getElementById(id).addEventListener('input',filter)});
var dir={};document.querySelectorAll('#tasks th').forEach(function(th){th.addEventListener('click',function(){
 var c=+th.dataset.col,d=dir[c]=-(dir[c]||-1);rows.sort(function(x,y){var p=x.cells[c].dataset.sort,
 q=y.cells[c].dataset.sort,u=parseFloat(p),v=parseFloat(q);
 return d*(isNaN(u)||isNaN(v)?p.localeCompare(q):u-v)});rows.forEach(function(r){body.appendChild(r)})})});
filter();
"""


def one_file_view(
    names: Sequence[str],
    tasks: Mapping[str, Mapping[str, Any]],
    evaluations: Sequence[Evaluation],
    main_k: int,
) -> str:
    """The index and every task page in one HTML file (ONE_FILE), each task a <section> shown when its link is
    followed (CSS :target): what `snakemake --report report.html` can embed (it takes no folder of pages)."""
    anchors = {task: "#t-" + stem.removesuffix(".html") for task, stem in page_names(names).items()}
    sections = [task_page(t, tasks.get(t), evaluations, main_k, names, anchors, section=True) for t in names]
    return index_page(names, tasks, evaluations, anchors, main_k, sections)


def write_front_page(report_dir: str | Path, files: Sequence[str | Path], tasks_index: str | Path | None) -> Path:
    """report_dir/index.html: a link to every table (.html, with its .md and .csv beside it where they exist), every
    plot (.png) shown in place, and the task index; `files`: the report's files (only those in report_dir count)."""
    report_dir = Path(report_dir)
    names = sorted({Path(f).name for f in files if Path(f).parent == report_dir and Path(f).name != INDEX})
    tables = [n for n in names if n.endswith(".html")]
    plots = [n for n in names if n.endswith(".png")]
    parts = [_head("arcpipe report"), "<h1>arcpipe report</h1>"]
    if tasks_index is not None:
        link = Path(tasks_index).relative_to(report_dir).as_posix()
        parts.append(f'<p><a href="{link}">Tasks by evaluation</a>: every task, what each run answered.</p>')
    parts.append("<h2>tables</h2><ul>")
    for name in tables:
        stem = name.removesuffix(".html")
        others = [f'<a href="{stem}.{ext}">.{ext}</a>' for ext in ("md", "csv") if f"{stem}.{ext}" in names]
        parts.append(f'<li><a href="{name}">{stem}</a> {" ".join(others)}</li>')
    parts.append("</ul><h2>plots</h2>")
    for name in plots:
        stem = name.removesuffix(".png")
        parts.append(f'<figure><img src="{name}" alt="{stem}" style="max-width:100%"><figcaption>{stem}</figcaption>')
        parts.append("</figure>")
    parts.append("</body></html>\n")
    atomic_write_many(report_dir, {INDEX: "".join(parts).encode()})
    return report_dir / INDEX


# --------------------------------------------------------------------------------------------------------------


def _head(title: str) -> str:
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{STYLE}</style></head><body>{ON_ERROR}"
    )


def _answer_block(
    task: str, i: int, c: int, e: Evaluation, expected: np.ndarray | None, main_k: int, anchor: bool = True
) -> str:
    answers = e.answers.get(task)
    anchor = f' id="c{c}"' if i == 0 and anchor else ""
    title = f"<b>{html.escape(e.label)}</b>"
    if not answers or i >= len(answers):
        return f'<div class="col"{anchor}>{title}: <span class="s-not-evaluated">not evaluated</span></div>'
    a = answers[i]
    s = status([a])
    parts = [f'<div class="col"{anchor}><span class="mark s-{s.replace(" ", "-")}">{STATUSES[s][0]} {s}</span> ']
    parts.append(title)
    if a.total_votes is not None:
        parts.append(f" · {a.total_votes} votes for {a.num_candidates} distinct candidates")
    if a.loop_steps is not None:
        parts.append(f" · mean loop steps {a.loop_steps:.2f}")
    if task in e.fit_loss:
        parts.append(f" · test-time training's last fit loss {e.fit_loss[task]:.4f}")
    parts.append("<br>")
    if a.total_votes is None:
        parts.append('<span class="problem">no votes.npz: the attempts are not shown</span>')
    elif not a.candidates:
        parts.append('<span class="problem">no candidate for this test input</span>')
    for r, (grid, count, q) in enumerate(a.candidates[:CANDIDATES_DRAWN]):
        right = expected is not None and grid.shape == expected.shape and np.array_equal(grid, expected)
        role = f"attempt {r + 1}" if r < main_k else f"candidate {r + 1}"
        share = count / a.total_votes if a.total_votes else 0.0
        label = f"{e.label} {role}: {count} votes ({share:.0%}){', right' if right else ''}"
        parts.append(
            f'<div class="cand"><div class="{"right" if right else "wrongc"}">{svg_grid(grid, label)}</div>'
            f"<br>{role}<br>{count} votes · {share:.0%}" + (f"<br>mean q {q:.2f}" if q is not None else "")
        )
        if a.members:
            parts.append("<br>" + ", ".join(f"{html.escape(m)} {v}" for m, v in a.members[r].items()))
        parts.append("</div>")
    rest = a.candidates[CANDIDATES_DRAWN:]
    if rest and a.total_votes:
        listed = ", ".join(f"{count} ({count / a.total_votes:.0%})" for _, count, _ in rest)
        parts.append(f"<br><small>next candidates' votes: {listed}</small>")
    if a.members and a.candidates:
        carried = max(a.members[0], key=lambda m: a.members[0][m])
        parts.append(f"<br><small>attempt 1 carried by {html.escape(carried)}'s votes</small>")
    parts.append("</div>")
    return "".join(parts)


def _truth(
    task: str, i: int, spec: Mapping[str, Any] | None, evaluations: Sequence[Evaluation]
) -> tuple[np.ndarray | None, np.ndarray | None]:
    # the test input and expected output: from the votes an evaluation was scored on, else the dataset's
    for e in evaluations:
        if e.test is not None and (task, i) in e.pairs:
            p = e.pairs[(task, i)]
            given = e.test.group_inputs[e.test.pair_group[p]]
            return given, e.test.labels[p] if e.test.has_label[p] else None
    tests = (spec or {}).get("test", [])
    if i < len(tests):
        return np.array(tests[i]["input"]), np.array(tests[i]["output"]) if "output" in tests[i] else None
    return None, None


def _pairs(test: TestPuzzles) -> dict[tuple[str, int], int]:
    # (task, test index) -> pair index
    return {
        (test.task_names[t], int(i)): p for p, (t, i) in enumerate(zip(test.pair_task, test.pair_index, strict=True))
    }


def _maybe_grid(grid: np.ndarray | None, title: str) -> str:
    if grid is None:
        return f'<span class="problem">{html.escape(title)}: not known</span>'
    return svg_grid(grid, title)


def _size(task: str, spec: Mapping[str, Any] | None, evaluations: Sequence[Evaluation]) -> int:
    # the task's size: the cells of its largest test input
    sizes = []
    for i in range(max((len(e.answers.get(task, [])) for e in evaluations), default=0)):
        given, _ = _truth(task, i, spec, evaluations)
        if given is not None:
            sizes.append(int(given.size))
    return max(sizes, default=0)


def _solved_by(task: str, evaluations: Sequence[Evaluation]) -> int:
    return sum(status(e.answers.get(task)) == "solved" for e in evaluations)


def _colour(c: int) -> str:
    return PALETTE[c] if 0 <= c < len(PALETTE) else "#FFFFFF"  # a canvas model's pixel id 10 or 11: white


def _json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def _per_puzzle(path: Path, problems: list[str]) -> pd.DataFrame | None:
    try:
        return pd.read_csv(path, dtype={"puzzle": str})
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as err:
        problems.append(f"{path} cannot be read ({type(err).__name__}): right and wrong are not known")
        return None


def _members(info: Mapping[str, Any], test: TestPuzzles | None, problems: list[str]) -> list[tuple[str, Votes]]:
    # an ensemble of runs (info.pooled: each member's votes.npz): each member's votes, on the same test pairs
    pooled = info.get("pooled") if isinstance(info.get("pooled"), list) else []
    members = []
    for path in map(Path, pooled if test is not None and info.get("ensemble") else []):
        name = f"{path.parent.parent.name}/{path.parent.name}"
        try:
            votes, member_test = load_votes(path)
        except ArcpipeError as err:
            problems.append(f"member {name}: {err}")
            continue
        if member_test.task_names != test.task_names:
            problems.append(f"member {name}: another test set than the ensemble's")
            continue
        members.append((name, votes))
    return members


def _votes_for(votes: Votes, p: int, grid: np.ndarray) -> int:
    for c in range(votes.start[p], votes.start[p + 1]):
        other = votes.grids[c]
        if other.shape == grid.shape and np.array_equal(other, grid):
            return int(votes.count[c])
    return 0


def _fit_losses(folder: Path, problems: list[str]) -> dict[str, float]:
    # a test-time training's last fit loss per task, from its job files where they are kept
    match = re.fullmatch(r"ttt_epoch_(\d+)", folder.name)
    if not match:
        return {}
    results = folder.parent.parent.parent  # results/eval/RUN/ttt_epoch_N -> results
    jobs = paths.under(results, paths.TTT_JOB, run=folder.parent.name, epoch=match[1], job="*")
    losses: dict[str, float] = {}
    for path in sorted(jobs.parent.glob(jobs.name)):
        try:
            with np.load(path) as part:
                summary = json.loads(str(part["summary"]))
        except (OSError, KeyError, ValueError):
            problems.append(f"{path}: cannot read its summary: no fit loss")
            continue
        for task, stats in (summary.get("stats") or {}).items():
            if isinstance(stats, dict) and stats.get("last_loss") is not None:
                losses[task] = float(stats["last_loss"])
    return losses


def write_report_pages(
    report_dir: str | Path,
    metrics_paths: Sequence[str | Path],
    dataset_dirs: Sequence[str | Path],
    files: Sequence[str | Path],
    main_k: int = 2,
) -> list[Path]:
    """The task pages in report_dir/tasks/ (`write_task_pages`) and report_dir/index.html, the front page that links
    `files` (the report's tables and plots, `write_front_page`) and the task index: rule render_task_pages and
    `arcpipe report`. The files written, the front page last."""
    report_dir = Path(report_dir)
    written = write_task_pages(report_dir / TASKS, metrics_paths, dataset_dirs, main_k, one_file=report_dir / ONE_FILE)
    return [*written, write_front_page(report_dir, files, written[0])]
