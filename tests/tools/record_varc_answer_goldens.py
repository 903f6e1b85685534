"""Record the VARC answer golden of tests/unit/eval/test_varc_import_answers.py: an upstream VARC-ViT checkpoint
answered and voted on by upstream VARC's own code.

    PYTHONPATH=TIMM_DIR python tests/tools/record_varc_answer_goldens.py --varc VARC_DIR --scratch SCRATCH \
        [--output tests/data/answers/varc] [--seed 0] [--tries 1]

VARC_DIR is a tree of lillian039/VARC at the commit of record_varc_goldens.py's UPSTREAM; TIMM_DIR holds timm 1.0.12
(`pip install --target TIMM_DIR timm==1.0.12 --no-deps`, outside the repository: only its PatchEmbed is loaded, as
record_varc_goldens.py does); SCRATCH is a scratch folder outside the repository. Upstream code runs from VARC_DIR,
never from here; `tqdm` is stubbed (a progress bar), upstream's scoring (utils/analyze_prediction.py) runs as it is.

What the script does:

1. Writes TASKS (three small synthetic tasks, below) as one JSON per task and builds arcpipe's dataset of them with
   `views: varc`: upstream's 51 test-time views of every task (the original; Rotate(90), Rotate(270), Rotate(180),
   Flip(0), Flip(1), each with the identity colours and 9 colour permutations).
2. Writes each view as upstream's pseudo-task file (`<task>_<rotate_90|...>[_perm<k>]_augmented.json`, with
   `augmentation.color_map` where the colours are permuted), the view's grids being arcpipe's; checks that upstream's
   own undo (its name resolver, then the inverse colour map) gives back the original test input of every view.
3. Builds upstream's ARCViT under torch.manual_seed(seed), one task token per arcpipe identifier (upstream's
   ARCDataset is given the lookup {view file: identifier index}, as build_dataloaders passes the train set's lookup,
   so that row i of upstream's table is arcpipe's identifier i and the import keeps it), and trains it
   FIT_EPOCHS epochs with upstream's loss (per-pixel cross entropy, 10 ignored), AdamW and clipping at 1 on upstream's
   own loader (ARCDataset, collate_fn, its random scale and offset) over every view's demonstrations and, for the
   tasks in MEMORISED, the view's test pair too: so that the answers have the canvas's structure (a border, blocks),
   and votes concentrate (some tasks answered right, others not) as a trained model's do. Saves it as upstream's
   checkpoint (`{"model_state": torch.compile(model).state_dict(), "config": vars(args)}`: upstream's
   `_orig_mod.` keys and its parse_args() namespace for this config).
4. For each task, upstream's `generate_predictions` (utils/eval_utils_ttt.py) answers the task's views ATTEMPTS times
   (its --num-attempts), each at the scale and offset upstream's ARCDataset draws (translation and resolution
   augmentation on, its `random.Random(42)`), undoes each view through `get_eval_rot_transform_resolver()` and the
   files' colour maps, and its `analyze_data` scores the task (pass@1, pass@2). Recorded per answer: the view, the
   test input, the attempt, and upstream's placement (scale, x, y), read from the batches its loader gave (the
   loader is wrapped, not changed); per test input: upstream's `get_majority_vote` ranking (every candidate and its
   votes), from which the submission (the two best; the best twice where there is one) and pass@K come.

The test holds arcpipe to upstream's own ranking (`votes.upstream`, `pass_at.upstream`, the readable `answers`).
For the record, the golden also keeps what arcpipe's decoding gave before it followed upstream's (data/canvas.py):
`votes.pooled` ranks the same answers with those two old rules, computed here from upstream's logits with
upstream's undo functions and colour maps: the s x s block majorities taken in the view's frame before the view is
undone (upstream: undone first; the grids differ where the crop is not a multiple of s, counted per test input in
`answers_moved_by_block_order`), and every answer arcpipe's 30 x 30 map cannot hold pooled into one empty candidate
(docs/varc.md). `answers` and `answers_blocks_in_view_frame` are every candidate with its votes, both ways;
`votes.upstream` and `pass_at.upstream` are upstream's own ranking and scores (its analyze_data's pass@1 and pass@2
are checked against them).

Stable answers only (as record_answer_goldens.py): a seed is refused when a cell the decoding reads (the crop, and
the border cells that end its first row and column), in either block order, has its two best logits within MARGIN
and would change the answer if it flipped, or when two of a test input's three best candidates have equal votes
(either ranking; equal counts are ordered by first appearance, which differs between upstream's loop, attempts
outermost, and arcpipe's, a row's attempts together), or when the right
answer shares its count with a candidate on the other side of a pass@K cut.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import re
import shutil
import sys
import time
import types
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch._dynamo  # noqa: F401  # before tqdm is stubbed: dynamo's import looks tqdm's spec up
import torch.nn.functional as F

TOOLS = Path(__file__).resolve().parent
sys.path.insert(0, str(TOOLS))
sys.path.insert(0, str(TOOLS.parent / "unit" / "eval"))
import answerkit  # noqa: E402
from record_varc_goldens import UPSTREAM, _upstream_tree  # noqa: E402

# upstream ARCViT's arguments: the smallest canvas that holds a 30 x 30 grid, 4 x 4 patches, width 32
CONFIG = dict(image_size=32, patch_size=4, embed_dim=32, depth=2, num_heads=2, mlp_dim=32, dropout=0.1, num_colors=12)
ATTEMPTS = 3  # upstream's --num-attempts: answers per view
BATCH_SIZE = 8  # upstream's --batch-size (the evaluation loader's batch)
FIT_EPOCHS = 80
FIT_BATCH, FIT_LR = 16, 2e-3
PASS_KS = (1, 2, 5, 10, 100, 1000)  # arcpipe's default
MARGIN = 1e-5  # float32 on both sides (explicit softmax upstream, SDPA here): differences of ~1e-6
SUBSET = "evaluation"
MEMORISED = ("a0000002", "a0000003")  # tasks whose test pairs the model is fitted on too
SLUG = {1: "rotate_90", 3: "rotate_270", 2: "rotate_180", 5: "flip_0", 4: "flip_1"}  # arcpipe tid -> upstream's name
MAX_BYTES = 400_000


def dataset_config(tasks_dir: Path) -> dict[str, Any]:
    """arcpipe's dataset of TASKS with upstream's 51 test-time views (the test builds the same)."""
    return {"sources": [{"directory": str(tasks_dir), "subset": SUBSET}], "test_set": SUBSET, "num_aug": 50,
            "views": "varc", "mode": "fast"}  # fmt: skip


def make_tasks() -> dict[str, dict[str, Any]]:
    """Three small tasks: a flip of 3 x 3 grids, a recolouring (1 -> 2) of 4 x 3 grids, a 2 x 2 grid tiled 2 x 2."""
    rng = np.random.RandomState(7)

    def pairs(n: int, shape: tuple[int, int], rule: Any) -> list[dict[str, Any]]:
        out = []
        for _ in range(n):
            grid = rng.choice([0, 0, 1, 3, 5], size=shape)
            out.append({"input": grid.tolist(), "output": rule(grid).tolist()})
        return out

    rules = {
        "a0000001": ((3, 3), np.fliplr),
        "a0000002": ((4, 3), lambda g: np.where(g == 1, 2, g)),
        "a0000003": ((2, 2), lambda g: np.tile(g, (2, 2))),
    }
    tasks = {}
    for name, (shape, rule) in rules.items():
        made = pairs(4, shape, rule)
        tasks[name] = {"train": made[:3], "test": made[3:]}
    return tasks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--varc", type=Path, required=True, help=f"{UPSTREAM[0]} at {UPSTREAM[1][:7]}")
    parser.add_argument("--scratch", type=Path, required=True, help="a scratch folder outside the repository")
    parser.add_argument("--output", type=Path, default=TOOLS.parent / "data" / "answers" / "varc")
    parser.add_argument("--seed", type=int, default=0, help="weight seed")
    parser.add_argument("--tries", type=int, default=1, help="seeds tried, from --seed up, until the margins hold")
    args = parser.parse_args()
    torch.set_num_threads(1)

    scratch = args.scratch.resolve()
    tasks = make_tasks()
    tasks_dir = scratch / "tasks"
    if tasks_dir.exists():
        shutil.rmtree(tasks_dir)
    tasks_dir.mkdir(parents=True)
    for name, task in tasks.items():
        (tasks_dir / f"{name}.json").write_text(json.dumps(task))
    data = scratch / "data"
    _build_dataset(dataset_config(tasks_dir), data)
    for seed in range(args.seed, args.seed + args.tries):
        result = record(args.varc, tasks, data, scratch / "upstream", seed)
        low = {k: v for k, v in result["margins"].items() if not (v >= MARGIN if k == "cell" else v)}
        if not low:
            break
        counts = {t: [v["counts"][:5] for v in vs] for t, vs in result["votes"]["pooled"].items()}
        print(f"seed {seed}: not stable: {low}; votes {counts}, fit {result['fit_s']:.0f} s")
    else:
        raise SystemExit(f"no seed in {args.seed}..{args.seed + args.tries - 1} gives stable answers")
    out = args.output
    if out.exists():
        shutil.rmtree(out)
    (out / "tasks").mkdir(parents=True)
    for name, task in tasks.items():
        (out / "tasks" / f"{name}.json").write_text(json.dumps(task) + "\n")
    torch.save(result.pop("checkpoint"), out / "checkpoint.pt")
    golden = {
        "upstream": {"repo": UPSTREAM[0], "commit": UPSTREAM[1], "sources_sha256": result.pop("sources")},
        "seed": seed,
        "torch_version": str(torch.__version__),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "config": CONFIG,
        "attempts": ATTEMPTS,
        "dataset": answerkit.dataset_hashes(data),
        **result,
    }
    (out / "upstream.json").write_text(json.dumps(golden) + "\n")
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    grids = sum(len(v) for v in golden["votes"]["upstream"].values()) * 2
    print(f"{out}: {grids} submission grids, pass@K {golden['pass_at']}, margins {golden['margins']}, {size} bytes")
    if size > MAX_BYTES:
        raise SystemExit(f"{out} holds {size} bytes, over {MAX_BYTES}")


def record(checkout: Path, tasks: dict[str, Any], data: Path, root: Path, seed: int) -> dict[str, Any]:
    from arcpipe.data.augment import parse_identifier

    identifiers = json.loads((data / "identifiers.json").read_text())
    test = json.loads((data / "test_puzzles.json").read_text())
    if root.exists():
        shutil.rmtree(root)
    lookup: dict[str, int] = {}  # view file stem -> arcpipe identifier (its task token)
    views: dict[str, str] = {}  # view file stem -> arcpipe identifier name
    seen: dict[tuple[str, int], int] = {}
    for index, name in enumerate(identifiers):
        task, aug = parse_identifier(name)
        if task not in tasks:
            continue  # <blank>
        if aug.tid == 0:
            assert aug.is_identity, name  # upstream's views: the original is the one identity-geometry view
            stem = task
        else:
            k = seen.get((task, aug.tid), 0)
            seen[(task, aug.tid)] = k + 1
            assert (k == 0) == (aug.colours == tuple(range(10))), name  # upstream's order: identity colours first
            stem = f"{task}_{SLUG[aug.tid]}" + (f"_perm{k}" if k else "") + "_augmented"

        def view(pair: dict[str, Any], aug: Any = aug) -> dict[str, Any]:
            return {key: aug.apply(np.array(grid)).tolist() for key, grid in pair.items()}

        fitted = [view(p) for p in tasks[task]["train"]] + ([view(p) for p in test[task]["test"]] if task in
                                                             MEMORISED else [])  # fmt: skip
        answered = {"train": [], "test": [view(p) for p in test[task]["test"]]}
        if aug.colours != tuple(range(10)):
            answered["augmentation"] = {"color_map": {str(c): int(n) for c, n in enumerate(aug.colours)}}
        for folder, payload in ((root / "data" / "fit", {"train": fitted}), (root / "data" / "views" / task, answered)):
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{stem}.json").write_text(json.dumps(payload))
        lookup[stem] = index
        views[stem] = name
    raw = root / "raw_data" / "ARC-AGI" / "data" / "evaluation"  # where upstream's analyze_data reads the answers
    raw.mkdir(parents=True)
    for task in tasks:
        (raw / f"{task}.json").write_text(json.dumps(test[task]))

    with _upstream_tree(checkout) as sources, _stub_tqdm():
        vit = importlib.import_module("src.ARC_ViT")
        loader = importlib.import_module("src.ARC_loader")
        ttt = importlib.import_module("utils.eval_utils_ttt")
        upstream_args = importlib.import_module("utils.args")
        _check_views(ttt, root, tasks, test)
        resolver = ttt.get_eval_rot_transform_resolver()
        torch.manual_seed(seed)
        model = vit.ARCViT(num_tasks=len(identifiers), **CONFIG)
        fit_s = _fit(model, loader, root, lookup)
        model.eval()
        logits_seen: list[torch.Tensor] = []
        hook = model.register_forward_hook(lambda m, args, out: logits_seen.append(out.detach().clone()))
        answers, placements, scores, gaps = {}, [], {}, []
        in_view_frame: dict[str, dict[str, list[Any]]] = {}
        for task in tasks:
            dataset = loader.ARCDataset(root, f"views/{task}", subset="test", max_size=CONFIG["image_size"],
                                        task_lookup=lookup)  # fmt: skip
            batches = _Recorded(torch.utils.data.DataLoader(dataset, batch_size=BATCH_SIZE, shuffle=False,
                                                            collate_fn=loader.collate_fn))  # fmt: skip
            logits_seen.clear()
            printed = io.StringIO()
            with contextlib.chdir(root), contextlib.redirect_stdout(printed):
                ttt.generate_predictions(model, batches, torch.device("cpu"), img_size=CONFIG["image_size"],
                                         eval_split=f"views/{task}", attempt_nums=ATTEMPTS,
                                         task_transform_resolver=ttt.get_eval_rot_transform_resolver(),
                                         save_name="answers", task_type="ARC-AGI")  # fmt: skip
            scores[task] = {k: float(v) for k, v in re.findall(r"Final Pass@(\d) Score: ([0-9.]+)", printed.getvalue())}
            answers[task] = json.loads((root / "outputs" / "answers" / f"{task}_predictions.json").read_text())
            assert len(batches.rows) == ATTEMPTS * len(dataset) == sum(len(v) for v in answers[task].values())
            for attempt in range(ATTEMPTS):
                for row in batches.rows[attempt * len(dataset) : (attempt + 1) * len(dataset)]:
                    placements.append({"view": views[row["file"]], **{k: row[k] for k in ("test", "s", "x", "y")},
                                       "attempt": attempt})  # fmt: skip
            logits = torch.cat(logits_seen)
            gaps.append(_cell_gap(logits, batches.rows, lambda f: resolver(f)[1]))
            inverse = {}
            for path in (root / "data" / "views" / task).glob("*.json"):
                colour_map = json.loads(path.read_text()).get("augmentation", {}).get("color_map", {})
                inverse[path.stem] = {int(v): int(k) for k, v in colour_map.items()}
            in_view_frame[task] = {}
            for p, row in zip(logits.argmax(1).numpy(), batches.rows, strict=True):
                grid = _decode(p, row, lambda f: resolver(f)[1], view_frame=True)
                grid = [[inverse[row["file"]].get(v, v) for v in r] for r in grid]
                in_view_frame[task].setdefault(str(row["test"]), []).append(grid)
        hook.remove()
        model_args = _upstream_namespace(upstream_args)
        checkpoint = {"model_state": torch.compile(model).state_dict(), "config": model_args}
    # upstream's own ranking, and the same answers ranked as arcpipe documents it (docs/varc.md): every answer its
    # 30 x 30 map cannot hold (empty, over 30, a 10 or 11 inside) pooled into one empty candidate
    kept: dict[str, Any] = {"upstream": {}, "pooled": {}}
    vote_gaps: list[int] = []
    for task in tasks:
        for key in kept:
            kept[key][task] = []
        for i, pair in enumerate(test[task]["test"]):
            ranked = [(c["prediction"], c["votes"]) for c in ttt.get_majority_vote(answers[task][str(i)])]
            mine = [(c["prediction"], c["votes"]) for c in ttt.get_majority_vote(in_view_frame[task][str(i)])]
            unreadable = sum(n for grid, n in mine if not _readable(grid))
            pooled = [(g, n) for g, n in mine if _readable(g)] + ([([], unreadable)] if unreadable else [])
            pooled.sort(key=lambda c: -c[1])  # stable: equal counts keep upstream's order (refused below anyway)
            for key, ranking in (("upstream", ranked), ("pooled", pooled)):
                kept[key][task].append(_ranking(ranking, pair["output"], vote_gaps))
            kept["pooled"][task][-1]["unreadable"] = unreadable
        assert [scores[task][k] for k in ("1", "2")] == [
            float(any(v["truth_rank"] == 0 for v in kept["upstream"][task])),
            float(any(v["truth_rank"] in (0, 1) for v in kept["upstream"][task])),
        ], (task, scores[task])  # one test input per task: upstream's score is that input's
    pass_at = {key: _pass_at(kept[key], tasks) for key in kept}
    upstream_scores = {k: sum(s[k] for s in scores.values()) / len(tasks) for k in ("1", "2")}
    assert upstream_scores == {k: pass_at["upstream"][k] for k in ("1", "2")}, (upstream_scores, pass_at)
    return {
        "checkpoint": checkpoint,
        "sources": dict(sorted(sources.items())),
        "fit_s": fit_s,
        "margins": {"cell": min(gaps), "votes": int(min(vote_gaps) > 0)},
        "answers": {t: {i: _tally(a) for i, a in per.items()} for t, per in answers.items()},
        "answers_blocks_in_view_frame": {t: {i: _tally(a) for i, a in per.items()} for t, per in in_view_frame.items()},
        "answers_moved_by_block_order": {
            t: {i: sum(a != b for a, b in zip(answers[t][i], in_view_frame[t][i], strict=True)) for i in per}
            for t, per in in_view_frame.items()
        },  # fmt: skip
        "votes": kept,
        "pass_at": pass_at,
        "upstream_scores": upstream_scores,
        "placements": placements,
    }


def _readable(grid: list[list[int]]) -> bool:
    """Whether arcpipe's 30 x 30 token map holds the answer (data/canvas.py: not empty, at most 30 x 30, colours)."""
    return bool(grid) and len(grid) <= 30 and 0 < len(grid[0]) <= 30 and all(0 <= v <= 9 for r in grid for v in r)


