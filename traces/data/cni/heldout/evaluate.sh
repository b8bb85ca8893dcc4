#!/usr/bin/env bash
# Predicted against measured for every held-out CNI-runtime storm, under the
# profile its calibration plan fitted (no root: it reads the recorded runs).
# The five 150-sandbox configs are also ranked (Spearman of predicted vs measured).
set -uo pipefail
cd "$(dirname "$0")"
profile=${1:-../plan/local.yaml}
for storm in baseline size100 pool-netns pool-netns-veth limit-attachif4-cgroup8 limit-addcni8; do
    runs=()
    for f in "$storm"-run*.jsonl.gz; do runs+=(--measured "$f"); done
    bootstorm validate --profile "$profile" --threshold 0.2 --json "${runs[@]}" | sed "s/^/$storm /"
done
bootstorm validate --profile "$profile" --measured-dir . --sandboxes 150 \
    --candidates pool-netns=pool-netns.yaml --candidates pool-netns-veth=pool-netns-veth.yaml \
    --candidates limit-attachif4-cgroup8=limit-attachif4-cgroup8.yaml \
    --candidates limit-addcni8=limit-addcni8.yaml --threshold 0.2
