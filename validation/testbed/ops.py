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

After the operations, the bench measures the kernel memory one pooled
device of each kind holds (:func:`pool_memory_rounds`): the devices the node
agent pools, made as its ``NetlinkDevices.create`` makes them, in batches of
``pool_devices``, the memory available (MemAvailable and the pages on the
per-CPU free lists) read before and after each batch, rounds interleaved
across kinds. The batches are named as the run's pools
(``bst-<run>-p<k>``, ``bst<run>t<k>`` ...), so a sweep finds them too.

What the bench returns is a recorded measurement,
:class:`~bootstorm.traces.operations.OperationTimes` (the bottom layer, with
its JSON form); the catalog's costs it determines are the calibration's
business (:func:`bootstorm.calibration.measured_ops.testbed_costs_from`).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import gc
import ipaddress
import itertools
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from pyroute2 import IPRoute

from ...traces._config import MAX_POOL_SIZE
from ...traces.host import current_host
from ...traces.operations import (
    CNI_OPERATIONS,
    MAX_BRIDGE_PORTS,
    OPERATIONS,
    POOL_DEVICE_KINDS,
    BridgeFlood,
    HoldStretch,
    OperationTimes,
    OperationTiming,
    PoolDeviceMemory,
    VmMode,
    check_count,
)
from .._names import CGROUP_PARENT
from .._netns import create_netns_here, entered, remove_netns
from ._cgroup import CgroupError, add_process, cgroup2_root, remove_tree
from ._errors import TestbedError
from ._host import _cpu_ticks, settle, signals_deferred
from ._leftovers import (
    WORKDIR_PREFIX,
    RunNames,
    new_run_id,
    register_run,
    sweep_leftovers,
    unregister_run,
)
from ._tap import TUNSETIFF, ifreq
from ._vm import VmRunner, build_stub, stop, vm_available
from .hold_stretch import STRETCH_ROUNDS, measure_hold_stretch

__all__ = [
    "FLOOD_NEW_LINKS",
    "FLOOD_ROUNDS",
    "FLOOD_WINDOW_S",
    "HELD_LEASES",
    "HELD_PORTS",
    "POOL_MEMORY_DEVICES",
    "POOL_MEMORY_ROUNDS",
    "POOL_MEMORY_SETTLE_S",
    "POOL_MEMORY_WARMUP",
    "PoolDeviceMaker",
    "measure_operations",
    "measure_pool_memory",
    "pool_memory_rounds",
    "read_memory_kib",
]

log = logging.getLogger(__name__)

_VM_OPERATIONS = frozenset({"vm_spawn", "vm_up"})
#: host-local only writes its lease files for this range: no address is configured.
_OPS_IPAM_SUBNET = "10.254.0.0/24"
#: The addresses of the held leases (``ipam_add_held``): other sandboxes' of
#: the same network, outside the range the bench's ADDs take theirs from.
_HELD_RANGE = "10.253.0.0/16"
_CGROUP_OPERATIONS = frozenset({"cgroup_mkdir", "cgroup_attach", "cgroup_attach_idle"})
#: How long ``cgroup_attach_idle`` waits before its attach: many grace
#: periods (a few ms at HZ=250), so the rcu_sync of the last one is idle.
CGROUP_IDLE_S = 0.1
# As the driver's: every namespace is isolated, so every sandbox uses the same.
_INNER_IF = "eth0"
_TAP_IF = "tap0"
_INNER_ADDR = ("10.88.0.2", 16)
_ETH_P_ALL = 0x0003
_INGRESS = 0xFFFF0000
#: Longest wait for a quiet host before each operation's block, by default
#: (``measure_operations(settle_max_s=...)``, ``measure-ops --settle-s``). On
#: a host that never gets quiet (the test suite's other worker) each of ~30
#: blocks waits this long: pass less there.
SETTLE_MAX_S = 10.0
#: Longest wait for a quiet host one may ask for (an hour per block is
#: already a day of measuring).
MAX_SETTLE_S = 3600.0
#: Other work, in cores, above which a block's note says the host was busy.
_BUSY_CORES = 0.25
#: A helper process moved into a cgroup lives at most this long (it is killed sooner).
_HELPER_SLEEP_S = 60

