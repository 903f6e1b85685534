"""The lines a finished `snakemake` call ends on (arcpipe.outcome): per run its results, or each failed job's error.

Result trees are fabricated in tmp_path with the columns the report writes; the Snakemake log is captured from a real
`snakemake smoke` whose dataset source was an empty directory (paths outside the work tree shortened).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import yaml
from snakemake.logging import DefaultFormatter

from arcpipe.config import validate_config
from arcpipe.gates import check_gate, gate_status
from arcpipe.outcome import FailedJob, failed_jobs, failure_lines, job_error_line, on_failure, on_success, success_lines

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = yaml.safe_load((ROOT / "config/config.yaml").read_text())
CFG = validate_config(SHIPPED)

# .snakemake/log/<time>.snakemake.log of that run, from the failing job's start to the end
CAPTURED_LOG = """\
[Wed Nov 25 13:45:36 2026]
localrule build_dataset:
    output: results/data/smoke/build.json, results/data/smoke/identifiers.json, results/data/smoke/test_puzzles.json, results/data/smoke/train, results/data/smoke/test
    log: logs/build_dataset/smoke.log
    jobid: 2
    reason: Missing output files: results/data/smoke/build.json, results/data/smoke/test, results/data/smoke/train
    wildcards: dataset=smoke
    threads: 2
    resources: tmpdir=/tmp, runtime=120, mem_mb=16000, mem=16 GB, mem_mib=15259
Shell command: None
RuleException:
CalledProcessError in file "/home/user/arcpipe/rules/data.smk", line 22:
Command 'set -euo pipefail;  /home/user/arcpipe/.venv/bin/python /home/user/scratch/.snakemake/scripts/tmp1mc1b4hl.build_dataset.py' returned non-zero exit status 2.
[Wed Nov 25 13:45:36 2026]
Error in rule build_dataset:
    message: None
    jobid: 2
    output: results/data/smoke/build.json, results/data/smoke/identifiers.json, results/data/smoke/test_puzzles.json, results/data/smoke/train, results/data/smoke/test
    log: logs/build_dataset/smoke.log (check log file(s) for error details)
Shutting down, this might take some time.
Exiting because a job execution failed. Look above for error messages
Complete log(s): /home/user/scratch/.snakemake/log/2026-11-25T134534.808484.snakemake.log
Elapsed time: 0:00:01.215572
WorkflowError:
At least one job did not complete successfully.
"""  # noqa: E501
BUILD_ERROR = "arcpipe: error: empty: no *.json task files (directory source, subset 'evaluation')"

SUMMARY_COLUMNS = ["run", "epoch", "last pass@2", "selected pass@2", "selected_epoch", "gpu_hours"]


def _report(root: Path, rows: list[tuple], folder: str = "results/report") -> list[str]:
    """summary.csv and learning.csv as render_report writes them (the columns read here); the DAG's outputs."""
    out = root / folder
    out.mkdir(parents=True)
    pd.DataFrame(rows, columns=SUMMARY_COLUMNS).to_csv(out / "summary.csv", index=False)
    learning = pd.DataFrame({"run": [row[0] for row in rows], "first_accuracy": 10.0, "last_3_accuracy": 47.25})
    learning.to_csv(out / "learning.csv", index=False)
    runs = [f"results/eval/{row[0]}/epoch_{row[1]}/metrics.json" for row in rows]
    return runs + [f"{folder}/summary.csv", f"{folder}/learning.csv"]


def _metrics(root: Path, run: str, epochs: dict[int, float], accuracies: list[float], step_s: float) -> None:
    """A run's evaluations (pass@2 per epoch) and training metrics: one record per step, every other one counted."""
    for epoch, passk in epochs.items():
        path = root / f"results/eval/{run}/epoch_{epoch}/metrics.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({"epoch": epoch, "pass@1": passk / 2, "pass@2": passk, "wall_time_s": 360.0}))
    records = []
    for i, accuracy in enumerate(accuracies):
        records.append({"step": 2 * i + 1, "train/accuracy": accuracy, "train/count": 1.0, "time/step_s": step_s})
        records.append({"step": 2 * i + 2, "train/accuracy": 0.0, "train/count": 0.0, "time/step_s": step_s})
    path = root / f"results/runs/{run}/metrics/epoch_{max(epochs)}.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(record) + "\n" for record in records))


