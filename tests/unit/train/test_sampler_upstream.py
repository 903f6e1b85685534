"""arcpipe's sampler draws what upstream's draws: statistics of arcpipe's training batches and VARC canvas placements
against those of upstream's own samplers on the same dataset.

The goldens (tests/data/sampler/) come from tests/tools/record_sampler_stats.py: TRM's and URM's `PuzzleDataset`
run for 1000-2000 passes on an `upstream_exact` build of 15 real ARC tasks at num_aug 100 (groups of 36-101
puzzles with 2-12 examples each), every visit written down (its puzzle, the rows it gave a kept batch, the position
of its first row within the puzzle) with the batches of each pass; and VARC's `ARCDataset` placement (scale, x and
y offsets) drawn 20,000 times for each of 8 example sizes. Here arcpipe's `plan_pass` / `batch_rows` run the same
passes (its own seed and hashes: the draws differ, the distributions must not) and `canvas_draws` +
`draw_placement` the same placements.

Exact where a quantity is deterministic: every epoch visits every group once and offers the same examples; arcpipe's
packing of upstream's own visit sequences gives upstream's rows per visit and batches per pass, every pass; every
kept batch is full. Statistical otherwise, with a false-alarm rate of 1e-6 per comparison (the seeds are fixed,
so nothing flakes; the rate says how surprising a failure would be if the distributions were equal):

* quantities of a whole pass (passes are independent on both sides): batches per pass, visits cut at a batch end,
  rows lost in the dropped last partial batch (chi-square test of homogeneity over their values), and each group's
  rows per pass and the number of visits giving k rows (Welch z-tests, Bonferroni over the components);
* quantities of a visit (independent across visits on both sides): the puzzle chosen within its group, the position
  within the puzzle of the visit's first row (chi-square tests of homogeneity);
* VARC: per example size, the scale, and (scale, x offset) and (scale, y offset) jointly (chi-square).

Columns of a chi-square table whose expected count is below 5 are pooled. Planted bugs (never the group's last
puzzle, the last partial batch kept, a visit's examples in file order, VARC's scale range one short or sized from
the input alone) fail it.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from arcpipe.data.canvas import draw_placement
from arcpipe.train import sampler
from arcpipe.train.sampler import PassPlan, batch_rows, canvas_draws, plan_for, plan_pass

DATA = Path(__file__).parents[2] / "data" / "sampler"
ALPHA = 1e-6  # false-alarm rate of each comparison
NO_ROW = 255
SEED = 1234  # arcpipe's seed here: any seed must give upstream's distributions


@pytest.fixture(scope="module")
def golden() -> tuple[dict[str, np.ndarray], dict]:
    raw = (DATA / "upstream_stats.npz").read_bytes()
    with np.load(io.BytesIO(raw)) as data:
        arrays = {k: data[k] for k in data.files}
    return arrays, json.loads((DATA / "upstream_stats.json").read_text())


@pytest.fixture(scope="module")
def split(golden) -> SimpleNamespace:
    arrays, meta = golden
    for field in ("puzzle_indices", "group_indices"):
        buffer = io.BytesIO()
        np.save(buffer, arrays[field])
        assert hashlib.sha256(buffer.getvalue()).hexdigest() == meta["dataset_sha256"][field]
    return SimpleNamespace(puzzle_indices=arrays["puzzle_indices"], group_indices=arrays["group_indices"])


def _upstream(golden, name: str) -> dict[str, np.ndarray]:
    arrays, _ = golden
    return {k: arrays[f"{name}_{k}"] for k in ("puzzle", "taken", "first", "batches")}


PlanFn = Callable[..., PassPlan]


def arcpipe_run(
    split, run: dict, passes: int, rows_passes: int, plan_fn: PlanFn = plan_pass, rows_fn=batch_rows
) -> dict:
    """The record_sampler_stats.py record of arcpipe's sampler: per visit puzzle, rows taken, first row's position
    (its rows drawn in the first `rows_passes` passes only: NO_ROW in the others)."""
    batch, epochs = run["global_batch_size"], run["epochs_per_pass"]
    out: dict[str, list] = {"puzzle": [], "taken": [], "first": [], "batches": []}
    for p in range(passes):
        plan = plan_fn(split, SEED, p, epochs, batch)
        first = np.full(len(plan.puzzles), NO_ROW)
        if p < rows_passes and plan.num_batches:
            examples = np.concatenate([rows_fn(split, plan, b, batch, SEED, p)[0] for b in range(plan.num_batches)])
            kept = plan.taken > 0
            first[kept] = examples[plan.row_start[kept]] - split.puzzle_indices[plan.puzzles[kept]]
        out["puzzle"].append(plan.puzzles)
        out["taken"].append(plan.taken)
        out["first"].append(first)
        out["batches"].append(plan.num_batches)
    return {k: np.asarray(v) if k == "batches" else np.concatenate(v) for k, v in out.items()}


# ---------------------------------------------------------------------------------------------------------------
# statistics of a record (upstream's or arcpipe's), and the tests


def pass_stats(split, record: dict, run: dict) -> dict[str, np.ndarray]:
    """Per pass (rows = passes): quantities whose distributions the two samplers must share."""
    counts = np.diff(split.puzzle_indices).astype(np.int64)
    groups_of = np.searchsorted(split.group_indices, np.arange(len(counts)), side="right") - 1
    num_groups = len(split.group_indices) - 1
    passes = len(record["batches"])
    puzzle = record["puzzle"].astype(np.int64).reshape(passes, -1)
    taken = record["taken"].astype(np.int64).reshape(passes, -1)
    n = counts[puzzle]
    group = groups_of[puzzle]
    rows_per_group = np.stack([np.where(group == g, taken, 0).sum(1) for g in range(num_groups)], axis=1)
    kmax = int(counts.max())
    return {
        "batches": record["batches"].astype(np.int64),
        "cut_visits": ((taken > 0) & (taken < n)).sum(1),
        "tail_rows": (np.where(taken == 0, n, 0)).sum(1),
        "rows_per_group": rows_per_group,
        "visits_taking_k": np.stack([(taken == k).sum(1) for k in range(kmax + 1)], axis=1),
    }


def visit_tables(split, record: dict) -> dict[str, np.ndarray]:
    """Counts over visits (independent draws): the puzzle chosen; (puzzle size, position of the first row)."""
    counts = np.diff(split.puzzle_indices).astype(np.int64)
    kmax = int(counts.max())
    kept = (record["taken"] > 0) & (record["first"] != NO_ROW)
    n, first = counts[record["puzzle"][kept].astype(np.int64)], record["first"][kept].astype(np.int64)
    return {
        "puzzle": np.bincount(record["puzzle"].astype(np.int64), minlength=len(counts)),
        "first_position": np.bincount(n * (kmax + 1) + first, minlength=(kmax + 1) ** 2),
    }


def chi2_homogeneity(a: np.ndarray, b: np.ndarray) -> tuple[float, float, int]:
    """Chi-square test that two count vectors come from one distribution: (statistic, p, degrees of freedom).
    Columns with an expected count below 5 on either side are pooled into one."""
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    na, nb = a.sum(), b.sum()
    total = a + b
    small = (total * min(na, nb) / (na + nb)) < 5
    a = np.append(a[~small], a[small].sum())
    b = np.append(b[~small], b[small].sum())
    total = a + b
    keep = total > 0
    a, b, total = a[keep], b[keep], total[keep]
    df = len(total) - 1
    if df == 0:
        return 0.0, 1.0, 0
    ea, eb = total * na / (na + nb), total * nb / (na + nb)
    stat = float((((a - ea) ** 2) / ea).sum() + (((b - eb) ** 2) / eb).sum())
    p = float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64), torch.tensor(stat / 2.0)))
    return stat, p, df


def welch(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per column of (passes, K) arrays: (two-sided p of Welch's z for equal means, the smallest difference of means
    the test finds with power 0.99 at the Bonferroni level ALPHA / K)."""
    a, b = np.asarray(a, np.float64).reshape(len(a), -1), np.asarray(b, np.float64).reshape(len(b), -1)
    se = np.sqrt(a.var(0, ddof=1) / len(a) + b.var(0, ddof=1) / len(b))
    diff = a.mean(0) - b.mean(0)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(se > 0, np.abs(diff) / se, np.where(diff == 0, 0.0, np.inf))
    p = np.array([math.erfc(v / math.sqrt(2)) for v in z])
    k = a.shape[1]
    z_alpha = _normal_quantile(1 - ALPHA / (2 * k))
    return p, (z_alpha + _normal_quantile(0.99)) * se


