"""The testbed driver: a real boot storm of seed 000's pipeline on this host.

Each sandbox is one thread; all threads wait at a barrier and start at once.
Each runs the five stages (seed 000 §4.1.1) with the kernel operations a
Kata sandbox's network start performs, through in-process netlink
(pyroute2), timed on CLOCK_MONOTONIC with the thread id:

- **NetNS**: a named network namespace ``bst-<run>-<i>`` (unshare + bind
  mount, as ``ip netns add``) — or one taken from the pre-created pool; a
  ``netns-veth`` pool's namespace comes with its veth pair, the peer made
  inside it (no move when taken), the host end down on the host;
- **AddCNI**: a netlink socket opened inside the namespace (as a CNI plugin
  entering it), then the endpoint: a veth pair, the peer created inside the
  namespace or created on the host and moved in (both ends up, an address on
  the inner end); or a persistent tap made in the namespace; or a macvtap on
  the run's one shared parent link (the vPort every sandbox of a tenant
  shares, as the ipvtap/macvtap CNIs do), made on the host and moved in; a
  sandbox with a ``netns-veth`` namespace makes no pair: both ends up and
  the address only (the host end keeps its pool name: a rename takes RTNL);
- **Cgroup**: a cgroup-v2 directory (``cgroup_mkdir`` under cgroup_mutex),
  optionally a net_prio ``ifpriomap`` write (takes RTNL; off by default, see
  :mod:`._cgroup`);
- **AttachIf**: for a veth endpoint, a tap inside the namespace
  (``TUNSETIFF``: RTNL), an ``ingress`` qdisc on the veth and on the tap,
  and u32 match-all filters with ``mirred`` egress redirects both ways
  (Kata's tcfilter model); a tap or macvtap endpoint is the VMM's NIC as it
  is, so AttachIf only opens it (the tap re-attached by ``TUNSETIFF``, the
  macvtap's ``/dev/tapN``) — seed 000 §4.2.2: why ipvtap spares RTNL work;
- **StartVM**: a QEMU microVM with the tap as its NIC, moved into the
  sandbox's cgroup (css_set_lock), up when its guest prints the marker; or
  the fallback process (see :mod:`._vm`).

With ``runtime="cni"`` the same five stages run as containerd and Kata run
them: real CNI plugins exec'd in AddCNI, one shim process per sandbox for
AttachIf and StartVM (see :mod:`._cni_stages`).

Everything created is removed on success, failure and interrupt; a killed
run's leftovers are swept by the next run (see :mod:`._leftovers`).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pyroute2 import IPRoute

from ...traces import (
    AdmitSpan,
    Arrival,
    ExecSpan,
    KernelTraceFacts,
    LockSpan,
    ScenarioFacts,
    StageSpan,
    Trace,
    TraceHeader,
)
from .._names import CGROUP_PARENT
from ._cgroup import add_process, cgroup2_root, netprio_root, remove_tree, write_ifpriomap
from ._cni_stages import (
    CniHost,
    CniRuntime,
    CniSandbox,
    cni_host,
    exec_owners,
    raise_fd_limit,
)
from ._errors import TestbedError
from ._host import CpuMeter, host_facts, settle, signals_deferred
from ._leftovers import (
    WORKDIR_PREFIX,
    RunNames,
    new_run_id,
    register_run,
    sweep_leftovers,
    unregister_run,
)
from ._netns import create_netns_here, entered, remove_netns
from ._tap import TUNSETIFF, TUNSETPERSIST, attach_tap, ifreq
from ._vm import VmRunner, build_stub, stop, vm_available
from .admission import Admission, LocalAdmission
from .options import STAGES, StormOptions, StormResult

__all__ = ["STAGES", "StormOptions", "StormResult", "TestbedError", "run_storm"]

log = logging.getLogger(__name__)

#: Locks named in the file in full when kernel spans are sampled.
KEY_LOCKS = ("rtnl", "cgroup_mutex", "css_set_lock")

_ETH_P_ALL = 0x0003
_INGRESS = 0xFFFF0000
_INNER_IF = "eth0"
_TAP_IF = "tap0"
_INNER_ADDR = ("10.88.0.2", 16)  # every sandbox the same: the namespaces are isolated


@dataclass
class _Sandbox:
    """One sandbox's objects, for its stages and for cleanup."""

    index: int
    netns: str | None = None
    ns_fd: int | None = None
    #: The host end of the veth pair that came with a ``netns-veth`` namespace
    #: (it keeps its pool name); None when the sandbox made or moved its own.
    host_end: str | None = None
    ns_ipr: Any = None
    host_ipr: Any = None
    tap_fd: int | None = None
    cgroup: Path | None = None
    netprio: Path | None = None
    proc: Any = None
    spans: list[StageSpan] = field(default_factory=list)
    admits: list[AdmitSpan] = field(default_factory=list)
    error: str | None = None
    #: The ``cni`` runtime's state of this sandbox (None with ``threads``).
    cni: CniSandbox | None = None


