"""TSoR sandboxes (seed 003): a secure container whose TCP sockets run over RDMA.

TSoR ("TCP Socket over RDMA", seed 003) is a Kubernetes CNI for the Quark
secure runtime: Quark intercepts a pod's socket calls and its embedded TSoR
client hands them to the node's *TSoR Service*, which carries them over
RDMA to the peer node's service. What a pod's start does, per the paper:

- **No per-pod network device.** The pod's traffic leaves through shared
  memory to the service (§4.2.2), so a TSoR pod has no veth, tap or vPort: its
  network namespace (Quark's runtime process still runs in a standard
  container with one, §2.3) and the net_prio cgroup work every sandbox does
  are its only RTNL operations. ``NetNS`` and ``Cgroup`` are seed 000's (the
  profile's ``costs``), and so is ``StartVM``'s VMM start and guest boot: the
  paper gives no startup figure of Quark's own ("less memory footprint and
  lower startup latency" than a Linux-VM runtime, §2.3, without a number).
- **Static per-node pod CIDRs** (§4.5.2): each node owns a fixed subnet, so a
  pod's IP is a local allocation (``AddCNI``: the baselines' host-local IPAM
  round trip, ``costs.ipam_s``) and is never propagated across the cluster
  before the pod can serve. The variant ``tsor-dynamic-ip`` is the design the
  paper argues against: the pod waits ``tsor.ip_propagation_s`` for its IP to
  reach every node.
- **Pre-established node-to-node RDMA connections** (§4.1.3, Solution #2):
  the service connects to every peer node when its node joins the cluster, and
  registers and pins the connections' memory regions then (§4.2.2), so a pod's
  start creates no queue pair and pins no memory. What it does ask of the
  service is a client: the Client Manager makes the pod's shared-memory
  region (its SQ/CQ pair and ring buffers, §4.1.1, §4.2.2),
  ``tsor.client_register_s`` of the service's one thread. The variant
  ``tsor-qp-per-pod`` is the design the paper argues against (§4.1.3,
  challenge #2; FreeFlow-style per-container RDMA): each pod's start sets up
  its own QP connection (``tsor.qp_setup_s``: "up to several milliseconds"
  against "hundreds of microseconds" for a TCP connection) and registers its
  own memory region on the service (``tsor.mr_register_s``).
- **The service costs one host core** (§7): ``tsor.service_cores`` are held
  back from the storm, and the service's own work (client registration, MR
  registration) runs on them, one request at a time: a pod waits for it off
  its own CPU, behind the pods ahead of it (the ``tsor_service`` lock).

The paper gives none of the per-pod costs: every ``tsor.*`` time is an
assumption in the profile, and every storm of this family carries the known
miss ``S3-M/assumed-costs`` (``calibration/known_misses.py``) that names them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .._params import NonEmpty, Rules, validate
from ..simulator import Cpu, Hold, LockSpec, Pooled, Sleep, Stage, Step
from ._errors import ConfigError
from .cni import (
    RTNL,
    boot_steps,
    cgroup_steps,
    guest_touch_bytes,
    lock_specs,
    virtiofs_steps,
    vmm_start_steps,
)
from .profile import CostTable, Profile, TsorCostTable
from .scenario import Scenario

__all__ = [
    "TSOR_POOL_KINDS",
    "TSOR_SERVICE",
    "TSOR_STAGES",
    "TSOR_VARIANTS",
    "TsorVariant",
    "tsor_lock_specs",
    "tsor_plan",
    "tsor_profile_costs",
]

#: A TSoR pod's stages: seed 000's less AttachIf (no device to attach).
TSOR_STAGES: tuple[str, ...] = ("NetNS", "AddCNI", "Cgroup", "StartVM")
#: Only the namespace can be made ahead: there is no per-pod device.
TSOR_POOL_KINDS: tuple[str, ...] = ("netns",)
#: The TSoR Service's thread: its work for the pods is served one at a time.
TSOR_SERVICE = "tsor_service"


@dataclass(frozen=True, kw_only=True, slots=True)
class TsorVariant:
    """How a TSoR pod gets its IP and its RDMA connection.

    ``static_cidr``: the node's fixed subnet gives the IP locally (TSoR);
    ``False``: the IP is propagated across the cluster before the pod serves.
    ``shared_qp``: the node's pre-established RDMA connections carry the pod's
    sockets (TSoR); ``False``: each pod's start sets up its own QP connection
    and registers its own memory region.
    """

    name: str
    static_cidr: bool
    shared_qp: bool

    __rules__: ClassVar[Rules] = Rules(name=NonEmpty())

    def __post_init__(self) -> None:
        validate(self)


#: Seed 003's design and the two alternatives it argues against, by the name
#: a scenario's ``cni`` takes.
TSOR_VARIANTS: dict[str, TsorVariant] = {
    v.name: v
    for v in (
        TsorVariant(name="tsor", static_cidr=True, shared_qp=True),
        TsorVariant(name="tsor-dynamic-ip", static_cidr=False, shared_qp=True),
        TsorVariant(name="tsor-qp-per-pod", static_cidr=True, shared_qp=False),
    )
}


def tsor_profile_costs(profile: Profile) -> TsorCostTable:
    """The profile's ``tsor`` section, or a :class:`ConfigError` naming its absence."""
    if profile.tsor is None:
        raise ConfigError(
            f"profile: {profile.name!r} has no `tsor` section (the TSoR Service's per-pod "
            "costs and cores); TSoR variants need one, e.g. profile paper-000 or paper-003"
        )
    return profile.tsor


