#!/usr/bin/env bash
# Predicted against measured for the ten-minute held-out stream, bare and
# through a refilling pool, under the profile the plan fitted (no root: it
# reads the recorded runs).
set -uo pipefail
cd "$(dirname "$0")"
profile=${1:-plan/local.yaml}
bootstorm validate --profile "$profile" --measured stream-run1.jsonl.gz --measured stream-run2.jsonl.gz
bootstorm validate --profile "$profile" --measured pooled-run1.jsonl.gz --measured pooled-run2.jsonl.gz
