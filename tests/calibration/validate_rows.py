"""What ``bootstorm validate --measured`` shows of recorded runs, for the
held-out traffic tests (``test_traffic_heldout``, ``test_traffic10_heldout``)."""

from __future__ import annotations

from pathlib import Path

from bootstorm.calibration.trace_fit import (
    Comparison,
    StormStats,
    predicted_vs_measured,
    traffic_vs_measured,
)
from bootstorm.models import Profile
from bootstorm.traces import read_trace

#: The traffic figure the issue's first number is about.
P99_WINDOWS = "p99 per 60-s window, median_s"


def validate_rows(paths: tuple[Path, ...], profile: Profile) -> dict[str, Comparison]:
    """The storm's rows by metric, and a schedule's traffic rows ahead of them."""
    traces = [read_trace(p) for p in paths]
    rows = predicted_vs_measured(traces, profile)
    if StormStats.pooled(traces).arrival_s is not None:
        rows = [*traffic_vs_measured(traces, profile), *rows]
    return {c.metric: c for c in rows}
