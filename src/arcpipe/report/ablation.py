"""The ablation table (issue 36): one row per arm of an experiment, each arm a set of runs that differ only in
their seed, compared with the base arm on the same seeds and the same test tasks.

    ablation_table(evals, per_puzzle, arms={"base": {0: "x-s0", 1: "x-s1"}, "ema": {0: "y-s0", 1: "y-s1"}},
                   base="base", hours=gpu_hours_spent(cfg, hours_spent(...)), held_out=selection_tasks)

Each arm is read at each of its runs' last evaluated checkpoint (where it stopped, or its last epoch) and scored
from the evaluations' per-task results (per_puzzle.csv) on the reported tasks: the test tasks less `held_out`, the
tasks checkpoint selection or a halving rung read (a number chosen on some tasks is reported on the others). Per
arm and pass@K (and attempt 1's cell accuracy, where the evaluations wrote it): the mean over seeds and its 95%
Student-t interval. Against the base, at pass@`main_k`: the paired
difference over the seeds both arms have (its interval and the paired t-test's p), and over tasks (each task's
score averaged over the arm's seeds): the exact sign test (wins, losses, p) and the bootstrap interval of the mean
difference (arcpipe.report.paired says how each is computed). GPU-hours: the arm's runs together, training and
evaluation (`hours`: per run, summary.gpu_hours_spent: RunConfig.gpu_hours, as the summary, the forecast and the
driver's lines count them). Scores are percentages, as in the other tables.

Like with like: each row says how its runs' numbers were scored (`protocol`: test-time training or not, which test
views, which checkpoint; `protocols` gives the last two per run, the first is read off the evaluation used), and
`protocol_vs_base` names every part that differs from the base's ("" where none does): such a row's difference from
the base is not a like-for-like comparison, and the table's notes say so.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import PurePath

import pandas as pd

from arcpipe.config import ArcpipeError
from arcpipe.report.paired import bootstrap_interval, mean_interval, over_seeds, sign_test
from arcpipe.report.selection import task_scores


def ablation_table(
    evals: pd.DataFrame,
    per_puzzle: Mapping[str, pd.DataFrame],
    arms: Mapping[str, Mapping[int, str]],
    base: str,
    main_k: int = 2,
    ks: tuple[int, ...] = (1, 2),
    hours: pd.Series | None = None,
    held_out: Collection[str] = (),
    bootstrap_draws: int = 10_000,
    protocols: Mapping[str, Mapping[str, str]] | None = None,
) -> pd.DataFrame:
    """One row per arm (in the order given, the base first): see the module docstring for each column.
    protocols: run -> {part: how}, e.g. {"views": "smoke, 9 per task", "checkpoint": "last"}."""
    if base not in arms:
        raise ArcpipeError(f"the base arm {base!r} is not an arm ({', '.join(arms)}); name one of them")
    metric = f"pass@{main_k}"
    read: dict[str, dict[int, str]] = {arm: {} for arm in arms}  # arm -> seed -> the metrics.json read
    scores = {arm: _arm_task_scores(evals, per_puzzle, runs, held_out, read[arm]) for arm, runs in arms.items()}
    protocol = {arm: _protocol(runs, read[arm], protocols or {}) for arm, runs in arms.items()}
    # attempt 1's cell accuracy (eval/score.py), where every evaluation read wrote it
    cells = all("cell_accuracy" in frame for by_seed in scores.values() for frame in by_seed.values())
    rows = []
    for arm in [base, *(a for a in arms if a != base)]:
        by_seed = scores[arm]
        row: dict[str, object] = {"arm": arm, "base": arm == base, "seeds": len(by_seed)}
        row["runs"] = ", ".join(arms[arm][seed] for seed in by_seed)
        row["protocol"] = _described(protocol[arm])
        row["protocol_vs_base"] = _differences(protocol[arm], protocol[base])
        for column in [f"pass@{k}" for k in ks] + ["cell_accuracy"] * cells:
            values = [100 * float(frame[column].mean()) for frame in by_seed.values()]
            mean, _, low, high = mean_interval(values)
            row |= {column: mean, f"{column}_ci95_low": low, f"{column}_ci95_high": high}
        if arm != base:
            row |= _against_base(by_seed, scores[base], metric, bootstrap_draws)
        if hours is not None:
            spent = hours.reindex([arms[arm][seed] for seed in by_seed]).fillna(0.0)
            row["gpu_hours"] = float(spent.to_numpy().sum())
        rows.append(row)
    return pd.DataFrame(rows)


def _arm_task_scores(
    evals: pd.DataFrame,
    per_puzzle: Mapping[str, pd.DataFrame],
    runs: Mapping[int, str],
    held_out: Collection[str],
    read: dict[int, str],
) -> dict[int, pd.DataFrame]:
    """seed -> per-task scores (fractions, index: task) of the run's last evaluated checkpoint, reported tasks only;
    seeds whose run has no evaluation yet are left out. read: seed -> the metrics.json used, filled in."""
    out = {}
    for seed, run in runs.items():
        rows = evals[evals["run"] == run]
        if rows.empty:
            continue
        path = rows.sort_values("epoch", kind="stable")["path"].iloc[-1]
        read[seed] = path
        if path not in per_puzzle:
            raise ArcpipeError(f"{path}: no per-task results beside it (per_puzzle.csv); re-run its evaluation")
        frame = task_scores(per_puzzle[path])
        out[seed] = frame.loc[[t for t in frame.index if t not in set(held_out)]]
    return out


def _against_base(
    arm: Mapping[int, pd.DataFrame], base: Mapping[int, pd.DataFrame], metric: str, draws: int
) -> dict[str, object]:
    """The paired comparisons at `metric`: over the seeds both have, and over tasks (seed-averaged scores)."""
    common = [seed for seed in arm if seed in base]
    if not common:
        return {}
    seeds = over_seeds(
        {s: 100 * float(arm[s][metric].mean()) for s in common},
        {s: 100 * float(base[s][metric].mean()) for s in common},
    )
    arm_tasks = (100 * pd.concat([arm[s][metric] for s in common], axis=1).mean(axis=1)).to_dict()
    base_tasks = (100 * pd.concat([base[s][metric] for s in common], axis=1).mean(axis=1)).to_dict()
    sign = sign_test(arm_tasks, base_tasks)
    low, high = bootstrap_interval(arm_tasks, base_tasks, draws=draws)
    return {
        f"diff_{metric}": seeds.mean,
        "diff_ci95_low": seeds.ci95[0],
        "diff_ci95_high": seeds.ci95[1],
        "p_seeds": seeds.p,
        "task_wins": sign.wins,
        "task_losses": sign.losses,
        "p_sign": sign.p,
        "task_bootstrap_low": low,
        "task_bootstrap_high": high,
    }


def _protocol(runs: Mapping[int, str], read: Mapping[int, str], given: Mapping[str, Mapping[str, str]]) -> dict:
    """part -> how the arm's runs were scored: test-time training (whether the evaluation read is test-time
    training's, results/eval/<run>/ttt_epoch_<E>/), then `given`'s parts; a part its seeds differ in lists each way."""
    ways: dict[str, list[str]] = {}
    for seed, path in read.items():
        parts = {"test-time training": "yes" if PurePath(path).parent.name.startswith("ttt_") else "no"}
        for part, how in {**parts, **given.get(runs[seed], {})}.items():
            if how not in ways.setdefault(part, []):
                ways[part].append(how)
    return {part: " | ".join(hows) for part, hows in ways.items()}


def _described(protocol: Mapping[str, str]) -> str:
    return "; ".join(f"{part}: {how}" for part, how in protocol.items())


def _differences(protocol: Mapping[str, str], base: Mapping[str, str]) -> str:
    """Each part where `protocol` differs from the base's, with the base's way: "" when scored like the base."""
    return "; ".join(
        f"{part}: {how} (base: {base.get(part, '-')})" for part, how in protocol.items() if base.get(part) != how
    )
