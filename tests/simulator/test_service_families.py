"""Service-time factors: mean 1 and the asked coefficient of variation in
every family; the families differ in their tails (skewness)."""

from __future__ import annotations

import numpy as np
import pytest

from bootstorm.simulator import (
    SERVICE_FAMILIES,
    Cpu,
    MachineSpec,
    ProgramError,
    Stage,
    compile_program,
)

N = 40_000  # sandboxes, one jittered step each: the moments within ~1%
CV = 0.5


def _factors(family: str) -> np.ndarray:
    program = compile_program(
        [(Stage("s", (Cpu(1.0),)),)] * N,
        machine=MachineSpec(cores=1),
        locks=[],
        service_cv=CV,
        service_family=family,
        rng=np.random.default_rng(0),
    )
    return program.op_amount[program.op_kind == 0]  # the CPU steps


@pytest.mark.parametrize(
    ("family", "skewness"),
    # gamma: 2 cv; lognormal: 3 cv + cv^3 (the moments of each family)
    [("gamma", 2 * CV), ("lognormal", 3 * CV + CV**3)],
)
def test_each_family_has_mean_1_the_cv_and_its_own_skewness(family: str, skewness: float) -> None:
    x = _factors(family)
    assert x.size == N
    assert x.mean() == pytest.approx(1.0, abs=0.01)
    assert x.std() == pytest.approx(CV, rel=0.02)
    skew = float(np.mean((x - x.mean()) ** 3) / x.std() ** 3)
    # The sample skewness converges slowly (heavy tails): 10% separates 1.0 from 1.625.
    assert skew == pytest.approx(skewness, rel=0.1)


def test_the_families_are_named_and_an_unknown_one_is_refused() -> None:
    assert SERVICE_FAMILIES == ("lognormal", "gamma")
    with pytest.raises(
        ProgramError, match=r"^service_family: must be one of .* \(got 'weibull'\)$"
    ):
        compile_program(
            [(Stage("s", (Cpu(1.0),)),)],
            machine=MachineSpec(cores=1),
            locks=[],
            service_cv=0.1,
            service_family="weibull",
            rng=np.random.default_rng(0),
        )
