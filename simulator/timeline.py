"""A run over time: startup percentiles, empty-pool starts and memory held per window.

A storm of N sandboxes released at once is read by its makespan; a day of
traffic is read window by window, as an SLO is: the p99 startup of the
starts that arrived in each window, the starts that found a pool empty,
and the memory the idle pooled devices held (their time average over the
window). :func:`windows` cuts a :class:`~.result.Result` so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .._params import format_problem
from ._errors import ProgramError
from .result import PoolEvent, Result

__all__ = ["Window", "windows"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Window:
    """The starts that arrived in ``[start_s, end_s)`` and the pools meanwhile.

    ``p50_s``/``p99_s``: startup latency percentiles of those starts (NaN:
    none arrived); ``empty_starts``: those that found a pool empty (any
    pool, each start once); ``made``: devices the refill workers finished;
    ``ready``: devices ready at the window's end, over all pools;
    ``memory_mib``: what the idle pooled devices held on average over the
    window.
    """

    start_s: float
    end_s: float
    starts: int
    p50_s: float
    p99_s: float
    empty_starts: int
    made: int
    ready: int
    memory_mib: float

    def to_dict(self) -> dict[str, float | int | None]:
        return {
            "start_s": self.start_s,
            "end_s": self.end_s,
            "starts": self.starts,
            "p50_s": None if math.isnan(self.p50_s) else self.p50_s,
            "p99_s": None if math.isnan(self.p99_s) else self.p99_s,
            "empty_starts": self.empty_starts,
            "made": self.made,
            "ready": self.ready,
            "memory_mib": self.memory_mib,
        }


def windows(result: Result, *, window_s: float, until_s: float | None = None) -> tuple[Window, ...]:
    """``result`` cut into windows of ``window_s`` seconds from 0 to the last
    arrival (``until_s``: to there instead); the last window may be shorter."""
    if not (isinstance(window_s, int | float) and math.isfinite(window_s) and window_s > 0):
        raise ProgramError(format_problem("window_s", "must be a finite number > 0", window_s))
    arrival = result.arrival_s
    latency = result.startup_latency_s
    end = float(arrival.max()) if until_s is None else float(until_s)
    count = max(1, math.ceil(end / window_s))
    edges = np.arange(count + 1, dtype=np.float64) * window_s
    if end > edges[-2]:
        edges[-1] = end  # the last window ends with the last arrival
    which = np.minimum(np.searchsorted(edges, arrival, side="right") - 1, count - 1)
    order = np.argsort(which, kind="stable")
    bounds = np.searchsorted(which[order], np.arange(count + 1))
    lines = list(result.pool_timelines.values())
    # A start that found a pool empty counts once, in its arrival's window.
    empty = np.bincount(which[result.empty_start_sandboxes], minlength=count)
    made = np.zeros(count, dtype=np.int64)
    for line in lines:
        # Events after the last window (refills finishing) count in it.
        at = np.minimum(np.searchsorted(edges, line.t_s, side="right") - 1, count - 1)
        made += np.bincount(at[line.event == PoolEvent.MADE], minlength=count)
    out = []
    for w in range(count):
        lo, hi = float(edges[w]), float(edges[w + 1])
        mine = latency[order[bounds[w] : bounds[w + 1]]]
        if mine.size:
            p50, p99 = (float(x) for x in np.percentile(mine, [50.0, 99.0]))
        else:
            p50 = p99 = math.nan
        span = hi - lo
        memory = sum(
            line.ready_device_s(until_s=hi, since_s=lo) * line.memory_mib_per_device
            for line in lines
        )
        out.append(
            Window(
                start_s=lo,
                end_s=hi,
                starts=int(mine.size),
                p50_s=p50,
                p99_s=p99,
                empty_starts=int(empty[w]),
                made=int(made[w]),
                ready=int(sum(int(line.ready_at([hi])[0]) for line in lines)),
                memory_mib=memory / span if span > 0 else 0.0,
            )
        )
    return tuple(out)
