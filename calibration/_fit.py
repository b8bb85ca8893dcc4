"""Least-squares fitting of a profile's free costs to published targets.

The fit is weighted least squares on the relative errors (SciPy's
trust-region reflective method on log-costs, so that costs stay positive and
steps are relative). The objective is the mean of a simulation over a fixed
set of seeds — common random numbers: every evaluation sees the same draws —
so it is deterministic, but piecewise smooth: the finite-difference step is
a few percent, not 1e-8. Fitting the mean over several seeds, not one seed's
draws, is what lets a fit row hold on seeds the fit never saw.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from .._params import Check, Interval, Rules, validate
from ..models import Profile
from .targets import PaperTarget, TargetCheck, check_targets_over

__all__ = [
    "FitReport",
    "FreeParameter",
    "LeastSquaresFit",
    "ParameterSpread",
    "least_squares_fit",
    "parameter_spread",
    "unseen_directions",
]

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

    __rules__: ClassVar[Rules] = Rules(
        low=Interval(float, 0, closed="right"),
        checks=(
            Check(
                "start",
                lambda p: p.low <= p.start <= p.high,
                lambda p: f"must be within low={p.low}..high={p.high}",
            ),
        ),
    )

    def __post_init__(self) -> None:
        validate(self)


@dataclass(frozen=True, kw_only=True, slots=True)
class ParameterSpread:
    """How well the fit pins one free cost down.

    ``low``..``high`` is how far ``value`` can move, the other free costs
    re-adjusting, while the fitted rows' weighted relative errors change by
    at most ``rows_rel`` (root mean square over the rows), to first order.
    An unbounded side (``inf``, or ``0`` for ``low``) means a direction no
    fitted row sees mixes this cost in (always so with fewer rows than
    costs). ``alone_factor``: the same with the other costs held, as a
    factor either way (how strongly the rows feel this cost at all).
    """

    path: str
    value: float
    low: float
    high: float
    alone_factor: float
    rows_rel: float

    @property
    def factor(self) -> float:
        """``high / value``: the spread as one factor (``inf`` if unpinned)."""
        return self.high / self.value


def parameter_spread(
    jacobian: np.ndarray,
    log_values: np.ndarray,
    paths: Sequence[str],
    *,
    rows_rel: float = 0.01,
    rcond: float = 1e-9,
) -> tuple[ParameterSpread, ...]:
    """The linearised region of the fit, per parameter (see :class:`ParameterSpread`).

    ``jacobian`` is d(weighted relative residual)/d(log value), rows by
    parameters. The residuals move by ``J dx``; over the ellipsoid
    ``|J dx| <= rows_rel * sqrt(rows)``, parameter i reaches
    ``|dx_i| <= rows_rel * sqrt(rows) * sqrt(((J^T J)^-1)_ii)``, from the
    singular values of ``J``; one below ``rcond`` times the largest leaves
    the parameters it mixes unbounded.
    """
    jac = np.atleast_2d(np.asarray(jacobian, dtype=np.float64))
    m, n = jac.shape
    if n != len(paths) or len(log_values) != n:
        raise ValueError(
            f"one column and one value per path must hold, but got {jac.shape=}, "
            f"{len(log_values)=}, {len(paths)=}"
        )
    if not rows_rel > 0.0:
        raise ValueError(f"`rows_rel > 0` must hold, but got {rows_rel=}")
    column_norms = np.linalg.norm(jac, axis=0)
    sing, vt, keep = _directions(jac, rcond)
    radius = rows_rel * np.sqrt(m)
    spreads = []
    for i, path in enumerate(paths):
        weights = vt[:, i] ** 2
        # An unseen direction with more than rounding noise of this cost in it.
        if np.any(weights[~keep] > 1e-12):
            half = np.inf
        else:
            half = radius * float(np.sqrt(np.sum(weights[keep] / sing[keep] ** 2)))
        value = float(np.exp(log_values[i]))
        alone = radius / column_norms[i] if column_norms[i] > 0.0 else np.inf
        spreads.append(
            ParameterSpread(
                path=path,
                value=value,
                low=value / _factor(half),
                high=value * _factor(half),
                alone_factor=_factor(alone),
                rows_rel=rows_rel,
            )
        )
    return tuple(spreads)


def _factor(log_half_width: float) -> float:
    # Beyond e^700 a float overflows; that far is unbounded anyway.
    return math.exp(log_half_width) if log_half_width < 700.0 else math.inf


def unseen_directions(jacobian: np.ndarray, *, rcond: float = 1e-9) -> int:
    """Directions in the free costs that no fitted row sees (``columns - rank``):
    along them the fit's answer is wherever it started."""
    _, _, seen = _directions(np.atleast_2d(np.asarray(jacobian, dtype=np.float64)), rcond)
    return int(np.sum(~seen))


