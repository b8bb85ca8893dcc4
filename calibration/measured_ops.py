"""The testbed catalog's costs that a measurement of single operations determines.

``bootstorm testbed measure-ops`` times each testbed operation alone
(:class:`~bootstorm.traces.operations.OperationTimes`); here its medians and
quartiles become costs of the catalog (``models/testbed.py``), each a
:class:`MeasuredCost` saying how it was derived. A storm fit
(:mod:`.trace_fit`) and a calibration plan (:mod:`.plan`) weigh them as rows
of their own: a what-if along these costs rests on a measurement instead of a
start value.

The memory one pooled device holds (the memory available, dropped over a
batch of them, :class:`~bootstorm.traces.operations.PoolDeviceMemory`) becomes
``testbed.pool_device_mib.<kind>``, in MiB: no storm sees it, so no fit
weighs it; :func:`pool_memory_of` picks it out for the profile.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from ..traces.operations import (
    TIME_SLICED_AT,
    AgentCallCost,
    AgentDeviceCost,
    OperationTimes,
    PoolDeviceMemory,
)

__all__ = [
    "AGENT_CALL_PATHS",
    "AGENT_DEVICE_PATHS",
    "CLIP_S",
    "GRACE_PATH",
    "GROWTH_PATHS",
    "HOLD_STRETCH_PATH",
    "POOL_MEMORY_PATH",
    "RTNL_NETNS_HOLD_DEFAULT_S",
    "MeasuredCost",
    "agent_costs_of",
    "growth_costs_of",
    "pool_memory_of",
    "testbed_costs_from",
]

#: A derived cost never goes below this (a difference of two noisy medians can).
CLIP_S = 1e-6
#: RTNL's hold while ``setup_net`` registers the loopback: not separable from
#: the rest of ``unshare`` by timing it from user space, so the fit's start
#: value (:func:`.trace_fit.testbed_template`) is subtracted.
RTNL_NETNS_HOLD_DEFAULT_S = 5e-4
#: Where the memory of one pooled device goes in the catalog, ``<kind>`` appended.
POOL_MEMORY_PATH = "testbed.pool_device_mib."
#: How RTNL's holds stretch when the holder's core is shared (a ratio, no
#: catalog field: it decides ``testbed.kernel_holders_pinned``).
HOLD_STRETCH_PATH = "testbed.hold_stretch"


@dataclass(frozen=True, kw_only=True)
class MeasuredCost:
    """One cost of the testbed catalog, as measured: ``value`` from medians,
    ``low``/``high`` from the quartiles, all in ``unit`` (``s``; ``MiB`` for
    the memory of a pooled device, ``testbed.pool_device_mib.<kind>``; ``x``,
    a ratio, for :data:`HOLD_STRETCH_PATH`), and ``how`` in one line.

    ``path`` is the catalog's (``testbed.<field>``); ``testbed.vm_boot_total_s``
    is no field but the sum ``vm_boot_cpu_s + vm_boot_s`` a fit must respect."""

    path: str
    value: float
    low: float
    high: float
    how: str
    unit: Literal["s", "MiB", "x"] = "s"


@dataclass(frozen=True)
class _Stat:
    """A median with its quartiles, seconds; differences widen the interval."""

    median_s: float
    q25_s: float
    q75_s: float

    @classmethod
    def of(cls, samples_s: Sequence[float]) -> _Stat:
        a = np.asarray(samples_s, dtype=float)
        return cls(
            float(np.percentile(a, 50.0)),
            float(np.percentile(a, 25.0)),
            float(np.percentile(a, 75.0)),
        )

    def minus(self, other: _Stat) -> _Stat:
        """The two measured apart: low is this one's q25 less the other's q75, high the reverse."""
        return _Stat(
            self.median_s - other.median_s,
            self.q25_s - other.q75_s,
            self.q75_s - other.q25_s,
        )

    def minus_const(self, c_s: float) -> _Stat:
        return _Stat(self.median_s - c_s, self.q25_s - c_s, self.q75_s - c_s)

    def per(self, count: int) -> _Stat:
        """The same spread over ``count`` things: each one's share."""
        return _Stat(self.median_s / count, self.q25_s / count, self.q75_s / count)

    def mean_with(self, other: _Stat) -> _Stat:
        return _Stat(
            (self.median_s + other.median_s) / 2,
            (self.q25_s + other.q25_s) / 2,
            (self.q75_s + other.q75_s) / 2,
        )


