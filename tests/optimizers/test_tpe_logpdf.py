"""The compiled TPE acquisition gives Optuna's bits, and TPE proposes the same trials."""

from __future__ import annotations

import math

import numpy as np
import optuna
import pytest
from optuna.distributions import FloatDistribution, IntDistribution
from optuna.samplers._tpe import _erf
from optuna.samplers._tpe.parzen_estimator import _ParzenEstimator

from bootstorm.optimizers import _tpe_logpdf, _tpe_ndtr
from bootstorm.optimizers._tpe import TpeSampler

_PARAMETERS = _tpe_logpdf.tpe_parameters()


def _probes_match() -> bool:
    """Whether the compiled log-density gives NumPy's bits on the install
    probes here: NumPy's SIMD exp and log (AVX-512 on some CPUs) can differ
    from the C library's in the last bit, and then the compiled acquisition
    must not be used."""
    for estimator, samples in _tpe_logpdf._probe_mixtures(np.random.default_rng(0)):
        mixture = estimator._mixture_distribution
        x = estimator._transform(samples)
        want = mixture.log_pdf(x)
        got = _tpe_logpdf._mixture_log_pdf(mixture, x)
        if not np.array_equal(want.view(np.int64), got.view(np.int64)):
            return False
    return True


def test_installed_exactly_where_the_probes_give_optunas_bits() -> None:
    """On every machine: the compiled acquisition replaces Optuna's only where
    it reproduces it to the bit (elsewhere TPE runs as Optuna ships it)."""
    assert _tpe_ndtr.install()
    assert _tpe_logpdf.install() is _probes_match()


#: The tests that compare the installed compiled acquisition with Optuna's.
_NEED_THE_COMPILED_ACQUISITION = (
    "test_the_same_bits",
    "test_large_mixtures",
    "test_the_polynomial_erf",
    "test_a_300_trial_study",
)


@pytest.fixture(autouse=True)
def _installed(request: pytest.FixtureRequest) -> None:
    assert _tpe_ndtr.install()
    if not request.node.name.startswith(_NEED_THE_COMPILED_ACQUISITION):
        return
    if not _tpe_logpdf.install():
        pytest.skip(
            "NumPy's exp/log on this CPU differ from the compiled loop's in the last bit: "
            "the compiled TPE acquisition is not installed here (Optuna's own runs)"
        )


