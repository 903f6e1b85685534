#!/usr/bin/env bash
# Link this repository's Snakemake profiles into Snakemake's user profile directory, so that
# `snakemake --profile ice full` works from anywhere, exactly as written (Snakemake looks profiles up in the
# current directory and ~/.config/snakemake/, never in ./profiles/). Idempotent; `--remove` unlinks them.
#   cluster/install-profiles.sh [--remove]
# Links only: editing profiles/ice/job.yaml in the repository changes what `--profile ice` does.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python}
command -v "$python" > /dev/null || python=python3
dest=$("$python" -c 'from snakemake.cli import get_appdirs; print(get_appdirs().user_config_dir)') || {
    echo "install-profiles.sh: snakemake is not importable: activate the venv first (source .venv/bin/activate)" >&2
    exit 1
}
mkdir -p "$dest"
for name in ice slurm local; do
    link="$dest/$name"
    if [ -e "$link" ] && [ ! -L "$link" ]; then
        echo "install-profiles.sh: $link exists and is not a link; leaving it alone (move it away to link ours)" >&2
        continue
    fi
    if [ "${1:-}" = --remove ]; then
        [ -L "$link" ] && [ "$(readlink "$link")" = "$repo/profiles/$name" ] && rm "$link" && echo "unlinked $link"
        continue
    fi
    ln -sfn "$repo/profiles/$name" "$link"
    echo "$link -> $repo/profiles/$name"
done
