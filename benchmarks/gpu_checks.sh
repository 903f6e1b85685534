#!/usr/bin/env bash
# A lent GPU's first checks in one go (docs/gpu.md), each under its own time limit, each into its own log in OUT:
#   bash benchmarks/gpu_checks.sh OUT UPSTREAM [BENCH_SECONDS] [PARALLEL_SECONDS]
# First, alone on the GPU (its timings are the ones reported): benchmarks/gpu.py on trm-arc1 against upstream's
# own code (UPSTREAM holds checkouts as trm, hrm, urm), then, when UPSTREAM also holds varc (lillian039/VARC),
# VARC-ViT's training steps against upstream's ARCViT (benchmarks/varc_step.py: arc, offline and TTT, compiled, bf16;
# each row is printed when measured, so a run cut short by its limit keeps the rows it finished). Then side by side,
# since none of them is a timing: the GPU tests (pytest -m gpu), `arcpipe doctor --run trm-arc1` and a learning run
# of TRM (benchmarks/learning_check.py --gpus 1), and the one-GPU rehearsal of the `full` target in a scratch copy
# (config/gpu-rehearsal.yaml). Needs arcpipe importable and `arcpipe`, `snakemake` and `torchrun` on PATH. Exits 0;
# each log ends with the exit status.
# Optional, from the environment:
#   BENCH_RUNS="trm-arc1 hrm-arc1"   the benchmark's runs (default trm-arc1; about 200 s per run with upstream's)
#   VARC_TIMM=DIR                    a folder holding timm (upstream VARC needs its PatchEmbed; `pip install --target
#                                    DIR timm==1.0.12 --no-deps`), when the machine's Python has none
#   ADAM_ATAN2_SDIST=PATH            adam-atan2's source archive (with a setuptools_scm wheel importable): built
#                                    first with the machine's nvcc, so that the GPU tests compare its kernel with the
#                                    PyTorch rule and the benchmark and doctor train with it (PIP_TARGET is honoured)
set -uo pipefail
out=$(realpath "$1") upstream=$(realpath "$2") bench_s=${3:-240} parallel_s=${4:-300}
timm=${VARC_TIMM:+$(realpath "$VARC_TIMM")}
repo=$(cd "$(dirname "$0")/.." && pwd)
export PYTHONUNBUFFERED=1 WANDB_MODE=offline
cd "$repo"
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
if [ -n "${ADAM_ATAN2_SDIST:-}" ]; then  # the SMs it is built for come from its setup.py (8.0, 8.6, 8.9, 9.0)
    step adam-atan2-build 420 env MAX_JOBS="$(nproc)" python3 -m pip install --no-build-isolation --no-deps \
        --no-index "$(realpath "$ADAM_ATAN2_SDIST")"
    step adam-atan2-import 60 python3 -c 'import torch, adam_atan2_backend; print(adam_atan2_backend.__file__)'
fi
# shellcheck disable=SC2086  # BENCH_RUNS is a list of run names
step bench "$bench_s" python3 benchmarks/gpu.py --runs ${BENCH_RUNS:-trm-arc1} --upstream "$upstream" --steps 6 \
    --eval-batches 2
if [ -d "$upstream/varc" ]; then
    step varc-bench "$bench_s" python3 benchmarks/varc_step.py --varc "$upstream/varc" ${timm:+--timm "$timm"} \
        --preset arc --device cuda --compile --steps 10
fi

rehearse() {  # in a scratch copy; then the failed jobs' log tails and the report's summary
    local dir rc
    dir=$(mktemp -d)
    cp -r Snakefile rules workflow config envs tests profiles "$dir/"
    (
        cd "$dir" || exit
        timeout -k 10 "$parallel_s" snakemake full --cores 16 --keep-going --configfile config/config.yaml \
            config/rehearsal.yaml config/gpu-rehearsal.yaml
        rc=$?
        grep -l -E "Error|Traceback" -r logs 2> /dev/null | while read -r f; do echo "--- $f" && tail -n 25 "$f"; done
        cp results/report/full/summary.md "$out/summary.md" 2> /dev/null
        exit $rc
    ) > "$out/rehearsal.log" 2>&1
    echo "== rehearsal: exit $? after $SECONDS s of this script" | tee -a "$out/rehearsal.log"
}
step gpu-tests "$parallel_s" python3 -m pytest -m gpu -q -p no:cacheprovider --timeout 200 -W ignore \
    tests/gpu tests/unit/train/test_checkpoint_rng.py &
rehearse &
step doctor 120 arcpipe doctor --run trm-arc1 &
step learning "$parallel_s" python3 benchmarks/learning_check.py --gpus 1 --batch 128 \
    --minutes "$(python3 -c "print(($parallel_s - 90) / 60)")" --png "$out/learning.png" &
wait
