"""Verify a built dataset (arcpipe's or upstream's) and write `DIR/verify.json`; training depends on this report.

    arcpipe data verify results/data/arc1

Every array is read once, in bounded chunks: its sha256 is computed and every row is decoded back into a grid
(a colour rectangle with its EOS edges, PAD elsewhere, input and label at one offset). The decoded grids are hashed
with the same family as the builder's view hashes, so the test split can be compared with `test_puzzles.json`
under every augmentation and the train split searched for leaked test pairs without materialising any grid.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import logging
import math
import os
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError

from arcpipe.config import ArcpipeError
from arcpipe.data import _kernels as K
from arcpipe.data.arc import parse_task
from arcpipe.data.augment import SEPARATOR, parse_identifier
from arcpipe.data.dataset import FIELDS, Metadata
from arcpipe.files import file_sha256

log = logging.getLogger(__name__)

SPLITS = ("train", "test")
TOP_FILES = {"identifiers.json", "test_puzzles.json", "build.json", "verify.json"}
CHUNK_ROWS = 32768  # rows per read: 2 x 29.5 MB
MAX_LISTED = 5  # per kind of problem; the rest are counted
THREADS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def verify_dataset(path: Path) -> dict[str, Any]:
    """Check the dataset at `path`, write `path/verify.json` and return the report (`ok` False on any failure)."""
    path = Path(path)
    if not path.is_dir():
        raise ArcpipeError(f"{path}: not a directory; give the folder a build wrote (with train/ and test/)")
    report = _Verifier(path).run()
    (path / "verify.json").write_text(json.dumps(report, indent=2) + "\n")
    if report["ok"]:
        log.info("%s: verified (%d warnings)", path, len(report["warnings"]))
    else:
        log.error("%s: %d failures, see %s", path, len(report["failures"]), path / "verify.json")
    return report


class _Problems:
    """Failures or warnings, at most MAX_LISTED of each kind listed, the rest counted."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self.counts: Counter[str] = Counter()

    def add(self, kind: str, message: str) -> None:
        self.counts[kind] += 1
        if self.counts[kind] <= MAX_LISTED:
            self.items.append(message)

    def listing(self) -> list[str]:
        extra = [f"... and {n - MAX_LISTED} more of kind {kind!r}" for kind, n in self.counts.items() if n > MAX_LISTED]
        return self.items + extra