def test_each_run_of_the_report_gets_its_last_and_selected_pass_at_k_accuracy_and_gpu_hours(tmp_path):
    outputs = _report(tmp_path, [("trm-arc1", 40000, 12.5, 15.0, 30000, 123.4), ("smoke-trm", 4, 0.0, 6.25, 2, 0.0)])
    lines = success_lines(tmp_path, outputs, CFG)
    assert lines == [
        "pass@2 in % of the last and the selected checkpoint (epoch), training token accuracy (mean of the last 3 "
        "counted steps), GPU-hours:",
        "  trm-arc1   last 12.50 (40000)  selected 15.00 (30000)  train acc 47.2%  GPU-h 123",
        "  smoke-trm  last 0.00 (4)  selected 6.25 (2)  train acc 47.2%  GPU-h 0.00",
        "report: results/report/summary.md (every table beside it as .md, .csv, .html)",
        "as one HTML file: snakemake --report report.html report",
    ]


def test_without_selection_tasks_no_selected_column_and_a_line_saying_why(tmp_path):
    outputs = _report(tmp_path, [("smoke-trm", 4, 6.25, float("nan"), float("nan"), 0.0)], "results/report/full")
    lines = success_lines(tmp_path, outputs, CFG)
    assert lines[1] == "  smoke-trm  last 6.25 (4)  train acc 47.2%  GPU-h 0.00"
    assert "no checkpoint selected: evaluation.selection_tasks is 0" in lines
    assert lines[-1] == "as one HTML file: snakemake --report report.html full"  # results/report/full: `full`


def test_only_the_runs_of_this_dag_are_listed(tmp_path):
    outputs = _report(tmp_path, [("smoke-trm", 4, 0.0, 0.0, 4, 0.0), ("trm-arc1", 10000, 1.0, 1.0, 10000, 5.0)])
    lines = success_lines(tmp_path, [path for path in outputs if "trm-arc1" not in path], CFG)
    assert sum(line.startswith("  ") for line in lines) == 1 and "smoke-trm" in lines[1]


def test_without_a_report_each_run_is_read_from_its_own_metrics(tmp_path):
    # trm-arc1: 1 node x 4 GPUs training (100 steps x 36 s = 1 h), 1 evaluation GPU (2 x 360 s = 0.2 h)
    _metrics(tmp_path, "trm-arc1", {10000: 0.05, 20000: 0.125}, [0.1, 0.5, 0.6, 0.7] + [0.8] * 46, 36.0)
    outputs = ["results/runs/trm-arc1/ckpt/epoch_20000.pt", "results/eval/trm-arc1/epoch_20000/metrics.json"]
    lines = success_lines(tmp_path, outputs, CFG)
    assert lines[1] == "  trm-arc1  last 12.50 (20000)  train acc 80.0%  GPU-h 4.20"
    assert lines[-1] == "the tables of every run, selected checkpoints included: snakemake report"


def test_a_run_its_gate_stopped_says_so_with_or_without_a_report(tmp_path):
    """urm-arc1 is gated on urm-arc1-validate in the shipped config: its gate record (check_gate's output in the DAG)
    fell short, so it has no scores; the report's status column, or the record itself, says why."""
    gate = CFG.runs["urm-arc1"].gate
    metrics = tmp_path / "results/eval/urm-arc1-validate/epoch_10000/metrics.json"
    metrics.parent.mkdir(parents=True)
    metrics.write_text(json.dumps({"epoch": 10000, "pass@1": 0.031}))
    check_gate("urm-arc1", gate, 10000, metrics, tmp_path / "results/gates/urm-arc1.json")
    status = gate_status(tmp_path / "results", "urm-arc1")
    assert status.startswith("not started: gate urm-arc1-validate pass@1 = 0.031")
    alone = success_lines(tmp_path, ["results/gates/urm-arc1.json"], CFG)
    assert alone == [f"  urm-arc1  {status}"]
    outputs = _report(tmp_path, [("urm-arc1", float("nan"), float("nan"), float("nan"), float("nan"), 0.0)])
    summary = pd.read_csv(tmp_path / "results/report/summary.csv").assign(status=status)
    summary.to_csv(tmp_path / "results/report/summary.csv", index=False)
    lines = success_lines(tmp_path, [*outputs, "results/gates/urm-arc1.json"], CFG)
    assert f"  urm-arc1  {status}" in lines


def test_a_run_without_results_yet_prints_nothing(tmp_path):
    assert success_lines(tmp_path, ["results/runs/trm-arc1/preflight.json"], CFG) == []


def test_the_failed_job_and_its_log_are_read_from_a_real_snakemake_log():
    # the job-info block above the error names the same log: only the "Error in rule" block counts
    assert failed_jobs(CAPTURED_LOG) == [FailedJob("build_dataset", ("logs/build_dataset/smoke.log",))]


def _job_error(rule: str, log: str, indent: bool) -> dict:
    """What Snakemake's logger gets for a failed job (snakemake.jobs.Job.get_log_error_info)."""
    info = {"rule_name": rule, "msg": None, "rule_msg": None, "jobid": 3, "input": [], "output": ["out"], "log": [log]}
    return info | {"conda_env": None, "shellcmd": None, "aux": {}, "indent": indent}


