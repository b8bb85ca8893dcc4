#!/usr/bin/env bash
# Predicted against measured for the searched policy (one refill worker)
# through the mended agent, and the policy with two workers, under the
# profile the plan fitted (no root: it reads the recorded runs).
set -uo pipefail
cd "$(dirname "$0")"
profile=${1:-plan/local.yaml}
bootstorm validate --profile "$profile" --measured pooled-run1.jsonl.gz --measured pooled-run2.jsonl.gz
bootstorm validate --profile "$profile" --measured workers-2-run1.jsonl.gz
