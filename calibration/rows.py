"""What each paper check is: a *fit*, a *predict*, an *identity* or a *mechanism*.

``PAPER-TARGETS.md`` gives each published figure a role. A check of the model
against a figure is one of four things, and a reader must be able to tell
which without reading the fit code:

- **fit** — a profile cost was fitted (or a catalog count set) to it: it
  shows the fit converged, on seeds the fit never used, and nothing more;
- **predict** — nothing was fitted to it, and it follows from no fitted row
  by arithmetic: evidence the model is right;
- **identity** — it follows arithmetically from fitted rows (FastIOV's cut
  of vanilla's average is ``1 - 1.391 * 4.0 / 16.2`` once S1-1 and S1-4's
  fitted part hold): it cannot fail while they hold, so it is no evidence;
- **mechanism** — a statement about how the model is built (which stage a
  cost sits in, what the result exposes), true by construction: it guards a
  refactor, and is no evidence about the papers.

:data:`PAPER_ROWS` labels every check the paper tests make, by key
(``"<row>/<part>"``, the same keys as :data:`~.known_misses.KNOWN_MISSES`).
Each test says which keys it checks with :func:`checks_rows`, and
``tests/calibration/test_row_labels.py`` holds the tests, the targets, the
known misses and this table together.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import ClassVar, Literal, Protocol, TypeVar

from .._params import Check, OneOf, Rules, validate

__all__ = [
    "PAPER_ROWS",
    "ROW_KINDS",
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


_S1_4_IDENTITY = (
    "S1-1 fits vanilla's average to 16.2 s and no-network's to 4.0 s, and S1-4's fitted "
    "part sets FastIOV's to 1.391 x 4.0 = 5.564 s: the cut is 1 - 5.564/16.2 = 65.65%"
)

PAPER_ROWS: dict[str, PaperRow] = keyed(
    (
        # -- seed 000 --------------------------------------------------------------------
        PaperRow(key="S0-1", kind="fit", figure="no-network makespan ≈ 10 s"),
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
        PaperRow(key="S0-5/order", kind="predict", figure="ipvtap ≈ macvtap best"),
        PaperRow(key="S0-5/gap", kind="predict", figure="ipvtap 11.5% ahead of the second best"),
        PaperRow(key="S0-5/slower-than-none", kind="predict", figure="every CNI slower than none"),
        PaperRow(
            key="S0-5/ebpf",
            kind="fit",
            figure="eBPF ≈ 18 x no-network",
            why="costs.bpf_verify_hold_s has no independent source: solved for this figure",
        ),
        PaperRow(key="S0-6/cut", kind="predict", figure="full pooling 20.7 → 10.5 s (−49%)"),
        PaperRow(key="S0-6/near-none", kind="predict", figure="pooled within 5% of no-network"),
        PaperRow(
            key="S0-7",
            kind="fit",
            figure="400 vPorts x 400 ipvtaps ≈ 50 GB",
            why="costs.pool_device_mib was set from this figure",
        ),
        PaperRow(key="S0-8/cut", kind="predict", figure="tuned limits −18.8%"),
        PaperRow(key="S0-8/cpu", kind="predict", figure="tuned limits: lower peak and total CPU"),
        PaperRow(key="S0-9/total", kind="predict", figure="pooling + limits −58.9%"),
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
        PaperRow(key="S1-4/p99-vs-vanilla", kind="predict", figure="FastIOV vs vanilla p99 −75.4%"),
        PaperRow(key="S1-4/vf-time", kind="predict", figure="VF-related time −96.1%"),
        PaperRow(key="S1-4/p99", kind="predict", figure="FastIOV p99 +11.6% over no-network"),
        PaperRow(key="S1-4/vanilla-p99", kind="predict", figure="vanilla p99 +354.5% over none"),
        PaperRow(
            key="S1-4/ready",
            kind="mechanism",
            figure="FastIOV's NIC is ready after the sandbox",
            why="the catalog runs FastIOV's VF driver in the background (a branch)",
        ),
        PaperRow(key="S1-5/ablations", kind="predict", figure="ablations 21.8 / 40.3 / 58.2%"),
        PaperRow(key="S1-5/eager-zero", kind="predict", figure="without decoupled zeroing 43.7%"),
        PaperRow(
            key="S1-5/order", kind="predict", figure="every optimisation contributes, in order"
        ),
        PaperRow(
            key="S1-6", kind="predict", figure="FastIOV −56.4% vs Pre100; Pre10 > Pre50 > Pre100"
        ),
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
        PaperRow(key="S1-9/at-200", kind="predict", figure="node divided by 200: −65.7%"),
        PaperRow(key="S1-9/at-10", kind="predict", figure="node divided by 10: −79.5%"),
        PaperRow(key="S1-9/rises", kind="predict", figure="the reduction rises as N falls"),
        PaperRow(key="S1-10/faster", kind="predict", figure="FastIOV starts faster than ipvtap"),
        PaperRow(key="S1-10/makespan", kind="predict", figure="−41.3% makespan, −31.8% average"),
        # -- seeds 002 and 004 -------------------------------------------------------------
        PaperRow(key="S2-1", kind="fit", figure="bridge ≈ 56, OVS ≈ 70 Gbps plateau"),
        PaperRow(key="S2-1/plateau", kind="predict", figure="plateau from about 5 pairs"),
        PaperRow(key="S2-2/unequal", kind="predict", figure="pairs get unequal throughput"),
        PaperRow(key="S2-2/spread", kind="predict", figure="per-container spread up to 3x"),
        PaperRow(key="S2-3/ovs-apart", kind="predict", figure="OVS pinned apart +21.2%"),
        PaperRow(
            key="S2-3/bridge-together", kind="predict", figure="bridge pinned together −13.2%"
        ),
        PaperRow(key="S4-1", kind="fit", figure="single TCP flow 23 / 6.4 Gbps"),
        PaperRow(key="S4-2", kind="fit", figure="single UDP flow 9.3 / 3.9 Gbps"),
        PaperRow(key="S4-3", kind="predict", figure="overlay flows 1 → 6: x4"),
        PaperRow(key="S4-4", kind="predict", figure="overlay ≈ 2.5 x native CPU"),
        PaperRow(key="S4-5", kind="predict", figure="softirqs ≈ 3 x IRQs; half the packet rate"),
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
