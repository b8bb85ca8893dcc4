#!/usr/bin/env bash
# Predicted against measured for the searched policy (two refill workers),
# the bare node and the policy with one worker, under the profile the plan
# fitted (no root: it reads the recorded runs).
set -uo pipefail
cd "$(dirname "$0")"
profile=${1:-plan/local.yaml}
bootstorm validate --profile "$profile" --measured pooled-run1.jsonl.gz --measured pooled-run2.jsonl.gz
bootstorm validate --profile "$profile" --measured stream-run1.jsonl.gz
bootstorm validate --profile "$profile" --measured one-worker-run1.jsonl.gz
