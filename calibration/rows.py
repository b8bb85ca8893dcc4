"""What each paper check is: a *fit*, a *predict*, an *identity* or a *mechanism*.

``PAPER-TARGETS.md`` gives each published figure a role. A check of the model
against a figure is one of four things, and a reader must be able to tell
which without reading the fit code:

- **fit** — a profile cost was fitted (or a catalog count set) to it: it
  shows the fit converged, on seeds the fit never used, and nothing more;
- **predict** — nothing was fitted to it, and it follows from no fitted row
  by arithmetic: evidence the model is right;
- **identity** — it follows arithmetically from other rows (FastIOV's cut
  of vanilla's average is ``1 - 1.391 * 4.0 / 16.2`` once S1-1 and S1-4's
  fitted part hold): it cannot fail while they hold, so it is no evidence.
  Checked mechanically where the relation is declared
  (:class:`Derivation`, ``calibrate --check``): the relation evaluated on the
  *paper's* values of the rows it uses lands within the row's tolerance of
  the model's number;
- **mechanism** — a statement about how the model is built (which stage a
  cost sits in, what the result exposes), true by construction: it guards a
  refactor, and is no evidence about the papers.

:data:`PAPER_ROWS` labels every check the paper tests make, by key
(``"<row>/<part>"``, the same keys as :data:`~.known_misses.KNOWN_MISSES`).
A cost chosen by scanning values against a row makes that row a fit, even
when the values scanned were measured (S4-5's receive pass, S0-5's FIFO
hand-over). Each test says which keys it checks with :func:`checks_rows`, and
``tests/calibration/test_row_labels.py`` holds the tests, the targets, the
known misses and this table together.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import ClassVar, Literal, Protocol, TypeVar

from .._params import Check, NonEmpty, OneOf, Rules, validate

__all__ = [
    "PAPER_ROWS",
    "ROW_KINDS",
    "Derivation",
    "PaperRow",
    "RowKind",
    "checks_rows",
    "keyed",
    "kinds_of",
    "paper_row",
]

RowKind = Literal["fit", "predict", "identity", "mechanism"]
ROW_KINDS: tuple[RowKind, ...] = ("fit", "predict", "identity", "mechanism")


@dataclass(frozen=True, kw_only=True, slots=True)
class PaperRow:
    """One check of the model against a figure (see the module doc)."""

    key: str
    kind: RowKind
    figure: str
    why: str = ""
    """For *identity*: which fitted rows it follows from; for *mechanism*: what
    construction makes it true; for a *fit* part of a predict row: the cost no
    independent source gives."""

    @property
    def row(self) -> str:
        """The row of ``PAPER-TARGETS.md`` (or the seed's figure): the key's head."""
        return self.key.split("/", 1)[0]

    __rules__: ClassVar[Rules] = Rules(
        kind=OneOf(ROW_KINDS),
        checks=(
            Check(
                "why",
                lambda r: bool(r.why) or r.kind not in ("identity", "mechanism"),
                lambda r: f"must say why for an identity or mechanism row (row {r.key!r})",
            ),
        ),
    )

    def __post_init__(self) -> None:
        validate(self)


@dataclass(frozen=True, kw_only=True, slots=True)
class Derivation:
    """A row's number as arithmetic of other rows' numbers: ``relation`` takes
    the values of ``uses`` (check rows, ``"<key>"`` or ``"<key>:<label>"`` where
    the key names several), in order. Evaluated on the paper's values it says
    what the fitted rows alone make of the row; on the model's, whether the
    model's number is that arithmetic (``bootstorm.calibration.check``)."""

    uses: tuple[str, ...]
    formula: str
    """The relation as a reader checks it: ``1 - S0-1 / S0-2``."""
    relation: Callable[..., float]

    __rules__: ClassVar[Rules] = Rules(uses=NonEmpty(), formula=NonEmpty())

    def __post_init__(self) -> None:
        validate(self)


class _Keyed(Protocol):
    @property
    def key(self) -> str: ...


_K = TypeVar("_K", bound=_Keyed)


def keyed(items: Iterable[_K], *, what: str) -> dict[str, _K]:
    """``items`` by their ``key``, in order; a key given twice is a
    :class:`ValueError` naming ``what`` it is (a registry's typo, not input)."""
    out: dict[str, _K] = {}
    for item in items:
        if item.key in out:
            raise ValueError(f"duplicate {what} {item.key!r}")
        out[item.key] = item
    return out


#: S0-5 chose ``costs.mutex_wake_s``: its first source (0df074a) and the
#: research log say a 50 us wake-up, refitted, made ipvtap the slowest CNI
#: "so the default stays 0" (FIFO hand-over).
_S0_5_CHOSE_FIFO = (
    "costs.mutex_wake_s = 0 (FIFO hand-over) was kept because a refit with a 50 us wake-up "
    "made ipvtap the slowest CNI: a cost chosen against this row"
)

_S1_4_IDENTITY = (
    "S1-1 fits vanilla's average to 16.2 s and no-network's to 4.0 s, and S1-4's fitted "
    "part sets FastIOV's to 1.391 x 4.0 = 5.564 s: the cut is 1 - 5.564/16.2 = 65.65%"
)

PAPER_ROWS: dict[str, PaperRow] = keyed(
    (
        # -- seed 000 --------------------------------------------------------------------
        PaperRow(key="S0-1", kind="fit", figure="no-network makespan ≈ 10 s"),
        PaperRow(
            key="S0-1/edge",
            kind="fit",
            figure="no-network makespan ≈ 10 s on any twenty seeds the fit never used",
        ),
        PaperRow(key="S0-2", kind="fit", figure="ipvtap makespan 20.7 s"),
        PaperRow(key="S0-3/contention", kind="fit", figure="RTNL contention time per CNI"),
        PaperRow(key="S0-3/no-network", kind="fit", figure="RTNL contention, no network, 0.162 s"),
        PaperRow(
            key="S0-3/acquisitions",
            kind="fit",
            figure="RTNL acquisitions per CNI",
            why="the catalog's RTNL operations per device (models/cni.py) were set from Table 3",
        ),
        PaperRow(
            key="S0-4",
            kind="fit",
            figure="share of RTNL acquisitions in AttachIf+StartVM",
            why="the catalog's placement of each RTNL operation was set from §4.2.2",
        ),
        PaperRow(
            key="S0-5/order", kind="fit", figure="ipvtap ≈ macvtap best", why=_S0_5_CHOSE_FIFO
        ),
        PaperRow(
            key="S0-5/gap",
            kind="fit",
            figure="ipvtap 11.5% ahead of the second best",
            why=_S0_5_CHOSE_FIFO,
        ),
        PaperRow(key="S0-5/slower-than-none", kind="predict", figure="every CNI slower than none"),
        PaperRow(
            key="S0-5/ebpf",
            kind="fit",
            figure="eBPF ≈ 18 x no-network",
            why="costs.bpf_verify_hold_s has no independent source: solved for this figure",
        ),
        PaperRow(
            key="S0-6/cut",
            kind="identity",
            figure="full pooling 20.7 → 10.5 s (−49%)",
            why="with pooled ipvtap at no-network's makespan (S0-6/near-none, the prediction) "
            "the cut is 1 - S0-1/S0-2 = 1 - 10/20.7 = 51.7% of the fitted rows",
        ),
        PaperRow(key="S0-6/near-none", kind="predict", figure="pooled within 5% of no-network"),
        PaperRow(
            key="S0-7",
            kind="fit",
            figure="400 vPorts x 400 ipvtaps ≈ 50 GB",
            why="costs.pool_device_mib was set from this figure",
        ),
        PaperRow(key="S0-8/cut", kind="predict", figure="tuned limits −18.8%"),
        PaperRow(key="S0-8/cpu", kind="predict", figure="tuned limits: lower peak and total CPU"),
        PaperRow(
            key="S0-9/total",
            kind="identity",
            figure="pooling + limits −58.9%",
            why="1 - (1 - S0-6/cut) x (1 - S0-9/on-top) of the same storms, exactly (seed "
            "000: 1 - 0.51 x 0.819 = 58.2%): an identity of S0-6's cut and the limits' cut "
            "on a pooled node, not checked by calibrate --check (it needs a search)",
        ),
        PaperRow(key="S0-9/on-top", kind="predict", figure="limits on a pooled node −18.1%"),
        PaperRow(key="S0-10", kind="predict", figure="limits tuned at 400 carry to 200-800"),
        PaperRow(key="S0-11/sharing", kind="predict", figure="QoS on sharing-mode CNIs < +4%"),
        PaperRow(key="S0-11/veth-direction", kind="predict", figure="QoS costs veth the most"),
        PaperRow(key="S0-11/veth", kind="predict", figure="QoS on veth +48.4%"),
        PaperRow(
            key="S0-12/many-rules",
            kind="fit",
            figure="50, 100 security-group rules grow the storm, AddCNI longest",
            why="one ovs-ofctl call per rule (not a batch per pod) was chosen for this figure",
        ),
        PaperRow(key="S0-12/ten-rules", kind="predict", figure="10 rules per pod: no change"),
        PaperRow(
            key="S0-13/no-qos", kind="predict", figure="tenants 1 → 200 without QoS: no change"
        ),
        PaperRow(
            key="S0-13/qos-tenants", kind="predict", figure="with QoS, tenants grow the storm"
        ),
        PaperRow(key="S0-14", kind="predict", figure="spinning with network ≥ 2.05 x none"),
        PaperRow(key="S0-14/ebpf", kind="predict", figure="eBPF spinning ≥ 2.05 x none"),
        PaperRow(
            key="S0-15",
            kind="mechanism",
            figure="lock-grant order alone: 45 s against 62 s",
            why="the block durations are not in the text: a schedule built to show the mechanism",
        ),
        PaperRow(key="S0-Fig6/ipvtap-addcni", kind="predict", figure="ipvtap AddCNI > veth AddCNI"),
        PaperRow(
            key="S0-Fig6/ebpf-addcni",
            kind="predict",
            figure="eBPF's overhead over no network is in AddCNI",
        ),
        PaperRow(key="S0-Fig6/vhost-startvm", kind="predict", figure="vhost-user StartVM grows"),
        PaperRow(
            key="S0-Fig6/ipvtap-cgroup", kind="predict", figure="ipvtap gains mainly in Cgroup"
        ),
        PaperRow(
            key="S0-Fig6/ipvlan-cgroup", kind="predict", figure="ipvlan grows Cgroup the most"
        ),
        # -- seed 001 --------------------------------------------------------------------
        PaperRow(key="S1-1", kind="fit", figure="no-network 4.0 s, vanilla 16.2 s average"),
        PaperRow(key="S1-2/mean", kind="fit", figure="Table 1, share of the average"),
        PaperRow(key="S1-2/p99", kind="fit", figure="Table 1, share of the p99 tail"),
        PaperRow(key="S1-2/shares", kind="fit", figure="Table 1 shares within ±15%"),
        PaperRow(key="S1-3", kind="fit", figure="zeroing > 93% of DMA mapping"),
        PaperRow(
            key="S1-4/fastiov-vs-none",
            kind="fit",
            figure="FastIOV average +39.1% over no-network",
            why="no source gives the PF's VLAN/rate configuration time (sriov.vf_config_pf_s)",
        ),
        PaperRow(
            key="S1-4/avg-vs-vanilla",
            kind="identity",
            figure="FastIOV vs vanilla average −65.7%",
            why=_S1_4_IDENTITY,
        ),
        PaperRow(
            key="S1-4/vanilla-vs-none",
            kind="identity",
            figure="vanilla average +305.2% over no-network",
            why="S1-1 fits both averages: 16.2/4.0 − 1 = 305%",
        ),
        PaperRow(
            key="S1-4/p99-vs-vanilla",
            kind="identity",
            figure="FastIOV vs vanilla p99 −75.4%",
            why="1 - (1 + S1-4/p99) / (1 + S1-4/vanilla-p99): the quotient of two rows checked "
            "on their own (the same storms), whose numerator misses (+142%); no-network's "
            "p99 cancels, so it holds while its numerator misses and is no evidence",
        ),
        PaperRow(key="S1-4/vf-time", kind="predict", figure="VF-related time −96.1%"),
        PaperRow(key="S1-4/p99", kind="predict", figure="FastIOV p99 +11.6% over no-network"),
        PaperRow(key="S1-4/vanilla-p99", kind="predict", figure="vanilla p99 +354.5% over none"),
        PaperRow(
            key="S1-4/ready",
            kind="mechanism",
            figure="FastIOV's NIC is ready after the sandbox",
            why="the catalog runs FastIOV's VF driver in the background (a branch)",
        ),
        PaperRow(key="S1-5/ablations", kind="predict", figure="ablations L / A: 21.8 / 40.3%"),
        PaperRow(
            key="S1-5/no-skip",
            kind="identity",
            figure="without mapping skip 58.2%",
            why="FastIOV (S1-4's fitted part) plus vanilla's fitted dma-image time (S1-2): "
            "1 - (5.564 + 0.056 x 16.2) / 16.2 = 60.0%",
        ),
        PaperRow(
            key="S1-5/eager-zero",
            kind="identity",
            figure="without decoupled zeroing 43.7%",
            why="FastIOV (S1-4's fitted part) plus vanilla's fitted dma-ram time (S1-2): "
            "1 - (5.564 + 0.13 x 16.2) / 16.2 = 52.7%, which the model gives; seed 001's "
            "43.7% says eager zeroing costs FastIOV more than vanilla's dma-ram step",
        ),
        PaperRow(
            key="S1-5/order", kind="predict", figure="every optimisation contributes, in order"
        ),
        PaperRow(
            key="S1-6",
            kind="identity",
            figure="FastIOV −56.4% vs Pre100",
            why="Pre100 is vanilla less its fitted zeroing (S1-1, S1-2's DMA shares, S1-3): "
            "1 - 5.564 / (16.2 x (1 - 0.93 x (0.13 + 0.056))) = 58.5%",
        ),
        PaperRow(key="S1-6/order", kind="predict", figure="Pre10 > Pre50 > Pre100"),
        PaperRow(
            key="S1-7/at-200",
            kind="identity",
            figure="reduction 65.6% at 200",
            why="the storm of S1-4/avg-vs-vanilla: " + _S1_4_IDENTITY,
        ),
        PaperRow(key="S1-7/grows", kind="predict", figure="reduction grows from 10 to 200"),
        PaperRow(key="S1-7/at-10", kind="predict", figure="reduction 46.7% at 10"),
        PaperRow(key="S1-8/direction", kind="predict", figure="FastIOV less sensitive to memory"),
        PaperRow(key="S1-8/memory", kind="predict", figure="+60.5% vanilla, +21.5% FastIOV"),
        PaperRow(
            key="S1-9/at-200",
            kind="identity",
            figure="node divided by 200: −65.7%",
            why="seed 001's 65.7% is S1-4's cut of the fitted storm, 1 - 5.564/16.2; the "
            "model's storm of 1.3 GB and 0.56 vCPU per sandbox lands within 15% of it",
        ),
        PaperRow(key="S1-9/at-10", kind="predict", figure="node divided by 10: −79.5%"),
        PaperRow(key="S1-9/rises", kind="predict", figure="the reduction rises as N falls"),
        PaperRow(key="S1-10/faster", kind="predict", figure="FastIOV starts faster than ipvtap"),
        PaperRow(key="S1-10/makespan", kind="predict", figure="−41.3% makespan, −31.8% average"),
        # -- seed 003: TSoR ---------------------------------------------------------------
        PaperRow(key="S3-1", kind="fit", figure="one connection, 64 KB: 34.3 Gbps"),
        PaperRow(key="S3-2", kind="fit", figure="64 B messages: 9.3 us"),
        PaperRow(
            key="S3-2/vs-host",
            kind="fit",
            figure="64 B latency 70% below host-mode runC",
            why="rdma.host_oneway_s (host-mode runC's small-message latency) has no other "
            "source: solved for this figure",
        ),
        PaperRow(
            key="S3-3",
            kind="identity",
            figure="64 KB, 3 connections saturate 100 Gbps",
            why="three connections of S3-1's 34.3 Gbps exceed the link, whose RoCEv2 goodput "
            "at a 4096-byte MTU is 100 x 4096/4178 = 98.0 Gbps: the link's number, not TSoR's",
        ),
        PaperRow(
            key="S3-4/vs-host",
            kind="identity",
            figure="TCP connection setup less than half of host-mode runC's",
            why="a TSoR connect is one round trip of S3-2's 9.3 us trips (plus a data channel "
            "on each side, 1 us assumed), host runC's one round trip of its own: the cut is "
            "about S3-2's 70%",
        ),
        PaperRow(
            key="S3-4/qp",
            kind="mechanism",
            figure="a QP setup takes several ms against hundreds of us for TCP",
            why="the catalog charges a per-connection QP setup the paper's 'up to several "
            "milliseconds' (tsor.qp_setup_s, an assumption taken from §4.1.3's words)",
        ),
        PaperRow(
            key="S3-5/set-rps",
            kind="fit",
            figure="Redis SET, one connection, 42 K RPS",
            why="rdma.redis_request_s (Redis's own time per request) has no source: solved "
            "for this figure",
        ),
        PaperRow(
            key="S3-5/set-p95",
            kind="identity",
            figure="Redis SET p95 23 us",
            why="one connection, one request at a time: the latency is 1 / S3-5's 42 K RPS "
            "= 23.8 us (the model has no spread, so its p95 is its mean)",
        ),
        PaperRow(key="S3-5/get-3", kind="predict", figure="Redis GET, 3 connections: 108 K RPS"),
        PaperRow(
            key="S3-5/latency-vs-host",
            kind="identity",
            figure="Redis SET p95 64% below host-mode runC",
            why="1 - (1/RPS) / (2 x host latency + Redis's time) with S3-2's latencies and "
            "S3-5's fitted RPS: arithmetic of the fit rows",
        ),
        PaperRow(
            key="S3-5/rps-vs-host",
            kind="identity",
            figure="Redis SET RPS 2.3 x host-mode runC",
            why="(2 x host latency + Redis's time) x RPS with S3-2's latencies and S3-5's "
            "fitted RPS: arithmetic of the fit rows, which lands at 2.8x",
        ),
        PaperRow(
            key="S3-6/throughput",
            kind="predict",
            figure="Node.js 64 KB document: 3.11 x host-mode runC's throughput",
        ),
        PaperRow(key="S3-7/txn-put", kind="predict", figure="etcd txn-put 1.49 x host runC's RPS"),
        PaperRow(
            key="S3-M/no-device",
            kind="mechanism",
            figure="a TSoR pod makes no network device (static CIDR, node-level connections)",
            why="the catalog's TSoR pod takes RTNL only for its namespace's loopback and "
            "net_prio's two operations (models/tsor.py)",
        ),
        PaperRow(
            key="S3-M/assumed-costs",
            kind="predict",
            figure="a TSoR pod's start costs (the paper gives none)",
        ),
        PaperRow(
            key="S3-M/dynamic-ip",
            kind="predict",
            figure="the wait for a dynamic IP to propagate (the paper gives none)",
        ),
        PaperRow(
            key="S3-M/qp-per-pod",
            kind="predict",
            figure="a per-pod QP setup and memory registration (the paper: 'several ms')",
        ),
        # -- seeds 002 and 004 -------------------------------------------------------------
        PaperRow(key="S2-1", kind="fit", figure="bridge ≈ 56, OVS ≈ 70 Gbps plateau"),
        PaperRow(
            key="S2-1/plateau",
            kind="predict",
            figure="plateau from about 5 pairs (bridge, OVS, macvlan)",
        ),
        PaperRow(
            key="S2-Fig2/order",
            kind="identity",
            figure="driver order at 50 pairs: OVS > macvlan > bridge",
            why="S2-1 fits bridge 56 < OVS 70 Gbps, and S2-Fig5/macvlan fits macvlan's cost "
            "so that its flows take 1.109x OVS's: its aggregate lands near 70 / 1.109 = 63, "
            "between them",
        ),
        PaperRow(key="S2-2/unequal", kind="predict", figure="pairs get unequal throughput"),
        PaperRow(key="S2-2/spread", kind="predict", figure="per-container spread up to 3x"),
        PaperRow(
            key="S2-2/extremes",
            kind="predict",
            figure="bridge pairs from ≈ 0.6 to ≈ 1.6 Gbps at 50 pairs (Fig. 3)",
        ),
        PaperRow(key="S2-3/ovs-apart", kind="predict", figure="OVS pinned apart +21.2%"),
        PaperRow(
            key="S2-3/bridge-together", kind="predict", figure="bridge pinned together −13.2%"
        ),
        PaperRow(
            key="S2-Fig5/p99",
            kind="predict",
            figure="FCT p99 of 5 MB, 10 / 50 pairs: bridge 154.3 / 202.6, macvlan 115.9 / "
            "162.0, OVS 110.7 / 146.1 ms",
        ),
        PaperRow(
            key="S2-Fig5/growth",
            kind="predict",
            figure="FCT p99 from 10 to 50 pairs: bridge +31.3%, macvlan +39.8%, OVS +32.0%",
        ),
        PaperRow(
            key="S2-Fig5/drivers",
            kind="identity",
            figure="FCT p99 bridge / OVS: 1.39 at 10 and at 50 pairs",
            why="a flow's time is its size over its share of the CPU-bound aggregate, so the "
            "drivers' FCT ratio is S2-1's throughput ratio, 70 / 56 = 1.25, with the spread's "
            "shape on top; calibrate --check finds it within 15%",
        ),
        PaperRow(
            key="S2-Fig5/macvlan",
            kind="fit",
            figure="FCT p99 macvlan / OVS at 50 pairs: 162.0 / 146.1 ms = 1.109",
            why="dataplane.stages.macvlan.per_packet_s is fitted to it: seed 002 gives no "
            "other macvlan number (its Fig. 2 plateau is not in the text)",
        ),
        PaperRow(
            key="S2-Fig5/macvlan-10",
            kind="identity",
            figure="FCT p99 macvlan / OVS at 10 pairs: 115.9 / 110.7 ms = 1.047",
            why="the same drivers' throughput ratio as the fitted 50 pairs' (S2-Fig5/macvlan): "
            "both ride the one fitted macvlan cost",
        ),
        PaperRow(
            key="S2-Fig10/rises",
            kind="mechanism",
            figure="aggregate throughput rises with message size (50 pairs, Fig. 10)",
            why="every stage costs per skb and GSO makes an skb of one message (up to 64 KB): "
            "fewer, larger skbs carry more bytes per core-second by construction",
        ),
        PaperRow(key="S4-1", kind="fit", figure="single TCP flow 23 / 6.4 Gbps"),
        PaperRow(
            key="S4-1/linux-overlay",
            kind="predict",
            figure="single TCP flow, Linux overlay 6.5 Gbps",
        ),
        PaperRow(key="S4-2", kind="fit", figure="single UDP flow 9.3 / 3.9 Gbps"),
        PaperRow(
            key="S4-2/linux-overlay",
            kind="predict",
            figure="single UDP flow, Linux overlay 4.7 Gbps",
        ),
        PaperRow(key="S4-3", kind="predict", figure="overlay flows 1 → 6: x4 (6.4 → 25 Gbps)"),
        PaperRow(
            key="S4-Fig3/one-flow",
            kind="identity",
            figure="one TCP flow: overlay 72% below native",
            why="the quotient of S4-1's two fitted flows, 6.4 / 23 = 0.278",
        ),
        PaperRow(
            key="S4-Fig3/six-flows",
            kind="predict",
            figure="six TCP flows: overlay 25 against native ≈ 37 Gbps",
        ),
        PaperRow(
            key="S4-Fig3/eighty-flows",
            kind="identity",
            figure="80 TCP flows: overlay and native both saturate 40 Gbps",
            why="80 flows of S4-1's rates exceed the link on either path: the ratio is the "
            "goodputs' through VXLAN and natively, 1398 / 1448 = 0.965, the link's number",
        ),
        PaperRow(
            key="S4-Fig4/cpu",
            kind="predict",
            figure="one TCP flow: the overlay burns as much CPU as native (or more)",
        ),
        PaperRow(
            key="S4-Fig5/native-flat",
            kind="identity",
            figure="native UDP flat whatever the flow count (≈ 9.3 Gbps)",
            why="the catalog hashes native UDP on addresses only (seed 004's explanation), so "
            "every flow lands on S4-2's one saturated core: S4-2 native itself",
        ),
        PaperRow(
            key="S4-Fig7/gap-widens",
            kind="predict",
            figure="TCP packet rate: overlay near native at 64 B, the gap widening to 8 KB",
        ),
        PaperRow(
            key="S4-Fig8/lower-cpu",
            kind="predict",
            figure="small TCP packets: the overlay uses less CPU than native",
        ),
        PaperRow(
            key="S4-Fig9/order",
            kind="predict",
            figure="64 B UDP packet rate: Docker overlay < Linux overlay < native",
        ),
        PaperRow(
            key="S4-Fig11/irq",
            kind="identity",
            figure="64 B UDP: the overlay's IRQs ≈ 10 x its TCP case",
            why="TCP's 64 B messages ride 1398-byte frames at the receiver-bound rate native "
            "64 B UDP runs at, so the IRQ ratio is S4-5/rate (a fit) x 1398 / 64 = 10.9",
        ),
        PaperRow(
            key="S4-3/native",
            kind="identity",
            figure="native reaches ≈ 37 Gbps with 2 flows",
            why="two flows of S4-1's 23 Gbps exceed the 40 GbE link, whose TCP goodput at "
            "MTU 1500 is 40 x 1448/1538 = 37.7 Gbps: the link's number, not the softirq model's",
        ),
        PaperRow(key="S4-4", kind="predict", figure="overlay ≈ 2.5 x native CPU"),
        PaperRow(
            key="S4-5/softirqs",
            kind="mechanism",
            figure="softirqs ≈ 3 x IRQs in the overlay",
            why="the catalog's overlay path is seed 004's one IRQ and three softirqs per packet",
        ),
        PaperRow(
            key="S4-5/rate",
            kind="fit",
            figure="64 B UDP: overlay ≈ 50% of native packet rate",
            why="the receive pass (dataplane.syscall_s: select() + read(), not read() alone; "
            "no per-datagram softirq cost) was chosen among measured costs after each was "
            "computed against this row",
        ),
        PaperRow(
            key="S4-5/lower-cpu",
            kind="fit",
            figure="64 B UDP: the overlay's lower rate comes with lower CPU",
            why="follows from the receiver-bound native flow that the choice of S4-5/rate made",
        ),
    ),
    what="paper row",
)


def paper_row(key: str) -> PaperRow:
    """The label of check ``key``; a clear error naming the known keys otherwise."""
    try:
        return PAPER_ROWS[key]
    except KeyError:
        raise KeyError(f"no paper row {key!r}; known: {', '.join(PAPER_ROWS)}") from None


F = TypeVar("F", bound=Callable[..., object])


def checks_rows(*keys: str) -> Callable[[F], F]:
    """Mark a test with the paper rows it checks (``fn.paper_rows``); an
    unlabelled key fails at import, so a test cannot check an unlabelled row."""
    rows = tuple(paper_row(k) for k in keys)

    def mark(fn: F) -> F:
        fn.paper_rows = rows  # type: ignore[attr-defined]
        return fn

    return mark


def kinds_of(keys: Iterable[str]) -> set[RowKind]:
    """The kinds of the rows ``keys``."""
    return {paper_row(k).kind for k in keys}
