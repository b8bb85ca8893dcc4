"""TSoR's data plane (seed 003): TCP sockets carried over RDMA, per message.

A socket write in a TSoR pod (seed 003 §4.3.1, Fig. 4) is copied by the
pod's TSoR client into its write ring buffer, sent by the node's TSoR Service
with one RDMA WRITE_IMM into the peer's read ring buffer, announced by the
peer's service in the client's completion queue and copied out by the peer's
client. The model has one cost per part:

- ``copy_per_byte_s``: a client's copy between the application and its ring
  buffer, once on each side (the rings *are* the pre-registered memory
  region, §4.2.2: no further copy);
- ``message_fixed_s``: everything else a small message's one-way trip pays
  (the intercepted system call, the SQ/CQ signals, the services' polls and
  the RDMA write's round on the NIC and the switch);
- the wire: payload plus RoCEv2's per-packet framing at the link's rate;
- ``service_per_message_s``: the TSoR Service's own work per message on
  each node; the service is one thread on one core (§7), shared by every
  connection of the node.

Pipelining (§4.3.1, Optimisation #1) overlaps the parts of consecutive
messages, so one connection's throughput is a message per its slowest part;
``n`` connections pinned on their own cores (Fig. 7c) share the link and
the services' cores. Latency is one message's trip end to end (NPtcp's
half round trip). Connection setup (§4.3.2) is a two-way handshake over
the pre-established connection's control channel plus a data channel made
on each side; host-mode runC's is a TCP handshake, one round trip of the
host's kernel path. A request-response application is a closed loop of
clients (Redis benchmark, one connection each) with the server's time per
request at a single-threaded server: exact mean-value analysis.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from pydantic import BaseModel, ConfigDict, Field

from ._errors import ConfigError

if TYPE_CHECKING:
    from .profile import Profile

__all__ = [
    "RdmaCostTable",
    "closed_loop_rps",
    "connect_s",
    "host_connect_s",
    "host_one_way_s",
    "host_request_s",
    "multi_connection_gbps",
    "one_way_s",
    "rdma_costs",
    "request_s",
    "single_connection_gbps",
    "wire_goodput_gbps",
]

_Seconds = Annotated[float, Field(ge=0.0, le=1e9, allow_inf_nan=False)]


class RdmaCostTable(BaseModel):
    """TSoR's per-message costs on a node pair (a profile's ``rdma`` section)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    link_gbps: Annotated[float, Field(gt=0.0, le=1.0e5, allow_inf_nan=False)]
    #: RoCEv2 payload per packet (the path MTU) and the bytes each packet adds
    #: on the wire (Ethernet header, FCS, preamble and gap, IP, UDP, BTH,
    #: immediate data, ICRC).
    roce_mtu_bytes: Annotated[int, Field(ge=256, le=4096)]
    wire_overhead_bytes: Annotated[int, Field(ge=0, le=1024)]
    copy_per_byte_s: _Seconds
    message_fixed_s: _Seconds
    service_per_message_s: _Seconds
    #: A TSoR Service's work to make one RDMA data channel (ring buffers
    #: from the registered region, a table entry), on each side of a connect.
    channel_setup_s: _Seconds
    #: Host-mode runC's one-way latency of a small message (the host kernel's
    #: TCP path across the switch): seed 003's baseline.
    host_oneway_s: _Seconds
    #: A single-threaded key-value server's own time per request (Redis SET/GET).
    redis_request_s: _Seconds


def rdma_costs(profile: Profile) -> RdmaCostTable:
    """The profile's ``rdma`` section, or a :class:`ConfigError` naming its absence."""
    if profile.rdma is None:
        raise ConfigError(
            f"profile: {profile.name!r} has no `rdma` section (TSoR's data plane); "
            "profile paper-003 has one"
        )
    return profile.rdma


