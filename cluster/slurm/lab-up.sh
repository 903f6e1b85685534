#!/usr/bin/env bash
# A throwaway SLURM on this one machine, for CI and the cluster tests: slurmctld + N slurmd ("virtual nodes"
# lab1..labN, all on 127.0.0.1) with fake GPU GRES. Debian/Ubuntu, root. Idempotent: a second run with the same
# settings returns at once; changed settings restart the daemons. Tear down with cluster/slurm/lab-down.sh.
#   SLURM_LAB_NODES=2 SLURM_LAB_GPUS=2 bash cluster/slurm/lab-up.sh
# Settings: SLURM_LAB_NODES (2), SLURM_LAB_GPUS per node (2; char devices, so CUDA_VISIBLE_DEVICES is set but
# torch stays on CPU), SLURM_LAB_STATE (/var/lib/arcpipe-slurm-lab: pids, packages installed, logs).
# The lab offers what the real profiles/slurm names: partitions `cpu` (the default) and `gpu` (plus `debug`), every
# node in each. What a lab truly differs in: its GPUs are fake GRES, and each node declares SLURM_LAB_CPUS (8) CPUs
# and SLURM_LAB_MEM_MB (256000) MB whatever the machine has (SlurmdParameters=config_overrides; no cgroups, so
# nothing enforces them), so that the jobs of the real full runs, sized for GPU nodes, are accepted as they are.
# Accounting is off (no slurmdbd): use `slurm-status-command: squeue` (profiles/slurm does); MinJobAge is 3600 s (every job of a rehearsal stays visible to `scontrol show job`).
set -euo pipefail

NODES=${SLURM_LAB_NODES:-2}
GPUS=${SLURM_LAB_GPUS:-2}
LAB_CPUS=${SLURM_LAB_CPUS:-8}
LAB_MEM_MB=${SLURM_LAB_MEM_MB:-256000}
STATE=${SLURM_LAB_STATE:-/var/lib/arcpipe-slurm-lab}
CONF=/etc/slurm/slurm.conf
MARK="# written by arcpipe cluster/slurm/lab-up.sh"

say() { echo "lab-up: $*" >&2; }
die() { say "$*"; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (it installs packages and starts daemons)"
mkdir -p "$STATE"

# --- 1. packages (record what we install, so lab-down.sh --purge removes exactly those)
missing=()
for pkg in slurm-wlm slurm-client munge; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]}"
    added_policy=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then  # keep the packages' services from starting on their own
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
        added_policy=1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" > "$STATE/apt.log" 2>&1 \
        || { cat "$STATE/apt.log" >&2; die "apt-get install failed"; }
    [ "$added_policy" = 1 ] && rm -f /usr/sbin/policy-rc.d
    printf '%s\n' "${missing[@]}" >> "$STATE/installed-packages"
fi

alive() {  # alive PID NAME: running (not a zombie) and is that program
    local pid=$1 name=$2
    [ -r "/proc/$pid/stat" ] || return 1
    [ "$(awk '{print $3}' "/proc/$pid/stat")" != Z ] || return 1
    grep -q "$name" "/proc/$pid/cmdline" 2>/dev/null
}
record() { echo "$1 $2" >> "$STATE/pids"; }  # record PID NAME: lab-down.sh stops these, newest first

# --- 2. munge (authentication between the daemons and the clients)
if ! munge -n 2>/dev/null | unmunge > /dev/null 2>&1; then
    [ -s /etc/munge/munge.key ] || { mungekey --create --keyfile /etc/munge/munge.key && chown munge:munge /etc/munge/munge.key; }
    install -d -o munge -g munge -m 0755 /run/munge
    install -d -o munge -g munge -m 0700 /var/lib/munge /var/log/munge
    runuser -u munge -- /usr/sbin/munged --force
    for _ in $(seq 50); do [ -s /run/munge/munged.pid ] && break; sleep 0.1; done
    record "$(cat /run/munge/munged.pid)" munged
    munge -n | unmunge > /dev/null || die "munge does not work (see /var/log/munge/munged.log)"
fi

# --- 3. configuration from this machine's real CPUs and memory
host=$(hostname -s)
read -r cpus sockets cores threads mem < <(slurmd -C | awk '/^NodeName/ {
    for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
    print v["CPUs"], v["SocketsPerBoard"] * v["Boards"], v["CoresPerSocket"], v["ThreadsPerCore"], v["RealMemory"] }')
