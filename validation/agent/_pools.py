"""Pools of devices the agent creates ahead of a storm, through in-process netlink.

Kinds and names (``<id>`` is the agent's ``pool_id``, so two agents on one
host never sweep each other's devices; every name carries a prefix from
:mod:`bootstorm.validation._names`):

* ``netns``: a named network namespace ``bstpool-netns-<id>-<n>``;
* ``veth``: a veth pair ``bsp<id>v<n>`` / ``bsp<id>v<n>p``, both ends in
  the host namespace, down; the client moves one end into its sandbox;
* ``tap``: a persistent tap device ``bsp<id>t<n>`` in the host namespace, down;
* ``netns-veth``: a namespace ``bstpool-netns-veth-<id>-<n>`` made with a
  veth pair whose peer is inside it (``eth0``, the sandbox's end) and whose
  host end ``bsp<id>n<n>`` stays on the host, both down: the client takes the
  namespace (``name``) and the host end (``peer``) and moves nothing.

A device handed out is the client's: the agent forgets it and never removes
it. A client should move links out of the host namespace or rename them,
because an agent restarted with the same ``pool_id`` sweeps every device
that still carries its pool names (the leftovers of an agent that was killed
before it could clean up). A ``netns-veth`` keeps its names (renaming the
host end would take RTNL, the cost the kind saves): a restart of its agent
during a storm sweeps the taken ones too.

All netlink work runs on one executor thread that owns the one netlink
socket (pyroute2 sockets are not thread-safe), so the event loop never blocks.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import re
from collections import deque
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from .._names import AGENT_POOL_LINK_PREFIX, AGENT_POOL_NETNS_PREFIX, owned_link, owned_netns
from ._metrics import AgentMetrics, PoolSnapshot
from ._protocol import NETNS_VETH_PEER, POOL_KINDS

__all__ = ["CniPlumbing", "Device", "DeviceOps", "NetlinkDevices", "PoolManager", "pool_names"]

log = logging.getLogger(__name__)

#: Highest pool_id: ``bsp9999v999999p`` is exactly 15 bytes (IFNAMSIZ - 1).
MAX_POOL_ID = 9999
_MAX_INDEX = 1_000_000
_BACKOFF_S = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)


@dataclass(frozen=True, slots=True)
class Device:
    kind: str
    #: The device; a ``netns-veth``'s namespace.
    name: str
    #: The other end of a veth pair; a ``netns-veth``'s host end (its peer is
    #: :data:`NETNS_VETH_PEER` inside the namespace); None for other kinds.
    peer: str | None = None
    #: A ``netns-veth`` a CNI ADD plumbed (:mod:`._cni_pool`): its container
    #: id, its network's conflist and the ADD's result, as its taker needs them.
    cni: CniPlumbing | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CniPlumbing:
    container_id: str
    conflist: Mapping[str, Any] = field(compare=False)
    result: str | None = field(default=None, compare=False)


def pool_names(pool_id: int, kind: str, index: int) -> Device:
    """The device of ``kind`` number ``index`` of agent ``pool_id``."""
    if kind == "netns":
        return Device(kind, f"{AGENT_POOL_NETNS_PREFIX}netns-{pool_id}-{index}")
    if kind == "veth":
        name = f"{AGENT_POOL_LINK_PREFIX}{pool_id}v{index}"
        return Device(kind, name, peer=f"{name}p")
    if kind == "tap":
        return Device(kind, f"{AGENT_POOL_LINK_PREFIX}{pool_id}t{index}")
    if kind == "netns-veth":
        return Device(
            kind,
            f"{AGENT_POOL_NETNS_PREFIX}netns-veth-{pool_id}-{index}",
            peer=f"{AGENT_POOL_LINK_PREFIX}{pool_id}n{index}",
        )
    raise ValueError(f"kind: unknown pool kind {kind!r}")


class DeviceOps(Protocol):
    """Creates and removes real devices; called on the executor thread only.

    ``create`` makes ``device`` (its names from :func:`pool_names`) and
    returns it as made: the same, or with what only making it told (a CNI
    ADD's result); an EEXIST error means the name is taken, and the pool
    moves to the next.
    """

    def create(self, device: Device) -> Device: ...
    def remove(self, device: Device) -> None: ...
    def leftovers(self) -> list[Device]: ...
    def close(self) -> None: ...


class NetlinkDevices:
    """:class:`DeviceOps` through pyroute2 (netlink and netns syscalls, no ``ip``)."""

    def __init__(self, pool_id: int) -> None:
        self._pool_id = pool_id
        self._ipr: Any = None
        self._link_re = re.compile(rf"^{AGENT_POOL_LINK_PREFIX}{pool_id}([vtn])(\d+)$")
        self._netns_re = re.compile(rf"^{AGENT_POOL_NETNS_PREFIX}netns-{pool_id}-(\d+)$")
        self._netns_veth_re = re.compile(rf"^{AGENT_POOL_NETNS_PREFIX}netns-veth-{pool_id}-(\d+)$")

    def _route(self) -> Any:
        if self._ipr is None:
            from pyroute2 import IPRoute

            self._ipr = IPRoute()
        return self._ipr

    def create(self, device: Device) -> Device:
        if device.kind == "netns":
            from pyroute2 import netns

            netns.create(device.name)
        elif device.kind == "veth":
            self._route().link("add", ifname=device.name, kind="veth", peer={"ifname": device.peer})
        elif device.kind == "tap":
            self._route().link("add", ifname=device.name, kind="tuntap", mode="tap")
        elif device.kind == "netns-veth":
            self._create_netns_veth(device)
        else:
            raise ValueError(f"kind: unknown pool kind {device.kind!r}")
        return device

    def _create_netns_veth(self, device: Device) -> None:
        """The namespace, then the pair made with its peer inside it; the
        namespace goes again if the pair cannot be made (its name taken)."""
        from pyroute2 import netns

        netns.create(device.name)
        try:
            fd = os.open(f"/run/netns/{device.name}", os.O_RDONLY | os.O_CLOEXEC)
            try:
                self._route().link(
                    "add",
                    ifname=device.peer,
                    kind="veth",
                    peer={"ifname": NETNS_VETH_PEER, "net_ns_fd": fd},
                )
            finally:
                os.close(fd)
        except BaseException:
            with contextlib.suppress(Exception):
                netns.remove(device.name)
            raise

    def remove(self, device: Device) -> None:
        from pyroute2 import netns

        if device.kind == "netns":
            assert owned_netns(device.name)
            netns.remove(device.name)
            return
        if device.kind == "netns-veth":
            # The host end first (its peer goes with it, now, under RTNL);
            # either may be gone already (a sweep finds what is left).
            assert owned_netns(device.name) and device.peer is not None
            self._remove_link(device.peer)
            if device.name in netns.listnetns():
                netns.remove(device.name)
            return
        self._remove_link(device.name)

    def _remove_link(self, name: str) -> None:
        from pyroute2 import NetlinkError

        assert owned_link(name)
        ipr = self._route()
        index = ipr.link_lookup(ifname=name)
        if not index:
            return  # already gone (a veth's peer goes with it)
        try:
            ipr.link("del", index=index[0])
        except NetlinkError as exc:
            if exc.code != errno.ENODEV:
                raise

    def leftovers(self) -> list[Device]:
        from pyroute2 import netns

        found: list[Device] = []
        netns_veth: set[int] = set()  # by index: its namespace, its host end, or both
        for name in netns.listnetns():
            if self._netns_re.match(name):
                found.append(Device("netns", name))
            elif m := self._netns_veth_re.match(name):
                netns_veth.add(int(m.group(1)))
        for link in self._route().get_links():
            name = link.get("ifname") or link.get_attr("IFLA_IFNAME")
            m = self._link_re.match(name or "")
            if not m:
                continue
            if m.group(1) == "n":
                netns_veth.add(int(m.group(2)))
                continue
            kind = "veth" if m.group(1) == "v" else "tap"
            found.append(Device(kind, name, peer=f"{name}p" if kind == "veth" else None))
        found += [pool_names(self._pool_id, "netns-veth", n) for n in sorted(netns_veth)]
        return found

    def close(self) -> None:
        if self._ipr is not None:
            self._ipr.close()
            self._ipr = None


class PoolManager:
    """Keeps each pool at its target size in the background; hands devices out."""

    def __init__(self, ops: DeviceOps, metrics: AgentMetrics, *, pool_id: int) -> None:
        if not 0 <= pool_id <= MAX_POOL_ID:
            raise ValueError(f"pool_id: must be within 0..{MAX_POOL_ID} (got {pool_id})")
        self._ops = ops
        self._metrics = metrics
        self._pool_id = pool_id
        self._ready: dict[str, deque[Device]] = {k: deque() for k in POOL_KINDS}
        self._targets: dict[str, int] = dict.fromkeys(POOL_KINDS, 0)
        self._next: dict[str, int] = dict.fromkeys(POOL_KINDS, 0)
        # One thread owns the netlink socket; it also keeps slow RTNL work off the loop.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bootstorm-netlink")
        self._wake = asyncio.Event()
        self._stopping = False
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Sweep what an earlier, killed agent left, then start refilling."""
        loop = asyncio.get_running_loop()
        try:
            leftovers = await loop.run_in_executor(self._executor, self._ops.leftovers)
        except Exception as exc:  # listing needs no root; a failure here is worth a line
            log.warning("cannot list leftover pool devices: %s", exc)
            leftovers = []
        for device in leftovers:
            try:
                await loop.run_in_executor(self._executor, self._ops.remove, device)
                log.info("swept leftover %s %s", device.kind, device.name)
            except Exception as exc:
                log.warning("cannot sweep leftover %s %s: %s", device.kind, device.name, exc)
        self._task = asyncio.create_task(self._run(), name="bootstorm-pool-refill")

    def set_targets(self, pools: Mapping[str, int]) -> None:
        """New sizes; kinds the agent cannot make are ignored (logged once per config)."""
        unknown = sorted(set(pools) - set(POOL_KINDS))
        if unknown:
            log.info("pool kinds %s are not pre-created by this agent; ignored", unknown)
        for kind in POOL_KINDS:
            self._targets[kind] = pools.get(kind, 0)
        self._wake.set()

    def take(self, kind: str) -> Device | None:
        """A ready device, now the caller's, or None if the pool is empty."""
        ready = self._ready[kind]
        if not ready:
            self._metrics.pool_empty.labels(kind).inc()
            return None
        device = ready.popleft()
        self._metrics.pool_taken.labels(kind).inc()
        self._wake.set()
        return device

    def snapshot(self) -> list[PoolSnapshot]:
        return [PoolSnapshot(k, len(self._ready[k]), self._targets[k]) for k in POOL_KINDS]

    async def close(self) -> None:
        """Stop refilling and remove every device still in a pool."""
        self._stopping = True
        self._wake.set()
        if self._task is not None:
            # Not cancelled: the refill loop stops between two netlink calls, so a
            # device created in the executor is never lost to a cancellation.
            await self._task
        loop = asyncio.get_running_loop()
        for kind in POOL_KINDS:
            while self._ready[kind]:
                device = self._ready[kind].popleft()
                try:
                    await loop.run_in_executor(self._executor, self._ops.remove, device)
                except Exception as exc:
                    self._metrics.pool_errors.labels(kind).inc()
                    log.error("cannot remove pooled %s %s: %s", kind, device.name, exc)
        await loop.run_in_executor(self._executor, self._ops.close)
        self._executor.shutdown(wait=True)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        # Per kind, so a kind that cannot be made (no root, no tun module) neither
        # blocks the others nor floods the log.
        failures = dict.fromkeys(POOL_KINDS, 0)
        retry_at = dict.fromkeys(POOL_KINDS, 0.0)
        while not self._stopping:
            self._wake.clear()
            worked = False
            # One device per kind per pass, so one big pool does not starve the others.
            for kind in POOL_KINDS:
                if self._stopping:
                    break
                if retry_at[kind] > loop.time():
                    continue
                try:
                    worked |= await self._step(kind)
                    failures[kind] = 0
                except Exception as exc:
                    delay = _BACKOFF_S[min(failures[kind], len(_BACKOFF_S) - 1)]
                    failures[kind] += 1
                    retry_at[kind] = loop.time() + delay
                    log.error("%s pool: refill failed (%s); retrying in %gs", kind, exc, delay)
            if worked or self._stopping:
                continue
            # Idle until a take, a new config, a shutdown, or the next retry is due.
            due = [t - loop.time() for t in retry_at.values() if t > loop.time()]
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=min(due) if due else None)

    async def _step(self, kind: str) -> bool:
        loop = asyncio.get_running_loop()
        ready = self._ready[kind]
        if len(ready) > self._targets[kind]:
            device = ready.pop()  # newest first: the oldest go out on the next take
            try:
                await self._call(kind, self._ops.remove, device)
            except Exception:
                ready.append(device)  # still ours: retried, and removed at shutdown
                raise
            return True
        if len(ready) == self._targets[kind]:
            return False
        started = loop.time()
        device = await self._create(kind)
        self._metrics.pool_refill_s.labels(kind).observe(loop.time() - started)
        ready.append(device)
        return True

    async def _create(self, kind: str) -> Device:
        # A device a client kept may still hold a name; skip to the next free one.
        for _ in range(64):
            device = pool_names(self._pool_id, kind, self._next[kind])
            self._next[kind] = (self._next[kind] + 1) % _MAX_INDEX
            try:
                made: Device = await self._call(kind, self._ops.create, device)
                return made
            except _NameTakenError:
                continue
        raise RuntimeError(f"no free {kind} name after 64 tries")

    async def _call(self, kind: str, fn: Any, device: Device) -> Any:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, fn, device)
        except Exception as exc:
            if _exists(exc):
                raise _NameTakenError(device.name) from exc
            self._metrics.pool_errors.labels(kind).inc()
            raise


class _NameTakenError(Exception):
    """A pool name already taken (by a device a client kept)."""


def _exists(exc: BaseException) -> bool:
    code = getattr(exc, "code", None)
    if code is None and isinstance(exc, OSError):
        code = exc.errno
    return code == errno.EEXIST
