"""The testbed's sandboxes: what ``bootstorm testbed run`` does, as steps.

A testbed sandbox is one Python thread doing seed 000's pipeline with real
kernel operations (``validation/testbed/driver.py``); this catalog is that
thread, operation by operation, so that a profile fitted to one recorded
storm predicts others — another size, a pool, stage limits. Each operation
is a Python call under the GIL (pyroute2 building and parsing the message),
then the kernel's work, under the lock it takes:

- **NetNS**: ``unshare(CLONE_NEWNET)`` (``setup_net``, the loopback under
  RTNL) and the bind mount — or a namespace taken from the pool;
- **AddCNI**: a netlink socket in the namespace, a veth pair (its peer made
  in the namespace, or made on the host and moved in: ``synchronize_net``
  under RTNL) — or one taken from the pool, its peer moved in and its host
  end renamed — both ends up, an address;
- a ``netns-veth`` pool holds namespaces made with their veth pair's peer
  already inside (the host end down on the host): NetNS takes one (a fetch,
  no unshare) and AddCNI only brings both ends up and addresses the peer — no
  creation, no move, no rename. It comes first: a sandbox that finds it empty
  falls back to the ``netns`` and ``veth`` pools (or creates), so in the
  model NetNS's creation branch also makes the veth pair, and AddCNI makes
  none;
- **Cgroup**: ``cgroup_mkdir`` under cgroup_mutex;
- **AttachIf**: ``TUNSETIFF`` (a netdev under RTNL), the tap up, an ingress
  qdisc and a u32 + mirred filter on each of veth and tap (RTNL each);
- **StartVM**: fork/exec of QEMU (under the GIL), the VMM moved into the
  cgroup (cgroup_mutex, css_set_lock), QEMU's tap ioctls (RTNL each), then
  the VMM's and the guest's boot, outside the Python process.

Links brought up make work for the kernel's kworkers (linkwatch, addrconf),
which take RTNL too: a branch per sandbox nobody waits for.

With a lifetime (``Scenario.lifetime_s``, ``testbed run --lifetime-s``),
each VM stops that long after it came up, in a branch nobody waits for:
its VMM and shim exit (``vm_stop_cpu_s``, timed alone after every recorded
storm) and its tap goes under RTNL, on the cores and the lock the starts
still running share. Its namespace and network stay, as the testbed keeps
them to its teardown.

The GIL is a lock like the kernel's: the threads' Python work is serial.

The **CNI runtime** (``testbed run --runtime cni``) starts a sandbox as a
containerd + Kata node does: the sandbox's thread only spawns processes and
waits (a Python call under the GIL each), and the work is theirs:

- **NetNS** as above;
- **AddCNI**: the ``bridge`` plugin (containernetworking-plugins 1.1.1),
  exec'd with the spec's environment: its netlink requests, counted with
  strace on one ADD on this project's host (the seven requests that change
  something take RTNL; its lookups and dumps do not on the kernels that
  run them under RCU): the bridge made (it exists: ``EEXIST``) and up, the
  veth pair made in the namespace with its peer created on the host (no
  move), the host end up, enslaved to the bridge and its hairpin flag set;
  then ``host-local`` exec'd for the address, under its network's file
  lock (which it holds longer per lease the network holds: its disk store
  reads every lease file on each ADD, ``ipam_per_lease_s``); then the
  address and the link up in the namespace. The enslave walks the bridge's
  ports (``enslave_per_port_s`` more under RTNL per port on it), and what
  the new link first sends is flooded to every port and received in each
  port's namespace (``flood_per_port_cpu_s`` of softirq per port, a branch
  nobody waits for): the testbed keeps every sandbox's port to its
  teardown, so sandbox ``i`` finds ``i`` ports;
- **Cgroup** as above;
- **AttachIf**: the shim process (one per sandbox, as Kata's): it starts,
  makes the tap (``TUNSETIFF``), brings it up, and runs ``tc`` four times
  (ingress qdiscs and mirred filters on the veth and the tap);
- **StartVM**: the shim joins the cgroup, forks QEMU, whose tap ioctls take
  RTNL; the VMM's and the guest's boot.

No process of this runtime shares a GIL with another: only the thread's
spawning is serial.

Each plugin the testbed runs (``--cni-plugin``) is a variant of its own
(``testbed-cni-bridge``, ``testbed-cni-ptp``, ``testbed-cni-macvlan``): the
runtime, the shim and the VM are the same, the ADD's requests are the
plugin's (:data:`CNI_ADD_REQUESTS`). They were counted the same way for
each, with ``python experiments/count_cni_netlink.py`` (root; one ADD of
each plugin into a fresh namespace under ``strace -f``, its requests
classified by ``nlmsg_type``: ``RTM_NEW*``, ``RTM_DEL*`` and
``RTM_SETLINK`` take RTNL, ``RTM_GET*`` lookups and dumps do not on this
kernel, 6.18; the sysctls the plugins write take none), on this project's
host on 2026-11-28, containernetworking-plugins 1.1.1:

- ``bridge``: 8 of 17 requests — the bridge (``EEXIST``), the bridge up,
  the veth pair, the host end up, enslaved, its hairpin flag; host-local;
  the address, ``eth0`` up;
- ``ptp``: 9 of 15, all after host-local (ptp asks for the address first):
  the veth pair (made in the namespace, its peer on the host), the host end
  up; in the namespace the address, ``eth0`` up, the kernel's subnet route
  deleted, a route to the gateway and the subnet through it; on the host the
  gateway address on the host end and a route to the sandbox — no bridge,
  no port: a host route per sandbox instead;
- ``macvlan``: 4 of 10 — the macvlan link made on the run's master and
  into the namespace (one netdev: :data:`MACVLAN_PER_VETH_PAIR` of a veth
  pair's creation), renamed to ``eth0``; host-local; the address, ``eth0`` up.

Every other RTNL request is priced as the bridge's small ones are
(``rtnl_small_hold_s``: a link flag, an address, a route are the same kind
of short work under RTNL), the pair as ``rtnl_veth_hold_s``, both execs as
``cni_exec_cpu_s`` and the lease as ``ipam_hold_s``: a profile fitted to
bridge storms predicts the others.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Literal

from ..simulator import Async, Cpu, Hold, LockSpec, Pooled, RcuSync, Sleep, Stage, Step
from ._errors import ConfigError
from .cni import CGROUP_MUTEX, CSS_SET_LOCK, RTNL
from .profile import Profile, TestbedCostTable
from .scenario import Scenario

__all__ = [
    "AGENT_MAKE_CPU_HERE_S",
    "AGENT_REMOVE_CPU_HERE_S",
    "CNI_ADD_REQUESTS",
    "CNI_RUNTIME_COSTS",
    "GIL",
    "IPAM_LOCK",
    "MACVLAN_PER_VETH_PAIR",
    "STOP_RTNL_SLEEP_S",
    "TESTBED_BRIDGE_PORTS",
    "TESTBED_CNIS",
    "TESTBED_POOL_KINDS",
    "TESTBED_STAGES",
    "TRAFFIC_TAIL_CAUTION",
    "TRAFFIC_TAIL_CAUTION_SLICED",
    "TestbedVariant",
    "agent_device_cpu_s",
    "agent_own_make_s",
    "agent_refill_work",
    "agent_removals",
    "growth_cautions",
    "plugin_cautions",
    "refill_worker_cautions",
    "schedule_cautions",
    "stop_cautions",
    "testbed_costs",
    "testbed_lock_specs",
    "testbed_plan",
    "traffic_cautions",
    "uses_agent",
]

TESTBED_STAGES = ("NetNS", "AddCNI", "Cgroup", "AttachIf", "StartVM")
Peer = Literal["in-netns", "moved"]


@dataclass(frozen=True, kw_only=True)
class TestbedVariant:
    """One way the testbed starts a sandbox.

    ``runtime``: ``threads`` (the harness's thread does the kernel operations
    through pyroute2) or ``cni`` (real CNI plugin processes and a shim per
    sandbox); ``peer``: the threads runtime's veth peer, made in the
    namespace or moved in; ``recorded``: the ``scenario.cni`` a trace of it
    names; ``pool_kinds``: what it can take from a pool.
    """

    runtime: Literal["threads", "cni"]
    recorded: str
    peer: Peer = "in-netns"
    pool_kinds: tuple[str, ...] = ("netns", "veth", "netns-veth")
    #: The CNI runtime's main plugin (``testbed run --cni-plugin``).
    plugin: Literal["bridge", "ptp", "macvlan"] = "bridge"


#: The testbed's variants, by the ``cni`` a scenario names.
TESTBED_CNIS: dict[str, TestbedVariant] = {
    "testbed-veth": TestbedVariant(runtime="threads", recorded="veth-peer-in-netns"),
    "testbed-veth-moved": TestbedVariant(
        runtime="threads", recorded="veth-peer-moved", peer="moved"
    ),
    # For the CNI runtime a ``netns-veth`` pool entry is a namespace whose
    # CNI ADD was done before the storm: its interface is plumbed already.
    "testbed-cni-bridge": TestbedVariant(
        runtime="cni", recorded="cni-bridge", pool_kinds=("netns", "netns-veth")
    ),
    "testbed-cni-ptp": TestbedVariant(
        runtime="cni", recorded="cni-ptp", pool_kinds=("netns", "netns-veth"), plugin="ptp"
    ),
    "testbed-cni-macvlan": TestbedVariant(
        runtime="cni",
        recorded="cni-macvlan",
        pool_kinds=("netns", "netns-veth"),
        plugin="macvlan",
    ),
}
#: Pool kinds of the testbed: ``netns-veth`` (a namespace with its veth peer
#: inside) is taken before ``netns`` and ``veth`` (see :func:`testbed_plan`).
TESTBED_POOL_KINDS = ("netns", "veth", "netns-veth")
GIL = "gil"
#: The node agent's own GIL: its HTTP loop serves every call under it, and
#: its refill workers' Python (a device's making) runs under it too; the
#: testbed's GIL is another process's.
AGENT_GIL = "agent-gil"
#: host-local IPAM's lock: a flock on the network's data directory.
IPAM_LOCK = "host-local"
#: The bridge plugin's ADD (containernetworking-plugins 1.1.1), its netlink
#: requests that take RTNL besides the veth pair's creation, before and
#: after the IPAM call (strace of one ADD, see the module's text).
#: The request that puts the sandbox's host end on the bridge.
ENSLAVE = "enslave"
BRIDGE_RTNL_BEFORE_IPAM = ("bridge (EEXIST)", "bridge up", "host end up", ENSLAVE, "hairpin")
BRIDGE_RTNL_AFTER_IPAM = ("address", "eth0 up")
#: The link an ADD creates, by the hold that prices it.
VETH_PAIR = "veth pair"
MACVLAN_LINK = "macvlan link"
#: Each plugin's RTNL-taking netlink requests before and after host-local's
#: exec, the link's creation among them, in the order the plugin sends them
#: (containernetworking-plugins 1.1.1; counted with strace on one ADD each,
#: ``experiments/count_cni_netlink.py``, see the module's text).
CNI_ADD_REQUESTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "bridge": (
        (*BRIDGE_RTNL_BEFORE_IPAM[:2], VETH_PAIR, *BRIDGE_RTNL_BEFORE_IPAM[2:]),
        BRIDGE_RTNL_AFTER_IPAM,
    ),
    "ptp": (
        (),
        (
            VETH_PAIR,
            "host end up",
            "address",
            "eth0 up",
            "subnet route (del)",
            "route to gateway",
            "subnet via gateway",
            "host end address",
            "host route",
        ),
    ),
    "macvlan": ((MACVLAN_LINK, "rename to eth0"), ("address", "eth0 up")),
}
#: A macvlan link's creation under RTNL against a veth pair's (one netdev
#: registered on its master against two): 0.43, the median over 6 runs
#: (0.12-0.52) of the ratio of 50 serial creations' medians (30 in the
#: first), interleaved, each less a netlink no-op's, on this project's host
#: (``python experiments/count_cni_netlink.py --time 50``, 2026-11-28;
#: docs/research-log.md). A profile prices the pair (``rtnl_veth_hold_s``);
#: the macvlan is this share of it.
MACVLAN_PER_VETH_PAIR = 0.43


#: What a what-if of another plugin than the bridge rests on, measured on
#: this project's host (docs/testbed.md, "Another plugin, predicted";
#: tests/calibration/test_cni_plugin_switch.py).
PLUGIN_SWITCH_CAUTION = (
    "{cni}: its ADD is priced from the requests strace counted, with the bridge's costs; "
    "held out (50 and 150 sandboxes, a profile fitted to bridge storms) the makespan and "
    "mean startup came within 10% and the switch from the bridge within 3 points (50; 5 "
    "at 150, 3 rounds), but the model blamed AddCNI for 11-16 points more of the switch "
    "than the host did: read the makespan and mean startup, not AddCNI's share"
)


def plugin_cautions(cni: str, profile: Profile) -> tuple[str, ...]:
    """What a what-if of the CNI runtime with another plugin than the bridge
    should say under its answer: how far such a switch was held out, and,
    where the profile names no storm of that plugin (in ``fitted_on`` or its
    sources), that the answer is a prediction. Nothing for any other CNI."""
    variant = TESTBED_CNIS.get(cni)
    if variant is None or variant.runtime != "cni" or variant.plugin == "bridge":
        return ()
    lines = [PLUGIN_SWITCH_CAUTION.format(cni=cni)]
    storms = profile.fitted_on.storms if profile.fitted_on is not None else ()
    seen = any(variant.recorded in s for s in storms) or any(
        cni in text for text in profile.sources.values()
    )
    if not seen:
        lines.append(
            f"{profile.name} was fitted to no storm of {variant.recorded}: this what-if is "
            f"a prediction from the bridge's costs (`sudo bootstorm calibrate --plan "
            f"--cni-plugin {variant.plugin}` runs one)"
        )
    return tuple(lines)


#: The most sandboxes a testbed storm of the CNI runtime holds on its bridge
#: (the kernel's BR_MAX_PORTS): host-local's growth with the leases held was
#: measured below it (``measure-ops``' HELD_LEASES).
TESTBED_BRIDGE_PORTS = 1_024


def growth_cautions(scenario: Scenario, profile: Profile) -> tuple[str, ...]:
    """What a what-if of the testbed's CNI runtime past a bridge's ports
    should say under its answer when the profile's host-local grows with the
    leases held (``ipam_per_lease_s``) or its bridge with the ports on it
    (``enslave_per_port_s``, ``flood_per_port_cpu_s``): the testbed keeps
    every sandbox's lease and port to its end, a node releases them at each
    stop, so past that many the growth is an extrapolation a node does not
    make."""
    variant = TESTBED_CNIS.get(scenario.cni)
    c = profile.testbed
    if variant is None or variant.runtime != "cni" or c is None:
        return ()
    if scenario.sandboxes <= TESTBED_BRIDGE_PORTS:
        return ()
    ahead = scenario.sandboxes - 1
    grows = []
    if c.ipam_per_lease_s:
        grows.append(
            f"host-local reads every lease on each ADD under its lock "
            f"({c.ipam_per_lease_s * 1e6:.3g} µs each: the last sandbox's lease takes "
            f"{c.ipam_per_lease_s * ahead * 1e3:,.3g} ms more)"
        )
    if variant.plugin == "bridge" and (c.enslave_per_port_s or c.flood_per_port_cpu_s):
        grows.append(
            f"the bridge walks its ports on each enslave and floods a new link's first "
            f"packets to every port ({(c.enslave_per_port_s or 0.0) * 1e6:.3g} µs under RTNL "
            f"and {(c.flood_per_port_cpu_s or 0.0) * 1e6:.3g} µs of CPU each)"
        )
    if not grows:
        return ()
    return (
        f"{scenario.sandboxes:,} sandboxes: the testbed keeps every sandbox's lease and port "
        f"to its end, and {' and '.join(grows)}, measured below {TESTBED_BRIDGE_PORTS:,}; a "
        "node releases them at the sandbox's stop, so it grows with the sandboxes up at once, "
        "not with every start (read this answer as the testbed's, not a node's)",
    )


#: How far a traffic what-if of the testbed's catalog was held out, on this
#: project's host (docs/research-log.md, "Traffic's tail, taken apart",
#: "Traffic's tail is CPU the plan does not see" and "A bridge's ports cost
#: every start", 2026-11-29): a stream in no fit against a profile of
#: ``calibrate --plan``, on two machines of this kind.
TRAFFIC_TAIL_CAUTION = (
    "held out on this project's 2-core host (a 300-s stream in no fit, a profile from "
    "`calibrate --plan` in the same sitting, two sittings, holders pinned to their core as "
    "this profile has them), the model's p99 per window came "
    "24-38% short and its mean startup 35-40% short (with the bridge's growth with its ports "
    "and the VMs' stops; 35-41% and 42-46% without the growth), while empty-pool starts came "
    "within 9% and pooled device-seconds within 2%; the node's own runs of one stream spread "
    "-8% to +51% around their median, and its CPU a start was 123-143 ms against the model's "
    "102-111 (validate's CPU row): read the tail as a lower bound"
)


#: The same, on a profile whose plan measured RTNL's holders time-sliced
#: (``testbed measure-ops``' hold stretch; docs/research-log.md, "A holder
#: does not keep its core", 2026-11-29, "The loop with holders time-sliced",
#: "A ten-minute stream" and "A searched policy, ten minutes", 2026-11-30):
#: four sittings live, three refitted offline from their plans' storms.
TRAFFIC_TAIL_CAUTION_SLICED = (
    "held out on this project's 2-core host (streams of 300 and 600 s in no fit, a profile "
    "from `calibrate --plan` that measured RTNL's holders time-sliced, nine sittings), the "
    "model's p99 per window came 9% long to 42% short, its mean startup 45% short to 17% "
    "long and its whole-run p99 34% short to 30% long (short the most where the plan's "
    "storms ran fast against the stream: its CPU a start 16-26% short), and 133 sandboxes "
    "at once 6-12% short on makespan; through a node agent refilling its pools (six "
    "sittings, nine configs) the p99 per window came 36% short to 17% long, empty-pool "
    "starts within 14% with a static pool of 10, 23% short with a pool of 133 under stage "
    "limits and 47-62% short with a pool of 10 refilled under stage limits (the node's "
    "refill 28% slower than the model's), and pooled device-seconds within 7%; of two "
    "searched policies the model had meet a p99 SLO, one "
    "missed it on the node (2 s: 3.4 s with two refill workers, 2.5 s with one), one met "
    "it (3 s: 2.9 s); the node's own runs of one stream spread -8% to +51% around their "
    "median: read the tail as a lower bound"
)


def refill_worker_cautions(scenario: Scenario) -> tuple[str, ...]:
    """More than one refill worker on a schedule of the testbed's catalog:
    measured twice, the second one cost the node's starts far more than the
    model has it (docs/research-log.md, "A searched policy, ten minutes"
    and "The agent's start count, and a policy that met its SLO",
    2026-11-30), so a search that picks it picks it on a cost unseen."""
    refill = scenario.pool_refill
    if refill is None or refill.concurrency < 2:
        return ()
    return (
        f"{refill.concurrency} refill workers: held out on this project's host, a second "
        "refill worker took the node's whole-run p99 from 2.46 to 3.37 s and from 2.87 to "
        "4.86 s (two searched policies), where the model had 2.26 -> 2.26 s and 3.73 -> "
        "4.39 s (each refill is a whole CNI ADD on the starts' cores): weigh a second worker "
        "by a run on the node (`tune --workload`), not by this answer",
    )


def agent_device_cautions(scenario: Scenario, profile: Profile) -> tuple[str, ...]:
    """Plumbed namespaces refilled by a node agent on a profile that did not
    measure the agent's own CPU for them: priced as this project's host
    measured it, which another host need not match."""
    c = profile.testbed
    variant = TESTBED_CNIS.get(scenario.cni)
    if (
        c is None
        or variant is None
        or variant.runtime != "cni"
        or scenario.pool_refill is None
        or scenario.pools.get("netns-veth", 0) <= 0
        or (c.agent_make_cpu_s is not None and c.agent_remove_cpu_s is not None)
    ):
        return ()
    return (
        f"profile {profile.name!r} did not measure a node agent's own CPU per plumbed namespace "
        f"it refills: priced as this project's 2-core host measured it "
        f"({AGENT_MAKE_CPU_HERE_S * 1e3:.3g} ms a making, {AGENT_REMOVE_CPU_HERE_S * 1e3:.3g} ms "
        "a removal); `bootstorm testbed measure-ops` (in `calibrate --plan`) measures this "
        "node's",
    )


def schedule_cautions(scenario: Scenario, profile: Profile) -> tuple[str, ...]:
    """What a what-if of the testbed's catalog on a schedule of starts says
    under its answer for the schedule itself: how far its tail was held out
    (the node's CPU a start grows under traffic further than the bridge's
    measured growth explains; with holders pinned, further short), and
    :func:`refill_worker_cautions`, :func:`agent_device_cautions`,
    :func:`stop_cautions`. Nothing for another
    catalog or a storm released at once."""
    if scenario.cni not in TESTBED_CNIS or scenario.arrival_s is None:
        return ()
    sliced = profile.testbed is not None and profile.testbed.kernel_holders_pinned is False
    return (
        TRAFFIC_TAIL_CAUTION_SLICED if sliced else TRAFFIC_TAIL_CAUTION,
        *refill_worker_cautions(scenario),
        *agent_device_cautions(scenario, profile),
        *stop_cautions(scenario, profile),
    )


def traffic_cautions(scenario: Scenario, profile: Profile) -> tuple[str, ...]:
    """Everything a traffic what-if of the testbed's catalog says under its
    answer: :func:`schedule_cautions` and, past a bridge's ports,
    :func:`growth_cautions`. Nothing for another catalog or a storm released
    at once."""
    schedule = schedule_cautions(scenario, profile)
    return (*schedule, *growth_cautions(scenario, profile)) if schedule else ()


def stop_cautions(scenario: Scenario, profile: Profile) -> tuple[str, ...]:
    """A lifetime on a profile that never timed a stop: the stops take RTNL
    but none of their CPU in the answer."""
    c = profile.testbed
    if scenario.lifetime_s is None or c is None or c.vm_stop_cpu_s is not None:
        return ()
    return (
        f"the VMs stop {scenario.lifetime_s:g} s after they came up, but profile "
        f"{profile.name!r} has no measured stop (testbed.vm_stop_cpu_s: fitted before the "
        "testbed timed its stops): each stop holds RTNL for its tap and costs no other CPU "
        "here; refit with `bootstorm calibrate --plan` for its CPU",
    )


def testbed_costs(profile: Profile) -> TestbedCostTable:
    if profile.testbed is None:
        raise ConfigError(
            f"profile: {profile.name!r} has no `testbed` section; fit one to a recorded storm "
            "with `bootstorm calibrate --measured FILE --output local.yaml`"
        )
    return profile.testbed


def testbed_lock_specs(c: TestbedCostTable | None = None, *, agent: bool = False) -> list[LockSpec]:
    """The testbed's locks: the kernel's mutexes handed over as ``c`` says
    (``mutex_dispatch_s``, ``kernel_holders_pinned``; plain FIFO without
    ``c``), the user-space ones (the GIL, host-local's file lock) FIFO; with
    ``agent`` (a node agent serves the storm or refills its pools), the
    agent's GIL last."""
    dispatch_s = (c.mutex_dispatch_s if c is not None else None) or 0.0
    pinned = bool(c.kernel_holders_pinned) if c is not None else False
    return [
        LockSpec(name=RTNL, dispatch_s=dispatch_s, holder_pinned=pinned),
        LockSpec(name=CGROUP_MUTEX, dispatch_s=dispatch_s, holder_pinned=pinned),
        LockSpec(name=CSS_SET_LOCK),
        LockSpec(name=GIL),
        LockSpec(name=IPAM_LOCK),
        *([LockSpec(name=AGENT_GIL)] if agent else []),
    ]


def uses_agent(scenario: Scenario) -> bool:
    """Whether a node agent takes part in ``scenario``'s storm: it serves the
    sandboxes' calls, or it refills their pools (only an agent does)."""
    return scenario.through_agent or scenario.refills


#: A node agent's own CPU (user + system) per plumbed namespace its one
#: refill worker made, and per one it removed, with the bridge plugin, alone
#: on this project's 2-core host (2026-11-30, ``measure_agent_devices``: 5
#: rounds of 60; its plugins 9.8 and 8.5 ms, wall 12.3 and 36.3 ms a
#: device; docs/research-log.md). What a profile that did not measure it
#: (``testbed.agent_make_cpu_s``, ``agent_remove_cpu_s``) is priced at.
AGENT_MAKE_CPU_HERE_S = 2.17e-3
AGENT_REMOVE_CPU_HERE_S = 2.00e-3


def agent_device_cpu_s(c: TestbedCostTable) -> tuple[float, float]:
    """The agent's own CPU per plumbed namespace made and removed: the
    profile's, or this project's host's where it has none."""
    make = AGENT_MAKE_CPU_HERE_S if c.agent_make_cpu_s is None else c.agent_make_cpu_s
    remove = AGENT_REMOVE_CPU_HERE_S if c.agent_remove_cpu_s is None else c.agent_remove_cpu_s
    return make, remove


def _is_call(step: Step) -> bool:
    """A start's call to the agent, the caller's part or the agent's."""
    if isinstance(step, Hold):
        return bool(step.body) and all(_is_call(s) for s in step.body)
    return isinstance(step, Cpu) and step.label in (AGENT_CALL, AGENT_SERVES)


def _as_agent(steps: tuple[Step, ...]) -> tuple[Step, ...]:
    out: list[Step] = []
    for step in steps:
        if _is_call(step):
            continue
        if isinstance(step, Hold):
            lock = AGENT_GIL if step.lock == GIL else step.lock
            step = replace(step, lock=lock, body=_as_agent(step.body))
        out.append(step)
    return tuple(out)


def agent_refill_work(
    kind: str, steps: tuple[Step, ...], *, own_s: Mapping[str, float] | None = None
) -> tuple[Step, ...]:
    """A device of ``kind`` made as the agent's refill worker makes it: the
    steps of a start that found the pool empty, less that start's calls to
    the agent (the worker is the agent), with the Python under the agent's
    own GIL instead of the testbed's, and then the agent's own work for it
    beyond those steps (``own_s[kind]``, under its GIL: its Python and the
    kernel work it does for it)."""
    out = _as_agent(steps)
    extra_s = (own_s or {}).get(kind, 0.0)
    if extra_s > 0.0:
        out = (*out, Hold(AGENT_GIL, (Cpu(extra_s, "agent's own work"),)))
    return out


def testbed_plan(
    scenario: Scenario, c: TestbedCostTable, *, variant: TestbedVariant
) -> tuple[Stage, ...]:
    """The stages of one testbed sandbox."""
    if variant.runtime == "cni":
        return _cni_plan(scenario, c, plugin=variant.plugin)
    return _threads_plan(scenario, c, peer=variant.peer)


# -- steps both runtimes share (the driver thread's, and the kernel's) ----------


def _py(c: TestbedCostTable, label: str) -> Step:
    """One Python call of the sandbox's thread, under the GIL."""
    return Hold(GIL, (Cpu(c.py_op_cpu_s, label),))


def _create_netns(c: TestbedCostTable) -> tuple[Step, ...]:
    """``unshare`` + bind mount: ``setup_net``, the loopback under RTNL."""
    return (
        _py(c, "unshare"),
        Cpu(c.netns_create_cpu_s, "setup_net"),
        Hold(RTNL, (Cpu(c.rtnl_netns_hold_s, "loopback"),)),
    )


def _netns(scenario: Scenario, c: TestbedCostTable) -> tuple[Step, ...]:
    """NetNS: a namespace made, or taken from the ``netns`` pool."""
    if scenario.pools.get("netns", 0) > 0:
        return (Pooled("netns", create=_create_netns(c), fetch=(_py(c, "take netns"),)),)
    return _create_netns(c)


def _kworker(c: TestbedCostTable) -> tuple[Step, ...]:
    """New links up: the kernel queues linkwatch and address work for
    kworkers, which take RTNL behind the sandbox's back."""
    if not c.kworker_rtnl_ops:
        return ()
    deferred = tuple(
        Hold(RTNL, (Cpu(c.rtnl_small_hold_s, "linkwatch/addrconf"),))
        for _ in range(c.kworker_rtnl_ops)
    )
    return (Async("kworker", deferred),)


def _cgroup(c: TestbedCostTable) -> tuple[Step, ...]:
    return (_py(c, "mkdir"), Hold(CGROUP_MUTEX, (Cpu(c.cgroup_mkdir_hold_s, "mkdir"),)))


def _cgroup_attach(c: TestbedCostTable, label: str) -> Step:
    """A process written to ``cgroup.procs``: cgroup_mutex, css_set_lock
    inside; where the profile measured it (``cgroup_attach_grace_s``), the
    write side of ``cgroup_threadgroup_rwsem`` inside cgroup_mutex, whose
    rcu_sync waits a grace period unless another writer left it within one
    (:class:`~bootstorm.simulator.RcuSync`): on this project's host an attach
    after 100 ms idle took 7.8 ms, back to back 0.04 ms (research log)."""
    body: tuple[Step, ...] = (
        Cpu(c.cgroup_attach_hold_s, label),
        Hold(CSS_SET_LOCK, (Cpu(c.cgroup_attach_hold_s * 0.1, "css_set"),)),
    )
    if c.cgroup_attach_grace_s:
        body = (RcuSync(CGROUP_MUTEX, c.cgroup_attach_grace_s, body),)
    return Hold(CGROUP_MUTEX, body)


def _vm_up(c: TestbedCostTable) -> tuple[Step, ...]:
    """QEMU's tap ioctls (RTNL each), then the VMM's and the guest's boot."""
    return (
        *(Hold(RTNL, (Cpu(c.rtnl_small_hold_s, "tap ioctl"),)) for _ in range(c.vm_tap_ioctls)),
        Cpu(c.vm_boot_cpu_s, "qemu + guest"),
        Sleep(c.vm_boot_s, "boot"),
    )


#: The sleep inside a VM's stop's RTNL hold: the tap's
#: ``unregister_netdevice`` starts its grace period (``synchronize_net``)
#: under RTNL and waits out the rest after the unlock (``netdev_run_todo``).
#: Seen from another CPU (the hold-stretch witness, 60 deletions twice), a
#: veth pair's deletion held RTNL 0.8-1.3 ms of its 16.8-17.2-ms call on this
#: project's host; with the tap's register hold (~0.3 ms) this makes ~0.8 ms
#: (docs/research-log.md, "A holder does not keep its core"). Not
#: ``rcu_grace_s``: that is a move's, which holds RTNL through its whole grace
#: period (16 ms, witnessed), and no CNI plan sets it.
STOP_RTNL_SLEEP_S = 5e-4
#: A veth pair's deletion, the whole netlink call: 16.8-17.2 ms on this
#: project's host (the same witness as :data:`STOP_RTNL_SLEEP_S`, 60
#: deletions twice); after RTNL's unlock it waits out ``netdev_run_todo``'s
#: grace period off-CPU.
VETH_DELETE_CALL_S = 0.017


def agent_own_make_s(
    scenario: Scenario, c: TestbedCostTable, *, variant: TestbedVariant
) -> dict[str, float]:
    """The agent's own work per device its worker makes, beyond the steps of
    a start's making, by kind: the CNI runtime's ``netns-veth`` (measured:
    :func:`agent_device_cpu_s`, less the Python and namespace work those
    steps price in the maker's process); none for the other kinds and the
    threads runtime (not measured)."""
    if variant.runtime != "cni":
        return {}
    spawn_cpu_s = _cni_costs(c)[4]
    steps_s = c.py_op_cpu_s + c.netns_create_cpu_s + c.rtnl_netns_hold_s + spawn_cpu_s
    return {"netns-veth": max(0.0, agent_device_cpu_s(c)[0] - steps_s)}


def agent_removals(
    scenario: Scenario, c: TestbedCostTable, *, variant: TestbedVariant
) -> dict[str, tuple[Step, ...]]:
    """What the node agent's refill worker does to remove a pooled device of
    each kind (a surplus above a target that fell, ``_pools.PoolManager._trim``),
    priced from the costs that make one, the worker's Python under the
    agent's GIL: a ``netns`` unmounted and unlinked (its loopback's
    unregister under RTNL, which the kernel's ``cleanup_net`` does after);
    a ``veth`` pair deleted (:data:`VETH_DELETE_CALL_S`, its RTNL hold as a
    VM's tap's at stop); a ``netns-veth`` of the CNI runtime DELeted through
    the plugin (its exec, the veth's deletion, host-local's exec and lease
    release) and then unmounted; of the threads runtime, its veth deleted
    and the namespace unmounted. The CNI runtime's ``netns-veth`` then
    costs the agent its own work beyond those steps, as measured
    (:func:`agent_device_cpu_s`). An estimate from the making's costs and
    one witnessed call (no storm times a removal): measured alone through
    an agent (2026-11-30, research log) a removal took 3.0x a making's wall
    time, this catalog 2.4-2.8x."""
    py = Hold(AGENT_GIL, (Cpu(c.py_op_cpu_s, "remove"),))
    netns = (py, Hold(RTNL, (Cpu(c.rtnl_netns_hold_s, "cleanup_net loopback"),)))
    hold_s = c.rtnl_veth_hold_s
    veth = (
        Hold(RTNL, (Cpu(hold_s, "veth delete"), Sleep(STOP_RTNL_SLEEP_S, "synchronize_net"))),
        Sleep(max(0.0, VETH_DELETE_CALL_S - hold_s - STOP_RTNL_SLEEP_S), "netdev_run_todo"),
    )
    if variant.runtime == "cni":
        exec_cpu_s, ipam_hold_s, _, _, spawn_cpu_s = _cni_costs(c)
        # The agent's own CPU beyond its Python these steps already price.
        own_s = agent_device_cpu_s(c)[1] - c.py_op_cpu_s - spawn_cpu_s
        plumbed: tuple[Step, ...] = (
            Hold(AGENT_GIL, (Cpu(spawn_cpu_s, f"exec {variant.plugin} DEL"),)),
            Cpu(exec_cpu_s, f"{variant.plugin} start"),
            *veth,
            Cpu(exec_cpu_s, "host-local start"),
            Hold(IPAM_LOCK, (Cpu(ipam_hold_s, "release"),)),
            *netns,
            *((Hold(AGENT_GIL, (Cpu(own_s, "agent's own work"),)),) if own_s > 0 else ()),
        )
    else:
        plumbed = (py, *veth, *netns)
    return {"netns": netns, "veth": (py, *veth), "netns-veth": plumbed}


def _stop(scenario: Scenario, c: TestbedCostTable) -> tuple[Step, ...]:
    """With a lifetime, the VM's stop that long after it came up: a branch
    nobody waits for. The VMM (and the shim) exit and the tap goes with its
    last fd: ``unregister_netdevice`` under RTNL, priced as the tap's
    register (``rtnl_tap_hold_s``; an assumption: no storm times the hold
    apart), with the start of ``synchronize_net`` inside it
    (:data:`STOP_RTNL_SLEEP_S`, witnessed; not ``rcu_grace_s``, a move's:
    where a threads fit set it, a stop held RTNL 17x too long, and on a CNI
    fit, which never sets it, every stream's answer hung on a cost no plan
    sees). The rest of the stop's measured CPU (``vm_stop_cpu_s``, all of
    it, timed alone after the recorded storms) outside the lock. Without a
    lifetime, nothing: the program is the one of a storm whose VMs stay up."""
    if scenario.lifetime_s is None:
        return ()
    hold_s = c.rtnl_tap_hold_s
    exits_s = max(0.0, (c.vm_stop_cpu_s or 0.0) - hold_s)
    steps = (
        Sleep(scenario.lifetime_s, "lifetime"),
        Cpu(exits_s, "VMM and shim exit"),
        Hold(RTNL, (Cpu(hold_s, "tap unregister"), Sleep(STOP_RTNL_SLEEP_S, "synchronize_net"))),
    )
    return (Async("stop", steps),)


def _stages(
    scenario: Scenario, steps: dict[str, tuple[Step, ...]], c: TestbedCostTable
) -> tuple[Stage, ...]:
    """The five stages, each gated where the scenario limits it (and, through
    a node agent, with the calls to it: :func:`_through_agent`)."""
    lease: tuple[Step, ...] = ()
    if scenario.through_agent:
        steps, lease = _through_agent(steps, c)
    stages = []
    for name in TESTBED_STAGES:
        limited = name in scenario.limits
        stages.append(
            Stage(
                name,
                steps[name],
                gate=name if limited else None,
                admit=lease if limited else (),
                release=lease if limited else (),
            )
        )
    return tuple(stages)


#: The labels of a call to a node agent's work: the caller's, the agent's.
AGENT_CALL = "agent call"
AGENT_SERVES = "agent serves"


def _through_agent(
    steps: dict[str, tuple[Step, ...]], c: TestbedCostTable
) -> tuple[dict[str, tuple[Step, ...]], tuple[Step, ...]]:
    """The stages of a sandbox that takes permits and devices from a node
    agent over HTTP (``AgentAdmission``), and the call a limited stage's
    lease makes twice: once for its permit (acquire), once to give it back
    (release), both outside the stage's span, as the testbed times a stage
    from the lease's answer to its body's return (:class:`Stage`'s ``admit``
    and ``release``). A take from a pool is one call, in the stage, whether
    the pool had a device or not. A call is the caller's CPU under the GIL
    (the testbed's Python and its HTTP client) and the agent's CPU in its
    own process; both measured alone (``measure-ops``), 0 where they were
    not. Until 2026-11-30 the lease's calls were in the span: a stage
    limited to 1 through an agent came 4-8x the node's (the calls' GIL
    waits were the model's stage time, not the node's)."""
    client_s = c.agent_call_cpu_s or 0.0
    agent_s = c.agent_serve_cpu_s or 0.0
    # The agent serves from one asyncio loop: its calls are served one at a
    # time, under its GIL, which its refill workers' Python also takes.
    call = (
        Hold(GIL, (Cpu(client_s, AGENT_CALL),)),
        Hold(AGENT_GIL, (Cpu(agent_s, AGENT_SERVES),)),
    )

    def with_takes(body: tuple[Step, ...]) -> tuple[Step, ...]:
        out: list[Step] = []
        for step in body:
            if isinstance(step, Pooled):
                step = Pooled(
                    step.pool,
                    create=with_takes(step.create),
                    fetch=with_takes(step.fetch),
                    create_next=with_takes(step.create_next),
                    fetch_next=with_takes(step.fetch_next),
                )
                out += call
            out.append(step)
        return tuple(out)

    return {name: with_takes(body) for name, body in steps.items()}, call


def _threads_plan(scenario: Scenario, c: TestbedCostTable, *, peer: Peer) -> tuple[Stage, ...]:

    def py(label: str) -> Step:
        return _py(c, label)

    def rtnl(hold_s: float, label: str) -> tuple[Step, ...]:
        return (py(label), Hold(RTNL, (Cpu(hold_s, label),)))

    netns = _netns(scenario, c)

    veth: tuple[Step, ...]
    if peer == "in-netns":
        veth = rtnl(c.rtnl_veth_hold_s, "veth pair")
    else:
        veth = (
            *rtnl(c.rtnl_veth_hold_s, "veth pair"),
            py("move peer"),
            Hold(RTNL, (Cpu(c.rtnl_small_hold_s, "move"), Sleep(c.rcu_grace_s, "synchronize_net"))),
        )
    if scenario.pools.get("veth", 0) > 0:
        # A pre-made pair: the peer moves in (synchronize_net under RTNL) and
        # the host end is renamed to the sandbox's name.
        fetch_veth: tuple[Step, ...] = (
            py("take veth"),
            py("move peer"),
            Hold(RTNL, (Cpu(c.rtnl_small_hold_s, "move"), Sleep(c.rcu_grace_s, "synchronize_net"))),
            *rtnl(c.rtnl_small_hold_s, "rename host end"),
        )
        veth = (Pooled("veth", create=veth, fetch=fetch_veth),)
    add_veth: tuple[Step, ...] = (py("netlink socket"), *veth)
    if scenario.pools.get("netns-veth", 0) > 0:
        # A namespace made with the pair's peer inside it: taking one is the
        # whole endpoint (no unshare, no veth, no move, no rename). An empty
        # pool falls back to the netns pool or an unshare here, and to the
        # veth pool or a new pair in AddCNI, under its permit, as the runtime
        # does (``threads_runtime.ThreadsRuntime.add_cni``).
        netns = (
            Pooled(
                "netns-veth",
                create=netns,
                fetch=(py("take netns+veth"),),
                create_next=add_veth,
                fetch_next=(py("netlink socket"),),
            ),
        )
        add_veth = ()
    add_cni: tuple[Step, ...] = (
        *add_veth,
        *rtnl(c.rtnl_small_hold_s, "host end up"),
        *rtnl(c.rtnl_small_hold_s, "peer up"),
        *rtnl(c.rtnl_small_hold_s, "address"),
        *_kworker(c),
    )
    attach: tuple[Step, ...] = (
        *rtnl(c.rtnl_tap_hold_s, "TUNSETIFF"),
        *rtnl(c.rtnl_small_hold_s, "tap up"),
        *(rtnl(c.rtnl_tc_hold_s, "tc") * 4),  # ingress qdisc + u32 filter, on veth and on tap
    )
    start: tuple[Step, ...] = (
        Hold(GIL, (Cpu(c.vm_spawn_cpu_s, "fork/exec qemu"),)),
        py("cgroup.procs"),
        _cgroup_attach(c, "attach"),
        *_vm_up(c),
        *_stop(scenario, c),
    )
    return _stages(
        scenario,
        {
            "NetNS": netns,
            "AddCNI": add_cni,
            "Cgroup": _cgroup(c),
            "AttachIf": attach,
            "StartVM": start,
        },
        c,
    )


#: The CNI runtime's own costs (None in a profile fitted to thread storms only).
CNI_RUNTIME_COSTS = (
    "cni_exec_cpu_s",
    "ipam_hold_s",
    "shim_start_cpu_s",
    "tc_exec_cpu_s",
    "spawn_cpu_s",
)


def _cni_costs(c: TestbedCostTable) -> tuple[float, float, float, float, float]:
    values = tuple(getattr(c, name) for name in CNI_RUNTIME_COSTS)
    missing = [name for name, v in zip(CNI_RUNTIME_COSTS, values, strict=True) if v is None]
    if missing:
        raise ConfigError(
            f"profile: testbed.{missing[0]} is not set: the CNI runtime's costs "
            f"({', '.join(missing)}) come from a storm of it; fit one with "
            "`bootstorm calibrate --measured FILE` on a `testbed run --runtime cni` trace"
        )
    exec_cpu_s, ipam_hold_s, shim_cpu_s, tc_cpu_s, spawn_cpu_s = values
    return exec_cpu_s, ipam_hold_s, shim_cpu_s, tc_cpu_s, spawn_cpu_s


def _cni_plan(scenario: Scenario, c: TestbedCostTable, *, plugin: str) -> tuple[Stage, ...]:
    """A sandbox of the CNI runtime (see the module's text)."""
    exec_cpu_s, ipam_hold_s, shim_cpu_s, tc_cpu_s, spawn_cpu_s = _cni_costs(c)

    def spawn(label: str) -> Step:
        # The driver thread's subprocess call: the GIL is its only shared lock.
        return Hold(GIL, (Cpu(spawn_cpu_s, label),))

    def rtnl(hold_s: float, label: str, growth_s: float = 0.0) -> Step:
        return Hold(RTNL, (Cpu(hold_s, label, growth_s=growth_s),))

    def request(label: str) -> Step:
        if label == VETH_PAIR:
            return rtnl(c.rtnl_veth_hold_s, label)
        if label == MACVLAN_LINK:
            return rtnl(c.rtnl_veth_hold_s * MACVLAN_PER_VETH_PAIR, label)
        if label == ENSLAVE:
            # Sandbox i's port joins a bridge that holds the i before it.
            return rtnl(c.rtnl_small_hold_s, label, c.enslave_per_port_s or 0.0)
        return rtnl(c.rtnl_small_hold_s, label)

    before, after = CNI_ADD_REQUESTS[plugin]
    netns = _netns(scenario, c)
    deferred = _kworker(c)  # the kernel's work after the ADD, nobody waits for
    if plugin == "bridge" and c.flood_per_port_cpu_s:
        # The new link's first packets, flooded to the ports before it and
        # received in their namespaces: softirq work nobody waits for.
        flood = Cpu(0.0, "bridge flood", growth_s=c.flood_per_port_cpu_s)
        deferred = (*deferred, Async("softirq", (flood,)))
    add: tuple[Step, ...] = (
        spawn(f"exec {plugin}"),
        Cpu(exec_cpu_s, f"{plugin} start"),
        *(request(label) for label in before),
        Cpu(exec_cpu_s, "host-local start"),
        Hold(IPAM_LOCK, (Cpu(ipam_hold_s, "lease", growth_s=c.ipam_per_lease_s or 0.0),)),
        *(request(label) for label in after),
    )
    add_cni: tuple[Step, ...] = (*add, *deferred)
    if scenario.pools.get("netns-veth", 0) > 0:
        # A namespace plumbed before the storm: taking it is the whole
        # network; an empty pool falls back to making the namespace here and
        # the ADD in AddCNI, under AddCNI's permit, as the runtime does
        # (``cni_runtime.CniRuntime.netns`` and ``add_cni``). A pooled
        # sandbox's AddCNI only notes that the namespace came plumbed:
        # microseconds (6 µs measured), too short to queue for the GIL behind
        # the spawners. Every path of a sandbox must spawn the same branches,
        # so the kworkers' deferred link work ends AddCNI on both paths: for a
        # taken namespace it is work its ADD left before the storm, charged as
        # if now (RTNL holds nobody waits for; an overestimate).
        netns = (
            Pooled(
                "netns-veth",
                create=netns,
                fetch=(_py(c, "take plumbed"),),
                create_next=add,
                fetch_next=(Cpu(0.0, "plumbed already"),),
            ),
        )
        add_cni = deferred
    attach: tuple[Step, ...] = (
        spawn("exec shim"),
        Cpu(shim_cpu_s, "shim start"),
        rtnl(c.rtnl_tap_hold_s, "TUNSETIFF"),
        rtnl(c.rtnl_small_hold_s, "tap up"),
        # ingress qdisc + u32 mirred filter, on the veth and on the tap: a tc process each
        *((Cpu(tc_cpu_s, "exec tc"), rtnl(c.rtnl_tc_hold_s, "tc")) * 4),
    )
    # The shim joins the cgroup; QEMU, forked by it, is born there.
    start = (
        _cgroup_attach(c, "shim joins cgroup"),
        Cpu(c.vm_spawn_cpu_s, "fork/exec qemu"),
        *_vm_up(c),
        *_stop(scenario, c),
    )
    return _stages(
        scenario,
        {
            "NetNS": netns,
            "AddCNI": add_cni,
            "Cgroup": _cgroup(c),
            "AttachIf": attach,
            "StartVM": start,
        },
        c,
    )
