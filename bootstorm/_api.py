"""The public entry points notebooks and the CLI share."""

from __future__ import annotations

from .models import Profile, Scenario, SeedLike, compile_scenario
from .simulator import Result, run_program

__all__ = ["simulate"]


def simulate(
    scenario: Scenario,
    *,
    seed: SeedLike = None,
    record: bool = False,
    profile: Profile | None = None,
) -> Result:
    """Simulate one boot storm.

    Parameters
    ----------
    scenario:
        The what-if (see :class:`~bootstorm.models.Scenario`).
    seed:
        Seed of the service-time stream; defaults to ``scenario.seed``. Same
        scenario and seed give the same result, bit for bit.
    record:
        Keep every stage and lock span (for ``Result.spans()`` and traces).
    profile:
        Use this profile object instead of the one the scenario names.
    """
    program = compile_scenario(scenario, seed=seed, profile=profile)
    return run_program(program, record=record)
