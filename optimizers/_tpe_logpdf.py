"""TPE's acquisition compiled: the Parzen mixtures' log-density, Optuna's bits.

Before each proposal TPE scores its 24 candidates under two mixtures of
truncated normals (the good trials' and the others'): for every candidate,
kernel and parameter, the log of a normal's mass over the candidate's
integer cell. Optuna computes that with a few dozen NumPy calls on small
arrays per parameter, and with all the trials as kernels it was two thirds
of the sampler's time at 300 trials. :func:`weighted_log_pdf` computes the
same matrix in one compiled loop, element by element in Optuna's order of
operations, with the same C library's ``log``, ``exp``, ``log1p``, ``erf``
and ``erfc`` (as :mod:`._tpe_ndtr`); the log-sum-exp over the kernels stays
NumPy's (its pairwise summation decides the last bit).

Optuna's result depends on more than each element: its ``erf`` maps
``math.erf`` over arrays below 2 000 elements and evaluates a polynomial
above, and the arrays it hands to ``erf`` are the *distinct* (lower, upper)
bounds in the central case. So this module counts the distinct pairs the
same way and takes the polynomial (:func:`_erf_polynomial`, Optuna's
``_erf_right_non_big`` step for step) where Optuna would.

Only mixtures of integer parameters (Optuna's discrete truncated normal and
log-normal) are compiled, which is every parameter a bootstorm search has;
anything else goes to Optuna. :func:`install` compares the two on random
mixtures, large ones included, and leaves Optuna's in use if one bit differs
(``tests/optimizers/test_tpe_logpdf.py`` checks many more and whole studies).
"""

from __future__ import annotations

import logging
import math
import sys
from typing import Any

import numpy as np
import numpy.typing as npt
from numba import njit  # type: ignore[import-not-found,unused-ignore]

from ._tpe_ndtr import _log_ndtr_one

__all__ = ["install", "installed", "log_pdf", "weighted_log_pdf"]

log = logging.getLogger(__name__)

_EPSILON = sys.float_info.epsilon
_ERF_SMALL = 2000
"""Optuna's ``erf`` maps ``math.erf`` below this many elements, a polynomial above."""
_state = {"installed": False, "tried": False}

# Optuna's _erf constants (fdlibm's), as its module defines them.
_ERX = 8.45062911510467529297e-01
_EFX = 1.28379167095512586316e-01
_ONE_EFX = 1 + _EFX
_PP = (
    1.28379167095512558561e-01,
    -3.25042107247001499370e-01,
    -2.84817495755985104766e-02,
    -5.77027029648944159157e-03,
    -2.37630166566501626084e-05,
)
_QQ = (
    1.0,
    3.97917223959155352819e-01,
    6.50222499887672944485e-02,
    5.08130628187576562776e-03,
    1.32494738004321644526e-04,
    -3.96022827877536812320e-06,
)
_PA = (
    -2.36211856075265944077e-03,
    4.14856118683748331666e-01,
    -3.72207876035701323847e-01,
    3.18346619901161753674e-01,
    -1.10894694282396677476e-01,
    3.54783043256182359371e-02,
    -2.16637559486879084300e-03,
)
_QA = (
    1.0,
    1.06420880400844228286e-01,
    5.40397917702171048937e-01,
    7.18286544141962662868e-02,
    1.26171219808761642112e-01,
    1.36370839120290507362e-02,
    1.19844998467991074170e-02,
)
_RA = (
    -9.86494403484714822705e-03,
    -6.93858572707181764372e-01,
    -1.05586262253232909814e01,
    -6.23753324503260060396e01,
    -1.62396669462573470355e02,
    -1.84605092906711035994e02,
    -8.12874355063065934246e01,
    -9.81432934416914548592e00,
)
_SA = (
    1.0,
    1.96512716674392571292e01,
    1.37657754143519042600e02,
    4.34565877475229228821e02,
    6.45387271733267880336e02,
    4.29008140027567833386e02,
    1.08635005541779435134e02,
    6.57024977031928170135e00,
    -6.04244152148580987438e-02,
)
_RB = (
    -9.86494292470009928597e-03,
    -7.99283237680523006574e-01,
    -1.77579549177547519889e01,
    -1.60636384855821916062e02,
    -6.37566443368389627722e02,
    -1.02509513161107724954e03,
    -4.83519191608651397019e02,
)
_SB = (
    1.0,
    3.03380607434824582924e01,
    3.25792512996573918826e02,
    1.53672958608443695994e03,
    3.19985821950859553908e03,
    2.55305040643316442583e03,
    4.74528541206955367215e02,
    -2.24409524465858183362e01,
)
_TINY, _SMALL1, _SMALL2, _MED = 2**-28, 0.84375, 1.25, 1 / 0.35

