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

A device handed out is the client's: the agent never removes it. An agent
started with the same ``pool_id`` sweeps the devices that still carry its
pool names (the leftovers of an agent that was killed before it could clean
up), except those it handed out: each take is recorded in the agent's run
directory before it is answered (:class:`HandedOutRecord`), and the start-up
sweep skips what the record names and still exists. A handed-out device
that its client removed drops out of the record; one the client left behind
stays until an operator removes it (or deletes the record while no agent of
that id runs, and lets the next start sweep it).

One agent per ``pool_id`` and host: an agent holds an ``flock`` on
``<run dir>/pool-<id>.lock`` for its life (:func:`claim_pool_id`), taken
before its sweep; a second agent with the same id refuses to start, naming
the holder's PID. The kernel drops the lock of a killed agent.

Refill workers (the config's ``pool_refill.concurrency``; one without
``pool_refill``) make and remove devices, all kinds together: each worker owns one
executor thread and its own :class:`DeviceOps`, so its own netlink socket
(pyroute2 sockets are not thread-safe), and the event loop never blocks. A
free worker makes a device of a kind while the kind's ready devices plus
those being made are below its target, and removes a ready one while the
ready ones are above it, taking the kinds in turn. The target is the kind's
``pools`` entry, or, with ``pool_refill.follow_rate``, what
:func:`~bootstorm.models.follow_rate_target` makes of the starts seen in its
window (one start per sandbox: :meth:`PoolManager.take`). The sweep, the
listing of what is left and the record's compaction run on the first
worker's ops (the one the manager was made with).

A worker's thread runs at :data:`REFILL_NICE`, whatever the agent's own
nice value: the agent is ranked ahead of the node's work (its unit's
``Nice=-10``) so that a permit is answered at once, but a refill is
background work that must not outrank the starts it is meant to spare; the
processes it execs (a ``netns-veth`` pool's CNI plugins) inherit it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import json
import logging
import math
import os
import re
import stat
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from ...models import ConfigError, FollowRate, PoolRefill, follow_rate_target
from .._names import AGENT_POOL_LINK_PREFIX, AGENT_POOL_NETNS_PREFIX, owned_link, owned_netns
from .._netns import create_netns_here, list_netns, remove_netns
from ._metrics import AgentMetrics, PoolSnapshot
from ._protocol import ASK_ORDER, NETNS_VETH_PEER, POOL_KINDS

__all__ = [
    "AGENT_RUN_DIR",
    "CniPlumbing",
    "Device",
    "DeviceOps",
    "HandedOutRecord",
    "NetlinkDevices",
    "PoolManager",
    "PoolOwnerLock",
    "claim_pool_id",
    "default_run_dir",
    "pool_names",
]

log = logging.getLogger(__name__)

#: Highest pool_id: ``bsp9999v999999p`` is exactly 15 bytes (IFNAMSIZ - 1).
MAX_POOL_ID = 9999
_MAX_INDEX = 1_000_000
_BACKOFF_S = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
#: A root agent's run directory: its owner locks and records of handed-out
#: devices. A tmpfs: a reboot, which removes the devices, removes these too.
AGENT_RUN_DIR = Path("/run/bootstorm-agent")
#: The record is compacted (devices their clients removed dropped) once it
#: holds this many names, then again each time it doubles.
_COMPACT_MIN = 1024
#: Most start times a rate-following pool remembers: a target that reaches
#: ``max_devices`` needs no more, and this bounds the memory a client that
#: hammers empty takes can make the agent hold (about 30 MB at the cap).
_MAX_STARTS = 1_000_000


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


def default_run_dir() -> Path:
    """:data:`AGENT_RUN_DIR` for root; a directory of the user's under the
    temporary directory otherwise (an agent without root makes no devices,
    but its pool ids are still its own)."""
    euid = os.geteuid()
    if euid == 0:
        return AGENT_RUN_DIR
    return Path(tempfile.gettempdir()) / f"bootstorm-agent-{euid}"


def _lock_path(run_dir: Path, pool_id: int) -> Path:
    return run_dir / f"pool-{pool_id}.lock"


def _record_path(run_dir: Path, pool_id: int) -> Path:
    return run_dir / f"pool-{pool_id}.handed-out"


def _own_dir(run_dir: Path) -> None:
    """``run_dir``, made if missing; refused unless it is a directory of ours
    (under a shared /tmp another user could have made it first)."""
    run_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
    st = os.lstat(run_dir)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise PermissionError(errno.EPERM, "not a directory of this user", str(run_dir))


class PoolOwnerLock:
    """The claim of one pool id on this host: an ``flock`` on
    ``<run dir>/pool-<id>.lock``, holding the owner's PID, for the agent's life."""

    def __init__(self, fd: int, path: Path, pool_id: int) -> None:
        self._fd: int | None = fd
        self.path = path
        self.pool_id = pool_id

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self, *, remove: bool = False) -> None:
        """Give the pool id back; ``remove``: the lock file too (a claim made
        meanwhile on the old file sees it gone and tries again: :func:`claim_pool_id`)."""
        if self._fd is None:
            return
        if remove:
            with contextlib.suppress(OSError):
                self.path.unlink()
        os.close(self._fd)  # the flock goes with the last descriptor
        self._fd = None