def _normal_quantile(q: float) -> float:
    return float(torch.special.ndtri(torch.tensor(q, dtype=torch.float64)))


def compare(split, upstream: dict, ours: dict, run: dict) -> dict[str, str]:
    """Every statistical comparison of two records: {name: failure message} for those that fail at ALPHA."""
    failures = {}
    up, me = pass_stats(split, upstream, run), pass_stats(split, ours, run)
    for name in ("batches", "cut_visits", "tail_rows"):
        values = np.union1d(up[name], me[name])
        a, b = (np.bincount(np.searchsorted(values, x[name]), minlength=len(values)) for x in (up, me))
        stat, p, df = chi2_homogeneity(a, b)
        if p < ALPHA:
            failures[name] = f"chi2 {stat:.1f} on {df} df, p={p:.2e}"
    for name in ("rows_per_group", "visits_taking_k"):
        p, _ = welch(up[name], me[name])
        k = p.shape[0]
        if (p < ALPHA / k).any():
            worst = int(p.argmin())
            failures[name] = f"column {worst}: upstream {up[name][:, worst].mean():.3f} against arcpipe "
            failures[name] += f"{me[name][:, worst].mean():.3f} per pass, p={p[worst]:.2e} (Bonferroni over {k})"
    up_v, me_v = visit_tables(split, upstream), visit_tables(split, ours)
    for name in up_v:
        stat, p, df = chi2_homogeneity(up_v[name], me_v[name])
        if p < ALPHA:
            failures[name] = f"chi2 {stat:.1f} on {df} df, p={p:.2e}"
    return failures


