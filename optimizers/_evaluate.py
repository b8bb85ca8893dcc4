"""One config on the search's storms: common random numbers, robust aggregation.

Every trial is simulated on the same storms — the same sizes and the same
seeds — so two configs are compared on identical service times (common
random numbers) and a difference between them is the configs', not the
dice's. With several storms per trial, each metric is aggregated over them by
its mean or by its worst value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Literal, get_args

import numpy as np

from .._params import Distinct, Each, Interval, OneOf, Rules, validate
from ..models import (
    Profile,
    ProgramCache,
    Scenario,
    TunedConfig,
    load_profile,
    run_scenario,  # re-exported: the search's storms and the facade's are one call
)
from ..simulator import ExecutorName, Program, StartupSummary, summarise_with
from ..simulator.executors import check_executor
from ._objectives import Metrics

__all__ = ["Evaluator", "Robust", "run_scenario"]

Robust = Literal["mean", "worst"]


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

    __rules__: ClassVar[Rules] = Rules(
        seeds=(Distinct(), Each(Interval(int, 0))),
        sizes=(Distinct(), Each(Interval(int, 1))),
        robust=OneOf(get_args(Robust)),
    )

    def __post_init__(self) -> None:
        if not self.seeds:
            object.__setattr__(self, "seeds", (self.base.seed,))
        if not self.sizes:
            object.__setattr__(self, "sizes", (self.base.sandboxes,))
        validate(self)
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
        return self.aggregate(
            [summarise_with(program, self.executor) for program in self.programs(config)]
        )

    def programs(self, config: TunedConfig | None) -> list[Program]:
        """The compiled storms ``config`` is tried on, in :attr:`storms`' order."""
        return [
            self._programs.compile(storm if config is None else storm.replace(config=config))
            for storm in self.storms
        ]

    def aggregate(self, summaries: Sequence[StartupSummary]) -> Metrics:
        """The metrics of one config from its storms' summaries (:meth:`programs`' order)."""
        agg = np.max if self.robust == "worst" else np.mean
        return Metrics(
            makespan_s=float(agg([r.makespan_s for r in summaries])),
            mean_s=float(agg([r.startup.mean for r in summaries])),
            p99_s=float(agg([r.startup.p99 for r in summaries])),
            memory_mib=float(agg([r.held_memory_mib for r in summaries])),
        )
