"""Each testbed operation timed alone: the costs a storm fit can only guess.

The testbed's catalog (``models/testbed.py``) charges every operation a
Python call under the GIL (``py_op_cpu_s``) and the kernel's work under the
lock it takes (``rtnl_*_hold_s``, ``cgroup_*_hold_s``, ``rcu_grace_s`` ...).
A fit to recorded storms sees only sums of them, under contention, and some
(``rcu_grace_s``: the ``synchronize_net`` of a move into a namespace) no
storm of the default variant ever exercises. Here each operation runs
serially on one sandbox-like set of objects, on an otherwise idle host, with
exactly the calls the driver makes (:mod:`.driver`), so that what-ifs along
these costs rest on a measurement instead of a start value.

Every repetition builds what its operation needs untimed (a veth pair to
move, a cgroup and a process to attach ...), times only the operation on
CLOCK_MONOTONIC (:func:`time.perf_counter_ns`), and tears down untimed. The
first ``warmup`` repetitions of each operation are discarded (first-call
imports, caches). Repetitions follow each other without a pause: in a storm
the sandbox threads keep the CPUs busy, while a call made after the process
slept finds its caches cold (on a nested VM a no-op netlink call then costs
two to three times as much), which would time the wake-up, not the operation.
Before each operation's block the host is given time to settle: the kernel
tears namespaces and links down in kworkers after the call that asked for it
returned, and those take RTNL.

One sandbox namespace ``bst-<run>-0`` serves every link operation (its links
are deleted after each repetition, which is synchronous); only
``netns_create`` makes fresh namespaces, ``bst-<run>-<k>``, kept until its
block ends so that their asynchronous teardown overlaps none of its samples.
The run is registered like a storm, so a killed measurement is swept.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import gc
import itertools
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar, Literal, cast

import numpy as np
from pyroute2 import IPRoute

from ..._params import Depends, Each, Interval, NonEmpty, OneOf, Rules, Satisfies, validate
from ...traces import HostFacts
from .._names import CGROUP_PARENT
from ._cgroup import CgroupError, add_process, cgroup2_root, remove_tree
from ._errors import TestbedError
from ._host import host_facts, settle, signals_deferred
from ._leftovers import (
    WORKDIR_PREFIX,
    RunNames,
    new_run_id,
    register_run,
    sweep_leftovers,
    unregister_run,
)
from ._netns import create_netns_here, entered, remove_netns
from ._tap import TUNSETIFF, ifreq
from ._vm import VmRunner, build_stub, stop, vm_available

__all__ = [
    "CLIP_S",
    "CNI_OPERATIONS",
    "OPERATIONS",
    "RTNL_NETNS_HOLD_DEFAULT_S",
    "VM_MODES",
    "MeasuredCost",
    "OperationTimes",
    "OperationTiming",
    "measure_operations",
    "testbed_costs_from",
]

log = logging.getLogger(__name__)

#: The operations timed, in the order they run.
OPERATIONS = (
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
    "vm_spawn",
    "vm_up",
    # The CNI runtime's processes (``testbed run --runtime cni``).
    "process_spawn",
    "cni_exec",
    "ipam_add",
    "tc_exec",
    "shim_start",
)
_VM_OPERATIONS = frozenset({"vm_spawn", "vm_up"})
#: The CNI runtime's operations: run only where the CNI plugins are installed.
CNI_OPERATIONS = frozenset({"process_spawn", "cni_exec", "ipam_add", "tc_exec", "shim_start"})
#: host-local only writes its lease files for this range: no address is configured.
_OPS_IPAM_SUBNET = "10.254.0.0/24"
_CGROUP_OPERATIONS = frozenset({"cgroup_mkdir", "cgroup_attach"})
VmMode = Literal["qemu-microvm", "process"]
VM_MODES: tuple[VmMode, ...] = ("qemu-microvm", "process")

#: A derived cost never goes below this (a difference of two noisy medians can).
CLIP_S = 1e-6
#: RTNL's hold while ``setup_net`` registers the loopback: not separable from
#: the rest of ``unshare`` by timing it from user space, so the fit's start
#: value (``calibration/trace_fit.py``, ``testbed_template``) is subtracted.
RTNL_NETNS_HOLD_DEFAULT_S = 5e-4

_SCHEMA_VERSION = 1
# As the driver's: every namespace is isolated, so every sandbox uses the same.
_INNER_IF = "eth0"
_TAP_IF = "tap0"
_INNER_ADDR = ("10.88.0.2", 16)
_ETH_P_ALL = 0x0003
_INGRESS = 0xFFFF0000
#: Longest wait for a quiet host before each operation's block.
_SETTLE_MAX_S = 10.0
#: Other work, in cores, above which a block's note says the host was busy.
_BUSY_CORES = 0.25
#: A helper process moved into a cgroup lives at most this long (it is killed sooner).
_HELPER_SLEEP_S = 60


# -- the timings ---------------------------------------------------------------


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

    __rules__: ClassVar[Rules] = Rules(
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
        }
        return json.dumps(data, indent=2, allow_nan=False) + "\n"

    @classmethod
    def from_json(cls, text: str) -> OperationTimes:
        """Parse what :meth:`to_json` wrote; a :class:`ValueError` names the bad field."""
        try:
            data = json.loads(text)
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
        cores = _integer(_get(host_obj, "cores", "host."), "host.cores", minimum=1)
        memory = _integer(_get(host_obj, "memory_mib", "host."), "host.memory_mib", minimum=1)
        hostname = host_obj.get("hostname")
        if hostname is not None:
            hostname = _string(hostname, "host.hostname")
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
            host=HostFacts(kernel=kernel, cores=cores, memory_mib=memory, hostname=hostname),
            vm_mode=cast(VmMode, vm_mode),
            created_at=created_at,
            repeats=_integer(_get(obj, "repeats", ""), "repeats", minimum=1),
            warmup=_integer(_get(obj, "warmup", ""), "warmup", minimum=0) if "warmup" in obj else 0,
            run=run,
            notes=tuple(_string(n, f"notes[{k}]") for k, n in enumerate(notes)),
        )


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


def _integer(value: object, where: str, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{where}: expected an integer of at least {minimum}, but got {value!r}")
    return value


# -- the costs they give ---------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class MeasuredCost:
    """One cost of the testbed catalog, as measured: ``value`` from medians,
    ``low``/``high`` from the quartiles (all seconds), and ``how`` in one line."""

    path: str
    value: float
    low: float
    high: float
    how: str


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
    return out


# Not a pytest test, despite its name (tests import it).
testbed_costs_from.__test__ = False  # type: ignore[attr-defined]


# -- the measurement ------------------------------------------------------------


@dataclass
class _Bench:
    """One sandbox-like set of objects, the operations timed on it, and their cleanup."""

    run: str
    want_vm: bool
    names: RunNames = field(init=False)
    workdir: Path = field(init=False)
    runner: VmRunner | None = None
    vm_mode: VmMode = "process"
    notes: list[str] = field(default_factory=list)
    ns_name: str = ""
    ns_fd: int | None = None
    host: Any = None  # pyroute2 IPRoute on the host, as a sandbox's own socket
    ns: Any = None  # and one opened inside the sandbox namespace
    lo_index: int = 1
    cgroup_run: Path | None = None
    made_netns: list[str] = field(default_factory=list)
    fds: set[int] = field(default_factory=set)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    #: Where the CNI plugins are (the CNI runtime's operations), or None.
    cni_bin_dir: Path | None = None
    _seq: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def __post_init__(self) -> None:
        self.names = RunNames(self.run)
        self.ns_name = self.names.netns(0)
        self.workdir = Path(tempfile.mkdtemp(prefix=f"{WORKDIR_PREFIX}{self.run}-"))
        ok, why = vm_available()
        if self.want_vm and ok:
            self.vm_mode = "qemu-microvm"
        else:
            reason = "--no-vm" if not self.want_vm else why
            self.vm_mode = "process"
            self.notes.append(
                f"vm_spawn/vm_up ran the StartVM fallback ({reason}): a process spawned into "
                "the namespace (nsenter --net) prints the marker; no VMM, no guest"
            )

    # -- preparation ---------------------------------------------------------

    def prepare(self, ops: Sequence[str]) -> None:
        if _CGROUP_OPERATIONS & set(ops):
            try:
                root = cgroup2_root()
            except CgroupError as exc:
                raise TestbedError(str(exc)) from None
            self.cgroup_run = root / CGROUP_PARENT / self.run
            os.makedirs(self.cgroup_run, exist_ok=False)
        if _VM_OPERATIONS & set(ops):
            if self.vm_mode == "qemu-microvm":
                self.runner = VmRunner(mode="qemu-microvm", stub=build_stub(self.workdir))
            else:
                self.runner = VmRunner(mode="process")
        self.ns_fd = create_netns_here(self.ns_name)
        self.host = IPRoute()
        with entered(self.ns_fd):  # a CNI plugin's socket, bound to the sandbox's namespace
            self.ns = IPRoute()
        (self.lo_index,) = self.ns.link_lookup(ifname="lo")
        self.ns.link("set", index=self.lo_index, state="up")  # netlink_noop's no-change

    # -- building blocks (untimed) -------------------------------------------

    def _veth_in_ns(self) -> int:
        """A veth pair with its peer ``eth0`` in the namespace; the peer's index there."""
        self.host.link(
            "add",
            ifname=self.names.host_link(0),
            kind="veth",
            peer={"ifname": _INNER_IF, "net_ns_fd": self.ns_fd},
        )
        (idx,) = self.ns.link_lookup(ifname=_INNER_IF)
        return int(idx)

    def _host_up(self) -> None:
        (hidx,) = self.host.link_lookup(ifname=self.names.host_link(0))
        self.host.link("set", index=hidx, state="up")

    def _del_host_link(self, name: str | None = None) -> None:
        """Delete the pair (its peer goes with it); synchronous, untimed."""
        for idx in self.host.link_lookup(ifname=name or self.names.host_link(0)):
            self.host.link("del", index=idx)

    def _open_tap(self) -> int:
        """A tap ``tap0`` in the namespace on a new fd (gone when the fd closes)."""
        assert self.ns_fd is not None
        with entered(self.ns_fd):
            fd = os.open("/dev/net/tun", os.O_RDWR | os.O_CLOEXEC)
            self.fds.add(fd)
            fcntl.ioctl(fd, TUNSETIFF, ifreq(_TAP_IF))
        return fd

    def _close(self, fd: int) -> None:
        self.fds.discard(fd)
        os.close(fd)

    def _vm_tap(self) -> int | None:
        """The VM's NIC as the driver gives it: a tap made in the namespace, up."""
        assert self.runner is not None
        if self.runner.mode != "qemu-microvm":
            return None
        fd = self._open_tap()
        (tap,) = self.ns.link_lookup(ifname=_TAP_IF)
        self.ns.link("set", index=tap, state="up")
        return fd

    # -- the operations: each returns the timed nanoseconds --------------------

    def netlink_noop(self) -> int:
        """A no-change ``link set lo up``: Python, pyroute2 and one netlink round
        trip answered by an ack, as the driver's requests are. Not a
        ``link_lookup``: its answer is a whole link message, whose parsing costs
        about as much again here, and the operations this is subtracted from get acks."""
        t0 = time.perf_counter_ns()
        self.ns.link("set", index=self.lo_index, state="up")  # already up: an ack, no change
        return time.perf_counter_ns() - t0

    def netns_create(self) -> int:
        name = self.names.netns(next(self._seq))
        self.made_netns.append(name)  # removed after the block (see after_block)
        t0 = time.perf_counter_ns()
        fd = create_netns_here(name)
        dt = time.perf_counter_ns() - t0
        os.close(fd)
        return dt

    def veth_in_netns(self) -> int:
        t0 = time.perf_counter_ns()
        self.host.link(
            "add",
            ifname=self.names.host_link(0),
            kind="veth",
            peer={"ifname": _INNER_IF, "net_ns_fd": self.ns_fd},
        )
        dt = time.perf_counter_ns() - t0
        self._del_host_link()
        return dt

    def veth_on_host(self) -> int:
        t0 = time.perf_counter_ns()
        self.host.link(
            "add",
            ifname=self.names.host_link(0),
            kind="veth",
            peer={"ifname": self.names.moved_peer(0)},
        )
        dt = time.perf_counter_ns() - t0
        self._del_host_link()
        return dt

    def move_into_netns(self) -> int:
        moved = self.names.moved_peer(0)
        self.host.link("add", ifname=self.names.host_link(0), kind="veth", peer={"ifname": moved})
        (idx,) = self.host.link_lookup(ifname=moved)
        t0 = time.perf_counter_ns()  # as the driver's _move_in, its lookup untimed
        self.host.link("set", index=idx, net_ns_fd=self.ns_fd, ifname=_INNER_IF)
        dt = time.perf_counter_ns() - t0
        self._del_host_link()
        return dt

    def link_up(self) -> int:
        iidx = self._veth_in_ns()
        self._host_up()  # the driver brings the host end up first
        t0 = time.perf_counter_ns()
        self.ns.link("set", index=iidx, state="up")
        dt = time.perf_counter_ns() - t0
        self._del_host_link()
        return dt

    def addr_add(self) -> int:
        iidx = self._veth_in_ns()
        self._host_up()
        self.ns.link("set", index=iidx, state="up")
        t0 = time.perf_counter_ns()
        self.ns.addr("add", index=iidx, address=_INNER_ADDR[0], prefixlen=_INNER_ADDR[1])
        dt = time.perf_counter_ns() - t0
        self._del_host_link()
        return dt

    def tap_create(self) -> int:
        assert self.ns_fd is not None
        with entered(self.ns_fd):  # TUNSETIFF makes the tap in the caller's namespace
            fd = os.open("/dev/net/tun", os.O_RDWR | os.O_CLOEXEC)
            self.fds.add(fd)
            t0 = time.perf_counter_ns()
            fcntl.ioctl(fd, TUNSETIFF, ifreq(_TAP_IF))
            dt = time.perf_counter_ns() - t0
        self._close(fd)  # not persistent: the tap goes with its last fd
        return dt

    def tc_qdisc(self) -> int:
        veth = self._veth_in_ns()
        t0 = time.perf_counter_ns()
        self.ns.tc("add", "ingress", veth, _INGRESS)
        dt = time.perf_counter_ns() - t0
        self._del_host_link()
        return dt

    def tc_filter(self) -> int:
        veth = self._veth_in_ns()
        fd = self._open_tap()
        (tap,) = self.ns.link_lookup(ifname=_TAP_IF)
        self.ns.link("set", index=tap, state="up")
        self.ns.tc("add", "ingress", veth, _INGRESS)
        t0 = time.perf_counter_ns()
        self.ns.tc(
            "add-filter",
            "u32",
            veth,
            parent=_INGRESS,
            prio=49152,
            protocol=_ETH_P_ALL,
            target=0x1,
            keys=["0x0/0x0+0"],
            action={"kind": "mirred", "direction": "egress", "action": "redirect", "ifindex": tap},
        )
        dt = time.perf_counter_ns() - t0
        self._close(fd)
        self._del_host_link()
        return dt

    def _new_cgroup_path(self) -> Path:
        assert self.cgroup_run is not None
        return self.cgroup_run / f"op{next(self._seq)}"

    def cgroup_mkdir(self) -> int:
        path = self._new_cgroup_path()
        t0 = time.perf_counter_ns()
        path.mkdir()
        dt = time.perf_counter_ns() - t0
        path.rmdir()
        return dt

    def cgroup_attach(self) -> int:
        path = self._new_cgroup_path()
        path.mkdir()
        # A fresh process, as the driver moves a just-spawned VMM.
        proc = subprocess.Popen(
            ["sleep", str(_HELPER_SLEEP_S)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.procs.append(proc)
        t0 = time.perf_counter_ns()
        moved = add_process(path, proc.pid)
        dt = time.perf_counter_ns() - t0
        if not moved:
            raise TestbedError(f"cgroup_attach: helper process {proc.pid} exited before its move")
        proc.kill()
        proc.wait()
        self.procs.remove(proc)
        remove_tree(path)  # retries the moment the exited task still holds it
        return dt

    def vm_spawn(self) -> int:
        assert self.runner is not None
        fd = self._vm_tap()
        name = self.names.vm(0)
        t0 = time.perf_counter_ns()
        proc = self.runner.start(name=name, netns=self.ns_name, tap_fd=fd)
        dt = time.perf_counter_ns() - t0
        self.procs.append(proc)
        self.runner.wait_up(proc, name=name)  # let it boot and end, untimed
        self.procs.remove(proc)
        if fd is not None:
            self._close(fd)
        return dt

    def vm_up(self) -> int:
        assert self.runner is not None
        fd = self._vm_tap()
        name = self.names.vm(0)
        t0 = time.perf_counter_ns()
        proc = self.runner.start(name=name, netns=self.ns_name, tap_fd=fd)
        self.procs.append(proc)
        self.runner.wait_up(proc, name=name)  # the marker printed, the VM exited
        dt = time.perf_counter_ns() - t0
        self.procs.remove(proc)
        if fd is not None:
            self._close(fd)
        return dt

    # -- the CNI runtime's processes ----------------------------------------

    def _run_timed(
        self, argv: list[str], *, stdin: bytes = b"", env: dict[str, str] | None = None
    ) -> int:
        t0 = time.perf_counter_ns()
        done = subprocess.run(argv, input=stdin, env=env, capture_output=True, check=False)
        dt = time.perf_counter_ns() - t0
        if done.returncode != 0 and argv[0] != sys.executable:
            raise TestbedError(
                f"{os.path.basename(argv[0])}: exit {done.returncode}: "
                f"{(done.stdout or done.stderr).decode(errors='replace').strip()[:200]}"
            )
        return dt

    def process_spawn(self) -> int:
        t0 = time.thread_time_ns()
        subprocess.run(["true"], capture_output=True, check=True)
        return max(time.thread_time_ns() - t0, 1000)

    def _cni_env(self, command: str, container: str) -> dict[str, str]:
        assert self.cni_bin_dir is not None
        return {
            "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
            "CNI_COMMAND": command,
            "CNI_CONTAINERID": container,
            "CNI_NETNS": f"/run/netns/{self.ns_name}",
            "CNI_IFNAME": _INNER_IF,
            "CNI_PATH": str(self.cni_bin_dir),
        }

    def cni_exec(self) -> int:
        assert self.cni_bin_dir is not None
        return self._run_timed(
            [str(self.cni_bin_dir / "bridge")],
            stdin=b'{"cniVersion": "1.0.0"}',
            env=self._cni_env("VERSION", "ops"),
        )

    def ipam_add(self) -> int:
        assert self.cni_bin_dir is not None
        conf = json.dumps(
            {
                "cniVersion": "1.0.0",
                "name": f"bst-{self.run}-ops",
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": _OPS_IPAM_SUBNET}]],
                    "dataDir": str(self.workdir / "ipam"),
                },
            }
        ).encode()
        container = f"op{next(self._seq)}"
        plugin = str(self.cni_bin_dir / "host-local")
        dt = self._run_timed([plugin], stdin=conf, env=self._cni_env("ADD", container))
        self._run_timed([plugin], stdin=conf, env=self._cni_env("DEL", container))
        return dt

    def tc_exec(self) -> int:
        return self._run_timed(["tc", "qdisc", "show", "dev", "lo"])

    def shim_start(self) -> int:
        # An empty job: the shim starts, reads it, reports the error and exits.
        from ._cni_stages import SHIM_FLAGS
        from ._leftovers import SHIM_SCRIPT

        return self._run_timed([sys.executable, *SHIM_FLAGS, str(SHIM_SCRIPT)], stdin=b"\n")

    def after_block(self, op: str) -> None:
        """Remove what a block kept until its end (``netns_create``'s namespaces)."""
        if op == "netns_create":
            for name in self.made_netns:
                remove_netns(name)
            self.made_netns.clear()

    # -- cleanup -------------------------------------------------------------

    def cleanup(self) -> None:
        """Remove everything made, each step whatever the previous one did."""

        def step(what: str, body: Callable[[], object]) -> None:
            try:
                body()
            except Exception as exc:
                log.warning("measure-ops cleanup: %s: %s: %s", what, type(exc).__name__, exc)

        for proc in list(self.procs):
            step(f"stop process {proc.pid}", functools.partial(stop, proc))
        self.procs.clear()
        for fd in list(self.fds):
            step(f"close fd {fd}", functools.partial(os.close, fd))
        self.fds.clear()
        for sock in (self.ns, self.host):
            if sock is not None:
                step("close netlink socket", sock.close)
        self.ns = self.host = None

        def delete_links() -> None:
            with IPRoute() as ipr:
                for name in (self.names.host_link(0), self.names.moved_peer(0)):
                    for idx in ipr.link_lookup(ifname=name):
                        ipr.link("del", index=idx)

        step("delete links", delete_links)
        if self.ns_fd is not None:
            step("close namespace fd", functools.partial(os.close, self.ns_fd))
            self.ns_fd = None
        for name in [self.ns_name, *self.made_netns]:
            step(f"remove namespace {name}", functools.partial(remove_netns, name))
        self.made_netns.clear()
        if self.cgroup_run is not None:
            run_dir = self.cgroup_run
            step(f"remove cgroup {run_dir}", lambda: remove_tree(run_dir))
            with contextlib.suppress(OSError):
                run_dir.parent.rmdir()  # our parent, if no other run uses it
        shutil.rmtree(self.workdir, ignore_errors=True)


def _checked_ops(ops: Sequence[str] | None) -> tuple[str, ...]:
    if ops is None:
        return OPERATIONS
    unknown = [o for o in ops if o not in OPERATIONS]
    if unknown:
        raise ValueError(f"ops: unknown operation {unknown[0]!r}; known: {', '.join(OPERATIONS)}")
    if not ops:
        raise ValueError("ops: expected at least one operation, but got none")
    chosen = set(ops)
    return tuple(o for o in OPERATIONS if o in chosen)  # always in OPERATIONS' order


def measure_operations(
    *,
    repeats: int = 30,
    warmup: int = 3,
    vm: bool = True,
    ops: tuple[str, ...] | None = None,
    cni_bin_dir: Path | None = None,
) -> OperationTimes:
    """Time each operation alone, ``repeats`` times after ``warmup`` discarded ones.

    Needs root (:class:`TestbedError` otherwise); bad arguments are a
    :class:`ValueError` naming them. ``vm=False`` (or no QEMU/KVM here) times
    ``vm_spawn``/``vm_up`` on the StartVM fallback process, and the result's
    ``vm_mode`` says so. Everything made is removed before returning, also on
    error or interrupt (signals are held off during the cleanup).
    """
    _integer(repeats, "repeats", minimum=1)
    _integer(warmup, "warmup", minimum=0)
    chosen = _checked_ops(ops)
    if os.geteuid() != 0:
        raise TestbedError("measure-ops needs root (network namespaces, links, cgroups)")
    plugins: Path | None = None
    skipped_cni = ""
    if CNI_OPERATIONS & set(chosen):
        from .cni import CniSetupError, discover_bin_dir

        try:
            plugins = discover_bin_dir(cni_bin_dir, ("bridge", "host-local"))
        except CniSetupError as exc:
            if ops is not None or cni_bin_dir is not None:
                raise  # asked for by name: say why it cannot run
            # By default the CNI runtime's operations are timed where it can run.
            chosen = tuple(o for o in chosen if o not in CNI_OPERATIONS)
            skipped_cni = f"the CNI runtime's operations were not timed: {exc}"
    run = new_run_id()
    register_run(run)
    bench: _Bench | None = None
    was_enabled = gc.isenabled()
    try:
        sweep_leftovers(keep={run})
        bench = _Bench(run=run, want_vm=vm, cni_bin_dir=plugins)
        if skipped_cni:
            bench.notes.append(skipped_cni)
        bench.prepare(chosen)
        timings = []
        busiest = (0.0, "")
        for op in chosen:
            busy = settle(_SETTLE_MAX_S)
            busiest = max(busiest, (busy, op))
            if busy > _BUSY_CORES:
                bench.notes.append(f"{op}: host not quiet before the block ({busy:.2f} cores busy)")
            body: Callable[[], int] = getattr(bench, op)
            samples: list[float] = []
            gc.collect()
            gc.disable()  # a collection inside a timed call is not the operation's cost
            try:
                for i in range(warmup + repeats):
                    elapsed_ns = body()
                    if i >= warmup:
                        samples.append(elapsed_ns / 1e9)
            finally:
                if was_enabled:
                    gc.enable()
            bench.after_block(op)
            log.info("%s: median %.3f ms", op, float(np.median(samples)) * 1e3)
            timings.append(OperationTiming(name=op, samples_s=tuple(samples)))
        bench.notes.append(
            f"other work before each block: at most {busiest[0]:.2f} of {os.cpu_count()} "
            f"cores busy (before {busiest[1]})"
        )
        return OperationTimes(
            timings=tuple(timings),
            host=host_facts(),
            vm_mode=bench.vm_mode,
            created_at=datetime.now(UTC),
            repeats=repeats,
            warmup=warmup,
            run=run,
            notes=tuple(bench.notes),
        )
    finally:
        if was_enabled:
            gc.enable()
        with signals_deferred():
            try:
                if bench is not None:
                    bench.cleanup()
            finally:
                unregister_run(run)
