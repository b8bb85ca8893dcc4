#!/usr/bin/env bash
# Re-record the held-out storms (root; run from anywhere). None of them is in
# the calibration plan (../plan/): other sizes (100, and 150 = 3x the plan's
# largest), the moved peer at 100, each pool kind and two sets of stage limits
# at 150. Three runs each, interleaved so that drifts of the host hit every
# storm alike. evaluate.sh compares them with the plan's profile.
set -euo pipefail
cd "$(dirname "$0")"
run() { bootstorm testbed run --max-lock-spans 5000 "$@"; }
for k in 1 2 3; do
    run --sandboxes 150 --trace "baseline-run$k.jsonl.gz"
    run --sandboxes 150 --config pool-netns-veth.yaml --trace "pool-netns-veth-run$k.jsonl.gz"
    run --sandboxes 100 --trace "size100-run$k.jsonl.gz"
    run --sandboxes 150 --config limit-attachif4-cgroup8.yaml --trace "limit-attachif4-cgroup8-run$k.jsonl.gz"
    run --sandboxes 150 --config pool-netns.yaml --trace "pool-netns-run$k.jsonl.gz"
    run --sandboxes 100 --peer-moved --trace "moved100-run$k.jsonl.gz"
    run --sandboxes 150 --config pool-netns-and-veth.yaml --trace "pool-netns-and-veth-run$k.jsonl.gz"
    run --sandboxes 150 --config limit-addcni8.yaml --trace "limit-addcni8-run$k.jsonl.gz"
done
