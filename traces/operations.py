"""One measurement of a node's operations, each timed alone: the record a
calibration reads (``bootstorm testbed measure-ops --output``).

With the timings it may hold the kernel memory one pooled device of each
kind holds (:class:`PoolDeviceMemory`): a batch of devices made, the memory
available read before and after. A file without that part (written before
it was measured) still reads, with none.

The testbed's bench (:func:`bootstorm.validation.testbed.ops.measure_operations`)
times each operation ``repeats`` times on an otherwise idle host; what it
returns is :class:`OperationTimes`, a recorded measurement like a trace, so it
lives here, in the bottom layer, where a calibration (which may not import
the testbed) reads it back. Its JSON form is bounded and validated: a
malformed file is a :class:`ValueError` naming the field.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Literal, cast

import numpy as np

from .._params import (
    Check,
    Depends,
    DuplicateKeyError,
    Each,
    Interval,
    NonEmpty,
    OneOf,
    Rules,
    Satisfies,
    unique_keys,
    validate,
)
from ._config import MAX_POOL_SIZE
from .schema import HostFacts

__all__ = [
    "AGENT_DEVICE_FIGURES",
    "CNI_OPERATIONS",
    "HELD_OPERATIONS",
    "MAX_AGENT_CALLS_PER_BATCH",
    "MAX_AGENT_DEVICES_PER_ROUND",
    "OPERATIONS",
    "POOL_DEVICE_KINDS",
    "TIME_SLICED_AT",
    "VM_MODES",
    "AgentCallCost",
    "AgentDeviceCost",
    "BridgeFlood",
    "HoldStretch",
    "OperationTimes",
    "OperationTiming",
    "PoolDeviceMemory",
    "VmMode",
    "check_count",
    "holders_time_sliced",
]

#: The operations timed, in the order they run.
OPERATIONS: tuple[str, ...] = (
    "netlink_noop",
    "netns_create",
    "veth_in_netns",
    "veth_on_host",
    "move_into_netns",
    "link_up",
    "addr_add",
    "tap_create",
    "tc_qdisc",
    "tc_filter",
    "cgroup_mkdir",
    "cgroup_attach",
    # The same after 100 ms with no attach: a grace period more (rcu_sync).
    "cgroup_attach_idle",
    "vm_spawn",
    "vm_up",
    # The CNI runtime's processes (``testbed run --runtime cni``).
    "process_spawn",
    "cni_exec",
    "ipam_add",
    "tc_exec",
    "shim_start",
    # host-local's ADD again, with many leases of its network held.
    "ipam_add_held",
    # A port enslaved to a bridge (the bridge plugin's ``enslave`` request),
    # then again on a bridge with many sandboxes' ports on it: adjacent, as
    # their difference is the measurement (timed apart, the host's drift
    # between blocks outweighed it, 2026-11-29).
    "bridge_enslave",
    "bridge_enslave_held",
)
#: The CNI runtime's operations: run only where the CNI plugins are installed.
CNI_OPERATIONS = frozenset(
    {"process_spawn", "cni_exec", "ipam_add", "tc_exec", "shim_start", "ipam_add_held"}
)
#: The operations timed again with what earlier sandboxes left held, by
#: the one each repeats.
HELD_OPERATIONS: dict[str, str] = {
    "ipam_add_held": "ipam_add",
    "bridge_enslave_held": "bridge_enslave",
}
VmMode = Literal["qemu-microvm", "process"]
VM_MODES: tuple[VmMode, ...] = ("qemu-microvm", "process")

#: The kinds of device a node agent pools (``validation/agent/_pools.py``),
#: whose memory ``measure-ops`` measures: a named namespace; a veth pair,
#: both ends on the host, down; a persistent tap, down; a namespace made with
#: a veth pair whose peer is inside it.
POOL_DEVICE_KINDS: tuple[str, ...] = ("netns", "veth", "tap", "netns-veth")
#: Largest change of a meminfo figure over one batch, KiB: 64 TiB, what
#: x86-64's 46-bit physical addresses reach (a profile's MAX_MEMORY_MIB).
MAX_MEMINFO_DELTA_KIB = 64 * 1024**3

# Version 1 with or without ``pool_memory``: a reader that predates it
# ignores the key, and this one reads a file without it as none measured.
_SCHEMA_VERSION = 1


@dataclass(frozen=True, kw_only=True)
class OperationTiming:
    """The timed repetitions of one operation, in seconds (warm-up excluded)."""

    name: str
    samples_s: tuple[float, ...]

    __rules__: ClassVar[Rules] = Rules(
        name=OneOf(OPERATIONS),
        samples_s=(NonEmpty(), Each(Interval(float, 0, closed="neither", unit="s"))),
    )

    def __post_init__(self) -> None:
        validate(self)

    def _percentile_s(self, q: float) -> float:
        return float(np.percentile(np.asarray(self.samples_s, dtype=float), q))

    @property
    def median_s(self) -> float:
        return self._percentile_s(50.0)

    @property
    def q25_s(self) -> float:
        """First quartile (linear interpolation between samples, numpy's default)."""
        return self._percentile_s(25.0)

    @property
    def q75_s(self) -> float:
        return self._percentile_s(75.0)


def _one_entry_per_round(first: str, others: tuple[str, ...]) -> tuple[Check, ...]:
    """Checks that each of ``others`` holds as many entries (one per round) as ``first``."""
    return tuple(
        Check(
            name,
            lambda m, name=name: len(getattr(m, name)) == len(getattr(m, first)),
            lambda m, name=name: (
                f"must hold one entry per round ({len(getattr(m, first))}, as {first}), "
                f"but holds {len(getattr(m, name))}"
            ),
        )
        for name in others
    )


_MEMINFO_DELTAS = Each(Interval(int, -MAX_MEMINFO_DELTA_KIB, MAX_MEMINFO_DELTA_KIB, unit="KiB"))


@dataclass(frozen=True, kw_only=True)
class PoolDeviceMemory:
    """The kernel memory a batch of ``devices`` pooled devices of ``kind`` held,
    one entry per round (warm-up rounds excluded), KiB.

    Each round read ``/proc/meminfo`` and ``/proc/zoneinfo`` on a settled
    host, made the batch, settled again, read them again and removed the
    batch. ``mem_available_drop_kib`` is MemAvailable before less after;
    ``pcp_growth_kib`` is the growth of the pages on the per-CPU free lists
    (``count:`` of ``/proc/zoneinfo``'s pagesets), which MemAvailable counts
    as in use: a batch served from those lists leaves MemAvailable where it
    was. What the batch held, :attr:`held_kib`, is the drop of both together.
    The other ``*_growth_kib`` (after less before) are the allocators' share
    of it: Slab, its unreclaimable part, per-CPU areas. Other work on the host
    moves every figure too, so a round can be negative: the median over the
    rounds is the measurement.
    """

    kind: str
    devices: int
    mem_available_drop_kib: tuple[int, ...]
    pcp_growth_kib: tuple[int, ...]
    slab_growth_kib: tuple[int, ...]
    sunreclaim_growth_kib: tuple[int, ...]
    percpu_growth_kib: tuple[int, ...]
    #: Rounds made and discarded first (one-time costs: a module loaded, caches grown).
    warmup: int = 0

    __rules__: ClassVar[Rules] = Rules(
        kind=OneOf(POOL_DEVICE_KINDS),
        devices=Interval(int, 1, MAX_POOL_SIZE),
        warmup=Interval(int, 0),
        mem_available_drop_kib=(NonEmpty(), _MEMINFO_DELTAS),
        pcp_growth_kib=_MEMINFO_DELTAS,
        slab_growth_kib=_MEMINFO_DELTAS,
        sunreclaim_growth_kib=_MEMINFO_DELTAS,
        percpu_growth_kib=_MEMINFO_DELTAS,
        checks=_one_entry_per_round(
            "mem_available_drop_kib",
            ("pcp_growth_kib", "slab_growth_kib", "sunreclaim_growth_kib", "percpu_growth_kib"),
        ),
    )

    def __post_init__(self) -> None:
        validate(self)

    @property
    def rounds(self) -> int:
        return len(self.mem_available_drop_kib)

    @property
    def held_kib(self) -> tuple[int, ...]:
        """What the batch held, per round: MemAvailable's drop less the growth
        of the per-CPU free lists (MemAvailable plus those lists, before less after)."""
        return tuple(
            d - p for d, p in zip(self.mem_available_drop_kib, self.pcp_growth_kib, strict=True)
        )

    def per_device_mib(self, q: float = 50.0, *, figure: str = "held_kib") -> float:
        """Percentile ``q`` over the rounds of ``figure`` (:attr:`held_kib` or a
        field) per device, MiB."""
        kib = np.asarray(getattr(self, figure), dtype=float) / self.devices
        return float(np.percentile(kib, q)) / 1024.0

    @property
    def median_mib(self) -> float:
        """What one device held, median over the rounds, MiB."""
        return self.per_device_mib(50.0)

    @property
    def q25_mib(self) -> float:
        return self.per_device_mib(25.0)

    @property
    def q75_mib(self) -> float:
        return self.per_device_mib(75.0)


#: Most calls in one batch of :class:`AgentCallCost` (a batch is timed as one).
MAX_AGENT_CALLS_PER_BATCH = 100_000


@dataclass(frozen=True, kw_only=True)
class AgentCallCost:
    """What one HTTP call to a node agent costs on this host, on loopback to
    ``bootstorm agent serve`` in its own process: a stage lease's acquire or
    release, or a pool take, as a sandbox through the agent makes them.

    One sample per batch of ``calls_per_batch`` calls, each the batch's total
    over its calls: ``client_cpu_s`` the caller's CPU (its thread's: the
    testbed's Python, under its GIL), ``agent_cpu_s`` the agent process's
    (``/proc/PID/stat``), ``wall_s`` the round trip.
    """

    calls_per_batch: int
    client_cpu_s: tuple[float, ...]
    agent_cpu_s: tuple[float, ...]
    wall_s: tuple[float, ...]

    __rules__: ClassVar[Rules] = Rules(
        calls_per_batch=Interval(int, 1, MAX_AGENT_CALLS_PER_BATCH),
        client_cpu_s=(NonEmpty(), Each(Interval(float, 0, unit="s"))),
        agent_cpu_s=(NonEmpty(), Each(Interval(float, 0, unit="s"))),
        wall_s=(NonEmpty(), Each(Interval(float, 0, closed="neither", unit="s"))),
    )

    def __post_init__(self) -> None:
        validate(self)
        if not len(self.client_cpu_s) == len(self.agent_cpu_s) == len(self.wall_s):
            raise ValueError(
                "agent_calls: client_cpu_s, agent_cpu_s and wall_s must hold one sample per "
                f"batch each, but got {len(self.client_cpu_s)}, {len(self.agent_cpu_s)} "
                f"and {len(self.wall_s)}"
            )

    def to_dict(self) -> dict[str, Any]:
        return {
            "calls_per_batch": self.calls_per_batch,
            "client_cpu_s": list(self.client_cpu_s),
            "agent_cpu_s": list(self.agent_cpu_s),
            "wall_s": list(self.wall_s),
        }

    @classmethod
    def from_dict(cls, raw: object) -> AgentCallCost:
        """``agent_calls`` of a JSON file, checked field by field."""
        entry = _object(raw, "agent_calls")
        calls = check_count(
            _get(entry, "calls_per_batch", "agent_calls."),
            "agent_calls.calls_per_batch",
            minimum=1,
        )
        figures = {
            name: _figures(entry, name, "agent_calls", "seconds")
            for name in ("client_cpu_s", "agent_cpu_s", "wall_s")
        }
        try:
            return cls(calls_per_batch=calls, **figures)
        except ValueError as exc:
            raise ValueError(str(exc).removeprefix("agent_calls: ")) from None

    def per_call_s(self, figure: str, q: float = 50.0) -> float:
        """``figure`` (``client_cpu_s``, ``agent_cpu_s``, ``wall_s``) per call,
        the ``q``-th percentile over the batches."""
        batches = np.asarray(getattr(self, figure), dtype=float)
        return float(np.percentile(batches, q)) / self.calls_per_batch


#: Most devices one round of :class:`AgentDeviceCost` may make (a round
#: holds them all at once: the bridge's 1 024 ports bound them).
MAX_AGENT_DEVICES_PER_ROUND = 1_000
#: The figures of :class:`AgentDeviceCost`, per phase of a round.
AGENT_DEVICE_FIGURES = ("wall_s", "user_s", "system_s", "children_s")


@dataclass(frozen=True, kw_only=True)
class AgentDeviceCost:
    """What a node agent's refill worker costs a plumbed namespace
    (``netns-veth``, its ADD by the CNI ``plugin``) on this host, alone: a
    round raises the pool's target from 0 to ``devices`` (the worker makes
    them one after another), then sets it back to 0 (it removes them, each a
    CNI DEL and the namespace's removal). One sample per round and phase,
    each the round's total over its devices: ``*_wall_s`` from the config's
    push to the level reached, ``*_user_s`` and ``*_system_s`` the agent
    process's own CPU (its Python, its kernel work; ``/proc/PID/stat``),
    ``*_children_s`` its reaped children's (the plugins')."""

    plugin: str
    devices: int
    make_wall_s: tuple[float, ...]
    make_user_s: tuple[float, ...]
    make_system_s: tuple[float, ...]
    make_children_s: tuple[float, ...]
    remove_wall_s: tuple[float, ...]
    remove_user_s: tuple[float, ...]
    remove_system_s: tuple[float, ...]
    remove_children_s: tuple[float, ...]

    __rules__: ClassVar[Rules] = Rules(
        plugin=NonEmpty(),
        devices=Interval(int, 1, MAX_AGENT_DEVICES_PER_ROUND),
        **{
            f"{phase}_{figure}": (NonEmpty(), Each(Interval(float, 0, unit="s")))
            for phase in ("make", "remove")
            for figure in AGENT_DEVICE_FIGURES
        },
    )

    def __post_init__(self) -> None:
        validate(self)
        lengths = {len(getattr(self, name)) for name in self._names()}
        if len(lengths) != 1:
            raise ValueError(
                "agent_devices: every figure must hold one sample per round, but got "
                + ", ".join(f"{name} {len(getattr(self, name))}" for name in self._names())
            )

    @staticmethod
    def _names() -> tuple[str, ...]:
        return tuple(
            f"{phase}_{figure}" for phase in ("make", "remove") for figure in AGENT_DEVICE_FIGURES
        )

    @property
    def rounds(self) -> int:
        return len(self.make_wall_s)

    def to_dict(self) -> dict[str, Any]:
        return {
            "plugin": self.plugin,
            "devices": self.devices,
            **{name: list(getattr(self, name)) for name in self._names()},
        }

    @classmethod
    def from_dict(cls, raw: object) -> AgentDeviceCost:
        """``agent_devices`` of a JSON file, checked field by field."""
        entry = _object(raw, "agent_devices")
        plugin = _get(entry, "plugin", "agent_devices.")
        if not isinstance(plugin, str) or not plugin:
            raise ValueError(f"agent_devices.plugin: expected a name, but got {_short(plugin)}")
        devices = check_count(
            _get(entry, "devices", "agent_devices."), "agent_devices.devices", minimum=1
        )
        figures = {name: _figures(entry, name, "agent_devices", "seconds") for name in cls._names()}
        try:
            return cls(plugin=plugin, devices=devices, **figures)
        except ValueError as exc:
            raise ValueError(str(exc).removeprefix("agent_devices: ")) from None

    def per_device_s(self, phase: str, figures: tuple[str, ...], q: float = 50.0) -> float:
        """The sum of ``figures`` of ``phase`` (``make`` or ``remove``) per
        device, the ``q``-th percentile over the rounds."""
        rounds = sum(np.asarray(getattr(self, f"{phase}_{f}"), dtype=float) for f in figures)
        return float(np.percentile(rounds, q)) / self.devices


#: Most ports or new links one flood measurement may name (a bridge holds at
#: most 1 024 ports: the kernel's BR_MAX_PORTS).
MAX_BRIDGE_PORTS = 1_024
_CORE_SECONDS = Each(Interval(float, 0, 1e6, unit="core-s"))
_FLOOD_FIGURES = ("loaded_busy_s", "loaded_idle_s", "empty_busy_s", "empty_idle_s")


@dataclass(frozen=True, kw_only=True)
class BridgeFlood:
    """The host CPU a new sandbox link costs per port already on its bridge.

    A bridge floods what a new link sends before anything is learnt (its
    IPv6 duplicate-address probe, router solicitations, MLD reports) to
    every other port, and each port's peer receives it in its namespace:
    work in softirq that grows with the ports, after the start that made it.

    Each round, on a bridge holding ``ports`` sandbox-like ports (each a
    namespace whose ``eth0`` is up, its host end on the bridge) and on an
    empty one, in turn: the host's busy core-seconds (``/proc/stat``) over
    ``window_s`` with nothing made (``*_idle_s``), then over ``window_s``
    from the start of ``new_links`` new sandbox links made on it
    (``*_busy_s``). :meth:`per_port_s` is what one link costs per port.
    """

    ports: int
    new_links: int
    window_s: float
    loaded_busy_s: tuple[float, ...]
    loaded_idle_s: tuple[float, ...]
    empty_busy_s: tuple[float, ...]
    empty_idle_s: tuple[float, ...]

    __rules__: ClassVar[Rules] = Rules(
        ports=Interval(int, 1, MAX_BRIDGE_PORTS),
        new_links=Interval(int, 1, MAX_BRIDGE_PORTS),
        window_s=Interval(float, 0, 3600, closed="right", unit="s"),
        loaded_busy_s=(NonEmpty(), _CORE_SECONDS),
        loaded_idle_s=_CORE_SECONDS,
        empty_busy_s=_CORE_SECONDS,
        empty_idle_s=_CORE_SECONDS,
        checks=_one_entry_per_round(_FLOOD_FIGURES[0], _FLOOD_FIGURES[1:]),
    )

    def __post_init__(self) -> None:
        validate(self)

    @property
    def rounds(self) -> int:
        return len(self.loaded_busy_s)

    @property
    def per_round_s(self) -> tuple[float, ...]:
        """Each round's CPU per new link per port: the loaded bridge's work
        over its idle window less the empty bridge's, over ``new_links ×
        ports`` (negative where noise outweighed it)."""
        return tuple(
            ((lb - li) - (eb - ei)) / (self.new_links * self.ports)
            for lb, li, eb, ei in zip(
                self.loaded_busy_s,
                self.loaded_idle_s,
                self.empty_busy_s,
                self.empty_idle_s,
                strict=True,
            )
        )

    def per_port_s(self, q: float = 50.0) -> float:
        """Percentile ``q`` of :attr:`per_round_s`, core-seconds."""
        return float(np.percentile(np.asarray(self.per_round_s, dtype=float), q))

    def to_dict(self) -> dict[str, Any]:
        return {
            "ports": self.ports,
            "new_links": self.new_links,
            "window_s": self.window_s,
            **{name: list(getattr(self, name)) for name in _FLOOD_FIGURES},
        }

    @classmethod
    def from_dict(cls, raw: object) -> BridgeFlood:
        """``bridge_flood`` of a JSON file, checked field by field."""
        entry = _object(raw, "bridge_flood")
        counts = {
            name: check_count(_get(entry, name, "bridge_flood."), f"bridge_flood.{name}", minimum=1)
            for name in ("ports", "new_links")
        }
        window = _get(entry, "window_s", "bridge_flood.")
        if (
            isinstance(window, bool)
            or not isinstance(window, int | float)
            or not 0 < window <= 3600
        ):
            raise ValueError(
                f"bridge_flood.window_s: expected seconds in (0, 3600], but got {_short(window)}"
            )
        figures = {
            name: _figures(entry, name, "bridge_flood", "core-seconds") for name in _FLOOD_FIGURES
        }
        try:
            return cls(
                ports=counts["ports"],
                new_links=counts["new_links"],
                window_s=float(window),
                loaded_busy_s=figures["loaded_busy_s"],
                loaded_idle_s=figures["loaded_idle_s"],
                empty_busy_s=figures["empty_busy_s"],
                empty_idle_s=figures["empty_idle_s"],
            )
        except ValueError as exc:
            raise ValueError(str(exc).removeprefix("bridge_flood: ")) from None


#: Most requests one round of the hold-stretch measurement may make.
MAX_STRETCH_REQUESTS = 10_000
_STRETCH_FIGURES = ("alone_waits", "alone_wait_s", "shared_waits", "shared_wait_s")
#: A holder whose hold grows less than this when a CPU-bound task shares its
#: core keeps its core while it holds (pinned: 1x); at or above it, the holds
#: stretch as processor sharing stretches them: a hold that is a share ``c``
#: CPU alone lasts ``1 + c`` times as long beside one CPU-bound task (a veth
#: pair's is ~75 % CPU here: 1.75x). 1.5 splits the two for holds at least
#: half CPU.
TIME_SLICED_AT = 1.5


def holders_time_sliced(stretch: float) -> bool:
    """Whether holds that last ``stretch`` times as long with the holder's
    core shared are time-sliced (:data:`TIME_SLICED_AT` and above) rather
    than pinned: the one rule, for :class:`HoldStretch` and the fit."""
    return stretch >= TIME_SLICED_AT


@dataclass(frozen=True, kw_only=True)
class HoldStretch:
    """How a kernel lock's hold stretches when the holder's core is shared.

    Each round, twice in turn (``alone``, then ``shared`` with a CPU-bound
    process on the holder's core, the order alternating by round): a holder
    pinned to one CPU makes ``requests`` veth pairs, each one RTNL hold of a
    few hundred microseconds, while a witness on another CPU takes RTNL for
    short requests as fast as it can. Each of the witness's requests that
    took longer than ``long_wait_s`` while the holder made its pairs waited
    behind one of its holds: ``*_waits`` counts them and ``*_wait_s`` sums
    their wall time. The witness asks again within microseconds of an
    answer, so the sum is the holds' (within 2 % of the holder's own time in
    its requests, measured). :meth:`ratio` is how much longer the same
    holds last with the core shared.

    A kernel built without preemption (``PREEMPT_NONE``) need not keep a
    holder on its core: a holder that sleeps inside its hold (an allocation,
    a flush, ``cond_resched``) waits for the core again when it wakes. The
    ratio says which the model's ``kernel_holders_pinned`` is on this host.
    """

    requests: int
    long_wait_s: float
    alone_waits: tuple[int, ...]
    alone_wait_s: tuple[float, ...]
    shared_waits: tuple[int, ...]
    shared_wait_s: tuple[float, ...]

    __rules__: ClassVar[Rules] = Rules(
        requests=Interval(int, 1, MAX_STRETCH_REQUESTS),
        long_wait_s=Interval(float, 0, 1, closed="right", unit="s"),
        alone_waits=(NonEmpty(), Each(Interval(int, 1))),
        shared_waits=Each(Interval(int, 1)),
        alone_wait_s=Each(Interval(float, 0, 1e6, closed="right", unit="s")),
        shared_wait_s=Each(Interval(float, 0, 1e6, closed="right", unit="s")),
        checks=_one_entry_per_round(_STRETCH_FIGURES[0], _STRETCH_FIGURES[1:]),
    )

    def __post_init__(self) -> None:
        validate(self)

    @property
    def rounds(self) -> int:
        return len(self.alone_waits)

    @property
    def per_round(self) -> tuple[float, ...]:
        """Each round's holds (as the witness waited through them) with the
        core shared over alone: the same ``requests`` both times."""
        return tuple(
            shared / alone
            for alone, shared in zip(self.alone_wait_s, self.shared_wait_s, strict=True)
        )

    def ratio(self, q: float = 50.0) -> float:
        """Percentile ``q`` of :attr:`per_round`."""
        return float(np.percentile(np.asarray(self.per_round, dtype=float), q))

    @property
    def time_sliced(self) -> bool:
        """Whether holders lose their core while they hold (the median round's
        ratio at least :data:`TIME_SLICED_AT`)."""
        return holders_time_sliced(self.ratio())

    def to_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "long_wait_s": self.long_wait_s,
            **{name: list(getattr(self, name)) for name in _STRETCH_FIGURES},
        }

    @classmethod
    def from_dict(cls, raw: object) -> HoldStretch:
        """``hold_stretch`` of a JSON file, checked field by field."""
        entry = _object(raw, "hold_stretch")
        requests = check_count(
            _get(entry, "requests", "hold_stretch."), "hold_stretch.requests", minimum=1
        )
        long_wait = _get(entry, "long_wait_s", "hold_stretch.")
        if (
            isinstance(long_wait, bool)
            or not isinstance(long_wait, int | float)
            or not 0 < long_wait <= 1
        ):
            raise ValueError(
                f"hold_stretch.long_wait_s: expected seconds in (0, 1], but got {_short(long_wait)}"
            )
        counts = {}
        for name in ("alone_waits", "shared_waits"):
            values = _get(entry, name, "hold_stretch.")
            if not isinstance(values, list):
                raise ValueError(f"hold_stretch.{name}: expected a list, but got {_short(values)}")
            counts[name] = tuple(
                check_count(v, f"hold_stretch.{name}[{k}]", minimum=1) for k, v in enumerate(values)
            )
        sums = {
            name: _figures(entry, name, "hold_stretch", "seconds")
            for name in ("alone_wait_s", "shared_wait_s")
        }
        try:
            return cls(
                requests=requests,
                long_wait_s=float(long_wait),
                alone_waits=counts["alone_waits"],
                shared_waits=counts["shared_waits"],
                alone_wait_s=sums["alone_wait_s"],
                shared_wait_s=sums["shared_wait_s"],
            )
        except ValueError as exc:
            raise ValueError(str(exc).removeprefix("hold_stretch: ")) from None