def wire_goodput_gbps(r: RdmaCostTable) -> float:
    """Payload Gbps the link carries at full rate (RoCEv2 framing per packet)."""
    return r.link_gbps * r.roce_mtu_bytes / (r.roce_mtu_bytes + r.wire_overhead_bytes)


def _wire_s(r: RdmaCostTable, message_bytes: int) -> float:
    packets = max(1, -(-message_bytes // r.roce_mtu_bytes))
    return (message_bytes + packets * r.wire_overhead_bytes) * 8 / (r.link_gbps * 1e9)


def one_way_s(r: RdmaCostTable, message_bytes: int) -> float:
    """One message's trip from the sender's write to the receiver's read."""
    copies = 2 * message_bytes * r.copy_per_byte_s
    return r.message_fixed_s + copies + _wire_s(r, message_bytes)


def single_connection_gbps(r: RdmaCostTable, message_bytes: int) -> float:
    """One connection's throughput, pipelined: a message per its slowest part
    (a client's copy, a service's work, the wire)."""
    slowest = max(
        message_bytes * r.copy_per_byte_s, r.service_per_message_s, _wire_s(r, message_bytes)
    )
    return message_bytes * 8 / slowest / 1e9


def multi_connection_gbps(r: RdmaCostTable, message_bytes: int, connections: int) -> float:
    """``connections`` connections, each on its own cores: their sum, capped
    by the link's goodput and by each node's one service core."""
    svc = r.service_per_message_s
    service_gbps = message_bytes * 8 / svc / 1e9 if svc > 0.0 else float("inf")
    offered = connections * single_connection_gbps(r, message_bytes)
    return min(offered, wire_goodput_gbps(r), service_gbps)


def connect_s(r: RdmaCostTable) -> float:
    """A TCP connect over TSoR: request and response on the control channel
    (two small one-way trips) and a data channel made on each side."""
    return 2 * one_way_s(r, 64) + 2 * r.channel_setup_s


def host_connect_s(r: RdmaCostTable) -> float:
    """Host-mode runC's connect: SYN and SYN-ACK, one round trip of the host path."""
    return 2 * r.host_oneway_s


def request_s(r: RdmaCostTable, request_bytes: int = 64, reply_bytes: int = 64) -> float:
    """One request-response over TSoR with the server's time, one at a time."""
    return one_way_s(r, request_bytes) + r.redis_request_s + one_way_s(r, reply_bytes)


def host_request_s(r: RdmaCostTable) -> float:
    """The same over host-mode runC (the same server time)."""
    return 2 * r.host_oneway_s + r.redis_request_s


def closed_loop_rps(r: RdmaCostTable, clients: int, message_bytes: int = 64) -> float:
    """Requests per second of ``clients`` closed-loop clients (one connection
    each) of one single-threaded server over TSoR, by exact mean-value
    analysis: the server and each node's TSoR Service (a message each way per
    request on each node) are queues, the rest of the trips a delay."""
    if clients < 1:
        raise ValueError(f"clients must be at least 1 (got {clients})")
    svc = r.service_per_message_s
    # Each request passes each node's service twice (its request, its reply).
    queues = [r.redis_request_s, 2 * svc, 2 * svc]
    delay = request_s(r, message_bytes, message_bytes) - sum(queues)
    waiting = [0.0 for _ in queues]
    rps = 0.0
    for n in range(1, clients + 1):
        resid = [d * (1.0 + q) for d, q in zip(queues, waiting, strict=True)]
        rps = n / (delay + sum(resid))
        waiting = [rps * t for t in resid]
    return rps


def host_one_way_s(r: RdmaCostTable, message_bytes: int) -> float:
    """Host-mode runC's trip for ``message_bytes``: its small-message latency
    plus TSoR's per-byte copies and wire time, the least per-byte cost seed 003
    allows it (TSoR's single connection is the faster, Fig. 7a)."""
    return r.host_oneway_s + one_way_s(r, message_bytes) - one_way_s(r, 64)
