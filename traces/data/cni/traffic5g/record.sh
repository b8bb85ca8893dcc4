#!/usr/bin/env bash
# Record the five-minute set of 2026-11-30 (root; run from anywhere, ~25
# minutes): the CNI runtime's calibration plan (plan/: its storms twice, and
# ops.json, every operation timed alone, among them a lone cgroup attach's
# grace period and a node agent's CPU per plumbed namespace it makes and
# removes), then a held-out stream of five minutes on the bare node and
# through a node agent refilling a pool of 10 (one worker), in turn.
# The stream: workload-mmpp211.csv, `bootstorm workload --seed 211 --duration
# 30m --compress 6 --rate-low 0.15 --rate-high 4` (312 starts in 300 s), every
# VM stopped 5 s after it came up. Nothing held out is in the plan's fit.
set -euo pipefail
cd "$(dirname "$0")"
bootstorm workload --seed 211 --duration 30m --compress 6 --rate-low 0.15 --rate-high 4 \
    -o workload-mmpp211.csv
mkdir -p plan
bootstorm calibrate --plan --runtime cni --plan-runs 2 --trace-dir plan -o plan/local.yaml
token=$(mktemp) && head -c 24 /dev/urandom | base64 > "$token"
trap 'rm -f "$token"' EXIT
bootstorm testbed run --runtime cni --workload workload-mmpp211.csv --lifetime-s 5 \
    --trace stream-run1.jsonl.gz
state=$(mktemp -d)
bootstorm agent serve --config ../traffic/pools.yaml --token-file "$token" --port 8791 \
    --state-dir "$state" --cni-plugin bridge &
agent=$!
sleep 8
bootstorm testbed run --runtime cni --workload workload-mmpp211.csv --lifetime-s 5 \
    --config ../traffic/pools.yaml --agent http://127.0.0.1:8791 --token-file "$token" \
    --trace pooled-run1.jsonl.gz
kill "$agent" && wait "$agent" || true
rm -rf "$state"
