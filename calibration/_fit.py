"""Least-squares fitting of a profile's free costs to published targets.

The fit is weighted least squares on the relative errors (SciPy's
trust-region reflective method on log-costs, so that costs stay positive and
steps are relative). The objective is a simulation with a fixed seed —
common random numbers — so it is deterministic, but piecewise smooth: the
finite-difference step is a few percent, not 1e-8.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from ..models import Profile
from ..simulator import Result
from .targets import PaperTarget, TargetCheck, check_targets

__all__ = ["FitReport", "FreeParameter", "least_squares_fit"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True, slots=True)
class FreeParameter:
    """A profile number the fit may move within ``[low, high]``, from ``start``.

    The fit always starts from ``start``, never from the profile's current
    value, so ``bootstorm calibrate --write`` gives the same profile however
    often it is run.
    """

    path: str
    start: float
    low: float
    high: float
    tied: tuple[str, ...] = ()
    """Other paths that take the same value (macvtap follows ipvtap)."""

    def __post_init__(self) -> None:
        if not 0.0 < self.low <= self.start <= self.high:
            raise ValueError(
                "`0 < low <= start <= high` must hold, "
                f"but got ({self.low=}, {self.start=}, {self.high=})"
            )


@dataclass(frozen=True, kw_only=True)
class FitReport:
    profile: Profile
    checks: tuple[TargetCheck, ...]
    evaluations: int
    cost: float

    @property
    def all_within(self) -> bool:
        """Every row the fit used is within its tolerance."""
        return all(c.within for c in self.checks if c.target.weight > 0.0)

    @property
    def misses(self) -> list[TargetCheck]:
        """Rows outside their tolerance, fitted or not."""
        return [c for c in self.checks if not c.within]

    def frame(self) -> Any:
        """The per-target error table as a pandas DataFrame."""
        import pandas as pd

        return pd.DataFrame(
            [
                {
                    "row": c.target.id,
                    "target": c.target.label,
                    "fitted": c.target.weight > 0,
                    "measured": c.target.value,
                    "model": c.model,
                    "error": c.rel_error,
                }
                for c in self.checks
            ]
        )


def _apply(
    profile: Profile, params: Sequence[FreeParameter], values: np.ndarray, source: str
) -> Profile:
    updates: dict[str, float] = {}
    for p, v in zip(params, values.tolist(), strict=True):
        v = float(f"{v:.6g}")  # a profile a person reads: 6 significant digits
        updates[p.path] = v
        for tied in p.tied:
            updates[tied] = v
    return profile.with_values(updates, source=source)


def least_squares_fit(
    base: Profile,
    targets: Sequence[PaperTarget],
    params: Sequence[FreeParameter],
    *,
    source_for: Callable[[list[str]], str],
    seed: int = 0,
    executor: str = "compiled",
    max_evaluations: int = 200,
    on_evaluation: Callable[[int, float], None] | None = None,
) -> tuple[Profile, int, float]:
    """Fit ``params`` of ``base`` to the *fit* targets with a positive weight.

    Returns the fitted profile (sources from ``source_for(target ids)``), the
    number of evaluations and the final cost (sum of squared weighted
    relative errors).
    """
    used = [t for t in targets if t.role == "fit" and t.weight > 0.0]
    if not used:
        raise ValueError("no fit targets with a positive weight")
    lo = np.log([p.low for p in params])
    hi = np.log([p.high for p in params])
    x0 = np.log([p.start for p in params])
    weights = np.array([t.weight for t in used])
    values = np.array([t.value for t in used])
    calls = 0

    def residuals(x: np.ndarray) -> np.ndarray:
        nonlocal calls
        calls += 1
        prof = _apply(base, params, np.exp(x), "fit (in progress)")
        cache: dict[str, Result] = {}
        model = np.array(
            [c.model for c in check_targets(used, prof, seed=seed, cache=cache, executor=executor)]
        )
        r: np.ndarray = weights * (model - values) / values
        if on_evaluation is not None:
            on_evaluation(calls, float(np.sum(r**2)))
        log.debug("evaluation %d: cost %.4g", calls, float(np.sum(r**2)))
        return r

    sol = least_squares(
        residuals,
        x0,
        bounds=(lo, hi),
        diff_step=0.03,
        x_scale=1.0,
        max_nfev=max_evaluations,
        xtol=1e-4,
        ftol=1e-6,
    )
    ids = sorted({t.id for t in used})
    fitted = _apply(base, params, np.exp(sol.x), source_for(ids))
    return fitted, calls, float(2 * sol.cost)
