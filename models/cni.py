"""The seed-000 CNIs as five stages of kernel and daemon operations.

Each sandbox passes NetNS → AddCNI → Cgroup → AttachIf → StartVM (seed 000
§4.1.1). A stage is built from a few kinds of operation whose costs come from
the profile:

- RTNL-held netlink/ioctl work of four sizes: a link registration or move
  (``link``), a tap/macvtap character device on top of it (``tap_create``), a
  tc qdisc or filter change (``tc``) and a small change or query (``small``);
- net_prio: ``cgroup_mkdir`` onlines the net_prio css under cgroup_mutex and
  takes RTNL inside it (``cgrp_css_online`` walks every netdev under
  ``rtnl_lock``), and the ``ifpriomap`` write takes RTNL alone — the two RTNL
  acquisitions per sandbox that a no-network storm makes (Table 3: 803);
- css_set_lock, a spinlock, at cgroup attach and at every fork of the VMM;
- daemon round trips (containerd, IPAM, ovsdb) as off-CPU sleeps, and the
  single-threaded ovs-vswitchd main loop as a lock around its own work.

How many RTNL operations each CNI makes in each stage is taken from seed 000
Table 3 (acquisitions per storm ÷ 400) and §4.2.2 (share made in AttachIf +
StartVM); see ``RTNL_OPS``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from ..simulator import (
    Cpu,
    Hold,
    LockKind,
    LockSpec,
    Once,
    Pooled,
    Sleep,
    Stage,
    Step,
    Zero,
)
from .profile import CostTable
from .scenario import Scenario

__all__ = [
    "CGROUP_MUTEX",
    "CSS_SET_LOCK",
    "OVS_VSWITCHD",
    "RTNL",
    "RTNL_OPS",
    "STAGES",
    "VMM_TASKS",
    "VPORT_SHARING",
    "RtnlOps",
    "SharedVport",
    "VportSharing",
    "boot_steps",
    "cgroup_steps",
    "cni_stages",
    "guest_touch_bytes",
    "lock_specs",
    "ovs_reconfigure_s",
    "pool_kinds",
    "qos_resend_s",
    "sandbox_plan",
    "virtiofs_steps",
    "vmm_start_steps",
    "vport_creators",
]

STAGES = ("NetNS", "AddCNI", "Cgroup", "AttachIf", "StartVM")

RTNL = "rtnl"
CGROUP_MUTEX = "cgroup_mutex"
CSS_SET_LOCK = "css_set_lock"
OVS_VSWITCHD = "ovs-vswitchd"
BPF_VERIFIER = "bpf_verifier_lock"

MIB = 1024 * 1024

# Tasks the VMM creates as it starts (QEMU's process, a vCPU thread — 0.5 to
# 1 vCPU per sandbox in the seeds — an I/O thread and a vhost worker); each
# fork or clone updates a css_set under css_set_lock (cgroup_post_fork).
VMM_TASKS = 4


@dataclass(frozen=True, kw_only=True, slots=True)
class RtnlOps:
    """RTNL acquisitions one sandbox makes in a stage, by kind.

    ``create``: one ``rtnl_newlink`` of ``device``; its hold depends on the
    device (a veth pair registers two netdevs, an ipvtap adds a character
    device, an ipvlan links to the shared master). ``move``: a netdev into the sandbox's
    namespace; ``dev_change_net_namespace`` calls ``synchronize_net`` under
    RTNL, so it sleeps an RCU grace period holding the lock. ``link``: another
    netdev registration (the namespace's loopback). ``tc``: a qdisc or filter
    change. ``small``: a flag, address or route change, or a query.
    """

    create: int = 0
    device: str = ""
    move: int = 0
    link: int = 0
    tc: int = 0
    small: int = 0

    @property
    def total(self) -> int:
        return self.create + self.move + self.link + self.tc + self.small


# Per sandbox and stage, besides the two net_prio acquisitions every CNI makes
# (css_online in Cgroup, the ifpriomap write in StartVM) and the vPort's own
# link (once per vPort). Totals per sandbox, ×400, against Table 3, and the
# AttachIf+StartVM share against §4.2.2:
#   veth 50 (20 000 vs 19 992; 31/50 = 62% vs 62.3%)
#   ipvlan 41 (16 400 vs 16 542; 31/41 = 76% vs 74.7%)
#   ipvtap 15 (6 000 vs 6 105; 9/15 = 60% vs > 59.0%)
#   tc-routing 47 (18 800 vs 18 859; 33/47 = 70% vs 69.7%)
#   no-network 2 (800 vs 803)
# vhost-user passes a virtio-net device straight to the guest: no netdev, so
# only NetNS and net_prio take RTNL. eBPF is veth plus a tc-attached program.
RTNL_OPS: dict[str, dict[str, RtnlOps]] = {
    "no-network": {},
    "veth": {
        "NetNS": RtnlOps(link=1),
        "AddCNI": RtnlOps(create=1, device="veth", move=1, small=14),
        "AttachIf": RtnlOps(create=1, device="tap", tc=4, small=14),
        "StartVM": RtnlOps(small=11),
    },
    "ipvlan": {
        "NetNS": RtnlOps(link=1),
        "AddCNI": RtnlOps(create=1, device="ipvlan", move=1, small=6),
        "AttachIf": RtnlOps(create=1, device="tap", tc=4, small=14),
        "StartVM": RtnlOps(small=11),
    },
    "ipvtap": {
        "NetNS": RtnlOps(link=1),
        "AddCNI": RtnlOps(create=1, device="ipvtap", move=1, small=2),
        "AttachIf": RtnlOps(small=2),
        "StartVM": RtnlOps(small=6),
    },
    "tc-routing": {
        "NetNS": RtnlOps(link=1),
        "AddCNI": RtnlOps(create=1, device="veth", move=1, tc=4, small=6),
        "AttachIf": RtnlOps(create=1, device="tap", tc=6, small=14),
        "StartVM": RtnlOps(small=11),
    },
    "vhost-user": {
        "NetNS": RtnlOps(link=1),
    },
    "ebpf": {
        "NetNS": RtnlOps(link=1),
        "AddCNI": RtnlOps(create=1, device="veth", move=1, tc=2, small=14),
        "AttachIf": RtnlOps(create=1, device="tap", tc=4, small=14),
        "StartVM": RtnlOps(small=11),
    },
}


def _with_device(ops: RtnlOps, old: str, new: str) -> RtnlOps:
    return replace(ops, device=new) if ops.device == old else ops


# macvlan/macvtap: ipvlan/ipvtap's procedure on another device type.
RTNL_OPS["macvlan"] = {
    st: _with_device(o, "ipvlan", "macvlan") for st, o in RTNL_OPS["ipvlan"].items()
}
RTNL_OPS["macvtap"] = {
    st: _with_device(o, "ipvtap", "macvtap") for st, o in RTNL_OPS["ipvtap"].items()
}

#: How a networked software CNI maps pods to vPorts (seed 000 §3.1, Fig. 4):
#: one per pod (``direct``), one per tenant (single-tenant sharing) or one for
#: the node (multi-tenant sharing).
VportSharing = Literal["direct", "per-tenant", "node"]
VPORT_SHARING: dict[str, VportSharing] = {
    "veth": "direct",
    "vhost-user": "direct",
    "ebpf": "direct",
    "ipvlan": "per-tenant",
    "macvlan": "per-tenant",
    "ipvtap": "per-tenant",
    "macvtap": "per-tenant",
    "tc-routing": "node",
}
_DIRECT = frozenset(c for c, m in VPORT_SHARING.items() if m == "direct")
_PER_TENANT = frozenset(c for c, m in VPORT_SHARING.items() if m == "per-tenant")
_SHARED = frozenset(c for c, m in VPORT_SHARING.items() if m == "node")

# The device a CNI pools besides netns and vPort (seed 000 §5.1, Fig. 14).
_PRIMARY_DEVICE = {
    "veth": "veth",
    "ipvlan": "ipvlan",
    "macvlan": "macvlan",
    "ipvtap": "ipvtap",
    "macvtap": "macvtap",
    "tc-routing": "veth",
    "ebpf": "veth",
}


def lock_specs(costs: CostTable, rtnl_priority: dict[str, int]) -> list[LockSpec]:
    """The locks of the node, in a fixed order (cgroup_mutex before RTNL).

    The kernel's mutexes hand over as the profile says: FIFO with a
    ``wake_s`` of 0, else as Linux does (a release wakes the next waiter and
    a running task may steal the lock meanwhile); cgroup_mutex may have its
    own (``cgroup_mutex_wake_s``). An explicit RTNL priority order is a
    controlled hand-off instead. ovs-vswitchd's main loop serves requests in
    order.
    """
    wake_s = costs.mutex_wake_s
    return [
        LockSpec(name=CGROUP_MUTEX, wake_s=costs.cgroup_mutex_wake_s or wake_s),
        LockSpec(
            name=RTNL,
            spin_s=costs.rtnl_spin_s,
            wake_s=0.0 if rtnl_priority else wake_s,
            stage_priority=tuple(sorted(rtnl_priority.items())),
        ),
        LockSpec(name=CSS_SET_LOCK, kind=LockKind.SPIN),
        LockSpec(name=OVS_VSWITCHD),
        LockSpec(name=BPF_VERIFIER, wake_s=wake_s),
    ]


def cni_stages(cni: str) -> tuple[str, ...]:
    """The stages a CNI's sandboxes pass through (no-network has no network stages)."""
    if cni == "no-network":
        return ("Cgroup", "StartVM")
    return STAGES


def vport_creators(cni: str, tenants: int) -> int:
    """How many shared vPorts a storm makes (each by whichever of its
    sandboxes comes first, see :class:`SharedVport`): one per tenant in
    single-tenant sharing mode, one for the node in multi-tenant sharing
    mode. Direct-mode sandboxes each make their own and are not counted."""
    if cni in _PER_TENANT:
        return tenants
    if cni in _SHARED:
        return 1
    return 0


def _vports_ahead(scenario: Scenario) -> tuple[float, float]:
    """Over a storm's vPorts: the vPorts ahead of each, summed (what each of
    its rules' reconfigurations walks), and the same for its creations
    (pooled vPorts, as if the first sandboxes took them, make none)."""
    n = scenario.sandboxes
    shared = min(vport_creators(scenario.cni, scenario.tenants), n)
    vports = n if scenario.cni in _DIRECT else shared
    pooled = min(scenario.pools.get("vport", 0), vports)
    earlier = vports * (vports - 1) / 2
    return earlier, earlier - pooled * (pooled - 1) / 2


def ovs_reconfigure_s(scenario: Scenario, costs: CostTable) -> float:
    """vswitchd's work in a storm that grows with the vPorts already on the
    bridge: each database change (a vPort's creation, each of its rules)
    walks every port ahead (``ovs_reconfigure_per_port_s``, kernel netdevs
    only: vhost-user's DPDK ports were not measured) and re-sends their QoS
    rules (:func:`qos_resend_s`, included). Quadratic in the vPorts."""
    if scenario.cni in ("vhost-user", "no-network"):
        return 0.0
    earlier, creations = _vports_ahead(scenario)
    walk = costs.ovs_reconfigure_per_port_s * (scenario.qos_rules * earlier + creations)
    return walk + qos_resend_s(scenario, costs)


def qos_resend_s(scenario: Scenario, costs: CostTable) -> float:
    """vswitchd's work in a storm re-sending the QoS rules of earlier vPorts.

    The k-th vPort's database changes (its creation, then each rule) each
    re-send the rules of the k vPorts before it (:meth:`_Ops.vport`), so
    this grows as the square of the vPorts with QoS: per pod for direct-mode
    CNIs, per tenant for sharing ones. Pooled vPorts skip the creation, as if
    the first sandboxes took them. QoS in DPDK (vhost-user) re-sends nothing.
    """
    if scenario.qos_rules == 0 or scenario.cni in ("vhost-user", "no-network"):
        return 0.0
    earlier, creations = _vports_ahead(scenario)
    rules = scenario.qos_rules
    return costs.ovs_qos_resend_s * rules * (rules * earlier + creations)


def pool_kinds(cni: str) -> tuple[str, ...]:
    """Device kinds a CNI can take from a pool: netns, vPort and its own device."""
    if cni == "no-network":
        return ()
    primary = _PRIMARY_DEVICE.get(cni)
    return ("netns", "vport", primary) if primary else ("netns", "vport")


class _Ops:
    """Builds steps from the profile's costs."""

    def __init__(self, costs: CostTable, pools: dict[str, int]) -> None:
        self.c = costs
        self.pools = pools

    def rtnl(self, hold_s: float, label: str, n: int = 1) -> tuple[Step, ...]:
        return tuple(Hold(RTNL, (Cpu(hold_s, label),)) for _ in range(n))

    def rtnl_ops(self, ops: RtnlOps | None) -> tuple[Step, ...]:
        if ops is None:
            return ()
        c = self.c
        create: tuple[Step, ...] = ()
        if ops.create:
            hold_s = c.rtnl_create_hold_s[ops.device]
            create = self.rtnl(hold_s, f"create {ops.device}", ops.create)
        move = tuple(
            Hold(RTNL, (Cpu(c.rtnl_link_hold_s, "move"), Sleep(c.rcu_grace_s, "synchronize_net")))
            for _ in range(ops.move)
        )
        return (
            create
            + move
            + self.rtnl(c.rtnl_link_hold_s, "link", ops.link)
            + self.rtnl(c.rtnl_tc_hold_s, "tc", ops.tc)
            + self.rtnl(c.rtnl_small_hold_s, "small", ops.small)
        )

    def pooled(self, kind: str, create: tuple[Step, ...]) -> tuple[Step, ...]:
        """``create`` unless the scenario pools ``kind``, then a fetch while they last."""
        if self.pools.get(kind, 0) <= 0:
            return create
        return (Pooled(kind, create=create, fetch=(Sleep(self.c.pool_fetch_s, f"fetch {kind}"),)),)

    def vport(
        self,
        qos_rules: int,
        qos_in_kernel: bool,
        kernel_port: bool,
        *,
        index: int | None = None,
    ) -> tuple[tuple[Step, ...], tuple[Step, ...]]:
        """Create a vPort on OVS, and configure its QoS rules: (port, rules).

        ovs-vswitchd serialises its own work (one main loop); a kernel-datapath
        port costs one link registration under RTNL, and each QoS rule on such
        a port costs two tc changes under RTNL (seed 000's pair: ingress policing,
        a qdisc and a filter; egress shaping, an HTB qdisc and class).
        With DPDK (vhost-user) QoS stays in user space (seed 000 §4.1.2).

        Each database change here (the port, each rule) makes vswitchd
        reconfigure the bridge: each port on it costs
        ``ovs_reconfigure_per_port_s``, and every kernel QoS rule on it is sent
        again (``ovs_qos_resend_s`` per rule; both ``benchmarks/bench_ovs_qos.py``).
        The vPorts made before this one are on the bridge, each with
        ``qos_rules`` rules, so the storm's OVS work grows as N². This is the
        ``index``-th vPort (a shared one's number), or, if ``None``, the
        sandbox's own in program order
        (per pod for veth). The kernel's part of the re-send
        (``ovs_qos_resend_rtnl_s`` per rule: the qdisc and class messages)
        holds RTNL, once per reconfiguration.
        """
        c = self.c
        resend = c.ovs_qos_resend_s * qos_rules if qos_in_kernel else 0.0
        resend_rtnl = c.ovs_qos_resend_rtnl_s * qos_rules if qos_in_kernel else 0.0
        # Per vPort ahead, each reconfiguration walks its port (a kernel netdev:
        # DPDK ports were not measured) and re-sends its rules.
        walk = c.ovs_reconfigure_per_port_s if kernel_port else 0.0
        ahead = walk + resend - resend_rtnl

        def grown(base_s: float, growth_s: float, label: str) -> Sleep:
            if index is None:
                return Sleep(base_s, label, growth_s=growth_s)
            return Sleep(base_s + index * growth_s, label)

        # The kernel part of the re-send holds RTNL: one hold per
        # reconfiguration, as if vswitchd, running, took RTNL again for each
        # message ahead of the sleeping waiters (it sends them back to back).
        resent_tc: tuple[Step, ...] = ()
        if resend_rtnl > 0.0:
            resent_tc = (Hold(RTNL, (grown(0.0, resend_rtnl, "resent tc"),)),)
        port: tuple[Step, ...] = (
            Sleep(c.ovsdb_txn_s, "ovsdb"),
            Hold(
                OVS_VSWITCHD,
                (grown(c.ovs_port_add_s, ahead, "port add"), *resent_tc),
            ),
        )
        if kernel_port:
            port += self.rtnl(c.rtnl_link_hold_s, "vport link")
        rules: tuple[Step, ...] = ()
        for _ in range(qos_rules):
            if qos_in_kernel:
                # vswitchd applies the rule's tc changes from its main loop:
                # it waits for RTNL while every other OVS request waits for it.
                rule = (
                    grown(c.ovs_qos_s, ahead, "qos"),
                    *resent_tc,
                    *self.rtnl(c.rtnl_tc_hold_s, "qos tc", 2),
                )
            else:
                rule = (grown(c.ovs_dpdk_qos_s, ahead, "dpdk qos"),)
            rules += (Hold(OVS_VSWITCHD, rule),)
        return self.pooled("vport", port), rules


@dataclass(frozen=True)
class SharedVport:
    """The vPort a sandbox shares: its tenant's, or the node's (tc-routing).

    Whichever of its ``sandboxes`` comes first makes it (and its QoS rules);
    the others wait until it exists, since their devices hang off it (an
    ipvlan slave's parent, a tc redirect's target). ``name`` is its signal
    gate and ticket pool; it is the ``index``-th shared vPort made.
    """

    name: str
    index: int
    sandboxes: int


# CNIs that leave one netdev per pod in the host namespace (the host end of a
# veth pair); ipvlan/ipvtap slaves and taps move into the pod's namespace.
_HOST_NETDEV_PER_POD = frozenset({"veth", "tc-routing", "ebpf"})


def cgroup_steps(costs: CostTable, *, netdev_growth: bool) -> tuple[Step, ...]:
    """mkdir of the sandbox's cgroup (net_prio onlines under cgroup_mutex and
    takes RTNL inside it), then the attach of its tasks (css_set_lock).

    ``netdev_growth``: each earlier pod left a netdev in init_net that the
    net_prio online walks.
    """
    c = costs
    return (
        Hold(
            CGROUP_MUTEX,
            (
                Cpu(c.cgroup_mkdir_cpu_s, "mkdir"),
                Hold(
                    RTNL,
                    (
                        Cpu(
                            c.netprio_hold_s,
                            "netprio online",
                            growth_s=c.netprio_per_netdev_s if netdev_growth else 0.0,
                        ),
                    ),
                ),
            ),
        ),
        Hold(
            CGROUP_MUTEX,
            (
                Cpu(c.cgroup_attach_cpu_s, "attach"),
                Hold(CSS_SET_LOCK, (Cpu(c.css_set_hold_s, "css_set"),)),
            ),
        ),
    )


def vmm_start_steps(costs: CostTable) -> tuple[Step, ...]:
    """The VMM forks and spawns its threads (one css_set update each); Kata
    applies the sandbox's cgroup resources, whose net_prio ifpriomap write
    takes RTNL (outside cgroup_mutex)."""
    c = costs
    return (
        *(Hold(CSS_SET_LOCK, (Cpu(c.css_set_hold_s, "fork"),)) for _ in range(VMM_TASKS)),
        Hold(RTNL, (Cpu(c.netprio_hold_s, "ifpriomap"),)),
    )


def virtiofs_steps(costs: CostTable) -> tuple[Step, ...]:
    """virtiofsd starts and the guest mounts the shared file system (seed 001
    step 2-virtiofs); a profile that folds it into the boot has zero costs.

    virtiofsd sandboxes itself in a new mount namespace, a copy of the host's
    mount table, which every earlier sandbox has added its mounts to: work
    that grows by ``virtiofs_per_sandbox_s`` per sandbox ahead.
    """
    c = costs
    steps: tuple[Step, ...] = ()
    if c.virtiofs_cpu_s > 0.0 or c.virtiofs_per_sandbox_s > 0.0:
        steps += (Cpu(c.virtiofs_cpu_s, "virtiofsd", growth_s=c.virtiofs_per_sandbox_s),)
    if c.virtiofs_s > 0.0:
        steps += (Sleep(c.virtiofs_s, "virtiofs mount"),)
    return steps


def guest_touch_bytes(costs: CostTable, memory_mib: float) -> float:
    """Guest memory written while the microVM boots: the regions the VMM
    loads (firmware, kernel), what the kernel touches, and its memmap."""
    c = costs
    touched_mib = c.vmm_loaded_mib + c.guest_boot_touch_mib + c.guest_memmap_fraction * memory_mib
    return min(touched_mib, memory_mib) * MIB


def boot_steps(costs: CostTable, *, touch_bytes: float) -> tuple[Step, ...]:
    """Guest boot (on the sandbox's vCPUs, within its CPU quota), the first
    touch of ``touch_bytes`` not yet zeroed (zeroed as they fault in), then
    the agent's handshake."""
    c = costs
    steps: tuple[Step, ...] = (Cpu(c.vm_boot_cpu_s, "boot", guest=True),)
    if touch_bytes > 0.0:
        steps += (Zero(touch_bytes, "first touch"),)
    return (*steps, Sleep(c.vm_boot_sleep_s, "agent"))


def sandbox_plan(
    scenario: Scenario, costs: CostTable, *, shared_vport: SharedVport | None = None
) -> tuple[Stage, ...]:
    """The stages of one sandbox.

    ``shared_vport``: the vPort it shares (sharing-mode CNIs); ``None`` for
    direct mode, where each sandbox makes its own.
    ``cgrp_css_online`` sets a priority on every netdev of init_net under
    RTNL; veth-based CNIs leave one there per earlier pod (sandboxes reach
    Cgroup in about program order), so the walk grows through the storm.
    """
    cni = scenario.cni
    ops = RTNL_OPS[cni]
    b = _Ops(costs, scenario.pools)
    c = costs
    stages: dict[str, tuple[Step, ...]] = {}
    rpc: tuple[Step, ...] = (Sleep(c.containerd_rpc_s, "containerd"),)

    if cni != "no-network":
        stages["NetNS"] = rpc + b.pooled(
            "netns", (Cpu(c.netns_create_cpu_s, "setup_net"), *b.rtnl_ops(ops.get("NetNS")))
        )

        add: tuple[Step, ...] = rpc + (Sleep(c.ipam_s, "ipam"),)
        primary = _PRIMARY_DEVICE.get(cni)
        device_ops = b.rtnl_ops(ops.get("AddCNI"))
        if cni == "ebpf":
            # The program is recompiled for each pod (§4.1.1) and verified
            # under the kernel's global verifier mutex.
            add += (
                Cpu(c.bpf_compile_cpu_s, "bpf compile"),
                Hold(BPF_VERIFIER, (Cpu(c.bpf_verify_hold_s, "bpf verify"),)),
            )
        device = b.pooled(primary, device_ops) if primary else device_ops
        if cni in _DIRECT:
            kernel = cni != "vhost-user"
            port, rules = b.vport(scenario.qos_rules, qos_in_kernel=kernel, kernel_port=kernel)
            add += device + port + rules
        else:
            if shared_vport is None:
                raise ValueError(f"a sharing-mode CNI ({cni}) needs `shared_vport`")
            port, rules = b.vport(
                scenario.qos_rules, qos_in_kernel=True, kernel_port=True, index=shared_vport.index
            )
            waiters = shared_vport.sandboxes - 1
            add += (Once(shared_vport.name, body=port, waiters=waiters, after=rules), *device)
        # Security groups are OVS flows, one ovs-ofctl call per rule: the
        # client's own work, then vswitchd's (its main loop serves one at a time).
        # A profile without the client's cost (ovs_ofctl_cpu_s: 0) gets no
        # empty CPU step per rule: steps are events in the executors.
        client: tuple[Step, ...] = (
            (Cpu(c.ovs_ofctl_cpu_s, "ovs-ofctl"),) if c.ovs_ofctl_cpu_s > 0.0 else ()
        )
        sg_flow = (*client, Hold(OVS_VSWITCHD, (Sleep(c.ovs_flow_mod_s, "sg flow"),)))
        add += sg_flow * scenario.sg_rules
        stages["AddCNI"] = add

    stages["Cgroup"] = rpc + cgroup_steps(costs, netdev_growth=cni in _HOST_NETDEV_PER_POD)

    if cni != "no-network":
        stages["AttachIf"] = rpc + b.rtnl_ops(ops.get("AttachIf"))

    start: tuple[Step, ...] = (
        *rpc,
        *vmm_start_steps(costs),
        *b.rtnl_ops(ops.get("StartVM")),
        *virtiofs_steps(costs),
    )
    if cni == "vhost-user":
        # vhost-user shares guest memory with OVS-DPDK: it is backed by
        # hugepages that are allocated (zeroed) up front, and vswitchd sets
        # up each vhost-user socket in its main loop.
        start += (
            Zero(scenario.memory_mib * MIB, "guest memory"),
            Hold(OVS_VSWITCHD, (Sleep(c.vhost_user_setup_s, "vhost-user"),)),
        )
    # Guest memory is allocated lazily: the pages the boot touches are zeroed
    # as they fault in (vhost-user zeroed them all above).
    touched = 0.0 if cni == "vhost-user" else guest_touch_bytes(costs, scenario.memory_mib)
    start += boot_steps(costs, touch_bytes=touched)
    stages["StartVM"] = start

    return tuple(
        Stage(name, stages[name], gate=name if name in scenario.limits else None)
        for name in cni_stages(cni)
    )
