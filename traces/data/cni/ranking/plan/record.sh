#!/usr/bin/env bash
# The CNI runtime's calibration plan again (the same command as ../../plan/),
# recorded right after the ranking storms of ..: a profile of the host as it
# was that day, for the levels (../../plan/ is the previous day's, and this
# host drifts by up to 30% between days). Never fitted to the ranking storms.
set -euo pipefail
cd "$(dirname "$0")"
bootstorm calibrate --plan --runtime cni --plan-sandboxes 50 --plan-runs 3 --trace-dir . --output local.yaml
