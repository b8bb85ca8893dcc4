"""The receive data paths of a node and what one flow of traffic asks of it.

A *data path* is the chain of kernel stages a received packet crosses
(seed 004 Fig. 1): the NIC's NAPI poll, then devices such as VXLAN, a bridge,
OVS, veth, macvlan/ipvlan or a tap, then the transport stack. Each stage has a
per-packet and a per-byte cost in the profile's ``dataplane`` section, and
either raises a softirq of its own (it queues the packet to another NAPI
context: VXLAN's gro_cells, veth's backlog), runs inline in the softirq that
delivered the packet (bridge, OVS datapath, macvlan/ipvlan rx handlers), or
runs in process context (the vhost-net thread behind a tap).

This module holds the catalog and the typed inputs; the solver is
:mod:`bootstorm.models.softirq`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from ._errors import ConfigError, format_validation_error
from ._names import PATH_NAMES, PathName

__all__ = [
    "DATA_PATHS",
    "PATH_NAMES",
    "DataPath",
    "DataplaneCostTable",
    "PathName",
    "Stage",
    "StageCost",
    "Traffic",
    "path_for_cni",
]


Context = Literal["softirq", "inline", "system"]

#: Ethernet framing on the wire per frame: header 14 + FCS 4 + preamble 8 +
#: inter-frame gap 12 bytes (IEEE 802.3).
ETHERNET_OVERHEAD_BYTES = 38
IP_HEADER_BYTES = 20
UDP_HEADER_BYTES = 8
#: TCP header with the timestamp option Linux enables by default (RFC 7323).
TCP_HEADER_BYTES = 32
#: VXLAN encapsulation: outer Ethernet 14 + IP 20 + UDP 8 + VXLAN 8 (RFC 7348).
VXLAN_ENCAP_BYTES = 50


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


Cost = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]


class StageCost(_Frozen):
    """One stage's CPU cost: per packet (skb) it handles, and per payload byte."""

    per_packet_s: Cost
    per_byte_s: Cost = 0.0


class DataplaneCostTable(_Frozen):
    """The node's receive data plane (a profile's ``dataplane`` section).

    ``rx_queues`` RSS queues spread flows over the first cores; NAPI polls
    at most ``napi_budget`` packets per softirq and the NIC coalesces up to
    ``coalesce_frames`` frames per IRQ; GRO merges TCP segments into skbs of
    at most ``gro_max_bytes``. ``copy_per_byte_s`` is the receiver's copy to
    user space and ``syscall_s`` its system calls per message (one ``recv``;
    iperf3's loop adds a ``select``), both system time, and
    ``user_per_byte_s`` the application's own work on the data.
    ``context_switch_s`` is one context switch (its wake-up included): a
    delivery that finds its receiver asleep costs the receiver's CPU two of
    them, in and out (0: not modelled).

    Hyper-threads are a host fact (``HostSpec.threads_per_core``,
    ``HostSpec.smt_yield``), passed to the solver with the core count.
    """

    link_gbps: Annotated[float, Field(gt=0.0, allow_inf_nan=False)]
    mtu_bytes: Annotated[int, Field(ge=576)]
    rx_queues: Annotated[int, Field(ge=1)]
    napi_budget: Annotated[int, Field(ge=1)]
    coalesce_frames: Annotated[int, Field(ge=1)]
    gro_max_bytes: Annotated[int, Field(ge=1)]
    irq_s: Cost
    copy_per_byte_s: Cost
    syscall_s: Cost
    user_per_byte_s: Cost
    context_switch_s: Cost = 0.0
    stages: dict[str, StageCost]


@dataclass(frozen=True, kw_only=True, slots=True)
class Stage:
    """A stage of a data path: its cost's name in the profile, where it runs
    (``softirq``: raises a NET_RX softirq of its own; ``inline``: inside the
    softirq that delivered the packet; ``system``: a kernel thread), and
    whether TCP segments reach it merged by GRO (``merged``) or one by one."""

    cost: str
    context: Context
    merged: bool


