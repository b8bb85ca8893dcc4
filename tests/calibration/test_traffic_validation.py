"""A storm started on a schedule, read as traffic against its prediction:
StormStats keeps the schedule, and ``traffic_vs_measured`` compares p99 per
window, empty-pool starts and idle pooled device-seconds."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from bootstorm.calibration.trace_fit import (
    Comparison,
    StormStats,
    fit_trace,
    predicted_vs_measured,
    traffic_vs_measured,
)
from bootstorm.traces import Arrival, PoolTake, Trace, read_trace

DATA = Path(__file__).resolve().parents[2] / "traces" / "data"
POOLED = DATA / "testbed-veth-qemu-25-netns-pool.jsonl.gz"
GAP_S = 3.0
POOL = 10


def _scheduled(trace: Trace) -> Trace:
    """The recorded burst as if sandbox ``i`` had arrived ``i * GAP_S`` later:
    its arrival and spans shifted, a netns pool of ``POOL`` made before (the
    first ``POOL`` take one, the others find it empty)."""
    h = trace.header
    shift = {i: i * GAP_S for i in range(h.scenario.sandboxes)}
    spans = tuple(
        s.model_copy(
            update={"start_s": s.start_s + shift[s.sandbox], "end_s": s.end_s + shift[s.sandbox]}
        )
        for s in trace.spans
    )
    arrivals = tuple(Arrival(sandbox=i, t_s=h.origin_s + d) for i, d in shift.items())
    netns = {s.sandbox: s.start_s for s in spans if s.stage == "NetNS"}
    takes = tuple(
        PoolTake(sandbox=i, kind="netns", t_s=netns[i], taken=i < POOL, ready=max(POOL - i - 1, 0))
        for i in sorted(netns)
    )
    header = h.model_copy(
        update={
            "scenario": h.scenario.model_copy(update={"pools": {"netns": POOL}}),
            "config": None,
        }
    )
    return dataclasses.replace(
        trace, header=header, spans=spans, arrivals=arrivals, locks=(), pool_takes=takes
    )


@pytest.fixture(scope="module")
def scheduled() -> Trace:
    return _scheduled(read_trace(POOLED))


def test_storm_stats_keep_the_schedule(scheduled: Trace) -> None:
    stats = StormStats.of(scheduled)
    assert stats.arrival_s == pytest.approx(tuple(i * GAP_S for i in range(25)))
    ends = max(s.end_s for s in scheduled.spans) - scheduled.header.origin_s
    assert stats.makespan_s == pytest.approx(ends)  # first arrival to last sandbox up
    scenario = stats.scenario()
    assert scenario.arrival_s == stats.arrival_s and scenario.pools == {"netns": POOL}
    # A what-if of another size is released at once, as before.
    assert stats.scenario(sandboxes=10).arrival_s is None
    burst = StormStats.of(read_trace(POOLED))
    assert burst.arrival_s is None


def test_traffic_comparison_reads_the_measured_side_exactly(scheduled: Trace) -> None:
    profile = fit_trace(read_trace(POOLED), max_evaluations=20).profile
    rows = {c.metric: c for c in traffic_vs_measured([scheduled], profile, window_s=30.0)}
    stats = StormStats.of(scheduled)
    arrival = np.asarray(stats.arrival_s)[stats.complete]
    windows = np.floor(arrival / 30.0)
    want_p99 = np.median(
        [np.percentile(stats.latency_s[windows == w], 99.0) for w in np.unique(windows)]
    )
    assert rows["p99 per 30-s window, median_s"].measured == pytest.approx(want_p99)
    assert rows["empty-pool starts"].measured == 25 - POOL
    # Level POOL, one fewer at each of the first POOL takes, to the last sandbox up.
    origin = scheduled.header.origin_s
    until = float((arrival + stats.latency_s).max())
    taken = sorted(t.t_s - origin for t in scheduled.pool_takes if t.taken)
    want_held = POOL * until - sum(until - t for t in taken)
    assert rows["idle pooled device-s"].measured == pytest.approx(want_held)
    # The model sees the same pool: as many empty takes, about as long held.
    assert rows["empty-pool starts"].predicted == 25 - POOL
    assert rows["idle pooled device-s"].rel_error == pytest.approx(0.0, abs=0.1)
    # The storm's own rows still come (makespan from first arrival to last up).
    assert {c.metric for c in predicted_vs_measured([scheduled], profile)} >= {"makespan_s"}


def test_several_runs_carry_the_nodes_own_spread(scheduled: Trace) -> None:
    """Over runs of one schedule each traffic figure is their median, with
    their standard error beside it (one run: none)."""
    profile = fit_trace(read_trace(POOLED), max_evaluations=5).profile
    slower = dataclasses.replace(
        scheduled,
        spans=tuple(
            s.model_copy(update={"end_s": s.end_s + 0.5}) if s.stage == "StartVM" else s
            for s in scheduled.spans
        ),
    )
    one = {c.metric: c for c in traffic_vs_measured([scheduled], profile, window_s=30.0)}
    two = {c.metric: c for c in traffic_vs_measured([scheduled, slower], profile, window_s=30.0)}
    p99 = "p99 per 30-s window, median_s"
    assert one[p99].measured_se is None
    # Two runs 0.5 s apart: their spread (0.5 / sqrt(2)) over sqrt(2) is 0.25 s.
    assert two[p99].measured_se == pytest.approx(0.25)
    assert two["empty-pool starts"].measured_se == 0.0


def test_a_burst_has_no_traffic_to_compare() -> None:
    profile = fit_trace(read_trace(POOLED), max_evaluations=5).profile
    with pytest.raises(ValueError, match="released at once"):
        traffic_vs_measured([read_trace(POOLED)], profile)


def test_relative_error_of_nothing_against_nothing_is_none() -> None:
    assert Comparison(metric="x", measured=0.0, predicted=0.0).rel_error == 0.0
    assert Comparison(metric="x", measured=0.0, predicted=2.0).rel_error == float("inf")
    # A count: nothing measured against 2 predicted is 200 % off, not infinitely.
    assert Comparison(metric="n", measured=0.0, predicted=2.0, floor=1.0).rel_error == 2.0
