"""`snakemake -n sweep_<name>` plans every arm of a sweep (config `sweeps:`) and prints its forecast, per arm."""

from __future__ import annotations

from scratch import snakemake

SWEEP = {"base": "smoke-trm", "grid": {"arch_overrides.H_cycles": [1, 2], "ema": [True, False]}, "seeds": [0, 1]}


def test_a_sweep_target_plans_every_arm_with_its_seeds_and_prints_the_sweeps_forecast(tmp_path):
    proc = snakemake(tmp_path, {"sweeps": {"depth": SWEEP}}, "-n", "sweep_depth", name="sweep.yaml")
    assert proc.returncode == 0, proc.stderr[-3000:]
    arms = [f"depth-H_cycles_{h}-ema_{e}-s{s}" for h in (1, 2) for e in ("true", "false") for s in (0, 1)]
    for arm in arms:  # 2 boundaries each: trained and evaluated
        assert f"results/eval/{arm}/epoch_4/metrics.json" in proc.stdout
    # the base is a run of its own, not an arm, and the reference of the sweep's ablation table: planned too
    assert "results/eval/smoke-trm/epoch_4/metrics.json" in proc.stdout
    stats = proc.stdout.split("Job stats:")[1]
    assert "train_segment               18" in stats and "evaluate_checkpoint         18" in stats
    assert "render_ablation_depth        1" in stats
    forecast = [line for line in proc.stderr.splitlines() if line.startswith("arcpipe forecast: ")]
    assert (
        "arcpipe forecast: sweep depth (base smoke-trm): 4 arms x 2 seeds = 8 runs, 0.00 GPU-h, cost 0.00" in forecast
    )
