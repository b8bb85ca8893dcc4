"""Fit the ``paper-002`` profile to seed 002's *fit* rows: S2-1 and macvlan's
flow completion time against OVS's (Fig. 5).

Container pairs on one 8-vCPU VM talk through the VM's bridge, OVS or macvlan
(intra-host): the aggregate plateaus at ≈56 Gbps (bridge) and ≈70 Gbps (OVS)
because the vCPUs are exhausted. Seed 002 gives no macvlan throughput in its
text; its only macvlan numbers are the flow completion times of Fig. 5, whose
p99 at 50 pairs is 1.109x OVS's. Each flow's time is its size over its share
of the CPU-bound aggregate, so the drivers' ratio of completion times is their
throughput ratio (bridge against OVS holds as an identity of S2-1); macvlan's
per-skb cost is fitted to that ratio. Three free costs, the bridge's, the OVS
datapath's and macvlan's per-skb work; the copy, veth and stack costs are
paper-004's fit scaled by clock (an assumption). The spread among pairs
(S2-2), pinning (S2-3) and the completion times themselves are predictions
(tests/calibration/test_paper_002.py).

Reproduce with ``bootstorm calibrate --targets paper-002 --write``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..models import Profile, load_profile
from ..models.dataplane import Traffic
from ..models.softirq import DataplaneResult, solve_on_profile
from ._dataplane import dataplane_evaluator
from ._fit import FitReport, FreeParameter, fit_published
from .targets import PaperTarget

__all__ = [
    "FCT_BYTES",
    "FREE_PARAMETERS_002",
    "MACVLAN_OVER_OVS_P99",
    "PAIRS",
    "PAPER_002_FIT",
    "FctRatio",
    "fct_traffic",
    "fit_paper_002",
    "pairs_traffic",
]

PROFILE = "paper-002"
PAIRS = 50  # seed 002 Fig. 2 runs 1 to 50 pairs; the plateau is read at 50
#: Seed 002 §III-A: netcat sends "a fixed amount of data (5 MB)" per pair for
#: the flow completion times (Fig. 5); read as 5 MiB (``dd bs=1M count=5``).
FCT_BYTES = 5 * 2**20


def pairs_traffic(path: str, pairs: int = PAIRS, **changes: object) -> Traffic:
    """``pairs`` iperf TCP pairs through the VM's ``path`` (bridge-intra, ovs-intra)."""
    return Traffic(path=path, proto="tcp", flows=pairs, draws=32, **changes)


def fct_traffic(path: str, pairs: int) -> Traffic:
    """``pairs`` netcat pairs each sending :data:`FCT_BYTES` at once (seed 002 Fig. 5)."""
    return pairs_traffic(path, pairs, flow_bytes=FCT_BYTES)


def _aggregate(r: DataplaneResult) -> float:
    return float(r.aggregate_gbps)


def _row(label: str, path: str, gbps: float) -> PaperTarget:
    return PaperTarget(
        id="S2-1",
        role="fit",
        label=label,
        evaluate=dataplane_evaluator(PROFILE, pairs_traffic(path), _aggregate),
        value=gbps,
        source="seed 002 §III-B, Fig. 2",
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class FctRatio:
    """The p99 flow completion time of :data:`FCT_BYTES` through ``path`` over
    ``under``'s, at ``pairs`` pairs, on a profile (``None``: the built-in one)."""

    path: str
    under: str
    pairs: int

    def __call__(self, profile: Profile | None) -> float:
        prof = profile if profile is not None else load_profile(PROFILE)
        over = solve_on_profile(prof, fct_traffic(self.path, self.pairs)).fct_p99_s
        base = solve_on_profile(prof, fct_traffic(self.under, self.pairs)).fct_p99_s
        assert over is not None and base is not None  # loads with flow_bytes
        return float(over) / float(base)


#: Seed 002 §III-B (Fig. 5): p99 of 5 MB at 50 pairs, macvlan 162.0 ms, OVS 146.1 ms.
MACVLAN_OVER_OVS_P99 = 162.0 / 146.1

PAPER_002_FIT: tuple[PaperTarget, ...] = (
    _row("bridge aggregate, 50 pairs (Gbps)", "bridge-intra", 56.0),
    _row("OVS aggregate, 50 pairs (Gbps)", "ovs-intra", 70.0),
    PaperTarget(
        id="S2-Fig5",
        row_key="S2-Fig5/macvlan",
        role="fit",
        label="FCT p99 macvlan / OVS, 50 pairs",
        evaluate=FctRatio(path="macvlan-intra", under="ovs-intra", pairs=PAIRS),
        value=MACVLAN_OVER_OVS_P99,
        source="seed 002 §III-B, Fig. 5",
    ),
)

FREE_PARAMETERS_002: tuple[FreeParameter, ...] = (
    FreeParameter(path="dataplane.stages.bridge.per_packet_s", start=2e-5, low=1e-8, high=1e-3),
    FreeParameter(path="dataplane.stages.ovs.per_packet_s", start=5e-6, low=1e-8, high=1e-3),
    FreeParameter(path="dataplane.stages.macvlan.per_packet_s", start=1e-5, low=1e-8, high=1e-3),
)


def fit_paper_002(
    *,
    start: Profile | None = None,
    targets: Sequence[PaperTarget] = PAPER_002_FIT,
    params: Sequence[FreeParameter] = FREE_PARAMETERS_002,
    seed: int = 0,
    executor: str = "compiled",
    max_evaluations: int = 200,
    on_evaluation: Callable[[int, float], None] | None = None,
) -> FitReport:
    """Fit ``params`` of ``start`` (default: the built-in ``paper-002``) to ``targets``."""
    return fit_published(
        PROFILE,
        "calibration/intra_host_dataplane.py",
        start=start,
        targets=targets,
        params=params,
        seed=seed,
        executor=executor,
        max_evaluations=max_evaluations,
        on_evaluation=on_evaluation,
    )
