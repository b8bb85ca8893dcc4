"""The frozen result of one run, and its JSON form."""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import numpy.typing as npt

from .recorder import Recording

__all__ = [
    "CpuStats",
    "GateStats",
    "HeadlineInterval",
    "LockStats",
    "PoolEvent",
    "PoolStats",
    "PoolTimeline",
    "Result",
    "StageStats",
    "StartupStats",
    "StepStats",
]

REASONS = ("work", "spin", "zero")
"""Why CPU was burnt, the keys of :attr:`CpuStats.by_stage`'s accounts."""


@dataclass(frozen=True, kw_only=True, slots=True)
class HeadlineInterval:
    """Where the node's median of a storm's headline numbers should fall,
    with probability ``level``: each metric's ``(low, high)``, seconds.

    Made by the profile that predicted the storm from how far it missed the
    ``storms`` storms it was fitted to
    (:func:`bootstorm.models.headline_interval`); the simulator itself
    knows nothing of it.
    """

    level: float
    makespan_s: tuple[float, float]
    mean_s: tuple[float, float]
    p99_s: tuple[float, float]
    storms: int

    @property
    def label(self) -> str:
        return f"{self.level:.0%} interval (node's median)"

    def text(self) -> str:
        """The intervals in one line, as the CLI and the report show them."""
        return (
            f"makespan {self.makespan_s[0]:.2f}-{self.makespan_s[1]:.2f} s, "
            f"mean {self.mean_s[0]:.2f}-{self.mean_s[1]:.2f} s, "
            f"p99 {self.p99_s[0]:.2f}-{self.p99_s[1]:.2f} s "
            f"(from {self.storms} fitted storms)"
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "level": self.level,
            "makespan_s": list(self.makespan_s),
            "mean_s": list(self.mean_s),
            "p99_s": list(self.p99_s),
            "from_storms": self.storms,
        }


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
class StepStats:
    """A stage as a share of startup, like seed 001's Table 1.

    ``mean_s``: the stage's time averaged over all sandboxes (0 for one that
    skips it); ``mean_share``: that over the mean startup latency;
    ``p99_share``: the stage's share of the startup of the tail — the
    sandboxes whose startup is at or above the p99. A stage that runs in a
    branch nobody waits for (``on_path`` false) has no share of startup.
    """

    mean_s: float
    mean_share: float | None
    p99_share: float | None
    on_path: bool


@dataclass(frozen=True, kw_only=True, slots=True)
class LockStats:
    """One lock over the whole run.

    ``wait_s`` is the sum of all waits; ``contended_wall_s`` the wall-clock
    time during which at least one task waited (the papers' "contention
    time"); ``hold_s`` the sum of all holds; ``spin_core_s`` the core-seconds
    its waiters burnt spinning; ``acquisitions_by_stage`` where it was taken;
    ``wait_s_by_stage`` the waits' sum by the stage each waiter was in (what
    the kernel's ``lock:contention_begin``/``end`` give a trace, joined to
    the sandbox's stage).
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
    wait_s_by_stage: Mapping[str, float]


@dataclass(frozen=True, kw_only=True, slots=True)
class GateStats:
    """An admission gate (per-stage concurrency limit)."""

    permits: int
    entries: int
    waited: int
    wait_s: float
    contended_wall_s: float


class PoolEvent(enum.IntEnum):
    """What happened to a pool (:attr:`PoolTimeline.event`)."""

    TAKE = 0
    """A start took a ready device."""
    MISS = 1
    """A start found no ready device and made its own."""
    ORDERED = 2
    """A refill worker began making a device."""
    MADE = 3
    """A refill worker's device is ready (or removed at once, above the target)."""
    RETARGET = 4
    """The target changed (a rate-following pool); ready devices above it
    removed at once, unless the pool's refill workers remove them (TRIMMED)."""
    TRIMMED = 5
    """A refill worker took a ready device above the target out, to remove it."""