@dataclass(frozen=True, kw_only=True)
class OperationTimes:
    """One measurement of the operations on one host: what :func:`measure_operations` returns
    and ``bootstorm testbed measure-ops --output`` writes."""

    timings: tuple[OperationTiming, ...]
    host: HostFacts
    vm_mode: VmMode
    created_at: datetime
    repeats: int
    warmup: int = 0
    #: The run id its objects were named with (``bst-<run>-…``).
    run: str | None = None
    notes: tuple[str, ...] = ()
    #: The memory of one pooled device, by kind; () where not measured.
    pool_memory: tuple[PoolDeviceMemory, ...] = ()
    #: A node agent's call cost here, where one was measured (the workflow
    #: layer does it beside the testbed's operations: the testbed never
    #: imports the agent); None in a file of before, or without an agent.
    agent_calls: AgentCallCost | None = None
    #: What a node agent's refill worker costs a plumbed namespace it makes
    #: and removes here (measured beside the agent's calls, as root); None
    #: in a file of before, or where it was not measured.
    agent_devices: AgentDeviceCost | None = None
    #: Leases of its network host-local found while ``ipam_add_held`` was
    #: timed; 0 where it was not (a file of before).
    held_leases: int = 0
    #: Ports on the bridge while ``bridge_enslave_held`` was timed; 0 where
    #: it was not (a file of before).
    held_ports: int = 0
    #: The CPU a new link costs per port on its bridge; None where not
    #: measured (a file of before).
    bridge_flood: BridgeFlood | None = None
    #: How RTNL's holds stretch when the holder's core is shared; None where
    #: not measured (a file of before, or a host of one CPU).
    hold_stretch: HoldStretch | None = None

    __rules__: ClassVar[Rules] = Rules(
        held_leases=Depends(
            lambda o: Interval(int, 1 if "ipam_add_held" in o.names else 0),
        ),
        held_ports=Depends(
            lambda o: Interval(int, 1 if "bridge_enslave_held" in o.names else 0, MAX_BRIDGE_PORTS),
        ),
        pool_memory=Satisfies(
            lambda ps: len({p.kind for p in ps}) == len(ps),
            "must measure each kind once",
            shown=lambda ps: f"{_repeated(p.kind for p in ps)} twice",
        ),
        repeats=Interval(int, 1),
        warmup=Interval(int, 0),
        vm_mode=OneOf(VM_MODES),
        created_at=Satisfies(lambda t: t.tzinfo is not None, "must be a time with its UTC offset"),
        timings=(
            Satisfies(
                lambda ts: len({t.name for t in ts}) == len(ts),
                "must time each operation once",
                shown=lambda ts: f"{_repeated(t.name for t in ts)} twice",
            ),
            Depends(
                lambda o: Each(
                    Satisfies(
                        lambda t: len(t.samples_s) == o.repeats,
                        f"must hold repeats={o.repeats} samples",
                        shown=lambda t: f"{t.name}.samples_s with {len(t.samples_s)}",
                    )
                )
            ),
        ),
    )

    def __post_init__(self) -> None:
        validate(self)

    def __getitem__(self, name: str) -> OperationTiming:
        for t in self.timings:
            if t.name == name:
                return t
        raise KeyError(f"{name!r} was not measured; measured: {', '.join(self.names) or 'nothing'}")

    def __contains__(self, name: object) -> bool:
        return name in self.names

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.timings)

    def memory_of(self, kind: str) -> PoolDeviceMemory | None:
        """The memory measured for pooled ``kind`` devices, or None."""
        return next((m for m in self.pool_memory if m.kind == kind), None)

    def to_json(self) -> str:
        data = {
            "schema_version": _SCHEMA_VERSION,
            "created_at": self.created_at.isoformat(),
            "run": self.run,
            "host": self.host.model_dump(mode="json"),
            "vm_mode": self.vm_mode,
            "repeats": self.repeats,
            "warmup": self.warmup,
            "notes": list(self.notes),
            "timings": [{"name": t.name, "samples_s": list(t.samples_s)} for t in self.timings],
            "pool_memory": [
                {
                    "kind": m.kind,
                    "devices": m.devices,
                    "warmup": m.warmup,
                    **{name: list(getattr(m, name)) for name in _MEMINFO_FIELDS},
                }
                for m in self.pool_memory
            ],
            **({"agent_calls": self.agent_calls.to_dict()} if self.agent_calls else {}),
            **({"agent_devices": self.agent_devices.to_dict()} if self.agent_devices else {}),
            **({"held_leases": self.held_leases} if self.held_leases else {}),
            **({"held_ports": self.held_ports} if self.held_ports else {}),
            **({"bridge_flood": self.bridge_flood.to_dict()} if self.bridge_flood else {}),
            **({"hold_stretch": self.hold_stretch.to_dict()} if self.hold_stretch else {}),
        }
        return json.dumps(data, indent=2, allow_nan=False) + "\n"

    @classmethod
    def from_json(cls, text: str) -> OperationTimes:
        """Parse what :meth:`to_json` wrote; a :class:`ValueError` names the bad field."""
        try:
            data = json.loads(text, object_pairs_hook=unique_keys)
        except DuplicateKeyError as exc:  # a hand-edited time given twice: which one fits?
            raise ValueError(f"(top level): {exc}") from None
        except json.JSONDecodeError as exc:
            raise ValueError(f"(top level): not JSON: {exc}") from None
        obj = _object(data, "(top level)")
        version = _get(obj, "schema_version", "")
        if version != _SCHEMA_VERSION:
            raise ValueError(f"schema_version: expected {_SCHEMA_VERSION}, but got {version!r}")
        stamp = _get(obj, "created_at", "")
        try:
            created_at = datetime.fromisoformat(_string(stamp, "created_at"))
        except ValueError:
            raise ValueError(f"created_at: expected an ISO 8601 time, but got {stamp!r}") from None
        run = obj.get("run")
        if run is not None:
            run = _string(run, "run")
        host_obj = _object(_get(obj, "host", ""), "host")
        kernel = _string(_get(host_obj, "kernel", "host."), "host.kernel")
        cores = check_count(_get(host_obj, "cores", "host."), "host.cores", minimum=1)
        memory = check_count(_get(host_obj, "memory_mib", "host."), "host.memory_mib", minimum=1)
        hostname = host_obj.get("hostname")
        if hostname is not None:
            hostname = _string(hostname, "host.hostname")
        # Added beside the trace header's HostFacts (what a profile's
        # fitted_on compares); a file written before has neither.
        extra = {
            key: _string(host_obj[key], f"host.{key}")
            for key in ("cpu_model", "kernel_config")
            if host_obj.get(key) is not None
        }
        notes = obj.get("notes", [])
        if not isinstance(notes, list):
            raise ValueError(f"notes: expected a list of strings, but got {notes!r}")
        raw_timings = _get(obj, "timings", "")
        if not isinstance(raw_timings, list):
            raise ValueError(f"timings: expected a list, but got {_short(raw_timings)}")
        timings = []
        for i, raw in enumerate(raw_timings):
            where = f"timings[{i}]"
            entry = _object(raw, where)
            name = _string(_get(entry, "name", f"{where}."), f"{where}.name")
            if name not in OPERATIONS:
                raise ValueError(
                    f"{where}.name: unknown operation {name!r}; known: {', '.join(OPERATIONS)}"
                )
            samples = _get(entry, "samples_s", f"{where}.")
            if not isinstance(samples, list):
                raise ValueError(f"{where}.samples_s: expected a list, but got {_short(samples)}")
            for j, x in enumerate(samples):
                if isinstance(x, bool) or not isinstance(x, (int, float)) or not x > 0:
                    raise ValueError(
                        f"{where}.samples_s[{j}]: expected a positive duration in seconds, "
                        f"but got {x!r}"
                    )
            timings.append(OperationTiming(name=name, samples_s=tuple(float(x) for x in samples)))
        vm_mode = _get(obj, "vm_mode", "")
        if vm_mode not in VM_MODES:
            raise ValueError(f"vm_mode: expected one of {', '.join(VM_MODES)}, but got {vm_mode!r}")
        return cls(
            timings=tuple(timings),
            host=HostFacts(
                kernel=kernel, cores=cores, memory_mib=memory, hostname=hostname, **extra
            ),
            vm_mode=cast(VmMode, vm_mode),
            created_at=created_at,
            repeats=check_count(_get(obj, "repeats", ""), "repeats", minimum=1),
            warmup=check_count(_get(obj, "warmup", ""), "warmup", minimum=0)
            if "warmup" in obj
            else 0,
            run=run,
            notes=tuple(_string(n, f"notes[{k}]") for k, n in enumerate(notes)),
            # A file written before the memory was measured has none.
            pool_memory=_pool_memory(obj.get("pool_memory", [])),
            agent_calls=AgentCallCost.from_dict(obj["agent_calls"])
            if obj.get("agent_calls") is not None
            else None,
            agent_devices=AgentDeviceCost.from_dict(obj["agent_devices"])
            if obj.get("agent_devices") is not None
            else None,
            held_leases=check_count(obj["held_leases"], "held_leases", minimum=1)
            if obj.get("held_leases") is not None
            else 0,
            held_ports=check_count(obj["held_ports"], "held_ports", minimum=1)
            if obj.get("held_ports") is not None
            else 0,
            bridge_flood=BridgeFlood.from_dict(obj["bridge_flood"])
            if obj.get("bridge_flood") is not None
            else None,
            hold_stretch=HoldStretch.from_dict(obj["hold_stretch"])
            if obj.get("hold_stretch") is not None
            else None,
        )