mem=$((mem * 9 / 10))
# declared, not real (see the header): one socket of LAB_CPUS cores
cpus=$LAB_CPUS sockets=1 cores=$LAB_CPUS threads=1 mem=$LAB_MEM_MB
gres=""
[ "$GPUS" -gt 0 ] && gres="Gres=gpu:$GPUS"
conf=$(cat <<EOF
$MARK; lab-down.sh removes it
ClusterName=arcpipe-lab
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
SlurmctldPort=6817
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd-%n.pid
SlurmdSpoolDir=/var/spool/slurmd-%n
StateSaveLocation=$STATE/ctld
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$STATE/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
DefMemPerCPU=500
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MailProg=/bin/true
ReturnToService=2
MinJobAge=3600
KillWait=5
SlurmdTimeout=300
GresTypes=gpu
SlurmdParameters=config_overrides
EOF
)
for i in $(seq "$NODES"); do
    conf+=$'\n'"NodeName=lab$i NodeHostname=$host NodeAddr=127.0.0.1 Port=$((17000 + i)) CPUs=$cpus Sockets=$sockets CoresPerSocket=$cores ThreadsPerCore=$threads RealMemory=$mem $gres State=UNKNOWN"
done
conf+=$'\n'"PartitionName=cpu Nodes=lab[1-$NODES] Default=YES MaxTime=INFINITE State=UP"
conf+=$'\n'"PartitionName=gpu Nodes=lab[1-$NODES] MaxTime=INFINITE State=UP"
conf+=$'\n'"PartitionName=debug Nodes=lab[1-$NODES] MaxTime=INFINITE State=UP"
gres_conf="$MARK"
if [ "$GPUS" -gt 0 ]; then
    for g in $(seq 0 $((GPUS - 1))); do  # dummy char devices (like /dev/null): GRES needs File=
        [ -c "/dev/arcpipe-lab-gpu$g" ] || mknod "/dev/arcpipe-lab-gpu$g" c 1 3
    done
    gres_conf+=$'\n'"NodeName=lab[1-$NODES] Name=gpu File=/dev/arcpipe-lab-gpu[0-$((GPUS - 1))]"
fi
want=$(printf '%s\n%s\n' "$conf" "$gres_conf" | sha256sum | cut -d' ' -f1)

running_ok() {
    [ -f "$STATE/config.sha256" ] && [ "$(cat "$STATE/config.sha256")" = "$want" ] || return 1
    [ -s /run/slurmctld.pid ] && alive "$(cat /run/slurmctld.pid)" slurmctld || return 1
    for i in $(seq "$NODES"); do
        [ -s "/run/slurmd-lab$i.pid" ] && alive "$(cat "/run/slurmd-lab$i.pid")" slurmd || return 1
    done
    timeout 10 sinfo -h > /dev/null 2>&1
}
if running_ok; then
    say "already up ($NODES nodes, $GPUS GPUs each)"
    exit 0
fi

# --- 4. (re)start the daemons: stop the ones we started before, never anyone else's
if [ -f "$CONF" ] && ! head -n1 "$CONF" | grep -q "$MARK"; then
    die "$CONF exists and was not written by this script: refusing to replace a real SLURM's configuration"
fi
if [ -f "$STATE/pids" ]; then
    SLURM_LAB_KEEP_MUNGE=1 bash "$(dirname "$0")/lab-down.sh" --daemons-only
fi
mkdir -p /etc/slurm "$STATE/ctld"
printf '%s\n' "$conf" > "$CONF"
printf '%s\n' "$gres_conf" > /etc/slurm/gres.conf
slurmctld -c  # -c: clear old job state; daemonizes
for _ in $(seq 50); do [ -s /run/slurmctld.pid ] && break; sleep 0.1; done
record "$(cat /run/slurmctld.pid)" slurmctld
for i in $(seq "$NODES"); do
    mkdir -p "/var/spool/slurmd-lab$i"
    slurmd -N "lab$i"
    for _ in $(seq 50); do [ -s "/run/slurmd-lab$i.pid" ] && break; sleep 0.1; done
    record "$(cat "/run/slurmd-lab$i.pid")" slurmd
done
echo "$want" > "$STATE/config.sha256"

# --- 5. wait until every node is idle, then prove a job runs
for _ in $(seq 60); do
    states=$(sinfo -h -N -o '%T' 2>/dev/null | sort -u | tr '\n' ' ')
    [ "$states" = "idle " ] && break
    case "$states" in *down* | *drain*) scontrol update nodename="lab[1-$NODES]" state=resume 2> /dev/null || true ;; esac
    sleep 0.5
done
[ "$states" = "idle " ] || die "nodes are '$states', not idle (see $STATE/slurmctld.log, $STATE/slurmd-lab1.log)"
timeout 30 srun -N "$NODES" -n "$NODES" hostname > /dev/null || die "srun smoke test failed"
say "up: $NODES nodes (lab1..lab$NODES), $cpus CPUs, ${mem} MB, $GPUS fake GPUs each (declared); partitions cpu, gpu, debug"
