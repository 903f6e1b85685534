"""The `arcpipe` command: one subcommand per stage, reading file paths and the config, not hyperparameters.

    arcpipe data build --config config/config.yaml --dataset smoke --output-dir results/data/smoke
    arcpipe data verify results/data/smoke
    arcpipe data show results/data/smoke [PUZZLE] [--png OUT.png]

Errors in user input (`ArcpipeError`, a `ValueError`) print as `arcpipe: error: ...`, one line per problem (a config
with three mistakes prints three lines), exit status 2.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from arcpipe.config import ArcpipeError
from arcpipe.names import check_name

log = logging.getLogger("arcpipe")

Handler = Callable[[argparse.Namespace], int | None]


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    _configure_logging(args.verbose)
    try:
        return args.handler(args) or 0
    except ArcpipeError as err:
        for line in str(err).splitlines():
            print(f"arcpipe: error: {line}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("arcpipe: interrupted", file=sys.stderr)
        return 130


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="arcpipe", description=__doc__.split("\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    stages = parser.add_subparsers(dest="stage", required=True, metavar="STAGE")
    _add_data(stages)
    _add_train(stages)
    _add_config(stages)
    _add_models(stages)
    _add_eval(stages)
    _add_runs(stages)
    _add_doctor(stages)
    return parser


# --------------------------------------------------------------------------------------------------------------
# doctor


def _add_doctor(stages: argparse._SubParsersAction) -> None:
    from arcpipe.gpus import GPUS

    doctor = stages.add_parser(
        "doctor", help="can this machine run these runs: versions, GPUs, code paths, a real step, what fits"
    )
    doctor.add_argument(
        "--config", type=Path, nargs="+", default=[Path("config/config.yaml")],
        help="config file(s), later ones overriding (as snakemake --configfile); default config/config.yaml",
    )  # fmt: skip
    doctor.add_argument("--run", action="append", help="a run to check (repeatable); default: every full run")
    doctor.add_argument("--results", type=Path, default=Path("results"), help="where built datasets are")
    doctor.add_argument("--no-steps", action="store_true", help="skip the measured training, evaluation and ttt steps")
    doctor.add_argument(
        "--gpu",
        action="append",
        choices=list(GPUS),
        help="plan each run on this GPU without it (repeatable): largest micro-batch by the memory model, "
        "accumulation, assumed examples/s",
    )
    doctor.set_defaults(handler=_doctor)


def _doctor(args: argparse.Namespace) -> int:
    from arcpipe.doctor.report import doctor
    from arcpipe.eval.ttt_measure import ttt_step_figures

    # a `ttt:` run's test-time-training step is evaluation's code, a layer above the doctor: handed in from here
    return doctor(args.config, args.run, args.results, not args.no_steps, args.gpu, ttt_step_figures)


# --------------------------------------------------------------------------------------------------------------
# runs


def _add_runs(stages: argparse._SubParsersAction) -> None:
    runs = stages.add_parser("runs", help="a run's results on disk")
    verbs = runs.add_subparsers(dest="verb", required=True, metavar="VERB")
    archive = verbs.add_parser(
        "archive",
        help="set a run's checkpoints, state and evaluations aside (results/archive/RUN-TIME/), so that the "
        "workflow trains it anew; the only way arcpipe lets a trained checkpoint leave its place",
    )
    archive.add_argument("run")
    archive.add_argument("--config", type=Path, default=Path("config/config.yaml"))
    archive.set_defaults(handler=_runs_archive)
    wandb_evals = verbs.add_parser(
        "wandb-evals",
        help="log a run's saved evaluations into its W&B run (online; for runs that trained offline, after wandb "
        "sync; once)",
    )
    wandb_evals.add_argument("run")
    wandb_evals.add_argument("--config", type=Path, default=Path("config/config.yaml"))
    wandb_evals.add_argument("--results", type=Path, default=Path("results"), help="the workflow's results folder")
    wandb_evals.set_defaults(handler=_runs_wandb_evals)


def _runs_archive(args: argparse.Namespace) -> int:
    from arcpipe.config import load_config
    from arcpipe.keep import archive_run

    dest = archive_run(load_config(args.config).runs, args.run)
    print(f"{args.run}: moved to {dest}; the next snakemake run trains it anew")
    return 0


def _runs_wandb_evals(args: argparse.Namespace) -> int:
    from arcpipe.config import load_config
    from arcpipe.train.tracking import mirror_evaluations

    runs = load_config(args.config).runs
    if args.run not in runs:
        raise ArcpipeError(f"{args.run}: not a run of {args.config} (runs: {', '.join(sorted(runs))})")
    count = mirror_evaluations(runs[args.run], args.run, args.results)
    print(f"{args.run}: {count} evaluation(s) logged to W&B")
    return 0


# --------------------------------------------------------------------------------------------------------------
# data


def _add_data(stages: argparse._SubParsersAction) -> None:
    data = stages.add_parser("data", help="build, verify and inspect ARC datasets")
    verbs = data.add_subparsers(dest="verb", required=True, metavar="VERB")

    build = verbs.add_parser(
        "build",
        help="build a dataset declared in config, or with the upstream builder's flags (upstream_exact mode)",
    )
    build.add_argument("--config", type=Path, help="workflow config (with --dataset)")
    build.add_argument("--dataset", help="a dataset name declared under `datasets:` in the config")
    build.add_argument("--output-dir", type=Path, required=True)
    build.add_argument("--workers", type=int, default=None, help="processes (default: config, else all cores)")
    upstream = build.add_argument_group("upstream builder flags (instead of --config/--dataset)")
    upstream.add_argument("--input-file-prefix", help="e.g. kaggle/combined/arc-agi")
    upstream.add_argument("--subsets", nargs="+", type=_subset_name)
    upstream.add_argument("--test-set-name", type=_subset_name)
    upstream.add_argument("--test-set-name2", default="your_test_set")
    upstream.add_argument("--num-aug", type=int, default=1000)
    upstream.add_argument("--seed", type=int, default=42)
    upstream.add_argument("--puzzle-identifiers-start", type=int, default=1)
    build.set_defaults(handler=_data_build)

    verify = verbs.add_parser("verify", help="check a built dataset; writes DIR/verify.json, non-zero on failure")
    verify.add_argument("dataset_dir", type=Path)
    verify.set_defaults(handler=_data_verify)

    show = verbs.add_parser("show", help="statistics, or render one puzzle and its augmentations")
    show.add_argument("dataset_dir", type=Path)
    show.add_argument("puzzle", nargs="?", help="an original task id, e.g. 007bbfb7")
    show.add_argument("--png", type=Path, help="write the rendering as a PNG instead of text")
    show.add_argument("--num-views", type=int, default=4, help="augmented views to render")
    show.set_defaults(handler=_data_show)


def _data_build(args: argparse.Namespace) -> int:
    from arcpipe.config import DatasetConfig, KaggleSource, load_config
    from arcpipe.data.build import build_dataset

    if args.config or args.dataset:
        if not (args.config and args.dataset):
            raise ArcpipeError("data build: --config and --dataset go together")
        if args.input_file_prefix:
            raise ArcpipeError("data build: use either --config/--dataset or the upstream flags, not both")
        cfg = load_config(args.config)
        if args.dataset not in cfg.datasets:
            raise ArcpipeError(
                f"{args.config}: no dataset {args.dataset!r} under datasets "
                f"(declared: {', '.join(sorted(cfg.datasets))})"
            )
        dataset = cfg.datasets[args.dataset]
    else:
        missing = [
            flag
            for flag, value in (
                ("--input-file-prefix", args.input_file_prefix),
                ("--subsets", args.subsets),
                ("--test-set-name", args.test_set_name),
            )
            if not value
        ]
        if missing:
            raise ArcpipeError(f"data build: give --config and --dataset, or {', '.join(missing)}")
        dataset = DatasetConfig(
            sources=[KaggleSource(kaggle=args.input_file_prefix, subsets=args.subsets)],
            test_set=args.test_set_name,
            num_aug=args.num_aug,
            seed=args.seed,
            mode="upstream_exact",
        )
        if args.test_set_name2 != "your_test_set" or args.puzzle_identifiers_start != 1:
            raise ArcpipeError(
                "data build: --test-set-name2 and --puzzle-identifiers-start other than their defaults are "
                "not supported (upstream's published builds use the defaults)"
            )
    build_dataset(dataset, args.output_dir, workers=args.workers)
    return 0


def _subset_name(value: str) -> str:
    # a subset name becomes part of a file name (<prefix>_<subset>_challenges.json): checked as the flag is parsed
    try:
        return check_name(value, "subset name")
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _data_verify(args: argparse.Namespace) -> int:
    from arcpipe.data.verify import verify_dataset

    report = verify_dataset(args.dataset_dir)
    for failure in report["failures"]:
        print(f"FAIL {failure}", file=sys.stderr)
    for warning in report["warnings"]:
        print(f"warn {warning}", file=sys.stderr)
    print(f"{args.dataset_dir}: {'ok' if report['ok'] else 'FAILED'} ({args.dataset_dir / 'verify.json'})")
    return 0 if report["ok"] else 1


def _data_show(args: argparse.Namespace) -> int:
    from arcpipe.data.show import show_dataset

    show_dataset(args.dataset_dir, args.puzzle, png=args.png, num_views=args.num_views)
    return 0


# --------------------------------------------------------------------------------------------------------------
# train


def _add_train(stages: argparse._SubParsersAction) -> None:
    train = stages.add_parser("train", help="train a run to an evaluation boundary (one process, or under torchrun)")
    train.add_argument("--config", type=Path, required=True, help="the run's resolved config (or the workflow's)")
    train.add_argument("--run", required=True, help="a run name declared under `runs:`")
    train.add_argument("--data", type=Path, required=True, help="the verified dataset directory")
    train.add_argument("--out", type=Path, required=True, help="the run directory, results/runs/<run>")
    what = train.add_mutually_exclusive_group(required=True)
    what.add_argument("--until-epoch", type=int, help="train to this evaluation boundary (cumulative epochs)")
    what.add_argument("--preflight", type=Path, help="a few real steps, save, load, resume, evaluate; report here")
    train.add_argument(
        "--deadline", type=_minutes, help="the job's time limit (e.g. 90m, 2h, 45s): save and exit before it"
    )
    train.set_defaults(handler=_train)


def _train(args: argparse.Namespace) -> int:
    if args.preflight:
        from arcpipe.train.preflight import preflight

        return preflight(args.config, args.run, args.data, args.out, args.preflight)
    from arcpipe.train.loop import train

    return train(args.config, args.run, args.data, args.out, args.until_epoch, args.deadline)


def _minutes(text: str) -> float:
    units = {"s": 1 / 60, "m": 1.0, "h": 60.0}
    try:
        return float(text[:-1]) * units[text[-1]] if text[-1] in units else float(text)
    except (ValueError, IndexError):
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 90m, 2h or 45s") from None


# --------------------------------------------------------------------------------------------------------------
# config


def _add_config(stages: argparse._SubParsersAction) -> None:
    config = stages.add_parser("config", help="check a config, or print its JSON schema")
    verbs = config.add_subparsers(dest="verb", required=True, metavar="VERB")
    check = verbs.add_parser(
        "check", help="validate a config file and print the plan of its runs and their forecast GPU-hours and cost"
    )
    check.add_argument(
        "config",
        type=Path,
        nargs="+",
        help="a config file; more files are merged over it as Snakemake merges --configfile (e.g. a sweeps block)",
    )
    check.add_argument(
        "--results", type=Path, default=Path("results"), help="where built datasets and doctor records are read"
    )
    check.set_defaults(handler=_config_check)
    schema = verbs.add_parser("schema", help="print the JSON schema generated from the pydantic models")
    schema.add_argument("--output", type=Path, help="write to this file instead of stdout")
    schema.set_defaults(handler=_config_schema)


def _config_check(args: argparse.Namespace) -> int:
    from arcpipe.config import cost_per_hour, load_configs
    from arcpipe.forecast import forecast_lines, forecast_ranges, sweep_forecast_lines

    cfg = load_configs(args.config)
    for name, run in cfg.runs.items():
        print(
            f"{name}: {run.arch}/{run.preset} on {run.dataset}, {run.epochs} epochs, "
            f"{run.num_evaluations} checkpoints in {len(run.segment_ends())} segments, "
            f"{run.nodes} node(s) x {run.gpus_per_node} GPU(s), target {run.target}, "
            f"{cost_per_hour(run, cfg.report.gpu_hour_price):.2f}/hour at {cfg.report.gpu_hour_price}/GPU-hour"
            + (f", seed {run.seed} of seed group {run.seed_group}" if run.seed_group else "")
            + (f", arm {run.sweep.arm} of sweep {run.sweep.name}" if run.sweep else "")
        )
    if cfg.runs:
        ranges = forecast_ranges(cfg, args.results)
        header, *lines, total = forecast_lines(cfg, args.results, list(cfg.runs), ranges)
        print(header)
        for line in lines:
            print(f"  {line}")
        print(f"  {total}")
        for sweep in cfg.sweeps:
            for line in sweep_forecast_lines(cfg, sweep, ranges, args.results):
                print(f"  {line}")
        _memory_warnings(cfg, args.results)
    sweeps = f", {len(cfg.sweeps)} sweeps" if cfg.sweeps else ""
    print(f"{' + '.join(map(str, args.config))}: ok ({len(cfg.datasets)} datasets, {len(cfg.runs)} runs{sweeps})")
    return 0


def _memory_warnings(cfg, results: Path) -> None:  # noqa: ANN001
    """A warning per GPU run whose micro-batch will not fit its GPU by the memory model (arcpipe.doctor.memory), from
    its shipped or cached figures: a run without them is named, not computed (a fake-tensor pass takes 10-30 s per
    run; `arcpipe doctor --gpu` computes and caches them)."""
    from arcpipe.doctor.memory import fit_problems
    from arcpipe.gpus import DEFAULT_GPU

    problems, unknown = fit_problems(cfg, cfg.runs, results)
    for problem in problems:
        print(f"warning: {problem}")
    if unknown:
        print(
            f"memory: not checked for {', '.join(unknown)} (no figures for its model yet): "
            f"arcpipe doctor --gpu {DEFAULT_GPU} --no-steps computes and keeps them"
        )


def _config_schema(args: argparse.Namespace) -> int:
    import json

    from arcpipe.config import json_schema

    text = json.dumps(json_schema(), indent=2) + "\n"
    if args.output:
        args.output.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


# --------------------------------------------------------------------------------------------------------------
# models


def _add_models(stages: argparse._SubParsersAction) -> None:
    models = stages.add_parser("models", help="list architectures and presets with parameter counts")
    models.add_argument("--vocab-size", type=int, default=12, help="vocabulary of the count (ARC: 12)")
    models.set_defaults(handler=_models_list)

    model = stages.add_parser("model", help="import or export upstream checkpoints")
    verbs = model.add_subparsers(dest="verb", required=True, metavar="VERB")
    imp = verbs.add_parser("import", help="convert an upstream TRM/HRM/URM/VARC checkpoint to arcpipe weights")
    imp.add_argument(
        "--arch", required=True, choices=["trm", "hrm", "urm", "transformer", "varc", "varc-unet", "loopvit"]
    )
    imp.add_argument(
        "checkpoint", type=Path, help="upstream step_N (TRM/HRM), step_N.pt (URM) or checkpoint_best.pt (VARC)"
    )
    imp.add_argument("--config", type=Path, help="the all_config.yaml saved with it (not for varc: in its checkpoint)")
    imp.add_argument("output", type=Path, help="arcpipe weights file to write")
    imp.add_argument("--dataset", type=Path, help="the dataset it was trained on (records identifiers.json)")
    imp.set_defaults(handler=_models_import)
    exp = verbs.add_parser("export", help="write arcpipe weights in the upstream layout (+ all_config.yaml)")
    exp.add_argument("checkpoint", type=Path)
    exp.add_argument("output", type=Path)
    exp.set_defaults(handler=_models_export)


def _models_list(args: argparse.Namespace) -> int:
    from arcpipe.models import loopvit, varc, varc_unet
    from arcpipe.models.registry import PRESETS, make_arch_config, preset_parameter_count

    print(f"{'arch':<12} {'preset':<8} {'parameters':>12}  settings (vocab {args.vocab_size}, seq_len 900)")
    missing = None
    for arch, presets in PRESETS.items():
        for name, fields in presets.items():
            count: int | str
            if arch == "varc":  # its own canvas and colours: vocab and seq_len do not apply
                count = varc.preset_parameter_count(make_arch_config(arch, name, {}))
            elif arch == "loopvit":  # as varc: upstream LoopViT's count
                count = loopvit.preset_parameter_count(make_arch_config(arch, name, {}))
            elif arch == "varc-unet":
                try:
                    count = varc_unet.preset_parameter_count(make_arch_config(arch, name, {}))
                except ImportError as err:  # diffusers is an optional dependency
                    count, missing = "-", str(err)
            else:
                count = preset_parameter_count(arch, name, vocab_size=args.vocab_size)
            settings = " ".join(f"{k}={v}" for k, v in fields.items())
            print(
                f"{arch:<12} {name:<8} {count:>12,}  {settings}"
                if isinstance(count, int)
                else f"{arch:<12} {name:<8} {count:>12}  {settings}"
            )
    print("parameters exclude the puzzle-embedding table (a buffer: num_puzzle_identifiers x puzzle_emb_ndim) and")
    print("VARC's and LoopViT's task-token table (num_puzzle_identifiers x embed_dim), as upstream counts them")
    if missing:
        print(f"-: {missing}")
    return 0


def _models_import(args: argparse.Namespace) -> int:
    from arcpipe.models.upstream_io import import_upstream

    import_upstream(args.arch, args.checkpoint, args.config, args.output, args.dataset)
    return 0


def _models_export(args: argparse.Namespace) -> int:
    from arcpipe.models.upstream_io import export_upstream

    export_upstream(args.checkpoint, args.output)
    return 0


# --------------------------------------------------------------------------------------------------------------
# evaluate, predict, report


def _add_eval(stages: argparse._SubParsersAction) -> None:
    evaluate = stages.add_parser(
        "evaluate", help="pass@K, submission.json and votes of one checkpoint on its dataset's test split"
    )
    evaluate.add_argument("checkpoint", type=Path, help="an arcpipe weights file, e.g. results/runs/R/ckpt/epoch_N.pt")
    evaluate.add_argument("dataset", type=Path, help="the verified dataset it was trained with")
    evaluate.add_argument("--out", type=Path, required=True, help="directory for metrics.json, submission.json, ...")
    evaluate.add_argument("--config", type=Path, help="workflow or run config: its `evaluation:` section")
    evaluate.add_argument("--quick", type=int, metavar="N", help="only the first N tasks of test_puzzles.json")
    evaluate.add_argument(
        "--quick-tasks", type=Path, metavar="FILE", help="only the tasks of this quick-evaluation record (JSON)"
    )
    evaluate.add_argument("--device", choices=["cpu", "cuda"], help="default: cuda when available")
    evaluate.set_defaults(handler=_eval_evaluate)

    ttt = stages.add_parser("ttt", help="test-time training of a canvas model (VARC) per test task, as jobs")
    verbs = ttt.add_subparsers(dest="verb", required=True, metavar="VERB")
    job = verbs.add_parser("job", help="fit and answer the test tasks of one job (eval/ttt.py); writes --out last")
    job.add_argument("checkpoint", type=Path, help="the run's checkpoint, e.g. results/runs/R/ckpt/epoch_N.pt")
    job.add_argument("dataset", type=Path, help="the verified dataset it was trained with")
    job.add_argument("--run-config", type=Path, required=True, help="the run's config (results/runs/R/config.yaml)")
    job.add_argument("--run", required=True, help="the run: its `ttt:` settings")
    job.add_argument("--job", type=int, required=True, help="0 .. ttt.jobs - 1")
    job.add_argument("--out", type=Path, required=True, help="the job's answers (.npz)")
    job.add_argument("--config", type=Path, help="workflow or run config: its `evaluation:` section")
    job.add_argument("--device", choices=["cpu", "cuda"], help="default: cuda when available")
    job.set_defaults(handler=_ttt_job)
    collect = verbs.add_parser("collect", help="vote over every job's answers; the evaluation files in --out")
    collect.add_argument("jobs", type=Path, nargs="+", help="every job's .npz")
    collect.add_argument("--dataset", type=Path, required=True, help="the verified dataset")
    collect.add_argument("--out", type=Path, required=True, help="directory for metrics.json, submission.json, ...")
    collect.add_argument("--config", type=Path, help="workflow or run config: its `evaluation:` section")
    collect.add_argument("--run", help="the run, recorded in metrics.json")
    collect.add_argument("--epoch", type=int, help="the checkpoint's epoch, recorded in metrics.json")
    collect.set_defaults(handler=_ttt_collect)

    predict = stages.add_parser("predict", help="submission.json for an ARC challenges file, without a built dataset")
    predict.add_argument("challenges", type=Path, help="ARC challenges JSON (Kaggle layout)")
    predict.add_argument("checkpoint", type=Path, help="an arcpipe weights file")
    predict.add_argument("--identifiers", type=Path, required=True, help="the identifiers.json it was trained with")
    predict.add_argument("--out", type=Path, required=True, help="submission.json to write")
    predict.add_argument("--solutions", type=Path, help="ARC solutions JSON: also print pass@K")
    predict.add_argument("--config", type=Path, help="workflow or run config: its `evaluation:` section")
    predict.add_argument("--device", choices=["cpu", "cuda"], help="default: cuda when available")
    predict.add_argument(
        "--adapt",
        type=float,
        metavar="MINUTES",
        help="fit new puzzle-embedding rows for tasks the checkpoint has none for, on their demonstrations, for "
        "this long (10%% of it, at most 5 minutes, kept back as a margin)",
    )
    predict.add_argument("--adapt-steps", type=int, metavar="N", help="stop adapting after N steps (with --adapt)")
    predict.add_argument(
        "--adapt-mode",
        choices=["rows", "rows+full", "full", "lora"],
        default="rows",
        help="what adapts: the new rows only (default; weights frozen), the rows for half the budget then every "
        "weight, every weight from the start, or low-rank adapters on the blocks' projections plus the rows",
    )
    predict.add_argument("--seed", type=int, default=0, help="seed of the adaptation's views and batches")
    predict.set_defaults(handler=_eval_predict)

    report = stages.add_parser("report", help="pass@K tables and plots from evaluation directories")
    report.add_argument("--out", type=Path, required=True, help="directory for the tables and PNGs")
    report.add_argument("--metrics", type=Path, nargs="*", default=[], help="results/eval/<run>/epoch_<N>/metrics.json")
    report.add_argument("--train-metrics", type=Path, nargs="*", default=[], help="results/runs/<run>/metrics/*.jsonl")
    report.add_argument("--votes", type=Path, nargs="*", default=[], help="votes.npz files for the pooled table")
    report.add_argument("--config", type=Path, help="workflow config: runs (progress, published numbers), main K")
    report.add_argument(
        "--datasets",
        type=Path,
        nargs="*",
        default=[],
        help="built datasets (results/data/<name>) whose tasks the task pages draw; default: each evaluation's own",
    )
    report.set_defaults(handler=_eval_report)


def _eval_evaluate(args: argparse.Namespace) -> int:
    from arcpipe.config import load_evaluation_config
    from arcpipe.eval.evaluate import evaluate_checkpoint

    config = load_evaluation_config(args.config) if args.config else None
    evaluate_checkpoint(
        args.checkpoint,
        args.dataset,
        args.out,
        config,
        quick=args.quick,
        device=args.device,
        quick_tasks=args.quick_tasks,
    )
    return 0


def _ttt_job(args: argparse.Namespace) -> int:
    from arcpipe.config import load_config, load_evaluation_config
    from arcpipe.eval.ttt import run_job

    run = load_config(args.run_config).runs.get(args.run)
    if run is None or run.ttt is None:
        raise ArcpipeError(f"{args.run_config}: run {args.run} has no `ttt:` settings; add them or drop the job")
    if not 0 <= args.job < run.ttt.jobs:
        raise ArcpipeError(f"--job {args.job}: run {args.run} has ttt.jobs={run.ttt.jobs} (jobs 0..{run.ttt.jobs - 1})")
    config = load_evaluation_config(args.config) if args.config else None
    run_job(args.checkpoint, args.dataset, args.out, args.job, run.ttt, config, device=args.device, compile=run.compile)
    return 0


def _ttt_collect(args: argparse.Namespace) -> int:
    from arcpipe.config import load_evaluation_config
    from arcpipe.eval.ttt import collect

    config = load_evaluation_config(args.config) if args.config else None
    info = {"run": args.run, "epoch": args.epoch, "checkpoint": f"epoch_{args.epoch}" if args.epoch else None}
    metrics = collect(args.jobs, args.dataset, args.out, config, info)
    print(", ".join(f"{k} {100 * v:.2f}%" for k, v in metrics.items() if k.startswith("pass@")))
    return 0


def _eval_predict(args: argparse.Namespace) -> int:
    from arcpipe.config import load_evaluation_config
    from arcpipe.eval.evaluate import predict_challenges

    config = load_evaluation_config(args.config) if args.config else None
    if args.adapt is not None and args.adapt < 0:
        raise ArcpipeError(f"--adapt {args.adapt}: the adaptation budget is minutes >= 0")
    summary = predict_challenges(
        args.challenges,
        args.checkpoint,
        args.identifiers,
        args.out,
        args.solutions,
        config,
        device=args.device,
        adapt_minutes=args.adapt,
        adapt_steps=args.adapt_steps,
        adapt_mode=args.adapt_mode,
        seed=args.seed,
    )
    if summary is not None and summary.pass_at:
        print(", ".join(f"pass@{k} {100 * v:.2f}%" for k, v in summary.pass_at.items()))
    return 0


def _eval_report(args: argparse.Namespace) -> int:
    from arcpipe.config import load_config
    from arcpipe.report.answers import write_report_pages
    from arcpipe.report.load import runs_from_config
    from arcpipe.report.render import render_pooled, render_report

    cfg = load_config(args.config) if args.config else None
    runs = runs_from_config(cfg) if cfg else None
    main_k = cfg.report.main_k if cfg else 2
    written = render_report(args.out, args.metrics, args.train_metrics, None, runs, main_k)
    if args.votes:
        ks = cfg.evaluation.pass_ks if cfg else None
        render_pooled(args.out / "pooled.csv", args.out / "pooled.md", args.votes, ks)
        written += [args.out / f"pooled.{ext}" for ext in ("csv", "md", "html")]
    # a page per task, the task index (tasks/index.html) and the folder's front page (index.html)
    write_report_pages(args.out, args.metrics, args.datasets, written, main_k)
    print(f"report written to {args.out} (open {args.out / 'index.html'})")
    return 0


def _configure_logging(verbose: bool) -> None:
    from arcpipe.train.distributed import is_rank_zero

    level = logging.DEBUG if verbose else logging.INFO
    if not is_rank_zero():
        level = logging.WARNING
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")


if __name__ == "__main__":
    sys.exit(main())