def _estimator(
    rng: np.random.Generator, space: dict[str, object], n: int, *, repeats: int
) -> _ParzenEstimator:
    """A mixture as TPE builds one; ``repeats`` draws from few values (a
    search revisits integers), which makes equal kernels and cells."""
    obs = {}
    for name, d in space.items():
        assert isinstance(d, (IntDistribution, FloatDistribution))
        pool = rng.integers(d.low, d.high + 1, max(1, n // repeats))
        obs[name] = rng.choice(pool, n).astype(float)
    return _ParzenEstimator(obs, space, _PARAMETERS)  # type: ignore[arg-type]


_SPACE = {
    "pool": IntDistribution(1, 400, log=True),
    "limit": IntDistribution(1, 400),
    "small": IntDistribution(1, 9),
    "cores": IntDistribution(2, 128, log=True),
}


@pytest.mark.parametrize("n", [0, 1, 2, 9, 40, 150, 300, 700])
@pytest.mark.parametrize("repeats", [1, 3])
def test_the_same_bits_as_optunas_mixture(n: int, repeats: int) -> None:
    rng = np.random.default_rng(n * 10 + repeats)
    estimator = _estimator(rng, _SPACE, n, repeats=repeats)
    samples = estimator.sample(np.random.RandomState(n), 24)
    mixture = estimator._mixture_distribution
    want = mixture.log_pdf(estimator._transform(samples))
    got = _tpe_logpdf.log_pdf(estimator, samples)
    assert np.array_equal(np.asarray(got).view(np.int64), want.view(np.int64))


@pytest.mark.parametrize("log", [False, True])
def test_large_mixtures_take_optunas_polynomial_erf(log: bool) -> None:
    """Optuna's erf leaves math.erf for a polynomial on 2 000 distinct
    intervals or more: here 3 000 kernels, each straddled by one candidate's
    cell (the mass), and all inside the range (the mass accepted)."""
    from optuna.samplers._tpe.probability_distributions import (
        _BatchedDiscreteTruncLogNormDistributions,
        _BatchedDiscreteTruncNormDistributions,
        _MixtureOfProductDistribution,
    )

    rng = np.random.default_rng(7)
    x = np.arange(1.0, 25.0)
    mu = rng.uniform(0.5, 24.5, 3000)
    sigma = rng.uniform(0.05, 3.0, 3000)
    kind = _BatchedDiscreteTruncNormDistributions
    if log:
        kind = _BatchedDiscreteTruncLogNormDistributions  # type: ignore[assignment]
        mu, x = np.log(mu + 1.0), x + 1.0
    d = kind(mu, sigma, 1.0, 30.0, 1.0)
    left = (np.log(x - 0.5) if log else x - 0.5)[:, None]
    right = (np.log(x + 0.5) if log else x + 0.5)[:, None]
    central = ~(((left - mu) / sigma > 0) | ((right - mu) / sigma <= 0))
    assert central.sum() >= 2000
    mixture = _MixtureOfProductDistribution(weights=np.full(3000, 1 / 3000), distributions=[d])
    want = mixture.log_pdf(x[:, None])
    got = _tpe_logpdf._mixture_log_pdf(mixture, x[:, None])
    assert np.array_equal(got.view(np.int64), want.view(np.int64))


@pytest.mark.parametrize(
    "values",
    [
        np.random.default_rng(1).normal(0.0, 2.0, 50_000),
        np.linspace(-7.0, 7.0, 20_001),
        np.array([0.0, -0.0, 2**-29, 2**-28, 0.84375, 1.25, 1 / 0.35, 6.0, -6.0, math.nan] * 300),
    ],
    ids=["normal", "grid", "edges"],
)
def test_the_polynomial_erf_is_optunas(values: np.ndarray) -> None:
    want = _erf.erf(values)
    assert values.size >= 2000  # Optuna's polynomial, not math.erf
    got = np.array([_tpe_logpdf._erf_polynomial(float(v)) for v in values])
    assert np.array_equal(got.view(np.int64), want.view(np.int64))


def test_a_float_parameter_is_left_to_optuna() -> None:
    rng = np.random.default_rng(3)
    space = {"x": FloatDistribution(0.0, 1.0), "k": IntDistribution(1, 10)}
    estimator = _ParzenEstimator(
        {"x": rng.random(20), "k": rng.integers(1, 11, 20).astype(float)}, space, _PARAMETERS
    )
    samples = estimator.sample(np.random.RandomState(0), 24)
    assert not _tpe_logpdf._discrete(estimator._mixture_distribution.distributions)
    want = estimator.log_pdf(samples)
    assert np.array_equal(_tpe_logpdf.log_pdf(estimator, samples), want)


def _objective(trial: optuna.Trial) -> float:
    x = [trial.suggest_int(f"x{i}", 1, 400, log=i % 2 == 0) for i in range(4)]
    trial.set_constraint("memory", float(x[0] - 250))
    return float(math.log(x[0]) * 3 + abs(x[1] - 37) + (x[2] % 7) + 1e3 / x[3])


def test_a_300_trial_study_proposes_optunas_trials() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    studies = []
    for sampler in (
        TpeSampler(seed=11, multivariate=True),
        optuna.samplers.TPESampler(seed=11, multivariate=True),
    ):
        study = optuna.create_study(sampler=sampler)
        study.optimize(_objective, n_trials=300)
        studies.append([(t.params, t.value) for t in study.trials])
    assert studies[0] == studies[1]
