"""Successive halving across a sweep's arms (`sweeps.<name>.halving`, docs/sweeps.md): at each rung, rank the arms
still training and keep the best 1/eta.

    record = decide_rung("lr", 2, halving, metrics_paths, cfg, out)   # rule decide_rung: writes the rung's record

An arm's score at a rung is the mean over its seeds of each seed's full evaluation there, on the held-out selection
tasks (arcpipe.stopping.boundary_score: the draw the report's checkpoint selection holds out; every test task, said
so, when evaluation.selection_tasks is 0), so the numbers the report prints are never the ones that chose. The arms
are ranked by score, ties by their order in the grid, and the best ceil(n / eta) are kept (at least one). The record
(results/sweeps/<name>/rungs/epoch_<E>.json) names the kept and the stopped arms with each arm's score, rank and
why; arcpipe.plan reads `kept`, and an arm that is not kept ends at the rung as a stop rule ends a run.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from arcpipe import paths
from arcpipe.config import ArcpipeError, WorkflowConfig
from arcpipe.config.sweeps import HalvingConfig
from arcpipe.files import atomic_write_many
from arcpipe.report.load import read_per_puzzle
from arcpipe.stopping import boundary_score


def rank_arms(scores: Mapping[str, float], halving: HalvingConfig) -> tuple[list[str], dict[str, int]]:
    """(kept arms, arm -> rank from 1): by score, highest first, ties in the mapping's order; `halving.kept` kept."""
    order = sorted(scores, key=lambda arm: (-scores[arm], list(scores).index(arm)))
    keep = halving.kept(len(order))
    return order[:keep], {arm: i + 1 for i, arm in enumerate(order)}


def decide_rung(
    sweep: str,
    epoch: int,
    halving: HalvingConfig,
    metrics_paths: Sequence[str | Path],
    cfg: WorkflowConfig,
    out: str | Path,
) -> dict[str, Any]:
    """Rank the arms whose full evaluations at `epoch` are `metrics_paths` (results/eval/<run>/epoch_<E>/
    metrics.json, every seed of every arm still training) and write the rung's record to `out`; return it."""
    per_puzzle = read_per_puzzle(list(map(str, metrics_paths)))
    arms: dict[str, dict[int, float]] = {}
    tasks = ""
    for path, frame in per_puzzle.items():
        run = _run_of(path)
        tag = cfg.runs[run].sweep if run in cfg.runs else None
        if tag is None or tag.name != sweep:
            raise ArcpipeError(f"{path}: not the evaluation of an arm of sweep {sweep}; the rung reads only its arms")
        score = boundary_score(
            frame, epoch, halving.metric, cfg.evaluation.selection_tasks, cfg.datasets[cfg.runs[run].dataset].seed
        )
        arms.setdefault(tag.arm, {})[cfg.runs[run].seed] = score.value
        tasks = score.tasks
    order = [arm for arm in _grid_order(cfg, sweep) if arm in arms]
    means = {arm: sum(arms[arm].values()) / len(arms[arm]) for arm in order}
    kept, ranks = rank_arms(means, halving)
    record = rung_record(sweep, epoch, halving, means, {a: sorted(arms[a]) for a in order}, kept, ranks, tasks)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_many(Path(out).parent, {Path(out).name: (json.dumps(record, indent=2) + "\n").encode()})
    return record


def rung_record(
    sweep: str,
    epoch: int,
    halving: HalvingConfig,
    means: Mapping[str, float],
    seeds: Mapping[str, list[int]],
    kept: list[str],
    ranks: Mapping[str, int],
    tasks: str,
) -> dict[str, Any]:
    """The rung's record: what plan.DiskRecords reads (`kept`) and what the report and the driver print."""
    n, keep = len(means), len(kept)
    arms = {
        arm: {
            "score": means[arm],
            "seeds": seeds[arm],
            "rank": ranks[arm],
            "kept": arm in kept,
            "why": f"rank {ranks[arm]} of {n} on {halving.metric} "
            + (
                f"(the best {keep} go on)" if arm in kept else f"(only the best {keep} go on): stopped at epoch {epoch}"
            ),
        }
        for arm in means
    }
    cut = [means[kept[-1]], *(means[arm] for arm in means if arm not in kept)][:2]
    return {
        "sweep": sweep,
        "epoch": epoch,
        "metric": halving.metric,
        "eta": halving.eta,
        "tasks": tasks,
        # the last arm kept and the best arm stopped scored alike: the grid's order, not the scores, drew the line
        "tie_at_cut": len(cut) == 2 and cut[0] == cut[1],
        "kept": kept,
        "stopped": [arm for arm in means if arm not in kept],
        "arms": arms,
    }


def rung_line(record: Mapping[str, Any], path: str | Path) -> str:
    """One line for the driver's output: the rung, who goes on, who stops."""
    stopped = ", ".join(record["stopped"]) or "none"
    tie = (
        "; WARNING: the last arm kept and the best arm stopped scored alike, so the grid's order chose between them "
        "(a rung before the arms score apart decides nothing: move it later, or rank on metric: cell_accuracy)"
        if record.get("tie_at_cut")
        else ""
    )
    return (
        f"halving: sweep {record['sweep']} rung at epoch {record['epoch']} on {record['metric']} ({record['tasks']}): "
        f"{', '.join(record['kept'])} go on; stopped: {stopped} (record {path}){tie}"
    )


def _run_of(path: str) -> str:
    match = paths.parse(paths.FULL, path)
    if match is None:
        raise ArcpipeError(f"{path}: not a full evaluation's metrics.json (results/eval/<run>/epoch_<E>/metrics.json)")
    return match["run"]


def _grid_order(cfg: WorkflowConfig, sweep: str) -> list[str]:
    """The sweep's arms in the grid's order (ties in a rung go to the earlier arm)."""
    return list(dict.fromkeys(cfg.runs[name].sweep.arm for name in cfg.arms_of(sweep)))
