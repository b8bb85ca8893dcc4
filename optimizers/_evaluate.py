"""One config on the search's storms: common random numbers, robust aggregation.

Every trial is simulated on the same storms — the same sizes and the same
seeds — so two configs are compared on identical service times (common
random numbers) and a difference between them is the configs', not the
dice's. With several storms per trial, each metric is aggregated over them by
its mean or by its worst value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from ..models import (
    ConfigError,
    Profile,
    ProgramCache,
    Scenario,
    TunedConfig,
    compile_scenario,
    load_profile,
)
from ..simulator import ExecutorName, Result, run_with, summarise_with
from ..simulator.executors import check_executor
from ._objectives import Metrics

__all__ = ["Evaluator", "Robust", "run_scenario"]

Robust = Literal["mean", "worst"]


def run_scenario(
    scenario: Scenario, *, profile: Profile | None = None, executor: str = "compiled"
) -> Result:
    """Simulate one storm (what :func:`bootstorm.simulate` does, without the facade)
    on the executor called ``executor`` (the compiled one by default)."""
    return run_with(compile_scenario(scenario, profile=profile), executor)


@dataclass(frozen=True, kw_only=True, slots=True)
class Evaluator:
    """Simulates configs on ``base`` at each of ``sizes`` × ``seeds``.

    ``sizes`` default to the base scenario's size, ``seeds`` to its seed.
    ``robust`` aggregates each metric over the storms: ``mean`` or ``worst``
    (the largest, since every metric is minimised). ``executor`` runs the
    storms: ``compiled`` (default) or ``simpy``, which give the same numbers.
    """

    base: Scenario
    seeds: tuple[int, ...] = ()
    sizes: tuple[int, ...] = ()
    robust: Robust = "mean"
    executor: ExecutorName = "compiled"
    profile: Profile | None = field(default=None, compare=False)
    # One compiled program per storm, re-used by every config (see ProgramCache).
    _programs: ProgramCache = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.seeds:
            object.__setattr__(self, "seeds", (self.base.seed,))
        if not self.sizes:
            object.__setattr__(self, "sizes", (self.base.sandboxes,))
        for name in ("seeds", "sizes"):
            values = getattr(self, name)
            if len(set(values)) != len(values):
                raise ConfigError(f"{name}: each value once, but got {list(values)}")
        if any(s < 0 for s in self.seeds):
            raise ConfigError(f"seeds: must be >= 0, but got {list(self.seeds)}")
        if any(n < 1 for n in self.sizes):
            raise ConfigError(f"sizes: must be >= 1, but got {list(self.sizes)}")
        if self.robust not in ("mean", "worst"):
            raise ConfigError(f"robust: expected 'mean' or 'worst', but got {self.robust!r}")
        check_executor(self.executor)
        if self.profile is None:
            # Loaded once: a search evaluates hundreds of configs.
            object.__setattr__(self, "profile", load_profile(self.base.profile))
        object.__setattr__(
            self, "_programs", ProgramCache(profile=self.profile, max_programs=len(self.storms))
        )

    @property
    def storms(self) -> tuple[Scenario, ...]:
        """The scenarios every config is tried on, without the config."""
        return tuple(
            self.base.replace(sandboxes=n, seed=s, tenants=min(self.base.tenants, n))
            for n in self.sizes
            for s in self.seeds
        )

    def evaluate(self, config: TunedConfig | None) -> Metrics:
        """The aggregated metrics of ``config`` (``None``: the base scenario as it is)."""
        # Only the startup figures: the compiled executor skips building a whole Result.
        results = [
            summarise_with(
                self._programs.compile(storm if config is None else storm.replace(config=config)),
                self.executor,
            )
            for storm in self.storms
        ]
        agg = np.max if self.robust == "worst" else np.mean
        return Metrics(
            makespan_s=float(agg([r.makespan_s for r in results])),
            mean_s=float(agg([r.startup.mean for r in results])),
            p99_s=float(agg([r.startup.p99 for r in results])),
            memory_mib=float(agg([r.pool_memory_mib for r in results])),
        )
