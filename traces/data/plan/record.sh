#!/usr/bin/env bash
# Re-record the calibration plan (root; run from anywhere): each operation
# timed alone (ops.json), then the storms `bootstorm calibrate --plan` designs
# for the testbed catalog at 50 sandboxes (two sizes, the moved peer, each pool
# kind, a binding limit on each stage), three runs each, interleaved; fitted
# together into local.yaml. The held-out storms (../heldout/) are never fitted.
set -euo pipefail
cd "$(dirname "$0")"
bootstorm calibrate --plan --plan-sandboxes 50 --plan-runs 3 --trace-dir . --output local.yaml
