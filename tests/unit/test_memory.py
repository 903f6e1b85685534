"""The memory model (arcpipe.doctor.memory): its figure against the CPU allocator's measured peak of the same step
at the tiny presets, and the `--gpu` arithmetic on hand-computed cases."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from arcpipe.config import load_config
from arcpipe.config.arch import make_arch_config
from arcpipe.doctor import memory
from arcpipe.doctor.measure import puzzle_identifiers, search_micro_batch
from arcpipe.doctor.memory import (
    CONTEXT_BYTES,
    MARGIN,
    StepMemory,
    assumed_throughput,
    fit_problem,
    gpu_plan,
    measured_peak,
    step_memory,
)
from arcpipe.forecast import assumed_throughput as forecast_throughput
from arcpipe.gpus import GPUS

GB = 1e9

ROOT = Path(__file__).resolve().parents[2]


# loopvit: the canvas models' head (VARC's) and a looped core whose every step keeps its activations for backward
@pytest.mark.parametrize("arch", ["trm", "hrm", "urm", "transformer", "loopvit"])
def test_model_within_15_percent_of_measured_cpu_peak(arch: str) -> None:
    cfg = make_arch_config(arch, "tiny", {})
    model = step_memory(cfg, num_puzzle_identifiers=10)
    measured = measured_peak(cfg, 2, num_puzzle_identifiers=10)
    assert model.peak_bytes(2) / measured == pytest.approx(1.0, abs=0.15)


def _memory(fixed_gb: float, per_example_gb: float, carry_gb: float = 0.0) -> StepMemory:
    return StepMemory(fixed_gb * GB, per_example_gb * GB, carry_gb * GB)


def test_largest_micro_batch_by_hand() -> None:
    # budget on an 80 GB card: (80e9 - CONTEXT) / 1.1; 2 GB fixed, 1 GB per example
    budget = (80 * GB - CONTEXT_BYTES) / (1 + MARGIN)
    want = int((budget - 2 * GB) // GB)
    assert want == 69  # (80 - 1.61) / 1.1 = 71.26 GB, less 2 GB fixed: 69.26 GB of 1 GB rows
    mem = _memory(2, 1)
    assert mem.largest_micro_batch(80 * GB) == want


def test_carries_of_other_slots_count() -> None:
    # 4 rows per device; each row not in the micro-batch still holds its 0.5 GB carry
    mem = _memory(0, 2, 0.5)
    assert mem.peak_bytes(1, per_device=4) == pytest.approx((2 + 3 * 0.5) * GB)
    assert mem.peak_bytes(4, per_device=4) == pytest.approx(8 * GB)


def test_gpu_plan_keeps_the_global_batch() -> None:
    # A100-40GB: budget (40e9 - 1.61e9) / 1.1 = 34.9 GB; 1 GB fixed, 0.5 GB per example -> 67 rows; 192 per device:
    # the largest divisor of 192 up to 67 is 64, 3 accumulation steps
    plan = gpu_plan(_memory(1, 0.5), "A100-40GB", per_device=192)
    assert plan.largest == int(((40 * GB - CONTEXT_BYTES) / (1 + MARGIN) - 1 * GB) // (0.5 * GB))
    assert (plan.largest, plan.micro_batch, plan.accumulation) == (67, 64, 3)
    assert gpu_plan(_memory(50, 1), "L4-24GB", per_device=8).micro_batch == 0  # nothing fits


def test_fit_problem_warns_when_the_micro_batch_does_not_fit() -> None:
    run = SimpleNamespace(global_batch_size=768, num_devices=4, micro_batch=192)
    problem = fit_problem("big", run, _memory(1, 0.5), "A100-40GB")
    assert problem is not None and "micro_batch_size: 64" in problem and "3 accumulation" in problem
    assert fit_problem("big", run, _memory(1, 0.2), "H100-80GB") is None


def test_forecast_and_doctor_share_the_assumed_throughput() -> None:
    train, evaluation, source = assumed_throughput("H100-80GB", 4e11, 1e11)
    forecast = forecast_throughput("H100-80GB", 4e11, 1e11)
    assert (forecast.train_examples_per_s, forecast.eval_examples_per_s, forecast.source) == (train, evaluation, source)
    assert train == pytest.approx(GPUS["H100-80GB"].bf16_flops * 0.215 / 4e11)


def test_every_gpu_run_of_the_shipped_config_has_its_memory_in_the_shipped_table(tmp_path):
    """`arcpipe config check` reads the shipped table (seconds) instead of a fake-tensor pass per run (minutes); a
    preset, a shipped run or torch's minor version that changes without `python -m arcpipe.doctor.memory
    --write-table` fails here."""
    cfg = load_config(ROOT / "config/config.yaml")
    table = json.loads(memory.TABLE.read_text())
    for name, run in cfg.runs.items():
        if run.uses_gpus:
            key = memory.memory_key(run, puzzle_identifiers(cfg, run, tmp_path / "results")[0])
            assert key in table, f"{name}: {key} missing: python -m arcpipe.doctor.memory --write-table"
            cached = memory.run_memory(run, puzzle_identifiers(cfg, run, tmp_path / "results")[0])
            assert cached.per_example_bytes == table[key]["per_example_bytes"] > 0


def test_config_check_warns_from_known_figures_and_names_the_runs_it_could_not_check(tmp_path):
    """trm-arc1 on an A100-40GB does not fit at micro-batch 192 (the shipped table's figures); a run whose model the
    table lacks is named, not computed (the check stays a matter of seconds)."""
    import subprocess
    import sys

    import yaml

    raw = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    raw["runs"]["trm-arc1"]["gpu"] = "A100-40GB"
    raw["runs"]["trm-arc1-wide"] = {**raw["runs"]["trm-arc1"], "arch_overrides": {"hidden_size": 640}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(raw))
    cli = [sys.executable, "-m", "arcpipe", "config", "check", "config.yaml"]
    proc = subprocess.run(cli, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert any(line.startswith("warning: run trm-arc1: micro-batch 192 will not fit A100-40GB") for line in lines)
    assert any(line.startswith("memory: not checked for trm-arc1-wide ") for line in lines), proc.stdout[-2000:]


def test_the_micro_batch_search_finds_the_largest_that_fits_from_measured_peaks() -> None:
    # peaks as `arcpipe doctor` measures them on CUDA: affine in the micro-batch, out of memory (inf) past the card
    def affine(limit: float):
        return lambda b: 4.0 + 0.25 * b if 4.0 + 0.25 * b <= limit else float("inf")

    assert search_micro_batch(affine(1e9), 117.0) == (452, [(1, 4.25), (2, 4.5), (452, 117.0)])
    fit, probes = search_micro_batch(affine(105.0), 117.0)  # the card runs out before the headroom does
    assert fit == 365 and [b for b, _ in probes] == [1, 2, 452, 406, 365] and probes[-1][1] <= 105.0
    assert search_micro_batch(affine(1e9), 4.3) == (1, [(1, 4.25), (2, 4.5)])
    assert search_micro_batch(affine(4.0), 117.0) == (0, [(1, float("inf"))])
