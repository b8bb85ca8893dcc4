#!/usr/bin/env bash
# Re-record the traffic set (root; run from anywhere, ~25 minutes): the CNI
# runtime's calibration plan (plan/: its 8 storms twice, and ops.json, every
# operation timed alone, RTNL's hold stretch among them), then the held-out
# stream three times, each interleaved with a burst of 133 at once.
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