@dataclass(frozen=True, kw_only=True, eq=False)
class PoolTimeline:
    """One pool over a run: its events in time order and its state after each.

    ``ready[i]`` and ``making[i]`` are the devices ready and being made just
    after event ``i`` (at ``t_s[i]``); before the first, ``initial`` are
    ready and none is being made. Idle ready devices are the memory a pool
    holds (``memory_mib_per_device`` each; a device handed out is its
    sandbox's).
    """

    initial: int
    memory_mib_per_device: float
    t_s: npt.NDArray[np.float64] = field(repr=False)
    event: npt.NDArray[np.int8] = field(repr=False)
    ready: npt.NDArray[np.int32] = field(repr=False)
    making: npt.NDArray[np.int32] = field(repr=False)
    #: The task of each event: the sandbox that took or found the pool empty,
    #: the refill branch that made a device (tasks from ``n_sandboxes`` on).
    task: npt.NDArray[np.int64] = field(repr=False, default_factory=lambda: np.zeros(0, np.int64))

    def count(self, event: PoolEvent) -> int:
        return int(np.count_nonzero(self.event == event))

    @property
    def peak_ready(self) -> int:
        return int(max(self.initial, int(self.ready.max()) if self.ready.size else 0))

    def ready_at(self, times_s: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """Devices ready at each of ``times_s`` (after every event at that time)."""
        at = np.searchsorted(self.t_s, np.asarray(times_s, dtype=np.float64), side="right")
        # The level after the last event at or before each time (the initial
        # one before the first), read where it is: the per-window calls of
        # :func:`.timeline.windows` copied all the levels each time.
        flat = np.atleast_1d(at)
        if self.ready.size:
            levels = self.ready.take(np.maximum(flat - 1, 0)).astype(np.int64)
            levels[flat == 0] = self.initial
        else:
            levels = np.full(flat.shape, self.initial, dtype=np.int64)
        return levels.reshape(at.shape) if at.ndim else levels[0]

    def ready_device_s(self, *, until_s: float, since_s: float = 0.0) -> float:
        """Integral of ready devices over ``[since_s, until_s]`` (device-seconds).

        The sum of (time between level changes) x (level) over the events
        strictly inside the interval, one ``np.dot``. Events come in time
        order, so those are one slice found by two binary searches, and
        the level after an event is its own ``ready`` entry: the cost is the
        events inside, not all of them (:func:`.timeline.windows` asks once
        per window). An event followed by another at the same time has
        a step of 0 and so adds 0 whatever its level: the sum is the one
        that evaluated the level at every edge (:meth:`ready_at`), to the
        bit (``tests/simulator/test_pool_integral.py``).
        """
        if until_s <= since_s:
            return 0.0
        t_s = self.t_s
        if not self._in_time_order:
            # Not made by an executor: as many searches as events (the
            # same figure, slower).
            cut = (t_s > since_s) & (t_s < until_s)
            edges = np.concatenate(([since_s], t_s[cut], [until_s]))
            levels = self.ready_at(edges[:-1])
            return float(np.dot(np.diff(edges), levels))
        lo = int(np.searchsorted(t_s, since_s, side="right"))
        hi = int(np.searchsorted(t_s, until_s, side="left"))
        hi = max(hi, lo)
        edges = np.empty(hi - lo + 2, dtype=np.float64)
        edges[0] = since_s
        edges[1:-1] = t_s[lo:hi]
        edges[-1] = until_s
        levels = np.empty(hi - lo + 1, dtype=np.int64)
        levels[0] = self.initial if lo == 0 else self.ready[lo - 1]
        levels[1:] = self.ready[lo:hi]
        return float(np.dot(np.diff(edges), levels))

    @cached_property
    def _in_time_order(self) -> bool:
        """Whether the events are in time order, none NaN (an executor's always are)."""
        t_s = self.t_s
        if t_s.size < 2:
            return not np.isnan(t_s).any()
        return not ((t_s[1:] < t_s[:-1]).any() or np.isnan(t_s).any())

    def memory_mib_h(self, *, until_s: float, since_s: float = 0.0) -> float:
        """Memory the idle devices held over ``[since_s, until_s]``, MiB·h."""
        device_s = self.ready_device_s(until_s=until_s, since_s=since_s)
        return device_s * self.memory_mib_per_device / 3600.0


@dataclass(frozen=True, kw_only=True, slots=True)
class PoolStats:
    """A device pool over a run.

    ``capacity``: devices ready at the start; ``taken``: starts that got
    one; ``empty_starts``: starts that found this pool empty and made their
    own device;
    ``made``: devices the refill workers made; ``trimmed``: ready devices
    they removed above a target that fell (where removing is their work:
    ``Refill.remove``); ``memory_mib``: what the
    initial devices hold; ``peak_memory_mib`` and ``mean_memory_mib``: what
    the idle devices held at most and on average over the run (its
    ``horizon_s``); ``memory_mib_h``: their integral.
    """

    capacity: int
    taken: int
    memory_mib: float
    empty_starts: int = 0
    made: int = 0
    trimmed: int = 0
    peak_memory_mib: float = 0.0
    mean_memory_mib: float = 0.0
    memory_mib_h: float = 0.0


@dataclass(frozen=True, kw_only=True, slots=True)
class CpuStats:
    """Core-seconds burnt, by reason and by stage (``by_stage[stage][reason]``).

    Reasons: ``work`` (useful CPU), ``spin`` (waiting on a lock on-CPU),
    ``zero`` (clearing memory). ``utilisation``: the busy core-seconds over
    the cores and the whole run, from the first arrival until its last task
    ended (the makespan, or later where background branches outlast it).
    """

    cores: int
    busy_core_s: float
    work_core_s: float
    spin_core_s: float
    zero_core_s: float
    utilisation: float
    by_stage: Mapping[str, Mapping[str, float]]
    zeroed_bytes: float = 0.0


@dataclass(frozen=True, kw_only=True, eq=False)
class Result:
    """What one run of a program gives.

    ``makespan_s`` is the papers' concurrent startup time: from the first
    arrival until the last sandbox is up. ``startup_latency_s[i]`` is sandbox
    ``i``'s own time from arrival to up. ``ready`` is the latency until a
    sandbox is up *and* the branches it needs (a NIC set up in the
    background) are done; ``branches`` the latency from arrival to the end of
    each kind of branch; both absent without branches.
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
    steps: Mapping[str, StepStats] = field(default_factory=dict)
    ready: StartupStats | None = None
    branches: Mapping[str, StartupStats] = field(default_factory=dict)
    #: Seconds each sandbox spent in each stage, its branches' included (n × stages).
    stage_time_s: Mapping[str, npt.NDArray[np.float64]] = field(default_factory=dict, repr=False)
    #: Per sandbox: when its branches of each kind were done (NaN: it has none).
    branch_finish_s: Mapping[str, npt.NDArray[np.float64]] = field(default_factory=dict, repr=False)
    recording: Recording | None = field(default=None, repr=False)
    #: Per device pool: its events and levels over the run.
    pool_timelines: Mapping[str, PoolTimeline] = field(default_factory=dict, repr=False)
    #: When the last task (a sandbox or a branch: a refill) ended, s.
    horizon_s: float = 0.0
    #: The sandboxes that found a device pool empty (any of its pools), sorted.
    empty_start_sandboxes: npt.NDArray[np.int64] = field(
        default_factory=lambda: np.zeros(0, np.int64), repr=False
    )
    #: Where the node's medians should fall (a profile fitted to a node's
    #: storms sets it, see :class:`HeadlineInterval`); None: no such profile.
    interval: HeadlineInterval | None = None

    @property
    def empty_starts(self) -> int:
        """Starts that found a device pool empty (a start that found two
        kinds empty counts once; :attr:`PoolStats.empty_starts` per pool)."""
        return int(self.empty_start_sandboxes.size)

    @property
    def pool_mean_memory_mib(self) -> float:
        """Memory the idle pooled devices held on average over the run, MiB."""
        return float(sum(p.mean_memory_mib for p in self.pools.values()))

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
            "pool_mean_memory_mib": self.pool_mean_memory_mib,
            "empty_starts": self.empty_starts,
            "horizon_s": self.horizon_s,
            "events": self.events,
            "steps": {k: asdict(v) for k, v in self.steps.items()},
            **({"ready_s": asdict(self.ready)} if self.ready is not None else {}),
            **(
                {"branches": {k: asdict(v) for k, v in self.branches.items()}}
                if self.branches
                else {}
            ),
            **({"interval": self.interval.to_dict()} if self.interval is not None else {}),
        }

    @staticmethod
    def step_stats(
        stage_time_s: Mapping[str, npt.NDArray[np.float64]],
        latency_s: npt.NDArray[np.float64],
        off_path: frozenset[str] = frozenset(),
    ) -> dict[str, StepStats]:
        """Table-1 shares from per-sandbox stage times and startup latencies."""
        mean_latency = float(latency_s.mean())
        tail = latency_s >= np.percentile(latency_s, 99.0)
        tail_latency = float(latency_s[tail].mean())
        out = {}
        for name, times in stage_time_s.items():
            mean_s = float(times.mean())
            on_path = name not in off_path
            out[name] = StepStats(
                mean_s=mean_s,
                mean_share=mean_s / mean_latency if on_path and mean_latency > 0 else None,
                p99_share=(
                    float(times[tail].mean()) / tail_latency
                    if on_path and tail_latency > 0
                    else None
                ),
                on_path=on_path,
            )
        return out

    def to_json(self, **kw: Any) -> str:
        return json.dumps(self.to_dict(), **kw)

    def spans(self) -> Any:
        """Per-sandbox stage spans as a pandas DataFrame (needs ``record=True``)."""
        if self.recording is None:
            raise ValueError("this result was run without recording; pass record=True")
        return self.recording.stage_frame()
