"""Admission: who may enter a stage, and pre-created devices to take instead of creating.

The protocol is the seam between the testbed and a node agent: the local
implementation here uses in-process semaphores and a pool the driver fills
before the storm; the HTTP agent client offers the same two calls.
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ..agent.client import AgentClient

__all__ = ["Admission", "AgentAdmission", "LocalAdmission"]


class Admission(Protocol):
    """Per-stage admission and device pools, as a node agent offers them."""

    def gated(self, name: str) -> bool:
        """Whether a sandbox may wait to enter stage ``name`` (it has a limit,
        or the admission cannot tell): only then is a wait before it an admission wait."""
        ...

    def stage(self, name: str, holder: str) -> AbstractContextManager[None]:
        """Block until ``holder`` may run stage ``name``; leave it on exit."""
        ...

    def take(self, kind: str, holder: str) -> str | None:
        """A pre-created device of ``kind`` for ``holder``, or None if the pool is empty."""
        ...

    def take_pair(self, kind: str, holder: str) -> tuple[str, str] | None:
        """A pre-created veth pair of ``kind`` (its host end, its peer), both in
        the host namespace, or None if the pool is empty."""
        ...

    def take_netns_veth(self, holder: str) -> tuple[str, str] | None:
        """A pre-created ``netns-veth``: a namespace (its name under
        ``/run/netns``) holding its veth pair's peer (``eth0``), and the pair's
        host end on the host, both down; or None if the pool is empty."""
        ...


class LocalAdmission:
    """Threading semaphores per limited stage and in-process device pools.

    ``limits`` maps a stage to the most sandboxes inside it at once (stages
    not named are unlimited); ``pools`` maps a device kind to the names of
    devices already created, ``pairs`` a kind of pair to its two names: a
    ``veth`` pair's (host end, peer), a ``netns-veth``'s (namespace, host
    end) (the driver creates them before the storm).
    """

    def __init__(
        self,
        limits: Mapping[str, int] | None = None,
        pools: Mapping[str, Iterable[str]] | None = None,
        pairs: Mapping[str, Iterable[tuple[str, str]]] | None = None,
    ) -> None:
        for stage, k in (limits or {}).items():
            if k < 1:
                raise ValueError(f"limits.{stage}: must be at least 1, but got {k}")
        self._gates = {s: threading.BoundedSemaphore(k) for s, k in (limits or {}).items()}
        self._pools = {kind: deque(names) for kind, names in (pools or {}).items()}
        self._pairs = {kind: deque(both) for kind, both in (pairs or {}).items()}
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def _gated(self, gate: threading.BoundedSemaphore) -> Iterator[None]:
        with gate:
            yield

    def gated(self, name: str) -> bool:
        """Whether stage ``name`` has a limit (a sandbox may wait to enter it)."""
        return name in self._gates

    def stage(self, name: str, holder: str) -> AbstractContextManager[None]:
        gate = self._gates.get(name)
        return contextlib.nullcontext() if gate is None else self._gated(gate)

    def take(self, kind: str, holder: str) -> str | None:
        with self._lock:
            pool = self._pools.get(kind)
            return pool.popleft() if pool else None

    def take_pair(self, kind: str, holder: str) -> tuple[str, str] | None:
        with self._lock:
            pool = self._pairs.get(kind)
            return pool.popleft() if pool else None

    def take_netns_veth(self, holder: str) -> tuple[str, str] | None:
        return self.take_pair("netns-veth", holder)

    def left(self, kind: str) -> list[str]:
        """Devices of ``kind`` still in the pool (the driver removes them after)."""
        with self._lock:
            return list(self._pools.get(kind, ()))


class AgentAdmission:
    """Admission by a node agent (``bootstorm agent serve``) over HTTP.

    Each stage is a lease the agent grants under its pushed limits (waiting
    up to ``wait_s`` for a permit); ``take`` asks the agent's pools. A device
    handed out is the sandbox's from then on: the driver removes it after
    the storm like one it made.
    """

    def __init__(self, client: AgentClient, *, wait_s: float = 300.0) -> None:
        self.client = client
        self.wait_s = wait_s

    def gated(self, name: str) -> bool:
        # The agent's limits may be pushed during the storm, and every stage
        # is a lease it grants: any stage may wait.
        return True

    @contextlib.contextmanager
    def stage(self, name: str, holder: str) -> Iterator[None]:
        with self.client.stage(name, holder, wait_s=self.wait_s):
            yield

    def take(self, kind: str, holder: str) -> str | None:
        device = self.client.take(kind, holder)
        return None if device is None else device.name

    def take_pair(self, kind: str, holder: str) -> tuple[str, str] | None:
        device = self.client.take(kind, holder)
        if device is None:
            return None
        if device.peer is None:
            raise ValueError(f"pools.{kind}: the agent handed out {device.name!r} without a peer")
        return device.name, device.peer

    def take_netns_veth(self, holder: str) -> tuple[str, str] | None:
        from ..agent.client import AgentError  # httpx: only where an agent is used

        try:
            device = self.client.take("netns-veth", holder)
        except AgentError as exc:
            if exc.status == 422 and "unknown pool kind" in exc.message:
                return None  # an agent older than the kind pools none
            raise
        if device is None:
            return None
        # The agent's answer: the namespace as ``name``, the pair's end on the
        # host as ``peer`` (the peer inside is eth0).
        if device.peer is None:
            raise ValueError(
                f"pools.netns-veth: the agent handed out {device.name!r} without a host end"
            )
        return device.name, device.peer