def _ranking(ranked: list[tuple[Any, int]], truth: Any, gaps: list[int]) -> dict[str, Any]:
    """A test input's two best candidates (the best twice where there is one), its ten best counts and the rank of
    the right answer; `gaps` gets 0 where equal counts would decide the two best or a pass@K."""
    counts = [n for _, n in ranked]
    gaps.append(int(all(a > b for a, b in zip(counts[:3], counts[1:3], strict=False))))
    rank = next((r for r, (g, _) in enumerate(ranked) if g == truth), None)
    if rank is not None:  # no pass@K cut inside the right answer's group of equal counts
        same = [r for r, n in enumerate(counts) if n == counts[rank]]
        gaps.extend(0 for k in PASS_KS if min(same) < k <= max(same))
    best = [g for g, _ in ranked[:2]]
    return {"attempt_1": best[0], "attempt_2": best[-1], "counts": counts[:10], "candidates": len(ranked),
            "truth_rank": rank}  # fmt: skip


def _pass_at(ranked: dict[str, list[dict[str, Any]]], tasks: dict[str, Any]) -> dict[str, float]:
    """pass@K as arcpipe and upstream's analyze_data average it: per task the share of its test inputs, then tasks."""
    return {
        str(k): sum(sum(v["truth_rank"] is not None and v["truth_rank"] < k for v in ranked[t]) / len(ranked[t])
                    for t in tasks) / len(tasks)
        for k in PASS_KS
    }  # fmt: skip


