#!/usr/bin/env bash
# The whole test suite, as CI runs it: style, workflow lint and plan, unit/integration/workflow/cluster tests.
#   bash setup.sh && source .venv/bin/activate && bash tests/run.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
# The tests keep more processes running than the machine has cores (three workers, each starting Snakemake jobs and
# torch processes, beside the numeric passes). OpenMP's default is to spin a thread that waits for work: a torch
# process of two threads, trained beside three busy processes, used 16.7 s of CPU where one thread or passive waiting
# used 11.3-11.8 s. Passive waiting changes when a thread sleeps, never what it computes.
export OMP_WAIT_POLICY=PASSIVE
echo "== style"
ruff format --check .
ruff check .
snakefmt --check Snakefile rules/
lint-imports --no-cache # imports run one way: the layer order and the no-circles rule in pyproject.toml
echo "== workflow lint and plan"
arcpipe config schema | diff -u config/schema.json - || {
    echo "config/schema.json is stale: run 'arcpipe config schema --output config/schema.json'" >&2
    exit 1
}
timeout -s INT -k 30 300 snakemake --lint
timeout -s INT -k 30 300 snakemake -n full > /dev/null
# Three pytest-xdist workers on the machine's 2 cores, each taking whole files (--dist loadfile: a file's
# module-scoped runs are made once, and every test on the SLURM lab is in one file, so one worker brings the lab up
# and down), in the order tests/conftest.py gives: the files with slow tests first, the two rehearsals first of all.
# The third worker was for the cluster files' waits (a worker polling a scheduler runs no other test). Counted by
# `time` (the run's process tree), two and three workers both kept the cores 79% busy; sampled from /proc/stat
# (benchmarks/ci_cpu.py, 2026-11-28), the cores were 98% busy from the second minute to the last two: the other 19%
# is CPU that `time` does not see (the SLURM lab's jobs run under slurmd, the fake cluster's pods outlive the kubectl
# that started them). The suite is CPU-bound, so a third worker neither helps nor costs. Beside them, in another
# process, the numeric tests under other kernel sets (below), so that they add no wall time of their own. Its log
# follows the main one.
isa_dir=$(mktemp -d)
trap 'rm -rf "$isa_dir"' EXIT
# The numeric tests again as on CPUs without AVX-512 or AVX2: kernels for other instruction sets round differently,
# and the tests whose results depend on the kernels (marked `numeric`: the upstream parity goldens, the optimizers'
# numbers, compiled steps against eager, one computation against another of the same numbers) must hold on any
# machine. ATEN_CPU_CAPABILITY picks torch's own kernels only: the other unit tests run no torch kernel (config, data,
# report, votes), or none whose rounding reaches what they assert; the main run covers them. Each capability gets
# its own inductor cache, since torch would reuse kernels compiled for another instruction set from a shared one. The
# slow tests are left to the main run.
# The avx2 pass runs where the machine's own kernels go beyond AVX2 (AVX-512, AMX or AVX-VNNI in /proc/cpuinfo: ATen
# would dispatch to AVX-512, oneDNN to those). Elsewhere, as on CI's 2-core AMD EPYC (AVX2, FMA, no AVX-512), ATen and
# oneDNN already pick AVX2 in the main run, and the avx2 pass would run the same tests on the same kernels again
# (4.5 minutes of a third process on 2 cores).
capabilities="default avx2"
if [ -r /proc/cpuinfo ] && ! grep -qE '\b(avx512[a-z0-9_]*|amx[a-z0-9_]*|avx_vnni[a-z0-9_]*)\b' /proc/cpuinfo; then
    capabilities=default
fi
numeric_passes() {
    if [ "$capabilities" = default ]; then
        echo "== numeric tests with ATEN_CPU_CAPABILITY=avx2: as in the main run (no AVX-512, AMX or AVX-VNNI here)"
    fi
    for capability in $capabilities; do
        echo "== numeric tests with ATEN_CPU_CAPABILITY=$capability"
        # oneDNN (torch's bf16 matmuls) picks its own instruction set: the avx2 pass caps it too, so that an AVX-512
        # machine runs there the kernels of an AVX2 one, whose bf16 fingerprint tests/data/models/golden_urm_avx2.pt
        # holds (test_upstream_parity.py then checks URM's conv rounding at its tight tolerance on that machine too)
        isa=$([ "$capability" = avx2 ] && echo AVX2 || echo ALL)
        ATEN_CPU_CAPABILITY=$capability ONEDNN_MAX_CPU_ISA=$isa TORCHINDUCTOR_CACHE_DIR="$isa_dir/$capability" \
            pytest -q --timeout=900 -p no:cacheprovider -m "numeric and not slow" tests/unit || return 1
    done
}
# The VM's speed on the day, which the suite's time follows (it is CPU-bound): importing torch has taken 1.0 CPU-s on
# a fast day of CI's 2-core VM and 2.7 on a slow one (docs/reliability.md); measured before the tests start
import_cpu=$( { TIMEFORMAT='%U %S'; time python -c 'import torch'; } 2>&1 | awk '{printf "%.1f", $1 + $2}')
numeric_passes > "$isa_dir/log" 2>&1 &
isa_pid=$!
echo "== tests (3 workers); importing torch took $import_cpu CPU-s here (the machine's speed today)"
status=0
pytest -q -n 3 --dist loadfile --no-loadscope-reorder --timeout=900 --durations=25 "$@" || status=$?
isa_status=0
wait "$isa_pid" || isa_status=$?
cat "$isa_dir/log"
[ "$isa_status" = 0 ] || echo "tests/run.sh: the numeric tests failed under another kernel set (log above)" >&2
[ "$status" = 0 ] || echo "tests/run.sh: the main test run failed (its log above the numeric passes)" >&2
[ "$status" = 0 ] && [ "$isa_status" = 0 ]
