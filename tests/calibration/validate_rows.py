"""What ``bootstorm validate --measured`` shows of recorded runs, and a set's
plan refitted, for the held-out traffic tests (``test_traffic_heldout``,
``test_traffic10_heldout``, ``test_traffic10s_heldout``)."""

from __future__ import annotations

from pathlib import Path

from bootstorm.calibration.trace_fit import (
    Comparison,
    StormStats,
    fit_storms,
    predicted_vs_measured,
    traffic_vs_measured,
)
from bootstorm.models import Profile
from bootstorm.traces import read_trace
from bootstorm.workflows.profile import load_measured

#: The traffic figure the issue's first number is about.
P99_WINDOWS = "p99 per 60-s window, median_s"


def validate_rows(paths: tuple[Path, ...], profile: Profile) -> dict[str, Comparison]:
    """The storm's rows by metric, and a schedule's traffic rows ahead of them."""
    traces = [read_trace(p) for p in paths]
    rows = predicted_vs_measured(traces, profile)
    if StormStats.pooled(traces).arrival_s is not None:
        rows = [*traffic_vs_measured(traces, profile), *rows]
    return {c.metric: c for c in rows}


def plan_refit(plan: Path) -> Profile:
    """The profile ``calibrate --plan`` fits from the storms and ``ops.json``
    in ``plan``, the storms in the order the plan ran them (the profile's
    sources list them so)."""
    traces = sorted(
        (read_trace(p) for p in plan.glob("*.jsonl.gz")), key=lambda t: t.header.created_at
    )
    return fit_storms(traces, measured=load_measured(plan / "ops.json")).profile