def _cost(path: str, stat: _Stat, how: str) -> MeasuredCost:
    clipped = [
        f"{label} (was {x:.3g} s)"
        for label, x in (("value", stat.median_s), ("low", stat.q25_s), ("high", stat.q75_s))
        if x < CLIP_S
    ]
    if clipped:
        how += f"; clipped at {CLIP_S:g} s: {', '.join(clipped)}"
    return MeasuredCost(
        path=path,
        value=max(CLIP_S, stat.median_s),
        low=max(CLIP_S, stat.q25_s),
        high=max(CLIP_S, stat.q75_s),
        how=how,
    )


_DIFF = "medians; low = q25 − other's q75, high = q75 − other's q25"


def testbed_costs_from(times: OperationTimes) -> dict[str, MeasuredCost]:
    """The catalog's costs (``testbed.<field>``) that ``times`` determines, by path.

    Costs whose operations were not measured are left out. Each says in
    ``how`` which operations and what subtraction: the Python + netlink round
    trip (``netlink_noop``) comes off the pyroute2 calls, since the catalog
    charges it separately as ``py_op_cpu_s``. ``testbed.vm_boot_total_s`` is
    not a field but a sum a fit must respect (``vm_boot_cpu_s + vm_boot_s``).
    """
    s = {t.name: _Stat.of(t.samples_s) for t in times.timings}
    out: dict[str, MeasuredCost] = {}

    def add(path: str, needs: tuple[str, ...], make: Callable[[], tuple[_Stat, str]]) -> None:
        if all(n in s for n in needs):
            stat, how = make()
            out[f"testbed.{path}"] = _cost(f"testbed.{path}", stat, how)

    add(
        "py_op_cpu_s",
        ("netlink_noop",),
        lambda: (
            s["netlink_noop"],
            "netlink_noop: a no-change link set (lo up) on the namespace's socket, an "
            "ack-only round trip like the driver's requests; quartiles as low/high",
        ),
    )
    add(
        "netns_create_cpu_s",
        ("netns_create",),
        lambda: (
            s["netns_create"].minus_const(RTNL_NETNS_HOLD_DEFAULT_S),
            f"netns_create (create_netns_here: unshare + bind mount, little Python) − "
            f"rtnl_netns_hold_s {RTNL_NETNS_HOLD_DEFAULT_S:g} s (the fit's start value, "
            "not measured); quartiles less the same",
        ),
    )
    add(
        "rtnl_veth_hold_s",
        ("veth_in_netns", "netlink_noop"),
        lambda: (
            s["veth_in_netns"].minus(s["netlink_noop"]),
            f"veth_in_netns − netlink_noop ({_DIFF})",
        ),
    )
    if "link_up" in s and "addr_add" in s:
        pooled = _Stat.of([*times["link_up"].samples_s, *times["addr_add"].samples_s])
        add(
            "rtnl_small_hold_s",
            ("netlink_noop",),
            lambda: (
                pooled.minus(s["netlink_noop"]),
                f"median of link_up and addr_add pooled − netlink_noop ({_DIFF})",
            ),
        )
    add(
        "rtnl_tap_hold_s",
        ("tap_create",),
        lambda: (
            s["tap_create"],
            "tap_create (the TUNSETIFF ioctl alone, little Python); quartiles as low/high",
        ),
    )
    add(
        "rtnl_tc_hold_s",
        ("tc_qdisc", "tc_filter", "netlink_noop"),
        lambda: (
            s["tc_qdisc"].mean_with(s["tc_filter"]).minus(s["netlink_noop"]),
            f"mean of tc_qdisc and tc_filter − netlink_noop (the catalog's 4 tc ops are "
            f"2 of each; {_DIFF})",
        ),
    )
    add(
        "rcu_grace_s",
        ("move_into_netns", "link_up"),
        lambda: (
            s["move_into_netns"].minus(s["link_up"]),
            f"move_into_netns − link_up (the move is a small change plus synchronize_net; {_DIFF})",
        ),
    )
    add(
        "cgroup_mkdir_hold_s",
        ("cgroup_mkdir",),
        lambda: (s["cgroup_mkdir"], "cgroup_mkdir (one mkdir, Python included); quartiles"),
    )
    add(
        "cgroup_attach_hold_s",
        ("cgroup_attach",),
        lambda: (
            s["cgroup_attach"],
            "cgroup_attach (a pid written to cgroup.procs, Python included); quartiles",
        ),
    )
    add(
        "vm_spawn_cpu_s",
        ("vm_spawn",),
        lambda: (
            s["vm_spawn"],
            f"vm_spawn (VmRunner.start returning: fork/exec, {times.vm_mode}); quartiles",
        ),
    )
    # The CNI runtime: each process timed from the spawning thread, less the
    # thread's own Python work (process_spawn: its CPU time around spawning
    # /bin/true and reading its answer), which the catalog charges apart.
    add(
        "spawn_cpu_s",
        ("process_spawn",),
        lambda: (
            s["process_spawn"],
            "process_spawn (the spawning thread's CPU time around subprocess.run of "
            "/bin/true: its Python work under the GIL); quartiles",
        ),
    )
    add(
        "cni_exec_cpu_s",
        ("cni_exec", "process_spawn"),
        lambda: (
            s["cni_exec"].minus(s["process_spawn"]),
            f"cni_exec (the bridge plugin exec'd for VERSION) − process_spawn ({_DIFF})",
        ),
    )
    add(
        "ipam_hold_s",
        ("ipam_add", "cni_exec"),
        lambda: (
            s["ipam_add"].minus(s["cni_exec"]),
            f"ipam_add (host-local ADD: its exec, the lock, the lease file) − cni_exec ({_DIFF})",
        ),
    )
    add(
        "tc_exec_cpu_s",
        ("tc_exec", "process_spawn"),
        lambda: (
            s["tc_exec"].minus(s["process_spawn"]),
            f"tc_exec (`tc qdisc show dev lo`: a tc process, no change) − process_spawn ({_DIFF})",
        ),
    )
    add(
        "shim_start_cpu_s",
        ("shim_start", "process_spawn"),
        lambda: (
            s["shim_start"].minus(s["process_spawn"]),
            f"shim_start (the shim's interpreter and imports, to its first line read) − "
            f"process_spawn ({_DIFF})",
        ),
    )
    add(
        "vm_boot_total_s",
        ("vm_up", "vm_spawn"),
        lambda: (
            s["vm_up"].minus(s["vm_spawn"]),
            f"vm_up − vm_spawn ({times.vm_mode}; the sum vm_boot_cpu_s + vm_boot_s; {_DIFF})",
        ),
    )
    out.update(_growth_costs(times, s))
    if "cgroup_attach_idle" in s and "cgroup_attach" in s:
        stat = s["cgroup_attach_idle"].minus(s["cgroup_attach"])
        how = (
            f"cgroup_attach_idle (an attach 100 ms after the last) − cgroup_attach (back to "
            f"back): the grace period its rcu_sync waits ({_DIFF})"
        )
        out[GRACE_PATH] = _at_least_zero(
            GRACE_PATH, (stat.median_s, stat.q25_s, stat.q75_s), how, unit="s"
        )
    if (stretch := times.hold_stretch) is not None:
        out[HOLD_STRETCH_PATH] = MeasuredCost(
            path=HOLD_STRETCH_PATH,
            unit="x",
            value=stretch.ratio(50.0),
            low=stretch.ratio(25.0),
            high=stretch.ratio(75.0),
            how=(
                f"{stretch.requests} veth pairs' RTNL holds as a witness on another CPU waited "
                f"through them, with a CPU-bound process on the holder's CPU over alone: median "
                f"of {stretch.rounds} rounds, quartiles as low/high (a ratio; from "
                f"{TIME_SLICED_AT:g} on, holders are time-sliced: kernel_holders_pinned false)"
            ),
        )
    for memory in times.pool_memory:
        path = f"{POOL_MEMORY_PATH}{memory.kind}"
        out[path] = _memory_cost(path, memory)
    if times.agent_calls is not None:
        out.update(_agent_call_costs(times.agent_calls))
    if times.agent_devices is not None:
        out.update(_agent_device_costs(times.agent_devices))
    return out


