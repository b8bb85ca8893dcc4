#!/usr/bin/env bash
# Re-record the ranking storms (root; run from anywhere): five configs at 150
# sandboxes of the CNI runtime, chosen before any was run because the plan's
# profile predicts their makespans apart (see README.md here), RUNS rounds
# (default 5), each round every config once in a shuffled order. None of them
# is in the calibration plan (../plan/); evaluate.sh ranks them.
set -euo pipefail
cd "$(dirname "$0")"
bootstorm validate --runtime cni --profile ../plan/local.yaml --sandboxes 150 \
    --repeats "${RUNS:-5}" --trace-dir . --threshold 1 \
    --candidates pool-netns-veth150.yaml --candidates pool-netns-veth75.yaml \
    --candidates limit-startvm2.yaml --candidates limit-startvm1.yaml
