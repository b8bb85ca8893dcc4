"""Admission: who may enter a stage, and pre-created devices to take instead of creating.

The protocol is the seam between the testbed and a node agent: the local
implementation here uses in-process semaphores and a pool the driver fills
before the storm; a node agent's (:class:`bootstorm.validation.agent.AgentAdmission`)
implements the same protocol in the agent's package, so that the testbed
imports nothing of the agent.
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "Admission",
    "CniPooledNetns",
    "LocalAdmission",
    "PluginAgent",
    "PluginAgentEndpoint",
    "PoolLevel",
    "PoolLevelNow",
    "PoolLevels",
    "PoolSampling",
    "level_after_take",
]


@dataclass(frozen=True, kw_only=True)
class CniPooledNetns:
    """A namespace whose CNI ADD was done before the storm (the ``cni``
    runtime's ``netns-veth``): what its taker needs to use it and to DEL it."""

    #: Its name under ``/run/netns``.
    netns: str
    #: The ``CNI_CONTAINERID`` it was ADDed under (DEL must name the same).
    container_id: str
    #: The network it is on, as a conflist (the taker DELs through it); None:
    #: the taking run's own network.
    conflist: Mapping[str, Any] | None = field(default=None, compare=False)
    #: The ADD's final result JSON (DEL's ``prevResult``), if known.
    result: str | None = field(default=None, compare=False)


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

    def offers_cni_netns(self) -> bool:
        """Whether :meth:`take_cni_netns` may hand anything out (asked once,
        before a storm of the ``cni`` runtime)."""
        ...

    def take_cni_netns(self, holder: str) -> CniPooledNetns | None:
        """A namespace with its CNI ADD done, or None if the pool is empty."""
        ...


@dataclass(frozen=True, kw_only=True)
class PoolLevel:
    """A pool's level as a take left it: ``ready`` devices left after the
    take, ``target`` the level it is kept at; None where the pool does not say."""

    ready: int | None = None
    target: int | None = None


@runtime_checkable
class PoolLevels(Protocol):
    """What an admission may offer beside :class:`Admission`: the level a
    holder's latest take of a kind left its pool at. Optional, so that an
    admission without it (an agent's of an older build) still is one."""

    def level_after_take(self, kind: str, holder: str) -> PoolLevel | None:
        """The level ``holder``'s latest take from pool ``kind`` (``take``,
        ``take_pair``, ``take_netns_veth`` and ``take_cni_netns`` as
        ``netns-veth``) left the pool at; None: this admission has no pool
        of ``kind`` (the take asked nothing worth recording)."""
        ...


@dataclass(frozen=True, kw_only=True)
class PoolLevelNow:
    """A pool's level as its admission sees it now: ``ready`` devices in
    it, ``making`` more being made (refilled) and ``target`` the level it is
    kept at; None where the admission does not say."""

    kind: str
    ready: int
    making: int | None = None
    target: int | None = None


@runtime_checkable
class PoolSampling(Protocol):
    """What an admission whose pools refill during the storm (a node
    agent's) may offer beside :class:`Admission`: every pool's level now, so
    that the driver samples them while the storm runs (the trace's
    ``pool_level`` records). Optional: the testbed's own pools
    (:class:`LocalAdmission`) only fall, at each take, and their takes tell
    their level whole."""

    def pool_levels(self) -> Sequence[PoolLevelNow]:
        """Each pool's level now, one per kind (those kept at nothing and
        holding nothing may be left out). Raises on a failed ask (an HTTP
        error): the driver skips that sample."""
        ...


@dataclass(frozen=True, kw_only=True)
class PluginAgentEndpoint:
    """How a ``bootstorm-cni`` plugin reaches the admission's node agent."""

    url: str
    token: str = field(repr=False)
    #: Certificates to trust for an ``https://`` agent besides the system's.
    ca_file: str | None = None


@runtime_checkable
class PluginAgent(Protocol):
    """What a node agent's admission may offer beside :class:`Admission`: its
    endpoint, so that the ``cni`` runtime's ``bootstorm-cni`` plugin asks the
    same agent for its stage's permit (``--cni-wrapper bootstorm-cni``)."""

    def plugin_agent(self) -> PluginAgentEndpoint:
        """The agent's URL, token and CA file."""
        ...


def level_after_take(admission: Admission, kind: str, holder: str) -> PoolLevel | None:
    """The pool's level after ``holder``'s take of ``kind`` where
    ``admission`` reports levels (:class:`PoolLevels`); else an unknown
    level (the take is still recorded: the pool may exist)."""
    if isinstance(admission, PoolLevels):
        return admission.level_after_take(kind, holder)
    return PoolLevel()


class LocalAdmission:
    """Threading semaphores per limited stage and in-process device pools.

    ``limits`` maps a stage to the most sandboxes inside it at once (stages
    not named are unlimited); ``pools`` maps a device kind to the names of
    devices already created, ``pairs`` a kind of pair to its two names: a
    ``veth`` pair's (host end, peer), a ``netns-veth``'s (namespace, host
    end) (the driver creates them before the storm); ``cni_netns`` the
    ``cni`` runtime's namespaces with their ADD done (kind ``netns-veth``).

    A pool's target is what it was made with (nothing refills it); a kind
    made with none is no pool (:meth:`level_after_take` says None).
    """

    def __init__(
        self,
        limits: Mapping[str, int] | None = None,
        pools: Mapping[str, Iterable[str]] | None = None,
        pairs: Mapping[str, Iterable[tuple[str, str]]] | None = None,
        cni_netns: Iterable[CniPooledNetns] = (),
    ) -> None:
        for stage, k in (limits or {}).items():
            if k < 1:
                raise ValueError(f"limits.{stage}: must be at least 1, but got {k}")
        self._gates = {s: threading.BoundedSemaphore(k) for s, k in (limits or {}).items()}
        self._pools = {kind: deque(names) for kind, names in (pools or {}).items()}
        self._pairs = {kind: deque(both) for kind, both in (pairs or {}).items()}
        self._cni_netns = deque(cni_netns)
        self._targets: dict[tuple[str, str], int] = {
            **{("pool", kind): len(q) for kind, q in self._pools.items()},
            **{("pair", kind): len(q) for kind, q in self._pairs.items()},
            ("cni", "netns-veth"): len(self._cni_netns),
        }
        self._levels: dict[tuple[str, str], PoolLevel | None] = {}
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

    def _note_level(self, which: str, kind: str, holder: str, left: int) -> None:
        """Under the lock: what ``holder``'s take of ``kind`` left its pool at."""
        target = self._targets.get((which, kind), 0)
        level = PoolLevel(ready=left, target=target) if target else None
        self._levels[(kind, holder)] = level

    def take(self, kind: str, holder: str) -> str | None:
        with self._lock:
            pool = self._pools.get(kind)
            got = pool.popleft() if pool else None
            self._note_level("pool", kind, holder, len(pool or ()))
            return got

    def take_pair(self, kind: str, holder: str) -> tuple[str, str] | None:
        with self._lock:
            pool = self._pairs.get(kind)
            got = pool.popleft() if pool else None
            self._note_level("pair", kind, holder, len(pool or ()))
            return got

    def take_netns_veth(self, holder: str) -> tuple[str, str] | None:
        return self.take_pair("netns-veth", holder)

    def offers_cni_netns(self) -> bool:
        with self._lock:
            return bool(self._cni_netns)

    def take_cni_netns(self, holder: str) -> CniPooledNetns | None:
        with self._lock:
            got = self._cni_netns.popleft() if self._cni_netns else None
            self._note_level("cni", "netns-veth", holder, len(self._cni_netns))
            return got

    def level_after_take(self, kind: str, holder: str) -> PoolLevel | None:
        """:class:`PoolLevels`: the level ``holder``'s latest take of ``kind``
        left, or None where the kind had no pool (none asked of it either)."""
        with self._lock:
            return self._levels.get((kind, holder))

    def left(self, kind: str) -> list[str]:
        """Devices of ``kind`` still in the pool (the driver removes them after)."""
        with self._lock:
            return list(self._pools.get(kind, ()))