_MEMINFO_FIELDS = (
    "mem_available_drop_kib",
    "pcp_growth_kib",
    "slab_growth_kib",
    "sunreclaim_growth_kib",
    "percpu_growth_kib",
)


def _pool_memory(raw: object) -> tuple[PoolDeviceMemory, ...]:
    """``pool_memory`` of a JSON file, checked field by field."""
    if not isinstance(raw, list):
        raise ValueError(f"pool_memory: expected a list, but got {_short(raw)}")
    out = []
    kinds: set[str] = set()
    for i, item in enumerate(raw):
        where = f"pool_memory[{i}]"
        entry = _object(item, where)
        kind = _string(_get(entry, "kind", f"{where}."), f"{where}.kind")
        if kind not in POOL_DEVICE_KINDS:
            raise ValueError(
                f"{where}.kind: unknown pool kind {kind!r}; known: {', '.join(POOL_DEVICE_KINDS)}"
            )
        if kind in kinds:
            raise ValueError(f"{where}.kind: {kind!r} measured twice")
        kinds.add(kind)
        devices = check_count(_get(entry, "devices", f"{where}."), f"{where}.devices", minimum=1)
        if devices > MAX_POOL_SIZE:
            raise ValueError(
                f"{where}.devices: expected at most {MAX_POOL_SIZE:,}, but got {devices!r}"
            )
        warmup = check_count(entry.get("warmup", 0), f"{where}.warmup", minimum=0)
        deltas: dict[str, tuple[int, ...]] = {}
        for name in _MEMINFO_FIELDS:
            values = _get(entry, name, f"{where}.")
            if not isinstance(values, list):
                raise ValueError(f"{where}.{name}: expected a list, but got {_short(values)}")
            for j, x in enumerate(values):
                if isinstance(x, bool) or not isinstance(x, int) or abs(x) > MAX_MEMINFO_DELTA_KIB:
                    raise ValueError(
                        f"{where}.{name}[{j}]: expected an integer of KiB within "
                        f"±{MAX_MEMINFO_DELTA_KIB}, but got {_short(x)}"
                    )
            deltas[name] = tuple(values)
        rounds = len(deltas["mem_available_drop_kib"])
        if rounds == 0:
            raise ValueError(f"{where}.mem_available_drop_kib: expected at least one round")
        for name, values in deltas.items():
            if len(values) != rounds:
                raise ValueError(
                    f"{where}.{name}: expected {rounds} rounds (as mem_available_drop_kib), "
                    f"but got {len(values)}"
                )
        out.append(PoolDeviceMemory(kind=kind, devices=devices, warmup=warmup, **deltas))
    return tuple(out)


