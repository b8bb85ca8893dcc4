#!/usr/bin/env bash
# Predicted against measured for the held-out stream and bursts, under the
# profile the plan fitted (no root: it reads the recorded runs).
set -uo pipefail
cd "$(dirname "$0")"
profile=${1:-plan/local.yaml}
bootstorm validate --profile "$profile" --measured stream-run1.jsonl.gz \
    --measured stream-run2.jsonl.gz --measured stream-run3.jsonl.gz
bootstorm validate --profile "$profile" --measured at133-run1.jsonl.gz --measured at133-run2.jsonl.gz
bootstorm validate --profile "$profile" --measured pooled-run1.jsonl.gz --measured pooled-run2.jsonl.gz