def claim_pool_id(pool_id: int, *, run_dir: Path) -> PoolOwnerLock:
    """The lock of ``pool_id``, or ConfigError (one line, the holder's PID) if
    another agent holds it; OSError if the lock file cannot be opened."""
    _own_dir(run_dir)
    path = _lock_path(run_dir, pool_id)
    for _ in range(16):
        fd = _try_lock(path, pool_id)
        # Locked, but maybe a file its last owner removed on the way out (then a
        # newer claim may hold the file now at ``path``): only that one counts.
        try:
            if _same_file(os.fstat(fd), os.stat(path, follow_symlinks=False)):
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    else:
        raise ConfigError(
            f"pool-id: the lock file {path} keeps changing; is another agent looping?"
        )
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError as exc:  # the lock holds anyway; only the PID shown to others is missing
        log.warning("cannot write the owner pid into %s: %s", path, exc)
    return PoolOwnerLock(fd, path, pool_id)


def _same_file(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _try_lock(path: Path, pool_id: int) -> int:
    # O_CLOEXEC: a child exec'd by the agent (a CNI plugin) must not keep the
    # lock alive after the agent dies.
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        try:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        except OSError:
            holder = ""
        os.close(fd)
        who = f"pid {holder}" if holder.isdigit() else "pid unknown"
        raise ConfigError(
            f"pool-id: {pool_id} is in use by another agent on this host ({who}, lock {path}); "
            f"stop it or give this agent another --pool-id"
        ) from None
    except BaseException:
        os.close(fd)
        raise
    return fd


class HandedOutRecord:
    """The devices one pool id handed out, one JSON object a line, in
    ``<run dir>/pool-<id>.handed-out``.

    A take is appended (one ``write`` with ``O_APPEND``) before the agent
    answers it, so an agent killed right after still knows the device is a
    client's. No fsync: a killed process loses no written data, and a host
    crash, which would, removes the devices (and this tmpfs) too. A rewrite
    (a new list, at start and on compaction) goes through a temporary file
    and a rename, so the record is whole at every instant.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def read(self) -> list[Device]:
        """The recorded devices (a torn or unreadable line is skipped)."""
        try:
            text = self.path.read_bytes().decode("utf-8", "replace")
        except FileNotFoundError:
            return []
        found: dict[str, Device] = {}
        for line in text.split("\n"):  # only what append() ends a line with
            if not line:
                continue
            try:
                data = json.loads(line)
                device = Device(str(data["kind"]), str(data["name"]), peer=data.get("peer"))
            except (ValueError, KeyError, TypeError):
                continue
            if device.kind in POOL_KINDS and (device.peer is None or isinstance(device.peer, str)):
                found[device.name] = device
        return list(found.values())

    def rewrite(self, devices: Iterable[Device]) -> None:
        """Make the record exactly ``devices``; appends go to the new file."""
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text("".join(_record_line(d) for d in devices))
        tmp.replace(self.path)
        self._reopen()

    def append(self, device: Device) -> None:
        if self._fd is None:
            self._reopen()
        assert self._fd is not None
        line = _record_line(device).encode()
        if os.write(self._fd, line) != len(line):  # a short write: disk full, say
            raise OSError(errno.ENOSPC, "short write", str(self.path))

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _reopen(self) -> None:
        self.close()
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
        self._fd = os.open(self.path, flags, 0o644)


def _record_line(device: Device) -> str:
    return json.dumps({"kind": device.kind, "name": device.name, "peer": device.peer}) + "\n"


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
            os.close(create_netns_here(device.name))
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
        fd = create_netns_here(device.name)
        try:
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
                remove_netns(device.name)
            raise

    def remove(self, device: Device) -> None:
        if device.kind == "netns":
            assert owned_netns(device.name)
            remove_netns(device.name)
            return
        if device.kind == "netns-veth":
            # The host end first (its peer goes with it, now, under RTNL);
            # either may be gone already (a sweep finds what is left).
            assert owned_netns(device.name) and device.peer is not None
            self._remove_link(device.peer)
            remove_netns(device.name)
            return
        self._remove_link(device.name)

    def _remove_link(self, name: str, *, route: Any = None) -> None:
        """``name`` deleted through ``route`` (default: this one's socket)."""
        from pyroute2 import NetlinkError

        assert owned_link(name)
        ipr = route if route is not None else self._route()
        index = ipr.link_lookup(ifname=name)
        if not index:
            return  # already gone (a veth's peer goes with it)
        try:
            ipr.link("del", index=index[0])
        except NetlinkError as exc:
            if exc.code != errno.ENODEV:
                raise

    def leftovers(self) -> list[Device]:
        found: list[Device] = []
        netns_veth: set[int] = set()  # by index: its namespace, its host end, or both
        for name in list_netns():
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


#: The nice value of the refill workers' threads (and of what they exec):
#: the node's default, so that a refill shares the cores with the sandboxes'
#: starts as an equal, as the model has it (``models.refill``). At the
#: agent's -10 a worker's refills (a CNI ADD each, for ``netns-veth``) would
#: take a core ahead of the starts they are meant to spare (research log,
#: "Traffic through a node agent, again").
REFILL_NICE = 0


def _background_thread() -> None:
    """A refill worker's thread initializer: :data:`REFILL_NICE` for this
    thread only (Linux ranks threads, not processes; raising one's nice
    value needs no privilege). Left as it is where the kernel refuses."""
    with contextlib.suppress(OSError):
        tid = threading.get_native_id()
        current = os.getpriority(os.PRIO_PROCESS, tid)
        if current < REFILL_NICE:
            os.setpriority(os.PRIO_PROCESS, tid, REFILL_NICE)


def _worker_executor(name: str) -> ThreadPoolExecutor:
    """A refill worker's one thread, at :data:`REFILL_NICE`."""
    return ThreadPoolExecutor(
        max_workers=1, thread_name_prefix=name, initializer=_background_thread
    )


@dataclass(eq=False)
class _Worker:
    """One refill worker: its own ops (its own netlink socket) on its own thread."""

    index: int
    ops: DeviceOps
    executor: ThreadPoolExecutor


class PoolManager:
    """Keeps each pool at its target size in the background; hands devices out.

    ``run_dir`` holds the pool id's owner lock and its record of handed-out
    devices (module doc). ``"auto"``: :func:`default_run_dir` for devices
    made through netlink (real ones, host-wide), none for other DeviceOps (a
    test's fakes); None: neither lock nor record (what is handed out is
    remembered in memory only, so a restart may sweep it).

    ``ops`` is the first refill worker's, and the sweep's and the record's;
    ``ops_factory`` makes the ops of each further worker (a config's
    ``pool_refill.concurrency`` above 1). Without one the manager runs one
    worker whatever the config asks (logged), as sharing ``ops`` between
    threads is not safe. ``clock``: monotonic seconds, for the start window
    of a rate-following target.
    """

    def __init__(
        self,
        ops: DeviceOps,
        metrics: AgentMetrics,
        *,
        pool_id: int,
        run_dir: Path | Literal["auto"] | None = "auto",
        ops_factory: Callable[[], DeviceOps] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 0 <= pool_id <= MAX_POOL_ID:
            raise ValueError(f"pool_id: must be within 0..{MAX_POOL_ID} (got {pool_id})")
        self._ops = ops
        self._ops_factory = ops_factory
        self._clock = clock
        self._metrics = metrics
        self._pool_id = pool_id
        if run_dir == "auto":
            run_dir = default_run_dir() if isinstance(ops, NetlinkDevices) else None
        self._run_dir: Path | None = run_dir
        self._owner: PoolOwnerLock | None = None
        self._record: HandedOutRecord | None = None
        #: Handed-out devices still believed to exist, by name, with the take's
        #: sequence number (a compaction keeps what was taken while it listed).
        self._handed: dict[str, tuple[Device, int]] = {}
        self._takes = 0
        self._compact_at = _COMPACT_MIN
        self._ready: dict[str, deque[Device]] = {k: deque() for k in POOL_KINDS}
        #: Devices a worker is making now, by kind (counted against the target).
        self._making: dict[str, int] = dict.fromkeys(POOL_KINDS, 0)
        self._targets: dict[str, int] = dict.fromkeys(POOL_KINDS, 0)
        #: The config's ``pools`` entries of the kinds made here: the targets
        #: without ``follow_rate``, the floors with it.
        self._floors: dict[str, int] = dict.fromkeys(POOL_KINDS, 0)
        #: The kinds the config pools (its ``pools`` keys), in ASK_ORDER.
        self._pooled: tuple[str, ...] = ()
        self._follow: FollowRate | None = None
        #: Times (``clock``) of the starts in the follow-rate window, oldest first.
        self._starts: deque[float] = deque()
        self._concurrency = 1
        self._next: dict[str, int] = dict.fromkeys(POOL_KINDS, 0)
        # Per kind, so a kind that cannot be made (no root, no tun module) neither
        # blocks the others nor floods the log.
        self._failures: dict[str, int] = dict.fromkeys(POOL_KINDS, 0)
        self._retry_at: dict[str, float] = dict.fromkeys(POOL_KINDS, 0.0)
        #: The kind the next free worker looks at first (kinds in turn, so one
        #: big pool does not starve the others).
        self._turn = 0
        # One thread owns each netlink socket; it also keeps slow RTNL work off the loop.
        self._executor = _worker_executor("bootstorm-netlink")
        self._main = _Worker(0, ops, self._executor)
        #: The workers in service, by index (0: the main one, always there).
        self._workers: dict[int, _Worker] = {0: self._main}
        #: The tasks of the other workers, in service or closing their socket.
        self._extra_tasks: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._stopping = False
        self._task: asyncio.Task[None] | None = None

    @property
    def owner_lock(self) -> PoolOwnerLock | None:
        """The pool id's owner lock once :meth:`start` took it."""
        return self._owner

    @property
    def concurrency(self) -> int:
        """Refill workers the config in force asks for (capped at 1 without an ``ops_factory``)."""
        return self._concurrency

    def workers(self) -> int:
        """Refill workers in service now (those asked to stop finish their device first)."""
        return len(self._workers)

    def handed_out(self) -> list[Device]:
        """Devices handed out and not known to be gone, oldest first."""
        return [device for device, _ in self._handed.values()]

    async def start(self) -> None:
        """Claim the pool id, sweep what an earlier, killed agent left (not
        what it handed out), then start refilling.

        ConfigError (one line) if another agent holds the pool id.
        """
        recorded: list[Device] = []
        if self._run_dir is not None:
            self._claim(self._run_dir)
            if self._record is not None:
                try:
                    recorded = self._record.read()
                except OSError as exc:
                    self.release_claim()
                    raise ConfigError(
                        f"pool-id: cannot read the record of handed-out devices "
                        f"{self._record.path} ({exc.strerror}); refusing to sweep"
                    ) from None
        try:
            await self._sweep(recorded)
        except BaseException:
            self.release_claim()
            raise
        self._task = asyncio.create_task(self._work(self._main), name="bootstorm-pool-refill")
        # Extra workers also stop when the main one is cancelled (a test's "kill").
        self._task.add_done_callback(lambda _: self._wake.set())
        self._scale()

    def _claim(self, run_dir: Path) -> None:
        try:
            self._owner = claim_pool_id(self._pool_id, run_dir=run_dir)
        except OSError as exc:
            if os.geteuid() == 0:
                raise ConfigError(
                    f"pool-id: cannot take the owner lock of pool id {self._pool_id} in "
                    f"{run_dir} ({exc.strerror or exc})"
                ) from None
            # Without root the agent can make no devices (so has none to guard),
            # and may not even create files (an unmapped user namespace).
            log.warning(
                "pool id %d: no owner lock in %s (%s); running without one",
                self._pool_id,
                run_dir,
                exc.strerror or exc,
            )
            return
        self._record = HandedOutRecord(_record_path(run_dir, self._pool_id))

    def release_claim(self, *, tidy: bool = False) -> None:
        """Close the record and give the pool id back (at the end of close()).

        ``tidy``: remove the lock file, and the record if it names no device.
        """
        if self._record is not None:
            self._record.close()
            if tidy and not self._handed:
                with contextlib.suppress(OSError):
                    self._record.path.unlink()
        if self._owner is not None:
            self._owner.release(remove=tidy)

    async def _sweep(self, recorded: list[Device]) -> None:
        loop = asyncio.get_running_loop()
        try:
            leftovers = await loop.run_in_executor(self._executor, self._ops.leftovers)
        except Exception as exc:  # listing needs no root; a failure here is worth a line
            log.warning("cannot list leftover pool devices: %s", exc)
            # Nothing is swept; the record stays as it is (nothing is known gone).
            self._handed = {d.name: (d, 0) for d in recorded}
            return
        present = {d.name for d in leftovers}
        # Handed out and still there: a client's. Handed out and gone: its client removed it.
        self._handed = {d.name: (d, 0) for d in recorded if d.name in present}
        if self._record is not None:
            try:
                self._record.rewrite(self.handed_out())
            except OSError as exc:  # the old record stays whole: it names more, no less
                log.warning("cannot rewrite %s: %s", self._record.path, exc)
        if self._handed:
            log.info(
                "pool id %d: keeping %d devices handed out before the restart (%s)",
                self._pool_id,
                len(self._handed),
                ", ".join(list(self._handed)[:8]) + (" ..." if len(self._handed) > 8 else ""),
            )
        for device in leftovers:
            if device.name in self._handed:
                continue
            try:
                await loop.run_in_executor(self._executor, self._ops.remove, device)
                log.info("swept leftover %s %s", device.kind, device.name)
            except Exception as exc:
                log.warning("cannot sweep leftover %s %s: %s", device.kind, device.name, exc)

    def set_targets(self, pools: Mapping[str, int]) -> None:
        """New sizes, refilled by one worker (:meth:`set_policy` without ``refill``)."""
        self.set_policy(pools=pools, refill=None)

    def set_policy(self, *, pools: Mapping[str, int], refill: PoolRefill | None) -> None:
        """A config's ``pools`` and ``pool_refill`` (None: one worker, targets =
        ``pools``); kinds the agent cannot make are ignored (logged once per config).

        Workers are started at once or stop after the device they are making;
        the start window of a rate-following target is kept across configs.
        """
        unknown = sorted(set(pools) - set(POOL_KINDS))
        if unknown:
            log.info("pool kinds %s are not pre-created by this agent; ignored", unknown)
        refill = refill if refill is not None else PoolRefill()
        self._floors = {kind: pools.get(kind, 0) for kind in POOL_KINDS}
        # A kind is pooled from one device up, as in the model (a sandbox's
        # plan takes from a pool only where its entry is >= 1): an entry of 0
        # pools nothing, whatever a rate-following target would ask.
        # In the order a sandbox asks for them (ASK_ORDER): the first is its start.
        self._pooled = tuple(kind for kind in ASK_ORDER if pools.get(kind, 0) > 0)
        self._follow = refill.follow_rate
        concurrency = refill.concurrency
        if concurrency > 1 and self._ops_factory is None:
            log.warning(
                "pool_refill.concurrency: %d asked, but this agent's devices are made "
                "through one set of device ops (given without a factory for more); "
                "refilling with one worker",
                concurrency,
            )
            concurrency = 1
        self._concurrency = concurrency
        if self._follow is not None:
            self._starts = deque(self._starts, maxlen=_starts_kept(self._follow))
        self._retarget(started=False)
        self._scale()
        self._wake.set()

    def _retarget(self, *, started: bool) -> None:
        """The targets from the floors, and with ``follow_rate`` from the starts
        in its window (``started``: one more start, now)."""
        rule = self._follow
        if rule is None:
            self._targets = dict(self._floors)
            return
        now = self._clock()
        if started:
            self._starts.append(now)
        horizon = now - rule.window_s
        while self._starts and self._starts[0] <= horizon:
            self._starts.popleft()
        count = len(self._starts)
        self._targets = {
            kind: (
                follow_rate_target(starts=count, rule=rule, floor=self._floors[kind])
                if kind in self._pooled
                else 0
            )
            for kind in POOL_KINDS
        }

    def take(self, kind: str) -> Device | None:
        """A ready device, now the caller's, or None if the pool is empty.

        The take is recorded (module doc) before it returns; a device that
        cannot be recorded stays pooled, and the caller gets None.

        With ``follow_rate``, a take (or an empty one) of the first kind the
        config pools, in :data:`ASK_ORDER`, is one start, and sets every
        pooled kind's target (the simulator's rule).
        """
        # One start per sandbox, not per kind: a sandbox takes each kind it
        # uses once, so counting every take would count a sandbox with a veth
        # and a netns twice. Every sandbox asks for the first pooled kind of
        # ASK_ORDER (a netns only after an empty netns-veth take: counting
        # netns takes there counted the empty-pool starts alone, and the
        # target followed those), so its takes are the starts. Empty takes
        # count too: the demand is what they measure.
        if self._follow is not None and self._pooled and kind == self._pooled[0]:
            self._retarget(started=True)
            self._wake.set()
        ready = self._ready[kind]
        if not ready:
            self._metrics.pool_empty.labels(kind).inc()
            return None
        device = ready.popleft()
        if self._record is not None:
            try:
                self._record.append(device)
            except OSError as exc:
                # Handed out unrecorded, a restart would sweep it under its client.
                ready.appendleft(device)
                self._metrics.pool_errors.labels(kind).inc()
                log.error("%s %s not handed out: cannot record it (%s)", kind, device.name, exc)
                return None
        self._takes += 1
        self._handed[device.name] = (device, self._takes)
        self._metrics.pool_taken.labels(kind).inc()
        self._wake.set()
        return device

    def level(self, kind: str) -> PoolSnapshot:
        """The pool of ``kind`` now: ready devices, target, devices being made."""
        return PoolSnapshot(kind, len(self._ready[kind]), self._targets[kind], self._making[kind])

    def snapshot(self) -> list[PoolSnapshot]:
        return [self.level(k) for k in POOL_KINDS]

    async def close(self) -> None:
        """Stop refilling (every worker ends the device it is making) and
        remove every device still in a pool."""
        self._stopping = True
        self._wake.set()
        # Not cancelled: a worker stops between two netlink calls, so a device
        # created in an executor is never lost to a cancellation.
        tasks = [t for t in (self._task, *self._extra_tasks) if t is not None]
        for outcome in await asyncio.gather(*tasks, return_exceptions=True):
            if isinstance(outcome, Exception):
                log.error("pool refill worker failed: %r", outcome)
        loop = asyncio.get_running_loop()
        for kind in POOL_KINDS:
            while self._ready[kind]:
                device = self._ready[kind].popleft()
                try:
                    await loop.run_in_executor(self._executor, self._ops.remove, device)
                except Exception as exc:
                    self._metrics.pool_errors.labels(kind).inc()
                    log.error("cannot remove pooled %s %s: %s", kind, device.name, exc)
        if self._record is not None and self._handed:
            await self._compact()  # what clients removed need not outlive us in the record
        await loop.run_in_executor(self._executor, self._ops.close)
        self._executor.shutdown(wait=True)
        # Last: no other agent of this id sweeps while this one removes.
        self.release_claim(tidy=True)

    def _scale(self) -> None:
        """Start the workers the concurrency asks for and that are not there
        (those above it stop by themselves: :meth:`_in_service`)."""
        if self._task is None or self._task.done() or self._stopping:
            return
        for index in range(1, self._concurrency):
            if index in self._workers or self._ops_factory is None:
                continue
            try:
                ops = self._ops_factory()
            except Exception as exc:
                log.error(
                    "refill worker %d not started: cannot make its device ops (%s)", index, exc
                )
                return
            executor = _worker_executor(f"bootstorm-netlink-{index}")
            worker = _Worker(index, ops, executor)
            self._workers[index] = worker
            task = asyncio.create_task(
                self._work_extra(worker), name=f"bootstorm-pool-refill-{index}"
            )
            self._extra_tasks.add(task)
            task.add_done_callback(self._extra_tasks.discard)

    def _in_service(self, worker: _Worker) -> bool:
        if self._stopping or self._workers.get(worker.index) is not worker:
            return False
        if worker is self._main:
            return True
        return worker.index < self._concurrency and self._task is not None and not self._task.done()

    async def _work_extra(self, worker: _Worker) -> None:
        loop = asyncio.get_running_loop()
        try:
            await self._work(worker)
        finally:
            # Out of service at once (no await since _work saw it so): a worker
            # started meanwhile for this index is a new one, with its own socket.
            if self._workers.get(worker.index) is worker:
                del self._workers[worker.index]
            try:
                await loop.run_in_executor(worker.executor, worker.ops.close)
            except Exception as exc:
                log.warning("refill worker %d: cannot close its device ops: %s", worker.index, exc)
            worker.executor.shutdown(wait=True)  # idle: every call on it was awaited

    async def _work(self, worker: _Worker) -> None:
        loop = asyncio.get_running_loop()
        while self._in_service(worker):
            self._wake.clear()
            if worker is self._main and len(self._handed) >= self._compact_at:
                await self._compact()
                continue
            job = self._next_job(loop.time())
            if job is None:
                # Idle until a take, a new config, a shutdown, or the next retry is due.
                due = [t - loop.time() for t in self._retry_at.values() if t > loop.time()]
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout=min(due) if due else None)
                continue
            kind, surplus = job
            try:
                if surplus is None:
                    await self._make(worker, kind)
                else:
                    await self._trim(worker, kind, surplus)
                self._failures[kind] = 0
            except Exception as exc:
                delay = _BACKOFF_S[min(self._failures[kind], len(_BACKOFF_S) - 1)]
                self._failures[kind] += 1
                self._retry_at[kind] = loop.time() + delay
                log.error("%s pool: refill failed (%s); retrying in %gs", kind, exc, delay)
            # Another worker may have work now (a kind's backoff ended, a device
            # removed): each looks again before it waits.

    def _next_job(self, now: float) -> tuple[str, Device | None] | None:
        """The next job of a free worker, the kinds taken in turn: ``(kind,
        None)``, make one (counted as being made from now), or ``(kind,
        device)``, remove this surplus ready device (out of the pool from now)."""
        count = len(POOL_KINDS)
        for step in range(count):
            at = (self._turn + step) % count
            kind = POOL_KINDS[at]
            if self._retry_at[kind] > now:
                continue
            ready = self._ready[kind]
            target = self._targets[kind]
            if len(ready) > target:
                self._turn = (at + 1) % count
                return kind, ready.pop()  # newest first: the oldest go out on the next take
            if len(ready) + self._making[kind] < target:
                self._turn = (at + 1) % count
                self._making[kind] += 1
                return kind, None
        return None

    async def _make(self, worker: _Worker, kind: str) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            device = await self._create(worker, kind)
        finally:
            self._making[kind] -= 1
        self._metrics.pool_refill_s.labels(kind).observe(loop.time() - started)
        # Pooled even if the target fell meanwhile: the rule removes the surplus.
        self._ready[kind].append(device)

    async def _trim(self, worker: _Worker, kind: str, device: Device) -> None:
        try:
            await self._call(worker, kind, worker.ops.remove, device)
        except Exception:
            self._ready[kind].append(device)  # still ours: retried, and removed at shutdown
            raise

    async def _compact(self) -> None:
        """Drop from the record the handed-out devices that are gone."""
        loop = asyncio.get_running_loop()
        listed_after = self._takes
        try:
            present = {
                d.name for d in await loop.run_in_executor(self._executor, self._ops.leftovers)
            }
        except Exception as exc:
            log.warning("cannot list pool devices to compact the record: %s", exc)
            present = set(self._handed)
        # Taken while the listing ran: kept whatever the listing saw.
        self._handed = {
            name: (device, seq)
            for name, (device, seq) in self._handed.items()
            if name in present or seq > listed_after
        }
        self._compact_at = max(_COMPACT_MIN, 2 * len(self._handed))
        if self._record is not None:
            try:
                self._record.rewrite(self.handed_out())
            except OSError as exc:  # the old record stays whole; it is only longer
                log.error("cannot compact %s: %s", self._record.path, exc)

    async def _create(self, worker: _Worker, kind: str) -> Device:
        # A device a client kept may still hold a name; skip to the next free one.
        # Names handed out are skipped without a try (after a restart, many may be).
        # Names are drawn on the loop, so two workers never try the same one.
        tries = 0
        for _ in range(_MAX_INDEX):
            if tries == 64:
                break
            device = pool_names(self._pool_id, kind, self._next[kind])
            self._next[kind] = (self._next[kind] + 1) % _MAX_INDEX
            if device.name in self._handed:
                continue
            tries += 1
            try:
                made: Device = await self._call(worker, kind, worker.ops.create, device)
                return made
            except _NameTakenError:
                continue
        raise RuntimeError(f"no free {kind} name after 64 tries")

    async def _call(self, worker: _Worker, kind: str, fn: Any, device: Device) -> Any:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(worker.executor, fn, device)
        except Exception as exc:
            if _exists(exc):
                raise _NameTakenError(device.name) from exc
            self._metrics.pool_errors.labels(kind).inc()
            raise


def _starts_kept(rule: FollowRate) -> int:
    """How many starts decide a target under ``rule``: with this many in the
    window it is ``max_devices`` already, and more change nothing."""
    if rule.cover_s <= 0:
        return 0  # the target is the floor whatever the starts
    kept: int = math.ceil(rule.max_devices * rule.window_s / rule.cover_s) + 1
    return min(_MAX_STARTS, kept)


class _NameTakenError(Exception):
    """A pool name already taken (by a device a client kept)."""


def _exists(exc: BaseException) -> bool:
    code = getattr(exc, "code", None)
    if code is None and isinstance(exc, OSError):
        code = exc.errno
    return code == errno.EEXIST