_jit = njit(cache=True, error_model="numpy")


@_jit  # type: ignore[misc,unused-ignore]
def _polyval(x: float, c: Any) -> float:
    """``numpy.polynomial.Polynomial(c)(x)``: Horner from the top coefficient."""
    c0 = c[-1] + x * 0.0
    for i in range(2, len(c) + 1):
        c0 = c[-i] + c0 * x
    return c0  # type: ignore[no-any-return]


@_jit  # type: ignore[misc,unused-ignore]
def _erf_polynomial(v: float) -> float:
    """Optuna's ``erf`` of an element of an array of 2 000 or more."""
    if v != v:
        return v
    a = abs(v)
    if a >= 6.0:
        out = 1.0
    elif a < _TINY:
        out = _ONE_EFX * a
    elif a < _SMALL1:
        z = a * a
        out = a * (1 + _polyval(z, _PP) / _polyval(z, _QQ))
    elif a < _SMALL2:
        s = a - 1
        out = _ERX + _polyval(s, _PA) / _polyval(s, _QA)
    elif a < _MED:
        z = a * a
        s = 1 / z
        out = 1 - math.exp(-z - 0.5625 + _polyval(s, _RA) / _polyval(s, _SA)) / a
    else:
        z = a * a
        s = 1 / z
        out = 1 - math.exp(-z - 0.5625 + _polyval(s, _RB) / _polyval(s, _SB)) / a
    sign = 1.0 if v > 0.0 else (-1.0 if v < 0.0 else 0.0)
    return sign * out


@_jit  # type: ignore[misc,unused-ignore]
def _ndtr(v: float, polynomial: bool) -> float:
    """``_truncnorm._ndtr`` of one element (``polynomial``: of a large array)."""
    x = v / 2**0.5
    e = _erf_polynomial(x) if polynomial else math.erf(x)
    return 0.5 + 0.5 * e


@_jit  # type: ignore[misc,unused-ignore]
def _log_diff(log_p: float, log_q: float) -> float:
    return log_p + math.log1p(-math.exp(log_q - log_p))


@_jit  # type: ignore[misc,unused-ignore]
def _log_gauss_mass(a: float, b: float, polynomial: bool, two: float, eps: float) -> float:
    """``_truncnorm._log_gauss_mass`` of one interval (its right case wins
    where its left case also holds, as Optuna's later assignment does)."""
    if a > 0.0:
        return _log_diff(_log_ndtr_one(-a, two, eps), _log_ndtr_one(-b, two, eps))
    if b <= 0.0:
        return _log_diff(_log_ndtr_one(b, two, eps), _log_ndtr_one(a, two, eps))
    return math.log1p(-_ndtr(a, polynomial) - _ndtr(-b, polynomial))


@_jit  # type: ignore[misc,unused-ignore]
def _distinct(first: Any, second: Any) -> Any:
    """Each pair's group among the distinct ``(first, second)`` pairs, and the
    number of groups (``np.unique``'s equality: ``-0.0 == 0.0``)."""
    n = first.shape[0]
    order = np.argsort(second, kind="mergesort")
    order = order[np.argsort(first[order], kind="mergesort")]
    group = np.empty(n, dtype=np.int64)
    groups = 0
    for j in range(n):
        i = order[j]
        if j > 0:
            prev = order[j - 1]
            if first[i] != first[prev] or second[i] != second[prev]:
                groups += 1
        group[i] = groups
    return group, groups + 1 if n else 0


@_jit  # type: ignore[misc,unused-ignore]
def _central(a: Any, b: Any) -> int:
    """How many intervals are in the central case."""
    count = 0
    for i in range(a.shape[0]):
        if not (a[i] > 0.0 or b[i] <= 0.0):
            count += 1
    return count


