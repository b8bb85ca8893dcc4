"""Optuna's TPE, made cheaper without changing a single proposal.

On the compiled executor a TPE trial of the 400-sandbox storm spent more
time in the sampler (≈ 8 ms) than in the simulation (≈ 6 ms), and 80% of
the sampler's time was one function: ``optuna.samplers._tpe._truncnorm._log_ndtr``,
the log of the normal CDF, which maps a Python function (behind a
1000-entry LRU cache that a search overflows) over arrays of thousands of
elements per candidate. This module compiles the same function, operation for
operation, with numba and puts it in its place. It does the same for
``_truncnorm.erf`` on arrays below 2 000 elements (there Optuna maps
``math.erf`` in a Python list comprehension; above, it runs a NumPy
polynomial, which stays).

The floats must be the same to the bit, or the sampler would propose other
trials. The compiled function calls the same C library's ``erf``, ``erfc``,
``log`` and ``pow`` that CPython's ``math`` calls (the exponent of ``a**2``
is passed in at run time: LLVM would otherwise turn ``pow(a, 2)`` into
``a * a``, which differs from glibc's ``pow`` in the last bit about once in
a thousand). :func:`install` checks that on probe values covering each
branch before replacing anything, and leaves Optuna alone if one differs or
if Optuna's internals are not the ones this was written against
(``tests/optimizers/test_tpe_ndtr.py`` checks millions of values and a
whole study's trials).
"""

from __future__ import annotations

import logging
import math
import sys
from typing import Any

import numpy as np
import numpy.typing as npt
from numba import njit  # type: ignore[import-not-found,unused-ignore]

__all__ = ["erf", "install", "installed", "log_ndtr"]

log = logging.getLogger(__name__)

_EPSILON = sys.float_info.epsilon
_SQRT2 = 2**0.5
_state = {"installed": False, "tried": False}


@njit(cache=True, error_model="numpy")  # type: ignore[misc,unused-ignore]
def _ndtr_one(a: float) -> float:
    """``_truncnorm._ndtr_single``, line for line."""
    x = a / 2**0.5
    if x < -1 / 2**0.5:
        return 0.5 * math.erfc(-x)
    if x < 1 / 2**0.5:
        return 0.5 + 0.5 * math.erf(x)
    return 1.0 - 0.5 * math.erfc(x)


@njit(cache=True, error_model="numpy")  # type: ignore[misc,unused-ignore]
def _log_ndtr_one(a: float, two: float, eps: float) -> float:
    """``_truncnorm._log_ndtr_single``, line for line (``two`` is 2.0, see the module)."""
    if a > 6:
        return -_ndtr_one(-a)
    if a > -20:
        return math.log(_ndtr_one(a))
    log_lhs = -0.5 * math.pow(a, two) - math.log(-a) - 0.5 * math.log(2 * math.pi)
    last_total = 0.0
    right_hand_side = 1.0
    numerator = 1.0
    denom_factor = 1.0
    denom_cons = 1 / math.pow(a, two)
    sign = 1
    i = 0
    while abs(last_total - right_hand_side) > eps:
        i += 1
        last_total = right_hand_side
        sign = -sign
        denom_factor *= denom_cons
        numerator *= 2 * i - 1
        right_hand_side += sign * numerator * denom_factor
    return log_lhs + math.log(right_hand_side)


@njit(cache=True, error_model="numpy")  # type: ignore[misc,unused-ignore]
def _log_ndtr_flat(a: Any, two: float, eps: float) -> Any:
    out = np.empty(a.shape[0])
    for i in range(a.shape[0]):
        out[i] = _log_ndtr_one(a[i], two, eps)
    return out


@njit(cache=True, error_model="numpy")  # type: ignore[misc,unused-ignore]
def _erf_flat(x: Any) -> Any:
    out = np.empty(x.shape[0])
    for i in range(x.shape[0]):
        out[i] = math.erf(x[i])
    return out