#: What grows with what earlier sandboxes left (host-local's leases, the
#: bridge's ports), measured with many held against none; no plan storm is
#: large enough to see it, so a fit keeps it as measured.
GROWTH_PATHS = (
    "testbed.ipam_per_lease_s",
    "testbed.enslave_per_port_s",
    "testbed.flood_per_port_cpu_s",
)


def _growth_costs(times: OperationTimes, s: Mapping[str, _Stat]) -> dict[str, MeasuredCost]:
    """host-local's ADD per lease held (``ipam_add_held`` less ``ipam_add``,
    over the leases held), an enslave per port on the bridge
    (``bridge_enslave_held`` less ``bridge_enslave``, over the ports), and
    a new link's flood per port (:class:`~bootstorm.traces.operations.BridgeFlood`);
    never below 0 (a host where it does not grow, or noise, gives none)."""
    out: dict[str, MeasuredCost] = {}
    for path, op, count, what in (
        (GROWTH_PATHS[0], "ipam_add", times.held_leases, "leases of its network held"),
        (GROWTH_PATHS[1], "bridge_enslave", times.held_ports, "sandbox ports on the bridge"),
    ):
        held = f"{op}_held"
        if not count or op not in s or held not in s:
            continue
        stat = s[held].minus(s[op]).per(count)
        unit = "lease" if op == "ipam_add" else "port"
        how = f"{op} with {count} {what} less alone, per {unit} ({_DIFF})"
        out[path] = _at_least_zero(path, (stat.median_s, stat.q25_s, stat.q75_s), how, unit="s")
    if (flood := times.bridge_flood) is not None:
        path = GROWTH_PATHS[2]
        how = (
            f"the host's busy CPU over {flood.window_s:g} s from {flood.new_links} new sandbox "
            f"links on a bridge of {flood.ports} ports less on an empty one (each less its idle "
            f"window), per link per port: median of {flood.rounds} rounds, quartiles as low/high"
        )
        stat3 = (flood.per_port_s(50.0), flood.per_port_s(25.0), flood.per_port_s(75.0))
        out[path] = _at_least_zero(path, stat3, how, unit="s")
    return out


