#!/usr/bin/env bash
# Re-record the testbed storms in this folder (root; run from the repository root).
# Each size is recorded without a pool and with a netns pool as large as the storm.
set -euo pipefail
cd "$(dirname "$0")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for n in 25 50 100; do
    bootstorm testbed run --sandboxes "$n" --max-lock-spans 20000 \
        --trace "testbed-veth-qemu-${n}.jsonl.gz"
    printf 'pools: {netns: %d}\n' "$n" > "$tmp/pool.yaml"
    bootstorm testbed run --sandboxes "$n" --max-lock-spans 20000 --config "$tmp/pool.yaml" \
        --trace "testbed-veth-qemu-${n}-netns-pool.jsonl.gz"
done
ls -l ./*.jsonl.gz
