"""The agent's Prometheus metrics, in a registry of its own (no global state).

Counters and histograms are updated where things happen; levels (permits in
use, queue lengths, pool levels, the config generation) are read from the
live state at scrape time, so they can never drift from it.

Per-stage counters are labelled by stage name, and a client may invent
names: the series of a stage that went idle (no gate left, see
``_leases``) are kept for the :data:`MAX_IDLE_STAGE_SERIES` most recently
idle stages and dropped beyond that, so the label sets stay bounded (a
dropped stage that comes back starts its counters at 0 again, which
Prometheus' ``rate`` reads as a counter reset).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = [
    "MAX_IDLE_STAGE_SERIES",
    "STAGE_BUCKETS_S",
    "AgentMetrics",
    "LiveSnapshot",
    "PoolSnapshot",
    "StageSnapshot",
]

#: Idle stages whose counters are still exported; older ones are dropped.
MAX_IDLE_STAGE_SERIES = 256

_WAIT_BUCKETS_S = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
#: Bounds of ``stage_seconds``: 1 ms to 1 000 s in steps of at most x1.67
#: (1, 1.5, 2, 3, 5, 7 per decade), so a rollout's gate sees a p99 move of
#: 20 % (bucket interpolation is exact to within a bucket's width).
STAGE_BUCKETS_S = tuple(
    round(m * 10.0**e, 6) for e in range(-3, 3) for m in (1, 1.5, 2, 3, 5, 7)
) + (1000.0,)
_CREATE_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1)


@dataclass(frozen=True, slots=True)
class StageSnapshot:
    stage: str
    limit: int | None
    in_use: int
    queued: int
    high_water: int


@dataclass(frozen=True, slots=True)
class PoolSnapshot:
    kind: str
    #: Devices ready to hand out.
    level: int
    #: The size the agent keeps the pool at now: the config's, or what its
    #: ``pool_refill.follow_rate`` made of the recent starts.
    target: int
    #: Devices a refill worker is making now.
    making: int = 0


@dataclass(frozen=True, slots=True)
class LiveSnapshot:
    stages: list[StageSnapshot]
    pools: list[PoolSnapshot]
    config_generation: int


class _Live(Collector):
    def __init__(self, snapshot: Callable[[], LiveSnapshot]) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterable[Metric]:
        snap = self._snapshot()
        in_use = GaugeMetricFamily(
            "bootstorm_agent_stage_permits_in_use", "Leases held on a stage.", labels=["stage"]
        )
        limit = GaugeMetricFamily(
            "bootstorm_agent_stage_limit",
            "Concurrency limit of a stage (absent: unlimited).",
            labels=["stage"],
        )
        queued = GaugeMetricFamily(
            "bootstorm_agent_stage_queue_length", "Clients waiting for a permit.", labels=["stage"]
        )
        high = GaugeMetricFamily(
            "bootstorm_agent_stage_permits_high_water",
            "Most leases held on a stage at once since the agent started.",
            labels=["stage"],
        )
        for s in snap.stages:
            in_use.add_metric([s.stage], s.in_use)
            queued.add_metric([s.stage], s.queued)
            high.add_metric([s.stage], s.high_water)
            if s.limit is not None:
                limit.add_metric([s.stage], s.limit)
        # The ready devices are ``pool_level`` (its name since the first
        # agent; dashboards and tests read it), not a second ``pool_ready``.
        level = GaugeMetricFamily(
            "bootstorm_agent_pool_level", "Pre-created devices ready.", labels=["kind"]
        )
        target = GaugeMetricFamily(
            "bootstorm_agent_pool_target",
            "Pool size the agent keeps now: the config's, or the one its follow_rate set.",
            labels=["kind"],
        )
        making = GaugeMetricFamily(
            "bootstorm_agent_pool_making", "Devices refill workers are making.", labels=["kind"]
        )
        for p in snap.pools:
            level.add_metric([p.kind], p.level)
            target.add_metric([p.kind], p.target)
            making.add_metric([p.kind], p.making)
        generation = GaugeMetricFamily(
            "bootstorm_agent_config_generation",
            "Configs applied since start (1 = the start-up config).",
        )
        generation.add_metric([], snap.config_generation)
        yield from (in_use, limit, queued, high, level, target, making, generation)


class AgentMetrics:
    """The metrics of one agent."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.lease_wait_s = Histogram(
            "bootstorm_agent_lease_wait_seconds",
            "Time from an acquire's arrival to its grant.",
            ["stage"],
            buckets=_WAIT_BUCKETS_S,
            registry=r,
        )
        # What a sandbox's start spends in a stage the agent governs: from
        # the acquire's arrival to the lease's release (wait + hold). Leases
        # that expire are not observed (their holder died or hung: its time
        # is unknown, and the TTL is a config value); they are counted in
        # leases_expired. A rollout's gate reads its p99 (docs/agent.md).
        self.stage_s = Histogram(
            "bootstorm_agent_stage_seconds",
            "Time from an acquire's arrival to its lease's release (wait + hold); "
            "expired leases are not observed.",
            ["stage"],
            buckets=STAGE_BUCKETS_S,
            registry=r,
        )
        self.leases_granted = Counter(
            "bootstorm_agent_leases_granted", "Leases granted.", ["stage"], registry=r
        )
        self.leases_released = Counter(
            "bootstorm_agent_leases_released",
            "Leases released by their holder.",
            ["stage"],
            registry=r,
        )
        self.leases_expired = Counter(
            "bootstorm_agent_leases_expired",
            "Leases whose TTL ran out; their permit went to the next waiter.",
            ["stage"],
            registry=r,
        )
        self.lease_timeouts = Counter(
            "bootstorm_agent_lease_wait_timeouts",
            "Acquires that waited wait_s without a grant (HTTP 408).",
            ["stage"],
            registry=r,
        )
        self.pool_refill_s = Histogram(
            "bootstorm_agent_pool_refill_seconds",
            "Time to create one device and add it to its pool (netlink, in the executor).",
            ["kind"],
            buckets=_CREATE_BUCKETS_S,
            registry=r,
        )
        self.pool_taken = Counter(
            "bootstorm_agent_pool_taken", "Devices handed out.", ["kind"], registry=r
        )
        self.pool_empty = Counter(
            "bootstorm_agent_pool_empty", "Takes answered 'pool empty'.", ["kind"], registry=r
        )
        self.pool_errors = Counter(
            "bootstorm_agent_pool_errors",
            "Failed device creations or removals.",
            ["kind"],
            registry=r,
        )
        # Labelled by a fixed word (request_line, method, url, headers, body,
        # connection): bounded whatever a client sends. The log has one line
        # per kind a minute; these count every one.
        self.malformed_requests = Counter(
            "bootstorm_agent_malformed_requests",
            "Requests refused before any handler: unparsable HTTP, bad framing, bad bodies.",
            ["field"],
            registry=r,
        )
        self.accept_errors = Counter(
            "bootstorm_agent_accept_errors",
            "Connections not accepted: descriptor table or memory full (retried each second).",
            registry=r,
        )

        self._stage_series = (
            self.lease_wait_s,
            self.stage_s,
            self.leases_granted,
            self.leases_released,
            self.leases_expired,
            self.lease_timeouts,
        )
        self._idle_stages: OrderedDict[str, None] = OrderedDict()

    def stage_active(self, stage: str) -> None:
        """``stage`` has a gate again: its series are kept whatever happens."""
        self._idle_stages.pop(stage, None)

    def stage_idle(self, stage: str) -> None:
        """``stage`` lost its gate: keep its series while it is among the
        :data:`MAX_IDLE_STAGE_SERIES` most recently idle, then drop them."""
        self._idle_stages[stage] = None
        self._idle_stages.move_to_end(stage)
        while len(self._idle_stages) > MAX_IDLE_STAGE_SERIES:
            oldest, _ = self._idle_stages.popitem(last=False)
            for metric in self._stage_series:
                metric.remove(oldest)  # absent label sets are skipped

    def watch(self, snapshot: Callable[[], LiveSnapshot]) -> None:
        """Read levels from ``snapshot`` at every scrape."""
        self.registry.register(_Live(snapshot))

    def exposition(self) -> bytes:
        """The Prometheus text exposition format (version 0.0.4)."""
        return generate_latest(self.registry)
