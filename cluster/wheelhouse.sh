#!/usr/bin/env bash
# A folder of wheels that installs arcpipe on an offline x86_64 Linux machine that already has torch (a GPU
# image's CUDA build): arcpipe and all its runtime dependencies except torch, so neither torch nor its nvidia-*
# and triton wheels. Run on a machine that reaches PyPI, from any directory:
#   bash cluster/wheelhouse.sh DIR [--python-version 3.12] [--glibc 2.28] [--extra cluster] [--exclude numpy]
# carry DIR over, and on the GPU machine, in the environment that has torch:
#   pip install --no-index --find-links DIR arcpipe     # 'arcpipe[cluster]' after --extra cluster; -e . in a checkout
# arcpipe asks for torch>=2.5,<3, so pip keeps the torch that is there, and any other package already installed at
# a version arcpipe accepts. --python-version: the GPU machine's Python (3.12 if not given). --glibc: the oldest
# glibc of the machines it goes to (2.28 if not given; `ldd --version` tells); wheels for newer glibcs are not
# taken. --extra: also an optional-dependencies group of pyproject.toml (cluster: the SLURM and generic executor
# plugins and kubernetes). --exclude NAME: leave out a package the machine provides (numpy in most CUDA images); pip
# then uses the installed one and stops if its version does not suit. Each can be repeated.
# Pure-Python packages that PyPI has only as a source archive (connection_pool) are built here into wheels.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
    echo "wheelhouse.sh: needs Python >= 3.11 (found $("$python" --version)); set PYTHON=..." >&2
    exit 1
}
usage() {
    echo "usage: cluster/wheelhouse.sh DIR [--python-version X.Y] [--glibc 2.N] [--extra GROUP] [--exclude NAME]" >&2
    exit 2
}
dir=""
python_version=3.12
glibc=2.28
extras=()
excludes=(torch)
while [ $# -gt 0 ]; do
    case $1 in
        --python-version) python_version=${2:?--python-version needs a value like 3.12} && shift ;;
        --glibc) glibc=${2:?--glibc needs a value like 2.28} && shift ;;
        --extra) extras+=("${2:?--extra needs a group of pyproject.toml}") && shift ;;
        --exclude) excludes+=("${2:?--exclude needs a package name}") && shift ;;
        -h | --help) usage ;;
        -*) echo "wheelhouse.sh: unknown option $1" >&2 && usage ;;
        *)
            [ -z "$dir" ] || usage
            dir=$1
            ;;
    esac
    shift
done
[ -n "$dir" ] || usage
[[ $glibc =~ ^2\.([0-9]+)$ ]] || {
    echo "wheelhouse.sh: --glibc $glibc is not of the form 2.N" >&2
    exit 2
}
glibc_minor=${BASH_REMATCH[1]}
((glibc_minor >= 17)) || {
    echo "wheelhouse.sh: --glibc must be at least 2.17 (manylinux2014)" >&2
    exit 2
}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# the requirements: [project] dependencies (and the chosen extras, less arcpipe itself) but the excluded ones, and
# the build requirements, so that `pip install --no-index --find-links DIR -e .` builds arcpipe from a checkout
"$python" - "$repo/pyproject.toml" "${#extras[@]}" "${extras[@]}" "${excludes[@]}" > "$work/requirements.txt" << 'EOF'
import re
import sys
import tomllib

path, num_extras, *rest = sys.argv[1:]
extras, excludes = rest[: int(num_extras)], rest[int(num_extras) :]
pyproject = tomllib.loads(open(path).read())
project, unknown = pyproject["project"], set(extras) - set(pyproject["project"]["optional-dependencies"])
if unknown:
    sys.exit(f"wheelhouse.sh: pyproject.toml has no optional-dependencies {sorted(unknown)}")
wanted = project["dependencies"] + pyproject["build-system"]["requires"]
wanted += [r for extra in extras for r in project["optional-dependencies"][extra]]


def name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9_.-]+", requirement)[0]).lower()


skip = {name(n) for n in excludes} | {"arcpipe"}
print("\n".join(r for r in wanted if name(r) not in skip))
EOF

# arcpipe's own wheel, built from a copy so that the checkout gets no build/ folder
mkdir "$work/src"
tar -C "$repo" --exclude=__pycache__ --exclude='*.egg-info' -cf - pyproject.toml README.md src | tar -C "$work/src" -xf -
"$python" -m pip wheel --quiet --no-deps --wheel-dir "$dir" "$work/src"

platforms=()
for ((minor = glibc_minor; minor >= 17; minor--)); do
    platforms+=(--platform "manylinux_2_${minor}_x86_64")
done
platforms+=(--platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64)
# pip download --platform takes wheels only: first the requirements that PyPI has only as source archives
# (connection_pool), found by resolving for this machine, are built here into wheels, which must be pure Python
"$python" -m pip install --quiet --dry-run --ignore-installed --report "$work/report.json" \
    -r "$work/requirements.txt" 2> "$work/stderr" || {
    cat "$work/stderr" >&2
    exit 1
}
mapfile -t sdists < <("$python" -c '
import json, sys
for item in json.load(open(sys.argv[1]))["install"]:
    if not item["download_info"]["url"].endswith(".whl"):
        print(item["metadata"]["name"] + "==" + item["metadata"]["version"])
' "$work/report.json")
if [ ${#sdists[@]} -gt 0 ]; then
    "$python" -m pip wheel --quiet --no-deps --wheel-dir "$work/built" "${sdists[@]}"
    for wheel in "$work"/built/*.whl; do
        [[ $wheel == *-none-any.whl ]] || {
            echo "wheelhouse.sh: $(basename "$wheel") is not pure Python: PyPI has no wheel of it for the GPU" \
                "machine; build it there (pip wheel) and add it to $dir" >&2
            exit 1
        }
        cp "$wheel" "$dir/"
        echo "wheelhouse.sh: built $(basename "$wheel") (PyPI has only its source archive)"
    done
fi
"$python" -m pip download --only-binary=:all: --python-version "$python_version" "${platforms[@]}" --dest "$dir" \
    --find-links "$dir" -r "$work/requirements.txt" > /dev/null 2> "$work/stderr" || {
    cat "$work/stderr" >&2
    exit 1
}

# pip download also brings excluded packages that another dependency needs (numpy for pandas): drop them
"$python" - "$dir" "${excludes[@]}" << 'EOF'
import re
import sys
from pathlib import Path

folder, *excludes = sys.argv[1:]
drop = {re.sub(r"[-_.]+", "_", n).lower() for n in excludes}
for wheel in Path(folder).glob("*.whl"):
    if re.sub(r"[-_.]+", "_", wheel.name.split("-")[0]).lower() in drop:
        wheel.unlink()
        print(f"wheelhouse.sh: left out {wheel.name}")
names = {w.name: re.sub(r"[-_.]+", "_", w.name.split("-")[0]).lower() for w in Path(folder).glob("*.whl")}
unwanted = [f for f, n in names.items() if n in ("torch", "triton") or n.startswith("nvidia_")]
assert not unwanted, f"torch or its CUDA wheels in the wheelhouse: {unwanted}"
EOF
echo "wheelhouse.sh: $(ls "$dir"/*.whl | wc -l) wheels, $(du -sh "$dir" | cut -f1) in $dir (Python $python_version," \
    "glibc >= $glibc); on the GPU machine: pip install --no-index --find-links $(basename "$dir") arcpipe"