#: The grace period a lone ``cgroup.procs`` write waits (rcu_sync): no plan
#: storm separates it from the attach's own hold, so a fit keeps it as measured.
GRACE_PATH = "testbed.cgroup_attach_grace_s"


def growth_costs_of(measured: Mapping[str, MeasuredCost]) -> dict[str, MeasuredCost]:
    """The costs a fit keeps as measured among ``measured`` costs, by path:
    the growths with what earlier sandboxes left, and a lone attach's grace
    period (:data:`GRACE_PATH`)."""
    return {path: measured[path] for path in (*GROWTH_PATHS, GRACE_PATH) if path in measured}


#: The costs of a call to a node agent (:class:`~bootstorm.traces.operations.AgentCallCost`).
AGENT_CALL_PATHS = ("testbed.agent_call_cpu_s", "testbed.agent_serve_cpu_s")


def _agent_call_costs(calls: AgentCallCost) -> dict[str, MeasuredCost]:
    """Per call to a node agent: the caller's CPU and the agent's, medians
    over the batches, quartiles as low/high."""
    out = {}
    for path, figure, whose in zip(
        AGENT_CALL_PATHS,
        ("client_cpu_s", "agent_cpu_s"),
        ("the caller's thread (the testbed's Python, under its GIL)", "the agent process"),
        strict=True,
    ):
        out[path] = _quartiles(
            path,
            functools.partial(calls.per_call_s, figure),
            f"CPU of {whose} per HTTP call to a node agent on loopback (stage leases and "
            f"pool takes), median of {len(calls.wall_s)} batches of "
            f"{calls.calls_per_batch} calls; a call's round trip "
            f"{calls.per_call_s('wall_s') * 1e3:.3g} ms",
        )
    return out


def _quartiles(path: str, at: Callable[[float], float], how: str) -> MeasuredCost:
    """A cost from a figure at the q-th percentile over its samples: the
    median as the value, the quartiles as low/high."""
    return MeasuredCost(path=path, value=at(50.0), low=at(25.0), high=at(75.0), how=how)