@_jit  # type: ignore[misc,unused-ignore]
def _central_groups(a: Any, b: Any, group: Any, groups: int) -> int:
    """How many of the distinct intervals are in the central case."""
    seen = np.zeros(groups, dtype=np.bool_)
    count = 0
    for i in range(a.shape[0]):
        if not (a[i] > 0.0 or b[i] <= 0.0) and not seen[group[i]]:
            seen[group[i]] = True
            count += 1
    return count


@_jit  # type: ignore[misc,unused-ignore]
def _weighted_log_pdf(
    x: Any,
    mus: Any,
    sigmas: Any,
    steps: Any,
    lows: Any,
    highs: Any,
    logs: Any,
    two: float,
    eps: float,
) -> Any:
    n_samples, n_params = x.shape
    n_kernels = mus.shape[1]
    out = np.zeros((n_samples, n_kernels))
    for p in range(n_params):
        mu, sigma, step = mus[p], sigmas[p], steps[p]
        # The distinct candidates and kernels (Optuna evaluates each once).
        x_group, n_x = _distinct(x[:, p], np.zeros(n_samples))
        k_group, n_k = _distinct(mu, sigma)
        x_first = np.empty(n_x, dtype=np.int64)
        for s in range(n_samples):
            x_first[x_group[s]] = s
        k_first = np.empty(n_k, dtype=np.int64)
        for k in range(n_kernels):
            k_first[k_group[k]] = k
        # The cell of each distinct candidate under each distinct kernel.
        lower = np.empty(n_x * n_k)
        upper = np.empty(n_x * n_k)
        for u in range(n_x):
            value = x[x_first[u], p]
            left = value - step / 2
            right = value + step / 2
            if logs[p]:
                left = math.log(left)
                right = math.log(right)
            for m in range(n_k):
                k = k_first[m]
                lower[u * n_k + m] = (left - mu[k]) / sigma[k]
                upper[u * n_k + m] = (right - mu[k]) / sigma[k]
        big = False
        if _central(lower, upper) >= _ERF_SMALL:  # else fewer distinct ones too
            pair_group, n_pairs = _distinct(lower, upper)
            big = _central_groups(lower, upper, pair_group, n_pairs) >= _ERF_SMALL
        mass = np.empty(n_x * n_k)
        for i in range(n_x * n_k):
            mass[i] = _log_gauss_mass(lower[i], upper[i], big, two, eps)
        # Each distinct kernel's mass inside the parameter's range.
        a = np.empty(n_k)
        b = np.empty(n_k)
        for m in range(n_k):
            k = k_first[m]
            a[m] = (lows[p] - mu[k]) / sigma[k]
            b[m] = (highs[p] - mu[k]) / sigma[k]
        big = _central(a, b) >= _ERF_SMALL  # the distinct kernels, each once
        accept = np.empty(n_k)
        for m in range(n_k):
            accept[m] = _log_gauss_mass(a[m], b[m], big, two, eps)
        for s in range(n_samples):
            row = x_group[s] * n_k
            for k in range(n_kernels):
                out[s, k] += mass[row + k_group[k]]
                out[s, k] -= accept[k_group[k]]
    return out


def _discrete(distributions: Any) -> bool:
    from optuna.samplers._tpe.probability_distributions import (
        _BatchedDiscreteTruncLogNormDistributions,
        _BatchedDiscreteTruncNormDistributions,
    )

    kinds = (_BatchedDiscreteTruncNormDistributions, _BatchedDiscreteTruncLogNormDistributions)
    return bool(distributions) and all(isinstance(d, kinds) for d in distributions)