RUNS = ("trm_a", "trm_b", "urm_a")
PASSES, ROWS_PASSES = 600, 200  # arcpipe's passes per configuration, and those whose rows are drawn (seconds)


@pytest.fixture(scope="module")
def ours(split, golden) -> dict[str, dict]:
    """arcpipe's record for each run's configuration (trm_a and urm_a share one: global batch 32, 4 epochs)."""
    runs = golden[1]["runs"]
    records: dict[tuple, dict] = {}
    for name in RUNS:
        key = (runs[name]["global_batch_size"], runs[name]["epochs_per_pass"])
        if key not in records:
            records[key] = arcpipe_run(split, runs[name], PASSES, ROWS_PASSES)
    return {name: records[(runs[name]["global_batch_size"], runs[name]["epochs_per_pass"])] for name in RUNS}


# ---------------------------------------------------------------------------------------------------------------
# exact


@pytest.mark.parametrize("name", RUNS)
def test_every_epoch_visits_every_group_once_and_offers_the_same_examples(split, golden, ours, name):
    run = golden[1]["runs"][name]
    counts = np.diff(split.puzzle_indices)
    groups_of = np.searchsorted(split.group_indices, np.arange(len(counts)), side="right") - 1
    num_groups = len(split.group_indices) - 1
    offered = int(sum(counts[split.group_indices[g]] for g in range(num_groups)))  # a group's puzzles: one size
    assert all(len(set(counts[split.group_indices[g] : split.group_indices[g + 1]])) == 1 for g in range(num_groups))
    for record in (_upstream(golden, name), ours[name]):
        puzzle = record["puzzle"].astype(np.int64).reshape(-1, num_groups)  # (passes x epochs, groups)
        assert (np.sort(groups_of[puzzle], axis=1) == np.arange(num_groups)).all()
        assert (counts[puzzle].sum(1) == offered).all()  # examples offered per epoch: 92 on this dataset
        assert len(puzzle) == len(record["batches"]) * run["epochs_per_pass"]


@pytest.mark.parametrize("name", RUNS)
def test_packing_upstreams_own_visits_gives_its_rows_and_batches_every_pass(split, golden, ours, name):
    run = golden[1]["runs"][name]
    upstream = _upstream(golden, name)
    counts = np.diff(split.puzzle_indices).astype(np.int64)
    visits = upstream["puzzle"].astype(np.int64).reshape(run["passes"], -1)
    taken = upstream["taken"].astype(np.int64).reshape(run["passes"], -1)
    for p in range(run["passes"]):
        ours_taken, _, ours_batches = sampler._pack(counts[visits[p]], run["global_batch_size"])
        assert ours_batches == upstream["batches"][p], p
        assert np.array_equal(ours_taken, taken[p]), p
    for record in (upstream, ours[name]):  # every kept batch is full
        per_pass = record["taken"].astype(np.int64).reshape(len(record["batches"]), -1).sum(1)
        assert np.array_equal(per_pass, record["batches"].astype(np.int64) * run["global_batch_size"])


# ---------------------------------------------------------------------------------------------------------------
# distributions


@pytest.mark.parametrize("name", RUNS)
def test_arcpipe_draws_upstreams_distributions(split, golden, ours, name):
    run = golden[1]["runs"][name]
    failures = compare(split, _upstream(golden, name), ours[name], run)
    assert not failures, failures


def test_trm_and_urm_draw_the_same_distributions(split, golden):
    # URM takes a visit's examples from the pass's Philox generator, TRM from NumPy's global one
    failures = compare(split, _upstream(golden, "trm_a"), _upstream(golden, "urm_a"), golden[1]["runs"]["trm_a"])
    assert not failures, failures