class _Storm:
    """One run: its names, its sandboxes, and their cleanup."""

    def __init__(
        self,
        options: StormOptions,
        admission: Admission | None,
        run: str,
        cni_host: CniHost | None = None,
    ) -> None:
        self.options = options
        self.run = run  # registered already: a sweep elsewhere spares what we make
        self.names = RunNames(self.run)
        self.sandboxes = [_Sandbox(i) for i in range(options.sandboxes)]
        self.pool_netns: list[str] = []
        self.pool_tap: list[str] = []  # made for the storm; those taken move into a namespace
        self.pool_veth: list[tuple[str, str]] = []  # (host end, peer), likewise
        # (namespace, host end): the peer is inside the namespace already.
        self.pool_netns_veth: list[tuple[str, str]] = []
        # The cni runtime's netns-veth: namespaces with their CNI ADD done.
        self.pool_cni_netns: list[str] = []
        self.notes: list[str] = []
        self.stop = threading.Event()
        self.cgroup_run: Path | None = None
        self.netprio_run: Path | None = None
        self.vport_index: int | None = None  # the macvtap endpoints' shared parent
        self.workdir = Path(tempfile.mkdtemp(prefix=f"{WORKDIR_PREFIX}{self.run}-"))
        self.runner = self._runner()
        limits = options.config.limits if options.config else {}
        self._own_admission = admission is None
        self.admission: Admission = admission or LocalAdmission(limits=limits)
        # Ask for a netns-veth namespace first: with a veth endpoint, unless
        # the config says it pools none (an agent without a config may).
        pools = options.config.pools if options.config else None
        self._wants_netns_veth = options.endpoint == "veth" and (
            pools is None or pools.get("netns-veth", 0) > 0
        )
        self.cni: CniRuntime | None = None
        if options.runtime == "cni":
            assert cni_host is not None
            self.cni = CniRuntime(
                options=options, host=cni_host, names=self.names, runner=self.runner
            )
            for sb in self.sandboxes:
                sb.cni = CniSandbox(index=sb.index, name=self.names.vm(sb.index))
            # Namespaces with their ADD done: the run's own pool, or an
            # agent's (asked before the storm whether it ADDs them: _prepare_cni).
            if self._own_admission:
                self._wants_netns_veth = bool(pools and pools.get("netns-veth", 0) > 0)

    def _runner(self) -> VmRunner:
        opts = self.options
        ok, why = vm_available()
        if opts.vm and ok:
            try:
                stub = build_stub(self.workdir)
            except BaseException:
                shutil.rmtree(self.workdir, ignore_errors=True)
                raise
            return VmRunner(
                mode="qemu-microvm",
                stub=stub,
                memory_mib=opts.vm_memory_mib,
                mem_prealloc=opts.mem_prealloc,
            )
        reason = "--no-vm" if not opts.vm else why
        self.notes.append(
            f"StartVM fallback ({reason}): a process spawned into the sandbox's netns "
            "(nsenter --net) prints the marker; no VMM, no guest memory"
        )
        return VmRunner(mode="process")

    # -- preparation ---------------------------------------------------------

    def prepare(self) -> None:
        try:
            root = cgroup2_root()
        except Exception as exc:
            raise TestbedError(str(exc)) from None
        self.cgroup_run = root / CGROUP_PARENT / self.run
        os.makedirs(self.cgroup_run, exist_ok=False)
        if self.cni is not None:
            self._prepare_cni(self.cni)
            return
        if self.options.netprio_ifpriomap:
            self.netprio_run = netprio_root() / CGROUP_PARENT / self.run
            os.makedirs(self.netprio_run, exist_ok=False)
            self.notes.append("net_prio ifpriomap written in Cgroup (RTNL under cgroup ops)")
        if self.options.endpoint == "macvtap":
            # The shared parent: a veth pair standing in for the tenant's vPort.
            with IPRoute() as ipr:
                ipr.link(
                    "add",
                    ifname=self.names.vport(),
                    kind="veth",
                    peer={"ifname": self.names.vport_peer()},
                )
                for name in (self.names.vport(), self.names.vport_peer()):
                    (idx,) = ipr.link_lookup(ifname=name)
                    ipr.link("set", index=idx, state="up")
                (self.vport_index,) = ipr.link_lookup(ifname=self.names.vport())
        pools = self.options.config.pools if self.options.config else {}
        n_netns = min(pools.get("netns", 0), self.options.sandboxes)
        # The endpoint's own kind can come from a pool too (not the macvtap:
        # its parent is the run's).
        endpoint = self.options.endpoint
        emulated = {"netns", endpoint} if endpoint in ("veth", "tap") else {"netns"}
        n_tap = min(pools.get("tap", 0), self.options.sandboxes) if "tap" in emulated else 0
        n_veth = min(pools.get("veth", 0), self.options.sandboxes) if "veth" in emulated else 0
        # A namespace with its veth pair's peer inside: a sandbox takes one
        # before it looks at the netns and veth pools (they serve those that
        # find it empty).
        if endpoint == "veth":
            emulated.add("netns-veth")
        n_nv = min(pools.get("netns-veth", 0), self.options.sandboxes) if endpoint == "veth" else 0
        for kind in sorted(set(pools) - emulated):
            self.notes.append(f"pool {kind!r} of the config is not emulated by the testbed")
        local = isinstance(self.admission, LocalAdmission) and self._own_admission
        if (n_netns or n_tap or n_veth or n_nv) and local:
            for k in range(n_netns):
                name = self.names.pool_netns(k)
                os.close(create_netns_here(name))
                self.pool_netns.append(name)
            for k in range(n_nv):
                self._make_netns_veth(k)
            with IPRoute() as ipr:
                for k in range(n_tap):
                    name = self.names.pool_tap(k)
                    ipr.link("add", ifname=name, kind="tuntap", mode="tap")
                    self.pool_tap.append(name)
                for k in range(n_veth):
                    host_end, peer = self.names.pool_veth(k)
                    ipr.link("add", ifname=host_end, kind="veth", peer={"ifname": peer})
                    self.pool_veth.append((host_end, peer))
            self.admission = LocalAdmission(
                limits=self.options.config.limits if self.options.config else {},
                pools={"netns": self.pool_netns, "tap": list(self.pool_tap)},
                pairs={"veth": list(self.pool_veth), "netns-veth": list(self.pool_netns_veth)},
            )

    def _prepare_cni(self, cni: CniRuntime) -> None:
        """The run's CNI network, and its pools: namespaces, and namespaces
        with their ADD done (``netns-veth``)."""
        cni.prepare()
        self.notes.extend(cni.notes)
        pools = self.options.config.pools if self.options.config else {}
        n_netns = min(pools.get("netns", 0), self.options.sandboxes)
        n_nv = min(pools.get("netns-veth", 0), self.options.sandboxes)
        local = isinstance(self.admission, LocalAdmission) and self._own_admission
        if (n_netns or n_nv) and local:
            for k in range(n_netns):
                name = self.names.pool_netns(k)
                os.close(create_netns_here(name))
                self.pool_netns.append(name)
            netns_veth = [self.names.pool_netns_veth(k)[0] for k in range(n_nv)]
            # Listed before they are made: cleanup removes whichever exist.
            self.pool_cni_netns = list(netns_veth)
            self.admission = LocalAdmission(
                limits=self.options.config.limits if self.options.config else {},
                pools={"netns": self.pool_netns},
                cni_netns=cni.fill_pool(netns_veth),
            )
        if self._wants_netns_veth and not self._own_admission:
            # An agent's netns-veth pairs are usable only if a CNI ADD made
            # them (an agent started with --cni): asked once, before the storm.
            self._wants_netns_veth = self.admission.offers_cni_netns()
            if not self._wants_netns_veth:
                self.notes.append(
                    "runtime cni with an agent whose netns-veth pool is not CNI-plumbed "
                    "(start it with --cni): only its netns pool is used"
                )
        # A gated StartVM: the shim waits for the driver's go once admitted.
        cni.wait_go = self.admission.gated("StartVM")

    def _make_netns_veth(self, k: int) -> None:
        """Pool entry ``k`` of ``netns-veth``: a namespace, and a veth pair
        whose peer is made inside it as the sandbox's ``eth0`` (both down)."""
        netns, host_end = self.names.pool_netns_veth(k)
        fd = create_netns_here(netns)
        # Listed before the pair is made: cleanup removes both, whichever exists.
        self.pool_netns_veth.append((netns, host_end))
        try:
            with IPRoute() as ipr:
                ipr.link(
                    "add",
                    ifname=host_end,
                    kind="veth",
                    peer={"ifname": _INNER_IF, "net_ns_fd": fd},
                )
        finally:
            os.close(fd)

    # -- the stages ----------------------------------------------------------

    def _stage(
        self,
        sb: _Sandbox,
        name: str,
        body: Callable[[_Sandbox], tuple[float, float] | None],
    ) -> None:
        """Run ``body`` inside stage ``name``'s gate and record its span: from
        entry to return, or the (start, end) the body returns (a shim's stamps)."""
        if self.stop.is_set():
            raise InterruptedError("storm stopped")
        holder = f"{self.run}/{sb.index}"
        asked = time.monotonic()
        with self.admission.stage(name, holder):
            start = time.monotonic()
            # A stage without a limit has no admission to wait for: a pause
            # there is the host's (the GIL, a busy core), not a queue at a gate.
            if start - asked > 1e-4 and self.admission.gated(name):
                sb.admits.append(
                    AdmitSpan(sandbox=sb.index, stage=name, start_s=asked, end_s=start)
                )
            stamps = body(sb)
            end = time.monotonic()
            if stamps is not None:
                start, end = stamps
        sb.spans.append(
            StageSpan(
                sandbox=sb.index,
                stage=name,
                start_s=start,
                end_s=end,
                tid=threading.get_native_id(),
            )
        )

    def _netns(self, sb: _Sandbox) -> None:
        if self._wants_netns_veth and self.cni is not None:
            plumbed = self.admission.take_cni_netns(f"{self.run}/{sb.index}")
            if plumbed is not None:
                assert sb.cni is not None
                self.cni.take_pooled(sb.cni, plumbed)
                sb.netns = plumbed.netns
                sb.ns_fd = os.open(f"/run/netns/{sb.netns}", os.O_RDONLY)
                return
        elif self._wants_netns_veth:
            both = self.admission.take_netns_veth(f"{self.run}/{sb.index}")
            if both is not None:
                sb.netns, sb.host_end = both
                sb.ns_fd = os.open(f"/run/netns/{sb.netns}", os.O_RDONLY)
                return
        pooled = self.admission.take("netns", f"{self.run}/{sb.index}")
        if pooled is not None:
            sb.netns = pooled
            sb.ns_fd = os.open(f"/run/netns/{pooled}", os.O_RDONLY)
            return
        sb.netns = self.names.netns(sb.index)
        sb.ns_fd = create_netns_here(sb.netns)

    # The cni runtime's bodies: the netns name handed over, the rest exec'd.

    def _cni_add(self, sb: _Sandbox) -> None:
        assert self.cni is not None and sb.cni is not None
        sb.cni.netns = sb.netns
        self.cni.add_cni(sb.cni)

    def _cni_attach(self, sb: _Sandbox) -> tuple[float, float]:
        assert self.cni is not None and sb.cni is not None
        return self.cni.attach_if(sb.cni, sb.cgroup)

    def _cni_start_vm(self, sb: _Sandbox) -> tuple[float, float]:
        assert self.cni is not None and sb.cni is not None
        return self.cni.start_vm(sb.cni)

    def _add_cni(self, sb: _Sandbox) -> None:
        assert sb.ns_fd is not None
        # A CNI plugin enters the sandbox's namespace for its netlink work:
        # the socket opened there stays bound to it.
        with entered(sb.ns_fd):
            sb.ns_ipr = IPRoute()
        make = {"veth": self._veth, "tap": self._tap, "macvtap": self._macvtap}
        make[self.options.endpoint](sb)
        ns = sb.ns_ipr
        (iidx,) = ns.link_lookup(ifname=_INNER_IF)
        ns.link("set", index=iidx, state="up")
        ns.addr("add", index=iidx, address=_INNER_ADDR[0], prefixlen=_INNER_ADDR[1])

    def _move_in(self, sb: _Sandbox, name: str) -> None:
        """Move host link ``name`` into the sandbox's namespace as its endpoint
        (RTNL, and ``synchronize_net`` under it)."""
        host = sb.host_ipr
        (idx,) = host.link_lookup(ifname=name)
        host.link("set", index=idx, net_ns_fd=sb.ns_fd, ifname=_INNER_IF)

    def _veth(self, sb: _Sandbox) -> None:
        """A veth pair: the one that came with a ``netns-veth`` namespace,
        taken from the pool, or made with its peer in the namespace or on the
        host and moved in; the host end up."""
        host = sb.host_ipr
        if sb.host_end is not None:
            # Made before the storm with its peer inside: nothing to make or
            # move, and no rename (RTNL): the host end keeps its pool name.
            (hidx,) = host.link_lookup(ifname=sb.host_end)
            host.link("set", index=hidx, state="up")
            return
        host_link = self.names.host_link(sb.index)
        pair = self.admission.take_pair("veth", f"{self.run}/{sb.index}")
        if pair is not None:
            # The host end takes this sandbox's name, so that cleanup and the
            # sweep know it (a pooled pair is down: it can be renamed).
            host_end, peer = pair
            self._move_in(sb, peer)
            (hidx,) = host.link_lookup(ifname=host_end)
            host.link("set", index=hidx, ifname=host_link)
        elif self.options.peer == "in-netns":
            host.link(
                "add",
                ifname=host_link,
                kind="veth",
                peer={"ifname": _INNER_IF, "net_ns_fd": sb.ns_fd},
            )
        else:
            moved = self.names.moved_peer(sb.index)
            host.link("add", ifname=host_link, kind="veth", peer={"ifname": moved})
            self._move_in(sb, moved)
        (hidx,) = host.link_lookup(ifname=host_link)
        host.link("set", index=hidx, state="up")

    def _tap(self, sb: _Sandbox) -> None:
        """A persistent tap: taken from the pool and moved in, or made in the namespace."""
        pooled = self.admission.take("tap", f"{self.run}/{sb.index}")
        if pooled is not None:
            self._move_in(sb, pooled)
            return
        assert sb.ns_fd is not None
        with entered(sb.ns_fd):  # TUNSETIFF makes the tap in the caller's namespace
            fd = os.open("/dev/net/tun", os.O_RDWR | os.O_CLOEXEC)
            try:
                fcntl.ioctl(fd, TUNSETIFF, ifreq(_INNER_IF))
                fcntl.ioctl(fd, TUNSETPERSIST, 1)  # it outlives this fd, as a CNI's does
            finally:
                os.close(fd)

    def _macvtap(self, sb: _Sandbox) -> None:
        """A macvtap on the shared parent, made on the host (a host-unique
        ifindex, so a unique ``/dev/tapN``) and moved in."""
        made = self.names.endpoint(sb.index)
        sb.host_ipr.link(
            "add", ifname=made, kind="macvtap", link=self.vport_index, macvtap_mode="bridge"
        )
        self._move_in(sb, made)

    def _cgroup(self, sb: _Sandbox) -> None:
        assert self.cgroup_run is not None
        sb.cgroup = self.cgroup_run / f"sb{sb.index}"
        sb.cgroup.mkdir()
        if self.netprio_run is not None:
            sb.netprio = self.netprio_run / f"sb{sb.index}"
            sb.netprio.mkdir()
            write_ifpriomap(sb.netprio, sb.host_end or self.names.host_link(sb.index), 1)

    def _attach_if(self, sb: _Sandbox) -> None:
        assert sb.ns_fd is not None
        ns = sb.ns_ipr
        if self.options.endpoint == "tap":
            with entered(sb.ns_fd):  # re-attach to the endpoint by name: RTNL
                sb.tap_fd = os.open("/dev/net/tun", os.O_RDWR | os.O_CLOEXEC)
                attach_tap(sb.tap_fd, _INNER_IF)
            return
        if self.options.endpoint == "macvtap":
            (idx,) = ns.link_lookup(ifname=_INNER_IF)
            try:
                sb.tap_fd = os.open(f"/dev/tap{idx}", os.O_RDWR | os.O_CLOEXEC)
            except FileNotFoundError:
                raise TestbedError(
                    f"macvtap: /dev/tap{idx} is missing (devtmpfs not mounted on /dev?)"
                ) from None
            return
        with entered(sb.ns_fd):  # TUNSETIFF makes the tap in the caller's namespace
            fd = os.open("/dev/net/tun", os.O_RDWR | os.O_CLOEXEC)
            sb.tap_fd = fd
            fcntl.ioctl(fd, TUNSETIFF, ifreq(_TAP_IF))
        (tap,) = ns.link_lookup(ifname=_TAP_IF)
        (veth,) = ns.link_lookup(ifname=_INNER_IF)
        ns.link("set", index=tap, state="up")
        for dev, to in ((veth, tap), (tap, veth)):
            ns.tc("add", "ingress", dev, _INGRESS)
            ns.tc(
                "add-filter",
                "u32",
                dev,
                parent=_INGRESS,
                prio=49152,
                protocol=_ETH_P_ALL,
                target=0x1,
                keys=["0x0/0x0+0"],
                action={
                    "kind": "mirred",
                    "direction": "egress",
                    "action": "redirect",
                    "ifindex": to,
                },
            )

    def _start_vm(self, sb: _Sandbox) -> None:
        assert sb.netns is not None
        sb.proc = self.runner.start(name=self.names.vm(sb.index), netns=sb.netns, tap_fd=sb.tap_fd)
        if sb.cgroup is not None:
            add_process(sb.cgroup, sb.proc.pid)  # as Kata moves its VMM: css_set_lock
        self.runner.wait_up(sb.proc, name=self.names.vm(sb.index))

    def sandbox_thread(self, sb: _Sandbox, barrier: threading.Barrier) -> None:
        if self.cni is None:
            try:
                sb.host_ipr = IPRoute()  # a CNI plugin's own netlink socket, made before the storm
            except Exception as exc:
                sb.error = f"setup: {type(exc).__name__}: {exc}"
        bodies: tuple[Callable[[_Sandbox], tuple[float, float] | None], ...]
        if self.cni is None:
            bodies = (self._netns, self._add_cni, self._cgroup, self._attach_if, self._start_vm)
        else:
            bodies = (
                self._netns,
                self._cni_add,
                self._cgroup,
                self._cni_attach,
                self._cni_start_vm,
            )
        try:
            barrier.wait()  # even after a failed setup: the others must not wait forever
            if sb.error is not None:
                return
            for name, body in zip(STAGES, bodies, strict=True):
                self._stage(sb, name, body)
        except threading.BrokenBarrierError:
            sb.error = "storm aborted before it started"
        except Exception as exc:
            sb.error = f"{type(exc).__name__}: {exc}"
            log.debug("sandbox %d failed", sb.index, exc_info=True)
        finally:
            for ipr in (sb.ns_ipr, sb.host_ipr):
                if ipr is not None:
                    with contextlib.suppress(Exception):
                        ipr.close()
            sb.ns_ipr = sb.host_ipr = None

    # -- cleanup -------------------------------------------------------------

    def cni_sandboxes(self) -> list[CniSandbox]:
        return [sb.cni for sb in self.sandboxes if sb.cni is not None]

    def cleanup(self) -> None:
        with signals_deferred():
            if self.cni is not None:
                # Shims (and their VMMs) stopped, then DEL before the namespaces go.
                with contextlib.suppress(Exception):
                    self.cni.teardown(self.cni_sandboxes())
            for sb in self.sandboxes:
                if sb.proc is not None:
                    with contextlib.suppress(Exception):
                        stop(sb.proc)
            with IPRoute() as ipr:
                # The shared parent first: its macvtaps still on the host go with it.
                for idx in ipr.link_lookup(ifname=self.names.vport()):
                    with contextlib.suppress(Exception):
                        ipr.link("del", index=idx)
                for sb in self.sandboxes:
                    links = (
                        self.names.host_link(sb.index),
                        self.names.moved_peer(sb.index),
                        self.names.endpoint(sb.index),
                        *((sb.host_end,) if sb.host_end is not None else ()),
                    )
                    for name in links:
                        with contextlib.suppress(Exception):
                            for idx in ipr.link_lookup(ifname=name):
                                ipr.link("del", index=idx)
                # Pooled devices no sandbox took (a netns-veth pair's host end
                # takes its peer with it, before its namespace goes).
                pooled = [
                    *self.pool_tap,
                    *(host_end for host_end, _ in self.pool_veth),
                    *(host_end for _, host_end in self.pool_netns_veth),
                ]
                for name in pooled:
                    with contextlib.suppress(Exception):
                        for idx in ipr.link_lookup(ifname=name):
                            ipr.link("del", index=idx)
            for sb in self.sandboxes:
                for fd in (sb.tap_fd, sb.ns_fd):
                    if fd is not None:
                        with contextlib.suppress(OSError):
                            os.close(fd)
                sb.tap_fd = sb.ns_fd = None
                if sb.netns is not None:
                    remove_netns(sb.netns)
                remove_netns(self.names.netns(sb.index))
            pooled_netns = [
                *self.pool_netns,
                *(netns for netns, _ in self.pool_netns_veth),
                *self.pool_cni_netns,
            ]
            for name in pooled_netns:
                remove_netns(name)
            for run_dir in (self.cgroup_run, self.netprio_run):
                if run_dir is not None:
                    remove_tree(run_dir)
                    with contextlib.suppress(OSError):
                        run_dir.parent.rmdir()  # our parent, if no other run uses it
            if self.cni is not None:
                self.cni.remove()  # the bridge and the state, once nothing uses them
            shutil.rmtree(self.workdir, ignore_errors=True)
            unregister_run(self.run)