_SMALL = 2000
"""Below this many elements Optuna's ``erf`` maps ``math.erf``; above, it
runs its own NumPy polynomial (other bits), which :func:`erf` keeps."""


def erf(x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """``optuna.samplers._tpe._erf.erf``: ``math.erf`` compiled below
    :data:`_SMALL` elements, Optuna's own function above."""
    if x.size >= _SMALL:
        return _optuna_erf(x)
    flat = np.ascontiguousarray(x, dtype=np.float64).reshape(-1)
    out: npt.NDArray[np.float64] = _erf_flat(flat)
    return out.reshape(x.shape)


def _optuna_erf(x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    from optuna.samplers._tpe import _erf

    return _erf.erf(x)


def log_ndtr(a: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """``log(Φ(a))`` elementwise, as ``_truncnorm._log_ndtr`` computes it."""
    arr = np.asarray(a, dtype=np.float64)
    flat = np.ascontiguousarray(arr).reshape(-1)
    out: npt.NDArray[np.float64] = _log_ndtr_flat(flat, 2.0, _EPSILON)
    return out.reshape(arr.shape)


def _probes() -> npt.NDArray[np.float64]:
    """Values through every branch: the right tail, the erf/erfc middle, the
    asymptotic series, and the branch edges."""
    edges = np.array([6.0, -20.0, -1.0, 1.0, 0.0, -0.0, 1e-300, -1e-300, 40.0, -40.0])
    # A few thousand values: they run through Optuna's Python at every start
    # (the tests check millions).
    grid = np.linspace(-60.0, 12.0, 1001)
    rng = np.random.default_rng(0)
    return np.concatenate([edges, np.nextafter(edges, 0.0), grid, rng.normal(0.0, 15.0, 1000)])


def install() -> bool:
    """Put :func:`log_ndtr` and :func:`erf` in Optuna's TPE if they give the same bits there.

    Idempotent; returns whether the compiled functions are in use. Anything
    unexpected (another Optuna, a probe that differs) leaves Optuna as it is.
    """
    if _state["tried"]:
        return _state["installed"]
    _state["tried"] = True
    try:
        from optuna.samplers._tpe import _erf, _truncnorm
    except ImportError:  # pragma: no cover - depends on Optuna's layout
        return False
    single = getattr(_truncnorm, "_log_ndtr_single", None)
    original = getattr(single, "__wrapped__", single)
    if (
        original is None
        or not callable(getattr(_truncnorm, "_log_ndtr", None))
        or getattr(_truncnorm, "erf", None) is not _erf.erf  # imported by name there
    ):
        log.info("Optuna's TPE is not the one this was written for: left as it is")
        return False
    probes = _probes()
    want = np.array([original(float(x)) for x in probes])
    got = log_ndtr(probes)
    # Optuna's erf on pieces below its threshold: math.erf, element by element.
    pieces = [probes[i : i + _SMALL - 1] for i in range(0, probes.size, _SMALL - 1)]
    erf_want = np.concatenate([_erf.erf(p) for p in pieces])
    erf_got = np.concatenate([erf(p) for p in pieces])
    if not (
        np.array_equal(want.view(np.int64), got.view(np.int64))
        and np.array_equal(erf_want.view(np.int64), erf_got.view(np.int64))
    ):
        # Not a warning: TPE then runs as Optuna ships it (same proposals, slower);
        # nothing for the user to do (NumPy's SIMD exp/log differ in the last bit on
        # some CPUs, e.g. AVX-512).
        log.info("compiled log_ndtr or erf differs from Optuna's on this machine: not used")
        return False
    _truncnorm._log_ndtr = log_ndtr
    _truncnorm.erf = erf  # type: ignore[attr-defined]
    _state["installed"] = True
    return True


def installed() -> bool:
    """Whether Optuna's TPE runs on :func:`log_ndtr`."""
    return _state["installed"]