#: A node agent's own CPU per plumbed namespace its worker makes and removes
#: (:class:`~bootstorm.traces.operations.AgentDeviceCost`).
AGENT_DEVICE_PATHS = ("testbed.agent_make_cpu_s", "testbed.agent_remove_cpu_s")


def _agent_device_costs(cost: AgentDeviceCost) -> dict[str, MeasuredCost]:
    """Per device a node agent's refill worker made and removed: the agent
    process's own CPU (user + system), medians over the rounds, quartiles
    as low/high; its plugins' CPU and the wall time in the text."""
    own = ("user_s", "system_s")
    out = {}
    for path, phase, what in zip(
        AGENT_DEVICE_PATHS,
        ("make", "remove"),
        ("made (an ADD)", "removed (a DEL and the namespace's removal)"),
        strict=True,
    ):
        out[path] = _quartiles(
            path,
            functools.partial(cost.per_device_s, phase, own),
            f"CPU of a node agent process (user + system) per plumbed namespace its one "
            f"refill worker {what} with the {cost.plugin} plugin, alone: median of "
            f"{cost.rounds} rounds of {cost.devices}, quartiles as low/high; per device, "
            f"medians: user {cost.per_device_s(phase, ('user_s',)) * 1e3:.3g} ms, its "
            f"plugins {cost.per_device_s(phase, ('children_s',)) * 1e3:.3g} ms, wall "
            f"{cost.per_device_s(phase, ('wall_s',)) * 1e3:.3g} ms",
        )
    return out


def agent_costs_of(measured: Mapping[str, MeasuredCost]) -> dict[str, MeasuredCost]:
    """The costs of a node agent (its calls, its worker's devices) among
    ``measured`` costs, by path."""
    return {
        path: measured[path]
        for path in (*AGENT_CALL_PATHS, *AGENT_DEVICE_PATHS)
        if path in measured
    }


def _memory_cost(path: str, m: PoolDeviceMemory) -> MeasuredCost:
    """The memory of one pooled device: what a batch held per device
    (MemAvailable's drop with the per-CPU free lists'), median over the
    rounds, quartiles as low/high, MiB (never below 0)."""
    stat = (m.median_mib, m.q25_mib, m.q75_mib)
    how = (
        f"drop of MemAvailable plus the per-CPU free lists while {m.devices} {m.kind} "
        f"devices were held, per device: median of {m.rounds} rounds (after {m.warmup} "
        f"discarded), quartiles as low/high; per device, medians: MemAvailable alone "
        f"{m.per_device_mib(figure='mem_available_drop_kib'):.4g} MiB, "
        f"Slab {m.per_device_mib(figure='slab_growth_kib'):.4g} MiB, "
        f"SUnreclaim {m.per_device_mib(figure='sunreclaim_growth_kib'):.4g} MiB, "
        f"Percpu {m.per_device_mib(figure='percpu_growth_kib'):.4g} MiB"
    )
    # Other work on the host frees memory too: a drop below zero is noise, not a device.
    return _at_least_zero(path, stat, how, unit="MiB")


def _at_least_zero(
    path: str, stat: tuple[float, float, float], how: str, *, unit: Literal["s", "MiB"]
) -> MeasuredCost:
    """A measured cost (value, low, high in ``unit``) that cannot be below
    0: what is, is noise, and ``how`` says what was clipped."""
    clipped = [
        f"{label} (was {x:.3g} {unit})"
        for label, x in zip(("value", "low", "high"), stat, strict=True)
        if x < 0.0
    ]
    if clipped:
        how += f"; clipped at 0 {unit}: {', '.join(clipped)}"
    value, low, high = (max(0.0, x) for x in stat)
    return MeasuredCost(path=path, value=value, low=low, high=high, how=how, unit=unit)


def pool_memory_of(measured: Mapping[str, MeasuredCost]) -> dict[str, MeasuredCost]:
    """The memory of one pooled device among ``measured`` costs, by kind."""
    return {
        path[len(POOL_MEMORY_PATH) :]: m
        for path, m in measured.items()
        if path.startswith(POOL_MEMORY_PATH)
    }


# Not a pytest test, despite its name (tests import it).
testbed_costs_from.__test__ = False  # type: ignore[attr-defined]
