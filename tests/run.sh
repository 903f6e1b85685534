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
echo "== workflow lint and plan"
arcpipe config schema | diff -u config/schema.json - || {
    echo "config/schema.json is stale: run 'arcpipe config schema --output config/schema.json'" >&2
    exit 1
}
timeout -s INT -k 30 300 snakemake --lint
timeout -s INT -k 30 300 snakemake -n full > /dev/null
echo "== tests"
pytest -q --timeout=900 "$@"
