"""Fit the ``paper-001`` profile to seed 001's *fit* rows (S1-1, S1-2, S1-3).

The storm is 200 sandboxes at once on the seed-001 host. Free parameters are
the costs the profile's sources mark ``fit``: the guest boot and virtiofsd
CPU, the cgroup mkdir, the node's memory bandwidth as zeroing sees it, the
VF open under the devset lock, and the VF driver's two parts. Everything
FastIOV changes is a *prediction* from these (tests/calibration/test_paper_001.py).

Reproduce with ``bootstorm calibrate --targets paper-001 --write``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..models import Profile, Scenario, load_profile
from ..simulator import Result
from ._fit import FitReport, FreeParameter, least_squares_fit
from .targets import FIT_SEEDS, Metric, PaperTarget, check_targets_over

__all__ = [
    "FREE_PARAMETERS_001",
    "PAPER_001_FIT",
    "TABLE_1",
    "dma_zero_share",
    "fit_paper_001",
    "inherit_from_paper_000",
    "startup_mean",
    "startup_p99",
    "step_share",
]

SANDBOXES = 200  # seed 001 §3.2.1: 200 sandboxes launched at once

startup_mean = Metric("startup.mean_s", lambda r: r.startup.mean)
startup_p99 = Metric("startup.p99_s", lambda r: r.startup.p99)


def step_share(stage: str, *, tail: bool) -> Metric:
    """A step's share of mean startup (Table 1's first column) or of the p99 tail's."""

    def read(r: Result) -> float:
        step = r.steps.get(stage)
        share = None if step is None else (step.p99_share if tail else step.mean_share)
        return 0.0 if share is None else share

    return Metric(f"steps.{stage}.{'p99' if tail else 'mean'}_share", read)


def dma_zero_share(r: Result) -> float:
    """Zeroing's share of the CPU time of DMA mapping (S1-3: > 93%)."""
    zero = total = 0.0
    for stage in ("dma-ram", "dma-image"):
        by_reason = r.cpu.by_stage.get(stage, {})
        zero += by_reason.get("zero", 0.0)
        total += sum(by_reason.values())
    return zero / total if total else 0.0


def storm(cni: str, **changes: object) -> Scenario:
    return Scenario(cni=cni, sandboxes=SANDBOXES, profile="paper-001").replace(**changes)


# Table 1: share of each step in vanilla SR-IOV's average and p99 startup, %.
TABLE_1: dict[str, tuple[float, float]] = {
    "cgroup": (2.9, 2.3),
    "dma-ram": (13.0, 11.1),
    "virtiofs": (13.3, 13.6),
    "dma-image": (5.6, 4.3),
    "vfio-devset": (48.1, 59.0),
    "vf-driver": (3.4, 4.1),
}


def _fit_row(
    id_: str,
    label: str,
    scenario: Scenario,
    metric: Metric,
    value: float,
    weight: float = 1.0,
    row_key: str = "",
) -> PaperTarget:
    return PaperTarget(
        weight=weight,
        id=id_,
        role="fit",
        label=label,
        scenario=scenario,
        metric=metric,
        value=value,
        source="seed 001 Fig. 1, §1" if id_ == "S1-1" else "seed 001 Table 1, §3.2.1",
        row_key=row_key,
    )


PAPER_001_FIT: tuple[PaperTarget, ...] = (
    # The headline numbers: weighted so that the fit does not trade them for shares.
    _fit_row("S1-1", "no-network average", storm("no-network"), startup_mean, 4.0, 2.0),
    _fit_row("S1-1", "vanilla SR-IOV average", storm("sriov-vanilla"), startup_mean, 16.2, 2.0),
    *(
        _fit_row(
            "S1-2",
            f"vanilla {stage} share of {'p99' if tail else 'average'}",
            storm("sriov-vanilla"),
            step_share(stage, tail=tail),
            (p99 if tail else mean) / 100.0,
            row_key="S1-2/p99" if tail else "S1-2/mean",
        )
        for stage, (mean, p99) in TABLE_1.items()
        for tail in (False, True)
    ),
    # S1-4's "FastIOV average +39.1% over no-network", as 1.391 x S1-1's 4.0 s.
    # No independent source gives the time the PF's admin queue takes to set
    # a VF's VLAN and rate under RTNL (sriov.vf_config_pf_s), and that is what
    # sets it apart from no-network besides the VF-related steps: this part
    # of S1-4 is moved to fit; the rest of S1-4 stays a prediction.
    PaperTarget(
        id="S1-4",
        role="fit",
        label="FastIOV average (+39.1% over no-network)",
        scenario=storm("fastiov"),
        metric=startup_mean,
        value=1.391 * 4.0,
        source="seed 001 §6.2, Fig. 10",
        row_key="S1-4/fastiov-vs-none",
    ),
    # "> 93%" is a lower bound, not a value: a check, not fitted (the
    # profile's pinning and mapping cost is an assumption that satisfies it).
    PaperTarget(
        id="S1-3",
        role="fit",
        label="zeroing share of DMA mapping (> 93%)",
        scenario=storm("sriov-vanilla"),
        metric=Metric("dma.zero_share", dma_zero_share),
        value=0.93,
        source="seed 001 §3.2.3",
        weight=0.0,
        at_least=True,
    ),
)

