#!/usr/bin/env bash
# One-time set-up of a fresh machine: a virtual environment in .venv with arcpipe and its tools.
#   bash setup.sh && source .venv/bin/activate
# Idempotent: a second run with an unchanged pyproject.toml returns at once.
set -euo pipefail
cd "$(dirname "$0")"
python=${PYTHON:-python3}
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
    echo "setup.sh: arcpipe needs Python >= 3.11 (found $("$python" --version)); set PYTHON=..." >&2
    exit 1
}
stamp=.venv/.arcpipe-setup
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    exit 0
fi
[ -x .venv/bin/python ] || "$python" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
# torch==2.13.0 is pinned: on a CPU machine it is the CPU build; on a CUDA machine the CUDA build.
.venv/bin/python -m pip install --quiet -e '.[dev]'
echo "$want" > "$stamp"
echo "setup.sh: ready; run 'source .venv/bin/activate'"