class _Verifier:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.failures = _Problems()
        self.warnings = _Problems()
        self.files: dict[str, str] = {}
        self.meta: dict[str, Metadata] = {}
        self.index: dict[str, dict[str, np.ndarray]] = {}
        self.rows: dict[str, dict[str, np.ndarray]] = {}
        self.fa = K.colour_factors(K.SALT_A)
        self.salt = np.uint64(K.SALT_A)
        self.weights = K.position_table(self.salt)  # (31, 31, 30, 30) position weights of family A

    def fail(self, kind: str, message: str) -> None:
        self.failures.add(kind, message)

    def run(self) -> dict[str, Any]:
        previous = _read_json_or_none(self.path / "verify.json")
        build = _read_json_or_none(self.path / "build.json")
        self._check_layout()
        identifiers = self._load_identifiers()
        for split in SPLITS:
            if (self.path / split).is_dir():
                self._check_split(split)
        num_ids = {m.num_puzzle_identifiers for m in self.meta.values()}
        if len(num_ids) > 1:
            self.fail("metadata", f"num_puzzle_identifiers differs between splits: {sorted(num_ids)}")
        if identifiers is not None:
            self._check_identifiers(identifiers)
        test_puzzles = self._load_test_puzzles()
        if identifiers is not None and test_puzzles is not None and set(self.rows) == set(SPLITS):
            self._check_test_set(identifiers, test_puzzles)
            if build and build.get("config", {}).get("test_demos_in_train") is False:
                self._check_test_set_untrained(identifiers, test_puzzles)
        if identifiers is not None and "train" in self.index:
            self._warn_short_groups(identifiers, build)
        self._hash_small_files()
        self._check_checksums(previous, build)
        failures = self.failures.listing()
        prediction_only = bool(test_puzzles) and all(
            pair.get("output") == [[0]] for task in test_puzzles.values() for pair in task.get("test", [])
        )
        return {
            "ok": not failures,
            "failures": failures,
            "warnings": self.warnings.listing(),
            "identifiers_sha256": self.files.get("identifiers.json", ""),
            "sources": build.get("sources") if build else "unknown: no build.json (an upstream or foreign build)",
            "prediction_only": build.get("prediction_only", prediction_only) if build else prediction_only,
            "counts": {
                split: {
                    "groups": len(ix["group_indices"]) - 1,
                    "puzzles": len(ix["puzzle_identifiers"]),
                    "examples": int(ix["puzzle_indices"][-1]) if len(ix["puzzle_indices"]) else 0,
                }
                for split, ix in self.index.items()
            },
            "files": dict(sorted(self.files.items())),
            **({"baseline_files": self.baseline} if failures and getattr(self, "baseline", None) else {}),
        }

    # ----------------------------------------------------------------------------------------------------------
    # Layout, metadata and arrays

    def _check_layout(self) -> None:
        for split in SPLITS:
            if not (self.path / split).is_dir():
                self.fail("layout", f"split {split}/ is missing")
        for entry in sorted(self.path.iterdir()):
            if entry.is_dir() and entry.name not in SPLITS:
                self.fail("layout", f"extra split {entry.name}/ (a dataset has exactly train/ and test/)")
            elif entry.is_file() and entry.name not in TOP_FILES:
                self.warnings.add("layout", f"unexpected file {entry.name}")

    def _check_split(self, split: str) -> None:
        folder = self.path / split
        meta_path = folder / "dataset.json"
        raw = _read_json_or_none(meta_path)
        if raw is None:
            self.fail("metadata", f"{split}/dataset.json is missing or not valid JSON")
            return
        arrays: dict[str, np.ndarray] = {}
        headers: dict[str, tuple[tuple[int, ...], np.dtype, int]] = {}
        for field in FIELDS:
            file = folder / f"all__{field}.npy"
            try:
                if field in ("inputs", "labels"):
                    headers[field] = _npy_header(file)
                else:
                    arrays[field] = np.load(file, allow_pickle=False)
            except (OSError, ValueError) as err:
                self.fail("array", f"{split}/{file.name}: missing or unreadable ({err.__class__.__name__}: {err})")
        if len(arrays) + len(headers) < len(FIELDS):
            return
        if raw.get("total_puzzles") is None:
            raw["total_puzzles"] = len(arrays["puzzle_identifiers"])
        try:
            meta = Metadata.model_validate(raw)
        except ValidationError as err:
            self.fail("metadata", f"{split}/dataset.json: {err.errors()[0]['loc']}: {err.errors()[0]['msg']}")
            return
        self.meta[split] = meta
        if not self._arrays_agree(split, meta, arrays, headers):
            return
        self.index[split] = arrays
        rows = self._scan_rows(split, meta, headers)
        if rows:
            self.rows[split] = rows

    def _arrays_agree(
        self,
        split: str,
        meta: Metadata,
        arrays: dict[str, np.ndarray],
        headers: dict[str, tuple[tuple[int, ...], np.dtype, int]],
    ) -> bool:
        before = sum(self.failures.counts.values())
        shape_in, dtype_in, _ = headers["inputs"]
        shape_out, dtype_out, _ = headers["labels"]
        for name, shape, dtype in (("inputs", shape_in, dtype_in), ("labels", shape_out, dtype_out)):
            if dtype != np.uint8 or len(shape) != 2 or shape[1] != meta.seq_len:
                self.fail("array", f"{split}/all__{name}.npy is {dtype} {shape}, expected uint8 (N, {meta.seq_len})")
        if shape_in != shape_out:
            self.fail("array", f"{split}: inputs {shape_in} and labels {shape_out} differ in shape")
        for name in ("puzzle_identifiers", "puzzle_indices", "group_indices"):
            if arrays[name].dtype != np.int32 or arrays[name].ndim != 1:
                self.fail(
                    "array", f"{split}/all__{name}.npy is {arrays[name].dtype} {arrays[name].shape}, expected int32 1-D"
                )
        if meta.seq_len != K.CANVAS * K.CANVAS or meta.vocab_size != 12 or meta.sets != ["all"]:
            self.fail(
                "metadata",
                f"{split}/dataset.json: seq_len={meta.seq_len}, vocab_size={meta.vocab_size}, sets={meta.sets}; "
                "ARC datasets have 900, 12 and ['all']",
            )
        if sum(self.failures.counts.values()) > before:
            return False
        num_rows = shape_in[0]
        pi, gi, ids = arrays["puzzle_indices"], arrays["group_indices"], arrays["puzzle_identifiers"]
        for name, index, end in (("puzzle_indices", pi, num_rows), ("group_indices", gi, len(ids))):
            if len(index) == 0 or index[0] != 0 or index[-1] != end or (np.diff(index) <= 0).any():
                self.fail(
                    "index",
                    f"{split}/all__{name}.npy must start at 0, increase strictly and end at {end}; "
                    f"it starts {index[:3].tolist()} and ends {index[-3:].tolist()}",
                )
        if len(pi) != len(ids) + 1:
            self.fail("index", f"{split}: {len(pi)} puzzle_indices for {len(ids)} puzzles (expected one more)")
        counts = {
            "total_puzzles": (meta.total_puzzles, len(ids)),
            "total_groups": (meta.total_groups, len(gi) - 1),
        }
        for key, (stated, actual) in counts.items():
            if stated != actual:
                self.fail("metadata", f"{split}/dataset.json: {key}={stated} but the arrays hold {actual}")
        if len(ids) and not math.isclose(meta.mean_puzzle_examples, num_rows / len(ids), rel_tol=1e-9):
            self.fail(
                "metadata",
                f"{split}/dataset.json: mean_puzzle_examples={meta.mean_puzzle_examples} but the arrays give "
                f"{num_rows / len(ids)}",
            )
        if len(ids) and (ids.min() < 1 or ids.max() >= meta.num_puzzle_identifiers):
            self.fail(
                "identifier",
                f"{split}/all__puzzle_identifiers.npy: ids span {ids.min()}..{ids.max()}, outside "
                f"1..{meta.num_puzzle_identifiers - 1}",
            )
        return sum(self.failures.counts.values()) == before

    def _scan_rows(
        self, split: str, meta: Metadata, headers: dict[str, tuple[tuple[int, ...], np.dtype, int]]
    ) -> dict[str, np.ndarray]:
        """Hash both token files and decode every row, chunk by chunk (hashing overlaps decoding)."""
        num_rows = headers["inputs"][0][0]
        code = np.zeros(num_rows, dtype=np.uint8)
        offset = np.zeros(num_rows, dtype=np.int16)
        in_hash = np.zeros(num_rows, dtype=np.uint64)
        out_hash = np.zeros(num_rows, dtype=np.uint64)
        folder = self.path / split
        digests = {name: hashlib.sha256() for name in ("inputs", "labels")}
        buffers = {name: np.empty((CHUNK_ROWS, K.CANVAS * K.CANVAS), dtype=np.uint8) for name in digests}
        with (
            open(folder / "all__inputs.npy", "rb") as f_in,
            open(folder / "all__labels.npy", "rb") as f_out,
            concurrent.futures.ThreadPoolExecutor(2 + THREADS) as pool,
        ):
            files = {"inputs": f_in, "labels": f_out}
            for name, f in files.items():
                digests[name].update(f.read(headers[name][2]))
            for start in range(0, num_rows, CHUNK_ROWS):
                stop = min(start + CHUNK_ROWS, num_rows)
                views = {}
                for name, f in files.items():
                    views[name] = buffers[name][: stop - start]
                    got = f.readinto(memoryview(views[name]).cast("B"))
                    if got != views[name].nbytes:
                        self.fail("array", f"{split}/all__{name}.npy is truncated: rows end before {stop}")
                        return {}
                jobs = [pool.submit(digests[n].update, memoryview(views[n]).cast("B")) for n in views]
                jobs += [
                    pool.submit(
                        K.scan_canvases,
                        views["inputs"][a:b],
                        views["labels"][a:b],
                        meta.vocab_size,
                        self.fa,
                        self.weights,
                        code[start + a : start + b],
                        offset[start + a : start + b],
                        in_hash[start + a : start + b],
                        out_hash[start + a : start + b],
                    )  # fmt: skip
                    for a, b in K.ranges(stop - start, THREADS)
                ]
                for job in jobs:
                    job.result()
            for name, f in files.items():
                if f.read(1):
                    self.fail("array", f"{split}/all__{name}.npy has bytes after its {num_rows} rows")
        for name in digests:
            self.files[f"{split}/all__{name}.npy"] = digests[name].hexdigest()
        messages = {
            K.BAD_TOKEN: f"a token outside 0..{meta.vocab_size - 1}",
            K.BAD_CANVAS: "not a grid with EOS edges on PAD",
            K.BAD_OFFSET: "input and label at different offsets",
        }
        for row in np.flatnonzero(code)[: MAX_LISTED + 1]:
            self.fail("token", f"{split} row {row}: {messages[int(code[row])]}")
        if split == "test" and (offset != 0).any():
            row = int(np.flatnonzero(offset)[0])
            self.fail("token", f"test row {row} is translated; the test split must sit at (0, 0)")
        return {"code": code, "in": in_hash, "out": out_hash, "pair": K.pair_keys(in_hash, out_hash)}

    # ----------------------------------------------------------------------------------------------------------
    # Identifiers and the test set

    def _load_identifiers(self) -> list[str] | None:
        raw = _read_json_or_none(self.path / "identifiers.json")
        if not isinstance(raw, list) or not all(isinstance(name, str) for name in raw):
            self.fail("identifier", "identifiers.json is missing or not a JSON list of names")
            return None
        if not raw or raw[0] != "<blank>":
            self.fail("identifier", "identifiers.json must start with '<blank>' (id 0 is padding)")
        if len(set(raw)) != len(raw):
            dup = next(name for name, n in Counter(raw).items() if n > 1)
            self.fail("identifier", f"identifiers.json names {dup!r} more than once")
        return raw

    def _check_identifiers(self, identifiers: list[str]) -> None:
        for split, meta in self.meta.items():
            if meta.num_puzzle_identifiers != len(identifiers):
                self.fail(
                    "identifier",
                    f"{split}/dataset.json: num_puzzle_identifiers={meta.num_puzzle_identifiers} but "
                    f"identifiers.json has {len(identifiers)} names",
                )
        for split, ix in self.index.items():
            ids = ix["puzzle_identifiers"]
            gi = ix["group_indices"]
            if len(ids) and ids.max() < len(identifiers):
                tasks = np.array([_task_of(identifiers[i]) for i in ids[gi[:-1]]])
                sizes = np.diff(gi)
                group_of = np.repeat(np.arange(len(sizes)), sizes)
                members = np.array([_task_of(identifiers[i]) for i in ids])
                bad = np.flatnonzero(members != tasks[group_of])
                if len(bad):
                    self.fail(
                        "identifier",
                        f"{split}: puzzle {bad[0]} ({identifiers[ids[bad[0]]]!r}) sits in the group of "
                        f"{tasks[group_of[bad[0]]]!r}",
                    )

    def _load_test_puzzles(self) -> dict[str, Any] | None:
        path = self.path / "test_puzzles.json"
        raw = _read_json_or_none(path)
        if not isinstance(raw, dict):
            self.fail("test set", "test_puzzles.json is missing or not a JSON object (the evaluator's ground truth)")
            return None
        for task_id, task in raw.items():
            try:
                parsed = parse_task(task, task_id, path)
            except ArcpipeError as err:
                self.fail("test set", str(err))
                continue
            if not parsed.solved:
                self.fail("test set", f"test_puzzles.json: task {task_id}: a test pair has no 'output'")
        return raw

    def _check_test_set(self, identifiers: list[str], test_puzzles: dict[str, Any]) -> None:
        """Test-split content against test_puzzles.json under each puzzle's augmentation; leaks into train."""
        test_tasks = {_task_of(identifiers[i]) for i in self.index["test"]["puzzle_identifiers"]}
        for task in sorted(test_tasks - set(test_puzzles)):
            self.fail("test set", f"test split holds task {task}, which test_puzzles.json lacks")
        for task in sorted(set(test_puzzles) - test_tasks):
            self.fail("test set", f"test_puzzles.json task {task} is missing from the test split")
        # the test pairs of every test task, as grids for view hashing
        task_ids = list(test_puzzles)
        grids: list[np.ndarray] = []
        pair_ptr = [0]
        for task_id in task_ids:
            for pair in test_puzzles[task_id]["test"]:
                grids.append(np.array(pair["input"], dtype=np.uint8))
                grids.append(np.array(pair["output"], dtype=np.uint8))
            pair_ptr.append(len(grids) // 2)
        if not grids:
            self.fail("test set", "test_puzzles.json holds no test pairs")
            return
        sizes = np.array([g.size for g in grids])
        wa = K.colour_weights(
            np.concatenate([g.ravel() for g in grids]),
            np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64),
            np.array([g.shape[0] for g in grids], dtype=np.int64),
            np.array([g.shape[1] for g in grids], dtype=np.int64),
            self.salt,
        )
        position = {task_id: i for i, task_id in enumerate(task_ids)}

        test_ix, train_ix = self.index["test"], self.index["train"]
        for split, ix in (("test", test_ix), ("train", train_ix)):
            ids, pi = ix["puzzle_identifiers"], ix["puzzle_indices"]
            names = [identifiers[i] for i in ids]
            tasks = [_task_of(name) for name in names]
            wanted = [k for k, task in enumerate(tasks) if task in position]
            parsed = dict(zip(wanted, (_parse(names[k]) for k in wanted), strict=True))
            malformed = [k for k in wanted if parsed[k] is None]
            if malformed:
                self.fail("identifier", f"{split}: puzzle name {names[malformed[0]]!r} is not task|||t<k>|||<digits>")
                return
            if not wanted:
                continue
            # expected view hashes of every (puzzle, test pair) of the wanted puzzles
            grid_ids, tids, cols, owner = [], [], [], []
            for k in wanted:
                task, tid, colours = parsed[k]
                first, last = pair_ptr[position[task]], pair_ptr[position[task] + 1]
                for p in range(first, last):
                    grid_ids += [2 * p, 2 * p + 1]
                    tids += [tid, tid]
                    cols += [colours, colours]
                    owner.append(k)
            views = K.view_hashes(
                np.array(grid_ids, dtype=np.int64), np.array(tids, dtype=np.int64),
                np.array(cols, dtype=np.uint8), wa, self.fa,
            )  # fmt: skip
            expected_in, expected_out = views[0::2], views[1::2]
            expected_pair = K.pair_keys(expected_in, expected_out)
            rows = self.rows[split]
            cursor = 0
            for k in wanted:
                n = pair_ptr[position[parsed[k][0]] + 1] - pair_ptr[position[parsed[k][0]]]
                mine = slice(cursor, cursor + n)
                cursor += n
                row_pairs = rows["pair"][pi[k] : pi[k + 1]]
                if split == "test":
                    if Counter(rows["in"][pi[k] : pi[k + 1]].tolist()) != Counter(expected_in[mine].tolist()):
                        self.fail(
                            "test set",
                            f"test puzzle {names[k]!r}: its inputs are not the test inputs of test_puzzles.json "
                            "under its augmentation (a test input is missing or altered)",
                        )
                    elif Counter(row_pairs.tolist()) != Counter(expected_pair[mine].tolist()):
                        self.fail("test set", f"test puzzle {names[k]!r}: its labels disagree with test_puzzles.json")
                elif np.isin(expected_pair[mine], row_pairs).any():
                    self.fail(
                        "leak",
                        f"train puzzle {names[k]!r} holds one of its own test pairs (input and output): a builder leak",
                    )
        self._warn_coincidences(identifiers, test_puzzles, wa, pair_ptr, task_ids)

    def _check_test_set_untrained(self, identifiers: list[str], test_puzzles: dict[str, Any]) -> None:
        """A build without the test set's demonstrations (test_demos_in_train: false) trains on no test task."""
        ids = self.index["train"]["puzzle_identifiers"]
        trained = {_task_of(identifiers[i]) for i in np.unique(ids).tolist()}
        for task in sorted(trained & set(test_puzzles))[:MAX_LISTED]:
            self.fail(
                "leak", f"train split holds test task {task}, which build.json's test_demos_in_train: false keeps out"
            )

    def _warn_coincidences(
        self,
        identifiers: list[str],
        test_puzzles: dict[str, Any],
        wa: np.ndarray,
        pair_ptr: list[int],
        task_ids: list[str],
    ) -> None:
        """Warn when a test pair (original frame) equals a train example of another puzzle."""
        num_pairs = pair_ptr[-1]
        grid_ids = np.arange(2 * num_pairs, dtype=np.int64)
        views = K.view_hashes(
            grid_ids, np.zeros_like(grid_ids), np.tile(np.arange(10, dtype=np.uint8), (len(grid_ids), 1)), wa, self.fa
        )
        test_pairs = K.pair_keys(views[0::2], views[1::2])
        train = self.index["train"]
        train_pairs = self.rows["train"]["pair"]
        hits = np.flatnonzero(np.isin(train_pairs, test_pairs))
        if not len(hits):
            return
        row_puzzle = np.searchsorted(train["puzzle_indices"], hits, side="right") - 1
        owner_of_pair = np.repeat(np.arange(len(task_ids)), np.diff(pair_ptr))
        by_hash: dict[int, list[int]] = {}
        for p, key in enumerate(test_pairs.tolist()):
            by_hash.setdefault(key, []).append(p)
        reported: set[tuple[str, str]] = set()
        for row, puzzle in zip(hits.tolist(), row_puzzle.tolist(), strict=True):
            name = identifiers[train["puzzle_identifiers"][puzzle]]
            parsed = _parse(name)
            if parsed is None:
                continue
            task, tid, colours = parsed
            identity = tid == 0 and colours == tuple(range(10))
            for p in by_hash[int(train_pairs[row])]:
                test_task = task_ids[owner_of_pair[p]]
                if test_task == task and identity:
                    continue  # its own original: reported as a leak above when in train
                key = (test_task, task if identity else "augmented")
                if key in reported:
                    continue
                reported.add(key)
                if identity:
                    self.warnings.add(
                        "coincidence",
                        f"a test pair of {test_task} equals a train example of {task} (an ARC coincidence)",
                    )
                else:
                    self.warnings.add(
                        "augmented match",
                        f"a test pair of {test_task} equals a train example of {name!r} (only after augmentation)",
                    )

    def _warn_short_groups(self, identifiers: list[str], build: dict[str, Any] | None) -> None:
        sizes = np.diff(self.index["train"]["group_indices"])
        if not len(sizes):
            return
        num_aug = build["config"]["num_aug"] if build and "config" in build else int(sizes.max()) - 1
        short = np.flatnonzero(sizes < num_aug + 1)
        if len(short):
            ids, gi = self.index["train"]["puzzle_identifiers"], self.index["train"]["group_indices"]
            listed = ", ".join(f"{identifiers[ids[gi[g]]]} ({sizes[g] - 1})" for g in short[:8])
            self.warnings.add(
                "short groups",
                f"{len(short)} of {len(sizes)} tasks have fewer than num_aug={num_aug} augmentations: {listed}"
                + (", ..." if len(short) > 8 else ""),
            )

    # ----------------------------------------------------------------------------------------------------------
    # Checksums

    def _hash_small_files(self) -> None:
        for path in sorted(self.path.rglob("*")):
            rel = str(path.relative_to(self.path))
            # dotfiles are workflow bookkeeping (Snakemake's .snakemake_timestamp), not dataset content
            if path.is_file() and rel not in self.files and path.name != "verify.json" and path.name[0] != ".":
                self.files[rel] = file_sha256(path)

    def _check_checksums(self, previous: dict[str, Any] | None, build: dict[str, Any] | None) -> None:
        self.baseline = None
        if previous:
            self.baseline = previous.get("files") if previous.get("ok") else previous.get("baseline_files")
        references = [("the last passing verify.json", self.baseline or {})]
        if build:
            references.append(("build.json", build.get("small_files_sha256", {})))
            if "identifiers_sha256" in build:
                references.append(("build.json", {"identifiers.json": build["identifiers_sha256"]}))
        for where, expected in references:
            for rel, digest in expected.items():
                if rel in self.files and self.files[rel] != digest:
                    self.fail(
                        "checksum",
                        f"{rel}: sha256 {self.files[rel][:12]}... no longer matches {where} ({digest[:12]}...)",
                    )
                elif rel not in self.files and rel != "build.json":
                    self.fail("checksum", f"{rel}: listed in {where} but missing now")


# --------------------------------------------------------------------------------------------------------------
# Helpers


def _npy_header(path: Path) -> tuple[tuple[int, ...], np.dtype, int]:
    """(shape, dtype, header length) of a .npy file, without reading its data."""
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = read(f)
        if fortran:
            raise ValueError("Fortran-ordered array")
        return shape, dtype, f.tell()


def _task_of(name: str) -> str:
    return name.split(SEPARATOR, 1)[0]


def _parse(name: str) -> tuple[str, int, tuple[int, ...]] | None:
    """(task, tid, colours) of a puzzle name (no separator: the identity view); None when malformed."""
    try:
        task, augmentation = parse_identifier(name)
    except ArcpipeError:
        return None
    return task, augmentation.tid, augmentation.colours


def _read_json_or_none(path: Path) -> Any:
    try:
        return json.loads(path.read_bytes())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return None
