#!/usr/bin/env bash
# The whole test suite, as CI runs it: style, workflow lint and plan, unit/integration/workflow/cluster tests.
#   bash setup.sh && source .venv/bin/activate && bash tests/run.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
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
echo "== tests"
pytest -q --timeout=900 --durations=25 "$@"

# The unit tests again as on CPUs without AVX-512 or AVX2: kernels for other instruction sets round differently,
# and the tests (the upstream parity goldens among them) must hold on any machine. Each capability gets its own
# inductor cache, since torch would reuse kernels compiled for another instruction set from a shared one. The slow
# tests (45 s, none numerical) are left to the run above; each pass takes about 2-3 min on 2 busy cores.
isa_caches=$(mktemp -d)
trap 'rm -rf "$isa_caches"' EXIT
# ATEN_CPU_CAPABILITY picks torch's own kernels only, so the unit tests that run torch are the ones repeated (the
# config, data and report tests run no torch kernel: the first pass covers them).
torch_tests=(tests/unit/models tests/unit/optim tests/unit/train tests/unit/eval)
for capability in default avx2; do
    echo "== unit tests with ATEN_CPU_CAPABILITY=$capability"
    ATEN_CPU_CAPABILITY=$capability TORCHINDUCTOR_CACHE_DIR="$isa_caches/$capability" \
        pytest -q --timeout=900 -m "not slow" "${torch_tests[@]}"
done