@dataclass(frozen=True, kw_only=True, slots=True)
class DataPath:
    """A receive path: its stages, encapsulation, and who receives the data.

    ``intra_host``: sender and receiver are containers on the same node and
    the chain runs in the sender's softirq (veth queues to the local CPU's
    backlog). ``host_receiver``: the receiving application runs on the host
    (not in a guest), so its copy and user work are host CPU.
    ``rss_hashes_udp_ports``: RSS tells this path's UDP flows apart (the
    outer UDP source port of VXLAN carries the inner flow's hash; plain UDP
    is hashed on addresses only, seed 004 §3.2).
    """

    name: str
    stages: tuple[Stage, ...]
    encap_bytes: int = 0
    intra_host: bool = False
    host_receiver: bool = True
    rss_hashes_udp_ports: bool = False

    @property
    def softirqs_per_batch(self) -> int:
        """Softirqs one NAPI batch raises when none of them merge."""
        return sum(1 for s in self.stages if s.context == "softirq")


def _s(cost: str, context: Context, merged: bool) -> Stage:
    return Stage(cost=cost, context=context, merged=merged)


# TCP over the overlays: the encapsulated segments cross NIC, VXLAN, bridge
# and veth one by one and are merged only before the inner TCP receive
# (an assumption about ConnectX-3 on Linux 4.4 that S4-1 and S4-2 support:
# the overlay costs TCP 3.6x and UDP 2.4x, which per-skb costs after GRO
# cannot give). Natively, GRO merges at the NIC.
_NIC = _s("nic", "softirq", merged=False)
_STACK = _s("stack", "inline", merged=True)

#: The catalog. Docker overlay is seed 004's NIC → VXLAN → bridge → veth:
#: one IRQ and three softirqs per packet batch.
DATA_PATHS: dict[str, DataPath] = {
    "native": DataPath(name="native", stages=(_NIC, _STACK)),
    "linux-overlay": DataPath(
        name="linux-overlay",
        stages=(_NIC, _s("vxlan", "softirq", False), _STACK),
        encap_bytes=VXLAN_ENCAP_BYTES,
        rss_hashes_udp_ports=True,
    ),
    "docker-overlay": DataPath(
        name="docker-overlay",
        stages=(
            _NIC,
            _s("vxlan", "softirq", False),
            _s("bridge", "inline", False),
            _s("veth", "softirq", False),
            _STACK,
        ),
        encap_bytes=VXLAN_ENCAP_BYTES,
        rss_hashes_udp_ports=True,
    ),
    "ovs-overlay": DataPath(
        name="ovs-overlay",
        stages=(
            _NIC,
            _s("vxlan", "softirq", False),
            _s("ovs", "inline", False),
            _s("veth", "softirq", False),
            _STACK,
        ),
        encap_bytes=VXLAN_ENCAP_BYTES,
        rss_hashes_udp_ports=True,
    ),
    "macvlan": DataPath(name="macvlan", stages=(_NIC, _s("macvlan", "inline", True), _STACK)),
    # Into a microVM (seed 000): the guest runs the transport stack, the host
    # a vhost-net thread per queue that copies into guest memory.
    "kata-veth": DataPath(
        name="kata-veth",
        stages=(
            _NIC,
            _s("ovs", "inline", True),
            _s("veth", "softirq", True),
            _s("tap", "system", True),
        ),
        host_receiver=False,
    ),
    "kata-tap": DataPath(
        name="kata-tap",
        stages=(_NIC, _s("ipvlan", "inline", True), _s("tap", "system", True)),
        host_receiver=False,
    ),
    # SR-IOV passthrough: the VF DMAs into the guest; no host stage at all.
    "sriov": DataPath(name="sriov", stages=(), host_receiver=False),
    # Intra-host container pairs (seed 002): veth → switch → veth → TCP, on
    # skbs as large as GSO makes them.
    "bridge-intra": DataPath(
        name="bridge-intra",
        stages=(
            _s("veth", "softirq", True),
            _s("bridge", "inline", True),
            _s("veth", "softirq", True),
            _STACK,
        ),
        intra_host=True,
    ),
    "ovs-intra": DataPath(
        name="ovs-intra",
        stages=(
            _s("veth", "softirq", True),
            _s("ovs", "inline", True),
            _s("veth", "softirq", True),
            _STACK,
        ),
        intra_host=True,
    ),
    "macvlan-intra": DataPath(
        name="macvlan-intra",
        stages=(_s("macvlan", "softirq", True), _STACK),
        intra_host=True,
    ),
}
assert set(DATA_PATHS) == set(PATH_NAMES)

