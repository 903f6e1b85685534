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
# uv installs what pip would (the same resolution of pyproject.toml under constraints.txt; uv's own version pinned
# there too), downloading in parallel: on a clean 2-core machine without a download cache, beside a loaded test run
# (2026-11-28), this whole set-up took 345 s and 120 CPU-s with uv against 455 s and 142 CPU-s with pip (uv's
# install alone 50-70 s and 16 CPU-s; the rest is compileall below). uv does not read
# pip's configuration: the find-links and constraint files pip is configured with (pip.conf, PIP_FIND_LINKS,
# PIP_CONSTRAINT) are passed on, so the same wheels are found (a machine's local CPU build of torch, say). Where uv
# cannot be installed or fails, pip does the install as before.
pip_setting() { # pip's configured value of a setting (pip.conf and PIP_* variables), split at spaces; none if unset
    .venv/bin/python -m pip config list 2>/dev/null | sed -n "s/^[^=]*\.$1='\(.*\)'$/\1/p" | tr ' ' '\n' | sort -u
}
# Either installer: constraints.txt pins torch==2.13.0 (pyproject.toml only asks for a 2.x range); the CPU build
# where the machine offers it (find-links), as here
uv_args=()
for link in $(pip_setting find-links); do uv_args+=(--find-links "$link"); done
for file in $(pip_setting constraint); do uv_args+=(--constraint "$file"); done
if .venv/bin/python -m pip install --quiet -c constraints.txt uv &&
    .venv/bin/uv pip install --quiet --python .venv/bin/python "${uv_args[@]}" -c constraints.txt -e '.[dev]'; then
    :
else
    echo "setup.sh: uv could not install; installing with pip" >&2
    .venv/bin/python -m pip install --quiet --upgrade pip
    .venv/bin/python -m pip install --quiet --no-compile -c constraints.txt -e '.[dev]'
fi
# Neither installer compiled the modules to bytecode (uv does not by default; pip, which would, one file at a time,
# was told not to): compileall does it on every core (82 s -> 58 s for the whole set-up on 2 cores with pip). As
# under pip, a file that does not compile on this Python (torch ships a few written for 3.12) is skipped: its module
# is never imported here.
.venv/bin/python -m compileall -q -q -j 0 .venv/lib > /dev/null || true
echo "$want" > "$stamp"
echo "setup.sh: ready; run 'source .venv/bin/activate'"
