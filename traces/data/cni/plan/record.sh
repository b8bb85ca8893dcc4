#!/usr/bin/env bash
# Re-record the CNI runtime's calibration plan (root; run from anywhere): each
# operation timed alone (ops.json: the kernel's, and the plugin, tc and shim
# processes'), then the storms `bootstorm calibrate --plan --runtime cni`
# designs at 50 sandboxes (two sizes, each pool kind, a binding limit on each
# stage), three runs each, interleaved; fitted together into local.yaml. The
# held-out storms (../heldout/) are never fitted.
set -euo pipefail
cd "$(dirname "$0")"
bootstorm calibrate --plan --runtime cni --plan-sandboxes 50 --plan-runs 3 --trace-dir . --output local.yaml