def weighted_log_pdf(mixture: Any, x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Optuna's ``_MixtureOfProductDistribution.log_pdf`` before its
    log-sum-exp: each candidate's (row of ``x``) log-density under each
    kernel, plus nothing yet for the kernels' weights. Integer parameters only."""
    dists = mixture.distributions
    out: npt.NDArray[np.float64] = _weighted_log_pdf(
        np.ascontiguousarray(x, dtype=np.float64),
        np.ascontiguousarray([d.mu for d in dists], dtype=np.float64),
        np.ascontiguousarray([d.sigma for d in dists], dtype=np.float64),
        np.array([d.step for d in dists], dtype=np.float64),
        np.array([d.adapted_low for d in dists], dtype=np.float64),
        np.array([d.adapted_high for d in dists], dtype=np.float64),
        np.array([d.is_log for d in dists], dtype=np.bool_),
        2.0,
        _EPSILON,
    )
    return out


def _mixture_log_pdf(mixture: Any, x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """``_MixtureOfProductDistribution.log_pdf``, compiled up to its log-sum-exp."""
    weighted = weighted_log_pdf(mixture, x)
    # From here on Optuna's lines, on NumPy.
    weighted += np.log(mixture.weights[np.newaxis])
    max_ = weighted.max(axis=1)
    max_[np.isneginf(max_)] = 0
    with np.errstate(divide="ignore"):
        out: npt.NDArray[np.float64] = np.log(np.exp(weighted - max_[:, None]).sum(axis=1)) + max_
    return out


def log_pdf(estimator: Any, samples: dict[str, npt.NDArray[np.float64]]) -> Any:
    """``estimator.log_pdf(samples)`` (an Optuna ``_ParzenEstimator``),
    compiled where :func:`install` found it the same, else Optuna's."""
    mixture = getattr(estimator, "_mixture_distribution", None)
    if not _state["installed"] or mixture is None or not _discrete(mixture.distributions):
        return estimator.log_pdf(samples)
    return _mixture_log_pdf(mixture, estimator._transform(samples))


def tpe_parameters() -> Any:
    """The Parzen estimators' parameters of bootstorm's TPE (Optuna's defaults, multivariate)."""
    from optuna.samplers._tpe.parzen_estimator import _ParzenEstimatorParameters
    from optuna.samplers._tpe.sampler import default_weights

    return _ParzenEstimatorParameters(
        prior_weight=1.0,
        consider_magic_clip=True,
        consider_endpoints=False,
        weights=default_weights,
        multivariate=True,
    )


def _probe_mixtures(rng: np.random.Generator) -> list[tuple[Any, dict[str, Any]]]:
    """Mixtures as TPE builds them, small and large (the polynomial ``erf``)."""
    from optuna.distributions import BaseDistribution, IntDistribution
    from optuna.samplers._tpe.parzen_estimator import _ParzenEstimator

    space: dict[str, BaseDistribution] = {
        "a": IntDistribution(1, 400, log=True),
        "b": IntDistribution(1, 400),
        "c": IntDistribution(1, 64, log=True),
    }
    parameters = tpe_parameters()
    out = []
    for n in (0, 1, 7, 60, 400):
        bounds = {
            name: (d.low, d.high) for name, d in space.items() if isinstance(d, IntDistribution)
        }
        observations = {
            name: rng.integers(lo, hi + 1, n).astype(float) for name, (lo, hi) in bounds.items()
        }
        estimator = _ParzenEstimator(observations, space, parameters)
        samples = {
            name: rng.integers(lo, hi + 1, 24).astype(float) for name, (lo, hi) in bounds.items()
        }
        out.append((estimator, samples))
    return out


def install() -> bool:
    """Use the compiled log-density in :class:`._tpe.TpeSampler` if it gives
    Optuna's bits on probe mixtures here. Idempotent; whether it is in use."""
    if _state["tried"]:
        return _state["installed"]
    _state["tried"] = True
    try:
        probes = _probe_mixtures(np.random.default_rng(0))
        same = True
        for estimator, samples in probes:
            mixture = estimator._mixture_distribution
            want = mixture.log_pdf(estimator._transform(samples))
            got = _mixture_log_pdf(mixture, estimator._transform(samples))
            same = same and np.array_equal(want.view(np.int64), got.view(np.int64))
    except Exception as exc:  # another Optuna's internals: leave it as it is
        log.info("Optuna's TPE is not the one this was written for (%s): left as it is", exc)
        return False
    if not same:
        # Not a warning: TPE then runs as Optuna ships it (same proposals, slower);
        # nothing for the user to do (NumPy's SIMD exp/log differ in the last bit on
        # some CPUs, e.g. AVX-512).
        log.info("compiled TPE log-density differs from Optuna's on this machine: not used")
        return False
    _state["installed"] = True
    return True


def installed() -> bool:
    """Whether :func:`log_pdf` computes the acquisition compiled."""
    return _state["installed"]
