#!/usr/bin/env bash
# Re-record the validation set (root; run from anywhere): three runs each of a
# 50-sandbox storm, a 100-sandbox storm and the 50-sandbox storm with a netns
# pool, interleaved so that slow drifts of the host hit every storm alike.
set -euo pipefail
cd "$(dirname "$0")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf 'pools: {netns: 50}\n' > "$tmp/pool.yaml"
for k in 1 2 3; do
    bootstorm testbed run --sandboxes 50 --max-lock-spans 20000 --trace "storm-50-run$k.jsonl.gz"
    bootstorm testbed run --sandboxes 100 --max-lock-spans 20000 --trace "storm-100-run$k.jsonl.gz"
    bootstorm testbed run --sandboxes 50 --max-lock-spans 20000 --config "$tmp/pool.yaml" \
        --trace "storm-50-netns-pool-run$k.jsonl.gz"
done
