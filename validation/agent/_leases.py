"""Per-stage permits with leases: FIFO waiters, expiry, and no double release.

Everything here runs on the agent's event loop and never awaits between
reading and changing state, so a grant, a release, an expiry and a config
change are each atomic without locks.

Limits changed while leases are held: the new limit applies to new grants;
held leases stay valid until released or expired, so a lowered limit drains
(no new grant until the holders are below it) and a raised one admits
waiters at once. A new ``lease_ttl_s`` applies to grants and renewals made
after the change.

Stage names are bounded: a stage with a limit has a gate while the config
names it (a config names at most ``MAX_CONFIG_STAGES``); a stage without one
gets a gate on its first acquire and loses it as soon as it has no holder
and no waiter, so a client inventing names holds at most
:data:`MAX_UNLIMITED_STAGES` of them at once, and a config change can never
be refused for names seen earlier.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections import OrderedDict, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from ._metrics import AgentMetrics, StageSnapshot

__all__ = ["MAX_UNLIMITED_STAGES", "LeaseError", "LeaseTable", "ServerLease"]

log = logging.getLogger(__name__)

#: Ended leases remembered so a late release can say "expired" rather than "unknown".
_ENDED_MEMORY = 65536
#: Stages without a limit that may have holders at once. A node's pipeline has
#: 5 or 6 stages; 256 is room for any testbed, and a client inventing names
#: cannot grow the table (or the metrics' label sets) beyond it.
MAX_UNLIMITED_STAGES = 256


class LeaseError(Exception):
    """A request the lease table refuses; ``status`` is the HTTP status to answer."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message


@dataclass(slots=True, eq=False)
class ServerLease:
    lease_id: str
    stage: str
    holder: str
    ttl_s: float
    #: Event-loop clock (monotonic) time of expiry; timers use it.
    expires_at: float
    timer: asyncio.TimerHandle | None = None
    #: Event-loop clock time its acquire arrived: ``stage_seconds`` runs from
    #: here to the release (the wait and the hold of the stage).
    requested_at: float = 0.0

    def expires_at_wall_s(self, now_loop: float) -> float:
        """Expiry as UNIX time: what a client on the same node can compare to."""
        return time.time() + (self.expires_at - now_loop)


@dataclass(slots=True, eq=False)
class _Waiter:
    holder: str
    enqueued_at: float
    future: asyncio.Future[ServerLease]


@dataclass(slots=True, eq=False)
class _Gate:
    stage: str
    limit: int | None
    holders: dict[str, ServerLease] = field(default_factory=dict)
    waiters: deque[_Waiter] = field(default_factory=deque)
    high_water: int = 0

    def has_room(self) -> bool:
        return self.limit is None or len(self.holders) < self.limit


def _shutting_down() -> LeaseError:
    return LeaseError(503, "shutting_down", "the agent is shutting down")