def _tally(grids: list[Any]) -> list[list[Any]]:
    """Every distinct answer of a test input with its votes, readable ones only (the others: `unreadable`)."""
    counts: dict[str, int] = {}
    for grid in grids:
        if _readable(grid):
            counts[json.dumps(grid)] = counts.get(json.dumps(grid), 0) + 1
    return sorted([[json.loads(g), n] for g, n in counts.items()], key=lambda c: (-c[1], json.dumps(c[0])))


class _Recorded:
    """Upstream's DataLoader, yielding its batches unchanged; each row's file, test index and placement kept."""

    def __init__(self, loader: Any) -> None:
        self.loader, self.dataset, self.rows = loader, loader.dataset, []

    def __iter__(self) -> Any:
        for batch in self.loader:
            for i, name in enumerate(batch["task_names"]):
                x, y = (int(v) for v in batch["offset"][i])
                s, k = int(batch["scale_factors"][i]), int(batch["example_indices"][i])
                self.rows.append({"file": name, "test": k, "s": s, "x": x, "y": y})
            yield batch

    def __len__(self) -> int:
        return len(self.loader)


def _fit(model: torch.nn.Module, loader: Any, root: Path, lookup: dict[str, int]) -> float:
    """FIT_EPOCHS epochs of upstream's training step (test_time_train_ARC.py's, in fp32) on upstream's loader."""
    start = time.perf_counter()
    dataset = loader.ARCDataset(root, "fit", subset="train", max_size=CONFIG["image_size"], task_lookup=lookup)
    batches = torch.utils.data.DataLoader(dataset, batch_size=FIT_BATCH, shuffle=True, collate_fn=loader.collate_fn)
    optimizer = torch.optim.AdamW(model.parameters(), lr=FIT_LR, weight_decay=0.0)
    model.train()
    for epoch in range(FIT_EPOCHS):
        total = 0.0
        for batch in batches:
            logits = model(batch["inputs"], batch["task_ids"], attention_mask=batch["attention_mask"])
            loss = F.cross_entropy(logits.permute(0, 2, 3, 1).reshape(-1, 12), batch["targets"].view(-1),
                                   ignore_index=10)  # fmt: skip
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            total += loss.item()
        if epoch % 10 == 9:
            print(f"fit epoch {epoch + 1}: loss {total / len(batches):.4f}", flush=True)
    return time.perf_counter() - start


