"""How well a fit pins each cost down: exact answers on linear Jacobians."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bootstorm.calibration import parameter_spread, unseen_directions


def test_independent_parameters_spread_by_their_own_sensitivity() -> None:
    """J = diag(2, 0.5), 2 rows, 1% RMS: |dx_i| <= 0.01 * sqrt(2) / J_ii in log."""
    spread = parameter_spread(np.diag([2.0, 0.5]), np.log([3.0, 5.0]), ["a", "b"], rows_rel=0.01)
    half = [0.01 * math.sqrt(2) / 2.0, 0.01 * math.sqrt(2) / 0.5]
    for p, value, h in zip(spread, (3.0, 5.0), half, strict=True):
        assert p.value == pytest.approx(value)
        assert p.high == pytest.approx(value * math.exp(h))
        assert p.low == pytest.approx(value * math.exp(-h))
        assert p.factor == pytest.approx(math.exp(h))


def test_correlated_parameters_spread_further_than_alone() -> None:
    """Two parameters that rows see nearly only as a sum: each alone is pinned
    (J_ii = 1), together they trade off, so the region is long along a = -b.
    With J = [[1, 1], [1, 1 + e]], ((J^T J)^-1)_11 = (1 + (1+e)^2) / e^2."""
    e = 0.1
    jac = np.array([[1.0, 1.0], [1.0, 1.0 + e]])
    a = parameter_spread(jac, np.zeros(2), ["a", "b"], rows_rel=0.01)[0]
    expected = 0.01 * math.sqrt(2) * math.sqrt((1 + (1 + e) ** 2) / e**2)
    assert math.log(a.factor) == pytest.approx(expected)


def test_a_direction_no_row_sees_is_unbounded() -> None:
    """Rows see only a + b: a and b are unpinned, c is pinned."""
    jac = np.array([[1.0, 1.0, 0.0], [2.0, 2.0, 0.0], [0.0, 0.0, 1.0]])
    a, b, c = parameter_spread(jac, np.zeros(3), ["a", "b", "c"])
    assert a.high == b.high == math.inf and a.low == b.low == 0.0
    assert c.factor == pytest.approx(math.exp(0.01 * math.sqrt(3)))
    # More parameters than rows: something is always unpinned.
    (d, e) = parameter_spread(np.array([[1.0, 0.0]]), np.zeros(2), ["d", "e"])
    assert d.factor < math.inf and e.factor == math.inf


def test_bad_shapes_and_tolerances_name_the_values() -> None:
    with pytest.raises(ValueError, match=r"jac.shape=\(2, 2\).*len\(paths\)=3"):
        parameter_spread(np.eye(2), np.zeros(2), ["a", "b", "c"])
    with pytest.raises(ValueError, match=r"rows_rel=0\.0"):
        parameter_spread(np.eye(2), np.zeros(2), ["a", "b"], rows_rel=0.0)


def test_unseen_directions_count_what_no_row_sees() -> None:
    assert unseen_directions(np.eye(3)) == 0
    assert unseen_directions(np.array([[1.0, 1.0, 0.0], [2.0, 2.0, 0.0], [0.0, 0.0, 1.0]])) == 1
    assert unseen_directions(np.zeros((4, 2))) == 2
    assert unseen_directions(np.ones((1, 3))) == 2  # one row, three costs


def test_alone_is_each_column_by_itself() -> None:
    """Held apart, a cost moves until its own column alone moves the rows by
    the radius: |dx| = 0.01 * sqrt(rows) / |J_i|."""
    jac = np.array([[1.0, 1.0], [1.0, 1.1]])
    a, b = parameter_spread(jac, np.zeros(2), ["a", "b"], rows_rel=0.01)
    assert math.log(a.alone_factor) == pytest.approx(0.01 * math.sqrt(2) / math.sqrt(2.0))
    assert math.log(b.alone_factor) == pytest.approx(0.01 * math.sqrt(2) / math.sqrt(1 + 1.21))
    assert a.alone_factor < a.factor  # together they trade off


def test_a_nearly_unseen_direction_is_unbounded_without_overflow() -> None:
    jac = np.array([[1.0, 1.0], [1.0, 1.0 + 1e-8]])  # seen, barely: e^(1e6) overflows
    with np.errstate(all="raise"):
        a, _ = parameter_spread(jac, np.zeros(2), ["a", "b"])
    assert a.high == math.inf and a.low == 0.0
