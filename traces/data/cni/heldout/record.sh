#!/usr/bin/env bash
# Re-record the CNI runtime's held-out storms (root; run from anywhere). None
# of them is in its calibration plan (../plan/): other sizes (100, and 150 =
# 3x the plan's largest), each pool kind and two sets of stage limits at 150.
# Five runs each (RUNS), interleaved so that drifts of the host hit every
# storm alike. evaluate.sh compares them with the plan's profile.
set -euo pipefail
cd "$(dirname "$0")"
run() { bootstorm testbed run --runtime cni --max-lock-spans 5000 "$@"; }
for k in $(seq 1 "${RUNS:-5}"); do
    run --sandboxes 150 --trace "baseline-run$k.jsonl.gz"
    run --sandboxes 150 --config pool-netns-veth.yaml --trace "pool-netns-veth-run$k.jsonl.gz"
    run --sandboxes 100 --trace "size100-run$k.jsonl.gz"
    run --sandboxes 150 --config limit-attachif4-cgroup8.yaml --trace "limit-attachif4-cgroup8-run$k.jsonl.gz"
    run --sandboxes 150 --config pool-netns.yaml --trace "pool-netns-run$k.jsonl.gz"
    run --sandboxes 150 --config limit-addcni8.yaml --trace "limit-addcni8-run$k.jsonl.gz"
done
