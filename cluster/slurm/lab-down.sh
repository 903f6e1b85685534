#!/usr/bin/env bash
# Tear down the SLURM of cluster/slurm/lab-up.sh: stops exactly the daemons it recorded as starting (by PID,
# newest first), removes its configuration and fake GPU devices. Safe to run any number of times.
#   bash cluster/slurm/lab-down.sh            stop daemons, remove lab config
#   bash cluster/slurm/lab-down.sh --purge    also remove the packages lab-up.sh installed (and only those)
# (--daemons-only, used by lab-up.sh for a restart, keeps config, devices and state.)
set -uo pipefail  # no -e: tear down as much as possible whatever fails

STATE=${SLURM_LAB_STATE:-/var/lib/arcpipe-slurm-lab}
MARK="# written by arcpipe cluster/slurm/lab-up.sh"
mode=${1:-}

say() { echo "lab-down: $*" >&2; }
alive() {  # running (not a zombie) and still that program: never signal a recycled PID
    [ -r "/proc/$1/stat" ] && [ "$(awk '{print $3}' "/proc/$1/stat")" != Z ] && grep -q "$2" "/proc/$1/cmdline" 2>/dev/null
}

if [ -f "$STATE/pids" ]; then
    stop=()
    while read -r pid name; do
        [ "$name" = munged ] && [ "${SLURM_LAB_KEEP_MUNGE:-0}" = 1 ] && continue
        stop=("$pid:$name" "${stop[@]}")  # newest first
    done < "$STATE/pids"
    for entry in "${stop[@]}"; do
        pid=${entry%%:*} name=${entry#*:}
        alive "$pid" "$name" && kill -TERM "$pid" && say "stopped $name ($pid)"
    done
    for entry in "${stop[@]}"; do
        pid=${entry%%:*} name=${entry#*:}
        for _ in $(seq 50); do alive "$pid" "$name" || break; sleep 0.1; done
        alive "$pid" "$name" && kill -KILL "$pid" && say "killed $name ($pid)"
    done
    if [ "${SLURM_LAB_KEEP_MUNGE:-0}" = 1 ]; then
        grep ' munged$' "$STATE/pids" > "$STATE/pids.keep" || true
        mv "$STATE/pids.keep" "$STATE/pids"
    else
        rm -f "$STATE/pids"
    fi
fi
rm -f "$STATE/config.sha256"
[ "$mode" = --daemons-only ] && exit 0

for f in /etc/slurm/slurm.conf /etc/slurm/gres.conf; do
    [ -f "$f" ] && head -n1 "$f" | grep -q "$MARK" && rm -f "$f"
done
rm -f /dev/arcpipe-lab-gpu*
rm -rf /var/spool/slurmd-lab* "$STATE/ctld"

if [ "$mode" = --purge ] && [ -f "$STATE/installed-packages" ]; then
    # shellcheck disable=SC2046
    DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq $(sort -u "$STATE/installed-packages") > /dev/null 2>&1 \
        && DEBIAN_FRONTEND=noninteractive apt-get autoremove -y -qq > /dev/null 2>&1
    rm -rf "$STATE"
    say "purged"
fi
say "down"
