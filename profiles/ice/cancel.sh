#!/bin/sh
# Delete Jobs by NAMESPACE/NAME without waiting (the cluster-generic executor's cancel command).
#
#     cancel.sh arcpipe/smk-a-1f3a arcpipe/smk-b-9c0d
#
# Snakemake calls this on Ctrl-C with no shell and a 2 s limit, and kills it there. So it starts one detached
# `kubectl delete job --wait=false` per namespace (its own session: a second Ctrl-C does not reach it) and returns
# at once; the deletions finish even after Snakemake exits. Pods and the multi-node Services go with their Job
# (owner references, background cascade). A shell script, not Python: it must start its deletions within the 2 s on a
# loaded login or driver node too (a Python version took 1.0-1.4 s beside 12 busy processes on 2 cores, and in one
# CI run started none in time).
set -euf # -f: no globbing of the names below (Kubernetes names: lowercase letters, digits, '-' and '.')
kubectl=${KUBECTL:-kubectl}
namespaces=""
for id in "$@"; do
    case $id in */*) ns=${id%/*} ;; *) ns="" ;; esac
    case "$namespaces" in *"|$ns|"*) ;; *) namespaces="$namespaces|$ns|" ;; esac
done
for entry in $(printf '%s' "$namespaces" | tr -s '|' ' '); do
    names=""
    for id in "$@"; do
        case $id in */*) ns=${id%/*} ;; *) ns="" ;; esac
        if [ "$ns" = "$entry" ]; then names="$names ${id##*/}"; fi
    done
    # shellcheck disable=SC2086 # one argument per name
    setsid "$kubectl" delete job $names --ignore-not-found --wait=false --cascade=background -n "$entry" \
        < /dev/null > /dev/null &
done
# Job ids without a namespace (none from submit.py, which always names one): the context's namespace
names=""
for id in "$@"; do
    case $id in */*) ;; *) names="$names $id" ;; esac
done
if [ -n "$names" ]; then
    # shellcheck disable=SC2086
    setsid "$kubectl" delete job $names --ignore-not-found --wait=false --cascade=background < /dev/null > /dev/null &
fi