def test_the_comparison_sees_small_differences(split, golden, ours):
    """Power: what the per-pass tests would find (difference of means, power 0.99 at ALPHA), against the means."""
    run = golden[1]["runs"]["trm_a"]
    up, me = pass_stats(split, _upstream(golden, "trm_a"), run), pass_stats(split, ours["trm_a"], run)
    _, detectable = welch(up["rows_per_group"], me["rows_per_group"])
    share = detectable / up["rows_per_group"].mean(0)
    assert share.max() < 0.08  # a group's rows per pass off by 8% is found (measured: 4.6-7.1%)
    _, detectable = welch(up["batches"][:, None], me["batches"][:, None])
    assert detectable[0] < 0.02 * up["batches"].mean()


# ---------------------------------------------------------------------------------------------------------------
# planted bugs: each must fail


def _never_last_puzzle(split, seed, pass_index, epochs, batch) -> PassPlan:
    plan = plan_pass(split, seed, pass_index, epochs, batch)
    groups = np.searchsorted(split.group_indices, plan.puzzles, side="right") - 1
    last = split.group_indices[groups + 1] - 1
    puzzles = np.where(plan.puzzles == last, last - 1, plan.puzzles)
    return PassPlan(puzzles, plan.taken, plan.row_start, plan.num_batches)  # same sizes within a group


