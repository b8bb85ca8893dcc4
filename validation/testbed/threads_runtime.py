"""The ``threads`` runtime: each sandbox's thread makes its kernel objects itself.

Through in-process netlink (pyroute2), as a Kata sandbox's network start
does them (seed 000 §4.1.1):

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
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyroute2 import IPRoute

from ...traces import ExecSpan, StageSpan
from .._names import CGROUP_PARENT
from .._netns import create_netns_here, entered
from ._cgroup import add_process, netprio_root, remove_tree, write_ifpriomap
from ._errors import TestbedError
from ._namespaced import NamespacedRuntime, NamespacedSandbox
from ._tap import TUNSETIFF, TUNSETPERSIST, attach_tap, ifreq
from ._vm import stop
from .admission import Admission, LocalAdmission
from .runtime import Owner, StormContext, register_runtime

__all__ = ["ThreadsRuntime", "ThreadsSandbox"]

_ETH_P_ALL = 0x0003
_INGRESS = 0xFFFF0000
_INNER_IF = "eth0"
_TAP_IF = "tap0"
_INNER_ADDR = ("10.88.0.2", 16)  # every sandbox the same: the namespaces are isolated


@dataclass(kw_only=True)
class ThreadsSandbox(NamespacedSandbox):
    """One sandbox's objects, for its stages and for cleanup."""

    #: The host end of the veth pair that came with a ``netns-veth`` namespace
    #: (it keeps its pool name); None when the sandbox made or moved its own.
    host_end: str | None = None
    ns_ipr: Any = None
    host_ipr: Any = None
    tap_fd: int | None = None
    netprio: Path | None = None
    proc: Any = None


