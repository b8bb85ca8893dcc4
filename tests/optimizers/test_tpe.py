"""bootstorm's TPE proposes exactly what Optuna's own TPE proposes."""

from __future__ import annotations

import math

import optuna
import pytest

from bootstorm.optimizers._samplers import make_sampler
from bootstorm.optimizers._tpe import TpeSampler


def _objective(trial: optuna.Trial) -> float:
    x = [trial.suggest_int(f"x{i}", 1, 400, log=i % 2 == 0) for i in range(4)]
    if trial.number % 5 == 0:
        trial.suggest_int("sometimes", 1, 9)  # a parameter some trials lack
    # A memory budget that some points break, as a storm's pools do.
    trial.set_constraint("memory", float(x[0] - 250))
    # Far tails and ties, as a storm's makespans have.
    return float(math.log(x[0]) * 3 + abs(x[1] - 37) + (x[2] % 7) + 1e3 / x[3])


def _proposals(
    sampler: optuna.samplers.BaseSampler, *, trials: int, direction: str = "minimize"
) -> list[tuple[dict[str, object], float | None]]:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    s = optuna.create_study(sampler=sampler, direction=direction)
    s.optimize(_objective, n_trials=trials)
    return [(t.params, t.value) for t in s.trials]


@pytest.mark.parametrize("constant_liar", [False, True])
def test_the_same_proposals_as_optunas_tpe(constant_liar: bool) -> None:
    ours = TpeSampler(seed=5, multivariate=True, constant_liar=constant_liar)
    stock = optuna.samplers.TPESampler(seed=5, multivariate=True, constant_liar=constant_liar)
    assert _proposals(ours, trials=80) == _proposals(stock, trials=80)


def test_one_sampler_over_two_studies_reads_each_its_own_trials() -> None:
    # Trial ids start again in a second storage: rows must not carry over.
    sampler = TpeSampler(seed=1, multivariate=True)
    first = _proposals(sampler, trials=30)
    stock = optuna.samplers.TPESampler(seed=1, multivariate=True)
    assert first == _proposals(stock, trials=30)
    again_ours = _proposals(sampler, trials=30, direction="maximize")
    assert again_ours == _proposals(stock, trials=30, direction="maximize")


def test_the_search_uses_it() -> None:
    assert isinstance(make_sampler("tpe", seed=0, n_objectives=1), TpeSampler)