# Starting points: an earlier fit, rounded (the first started from hand
# estimates of each operation's cost). Last moved when paper-000's refit
# changed the RTNL costs taken from it: from the older starts the 200
# evaluations ended in a worse fit (a p99 share 15.6% off).
FREE_PARAMETERS_001: tuple[FreeParameter, ...] = (
    FreeParameter(path="costs.vm_boot_cpu_s", start=0.34, low=0.05, high=6.0),
    FreeParameter(path="costs.virtiofs_cpu_s", start=0.54, low=0.01, high=5.0),
    FreeParameter(path="costs.virtiofs_per_sandbox_s", start=4.4e-3, low=1e-6, high=0.05),
    FreeParameter(path="costs.cgroup_mkdir_cpu_s", start=1.8e-4, low=1e-5, high=0.05),
    FreeParameter(path="costs.cgroup_attach_cpu_s", start=1.76e-3, low=1e-5, high=0.05),
    FreeParameter(path="host.memory_bandwidth_gib_s", start=39.9, low=5.0, high=400.0),
    FreeParameter(path="sriov.vfio_open_s", start=0.082, low=1e-3, high=0.5),
    FreeParameter(path="sriov.vf_guest_init_s", start=0.44, low=1e-3, high=3.0),
    FreeParameter(path="sriov.vf_pf_service_s", start=2.2e-3, low=1e-5, high=0.5),
    FreeParameter(path="sriov.vf_pf_service_per_vf_s", start=5.2e-4, low=1e-6, high=0.02),
    FreeParameter(path="sriov.vf_config_pf_s", start=3.6e-3, low=1e-5, high=0.1),
)


def fit_paper_001(
    *,
    start: Profile | None = None,
    targets: Sequence[PaperTarget] = PAPER_001_FIT,
    params: Sequence[FreeParameter] = FREE_PARAMETERS_001,
    seeds: Sequence[int] = FIT_SEEDS,
    executor: str = "compiled",
    max_evaluations: int = 200,
    on_evaluation: Callable[[int, float], None] | None = None,
) -> FitReport:
    """Fit ``params`` of ``start`` (default: the built-in ``paper-001`` with
    paper-000's costs carried over, :func:`inherit_from_paper_000`) to
    ``targets``, each as its mean over ``seeds``."""
    base = (
        start
        if start is not None
        else inherit_from_paper_000(load_profile("paper-001"), load_profile("paper-000"))
    )
    fit = least_squares_fit(
        base,
        targets,
        params,
        source_for=lambda ids: (
            f"fit: {', '.join(ids)} by `bootstorm calibrate --targets "
            "paper-001` (calibration/sriov_startup.py)"
        ),
        seeds=seeds,
        executor=executor,
        max_evaluations=max_evaluations,
        on_evaluation=on_evaluation,
    )
    fitted = fit.profile
    checks = tuple(
        check_targets_over(
            [t for t in targets if t.role == "fit"], fitted, seeds=seeds, executor=executor
        )
    )
    return fit.report(checks)


_AS_PAPER_000 = "as paper-000"


def _number_at(data: dict[str, Any], path: str) -> Any:
    node: Any = data
    for key in path.split("."):
        node = node[key]
    return node


def inherit_from_paper_000(profile: Profile, paper_000: Profile) -> Profile:
    """``profile`` with every cost it takes from paper-000 (its source starts
    "as paper-000") set to paper-000's value, and its source saying what that
    value is there: fitted to seed 000, measured, or an assumption with no
    independent source. A cost carried over is only as good as its source in
    paper-000; "as paper-000" alone would make an assumption look calibrated."""
    theirs = paper_000.model_dump()
    out = profile
    for path, source in profile.sources.items():
        if not source.startswith(_AS_PAPER_000):
            continue
        there = paper_000.sources[path]
        out = out.with_values(
            {path: _number_at(theirs, path)},
            source=f"{_AS_PAPER_000} (the same operation on the same kind of host); there: {there}",
        )
    return out
