#!/usr/bin/env bash
# One-time set-up of a fresh machine: a virtual environment in .venv with arcpipe and its tools.
#   bash setup.sh && source .venv/bin/activate
# Idempotent: a second run with unchanged pyproject.toml and constraints.txt returns at once.
set -euo pipefail
cd "$(dirname "$0")"
python=${PYTHON:-python3}
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
    echo "setup.sh: arcpipe needs Python >= 3.11 (found $("$python" --version)); set PYTHON=..." >&2
    exit 1
}
stamp=.venv/.arcpipe-setup
want=$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    exit 0
fi
[ -x .venv/bin/python ] || "$python" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
# constraints.txt pins torch==2.13.0 (pyproject.toml only asks for a 2.x range): on a CPU machine the CPU build,
# on a CUDA machine the CUDA build
.venv/bin/python -m pip install --quiet --no-compile -c constraints.txt -e '.[dev]'
# pip compiles every installed module to bytecode one file at a time (half of its time); compileall does the same
# on every core: 82 s -> 58 s for the whole set-up on 2 cores. As under pip, a file that does not compile on this
# Python (torch ships a few written for 3.12) is skipped: its module is never imported here.
.venv/bin/python -m compileall -q -q -j 0 .venv/lib > /dev/null || true
echo "$want" > "$stamp"
echo "setup.sh: ready; run 'source .venv/bin/activate'"
