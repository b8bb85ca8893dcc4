"""Which stage the time goes to, and how much of each stage is a kernel-lock
wait: the node's held-out storms against the model (issue 38's first item).

Run ``python experiments/bench_lock_shares.py [--profile P] [DIR]`` (the
defaults: the CNI runtime's held-out storms, ``traces/data/cni/heldout``, and
the profile its calibration plan fitted). For every storm (its runs pooled):
each stage's share of the mean startup, measured and predicted, and each
kernel lock's wait as a share of the time inside a stage, measured (the
kernel's ``contention_begin``/``end`` waits joined to the sandbox and stage
that waited, scaled up where the trace kept a sample) and predicted (the
model's waits by the waiter's stage); then the makespan and mean startup
errors, and the worst stage-share error (stages of at least 5% of the
startup) and lock-wait gap over all the storms. Each measured share has its
standard error over the runs (±); a figure the runs measured less precisely
than the issue's tolerance (20% of a share, 10 points of a wait) is marked
``spread`` and left out of the worst: a gap there is the node's own noise.
Nothing is asserted: a measurement (``bootstorm.calibration.attribution``
computes the figures).
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict
from pathlib import Path

from bootstorm.calibration.trace_fit import predicted_vs_measured
from bootstorm.models import Profile
from bootstorm.traces import read_trace

HERE = Path(__file__).resolve().parent.parent
DEFAULT_DIR = HERE / "traces/data/cni/heldout"
DEFAULT_PROFILE = HERE / "traces/data/cni/plan/local.yaml"
#: A stage below this share of the mean startup is too small for a relative error.
MEANINGFUL_SHARE = 0.05
#: Issue 38's tolerances: a stage share relatively, a lock-wait share in points.
SHARE_TOLERANCE = 0.20
WAIT_TOLERANCE_POINTS = 0.10


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", nargs="?", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--profile", type=Path, default=DEFAULT_PROFILE)
    args = parser.parse_args()
    profile = Profile.from_yaml(args.profile)
    groups: dict[str, list[Path]] = defaultdict(list)
    for path in sorted(args.directory.glob("*-run*.jsonl.gz")):
        groups[re.sub(r"-run\d+\.jsonl\.gz$", "", path.name)].append(path)
    worst_share = worst_points = 0.0
    spread = 0
    print(f"profile {args.profile}; storms in {args.directory}")
    for name, paths in groups.items():
        rows = {c.metric: c for c in predicted_vs_measured([read_trace(p) for p in paths], profile)}
        headline = (
            f"makespan {rows['makespan_s'].rel_error:+.1%}, "
            f"mean startup {rows['startup mean_s'].rel_error:+.1%}"
        )
        print(f"\n{name} ({len(paths)} runs): {headline}")
        print(f"  {'figure':<28} {'node':>6} {'±':>5} {'model':>6} {'error':>8}")
        for metric, row in rows.items():
            if metric.endswith(" share of startup"):
                if row.measured < MEANINGFUL_SHARE:
                    continue
                testable = row.testable(SHARE_TOLERANCE)
                if testable:
                    worst_share = max(worst_share, abs(row.rel_error))
                error = f"{row.rel_error:+.0%}"
            elif row.points:
                testable = row.testable(WAIT_TOLERANCE_POINTS)
                if testable:
                    worst_points = max(worst_points, abs(row.rel_error))
                error = f"{100 * row.rel_error:+.0f} pts"
            else:
                continue
            spread += not testable
            se = "" if row.measured_se is None else f"{row.measured_se:.1%}"
            mark = "" if testable else "  spread"
            print(
                f"  {metric:<28} {row.measured:>6.1%} {se:>5} {row.predicted:>6.1%} "
                f"{error:>8}{mark}"
            )
    print(
        f"\nworst stage share (>= {MEANINGFUL_SHARE:.0%} of startup): {worst_share:.0%} off; "
        f"worst lock-wait share: {100 * worst_points:.0f} pts; {spread} figure(s) the runs "
        "measured less precisely than the tolerance (spread) left out"
    )


if __name__ == "__main__":
    main()