class LeaseTable:
    """All stage gates of one agent and the leases they granted."""

    def __init__(
        self, *, limits: Mapping[str, int], lease_ttl_s: float, metrics: AgentMetrics
    ) -> None:
        self._limits = dict(limits)
        self._ttl_s = lease_ttl_s
        self._metrics = metrics
        self._gates: dict[str, _Gate] = {}
        self._leases: dict[str, ServerLease] = {}
        self._ended: OrderedDict[str, Literal["released", "expired"]] = OrderedDict()
        self._closing = False
        for stage, limit in self._limits.items():
            self._gates[stage] = _Gate(stage, limit)
            self._metrics.stage_active(stage)

    # -- requests ---------------------------------------------------------------

    async def acquire(self, stage: str, holder: str, wait_s: float) -> ServerLease:
        """A lease on ``stage``, waiting FIFO up to ``wait_s`` (then a 408 LeaseError)."""
        if self._closing:
            raise _shutting_down()
        loop = asyncio.get_running_loop()
        gate = self._open_gate(stage)
        now = loop.time()
        if not gate.waiters and gate.has_room():
            return self._grant(gate, holder, enqueued_at=now)
        waiter = _Waiter(holder, now, loop.create_future())
        gate.waiters.append(waiter)
        try:
            # asyncio.wait, not wait_for: a grant landing with the timeout is never lost.
            await asyncio.wait([waiter.future], timeout=wait_s)
        except asyncio.CancelledError:
            # The handler was cancelled (client gone): leave the queue, and give
            # back a permit granted to nobody who will hear of it.
            self._abandon(gate, waiter)
            raise
        if not waiter.future.done():
            self._abandon(gate, waiter)
            self._metrics.lease_timeouts.labels(stage).inc()
            raise LeaseError(
                408,
                "timeout",
                f"no permit of stage {stage!r} within wait_s={wait_s:g} "
                f"(limit {gate.limit}, {len(gate.holders)} held, {len(gate.waiters)} waiting)",
            )
        if waiter.future.cancelled():  # turned away by close()
            raise _shutting_down()
        return waiter.future.result()

    def release(self, lease_id: str, *, observe: bool = True) -> ServerLease:
        """End a lease; ``observe``: its wait and hold go to ``stage_seconds``
        (not for a grant nobody heard of). Expired leases never get here."""
        lease = self._pop(lease_id)
        self._end(lease, "released")
        self._metrics.leases_released.labels(lease.stage).inc()
        if observe:
            now = asyncio.get_running_loop().time()
            self._metrics.stage_s.labels(lease.stage).observe(max(0.0, now - lease.requested_at))
        self._settle(self._gates[lease.stage])
        return lease

    def renew(self, lease_id: str) -> ServerLease:
        lease = self._leases.get(lease_id)
        if lease is None:
            raise self._gone(lease_id)
        loop = asyncio.get_running_loop()
        lease.ttl_s = self._ttl_s
        lease.expires_at = loop.time() + self._ttl_s
        if lease.timer is not None:
            lease.timer.cancel()
        lease.timer = loop.call_at(lease.expires_at, self._expire, lease_id)
        return lease

    def apply(self, *, limits: Mapping[str, int], lease_ttl_s: float) -> None:
        """Take new limits and TTL at once (see the module doc for held leases).

        ``limits`` and ``lease_ttl_s`` come from a validated TunedConfig (at
        most MAX_CONFIG_STAGES limits, a TTL in range): nothing here can
        refuse, so a config is applied whole or, refused before, not at all.
        """
        new_limits = dict(limits)
        for stage in new_limits:
            if stage not in self._gates:
                self._gates[stage] = _Gate(stage, None)
                self._metrics.stage_active(stage)
        self._limits = new_limits
        self._ttl_s = lease_ttl_s
        for gate in list(self._gates.values()):
            gate.limit = new_limits.get(gate.stage)
            self._settle(gate)

    def close(self) -> None:
        """Stop every timer and turn every waiter away (the agent is going down)."""
        self._closing = True
        for lease in self._leases.values():
            if lease.timer is not None:
                lease.timer.cancel()
        for gate in self._gates.values():
            while gate.waiters:
                gate.waiters.popleft().future.cancel()

    def snapshot(self) -> list[StageSnapshot]:
        return [
            StageSnapshot(
                stage=g.stage,
                limit=g.limit,
                in_use=len(g.holders),
                queued=len(g.waiters),
                high_water=g.high_water,
            )
            for g in self._gates.values()
        ]

    # -- internals --------------------------------------------------------------

    def _open_gate(self, stage: str) -> _Gate:
        """``stage``'s gate, made now for a stage without a limit if there is room."""
        gate = self._gates.get(stage)
        if gate is None:
            # Every limit has a gate, so the others are the gates without one.
            if len(self._gates) - len(self._limits) >= MAX_UNLIMITED_STAGES:
                raise LeaseError(
                    429,
                    "too_many_stages",
                    f"stage {stage!r}: {MAX_UNLIMITED_STAGES} stages without a limit "
                    "already have holders (at most that many at once; a stage is "
                    "forgotten when its last lease ends)",
                )
            gate = self._gates[stage] = _Gate(stage, None)
            self._metrics.stage_active(stage)
        return gate

    def _settle(self, gate: _Gate) -> None:
        """Hand free permits to waiters, then forget the gate if nothing keeps it."""
        self._dispatch(gate)
        if (
            gate.limit is None
            and not gate.holders
            and not gate.waiters
            and self._gates.get(gate.stage) is gate
        ):
            del self._gates[gate.stage]
            self._metrics.stage_idle(gate.stage)

    def _grant(self, gate: _Gate, holder: str, *, enqueued_at: float) -> ServerLease:
        loop = asyncio.get_running_loop()
        now = loop.time()
        lease = ServerLease(
            lease_id=secrets.token_hex(12),
            stage=gate.stage,
            holder=holder,
            ttl_s=self._ttl_s,
            expires_at=now + self._ttl_s,
            requested_at=enqueued_at,
        )
        lease.timer = loop.call_at(lease.expires_at, self._expire, lease.lease_id)
        gate.holders[lease.lease_id] = lease
        gate.high_water = max(gate.high_water, len(gate.holders))
        self._leases[lease.lease_id] = lease
        self._metrics.leases_granted.labels(gate.stage).inc()
        self._metrics.lease_wait_s.labels(gate.stage).observe(now - enqueued_at)
        return lease

    def _dispatch(self, gate: _Gate) -> None:
        while gate.waiters and gate.has_room():
            waiter = gate.waiters.popleft()
            if waiter.future.done():  # cancelled while queued
                continue
            waiter.future.set_result(
                self._grant(gate, waiter.holder, enqueued_at=waiter.enqueued_at)
            )

    def _abandon(self, gate: _Gate, waiter: _Waiter) -> None:
        if waiter.future.done() and not waiter.future.cancelled():
            lease = waiter.future.result()
            if lease.lease_id in self._leases:
                log.info("lease %s granted to a departed client; giving it back", lease.lease_id)
                self.release(lease.lease_id, observe=False)
            return
        waiter.future.cancel()
        with contextlib.suppress(ValueError):  # already taken off by _dispatch
            gate.waiters.remove(waiter)
        self._settle(gate)

    def _expire(self, lease_id: str) -> None:
        lease = self._leases.get(lease_id)
        if lease is None:
            return
        self._pop(lease_id)
        self._end(lease, "expired")
        self._metrics.leases_expired.labels(lease.stage).inc()
        log.warning(
            "lease %s of %r on stage %s expired after %gs; permit given back",
            lease_id,
            lease.holder,
            lease.stage,
            lease.ttl_s,
        )
        self._settle(self._gates[lease.stage])

    def _pop(self, lease_id: str) -> ServerLease:
        lease = self._leases.pop(lease_id, None)
        if lease is None:
            raise self._gone(lease_id)
        if lease.timer is not None:
            lease.timer.cancel()
            lease.timer = None
        del self._gates[lease.stage].holders[lease_id]
        return lease

    def _end(self, lease: ServerLease, how: Literal["released", "expired"]) -> None:
        self._ended[lease.lease_id] = how
        while len(self._ended) > _ENDED_MEMORY:
            self._ended.popitem(last=False)

    def _gone(self, lease_id: str) -> LeaseError:
        how = self._ended.get(lease_id)
        if how == "expired":
            return LeaseError(
                404, "expired", f"lease {lease_id} expired; its permit was given back"
            )
        if how == "released":
            return LeaseError(404, "released", f"lease {lease_id} was already released")
        return LeaseError(404, "unknown", f"lease {lease_id} is unknown to this agent")