def _figures(entry: Mapping[str, Any], name: str, where: str, unit: str) -> tuple[float, ...]:
    """``entry[name]``: a non-empty list of numbers in ``unit``, each 0 or
    more (and below a million); a :class:`ValueError` names the one that is not."""
    values = _get(entry, name, f"{where}.")
    if not isinstance(values, list) or not values:
        raise ValueError(f"{where}.{name}: expected a non-empty list, but got {_short(values)}")
    for j, x in enumerate(values):
        if isinstance(x, bool) or not isinstance(x, int | float) or not 0 <= x < 1e6:
            raise ValueError(f"{where}.{name}[{j}]: expected {unit} >= 0, but got {_short(x)}")
    return tuple(float(x) for x in values)


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"a {type(value).__name__}: {text[:40]}…"


def _object(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{where}: expected a JSON object, but got {_short(value)}")
    return value


def _get(obj: Mapping[str, Any], key: str, prefix: str) -> Any:
    if key not in obj:
        raise ValueError(f"{prefix}{key}: missing")
    return obj[key]


def _string(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{where}: expected a string, but got {_short(value)}")
    return value


def _repeated(names: Iterable[str]) -> str:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            return name
        seen.add(name)
    return "none"


def check_count(value: object, where: str, *, minimum: int) -> int:
    """``value`` if it is an integer of at least ``minimum``; else a
    :class:`ValueError` naming ``where`` (a JSON field, or an argument)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{where}: expected an integer of at least {minimum}, but got {value!r}")
    return value