def test_a_failed_group_names_each_of_its_jobs_and_a_restarted_job_is_named_once():
    # as Snakemake logs a failed group (snakemake.jobs.GroupJob.log_error): its own block, then each job's, indented
    formatter, logs = DefaultFormatter(), ["logs/train/epoch_2.log", "logs/train/epoch_4.log"]
    members = [_job_error("train_segment", log, indent=True) for log in logs]
    group = formatter.format_group_error({"msg": "", "aux_logs": [], "job_error_info": members})
    text = "\n".join([group, *map(formatter.format_job_error, members), "Shutting down, this might take some time."])
    single = formatter.format_job_error(_job_error("render_report", "logs/render_report/report.log", indent=False))
    assert failed_jobs(f"{text}\n{single}\nTrying to restart job 9.\n{single}\n") == [
        FailedJob("train_segment", ("logs/train/epoch_2.log",)),
        FailedJob("train_segment", ("logs/train/epoch_4.log",)),
        FailedJob("render_report", ("logs/render_report/report.log",)),
    ]


@pytest.mark.parametrize(
    "log, expected",
    [
        ("loading\narcpipe: error: data build: give --config and --dataset\n", "arcpipe: error: data build: give"),
        (  # torchrun: the child's exception, not torchrun's own wrapper around it
            '[rank0]: Traceback (most recent call last):\n[rank0]:   File "loop.py", line 3, in step\n'
            "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n  time: 2026\n",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        ),
        ("step 1\nstep 2\nKilled\n\n", "Killed"),  # no error line: the last line
    ],
)
def test_the_job_error_line_is_its_own_last_error(tmp_path, log, expected):
    (tmp_path / "job.log").write_text(log)
    assert job_error_line(tmp_path / "job.log").startswith(expected)


def test_each_failed_job_prints_its_rule_error_and_log(tmp_path):
    (tmp_path / "logs/build_dataset").mkdir(parents=True)
    (tmp_path / "logs/build_dataset/smoke.log").write_text(f"Traceback\nValueError: other\n{BUILD_ERROR}\n")
    jobs = [FailedJob("build_dataset", ("logs/build_dataset/smoke.log",)), FailedJob("render_report", ())]
    assert failure_lines(tmp_path, jobs) == [
        "2 jobs failed:",
        f"  build_dataset: {BUILD_ERROR}",
        "    log: logs/build_dataset/smoke.log",
        "  render_report: no error line in its log",
        "    log: none (the rule declares no log)",
    ]
    assert failure_lines(tmp_path, []) == []  # interrupted: no job failed


def test_without_the_scheduler_the_hook_reads_snakemakes_log(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "logs/build_dataset").mkdir(parents=True)
    (tmp_path / "logs/build_dataset/smoke.log").write_text(BUILD_ERROR + "\n")
    (tmp_path / "snakemake.log").write_text(CAPTURED_LOG)
    on_failure(SimpleNamespace(), [str(tmp_path / "snakemake.log")])
    assert capsys.readouterr().err.splitlines() == [
        "arcpipe: 1 job failed:",
        f"arcpipe:   build_dataset: {BUILD_ERROR}",
        "arcpipe:     log: logs/build_dataset/smoke.log",
    ]


def test_the_hooks_never_raise_they_say_why_there_is_no_summary(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results/report").mkdir(parents=True)
    (tmp_path / "results/report/summary.csv").write_text("not,a,summary\n")
    job = SimpleNamespace(output=["results/eval/smoke-trm/epoch_4/metrics.json", "results/report/summary.csv"])
    on_success(SimpleNamespace(dag=SimpleNamespace(jobs=[job])), CFG)
    on_failure(SimpleNamespace(), [str(tmp_path / "missing.log")])
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("arcpipe: no summary of the results (KeyError: 'run')")
    assert err[1].startswith("arcpipe: could not name the failed jobs (FileNotFoundError")


def test_a_run_its_stop_rule_ended_keeps_its_scores_and_says_where_it_stopped(tmp_path):
    outputs = _report(tmp_path, [("smoke-trm", 4, 6.25, float("nan"), float("nan"), 0.0)])
    summary = pd.read_csv(tmp_path / "results/report/summary.csv").assign(status="stopped at epoch 4 of 8: why")
    summary.to_csv(tmp_path / "results/report/summary.csv", index=False)
    lines = success_lines(tmp_path, outputs, CFG)
    assert lines[1] == "  smoke-trm  last 6.25 (4)  train acc 47.2%  GPU-h 0.00  (stopped at epoch 4 of 8: why)"