#: The data path a boot storm's sandboxes receive traffic on, by CNI.
_CNI_PATHS: dict[str, str] = {
    "veth": "kata-veth",
    "tc-routing": "kata-veth",
    "ebpf": "kata-veth",
    "vhost-user": "kata-veth",
    "ipvlan": "kata-tap",
    "macvlan": "kata-tap",
    "ipvtap": "kata-tap",
    "macvtap": "kata-tap",
}


def path_for_cni(cni: str) -> str:
    """The receive path of ``cni``'s sandboxes (SR-IOV variants: ``sriov``)."""
    if cni in _CNI_PATHS:
        return _CNI_PATHS[cni]
    if cni == "no-network":
        raise ConfigError(
            "background_flows: a no-network storm has no data path to carry "
            "background traffic (got cni='no-network')"
        )
    return "sriov"


#: The largest UDP payload one IPv4 datagram carries: 65 535 bytes less the
#: IP (20) and UDP (8) headers.
MAX_UDP_PAYLOAD_BYTES = 65_507


class Traffic(BaseModel):
    """A steady load of identical flows on one data path.

    Parameters
    ----------
    path:
        The receive data path (:data:`DATA_PATHS`).
    proto:
        ``tcp`` (GRO merges segments) or ``udp`` (each fragment on its own).
    flows:
        Concurrent flows (iperf pairs).
    message_bytes:
        Bytes per ``send``/``recv`` call; ``None``: seed 004's iperf3 defaults,
        128 KiB for TCP and 8 KiB for UDP.
    flow_gbps:
        Offered load per flow; ``None``: as fast as the node lets it go.
    flow_bytes:
        Bytes each flow carries, for its flow completion time (size over the
        flow's steady rate, all flows running together: seed 002's netcat
        flows); ``None``: long-lived flows, no completion time.
    cores:
        Override the host's core count.
    placement:
        Where application threads run: ``random`` (the scheduler places them
        without regard to softirq load), ``pinned-apart`` / ``pinned-together``
        (each pair's two ends pinned to different / the same core, spread
        evenly; seed 002 Fig. 9).
    draws:
        Hash and placement draws averaged over.
    seed:
        Seed of the draws.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: PathName
    proto: Literal["tcp", "udp"] = "tcp"
    flows: Annotated[int, Field(ge=1)] = 1
    # At most 1 GiB a call: the kernel caps one send at INT_MAX bytes, and a
    # socket buffer is tens of MiB; a larger figure is a typo, not a load.
    message_bytes: Annotated[int, Field(ge=1, le=2**30)] | None = None
    flow_gbps: Annotated[float, Field(gt=0.0, allow_inf_nan=False)] | None = None
    flow_bytes: Annotated[int, Field(ge=1, le=2**50)] | None = None
    cores: Annotated[int, Field(ge=1)] | None = None
    placement: Literal["random", "pinned-apart", "pinned-together"] = "random"
    draws: Annotated[int, Field(ge=1)] = 64
    seed: Annotated[int, Field(ge=0)] = 0

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise ConfigError(format_validation_error(exc, prefix="traffic: ")) from None

    @field_validator("message_bytes")
    @classmethod
    def _a_datagram_fits(cls, size: int | None, info: ValidationInfo) -> int | None:
        # The kernel refuses a larger send (EMSGSIZE): it is no load to model.
        if info.data.get("proto") == "udp" and size is not None and size > MAX_UDP_PAYLOAD_BYTES:
            raise ValueError(
                f"a UDP datagram holds at most {MAX_UDP_PAYLOAD_BYTES:,} bytes (IPv4: "
                "65 535 less its IP and UDP headers)"
            )
        return size

    @property
    def data_path(self) -> DataPath:
        return DATA_PATHS[self.path]

    @property
    def message(self) -> int:
        if self.message_bytes is not None:
            return self.message_bytes
        return 131072 if self.proto == "tcp" else 8192