def _directions(jac: np.ndarray, rcond: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One singular value per direction in the costs (0 for those beyond the
    rows), the directions (rows of ``vt``), and which of them rows see: a
    singular value above ``rcond`` times the largest."""
    _, sing, vt = np.linalg.svd(jac, full_matrices=True)
    sing = np.concatenate([sing, np.zeros(jac.shape[1] - len(sing))])
    top = float(sing.max()) if sing.size else 0.0
    seen = sing > rcond * top if top > 0.0 else np.zeros(len(sing), dtype=bool)
    return sing, vt, seen


@dataclass(frozen=True, kw_only=True, slots=True)
class LeastSquaresFit:
    """What :func:`least_squares_fit` returns."""

    profile: Profile
    evaluations: int
    cost: float
    """Sum of squared weighted relative errors."""
    spread: tuple[ParameterSpread, ...]
    unseen_directions: int
    jacobian: np.ndarray | None = None
    """d(weighted relative residual)/d(log cost) at the solution, fitted rows by costs."""
    rows: tuple[PaperTarget, ...] = ()
    """The fitted rows, in the Jacobian's order."""

    def report(self, checks: Sequence[TargetCheck], *, profile: Profile | None = None) -> FitReport:
        """The :class:`FitReport` of this fit, checked by ``checks`` (on
        ``profile`` if a later step changed the fitted one)."""
        return FitReport(
            profile=self.profile if profile is None else profile,
            checks=tuple(checks),
            evaluations=self.evaluations,
            cost=self.cost,
            spread=self.spread,
            unseen_directions=self.unseen_directions,
        )


@dataclass(frozen=True, kw_only=True)
class FitReport:
    profile: Profile
    checks: tuple[TargetCheck, ...]
    evaluations: int
    cost: float
    spread: tuple[ParameterSpread, ...] = ()
    """How well the fit pins each free cost down (:func:`parameter_spread`)."""
    unseen_directions: int = 0
    """Directions in the free costs no fitted row sees (:func:`unseen_directions`)."""

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
    seeds: Sequence[int] | None = None,
    executor: str = "compiled",
    max_evaluations: int = 200,
    on_evaluation: Callable[[int, float], None] | None = None,
) -> LeastSquaresFit:
    """Fit ``params`` of ``base`` to the *fit* targets with a positive weight.

    The objective is each row's mean over ``seeds`` (default: ``seed`` alone).
    Returns the fitted profile (sources from ``source_for(target ids)``), the
    number of evaluations, the final cost and how well each parameter is
    pinned down (from the solver's last Jacobian).
    """
    used = [t for t in targets if t.role == "fit" and t.weight > 0.0]
    seeds = tuple(seeds) if seeds is not None else (seed,)
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
        model = np.array(
            [c.model for c in check_targets_over(used, prof, seeds=seeds, executor=executor)]
        )
        r: np.ndarray = weights * (model - values) / values
        if on_evaluation is not None:
            on_evaluation(calls, float(np.sum(r**2)))
        log.debug("evaluation %d: cost %.4g", calls, float(np.sum(r**2)))
        return r

    # SciPy's optimiser loads with the first fit (~0.5 s): `bootstorm --help`,
    # a simulation or a search never needs it.
    from scipy.optimize import least_squares

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
    spread = parameter_spread(sol.jac, sol.x, [p.path for p in params])
    return LeastSquaresFit(
        profile=fitted,
        evaluations=calls,
        cost=float(2 * sol.cost),
        spread=spread,
        unseen_directions=unseen_directions(sol.jac),
        jacobian=np.asarray(sol.jac),
        rows=tuple(used),
    )


def fit_published(
    profile: str,
    module: str,
    *,
    start: Profile | None,
    targets: Sequence[PaperTarget],
    params: Sequence[FreeParameter],
    seed: int = 0,
    executor: str = "compiled",
    max_evaluations: int = 200,
    on_evaluation: Callable[[int, float], None] | None = None,
) -> FitReport:
    """A published profile's fit: ``params`` of ``start`` (default: the
    built-in ``profile``) fitted to ``targets``, each fitted number's source
    naming its rows, the command that reproduces it and ``module`` (the file
    that declares the fit); the report checks the fit rows on ``seed``."""
    from ..models import load_profile
    from .targets import check_targets

    base = start if start is not None else load_profile(profile)
    fit = least_squares_fit(
        base,
        targets,
        params,
        source_for=lambda ids: (
            f"fit: {', '.join(ids)} by `bootstorm calibrate --targets {profile}` ({module})"
        ),
        seed=seed,
        executor=executor,
        max_evaluations=max_evaluations,
        on_evaluation=on_evaluation,
    )
    fitted = [t for t in targets if t.role == "fit"]
    return fit.report(tuple(check_targets(fitted, fit.profile, seed=seed, executor=executor)))
