"""The numbers a storm is judged by, from its trace."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from ...traces import Trace

__all__ = ["LockSummary", "StormSummary", "summarize"]


@dataclass(frozen=True, kw_only=True)
class LockSummary:
    """Kernel contention on one lock: waits seen, their sum, the longest."""

    waits: int
    wait_s: float
    max_wait_s: float
    sandbox_waits: int


@dataclass(frozen=True, kw_only=True)
class StormSummary:
    """Makespan (t=0 to the last sandbox up), startup latency (each
    sandbox's from its own arrival), per-stage means, locks; the schedule's
    span and the takes from pools."""

    sandboxes: int
    completed: int
    makespan_s: float
    startup_mean_s: float
    startup_p50_s: float
    startup_p99_s: float
    stage_mean_s: dict[str, float]
    locks: dict[str, LockSummary]
    #: First arrival to the last: 0 for a storm started at once.
    schedule_span_s: float = 0.0
    #: Takes from pools recorded (none where the storm had no pools).
    pool_takes: int = 0
    #: Sandboxes that found a pool empty at least once (and made that device
    #: on their own critical path).
    empty_pool_starts: int = 0

    @property
    def rtnl(self) -> LockSummary:
        return self.locks.get(
            "rtnl", LockSummary(waits=0, wait_s=0.0, max_wait_s=0.0, sandbox_waits=0)
        )


def summarize(trace: Trace) -> StormSummary:
    """Summary of a trace; a sandbox counts as completed when it has a span of
    every stage, and its startup runs from its own arrival (its scheduled
    start: late starts count against it) to the end of its last stage."""
    origin = trace.header.origin_s
    stages = trace.header.stages
    by_sandbox: dict[int, dict[str, tuple[float, float]]] = defaultdict(dict)
    for s in trace.spans:
        by_sandbox[s.sandbox][s.stage] = (s.start_s, s.end_s)
    arrivals = {a.sandbox: a.t_s for a in trace.arrivals}
    done = {sb: st for sb, st in by_sandbox.items() if all(x in st for x in stages)}
    ends = np.array([max(e for _, e in st.values()) for st in done.values()], dtype=np.float64)
    starts = np.array([arrivals.get(sb, origin) for sb in done], dtype=np.float64)
    startup = ends - starts
    stage_mean = {
        name: float(
            np.mean([e - b for st in by_sandbox.values() for n, (b, e) in st.items() if n == name])
        )
        for name in stages
        if any(name in st for st in by_sandbox.values())
    }
    locks: dict[str, list[tuple[float, bool]]] = defaultdict(list)
    for lk in trace.locks:
        if lk.what == "wait":
            locks[lk.lock].append((lk.end_s - lk.start_s, lk.sandbox is not None))
    times = [a.t_s for a in trace.arrivals]
    return StormSummary(
        schedule_span_s=max(times) - min(times) if times else 0.0,
        pool_takes=len(trace.pool_takes),
        empty_pool_starts=trace.empty_pool_starts,
        sandboxes=trace.header.scenario.sandboxes,
        completed=len(done),
        makespan_s=float(ends.max() - origin) if len(ends) else float("nan"),
        startup_mean_s=float(startup.mean()) if len(ends) else float("nan"),
        startup_p50_s=float(np.percentile(startup, 50)) if len(ends) else float("nan"),
        startup_p99_s=float(np.percentile(startup, 99)) if len(ends) else float("nan"),
        stage_mean_s=stage_mean,
        locks={
            name: LockSummary(
                waits=len(w),
                wait_s=float(sum(d for d, _ in w)),
                max_wait_s=float(max(d for d, _ in w)),
                sandbox_waits=sum(1 for _, ours in w if ours),
            )
            for name, w in sorted(locks.items())
        },
    )
