#!/usr/bin/env bash
# The plugin switch, predicted against measured (no root: it reads the
# recorded runs): each plugin's storm under the plan's profile (fitted on
# bridge storms only), then the switch from the bridge to ptp and to macvlan,
# measured in the same rounds, against the model's; for each size recorded
# (50 sandboxes, 10 rounds; 150 = 3x the plan's largest, 3 rounds).
set -euo pipefail
cd "$(dirname "$0")"
python - "${1:-../plan/local.yaml}" <<'PY'
import glob, sys
from bootstorm.calibration.trace_fit import predicted_vs_measured
from bootstorm.models import Profile
from bootstorm.traces import read_trace

profile = Profile.from_yaml(sys.argv[1])
for size in (50, 150):
    rows = {}
    for plugin in ("bridge", "ptp", "macvlan"):
        runs = [read_trace(f) for f in sorted(glob.glob(f"{plugin}-{size}-run*.jsonl.gz"))]
        if not runs:
            continue
        rows[plugin] = {c.metric: c for c in predicted_vs_measured(runs, profile)}
        print(f"{plugin}, {size} sandboxes ({len(runs)} runs)")
        for metric, c in rows[plugin].items():
            print(f"  {metric:15} measured {c.measured:7.3f}  predicted {c.predicted:7.3f}"
                  f"  error {c.rel_error * 100:+6.1f}%")
    for plugin in ("ptp", "macvlan"):
        if plugin not in rows or "bridge" not in rows:
            continue
        print(f"switch bridge -> {plugin}, {size} sandboxes")
        for metric in rows[plugin]:
            new, old = rows[plugin][metric], rows["bridge"][metric]
            m = new.measured / old.measured - 1
            p = new.predicted / old.predicted - 1
            print(f"  {metric:15} measured {m * 100:+6.1f}%  predicted {p * 100:+6.1f}%")
PY
