"""The compiled log-normal-CDF in Optuna's TPE gives Optuna's own bits."""

from __future__ import annotations

import numpy as np
import optuna
import pytest
from optuna.samplers._tpe import _truncnorm

from bootstorm.optimizers import _tpe_ndtr
from bootstorm.optimizers._samplers import make_sampler


def _original(values: np.ndarray) -> np.ndarray:
    single = _truncnorm._log_ndtr_single.__wrapped__  # without its LRU cache
    return np.array([single(float(x)) for x in values])


@pytest.mark.parametrize(
    "values",
    [
        np.random.default_rng(1).normal(0.0, 5.0, 200_000),
        np.random.default_rng(2).uniform(-80.0, 40.0, 200_000),
        np.random.default_rng(3).normal(0.0, 1e-3, 20_000),
        np.linspace(-45.0, 10.0, 100_001),
    ],
    ids=["normal", "uniform-tails", "near-zero", "grid"],
)
def test_same_bits_as_optuna(values: np.ndarray) -> None:
    got = _tpe_ndtr.log_ndtr(values)
    assert np.array_equal(got.view(np.int64), _original(values).view(np.int64))


@pytest.mark.parametrize("size", [0, 1, 24, 1999, 2000, 5000])
def test_erf_gives_optunas_bits_on_both_sides_of_its_threshold(size: int) -> None:
    from optuna.samplers._tpe import _erf

    values = np.random.default_rng(size).normal(0.0, 3.0, size).reshape(-1, 1)
    want = _erf.erf(values)
    got = _tpe_ndtr.erf(values)
    assert got.shape == want.shape
    assert np.array_equal(got.view(np.int64), want.view(np.int64))


def test_keeps_shape() -> None:
    a = np.linspace(-30.0, 8.0, 12).reshape(3, 4)
    assert _tpe_ndtr.log_ndtr(a).shape == (3, 4)
    assert np.array_equal(_tpe_ndtr.log_ndtr(a).ravel(), _tpe_ndtr.log_ndtr(a.ravel()))


def test_tpe_installs_it() -> None:
    make_sampler("tpe", seed=0, n_objectives=1)
    assert _tpe_ndtr.installed()
    assert _truncnorm._log_ndtr is _tpe_ndtr.log_ndtr
    assert _truncnorm.erf is _tpe_ndtr.erf


def _trials(patched: bool) -> list[tuple[dict[str, int], float]]:
    from optuna.samplers._tpe import _erf

    saved, saved_erf = _truncnorm._log_ndtr, _truncnorm.erf
    original = _truncnorm._log_ndtr_single

    def slow(a: np.ndarray) -> np.ndarray:
        return np.frompyfunc(original, 1, 1)(a).astype(float)

    _truncnorm._log_ndtr = _tpe_ndtr.log_ndtr if patched else slow
    _truncnorm.erf = _tpe_ndtr.erf if patched else _erf.erf
    try:
        sampler = optuna.samplers.TPESampler(seed=3, multivariate=True)
        study = optuna.create_study(sampler=sampler)

        def objective(trial: optuna.Trial) -> float:
            x = [trial.suggest_int(f"x{i}", 1, 400, log=True) for i in range(4)]
            # Far tails and ties, as a storm's makespans have.
            return float(np.log(x[0]) * 3 + abs(x[1] - 37) + (x[2] % 7) + 1e3 / x[3])

        study.optimize(objective, n_trials=60)
        return [(t.params, t.value) for t in study.trials if t.value is not None]
    finally:
        _truncnorm._log_ndtr, _truncnorm.erf = saved, saved_erf


def test_a_study_proposes_the_same_trials() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    assert _trials(patched=True) == _trials(patched=False)
