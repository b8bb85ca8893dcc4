"""The traffic question: a node's starts as they arrive, with pools that refill.

:func:`traffic_what_if` runs a scenario on a workload's schedule (one
sandbox per start, at its time) and reads the run as an SLO is read: p50
and p99 startup per window, the starts that found a pool empty, the memory
the idle pooled devices held over time, and what the refills took of RTNL.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._params import ConfigError, format_problem
from ..models import Profile, Scenario, load_profile
from ..models.refill import REFILL
from ..models.testbed import traffic_cautions
from ..simulator import Result
from ..simulator.timeline import Window, windows
from ..traces.workload import Workload

__all__ = [
    "DEFAULT_WINDOW_S",
    "RefillLoad",
    "TrafficWhatIf",
    "check_window_s",
    "traffic_what_if",
    "workload_scenario",
]

#: The SLO window: p99 per minute, as serving platforms report it.
DEFAULT_WINDOW_S = 60.0


def check_window_s(window_s: float) -> None:
    if not (isinstance(window_s, int | float) and math.isfinite(window_s) and window_s > 0):
        raise ConfigError(format_problem("window_s", "must be a finite number > 0", window_s))


def workload_scenario(scenario: Scenario, workload: Workload) -> Scenario:
    """``scenario`` with one sandbox per start of ``workload``, each arriving at its time."""
    if len(workload) == 0:
        raise ConfigError(f"workload: {workload.source!r} has no starts")
    return scenario.replace(
        sandboxes=len(workload), arrival_s=tuple(float(t) for t in workload.starts.tolist())
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class RefillLoad:
    """What the refills took from the starts: RTNL acquisitions (theirs and
    all), the lock's contended wall time over the run, and the devices made."""

    rtnl_acquisitions: int
    rtnl_total: int
    rtnl_contended_s: float
    made: int
    #: Ready devices the workers removed above a target that fell.
    trimmed: int = 0

    @property
    def rtnl_share(self) -> float:
        return self.rtnl_acquisitions / self.rtnl_total if self.rtnl_total else 0.0

    @classmethod
    def of(cls, result: Result) -> RefillLoad:
        rtnl = result.locks.get("rtnl")
        return cls(
            rtnl_acquisitions=0 if rtnl is None else rtnl.acquisitions_by_stage.get(REFILL, 0),
            rtnl_total=0 if rtnl is None else rtnl.acquisitions,
            rtnl_contended_s=0.0 if rtnl is None else rtnl.contended_wall_s,
            made=sum(p.made for p in result.pools.values()),
            trimmed=sum(p.trimmed for p in result.pools.values()),
        )


@dataclass(frozen=True, kw_only=True)
class TrafficWhatIf:
    """A scenario run on a schedule of starts, read window by window."""

    scenario: Scenario
    result: Result
    windows: tuple[Window, ...]
    window_s: float
    source: str
    """Where the starts came from (the workload's source)."""
    cautions: tuple[str, ...] = ()
    """What to read beside the answer (:func:`bootstorm.models.testbed.traffic_cautions`)."""

    @property
    def refill(self) -> RefillLoad:
        return RefillLoad.of(self.result)

    @property
    def p99_window_median_s(self) -> float:
        """The median over windows with starts of their p99 startup."""
        p99 = [w.p99_s for w in self.windows if w.starts]
        return float(np.median(p99)) if p99 else math.nan

    @property
    def p99_window_max_s(self) -> float:
        p99 = [w.p99_s for w in self.windows if w.starts]
        return float(max(p99)) if p99 else math.nan

    @property
    def memory_mib_h(self) -> float:
        return float(sum(p.memory_mib_h for p in self.result.pools.values()))

    @property
    def peak_memory_mib(self) -> float:
        return float(sum(p.peak_memory_mib for p in self.result.pools.values()))

    def to_dict(self) -> dict[str, Any]:
        r = self.result
        refill = self.refill
        return {
            "scenario": self.scenario.model_dump(mode="json", exclude={"arrival_s"}),
            "source": self.source,
            "starts": r.n_sandboxes,
            "span_s": float(r.arrival_s.max() - r.arrival_s.min()),
            "startup_s": {"p50": r.startup.p50, "p99": r.startup.p99, "max": r.startup.max},
            "window_s": self.window_s,
            "p99_window_median_s": _finite(self.p99_window_median_s),
            "p99_window_max_s": _finite(self.p99_window_max_s),
            "empty_starts": r.empty_starts,
            "memory": {
                "peak_mib": self.peak_memory_mib,
                "mean_mib": r.pool_mean_memory_mib,
                "mib_h": self.memory_mib_h,
            },
            "pools": {
                k: {
                    "capacity": p.capacity,
                    "taken": p.taken,
                    "empty_starts": p.empty_starts,
                    "made": p.made,
                    "trimmed": p.trimmed,
                    "peak_memory_mib": p.peak_memory_mib,
                    "mean_memory_mib": p.mean_memory_mib,
                    "memory_mib_h": p.memory_mib_h,
                }
                for k, p in r.pools.items()
            },
            "refill": {
                "rtnl_acquisitions": refill.rtnl_acquisitions,
                "rtnl_share": refill.rtnl_share,
                "rtnl_contended_s": refill.rtnl_contended_s,
                "made": refill.made,
                "trimmed": refill.trimmed,
            },
            "windows": [w.to_dict() for w in self.windows],
            "cautions": list(self.cautions),
        }


def _finite(x: float) -> float | None:
    return None if math.isnan(x) else x


def traffic_what_if(
    scenario: Scenario,
    workload: Workload,
    *,
    window_s: float = DEFAULT_WINDOW_S,
    executor: str = "compiled",
    profile: Profile | None = None,
) -> TrafficWhatIf:
    """Run ``scenario`` on ``workload``'s starts and cut it into windows."""
    from .._api import simulate

    check_window_s(window_s)
    timed = workload_scenario(scenario, workload)
    prof = profile if profile is not None else load_profile(timed.profile)
    result = simulate(timed, profile=prof, executor=executor)
    return TrafficWhatIf(
        scenario=timed,
        result=result,
        windows=windows(result, window_s=window_s),
        window_s=float(window_s),
        source=workload.source,
        cautions=traffic_cautions(timed, prof),
    )
