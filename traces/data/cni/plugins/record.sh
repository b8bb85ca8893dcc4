#!/usr/bin/env bash
# Re-record the CNI plugin switch's held-out storms (root; run from anywhere):
# 50 sandboxes with the bridge, ptp and macvlan plugins (host-local IPAM,
# QEMU microVMs), RUNS (5) interleaved rounds, the plugins' order rotated each
# round so that drifts of the host hit every plugin alike. The plan's profile
# (../plan/local.yaml) was fitted on bridge storms only: ptp and macvlan are
# predictions. SANDBOXES: the size (50; the 150s: SANDBOXES=150 RUNS=3).
# FIRST: the round to start at. Each storm runs under the
# testbed's lock (one storm at a time).
set -euo pipefail
cd "$(dirname "$0")"
run() { flock /tmp/testbed.lock bootstorm testbed run --runtime cni --max-lock-spans 5000 "$@"; }
plugins=(bridge ptp macvlan)
for k in $(seq "${FIRST:-1}" "${RUNS:-5}"); do
    for j in 0 1 2; do
        p=${plugins[$(( (k + j) % 3 ))]}
        run --cni-plugin "$p" --sandboxes "${SANDBOXES:-50}" --trace "$p-${SANDBOXES:-50}-run$k.jsonl.gz"
    done
done
