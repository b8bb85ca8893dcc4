"""Fit the ``paper-004`` profile to seed 004's *fit* rows (S4-1, S4-2).

Four published single-flow throughputs (TCP and UDP, native and Docker
overlay) and four free costs: the NIC's per-packet work, the transport
stack's per-skb work, the overlay's per-packet work (VXLAN, bridge and veth
taken as equal), and the receiver's copy per byte. Everything else in
``paper-004.yaml`` comes from the seed, the kernel or an assumption; the
multi-flow, CPU and small-packet rows (S4-3 to S4-5) are predictions
(tests/calibration/test_paper_004.py).

Reproduce with ``bootstorm calibrate --targets paper-004 --write``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..models import Profile
from ..models.dataplane import Traffic
from ..models.softirq import DataplaneResult
from ._dataplane import dataplane_evaluator
from ._fit import FitReport, FreeParameter, fit_published
from .targets import PaperTarget

__all__ = ["FREE_PARAMETERS_004", "PAPER_004_FIT", "fit_paper_004", "single_flow"]

PROFILE = "paper-004"


def _ceiling(r: DataplaneResult) -> float:
    return float(r.per_flow_ceiling_gbps)


def single_flow(path: str, proto: str) -> Callable[[Profile | None], float]:
    """One iperf3 flow's throughput, Gbps (seed 004 Figs. 3 and 5 at one pair)."""
    traffic = Traffic(path=path, proto=proto, flows=1, draws=1)
    return dataplane_evaluator(PROFILE, traffic, _ceiling)


def _row(id_: str, label: str, path: str, proto: str, gbps: float) -> PaperTarget:
    return PaperTarget(
        id=id_,
        role="fit",
        label=label,
        evaluate=single_flow(path, proto),
        value=gbps,
        source="seed 004 §3.2, Figs. 3 and 5",
    )


PAPER_004_FIT: tuple[PaperTarget, ...] = (
    _row("S4-1", "single TCP flow, native (Gbps)", "native", "tcp", 23.0),
    _row("S4-1", "single TCP flow, Docker overlay (Gbps)", "docker-overlay", "tcp", 6.4),
    _row("S4-2", "single UDP flow, native (Gbps)", "native", "udp", 9.3),
    _row("S4-2", "single UDP flow, Docker overlay (Gbps)", "docker-overlay", "udp", 3.9),
)

# Starting points: hand solutions of the four rows (the overlay's per-packet
# cost from S4-2's gap, the NIC's and the stack's from the native rows).
FREE_PARAMETERS_004: tuple[FreeParameter, ...] = (
    FreeParameter(path="dataplane.stages.nic.per_packet_s", start=1.6e-7, low=1e-9, high=1e-5),
    FreeParameter(path="dataplane.stages.stack.per_packet_s", start=1e-6, low=1e-9, high=1e-4),
    FreeParameter(
        path="dataplane.stages.vxlan.per_packet_s",
        start=5.4e-7,
        low=1e-9,
        high=1e-5,
        tied=(
            "dataplane.stages.bridge.per_packet_s",
            "dataplane.stages.veth.per_packet_s",
        ),
    ),
    FreeParameter(path="dataplane.copy_per_byte_s", start=3.5e-10, low=1e-12, high=1e-8),
)


def fit_paper_004(
    *,
    start: Profile | None = None,
    targets: Sequence[PaperTarget] = PAPER_004_FIT,
    params: Sequence[FreeParameter] = FREE_PARAMETERS_004,
    seed: int = 0,
    executor: str = "compiled",
    max_evaluations: int = 200,
    on_evaluation: Callable[[int, float], None] | None = None,
) -> FitReport:
    """Fit ``params`` of ``start`` (default: the built-in ``paper-004``) to ``targets``."""
    return fit_published(
        PROFILE,
        "calibration/overlay_dataplane.py",
        start=start,
        targets=targets,
        params=params,
        seed=seed,
        executor=executor,
        max_evaluations=max_evaluations,
        on_evaluation=on_evaluation,
    )
