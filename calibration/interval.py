"""What a fitted profile's intervals are made of: how far it misses the
storms it was fitted to (:class:`~bootstorm.models.PredictionError`).

Each storm (its runs pooled, as :class:`~.trace_fit.StormStats` pools them)
is simulated once under the profile, and ``log(measured / predicted)`` of
its makespan, mean and p99 startup kept; their root mean square per metric
is the profile's error. :func:`bootstorm.models.headline_interval` turns it
into a what-if's interval. It is in-sample (the profile was fitted to these
storms): the held-out coverage in docs/fidelity.md says how honest that is.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..models import PredictionError, Profile, run_scenario
from ..simulator import Result
from ..traces import Trace

if TYPE_CHECKING:
    from .trace_fit import StormStats

__all__ = [
    "CoveredRow",
    "IntervalCoverage",
    "headline_pairs",
    "interval_coverage",
    "prediction_error_of",
]


def headline_pairs(
    runs: Sequence[Trace], profile: Profile, *, seed: int = 0, executor: str = "compiled"
) -> tuple[StormStats, Result, list[tuple[str, float, float]]]:
    """One storm (its runs pooled) simulated under ``profile``: its stats,
    the result, and (metric, measured, predicted) of makespan, mean and p99
    startup, in that order."""
    from .trace_fit import StormStats

    stats = StormStats.pooled(runs)
    result = run_scenario(stats.scenario(), seed=seed, profile=profile, executor=executor)
    return (
        stats,
        result,
        [
            ("makespan_s", stats.makespan_s, result.makespan_s),
            ("startup mean_s", float(stats.latency_s.mean()), result.startup.mean),
            ("startup p99_s", stats.p99_s, result.startup.p99),
        ],
    )


def prediction_error_of(
    groups: Sequence[Sequence[Trace]],
    profile: Profile,
    *,
    seed: int = 0,
    executor: str = "compiled",
) -> PredictionError | None:
    """``profile``'s error on ``groups`` (each the runs of one storm); None
    for fewer than two storms (one residual says nothing of a spread)."""
    if len(groups) < 2:
        return None
    logs: dict[str, list[float]] = {"makespan_s": [], "startup mean_s": [], "startup p99_s": []}
    for runs in groups:
        _, _, pairs = headline_pairs(runs, profile, seed=seed, executor=executor)
        for metric, measured, predicted in pairs:
            if measured > 0.0 and predicted > 0.0:
                logs[metric].append(math.log(measured / predicted))
    if min(len(v) for v in logs.values()) < 2:
        return None

    def rms(values: list[float]) -> float:
        return round(float(np.sqrt(np.mean(np.square(values)))), 6)

    return PredictionError(
        storms=len(groups),
        makespan_log_rms=rms(logs["makespan_s"]),
        mean_log_rms=rms(logs["startup mean_s"]),
        p99_log_rms=rms(logs["startup p99_s"]),
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class CoveredRow:
    """One held-out storm's metric against its interval."""

    storm: str
    metric: str
    measured: float
    predicted: float
    low: float
    high: float

    @property
    def inside(self) -> bool:
        return self.low <= self.measured <= self.high


@dataclass(frozen=True, kw_only=True, slots=True)
class IntervalCoverage:
    """How often held-out storms' medians fell inside their intervals."""

    level: float
    rows: tuple[CoveredRow, ...]

    @property
    def coverage(self) -> float:
        return sum(r.inside for r in self.rows) / len(self.rows)

    @property
    def median_width_rel(self) -> float:
        """The intervals' median width over their prediction (high − low) / predicted."""
        return float(np.median([(r.high - r.low) / r.predicted for r in self.rows]))


def interval_coverage(
    groups: Sequence[Sequence[Trace]],
    profile: Profile,
    *,
    seed: int = 0,
    executor: str = "compiled",
) -> IntervalCoverage:
    """Each storm of ``groups`` (held out of ``profile``'s fit: its runs
    pooled) predicted with its interval, against the node's median."""
    from .trace_fit import storm_name

    if profile.prediction_error is None:
        raise ValueError(f"profile {profile.name!r} has no prediction_error: no interval to check")
    rows = []
    level = 0.0
    for runs in groups:
        stats, result, pairs = headline_pairs(runs, profile, seed=seed, executor=executor)
        interval = result.interval
        assert interval is not None
        level = interval.level
        bands = (interval.makespan_s, interval.mean_s, interval.p99_s)
        for (metric, measured, predicted), (low, high) in zip(pairs, bands, strict=True):
            rows.append(
                CoveredRow(
                    storm=storm_name(stats),
                    metric=metric,
                    measured=measured,
                    predicted=predicted,
                    low=low,
                    high=high,
                )
            )
    if not rows:
        raise ValueError("groups: give at least one held-out storm")
    return IntervalCoverage(level=level, rows=tuple(rows))
