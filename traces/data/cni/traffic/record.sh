#!/usr/bin/env bash
# Re-record the traffic set (root; run from anywhere, ~35 minutes): the CNI
# runtime's calibration plan (plan/: its 8 storms twice, and ops.json, every
# operation timed alone, RTNL's hold stretch among them), then the held-out
# stream three times, each interleaved with a burst of 133 at once, then
# twice through a node agent that refills a pool while the sandboxes start.
# The stream: workload-mmpp51.csv, `bootstorm workload --seed 51 --duration
# 30min --rate-low 0.3 --rate-high 5 --compress 6` (778 starts in 300 s), every VM stopped
# 5 s after it came up. Nothing held out is in the plan's fit.
set -euo pipefail
cd "$(dirname "$0")"
bootstorm calibrate --plan --runtime cni --plan-runs 2 --trace-dir plan -o plan/local.yaml
for k in 1 2 3; do
    bootstorm testbed run --runtime cni --workload workload-mmpp51.csv --lifetime-s 5 \
        --trace "stream-run$k.jsonl.gz"
    if [ "$k" -le 2 ]; then
        bootstorm testbed run --runtime cni --sandboxes 133 --trace "at133-run$k.jsonl.gz"
    fi
done
# The same stream through a node agent whose netns-veth pool (10, one
# refill worker: pools.yaml) refills while the sandboxes start; twice.
token=$(mktemp) && head -c 24 /dev/urandom | base64 > "$token"
state=$(mktemp -d)
bootstorm agent serve --config pools.yaml --token-file "$token" --port 8791 \
    --state-dir "$state" --cni-plugin bridge &
agent=$!
trap 'kill "$agent"; rm -rf "$token" "$state"' EXIT
sleep 8
for k in 1 2; do
    bootstorm testbed run --runtime cni --workload workload-mmpp51.csv --lifetime-s 5 \
        --config pools.yaml --agent http://127.0.0.1:8791 --token-file "$token" \
        --trace "pooled-run$k.jsonl.gz"
done
