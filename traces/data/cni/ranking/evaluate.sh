#!/usr/bin/env bash
# The five ranking configs, predicted (the plan's profile, or $1) against the
# recorded runs, with the Spearman of the two rankings (no root).
set -uo pipefail
cd "$(dirname "$0")"
profile=${1:-../plan/local.yaml}
bootstorm validate --profile "$profile" --measured-dir . --sandboxes 150 --threshold 1 \
    --candidates pool-netns-veth150.yaml --candidates pool-netns-veth75.yaml \
    --candidates limit-startvm2.yaml --candidates limit-startvm1.yaml "${@:2}"