def tsor_lock_specs(costs: CostTable, rtnl_priority: dict[str, int]) -> list[LockSpec]:
    """The software locks (the namespace and net_prio take RTNL and
    cgroup_mutex as every sandbox does), then the service's thread."""
    return [*lock_specs(costs, rtnl_priority), LockSpec(name=TSOR_SERVICE)]


def tsor_plan(
    scenario: Scenario, costs: CostTable, tsor: TsorCostTable, variant: TsorVariant
) -> tuple[Stage, ...]:
    """The stages of one TSoR pod (see the module doc)."""
    c = costs
    rpc: tuple[Step, ...] = (Sleep(c.containerd_rpc_s, "containerd"),)

    # Quark's runtime process runs in a container with its own namespace: its
    # creation and its loopback, as seed 000's CNIs make it (and pool it).
    make_netns: tuple[Step, ...] = (
        Cpu(c.netns_create_cpu_s, "setup_net"),
        Hold(RTNL, (Cpu(c.rtnl_link_hold_s, "link"),)),
    )
    if scenario.pools.get("netns", 0) > 0:
        fetch = (Sleep(c.pool_fetch_s, "fetch netns"),)
        make_netns = (Pooled("netns", create=make_netns, fetch=fetch),)
    netns = rpc + make_netns

    # The TSoR CNI's ADD: an IP from the node's own subnet (a local
    # allocation, as host-local IPAM's), then, without a static CIDR, the
    # wait for it to reach every node.
    add: tuple[Step, ...] = (*rpc, Sleep(c.ipam_s, "pod CIDR ip"))
    if not variant.static_cidr:
        add += (Sleep(tsor.ip_propagation_s, "ip propagation"),)

    # Quark starts (seed 000's VMM start and guest boot, without a tap); its
    # TSoR client registers with the node's service, whose one thread makes
    # the client's shared-memory region. Per-pod QPs: the pod's own memory
    # region is registered (pinned) by the service, then its QP connection
    # is set up (metadata exchanged over TCP, the QP's state changes).
    client: tuple[Step, ...] = (Hold(TSOR_SERVICE, (Sleep(tsor.client_register_s, "client"),)),)
    if not variant.shared_qp:
        client += (
            Hold(TSOR_SERVICE, (Sleep(tsor.mr_register_s, "mr register"),)),
            Sleep(tsor.qp_setup_s, "qp setup"),
        )
    start: tuple[Step, ...] = (
        *rpc,
        *vmm_start_steps(costs),
        *virtiofs_steps(costs),
        *client,
        *boot_steps(costs, touch_bytes=guest_touch_bytes(costs, scenario.memory_mib)),
    )
    stages = {
        "NetNS": netns,
        "AddCNI": add,
        "Cgroup": rpc + cgroup_steps(costs, netdev_growth=False),
        "StartVM": start,
    }
    return tuple(
        Stage(name, stages[name], gate=name if name in scenario.limits else None)
        for name in TSOR_STAGES
    )
