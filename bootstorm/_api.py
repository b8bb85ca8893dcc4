"""The public entry points notebooks and the CLI share."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .models import Profile, Scenario, SeedLike, compile_scenario
from .simulator import Result, run_program

__all__ = ["compare", "simulate"]


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


def compare(
    scenarios: Mapping[str, Scenario], *, seed: SeedLike = None
) -> tuple[Any, dict[str, Result]]:
    """Simulate each what-if; return a table of their headline numbers (a pandas
    DataFrame, one row per label) and the results by label."""
    import pandas as pd

    results = {label: simulate(s, seed=seed) for label, s in scenarios.items()}
    rows = []
    for label, r in results.items():
        rtnl = r.locks.get("rtnl")
        rows.append(
            {
                "what-if": label,
                "makespan_s": r.makespan_s,
                "mean_s": r.startup.mean,
                "p99_s": r.startup.p99,
                "rtnl_contended_wall_s": rtnl.contended_wall_s if rtnl else 0.0,
                "spin_core_s": r.cpu.spin_core_s,
                "busy_core_s": r.cpu.busy_core_s,
                "pool_memory_mib": r.pool_memory_mib,
            }
        )
    return pd.DataFrame(rows).set_index("what-if"), results
