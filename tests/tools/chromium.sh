#!/usr/bin/env bash
# Print the path of a headless-capable Chromium, installing Debian/Ubuntu's `chromium` package first when none is
# on PATH and we are root (as cluster/slurm/lab-up.sh installs SLURM). The HTML report test renders
# report.html with it. Exit 1, saying why, when there is none and it cannot be installed.
#   bash tests/tools/chromium.sh
set -euo pipefail
find_browser() {
    for name in chromium chromium-browser google-chrome google-chrome-stable; do
        command -v "$name" && return 0
    done
    return 1
}
find_browser && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get > /dev/null; then
    echo "chromium.sh: no chromium on PATH, and installing it needs root and apt-get" >&2
    exit 1
fi
log=$(mktemp)
export DEBIAN_FRONTEND=noninteractive
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core; } > "$log" 2>&1; then
    tail -20 "$log" >&2
    echo "chromium.sh: apt-get install chromium failed (log above)" >&2
    exit 1
fi
rm -f "$log"
find_browser
