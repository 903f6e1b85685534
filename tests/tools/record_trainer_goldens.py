"""Record the goldens of tests/unit/train/test_trainer_parity.py by running upstream's own trainers on a CPU.

    python tests/tools/record_trainer_goldens.py --adam-atan2 ADAM_ATAN2_SDIST \
        [--trm TRM_DIR] [--hrm HRM_DIR] [--urm URM_DIR] [--families F ...] [--work SCRATCH] \
        [--output tests/data/trainer]

Each *_DIR is a tree of the upstream repository at the commit in UPSTREAM; ADAM_ATAN2_SDIST the unpacked source
distribution of adam-atan2 0.0.3 (tests/tools/upstream_cpu.py says why). SCRATCH (default: a temporary folder) gets
the dataset and each tree's CPU copy. Each family runs in a process of its own (upstream's packages share names).

What runs is upstream's `pretrain.py` itself: its hydra entry point `launch` with the overrides of FAMILIES, in a
CPU copy of the tree (`upstream_cpu.cpu_tree`: only the device literals differ) under `cpu_stand_ins`, with
DISABLE_COMPILE set. Its DataLoader (one worker process, as upstream) draws the batches from upstream's own
`PuzzleDataset`, its `init_train_state` builds the model and the optimizers (the sparse puzzle-embedding SignSGD,
AdamATan2), its `train_batch` steps, its EMA helper averages. The recording only observes, through wrappers put
on module attributes before `launch` runs:

* `wandb` is a stand-in module that keeps what `wandb.log` receives (the per-step metrics and lr, as upstream
  reduces them);
* `create_model` (called once by `init_train_state`) also applies, in place before any step, the init tweaks of
  tests/tools/record_goldens.py, with upstream's `trunc_normal_init_` (the Q head like any
  CastedLinear, bias 0; the puzzle-embedding table like the token embedding) so that halting depends on the model and
  the puzzle identifiers matter, and keeps the initial state dict: the weights arcpipe starts from;
* `train_batch` keeps each step's rows (as example and puzzle indices of the dataset, found by matching the rows
  against the dataset's arrays: the test rebuilds the rows with arcpipe's builder and collate), the values
  `torch.rand_like` / `torch.randint_like` returned inside the step (upstream's ACT exploration draws, which the
  test turns into arcpipe's `batch["halt_min_steps"]`), and at step SNAPSHOT_STEP and at the end the parameters,
  the puzzle-embedding table, every optimizer's state and the EMA shadow;
* the train loader's iterator records its base seed (`loader_base_seed`), from which PyTorch seeds the loader
  worker's NumPy generator, where TRM and HRM draw a visit's examples: with it arcpipe's `sampler: upstream` draws the
  run's very rows (tests/unit/train/test_upstream_puzzles.py). The TRM and HRM goldens recorded on 2026-11-27 got the
  field on 2026-11-29 from a re-run of this tool on another CPU: its torch generator draws the same numbers (only the
  initialisation's rounding differed there), and the base seed it recorded gives the stored rows exactly, which the
  test checks;
* forward hooks on the ACT module and the SignSGD kernel measure how far the discrete outcomes (halting, argmax,
  the sign of each puzzle-embedding gradient) sit from their thresholds; the script refuses a golden where one sits
  closer than MIN_MARGIN (rounding on another CPU could flip it).

The dataset (make_dataset) is small and in upstream's on-disk format, with seq_len 16: ARC's 900 tokens make a
float64 step take seconds on a CPU, and the test must replay 100+ steps in seconds. It is stored in the golden
(a few KiB) and the test writes it out for arcpipe's trainer. The regime: global batch 8, warm-up 20 steps then a
cosine to lr_min_ratio 0.1 over upstream's estimated total_steps, one pass of all epochs (no evaluation), ACT with
4 steps at most and exploration 0.5 (rows halt at different steps, so the carry crosses batches), EMA on (TRM, URM).

URM (its own `pretrain.py`): `loops` 4 is its ACT limit and its exploration probability is hard-coded (0.1);
`grad_accum_steps` 1 and `target_q_update_every` (required, ignored by its model) go to upstream only. Two
interventions, both outside the training arithmetic: its `save_code_and_config`, which `launch` calls with one of
its two arguments (a TypeError before the first step), is replaced by a no-op (it only writes the config); and
its ConvSwiGLU's bf16 `dwconv` is moved to the forward dtype in `create_model`, before any step (in place: the
optimizers hold the same parameters), as tests/tools/record_goldens.py's urm_conv_forward does; arcpipe runs
`conv_dtype: forward` (the golden's arch_config says so). Its end-of-pass evaluation (twice: loops and loops + 8)
and checkpoint run after the last step and change nothing recorded.

URM with Muon (family `urm-muon`, from the URM tree: `--urm URM_DIR [--families urm-muon]`): the same run with
`use_muon=True`, upstream's ARC-AGI-2 optimizer; its Newton-Schulz `msign` is decorated with torch.compile, which
TORCH_COMPILE_DISABLE (set for this family only) turns off, so it runs eagerly. Its steps are stored stacked
(`steps_packed`, see _pack_steps).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

import numpy as np
import torch

TOOLS = Path(__file__).resolve().parent
sys.path.insert(0, str(TOOLS))

from upstream_cpu import cpu_stand_ins, cpu_tree  # noqa: E402

UPSTREAM = {
    "trm": ("SamsungSAILMontreal/TinyRecursiveModels", "e7b68717f0a6c4cbb4ce6fbef787b14f42083bd9"),
    "hrm": ("sapientinc/HRM", "42410daaaf6ac8b266536d105a6e2362ffe40929"),
    "urm": ("zitian-gao/URM", "52ee34b62fe68ef00d2784e4d4addfcd8c2a7615"),
}
DATA = Path(__file__).resolve().parents[1] / "data"
DATA_SEED, GROUPS, PUZZLES_PER_GROUP, SEQ_LEN = 0, 6, 3, 16  # make_dataset
SNAPSHOT_STEP = 8  # the full state is also kept here: the planted-change tests stop at it
# distance a discrete outcome must keep from its threshold, far above float64 rounding (~1e-15): halting (q, fp32 casts
# of float64 values) and argmax (float64 logits) absolute; each puzzle-embedding gradient's sign relative to the
# batch's largest entry
MIN_MARGIN = {"halt": 1e-6, "argmax": 1e-6, "sign": 1e-9}

# a small model: hidden 16, few layers and cycles, ACT with at most 4 steps and exploration half the time
_SMALL = dict(hidden_size=16, num_heads=2, expansion=2, forward_dtype="float64", halt_max_steps=4)
_TRAIN = dict(
    global_batch_size=8,
    lr=1e-3,
    lr_min_ratio=0.1,
    lr_warmup_steps=20,
    weight_decay=0.1,
    beta1=0.9,
    beta2=0.95,
    puzzle_emb_lr=1e-2,
    puzzle_emb_weight_decay=0.5,
    seed=3,
)
FAMILIES: dict[str, dict[str, Any]] = {
    "trm": {
        "arch": "trm",
        "arch_config": dict(
            **_SMALL, halt_exploration_prob=0.5, H_cycles=2, L_cycles=1, H_layers=0, L_layers=1, puzzle_emb_len=2
        ),
        "train": dict(**_TRAIN, epochs=45, ema=True, ema_rate=0.999),
    },
    # puzzle_emb_ndim 24 on hidden 16: a two-position prefix, the second one padded; no EMA upstream
    "hrm": {
        "arch": "hrm",
        "arch_config": dict(
            **_SMALL,
            halt_exploration_prob=0.5,
            H_cycles=2,
            L_cycles=1,
            H_layers=1,
            L_layers=1,
            puzzle_emb_ndim=24,
        ),
        "train": dict(**_TRAIN, epochs=45),
    },
    # URM: `loops` is its ACT limit and its exploration probability is hard-coded (0.1); upstream's bf16 dwconv is
    # moved to the forward dtype after construction (as record_goldens.py's urm_conv_forward), arcpipe's conv_dtype
    # forward: a bf16 conv would round differently on the two sides and the difference would grow over 100+ steps.
    # Accumulation 1: upstream's grad_accum_steps means another thing than arcpipe's (the test's docstring)
    "urm": {
        "arch": "urm",
        "arch_config": dict(
            hidden_size=16,
            num_heads=2,
            expansion=2,
            forward_dtype="float64",
            loops=4,
            H_cycles=2,
            L_cycles=1,
            num_layers=1,
        ),
        "arcpipe_arch": dict(conv_dtype="forward"),
        "conv_follows_forward_dtype": True,
        "exploration_prob": 0.1,
        "train": dict(**_TRAIN, epochs=45, ema=True, ema_rate=0.999),
        # target_q_update_every: required by URM's config; its model ignores the flag
        "upstream_only": dict(grad_accum_steps=1, target_q_update_every=4),
    },
}
# URM's ARC-AGI-2 recipe's optimizer (`use_muon=True`): Muon on every 2-D parameter, its internal AdamW on the rest,
# the sparse SignSGD on the puzzle embedding. Upstream hard-codes both groups' weight decay (0.1) and the AdamW
# group's betas (0.9, 0.95): the run's weight_decay and betas are those values, so both sides agree. Its Newton-Schulz
# (`msign`) is decorated with torch.compile: TORCH_COMPILE_DISABLE runs it eagerly, as arcpipe's
FAMILIES["urm-muon"] = {
    **FAMILIES["urm"],
    "tree": "urm",
    "arcpipe_train": dict(optimizer="muon"),
    "upstream_only": dict(grad_accum_steps=1, target_q_update_every=4, use_muon=True),
    "env": dict(TORCH_COMPILE_DISABLE="1"),
    "pack_steps": True,  # _pack_steps: a third of the file's size
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for family in UPSTREAM:
        parser.add_argument(f"--{family}", type=Path, help=f"{UPSTREAM[family][0]} at {UPSTREAM[family][1][:7]}")
    parser.add_argument("--adam-atan2", type=Path, required=True, help="adam-atan2 0.0.3's unpacked sdist")
    parser.add_argument("--work", type=Path, help="scratch folder (default: a temporary one)")
    parser.add_argument("--output", type=Path, default=DATA / "trainer")
    parser.add_argument("--families", nargs="+", choices=list(FAMILIES), help="only these (default: every one given)")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a family, in this (child) process
    args = parser.parse_args()
    if args.one:
        record(args.one, getattr(args, _tree(args.one)), args.adam_atan2, args.work, args.output)
        return
    families = [f for f in args.families or FAMILIES if getattr(args, _tree(f)) is not None]
    if not families:
        parser.error(f"give at least one of {', '.join('--' + f for f in UPSTREAM)}")
    with tempfile.TemporaryDirectory() as tmp:
        work = (args.work or Path(tmp)).resolve()
        work.mkdir(parents=True, exist_ok=True)
        data = work / "data"
        make_dataset(data)
        args.output.mkdir(parents=True, exist_ok=True)
        for family in families:
            tree = _tree(family)
            cmd = [sys.executable, __file__, "--one", family, f"--{tree}", str(getattr(args, tree))]
            cmd += ["--adam-atan2", str(args.adam_atan2), "--work", str(work), "--output", str(args.output)]
            env = {**os.environ, "DISABLE_COMPILE": "1", "ARCPIPE_DATA": str(data), **FAMILIES[family].get("env", {})}
            subprocess.run(cmd, check=True, env=env)


def _pack_steps(golden: dict[str, Any]) -> dict[str, Any]:
    """The golden with its steps' tensors stacked over the steps (`steps_packed`: {key: (steps, rows) tensor},
    "metrics": a list) instead of a dict per step: each small tensor costs a file its header."""
    steps = golden.pop("steps")
    keys = [k for k in steps[0] if k != "metrics"]
    assert all(s.keys() == steps[0].keys() for s in steps)
    packed: dict[str, Any] = {k: torch.stack([s[k] for s in steps]) for k in keys}
    packed["metrics"] = [s["metrics"] for s in steps]
    return {**golden, "steps_packed": packed}


def _tree(family: str) -> str:
    """The upstream repository (UPSTREAM's key) whose trainer records `family`."""
    return FAMILIES[family].get("tree", family)


def make_dataset(out: Path) -> dict[str, np.ndarray]:
    """A small dataset in upstream's on-disk format (train split only: there is no evaluation), written to `out`.

    GROUPS tasks, each with PUZZLES_PER_GROUP puzzles (its "augmentations": the task's colour map composed with a
    permutation of its own) of 2 to 5 examples; a row is a 4x4 grid of colours (tokens 2-11) cut short by an
    end-of-row token (1) and padding (0), and its label is the mapped grid, padding ignored. Learnable, so the loss
    falls and the halting head has something to predict.
    """
    rng = np.random.default_rng(DATA_SEED)
    inputs, labels, puzzle_indices, group_indices, identifiers = [], [], [0], [0], ["<blank>"]
    for group in range(GROUPS):
        task_map = rng.permutation(10)
        for aug in range(PUZZLES_PER_GROUP):
            colour = rng.permutation(10)  # the augmentation's colour permutation, on inputs and outputs
            for _ in range(int(rng.integers(2, 6))):
                n = int(rng.integers(SEQ_LEN // 2, SEQ_LEN))  # content tokens; then the end token and padding
                x = np.zeros(SEQ_LEN, np.uint8)
                y = np.zeros(SEQ_LEN, np.uint8)
                grid = rng.integers(0, 10, n)
                x[:n] = 2 + colour[grid]
                y[:n] = 2 + colour[task_map[grid]]
                x[n] = y[n] = 1
                inputs.append(x)
                labels.append(y)
            puzzle_indices.append(len(inputs))
            identifiers.append(f"task{group}_aug{aug}")
        group_indices.append(len(identifiers) - 1)
    arrays = {
        "inputs": np.stack(inputs),
        "labels": np.stack(labels),
        "puzzle_identifiers": np.arange(1, len(identifiers), dtype=np.int32),
        "puzzle_indices": np.array(puzzle_indices, dtype=np.int32),
        "group_indices": np.array(group_indices, dtype=np.int32),
    }
    write_dataset(out, arrays, identifiers)
    return arrays


def write_dataset(out: Path, arrays: dict[str, np.ndarray], identifiers: list[str]) -> None:
    """`out/{train,test}/all__*.npy`, `out/{train,test}/dataset.json` and `out/identifiers.json`, as upstream's
    builders write them; the test split is a copy of the train split (HRM's trainer evaluates after every pass,
    which changes nothing in its training state)."""
    for split in ("train", "test"):
        (out / split).mkdir(parents=True, exist_ok=True)
        for name, array in arrays.items():
            np.save(out / split / f"all__{name}.npy", array)
    num_puzzles = len(arrays["puzzle_identifiers"])
    metadata = {
        "pad_id": 0,
        "ignore_label_id": 0,
        "blank_identifier_id": 0,
        "vocab_size": 12,
        "seq_len": int(arrays["inputs"].shape[1]),
        "num_puzzle_identifiers": len(identifiers),
        "total_groups": len(arrays["group_indices"]) - 1,
        "mean_puzzle_examples": len(arrays["inputs"]) / num_puzzles,
        "total_puzzles": num_puzzles,
        "sets": ["all"],
    }
    for split in ("train", "test"):
        (out / split / "dataset.json").write_text(json.dumps(metadata))
    (out / "identifiers.json").write_text(json.dumps(identifiers))


# ----------------------------------------------------------------------------------------------------------------
# one family, in its own process


def record(family: str, tree: Path, adam_src: Path, work: Path, output: Path) -> None:
    torch.set_num_threads(1)
    spec = FAMILIES[family]
    data = Path(os.environ["ARCPIPE_DATA"])
    cpu = work / f"{family}_cpu"
    edits = cpu_tree(tree, cpu)
    for name, count in edits.items():
        print(f"{family}: {name}: {count} device literal(s) rewritten")
    os.chdir(cpu)
    sys.path.insert(0, str(cpu))
    logged: list[tuple[int | None, dict[str, Any]]] = []
    wandb = types.ModuleType("wandb")
    wandb.run = None  # type: ignore[attr-defined]
    wandb.init = lambda *a, **k: None  # type: ignore[attr-defined]
    wandb.finish = lambda *a, **k: None  # type: ignore[attr-defined]
    wandb.Settings = lambda *a, **k: None  # type: ignore[attr-defined]
    wandb.log = lambda metrics, step=None: logged.append((step, dict(metrics)))  # type: ignore[attr-defined]
    sys.modules["wandb"] = wandb
    with cpu_stand_ins(adam_src):
        golden = _run(family, spec, data, cpu, logged)
    golden["upstream"] = {
        "repo": UPSTREAM[_tree(family)][0],
        "commit": UPSTREAM[_tree(family)][1],
        "device_rewrites": edits,
        # the scratch folder's name is this machine's, not the golden's: SCRATCH in its place
        "overrides": [o.replace(str(work), "SCRATCH") for o in golden.pop("overrides")],
    }
    arrays = {
        p.stem.removeprefix("all__"): torch.from_numpy(np.load(p)) for p in sorted((data / "train").glob("*.npy"))
    }
    golden["dataset"] = {
        "arrays": arrays,
        "identifiers": json.loads((data / "identifiers.json").read_text()),
        "dataset_json": json.loads((data / "train" / "dataset.json").read_text()),
    }
    golden["torch_version"] = str(torch.__version__)
    golden["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    if spec.get("pack_steps"):
        golden = _pack_steps(golden)
    path = output / f"trainer_{family}.pt"
    torch.save(golden, path)
    print(f"{path}: {golden['num_steps']} steps, margins {golden['margins']}, {path.stat().st_size // 1024} KiB")


def _run(family: str, spec: dict[str, Any], data: Path, cpu: Path, logged: list) -> dict[str, Any]:
    import pretrain  # upstream's, from the CPU copy

    common = __import__("models.common", fromlist=["trunc_normal_init_"])
    sparse = __import__("models.sparse_embedding", fromlist=["_sparse_emb_signsgd_dist"])
    rows = _RowIndex(data)
    state: dict[str, Any] = {"steps": [], "margins": {"halt": np.inf, "argmax": np.inf, "sign": np.inf}}

    original_create = pretrain.create_model

    def create_model(*args, **kwargs):  # the model and its optimizers, built once, before the first step
        model, optimizers, optimizer_lrs = original_create(*args, **kwargs)
        inner = model.model.inner
        hidden = inner.config.hidden_size
        with torch.no_grad():  # in place: the optimizers hold these tensors
            common.trunc_normal_init_(inner.q_head.weight, std=hidden**-0.5)
            inner.q_head.bias.zero_()
            common.trunc_normal_init_(inner.puzzle_emb.weights, std=hidden**-0.5)
        if spec.get("conv_follows_forward_dtype"):  # in place: the optimizers hold the same parameters
            for module in model.modules():
                if hasattr(module, "dwconv"):
                    module.dwconv.to(getattr(torch, spec["arch_config"]["forward_dtype"]))
        state["initial"] = {k: v.detach().clone() for k, v in model.state_dict().items()}
        model.model.register_forward_hook(_act_hook(state, family))
        return model, optimizers, optimizer_lrs

    original_ema = getattr(pretrain, "EMAHelper", None)
    if original_ema is not None:

        class EMAHelper(original_ema):  # type: ignore[misc, valid-type]
            def __init__(self, *a, **k):
                super().__init__(*a, **k)
                state["ema"] = self

        pretrain.EMAHelper = EMAHelper

    original_signsgd = sparse._sparse_emb_signsgd_dist

    def signsgd(local_weights_grad, local_ids, weights, **kw):
        ids, inv = local_ids.unique(return_inverse=True)
        g = torch.zeros((ids.shape[0], local_weights_grad.shape[1]), dtype=local_weights_grad.dtype)
        g.scatter_add_(0, inv.unsqueeze(-1).expand(-1, g.shape[1]), local_weights_grad)
        scale = g.abs().max().item()
        if scale > 0:
            state["margins"]["sign"] = min(state["margins"]["sign"], (g.abs().min() / scale).item())
        return original_signsgd(local_weights_grad, local_ids, weights, **kw)

    sparse._sparse_emb_signsgd_dist = signsgd

    original_train_batch = pretrain.train_batch

    def train_batch(config, train_state, batch, global_batch_size, rank, world_size):
        step = train_state.step + 1
        if step == SNAPSHOT_STEP + 1:  # the EMA of step SNAPSHOT_STEP was updated after its train_batch returned
            state["snapshot"]["ema"] = _ema_state(state)
        draws: dict[str, list[torch.Tensor]] = {"rand_like": [], "randint_like": []}
        saved = torch.rand_like, torch.randint_like

        def rand_like(*a, **k):
            out = saved[0](*a, **k)
            draws["rand_like"].append(out.clone())
            return out

        def randint_like(*a, **k):
            out = saved[1](*a, **k)
            draws["randint_like"].append(out.clone())
            return out

        torch.rand_like, torch.randint_like = rand_like, randint_like
        try:
            metrics = original_train_batch(config, train_state, batch, global_batch_size, rank, world_size)
        finally:
            torch.rand_like, torch.randint_like = saved
        examples, puzzles = rows.find(batch)
        record = {"step": train_state.step, "examples": examples, "puzzles": puzzles, "metrics": metrics}
        if len(draws["rand_like"]):
            (u,), (k,) = draws["rand_like"], draws["randint_like"]
            record.update(explore_uniform=u, explore_steps=k)
        state["steps"].append(record)
        state["train_state"] = train_state
        if train_state.step == SNAPSHOT_STEP:
            state["snapshot"] = _train_state(train_state, optimizers=False)
        return metrics

    # the train loader's iterator base seed: its worker seeds NumPy's global generator from it (TRM and HRM draw a
    # visit's examples there), so that arcpipe's `sampler: upstream` can draw this run's very rows
    original_iter = torch.utils.data.DataLoader.__iter__

    def loader_iter(loader):
        iterator = original_iter(loader)
        if getattr(loader.dataset, "split", None) == "train" and "loader_base_seed" not in state:
            state["loader_base_seed"] = int(iterator._base_seed)
        return iterator

    torch.utils.data.DataLoader.__iter__ = loader_iter
    pretrain.train_batch = train_batch
    pretrain.create_model = create_model
    if hasattr(pretrain, "save_code_and_config"):
        # URM's launch calls it with one of its two arguments (a TypeError before the first step); it only writes
        # the config next to the checkpoints
        pretrain.save_code_and_config = lambda *a, **k: None

    overrides = _overrides(spec, data, cpu)
    # imported, pretrain.py's module-relative config path is looked up as a package: name its folder instead
    sys.argv = ["pretrain.py", f"--config-path={cpu / 'config'}", *overrides]
    pretrain.launch()

    train_state = state["train_state"]
    steps = state["steps"]
    for s in steps:
        assert s["metrics"] is not None, f"step {s['step']}: past total_steps ({train_state.total_steps})"
    assert [s["step"] for s in steps] == list(range(1, len(steps) + 1))
    final = _train_state(train_state)
    final["ema"] = _ema_state(state)
    prob = spec.get("exploration_prob", spec["arch_config"].get("halt_exploration_prob"))
    out_steps = []
    for s in steps:
        m = {k.removeprefix("train/"): float(v) for k, v in s["metrics"].items()}
        row = {
            "examples": torch.from_numpy(s["examples"]),
            "puzzles": torch.from_numpy(s["puzzles"]),
            "metrics": m,
        }
        if "explore_uniform" in s:
            u, k = s["explore_uniform"], s["explore_steps"]
            row.update(explore_uniform=u, explore_steps=k, halt_min_steps=((u < prob) * k).to(torch.int32))
        out_steps.append(row)
    too_close = {k: v for k, v in state["margins"].items() if v < MIN_MARGIN[k]}
    if too_close:
        raise RuntimeError(f"{family}: discrete outcomes too close to their threshold {too_close}; change the seed")
    return {
        "family": family,
        "arch": spec["arch"],
        # arcpipe's arch fields: upstream's (less the forward dtype, a Trainer argument) and arcpipe's own
        "arch_config": {
            **{k: v for k, v in spec["arch_config"].items() if k != "forward_dtype"},
            **spec.get("arcpipe_arch", {}),
        },
        "forward_dtype": spec["arch_config"]["forward_dtype"],
        "train": spec["train"],
        **({"arcpipe_train": spec["arcpipe_train"]} if "arcpipe_train" in spec else {}),
        "total_steps": train_state.total_steps,
        "num_steps": len(steps),
        "snapshot_step": SNAPSHOT_STEP,
        "initial": state["initial"],
        "steps": out_steps,
        "snapshot": state["snapshot"],
        "final": final,
        "margins": {k: float(v) for k, v in state["margins"].items()},
        "logged_steps": sorted({s for s, _ in logged if s is not None}),
        "loader_base_seed": state["loader_base_seed"],
        "overrides": overrides,
    }


def _overrides(spec: dict[str, Any], data: Path, cpu: Path) -> list[str]:
    train = spec["train"]
    listed = "data_paths" in (cpu / "config" / "cfg_pretrain.yaml").read_text()  # TRM, URM; HRM: data_path
    values = {
        "data_paths" if listed else "data_path": f"[{data}]" if listed else str(data),
        "evaluators": "[]",
        "eval_interval": train["epochs"],
        "min_eval_interval": 1,  # one pass of all epochs, no evaluation (its data loader is never iterated)
        "project_name": "parity",
        "run_name": "parity",
        "checkpoint_path": cpu / "checkpoints",
        **train,
        **spec.get("upstream_only", {}),
        **{f"arch.{k}": v for k, v in spec["arch_config"].items()},
    }
    # ++: set whether or not the yaml has the key
    out = [f"hydra.run.dir={cpu / 'hydra'}", *(f"++{k}={v}" for k, v in values.items())]
    return [o for o in out if o]


class _RowIndex:
    """(example index, puzzle index) of a batch's rows, found by their content in the train split's arrays."""

    def __init__(self, data: Path) -> None:
        d = data / "train"
        inputs, labels = np.load(d / "all__inputs.npy"), np.load(d / "all__labels.npy")
        ids = np.load(d / "all__puzzle_identifiers.npy")
        puzzle_indices = np.load(d / "all__puzzle_indices.npy")
        labels = labels.astype(np.int32)
        labels[labels == 0] = -100  # as upstream's collate (ignore_label_id 0)
        self.index: dict[tuple, tuple[int, int]] = {}
        for p in range(len(ids)):
            for e in range(puzzle_indices[p], puzzle_indices[p + 1]):
                key = (int(ids[p]), inputs[e].astype(np.int32).tobytes(), labels[e].tobytes())
                self.index.setdefault(key, (e, p))  # equal rows of one puzzle are the same row

    def find(self, batch: dict[str, torch.Tensor]) -> tuple[np.ndarray, np.ndarray]:
        keys = [
            (int(i), x.numpy().astype(np.int32).tobytes(), y.numpy().astype(np.int32).tobytes())
            for i, x, y in zip(batch["puzzle_identifiers"], batch["inputs"], batch["labels"], strict=True)
        ]
        missing = [k for k in keys if k not in self.index]
        if missing:
            same_id = [k for k in self.index if k[0] == missing[0][0]]
            same_x = [k for k in same_id if k[1] == missing[0][1]]
            raise RuntimeError(
                f"{len(missing)} rows not in the dataset: id {missing[0][0]} has {len(same_id)} rows, "
                f"{len(same_x)} with these inputs"
            )
        found = [self.index[k] for k in keys]
        return np.array([e for e, _ in found], dtype=np.int64), np.array([p for _, p in found], dtype=np.int64)


def _act_hook(state: dict[str, Any], family: str):
    def hook(module, args, result):
        if not module.training:
            return
        carry, outputs = result
        q_halt = outputs["q_halt_logits"].double()
        threshold = outputs["q_continue_logits"].double() if family == "hrm" else 0
        margins = state["margins"]
        margins["halt"] = min(margins["halt"], (q_halt - threshold).abs().min().item())
        top2 = outputs["logits"].double().topk(2, dim=-1).values
        valid = carry.current_data["labels"] != -100  # an argmax counts (accuracy) only where there is a label
        margins["argmax"] = min(margins["argmax"], (top2[..., 0] - top2[..., 1])[valid].min().item())

    return hook


def _train_state(train_state, optimizers: bool = True) -> dict[str, Any]:
    model = train_state.model
    weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
    if not optimizers:
        return {"step": train_state.step, "weights": weights}
    names = {p: n for n, p in model.named_parameters()}
    per_optimizer = []
    for opt in train_state.optimizers:
        per = {}
        for p, s in opt.state.items():
            if p in names:
                per[names[p]] = {k: v.detach().clone() if torch.is_tensor(v) else v for k, v in s.items()}
        per_optimizer.append({"class": type(opt).__name__, "state": per})
    return {
        "step": train_state.step,
        "weights": weights,
        "optimizers": per_optimizer,
    }


def _ema_state(state: dict[str, Any]) -> dict[str, torch.Tensor] | None:
    ema = state.get("ema")
    return None if ema is None else {k: v.detach().clone() for k, v in ema.shadow.items()}


if __name__ == "__main__":
    main()
