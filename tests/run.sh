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

# The numeric tests again as on CPUs without AVX-512 or AVX2: kernels for other instruction sets round differently,
# and the tests whose results depend on the kernels (marked `numeric`: the upstream parity goldens, the optimizers'
# numbers, compiled steps against eager, one computation against another of the same numbers) must hold on any
# machine. ATEN_CPU_CAPABILITY picks torch's own kernels only: the other unit tests run no torch kernel (config, data,
# report, votes), or none whose rounding reaches what they assert; the run above covers them. Each capability gets
# its own inductor cache, since torch would reuse kernels compiled for another instruction set from a shared one. The
# slow tests are left to the run above; each pass takes about 1-3 min on 2 busy cores.
isa_caches=$(mktemp -d)
trap 'rm -rf "$isa_caches"' EXIT
for capability in default avx2; do
    echo "== numeric tests with ATEN_CPU_CAPABILITY=$capability"
    ATEN_CPU_CAPABILITY=$capability TORCHINDUCTOR_CACHE_DIR="$isa_caches/$capability" \
        pytest -q --timeout=900 -p no:cacheprovider -m "numeric and not slow" tests/unit
done
