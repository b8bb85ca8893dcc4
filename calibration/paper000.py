"""Fit the ``paper-000`` profile to seed 000's *fit* rows.

Free parameters are the costs the profile's sources mark ``fit``; everything
else stays as the profile has it. The fit is weighted least squares on the
relative errors (SciPy's trust-region reflective method on log-costs, so that
costs stay positive and steps are relative). The objective is a simulation
with a fixed seed — common random numbers — so it is deterministic, but
piecewise smooth: the finite-difference step is a few percent, not 1e-8.

Reproduce with ``bootstorm calibrate --targets paper-000 --write``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from ..models import Profile, load_profile
from ..simulator import Result
from .targets import PAPER_000_FIT, PaperTarget, TargetCheck, check_targets

__all__ = ["FREE_PARAMETERS", "FitReport", "FreeParameter", "fit_paper_000"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True, slots=True)
class FreeParameter:
    """A profile number the fit may move, within ``[low, high]``."""

    path: str
    low: float
    high: float
    tied: tuple[str, ...] = ()
    """Other paths that take the same value (macvtap follows ipvtap)."""

    def __post_init__(self) -> None:
        if not 0.0 < self.low < self.high:
            raise ValueError(f"`0 < low < high` must hold, but got ({self.low=}, {self.high=})")


FREE_PARAMETERS: tuple[FreeParameter, ...] = (
    FreeParameter(path="costs.vm_boot_cpu_s", low=0.3, high=4.0),
    FreeParameter(path="costs.cgroup_mkdir_cpu_s", low=1e-4, high=0.05),
    FreeParameter(path="costs.netprio_hold_s", low=2e-5, high=0.01),
    FreeParameter(path="costs.rtnl_small_hold_s", low=2e-5, high=0.01),
    FreeParameter(path="costs.rtnl_tc_hold_s", low=2e-5, high=0.02),
    FreeParameter(path="costs.rtnl_link_hold_s", low=2e-5, high=0.02),
    FreeParameter(path="costs.rtnl_chardev_hold_s", low=1e-4, high=0.05),
    FreeParameter(path="costs.rcu_grace_s", low=1e-4, high=0.05),
)


@dataclass(frozen=True, kw_only=True)
class FitReport:
    profile: Profile
    checks: tuple[TargetCheck, ...]
    evaluations: int
    cost: float

    @property
    def all_within(self) -> bool:
        return all(c.within for c in self.checks)


def _apply(profile: Profile, params: Sequence[FreeParameter], values: np.ndarray, source: str) -> Profile:
    updates: dict[str, float] = {}
    for p, v in zip(params, values.tolist(), strict=True):
        v = float(f"{v:.6g}")  # a profile a person reads: 6 significant digits
        updates[p.path] = v
        for tied in p.tied:
            updates[tied] = v
    return profile.with_values(updates, source=source)


def _get(profile: Profile, path: str) -> float:
    node: object = profile.model_dump()
    for key in path.split("."):
        assert isinstance(node, dict)
        node = node[key]
    assert isinstance(node, float | int)
    return float(node)


def fit_paper_000(
    *,
    start: Profile | None = None,
    targets: Sequence[PaperTarget] = PAPER_000_FIT,
    params: Sequence[FreeParameter] = FREE_PARAMETERS,
    seed: int = 0,
    max_evaluations: int = 200,
    on_evaluation: Callable[[int, float], None] | None = None,
) -> FitReport:
    """Fit ``params`` of ``start`` (default: the built-in ``paper-000``) to ``targets``.

    Only targets with role ``fit`` and a positive weight enter the objective;
    the report checks all of them.
    """
    base = start if start is not None else load_profile("paper-000")
    used = [t for t in targets if t.role == "fit" and t.weight > 0.0]
    if not used:
        raise ValueError("no fit targets with a positive weight")
    lo = np.log([p.low for p in params])
    hi = np.log([p.high for p in params])
    x0 = np.clip(np.log([_get(base, p.path) for p in params]), lo + 1e-9, hi - 1e-9)
    weights = np.array([t.weight for t in used])
    values = np.array([t.value for t in used])
    calls = 0

    def residuals(x: np.ndarray) -> np.ndarray:
        nonlocal calls
        calls += 1
        prof = _apply(base, params, np.exp(x), "fit (in progress)")
        cache: dict[str, Result] = {}
        model = np.array([c.model for c in check_targets(used, prof, seed=seed, cache=cache)])
        r = weights * (model - values) / values
        if on_evaluation is not None:
            on_evaluation(calls, float(np.sum(r**2)))
        log.debug("evaluation %d: cost %.4g", calls, float(np.sum(r**2)))
        return r

    sol = least_squares(
        residuals, x0, bounds=(lo, hi), diff_step=0.03, x_scale=1.0, max_nfev=max_evaluations,
        xtol=1e-4, ftol=1e-6,
    )
    ids = sorted({t.id for t in used})
    fitted = _apply(
        base,
        params,
        np.exp(sol.x),
        f"fit: {', '.join(ids)} by `bootstorm calibrate --targets paper-000` (calibration/paper000.py)",
    )
    checks = tuple(check_targets([t for t in targets if t.role == "fit"], fitted, seed=seed))
    return FitReport(profile=fitted, checks=checks, evaluations=calls, cost=float(2 * sol.cost))
