#!/usr/bin/env bash
# Predicted against measured for the bare stream and the pooled one, under
# the profile the plan fitted (no root: it reads the recorded runs).
set -uo pipefail
cd "$(dirname "$0")"
profile=${1:-plan/local.yaml}
bootstorm validate --profile "$profile" --measured stream-run1.jsonl.gz
bootstorm validate --profile "$profile" --measured pooled-run1.jsonl.gz