#: Leases of its network host-local finds while ``ipam_add_held`` is timed:
#: what the sandbox of that index in a storm finds left by the ones before it
#: (a lease each, until its DEL at the teardown). host-local's disk store
#: reads every lease file of the network on each ADD (``GetByID``); 400 moved
#: its ADD here from 2.1 to 5.0 ms, far above its spread (docs/research-log.md,
#: 2026-11-29).
HELD_LEASES = 400
#: Most held leases one may ask for: a /16's addresses, the largest range a
#: testbed network hands out.
MAX_HELD_LEASES = 65_534
#: Ports on the bridge while ``bridge_enslave_held`` is timed and the flood
#: measured: what the sandbox of that index in a testbed storm finds on the
#: run's bridge (every sandbox's port stays until the teardown). 400 moved
#: an enslave from 0.62 to 1.08 ms and a new link's flood to ~12 µs of CPU
#: per port, well above their spread (docs/research-log.md, 2026-11-29).
HELD_PORTS = 400
#: New sandbox links made per round of the flood measurement: 30 × 400 ports
#: × ~12 µs is ~0.15 core-s a round, against an idle window's 0.03-0.08.
FLOOD_NEW_LINKS = 30
#: How long each window of the flood measurement lasts: a new link's
#: duplicate-address probe (after ~1 s), its MLD reports and its first two
#: router solicitations (at once and 4 s later) fall inside; the later ones
#: (12, 28, 60 s ..., backing off) do not.
FLOOD_WINDOW_S = 8.0
#: Rounds of the flood measurement (each: both bridges, in turn).
FLOOD_ROUNDS = 3
#: Pooled devices of one kind per batch. A netns holds ~0.18 MiB (paper-000's
#: ``costs.pool_device_mib.netns``: MemAvailable over 200 ``ip netns add`` on
#: this project's machine), a tap ~0.04 MiB (docs/research-log.md, 2026-11-28),
#: so a batch moves the memory available by 7-49 MiB, well above how far the
#: rounds of one kind spread there (under 1.5 MiB a batch).
POOL_MEMORY_DEVICES = 200
#: Rounds per kind, interleaved across kinds; the median per device is the value.
POOL_MEMORY_ROUNDS = 5
#: Rounds made first and discarded: the first veth pair or tap may load its
#: module, and every kind grows its slab caches and this process's heap once.
POOL_MEMORY_WARMUP = 1
#: Pause before each /proc/meminfo read, after the host is quiet: the kernel
#: folds the per-CPU page counters into the global ones every second
#: (vmstat_update, ``vm.stat_interval`` = 1 s by default), and RCU frees
#: what a removal queued.
POOL_MEMORY_SETTLE_S = 1.0
#: The figures read around each batch, in KiB: /proc/meminfo's, and
#: ``PcpFree``, the pages on the per-CPU free lists (/proc/zoneinfo).
_MEMINFO_FIGURES = ("MemAvailable", "PcpFree", "Slab", "SUnreclaim", "Percpu")
_PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024


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
    #: Leases held now in the held IPAM directory (:meth:`hold_leases`).
    held: int = 0
    #: Ports held now on the held bridge (:meth:`hold_ports`), and the
    #: namespaces that hold them or a flood round's new links.
    held_ports: int = 0
    port_netns: list[str] = field(default_factory=list)
    bridges: list[str] = field(default_factory=list)
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

    def _bridge_index(self, name: str) -> int:
        """The bridge ``name``, made (and up) the first time it is asked for."""
        found = self.host.link_lookup(ifname=name)
        if not found:
            self.bridges.append(name)  # removed at cleanup, also if made in part
            self.host.link("add", ifname=name, kind="bridge")
            found = self.host.link_lookup(ifname=name)
            self.host.link("set", index=found[0], state="up")
        return int(found[0])

    def _enslave(self, bridge: str) -> int:
        """A host veth pair's end set master of ``bridge`` (the bridge plugin's
        ``enslave``), timed; the pair made and deleted untimed."""
        index = self._bridge_index(bridge)
        self.host.link(
            "add",
            ifname=self.names.host_link(0),
            kind="veth",
            peer={"ifname": self.names.moved_peer(0)},
        )
        (end,) = self.host.link_lookup(ifname=self.names.host_link(0))
        t0 = time.perf_counter_ns()
        self.host.link("set", index=end, master=index)
        dt = time.perf_counter_ns() - t0
        self._del_host_link()
        return dt

    def bridge_enslave(self) -> int:
        return self._enslave(self.names.bridge())  # the bench's own bridge: no other port

    def sandbox_port(self, netns: str, link: str, bridge: str, *, quiet: bool) -> None:
        """A sandbox's network as the bridge plugin leaves it (untimed): a
        namespace whose ``eth0`` is up, its veth peer ``link`` on the host,
        up and on ``bridge``. ``quiet``: the port sends no router
        solicitations of its own (a held port, so that its own backed-off
        solicitations do not land in a measuring window)."""
        index = self._bridge_index(bridge)
        fd = create_netns_here(netns)
        self.port_netns.append(netns)  # removed at cleanup, also if made in part
        try:
            self.host.link(
                "add", ifname=link, kind="veth", peer={"ifname": _INNER_IF, "net_ns_fd": fd}
            )
            (end,) = self.host.link_lookup(ifname=link)
            self.host.link("set", index=end, master=index, state="up")
            with entered(fd):
                if quiet:
                    Path(f"/proc/sys/net/ipv6/conf/{_INNER_IF}/router_solicitations").write_text(
                        "0"
                    )
                with IPRoute() as inside:
                    (eth,) = inside.link_lookup(ifname=_INNER_IF)
                    inside.link("set", index=eth, state="up")
        finally:
            os.close(fd)

    def remove_ports(self, names: Sequence[str]) -> None:
        """Remove these namespaces (their ``eth0`` and so the pair go with them)."""
        for name in names:
            remove_netns(name)
            self.port_netns.remove(name)

    def hold_ports(self, count: int) -> None:
        """Put ``count`` quiet sandbox ports on the held bridge (untimed)."""
        for k in range(count):
            netns, link = self.names.held_port(k)
            self.sandbox_port(netns, link, self.names.held_bridge(), quiet=True)
        self.held_ports = count

    def bridge_enslave_held(self) -> int:
        return self._enslave(self.names.held_bridge())

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
        return self._cgroup_attach(idle_s=0.0)

    def cgroup_attach_idle(self) -> int:
        """An attach after :data:`CGROUP_IDLE_S` with no other: the write side
        of ``cgroup_threadgroup_rwsem`` finds its rcu_sync idle and waits a
        grace period (inside cgroup_mutex); back to back it does not."""
        return self._cgroup_attach(idle_s=CGROUP_IDLE_S)

    def _cgroup_attach(self, *, idle_s: float) -> int:
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
        if idle_s:
            time.sleep(idle_s)  # the last attach's rcu_sync goes idle after a grace period
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

    def _ipam_network(self) -> str:
        return f"bst-{self.run}-ops"

    def ipam_add(self, data_dir: str = "ipam") -> int:
        assert self.cni_bin_dir is not None
        conf = json.dumps(
            {
                "cniVersion": "1.0.0",
                "name": self._ipam_network(),
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": _OPS_IPAM_SUBNET}]],
                    "dataDir": str(self.workdir / data_dir),
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

    # -- the same, with what earlier sandboxes left -----------------------------

    def hold_leases(self, count: int) -> None:
        """Leave ``count`` leases of the bench's network in the held IPAM
        directory (untimed), as host-local writes them: a file named by the
        address, the container and interface in it."""
        leases = self.workdir / "ipam-held" / self._ipam_network()
        leases.mkdir(parents=True)
        for k, address in zip(
            range(count), ipaddress.IPv4Network(_HELD_RANGE).hosts(), strict=False
        ):
            (leases / str(address)).write_text(f"held{k}\r\n{_INNER_IF}")
        self.held = count

    def ipam_add_held(self) -> int:
        return self.ipam_add("ipam-held")

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
        for name in list(self.port_netns):
            step(f"remove namespace {name}", functools.partial(remove_netns, name))
        self.port_netns.clear()

        def delete_bridges() -> None:
            with IPRoute() as ipr:
                for name in self.bridges:
                    for idx in ipr.link_lookup(ifname=name):
                        ipr.link("del", index=idx)

        step("delete bridges", delete_bridges)
        self.bridges.clear()
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


# -- the memory of a pooled device ---------------------------------------------


def read_memory_kib(
    meminfo: Path = Path("/proc/meminfo"), zoneinfo: Path = Path("/proc/zoneinfo")
) -> dict[str, int]:
    """The figures of ``/proc/meminfo`` (``MemAvailable`` ...) in KiB (its
    ``kB``), and ``PcpFree``: the pages on the per-CPU free lists, KiB.

    Those lists are free pages the page allocator keeps per CPU, counted as
    in use by MemAvailable; since Linux 6.7 their size is tuned to the
    allocation rate, ~100 MiB on this project's 2-core host, so a batch of
    devices served from them moves MemAvailable by nothing (the research log,
    2026-11-28). /proc/zoneinfo lists each CPU's pageset with its ``count:``
    of pages.
    """
    out: dict[str, int] = {}
    with open(meminfo, encoding="ascii") as fh:
        for line in fh:
            name, _, rest = line.partition(":")
            fields = rest.split()
            if fields and fields[0].isdigit():
                out[name] = int(fields[0])
    pages = 0
    with open(zoneinfo, encoding="ascii") as fh:
        for line in fh:
            fields = line.split()
            if len(fields) == 2 and fields[0] == "count:" and fields[1].isdigit():
                pages += int(fields[1])
    out["PcpFree"] = pages * _PAGE_KIB
    return out


class PoolDeviceMaker(Protocol):
    """Makes and removes device ``index`` of a pool ``kind``; removing one
    that is not there (never made, or made in part) does nothing."""

    def make(self, kind: str, index: int) -> None: ...

    def remove(self, kind: str, index: int) -> None: ...


@dataclass
class _PoolDevices:
    """The node agent's pooled devices (``NetlinkDevices.create`` in
    ``validation/agent/_pools.py``) as the testbed's threads runtime pools
    them, the same kernel objects: a named namespace (unshare and a bind
    mount); a veth pair with both ends on the host, down; a persistent tap,
    down (pyroute2's ``tuntap``: TUNSETIFF and TUNSETPERSIST); a namespace
    made with a veth pair whose peer is its ``eth0``. Named as the run's
    pools (:class:`RunNames`), so a killed measurement's are swept."""

    names: RunNames
    ipr: Any  # pyroute2 IPRoute on the host

    def make(self, kind: str, index: int) -> None:
        if kind == "netns":
            os.close(create_netns_here(self.names.pool_netns(index)))
        elif kind == "veth":
            host_end, peer = self.names.pool_veth(index)
            self.ipr.link("add", ifname=host_end, kind="veth", peer={"ifname": peer})
        elif kind == "tap":
            self.ipr.link("add", ifname=self.names.pool_tap(index), kind="tuntap", mode="tap")
        elif kind == "netns-veth":
            netns, host_end = self.names.pool_netns_veth(index)
            fd = create_netns_here(netns)
            try:
                self.ipr.link(
                    "add", ifname=host_end, kind="veth", peer={"ifname": _INNER_IF, "net_ns_fd": fd}
                )
            finally:
                os.close(fd)
        else:
            raise ValueError(f"kind: unknown pool kind {kind!r}")

    def _del_link(self, name: str) -> None:
        for idx in self.ipr.link_lookup(ifname=name):
            self.ipr.link("del", index=idx)  # a veth's peer goes with it

    def remove(self, kind: str, index: int) -> None:
        if kind == "netns":
            remove_netns(self.names.pool_netns(index))
        elif kind == "veth":
            self._del_link(self.names.pool_veth(index)[0])
        elif kind == "tap":
            self._del_link(self.names.pool_tap(index))
        elif kind == "netns-veth":
            netns, host_end = self.names.pool_netns_veth(index)
            self._del_link(host_end)
            remove_netns(netns)
        else:
            raise ValueError(f"kind: unknown pool kind {kind!r}")


def _checked_pool_args(*, devices: int, rounds: int, warmup: int, kinds: Sequence[str]) -> None:
    check_count(devices, "pool_devices", minimum=1)
    if devices > MAX_POOL_SIZE:
        raise ValueError(f"pool_devices: expected at most {MAX_POOL_SIZE:,}, but got {devices!r}")
    check_count(rounds, "pool_rounds", minimum=1)
    check_count(warmup, "pool_warmup", minimum=0)
    if not kinds:
        raise ValueError("pool_kinds: expected at least one kind, but got none")
    for kind in kinds:
        if kind not in POOL_DEVICE_KINDS:
            raise ValueError(
                f"pool_kinds: unknown pool kind {kind!r}; known: {', '.join(POOL_DEVICE_KINDS)}"
            )
    if len(set(kinds)) != len(kinds):
        raise ValueError(f"pool_kinds: each kind once, but got {', '.join(kinds)}")


def pool_memory_rounds(
    maker: PoolDeviceMaker,
    *,
    devices: int,
    rounds: int,
    warmup: int = 0,
    kinds: Sequence[str] = POOL_DEVICE_KINDS,
    read_memory: Callable[[], Mapping[str, int]] = read_memory_kib,
    wait: Callable[[], None] = lambda: None,
) -> tuple[PoolDeviceMemory, ...]:
    """The memory a batch of ``devices`` devices of each kind holds, ``rounds``
    times after ``warmup`` discarded rounds, interleaved across ``kinds``
    (each round starts one kind further, so none always follows the same
    one's teardown).

    A batch: ``wait()`` (a quiet, settled host), ``read_memory()``, make the
    batch, ``wait()``, ``read_memory()``, remove the batch (also on error;
    signals are held off meanwhile). Needs MemAvailable, PcpFree, Slab,
    SUnreclaim and Percpu in KiB (:func:`read_memory_kib`); a missing one is
    a :class:`ValueError` naming it.
    """
    _checked_pool_args(devices=devices, rounds=rounds, warmup=warmup, kinds=kinds)
    deltas: dict[str, dict[str, list[int]]] = {
        kind: {figure: [] for figure in _MEMINFO_FIGURES} for kind in kinds
    }

    def read() -> Mapping[str, int]:
        figures = read_memory()
        for figure in _MEMINFO_FIGURES:
            if figure not in figures:
                raise ValueError(f"read_memory: no {figure} figure (MemAvailable needs Linux 3.14)")
        return figures

    for r in range(warmup + rounds):
        shift = r % len(kinds)
        for kind in (*kinds[shift:], *kinds[:shift]):
            wait()
            before = read()
            made = 0
            try:
                for index in range(devices):
                    made = index + 1  # counted before: a device made in part is removed too
                    maker.make(kind, index)
                wait()
                after = read()
            finally:
                with signals_deferred():
                    for index in range(made):
                        try:
                            maker.remove(kind, index)
                        except Exception as exc:  # the rest still go; a sweep finds this one
                            log.warning("pool memory: remove %s %d: %s", kind, index, exc)
            if r < warmup:
                continue
            for figure in _MEMINFO_FIGURES:
                deltas[kind][figure].append(after[figure] - before[figure])
    return tuple(
        PoolDeviceMemory(
            kind=kind,
            devices=devices,
            warmup=warmup,
            # MemAvailable falls as the batch takes memory: its drop is before − after.
            mem_available_drop_kib=tuple(-d for d in deltas[kind]["MemAvailable"]),
            pcp_growth_kib=tuple(deltas[kind]["PcpFree"]),
            slab_growth_kib=tuple(deltas[kind]["Slab"]),
            sunreclaim_growth_kib=tuple(deltas[kind]["SUnreclaim"]),
            percpu_growth_kib=tuple(deltas[kind]["Percpu"]),
        )
        for kind in kinds
    )


def _measure_pool_memory_of(
    names: RunNames,
    *,
    devices: int,
    rounds: int,
    warmup: int,
    kinds: Sequence[str],
    settle_max_s: float = SETTLE_MAX_S,
) -> tuple[tuple[PoolDeviceMemory, ...], str]:
    """:func:`pool_memory_rounds` on this host's real devices, and a note."""
    busiest = 0.0

    def wait() -> None:
        nonlocal busiest
        # Quiet first (namespaces are torn down by kworkers after their
        # removal returned), then the counters' fold; our garbage collected.
        busiest = max(busiest, settle(settle_max_s))
        gc.collect()
        time.sleep(POOL_MEMORY_SETTLE_S)

    with IPRoute() as ipr:
        memory = pool_memory_rounds(
            _PoolDevices(names=names, ipr=ipr),
            devices=devices,
            rounds=rounds,
            warmup=warmup,
            kinds=kinds,
            wait=wait,
        )
    note = (
        f"pool memory: {devices} devices of each kind per batch, {rounds} rounds after "
        f"{warmup} discarded, interleaved; /proc/meminfo and /proc/zoneinfo read "
        f"{POOL_MEMORY_SETTLE_S:g} s after a quiet host (at most {busiest:.2f} of "
        f"{os.cpu_count()} cores busy)"
    )
    return memory, note


def measure_pool_memory(
    *,
    devices: int = POOL_MEMORY_DEVICES,
    rounds: int = POOL_MEMORY_ROUNDS,
    warmup: int = POOL_MEMORY_WARMUP,
    kinds: Sequence[str] = POOL_DEVICE_KINDS,
) -> tuple[PoolDeviceMemory, ...]:
    """The memory one pooled device of each kind holds on this host, alone
    (what :func:`measure_operations` adds to its timings).

    Needs root (:class:`TestbedError` otherwise); bad arguments are a
    :class:`ValueError` naming them. The run is registered like a storm's,
    so what a killed measurement leaves is swept; everything made is removed
    before returning.
    """
    _checked_pool_args(devices=devices, rounds=rounds, warmup=warmup, kinds=kinds)
    if os.geteuid() != 0:
        raise TestbedError("measuring pooled devices' memory needs root (namespaces, links)")
    run = new_run_id()
    register_run(run)
    try:
        sweep_leftovers(keep={run})
        memory, _ = _measure_pool_memory_of(
            RunNames(run), devices=devices, rounds=rounds, warmup=warmup, kinds=kinds
        )
        return memory
    finally:
        unregister_run(run)


def _busy_core_s() -> float:
    """The host's busy core-seconds since boot (:func:`~._host.busy_cores`'
    figures from /proc/stat)."""
    busy, _idle, _steal = _cpu_ticks()
    return busy / os.sysconf("SC_CLK_TCK")


def _measure_bridge_flood(
    bench: _Bench,
    *,
    new_links: int,
    window_s: float = FLOOD_WINDOW_S,
    rounds: int = FLOOD_ROUNDS,
    settle_max_s: float = SETTLE_MAX_S,
) -> tuple[BridgeFlood, str]:
    """:class:`BridgeFlood` on the bench's bridge of held ports against its
    own empty bridge, ``rounds`` rounds, the bridges' order alternating; and
    a note. The new links are ports as the bridge plugin makes them, sending
    what a new link sends (the held ports are quiet, see
    :meth:`_Bench.sandbox_port`); each round's are removed before the next
    window. Needs :meth:`_Bench.hold_ports` done."""
    assert bench.held_ports > 0
    figures: dict[str, list[float]] = {
        f"{which}_{kind}_s": [] for which in ("loaded", "empty") for kind in ("busy", "idle")
    }
    bridges = {"loaded": bench.names.held_bridge(), "empty": bench.names.bridge()}
    busiest = 0.0
    made = itertools.count(1)
    for r in range(rounds):
        for which in ("loaded", "empty") if r % 2 == 0 else ("empty", "loaded"):
            busiest = max(busiest, settle(settle_max_s))
            gc.collect()
            before = _busy_core_s()
            time.sleep(window_s)
            figures[f"{which}_idle_s"].append(max(0.0, _busy_core_s() - before))
            netns: list[str] = []
            start = time.monotonic()
            before = _busy_core_s()
            try:
                for _ in range(new_links):
                    i = next(made)
                    netns.append(bench.names.netns(MAX_BRIDGE_PORTS + i))
                    link = bench.names.host_link(MAX_BRIDGE_PORTS + i)
                    bench.sandbox_port(netns[-1], link, bridges[which], quiet=False)
                time.sleep(max(0.0, start + window_s - time.monotonic()))
                figures[f"{which}_busy_s"].append(max(0.0, _busy_core_s() - before))
            finally:
                with signals_deferred():
                    bench.remove_ports([n for n in netns if n in bench.port_netns])
    flood = BridgeFlood(
        ports=bench.held_ports,
        new_links=new_links,
        window_s=window_s,
        **{name: tuple(values) for name, values in figures.items()},
    )
    note = (
        f"bridge flood: {new_links} new links on a bridge of {bench.held_ports} ports and on "
        f"an empty one, {rounds} rounds, the host's busy CPU over {window_s:g} s from the first "
        f"less an idle window's (at most {busiest:.2f} of {os.cpu_count()} cores busy before)"
    )
    return flood, note


def _checked_ops(ops: Sequence[str] | None) -> tuple[str, ...]:
    if ops is None:
        return tuple(OPERATIONS)
    unknown = [o for o in ops if o not in OPERATIONS]
    if unknown:
        raise ValueError(f"ops: unknown operation {unknown[0]!r}; known: {', '.join(OPERATIONS)}")
    if not ops:
        raise ValueError("ops: expected at least one operation, but got none")
    chosen = set(ops)
    return tuple(o for o in OPERATIONS if o in chosen)  # always in OPERATIONS' order


#: Timed repetitions of each operation, and discarded ones before them.
DEFAULT_REPEATS = 30
DEFAULT_WARMUP = 3


def measure_operations(
    *,
    repeats: int = DEFAULT_REPEATS,
    warmup: int = DEFAULT_WARMUP,
    vm: bool = True,
    ops: tuple[str, ...] | None = None,
    cni_bin_dir: Path | None = None,
    pool_devices: int | None = None,
    pool_rounds: int = POOL_MEMORY_ROUNDS,
    settle_max_s: float = SETTLE_MAX_S,
    held_leases: int = HELD_LEASES,
    held_ports: int = HELD_PORTS,
    flood_links: int | None = None,
    flood_window_s: float = FLOOD_WINDOW_S,
    flood_rounds: int = FLOOD_ROUNDS,
    stretch_rounds: int | None = None,
) -> OperationTimes:
    """Time each operation alone, ``repeats`` times after ``warmup`` discarded ones;
    then measure the memory one pooled device of each kind holds
    (:func:`pool_memory_rounds`: batches of ``pool_devices``, ``pool_rounds``
    rounds after :data:`POOL_MEMORY_WARMUP`), each block after waiting up to
    ``settle_max_s`` for a quiet host; ``ipam_add_held`` last, with
    ``held_leases`` leases of its network held, ``bridge_enslave_held`` with
    ``held_ports`` sandbox ports on the bridge. ``pool_devices``: ``None`` for
    :data:`POOL_MEMORY_DEVICES` when every operation is timed (``ops`` None)
    and none measured when ``ops`` picks some; 0 for none. ``flood_links``
    likewise (:data:`FLOOD_NEW_LINKS`): the new links a round of the bridge
    flood makes on the bridge of ``held_ports`` ports and on an empty one
    (:func:`_measure_bridge_flood`: ``flood_rounds`` rounds of windows of
    ``flood_window_s``). ``stretch_rounds`` likewise (:data:`STRETCH_ROUNDS`):
    rounds of :func:`~.hold_stretch.measure_hold_stretch`, how RTNL's holds
    stretch when the holder's core is shared.

    Needs root (:class:`TestbedError` otherwise); bad arguments are a
    :class:`ValueError` naming them. ``vm=False`` (or no QEMU/KVM here) times
    ``vm_spawn``/``vm_up`` on the StartVM fallback process, and the result's
    ``vm_mode`` says so. Everything made is removed before returning, also on
    error or interrupt (signals are held off during the cleanup).
    """
    check_count(repeats, "repeats", minimum=1)
    check_count(warmup, "warmup", minimum=0)
    if flood_links is None:
        flood_links = FLOOD_NEW_LINKS if ops is None else 0
    for name, value, low, high, what in (
        ("held_leases", held_leases, 1, MAX_HELD_LEASES, "a /16's addresses"),
        ("held_ports", held_ports, 1, MAX_BRIDGE_PORTS, "a bridge's ports"),
        ("flood_links", flood_links, 0, MAX_BRIDGE_PORTS, "a bridge's ports"),
    ):
        check_count(value, name, minimum=low)
        if value > high:
            raise ValueError(f"{name}: must be at most {high} ({what}), but got {value}")
    check_count(flood_rounds, "flood_rounds", minimum=1)
    if stretch_rounds is None:
        stretch_rounds = STRETCH_ROUNDS if ops is None else 0
    check_count(stretch_rounds, "stretch_rounds", minimum=0)
    if not 0.0 < flood_window_s <= MAX_SETTLE_S:  # NaN fails both
        raise ValueError(
            f"flood_window_s: must be within (0, {MAX_SETTLE_S:g}] s, got {flood_window_s!r}"
        )
    if not 0.0 <= settle_max_s <= MAX_SETTLE_S:  # NaN fails both
        raise ValueError(
            f"settle_max_s: must be within 0..{MAX_SETTLE_S:g} s, got {settle_max_s!r}"
        )
    chosen = _checked_ops(ops)
    if pool_devices is None:
        pool_devices = POOL_MEMORY_DEVICES if ops is None else 0
    check_count(pool_devices, "pool_devices", minimum=0)
    if pool_devices:
        _checked_pool_args(
            devices=pool_devices,
            rounds=pool_rounds,
            warmup=POOL_MEMORY_WARMUP,
            kinds=POOL_DEVICE_KINDS,
        )
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
            if op == "ipam_add_held" and not bench.held:
                bench.hold_leases(held_leases)
                bench.notes.append(f"{op}: timed with {held_leases} leases of its network held")
            if op == "bridge_enslave_held" and not bench.held_ports:
                bench.hold_ports(held_ports)
                bench.notes.append(f"{op}: timed with {held_ports} sandbox ports on the bridge")
            busy = settle(settle_max_s)
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
        memory: tuple[PoolDeviceMemory, ...] = ()
        if pool_devices:
            memory, note = _measure_pool_memory_of(
                bench.names,
                devices=pool_devices,
                rounds=pool_rounds,
                warmup=POOL_MEMORY_WARMUP,
                kinds=POOL_DEVICE_KINDS,
                settle_max_s=settle_max_s,
            )
            bench.notes.append(note)
            for m in memory:
                log.info("pool memory %s: median %.4f MiB per device", m.kind, m.median_mib)
        flood: BridgeFlood | None = None
        if flood_links:
            if not bench.held_ports:
                bench.hold_ports(held_ports)
            flood, note = _measure_bridge_flood(
                bench,
                new_links=flood_links,
                window_s=flood_window_s,
                rounds=flood_rounds,
                settle_max_s=settle_max_s,
            )
            bench.notes.append(note)
            log.info("bridge flood: median %.3g µs per link per port", flood.per_port_s() * 1e6)
        stretch: HoldStretch | None = None
        if stretch_rounds:
            try:
                stretch, note = measure_hold_stretch(
                    bench.names, rounds=stretch_rounds, settle_max_s=settle_max_s
                )
            except (TestbedError, OSError, ValueError) as exc:
                # Everything else is measured: keep it; the fit then goes by
                # the kernel's build, and the file says why.
                why = str(exc).removeprefix("hold stretch: ")
                stretch, note = None, f"hold stretch not measured: {why}"
            bench.notes.append(note)
            log.info("%s", note)
        return OperationTimes(
            timings=tuple(timings),
            host=current_host(),
            vm_mode=bench.vm_mode,
            created_at=datetime.now(UTC),
            repeats=repeats,
            warmup=warmup,
            run=run,
            notes=tuple(bench.notes),
            pool_memory=memory,
            held_leases=bench.held,
            held_ports=bench.held_ports if "bridge_enslave_held" in chosen else 0,
            bridge_flood=flood,
            hold_stretch=stretch,
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