def _cell_gap(logits: torch.Tensor, rows: list[dict[str, Any]], undo: Any) -> float:
    """Smallest gap between the two best logits over the cells whose flip to the runner-up would change the answer
    (upstream's decoding of the canvas, below): cells within MARGIN that cannot change it do not count."""
    assert len(logits) == len(rows)
    top2 = logits.double().topk(2, dim=1)
    gap = (top2.values[:, 0] - top2.values[:, 1]).numpy()
    runner_up = top2.indices[:, 1].numpy()
    preds = logits.argmax(1).numpy()
    smallest = float("inf")
    for g, p, second, row in zip(gap, preds, runner_up, rows, strict=True):
        answer = [_decode(p, row, undo, order) for order in (False, True)]  # both block orders
        for r, c in zip(*np.nonzero(g < MARGIN), strict=True):
            flipped = p.copy()
            flipped[r, c] = second[r, c]
            if [_decode(flipped, row, undo, order) for order in (False, True)] != answer:
                smallest = min(smallest, float(g[r, c]))
    return smallest


def _decode(p: np.ndarray, row: dict[str, Any], undo: Any, view_frame: bool = False) -> list[list[int]]:
    """Upstream's decoding of one argmax canvas (generate_predictions, before the colour map): the crop at the offset
    up to the first 11 along its first row and column, the view undone, then s x s block majorities (ties to the
    smaller id, blocks cut short at the right and bottom). view_frame: the blocks taken in the view's frame, before
    the view is undone, as arcpipe's canvas.decode does (the grids differ where the crop is not a multiple of s)."""
    crop = p[row["y"] :, row["x"] :]
    w = int(np.argmax(crop[0] == 11)) if (crop[0] == 11).any() else crop.shape[1]
    h = int(np.argmax(crop[:, 0] == 11)) if (crop[:, 0] == 11).any() else crop.shape[0]
    grid = crop[:h, :w].tolist()
    if not view_frame:
        grid = undo(row["file"])(grid)
    s = row["s"]
    if s > 1 and grid:
        grid = [[int(np.argmax(np.bincount(np.array(grid)[i : i + s, j : j + s].reshape(-1))))
                 for j in range(0, len(grid[0]), s)] for i in range(0, len(grid), s)]  # fmt: skip
    return undo(row["file"])(grid) if view_frame and grid else grid