def _keeps_partial_batch(split, seed, pass_index, epochs, batch) -> PassPlan:
    plan = plan_pass(split, seed, pass_index, epochs, batch)
    counts = np.diff(split.puzzle_indices)[plan.puzzles]
    limit = plan.num_batches * batch
    taken = np.where(plan.row_start >= limit, counts, plan.taken)
    return PassPlan(plan.puzzles, taken, plan.row_start, int(-(-taken.sum() // batch)))


def _file_order(split, plan, b, batch, seed, pass_index):
    examples, puzzles = batch_rows(split, plan, b, batch, seed, pass_index)
    for v in np.nonzero(plan.taken)[0]:
        lo = plan.row_start[v] - b * batch
        if 0 <= lo < batch:
            examples[lo : lo + plan.taken[v]] = split.puzzle_indices[plan.puzzles[v]] + np.arange(plan.taken[v])
    return examples, puzzles


@pytest.mark.parametrize(
    ("bug", "kwargs", "caught"),
    [
        # 1 visit in 100 moved to its neighbour: p = 2e-7 after 300 passes, so 600
        ("never the group's last puzzle", {"plan_fn": _never_last_puzzle, "rows_passes": 0, "passes": 600}, {"puzzle"}),
        ("the last partial batch kept", {"plan_fn": _keeps_partial_batch, "rows_passes": 0}, {"batches", "tail_rows"}),
        ("a visit's examples in file order", {"rows_fn": _file_order, "rows_passes": 100}, {"first_position"}),
    ],
)
def test_planted_sampler_bugs_fail(split, golden, bug, kwargs, caught):
    run = golden[1]["runs"]["trm_a"]
    buggy = arcpipe_run(split, run, **{"passes": 300, **kwargs})
    failures = compare(split, _upstream(golden, "trm_a"), buggy, run)
    assert caught <= set(failures), (bug, failures)
    if kwargs.get("plan_fn") is _keeps_partial_batch:  # and the exact check sees it at once
        per_pass = buggy["taken"].astype(np.int64).reshape(300, -1).sum(1)
        assert not np.array_equal(per_pass, buggy["batches"].astype(np.int64) * run["global_batch_size"])


# ---------------------------------------------------------------------------------------------------------------
# VARC's canvas placement


def varc_tables(sizes: np.ndarray, canvas: int, draws: int, placement=draw_placement) -> tuple[np.ndarray, ...]:
    """arcpipe's placements as training draws them (stream = step, positions = rows of the step's batch of 32),
    example e at every row r with r % len(sizes) == e: counts of (scale, x) and (scale, y) per example."""
    batch, num = 32, len(sizes)
    steps = -(-draws * num // batch)
    u = np.concatenate([canvas_draws(SEED, step, np.arange(batch)) for step in range(1, steps + 1)])[: draws * num]
    e = np.arange(len(u)) % num
    t = torch.from_numpy(sizes.astype(np.int64)[e])
    where = placement((t[:, 0], t[:, 1]), (t[:, 2], t[:, 3]), torch.from_numpy(u), canvas)
    s, y, x = (v.numpy() for v in where)
    side = canvas - 1
    sx = np.zeros((num, side, side), np.int64)
    sy = np.zeros_like(sx)
    np.add.at(sx, (e, s, x), 1)
    np.add.at(sy, (e, s, y), 1)
    return sx, sy


def varc_failures(golden, sx: np.ndarray, sy: np.ndarray) -> dict[str, str]:
    arrays, _ = golden
    failures = {}
    for e in range(len(arrays["varc_sizes"])):
        tables = {
            "scale": (arrays["varc_sx"][e].sum(1), sx[e].sum(1)),
            "scale_x": (arrays["varc_sx"][e], sx[e]),
            "scale_y": (arrays["varc_sy"][e], sy[e]),
        }
        for name, (a, b) in tables.items():
            stat, p, df = chi2_homogeneity(a, b)
            if p < ALPHA:
                failures[f"{tuple(arrays['varc_sizes'][e])} {name}"] = f"chi2 {stat:.1f} on {df} df, p={p:.2e}"
    return failures


def test_varc_placement_draws_upstreams_distribution(golden):
    arrays, meta = golden
    sx, sy = varc_tables(arrays["varc_sizes"], meta["varc"]["canvas"], meta["varc"]["draws_per_example"])
    # the same support: a range one off at either end leaves cells one side never fills
    assert np.array_equal(sx > 0, arrays["varc_sx"] > 0) and np.array_equal(sy > 0, arrays["varc_sy"] > 0)
    failures = varc_failures(golden, sx, sy)
    assert not failures, failures


def _scale_one_short(in_hw, out_hw, u, canvas):
    where = draw_placement(in_hw, out_hw, u, canvas)
    height, width = torch.maximum(in_hw[0], out_hw[0]), torch.maximum(in_hw[1], out_hw[1])
    top = ((canvas - 2) // torch.maximum(height, width)).clamp(min=2) - 1  # 1..max-1 instead of 1..max
    scale = 1 + torch.minimum((u[:, 0] * top).floor().long(), top - 1)
    return where._replace(scale=scale)  # offsets as drawn for the true scale: only the scale is wrong


def _input_only(in_hw, out_hw, u, canvas):
    return draw_placement(in_hw, None, u, canvas)


@pytest.mark.parametrize("bug", [_scale_one_short, _input_only])
def test_planted_varc_bugs_fail(golden, bug):
    arrays, meta = golden
    sx, sy = varc_tables(arrays["varc_sizes"], meta["varc"]["canvas"], 4000, placement=bug)
    assert varc_failures(golden, sx, sy)


# ---------------------------------------------------------------------------------------------------------------
# `sampler: examples`: upstream VARC's offline loader (a PyTorch DataLoader, shuffle=True over the examples)


def test_examples_sampler_takes_every_example_once_per_epoch_in_full_batches(split):
    n, batch, epochs = int(split.puzzle_indices[-1]), 32, 3
    plan = plan_for("examples")(split, SEED, 2, epochs, batch)
    assert plan.num_batches == epochs * (n // batch)  # an epoch's short last batch dropped (upstream keeps it)
    rows = [batch_rows(split, plan, b, batch, SEED, 2) for b in range(plan.num_batches)]
    examples = np.concatenate([e for e, _ in rows]).reshape(epochs, -1)
    puzzles = np.concatenate([p for _, p in rows]).reshape(epochs, -1)
    for epoch in range(epochs):
        assert len(np.unique(examples[epoch])) == n // batch * batch  # no example twice within an epoch
        assert (split.puzzle_indices[puzzles[epoch]] <= examples[epoch]).all()
        assert (examples[epoch] < split.puzzle_indices[puzzles[epoch] + 1]).all()
    assert not np.array_equal(examples[0], examples[1])  # a new order every epoch
    # batches mix tasks as a shuffle does: groups (tasks) per batch of 32 rows, the 15 groups holding 202-1212 of the
    # 8583 examples
    groups = np.searchsorted(split.group_indices, puzzles, side="right") - 1
    per_batch = [len(np.unique(g)) for g in groups.reshape(-1, batch)]
    assert 11.5 < np.mean(per_batch) < 13  # a uniform shuffle expects 12.2; the puzzle sampler gives 5.6
    assert plan_for(None) is plan_pass


def test_examples_sampler_is_a_run_setting_dumped_only_when_set():
    from arcpipe.config.runs import RunConfig

    base = {"dataset": "d", "arch": "varc", "preset": "tiny", "target": "smoke", "epochs": 2, "eval_interval": 1}
    assert "sampler" not in RunConfig(**base).model_dump()
    assert RunConfig(**base, sampler="examples").model_dump()["sampler"] == "examples"