def _sample(locks: list[LockSpan], cap: int | None) -> tuple[list[LockSpan], str | None]:
    """At most ``cap`` of ``locks``: the sandboxes' waits on the key locks
    first, then the longest others; and the trace's note saying what went.

    Where the key waits alone are more than ``cap``, every k-th in time is
    kept (evenly over the storm: the earliest alone would drop its tail), and
    the note gives the counts, so that a reader scales their sums.
    """
    if cap is None or len(locks) <= cap:
        return locks, None
    key = [lk for lk in locks if lk.lock in KEY_LOCKS and lk.sandbox is not None]
    rest = sorted(
        (lk for lk in locks if not (lk.lock in KEY_LOCKS and lk.sandbox is not None)),
        key=lambda lk: lk.end_s - lk.start_s,
        reverse=True,
    )
    names = ", ".join(KEY_LOCKS)
    if len(key) <= cap:
        kept = key + rest[: cap - len(key)]
        why = f"all {len(key)} {names} waits of sandboxes, then the longest others"
    else:
        key.sort(key=lambda lk: lk.start_s)
        kept = [key[i * len(key) // cap] for i in range(cap)]
        why = (
            f"{cap} of the {len(key)} {names} waits of sandboxes, evenly over the storm "
            f"(their sums short by that ratio), none of the others"
        )
    note = f"kernel lock spans sampled: {len(kept)} of {len(locks)} kept ({why})"
    return sorted(kept, key=lambda lk: lk.start_s), note


def run_storm(options: StormOptions, *, admission: Admission | None = None) -> StormResult:
    """Run one storm and return its trace; everything made is removed before returning.

    ``admission`` replaces the local semaphores and pools (e.g. a node
    agent's client); then pools are the agent's business.
    """
    if os.geteuid() != 0:
        raise TestbedError("the testbed needs root (network namespaces, cgroups, tracefs)")
    from ...traces.kernel import (
        KernelCollector,
        LockNamer,
        join_contention,
        read_kallsyms,
        softirq_spans,
    )

    # Before anything is made: a missing plugin is one line, not a half-made run.
    host = cni_host(options) if options.runtime == "cni" else None
    run = new_run_id()
    register_run(run)
    try:
        storm = _Storm(options, admission, run, host)
    except BaseException:
        unregister_run(run)
        raise
    collector: KernelCollector | None = None
    try:
        sweep_leftovers(keep={storm.run})
        if storm.cni is not None and (short := raise_fd_limit(options.sandboxes)):
            storm.notes.append(short)
        load = os.getloadavg()
        # The host may be shared: a busy one stretches every stage. The load
        # average lags (an earlier storm still shows in it); the CPU time
        # other work takes right now is measured over a short window.
        storm.notes.append(
            f"load average before the storm: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} "
            f"on {os.cpu_count()} cores"
        )
        busy = settle(options.settle_s)
        storm.notes.append(f"cores busy before the storm: {busy:.2f}")
        storm.prepare()
        barrier = threading.Barrier(options.sandboxes + 1)
        meter = CpuMeter()  # the storm's CPU work: barrier to the last sandbox
        threads = [
            threading.Thread(
                target=storm.sandbox_thread,
                args=(sb, barrier),
                name=f"sandbox-{sb.index}",
                daemon=True,
            )
            for sb in storm.sandboxes
        ]
        try:
            for t in threads:
                t.start()
            if options.kernel_trace:
                collector = KernelCollector(
                    softirqs=options.softirqs, buffer_size_kb=options.buffer_size_kb
                )
                collector.start()
            meter.start()
            origin_s = time.monotonic()
            barrier.wait()
            for t in threads:
                while t.is_alive():
                    t.join(timeout=0.2)
            meter.stop()
        except BaseException:
            meter.stop()
            storm.stop.set()
            barrier.abort()
            for sb in storm.sandboxes:  # a VM's reader gets EOF instead of waiting it out
                if sb.proc is not None:
                    with contextlib.suppress(Exception):
                        stop(sb.proc)
            if storm.cni is not None:  # likewise a shim's reader
                storm.cni.interrupt(storm.cni_sandboxes())
            deadline = time.monotonic() + 10.0
            for t in threads:
                if t.is_alive():
                    t.join(timeout=max(0.0, deadline - time.monotonic()))
            raise
        capture = collector.stop() if collector is not None else None
        execs: list[ExecSpan] = []
        if storm.cni is not None:
            # Shims stopped and every ADD DELeted now, so their processes are in the trace.
            storm.cni.teardown(storm.cni_sandboxes())
            execs = storm.cni.execs(storm.cni_sandboxes())
        spans = sorted((s for sb in storm.sandboxes for s in sb.spans), key=lambda s: s.start_s)
        busy_core_s = meter.busy_core_s(origin_s, max(s.end_s for s in spans)) if spans else None
        locks: list[LockSpan] = []
        softirqs = []
        kernel_facts = None
        if capture is not None:
            extra = {
                sb.proc.pid: [
                    (s.start_s, s.end_s, sb.index, s.stage)
                    for s in sb.spans
                    if s.stage == "StartVM"
                ]
                for sb in storm.sandboxes
                if sb.proc is not None
            }
            # The cni runtime's processes (plugins, shims, tc, VMMs), by pid.
            extra.update(exec_owners(spans, execs))
            all_locks = join_contention(
                capture.contentions, spans, namer=LockNamer(read_kallsyms()), extra=extra
            )
            locks, sampled = _sample(all_locks, options.max_lock_spans)
            softirqs = softirq_spans(capture.softirqs)
            kernel_facts = KernelTraceFacts(
                events=capture.event_names,
                buffer_size_kb=capture.buffer_size_kb,
                overrun=capture.overrun,
                lock_spans_seen=len(all_locks),
                lock_spans_written=len(locks),
                softirq_spans_seen=len(softirqs),
                softirq_spans_written=len(softirqs),
                record_tgid=capture.record_tgid,
            )
            if sampled is not None:
                storm.notes.append(sampled)
        made = {
            "netns": len(storm.pool_netns),
            "tap": len(storm.pool_tap),
            "veth": len(storm.pool_veth),
            "netns-veth": len(storm.pool_netns_veth) + len(storm.pool_cni_netns),
        }
        used_pools = {kind: n for kind, n in made.items() if n}
        header = TraceHeader(
            source="testbed",
            clock="monotonic",
            origin_s=origin_s,
            stages=STAGES,
            host=host_facts(),
            busy_core_s=busy_core_s,
            config=options.config,
            scenario=ScenarioFacts(
                sandboxes=options.sandboxes,
                cni=options.variant,
                runtime=options.runtime,
                vm="qemu-microvm" if storm.runner.mode == "qemu-microvm" else "process",
                vm_memory_mib=options.vm_memory_mib
                if storm.runner.mode == "qemu-microvm"
                else None,
                mem_prealloc=options.mem_prealloc and storm.runner.mode == "qemu-microvm",
                netprio_ifpriomap=options.netprio_ifpriomap,
                pools=used_pools,
            ),
            kernel_trace=kernel_facts,
            created_at=datetime.now(UTC),
            notes=tuple(storm.notes),
        )
        trace = Trace(
            header=header,
            spans=tuple(spans),
            locks=tuple(locks),
            softirqs=tuple(softirqs),
            admits=tuple(
                sorted((a for sb in storm.sandboxes for a in sb.admits), key=lambda a: a.start_s)
            ),
            arrivals=tuple(Arrival(sandbox=sb.index, t_s=origin_s) for sb in storm.sandboxes),
            execs=tuple(execs),
        )
        failures = tuple(f"{sb.index}: {sb.error}" for sb in storm.sandboxes if sb.error)
        return StormResult(trace=trace, failures=failures, run=storm.run)
    finally:
        try:
            if collector is not None:
                collector.close()
        finally:
            storm.cleanup()