def _check_views(ttt: Any, root: Path, tasks: dict[str, Any], test: dict[str, Any]) -> None:
    """Every view file, undone by upstream's resolver and its colour map, gives back the original test inputs."""
    resolver = ttt.get_eval_rot_transform_resolver()
    for task in tasks:
        for path in sorted((root / "data" / "views" / task).glob("*.json")):
            payload = json.loads(path.read_text())
            base, undo = resolver(path.stem)
            inverse = {v: int(k) for k, v in payload.get("augmentation", {}).get("color_map", {}).items()}
            assert base == task, path
            for pair, original in zip(payload["test"], test[task]["test"], strict=True):
                back = [[inverse.get(v, v) for v in row] for row in undo(pair["input"])]
                assert back == original["input"], path.name


def _upstream_namespace(upstream_args: Any) -> dict[str, Any]:
    """vars(args) of upstream's parse_args() for this model (what its checkpoints store under `config`)."""
    argv = ["--architecture", "vit", "--num-attempts", str(ATTEMPTS), "--batch-size", str(BATCH_SIZE)]
    for key, value in CONFIG.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    saved = sys.argv
    sys.argv = ["test_time_train_ARC.py", *argv]
    try:
        return vars(upstream_args.parse_args())
    finally:
        sys.argv = saved


@contextlib.contextmanager
def _stub_tqdm() -> Any:
    saved = sys.modules.get("tqdm")
    stub = types.ModuleType("tqdm")
    stub.tqdm = lambda iterable, *args, **kwargs: iterable  # type: ignore[attr-defined]
    sys.modules["tqdm"] = stub
    try:
        yield
    finally:
        if saved is None:
            sys.modules.pop("tqdm", None)
        else:
            sys.modules["tqdm"] = saved


def _build_dataset(config: dict[str, Any], out: Path) -> None:
    from arcpipe.config import DatasetConfig
    from arcpipe.data.build import build_dataset
    from arcpipe.data.verify import verify_dataset

    if out.exists():
        shutil.rmtree(out)
    build_dataset(DatasetConfig.model_validate(config), out, workers=1)
    assert verify_dataset(out)["ok"]


if __name__ == "__main__":
    main()
