"""The frozen result of one run, and its JSON form."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from .recorder import Recording

__all__ = [
    "CpuStats",
    "GateStats",
    "LockStats",
    "PoolStats",
    "Result",
    "StageStats",
    "StartupStats",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class StartupStats:
    """Per-sandbox startup latency (arrival to end of its last stage), seconds."""

    mean: float
    p50: float
    p99: float
    max: float

    @classmethod
    def of(cls, latencies_s: npt.NDArray[np.float64]) -> StartupStats:
        p50, p99 = np.percentile(latencies_s, [50.0, 99.0])
        return cls(
            mean=float(latencies_s.mean()),
            p50=float(p50),
            p99=float(p99),
            max=float(latencies_s.max()),
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class StageStats:
    """Time spent inside a stage, over the sandboxes that passed through it."""

    mean_s: float
    p99_s: float
    total_s: float


@dataclass(frozen=True, kw_only=True, slots=True)
class LockStats:
    """One lock over the whole run.

    ``wait_s`` is the sum of all waits; ``contended_wall_s`` the wall-clock
    time during which at least one task waited (the papers' "contention
    time"); ``hold_s`` the sum of all holds; ``spin_core_s`` the core-seconds
    its waiters burnt spinning; ``acquisitions_by_stage`` where it was taken.
    """

    kind: str
    acquisitions: int
    contended: int
    wait_s: float
    contended_wall_s: float
    hold_s: float
    max_waiters: int
    spin_core_s: float
    acquisitions_by_stage: Mapping[str, int]


@dataclass(frozen=True, kw_only=True, slots=True)
class GateStats:
    """An admission gate (per-stage concurrency limit)."""

    permits: int
    entries: int
    waited: int
    wait_s: float
    contended_wall_s: float


@dataclass(frozen=True, kw_only=True, slots=True)
class PoolStats:
    capacity: int
    taken: int
    memory_mib: float


@dataclass(frozen=True, kw_only=True, slots=True)
class CpuStats:
    """Core-seconds burnt, by reason and by stage (``by_stage[stage][reason]``).

    Reasons: ``work`` (useful CPU), ``spin`` (waiting on a lock on-CPU),
    ``zero`` (clearing memory).
    """

    cores: int
    busy_core_s: float
    work_core_s: float
    spin_core_s: float
    zero_core_s: float
    utilisation: float
    by_stage: Mapping[str, Mapping[str, float]]


@dataclass(frozen=True, kw_only=True, eq=False)
class Result:
    """What one run of a program gives.

    ``makespan_s`` is the papers' concurrent startup time: from the first
    arrival until the last sandbox is up. ``startup_latency_s[i]`` is sandbox
    ``i``'s own time from arrival to up.
    """

    n_sandboxes: int
    makespan_s: float
    startup: StartupStats
    stages: Mapping[str, StageStats]
    locks: Mapping[str, LockStats]
    gates: Mapping[str, GateStats]
    pools: Mapping[str, PoolStats]
    cpu: CpuStats
    pool_memory_mib: float
    events: int
    arrival_s: npt.NDArray[np.float64] = field(repr=False)
    finish_s: npt.NDArray[np.float64] = field(repr=False)
    recording: Recording | None = field(default=None, repr=False)

    @property
    def startup_latency_s(self) -> npt.NDArray[np.float64]:
        return self.finish_s - self.arrival_s

    def to_dict(self) -> dict[str, Any]:
        """The summary as plain data (no per-sandbox arrays, no recording)."""
        return {
            "n_sandboxes": self.n_sandboxes,
            "makespan_s": self.makespan_s,
            "startup_s": asdict(self.startup),
            "stages": {k: asdict(v) for k, v in self.stages.items()},
            "locks": {k: asdict(v) for k, v in self.locks.items()},
            "gates": {k: asdict(v) for k, v in self.gates.items()},
            "pools": {k: asdict(v) for k, v in self.pools.items()},
            "cpu": {
                **{k: v for k, v in asdict(self.cpu).items() if k != "by_stage"},
                "by_stage": {s: dict(r) for s, r in self.cpu.by_stage.items()},
            },
            "pool_memory_mib": self.pool_memory_mib,
            "events": self.events,
        }

    def to_json(self, **kw: Any) -> str:
        return json.dumps(self.to_dict(), **kw)

    def spans(self) -> Any:
        """Per-sandbox stage spans as a pandas DataFrame (needs ``record=True``)."""
        if self.recording is None:
            raise ValueError("this result was run without recording; pass record=True")
        return self.recording.stage_frame()