@register_runtime
class ThreadsRuntime(NamespacedRuntime[ThreadsSandbox]):
    """Every kernel object made by the sandbox's own thread (module doc)."""

    name = "threads"

    def __init__(self, *, context: StormContext) -> None:
        super().__init__(context=context)
        self.pool_tap: list[str] = []  # made for the storm; those taken move into a namespace
        self.pool_veth: list[tuple[str, str]] = []  # (host end, peer), likewise
        # (namespace, host end): the peer is inside the namespace already.
        self.pool_netns_veth: list[tuple[str, str]] = []
        self.netprio_run: Path | None = None
        self.vport_index: int | None = None  # the macvtap endpoints' shared parent
        # Ask for a netns-veth namespace first: with a veth endpoint, unless
        # the config says it pools none (an agent without a config may).
        pools = self.options.config.pools if self.options.config else None
        self._wants_netns_veth = self.options.endpoint == "veth" and (
            pools is None or pools.get("netns-veth", 0) > 0
        )

    def new_sandbox(self, *, index: int) -> ThreadsSandbox:
        return ThreadsSandbox(index=index)

    # -- preparation ---------------------------------------------------------

    def prepare(self, *, admission: Admission, cgroup_run: Path) -> Admission:
        self.admission, self.cgroup_run = admission, cgroup_run
        opts = self.options
        if opts.netprio_ifpriomap:
            self.netprio_run = netprio_root() / CGROUP_PARENT / self.context.run
            os.makedirs(self.netprio_run, exist_ok=False)
            self.notes.append("net_prio ifpriomap written in Cgroup (RTNL under cgroup ops)")
        if opts.endpoint == "macvtap":
            self._make_vport()
        pools = opts.config.pools if opts.config else {}
        n_netns = min(pools.get("netns", 0), opts.sandboxes)
        # The endpoint's own kind can come from a pool too (not the macvtap:
        # its parent is the run's).
        endpoint = opts.endpoint
        emulated = {"netns", endpoint} if endpoint in ("veth", "tap") else {"netns"}
        n_tap = min(pools.get("tap", 0), opts.sandboxes) if "tap" in emulated else 0
        n_veth = min(pools.get("veth", 0), opts.sandboxes) if "veth" in emulated else 0
        # A namespace with its veth pair's peer inside: a sandbox takes one
        # before it looks at the netns and veth pools (they serve those that
        # find it empty).
        if endpoint == "veth":
            emulated.add("netns-veth")
        n_nv = min(pools.get("netns-veth", 0), opts.sandboxes) if endpoint == "veth" else 0
        for kind in sorted(set(pools) - emulated):
            self.notes.append(f"pool {kind!r} of the config is not emulated by the testbed")
        if (n_netns or n_tap or n_veth or n_nv) and self.context.own_admission:
            self.make_netns_pool(n_netns)
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
                limits=opts.config.limits if opts.config else {},
                pools={"netns": self.pool_netns, "tap": list(self.pool_tap)},
                pairs={"veth": list(self.pool_veth), "netns-veth": list(self.pool_netns_veth)},
            )
        return self.admission

    def _make_vport(self) -> None:
        """The shared parent: a veth pair standing in for the tenant's vPort."""
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

    def setup_sandbox(self, *, sandbox: ThreadsSandbox) -> None:
        sandbox.host_ipr = IPRoute()  # a CNI plugin's own netlink socket, made before the storm

    # -- the stages ----------------------------------------------------------

    def netns(self, sb: ThreadsSandbox, /) -> None:
        assert self.admission is not None
        if self._wants_netns_veth:
            both = self.took(sb, "netns-veth", self.admission.take_netns_veth(self.holder(sb)))
            if both is not None:
                netns, sb.host_end = both
                self.open_netns(sb, netns)
                return
        self.pooled_or_new_netns(sb)

    def add_cni(self, sb: ThreadsSandbox, /) -> None:
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

    def _move_in(self, sb: ThreadsSandbox, name: str) -> None:
        """Move host link ``name`` into the sandbox's namespace as its endpoint
        (RTNL, and ``synchronize_net`` under it)."""
        host = sb.host_ipr
        (idx,) = host.link_lookup(ifname=name)
        host.link("set", index=idx, net_ns_fd=sb.ns_fd, ifname=_INNER_IF)

    def _veth(self, sb: ThreadsSandbox) -> None:
        """A veth pair: the one that came with a ``netns-veth`` namespace,
        taken from the pool, or made with its peer in the namespace or on the
        host and moved in; the host end up."""
        assert self.admission is not None
        host = sb.host_ipr
        if sb.host_end is not None:
            # Made before the storm with its peer inside: nothing to make or
            # move, and no rename (RTNL): the host end keeps its pool name.
            (hidx,) = host.link_lookup(ifname=sb.host_end)
            host.link("set", index=hidx, state="up")
            return
        host_link = self.names.host_link(sb.index)
        pair = self.took(sb, "veth", self.admission.take_pair("veth", self.holder(sb)))
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

    def _tap(self, sb: ThreadsSandbox) -> None:
        """A persistent tap: taken from the pool and moved in, or made in the namespace."""
        assert self.admission is not None
        pooled = self.took(sb, "tap", self.admission.take("tap", self.holder(sb)))
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

    def _macvtap(self, sb: ThreadsSandbox) -> None:
        """A macvtap on the shared parent, made on the host (a host-unique
        ifindex, so a unique ``/dev/tapN``) and moved in."""
        made = self.names.endpoint(sb.index)
        sb.host_ipr.link(
            "add", ifname=made, kind="macvtap", link=self.vport_index, macvtap_mode="bridge"
        )
        self._move_in(sb, made)

    def cgroup(self, sb: ThreadsSandbox, /) -> None:
        self.make_cgroup(sb)
        if self.netprio_run is not None:
            sb.netprio = self.netprio_run / f"sb{sb.index}"
            sb.netprio.mkdir()
            write_ifpriomap(sb.netprio, sb.host_end or self.names.host_link(sb.index), 1)

    def attach_if(self, sb: ThreadsSandbox, /) -> None:
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

    def start_vm(self, sb: ThreadsSandbox, /) -> None:
        assert sb.netns is not None
        sb.proc = self.runner.start(name=self.names.vm(sb.index), netns=sb.netns, tap_fd=sb.tap_fd)
        if sb.cgroup is not None:
            add_process(sb.cgroup, sb.proc.pid)  # as Kata moves its VMM: css_set_lock
        self.runner.wait_up(sb.proc, name=self.names.vm(sb.index))

    def end_sandbox(self, *, sandbox: ThreadsSandbox) -> None:
        for ipr in (sandbox.ns_ipr, sandbox.host_ipr):
            if ipr is not None:
                with contextlib.suppress(Exception):
                    ipr.close()
        sandbox.ns_ipr = sandbox.host_ipr = None

    def stop_vm(self, *, sandbox: ThreadsSandbox) -> None:
        """Its VMM stopped (the stub guest has exited already, as a rule)
        and the VM's tap fd closed, as a VMM's exit closes it: AttachIf's
        tap goes with it (RTNL); the namespace and the veth stay for teardown."""
        if sandbox.proc is not None:
            with contextlib.suppress(Exception):
                stop(sandbox.proc)
        if sandbox.tap_fd is not None:
            with contextlib.suppress(OSError):
                os.close(sandbox.tap_fd)
            sandbox.tap_fd = None

    # -- after the storm -----------------------------------------------------

    def interrupt(self, *, sandboxes: Sequence[ThreadsSandbox]) -> None:
        for sb in sandboxes:  # a VM's reader gets EOF instead of waiting it out
            if sb.proc is not None:
                with contextlib.suppress(Exception):
                    stop(sb.proc)

    def kernel_owners(
        self,
        *,
        sandboxes: Sequence[ThreadsSandbox],
        spans: Iterable[StageSpan],
        execs: Iterable[ExecSpan],
    ) -> Mapping[int, list[Owner]]:
        """Each VMM owns its sandbox's StartVM span (its own RTNL and css_set_lock waits)."""
        return {
            sb.proc.pid: [
                (s.start_s, s.end_s, sb.index, s.stage) for s in sb.spans if s.stage == "StartVM"
            ]
            for sb in sandboxes
            if sb.proc is not None
        }

    def pools_made(self) -> dict[str, int]:
        made = {
            "netns": len(self.pool_netns),
            "tap": len(self.pool_tap),
            "veth": len(self.pool_veth),
            "netns-veth": len(self.pool_netns_veth),
        }
        return {kind: n for kind, n in made.items() if n}

    def teardown(self, *, sandboxes: Sequence[ThreadsSandbox]) -> None:
        for sb in sandboxes:
            if sb.proc is not None:
                with contextlib.suppress(Exception):
                    stop(sb.proc)
        with IPRoute() as ipr:
            # The shared parent first: its macvtaps still on the host go with it.
            for idx in ipr.link_lookup(ifname=self.names.vport()):
                with contextlib.suppress(Exception):
                    ipr.link("del", index=idx)
            for sb in sandboxes:
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
        for sb in sandboxes:
            if sb.tap_fd is not None:
                with contextlib.suppress(OSError):
                    os.close(sb.tap_fd)
            sb.tap_fd = None
        self.remove_namespaces(
            sandboxes, pooled=[*self.pool_netns, *(netns for netns, _ in self.pool_netns_veth)]
        )
        if self.netprio_run is not None:
            remove_tree(self.netprio_run)
            with contextlib.suppress(OSError):
                self.netprio_run.parent.rmdir()  # our parent, if no other run uses it
