"""A what-if, built once: the storm simulated, and everything a planner must
read beside its numbers (the background traffic, the published figures the
model misses there, the costs the profile never identified).

The CLI's tables, its ``--json``, :func:`bootstorm.compare` and the report
all read one :class:`WhatIf`; none of them simulates again to decide a caution.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..calibration import KnownMiss, caveats
from ..calibration.identify import (
    DEFAULT_ERROR_REL,
    DirectionRuns,
    IdentificationCaution,
    direction_runs,
    identification_of,
    whatif_cautions,
)
from ..calibration.tornado import Tornado, tornado
from ..models import Profile, Scenario, Traffic, load_profile
from ..models.testbed import growth_cautions, plugin_cautions, schedule_cautions

if TYPE_CHECKING:
    from ..models import SeedLike
    from ..simulator import Result

__all__ = [
    "LIMIT_GAIN_MISSES",
    "Background",
    "Identification",
    "KnownMisses",
    "WhatIf",
    "identification",
    "known_misses",
    "limits_gain_s",
    "staleness",
    "what_if",
]

#: The known misses about what *tuned* limits gain (seed 000 §5.2: the model
#: over-predicts the cut and the CPU saved). Limits that make the storm
#: longer in the model are not tuned limits: these say nothing about them.
LIMIT_GAIN_MISSES = frozenset({"S0-8/cut", "S0-8/cpu"})


@dataclass(frozen=True, kw_only=True)
class Background:
    """The steady state of a what-if's background traffic (data-plane model)."""

    path: str
    delivered_gbps: float
    softirq_cores: float
    system_cores: float
    cores_taken: float
    """Host cores the traffic keeps busy, taken from the storm."""

    def to_dict(self) -> dict[str, object]:
        return {
            "path": self.path,
            "delivered_gbps": self.delivered_gbps,
            "softirq_cores": self.softirq_cores,
            "system_cores": self.system_cores,
            "cores_taken": self.cores_taken,
        }


@dataclass(frozen=True, kw_only=True)
class KnownMisses:
    """The published figures a what-if rests on that the model misses
    (:func:`bootstorm.calibration.caveats`), for the run shown."""

    misses: tuple[KnownMiss, ...]
    note: str | None = None
    """Why a miss was left out for this run (limits that lengthen the storm), or None."""


@dataclass(frozen=True, kw_only=True)
class Identification:
    """What a what-if rests on that the profile never identified."""

    cautions: tuple[IdentificationCaution, ...]
    """Unseen cost directions that move the answer beyond the profile's error."""
    error_rel: float
    """How far the profile misses its own calibration storms (relative)."""
    fitted: bool
    """The profile records an identification (fitted to storms or measurements)."""
    testbed: bool
    """A node's own profile (its costs can be measured here), not a paper's host."""
    stale: tuple[str, ...] = ()
    """Why the profile may no longer be the node's (:meth:`Profile.staleness`
    against this machine, now): too old, another kernel or CPU."""
    plugin: tuple[str, ...] = ()
    """What a what-if of another CNI plugin than the bridge rests on
    (:func:`bootstorm.models.testbed.plugin_cautions`)."""
    growth: tuple[str, ...] = ()
    """A testbed what-if past a bridge's ports whose costs grow with the
    sandboxes ahead (:func:`bootstorm.models.testbed.growth_cautions`)."""
    traffic: tuple[str, ...] = ()
    """A testbed what-if on a schedule of starts: how far its tail was held
    out, and its stops (:func:`bootstorm.models.testbed.schedule_cautions`)."""

    @property
    def imprecise(self) -> bool:
        """A fitted profile that misses its own storms by more than a paper
        row's tolerance (±10%): none of its answers is closer."""
        return self.fitted and self.error_rel > DEFAULT_ERROR_REL


@dataclass(frozen=True, kw_only=True)
class WhatIf:
    """One what-if: the scenario, its simulated storm and what to read beside it.

    What is read beside the storm is derived from it on first use and kept
    (``functools.cached_property``): a caller that shows only the tables
    does not pay for the identification cautions' extra storms, and one
    that shows everything computes each once."""

    scenario: Scenario
    result: Result
    profile: Profile
    seed: SeedLike = None
    """The service-time stream the storm was simulated with (None: the scenario's)."""
    executor: str = "compiled"

    @functools.cached_property
    def background(self) -> Background | None:
        """The background traffic's steady state, or None without it."""
        return background(self.scenario, self.profile)

    @functools.cached_property
    def known(self) -> KnownMisses:
        """The published figures the model misses that this what-if rests on."""
        return known_misses(self.scenario, self.result)

    @functools.cached_property
    def direction_runs(self) -> DirectionRuns:
        """The storm at both ends of each cost the profile never identified
        (two storms a cost), run once for the cautions and the tornado."""
        return unseen_direction_runs(
            self.scenario,
            profile=self.profile,
            result=self.result,
            seed=self.seed,
            executor=self.executor,
        )

    @functools.cached_property
    def identification(self) -> Identification:
        """The costs the profile never identified that move this answer."""
        return identification(
            self.scenario,
            profile=self.profile,
            result=self.result,
            seed=self.seed,
            executor=self.executor,
            runs=self.direction_runs,
        )

    @functools.cached_property
    def tornado(self) -> Tornado:
        """Each unidentified cost at both ends: the report's tornado chart."""
        return tornado(
            self.scenario,
            profile=self.profile,
            executor=self.executor,
            runs=self.direction_runs,
        )

    def to_dict(self) -> dict[str, Any]:
        """The ``simulate --json`` object."""
        payload: dict[str, Any] = {
            "scenario": self.scenario.model_dump(mode="json"),
            **self.result.to_dict(),
        }
        payload["startup_s"] = {k: payload["startup_s"][k] for k in ("mean", "p50", "p99", "max")}
        payload["caveats"] = [m.to_dict() for m in self.known.misses]
        payload["unidentified"] = [c.to_dict() for c in self.identification.cautions]
        payload["profile_error_rel"] = self.identification.error_rel
        payload["profile_stale"] = list(self.identification.stale)
        payload["plugin_cautions"] = list(self.identification.plugin)
        payload["growth_cautions"] = list(self.identification.growth)
        payload["traffic_cautions"] = list(self.identification.traffic)
        if self.background is not None:
            payload["background"] = self.background.to_dict()
        return payload


def what_if(
    scenario: Scenario,
    *,
    seed: SeedLike = None,
    executor: str = "compiled",
    record: bool = False,
    profile: Profile | None = None,
) -> WhatIf:
    """Simulate ``scenario``; what to read beside it comes with the record.

    ``seed``: the service-time stream (default: the scenario's); the
    identification cautions replay it where it can be replayed (an ``int``),
    else they are drawn from the scenario's own seed. ``record`` keeps every
    span (the SimPy executor only). ``profile`` replaces the scenario's.
    """
    from .._api import simulate

    prof = profile if profile is not None else load_profile(scenario.profile)
    result = simulate(scenario, seed=seed, record=record, profile=profile, executor=executor)
    return WhatIf(scenario=scenario, result=result, profile=prof, seed=seed, executor=executor)


def background(scenario: Scenario, profile: Profile) -> Background | None:
    """What ``scenario``'s background traffic delivers and the cores it takes
    (``None`` without background flows)."""
    from ..models.compile import background_traffic

    solved = background_traffic(scenario, profile)
    if solved is None:
        return None
    return Background(
        path=solved.traffic.path,
        delivered_gbps=solved.aggregate_gbps,
        softirq_cores=solved.softirq_core_demand,
        system_cores=solved.cpu_system_cores,
        cores_taken=solved.cpu_total_cores,
    )


def limits_gain_s(scenario: Scenario, result: Result) -> float:
    """How much shorter the scenario's limits make its storm in the model
    (negative: longer), against the same storm and seed without them."""
    from .._api import simulate

    unlimited = simulate(scenario.replace(limits={}), executor="compiled")
    return float(unlimited.makespan_s - result.makespan_s)


def known_misses(what: Scenario | Traffic, result: Result | None = None) -> KnownMisses:
    """The known misses ``what`` rests on whose condition holds for the run
    shown (``result``).

    S0-8 is about tuned limits the model credits with too much: for limits
    that make the storm longer than without them it does not apply."""
    found: tuple[KnownMiss, ...] = caveats(what)
    if (
        result is None
        or not isinstance(what, Scenario)
        or not any(m.key in LIMIT_GAIN_MISSES for m in found)
    ):
        return KnownMisses(misses=found)
    gain_s = limits_gain_s(what, result)
    if gain_s > 0.0:
        return KnownMisses(misses=found)
    kept = tuple(m for m in found if m.key not in LIMIT_GAIN_MISSES)
    note = (
        f"these limits make the storm {-gain_s:.2f} s longer in the model than none "
        f"({result.makespan_s + gain_s:.2f} -> {result.makespan_s:.2f} s): S0-8 (the model "
        "credits tuned limits with too much) does not apply"
    )
    return KnownMisses(misses=kept, note=note)


def identification(
    scenario: Scenario,
    *,
    profile: Profile | None = None,
    result: Result | None = None,
    seed: SeedLike = None,
    executor: str = "compiled",
    runs: DirectionRuns | None = None,
) -> Identification:
    """The unidentified costs that move ``scenario`` beyond its profile's
    error. ``result``: the what-if already simulated with ``seed``, so that
    it is not run again (a Generator seed cannot be replayed: then the ends
    are drawn from the scenario's own seed); ``runs``: the ends already run
    (:func:`unseen_direction_runs`)."""
    prof = profile if profile is not None else load_profile(scenario.profile)
    if runs is None:
        runs = unseen_direction_runs(
            scenario, profile=prof, result=result, seed=seed, executor=executor
        )
    found = whatif_cautions(scenario, profile=prof, executor=executor, runs=runs)
    return Identification(
        cautions=found,
        error_rel=identification_of(prof).error_rel,
        fitted=prof.identification is not None,
        testbed=prof.testbed is not None,
        stale=staleness(prof),
        plugin=plugin_cautions(scenario.cni, prof),
        growth=growth_cautions(scenario, prof),
        traffic=schedule_cautions(scenario, prof),
    )


def unseen_direction_runs(
    scenario: Scenario,
    *,
    profile: Profile,
    result: Result | None = None,
    seed: SeedLike = None,
    executor: str = "compiled",
) -> DirectionRuns:
    """``scenario`` at both ends of each unseen direction of ``profile``:
    with ``result`` (run with ``seed``) as the reference where ``seed`` can
    be replayed (an ``int`` or None); a Generator cannot, and then the ends
    and the reference are drawn from the scenario's own seed."""
    if seed is None or isinstance(seed, int):
        return direction_runs(scenario, profile=profile, seed=seed, executor=executor, base=result)
    return direction_runs(scenario, profile=profile, executor=executor)


def staleness(profile: Profile, *, now: datetime | None = None) -> tuple[str, ...]:
    """Why ``profile`` may not be this machine's now (nothing for a
    published profile): :meth:`~bootstorm.models.Profile.staleness` against
    the machine this runs on (its kernel, build and CPUs) at ``now``."""
    if profile.fitted_on is None:
        return ()
    from ..traces.host import current_host

    here = current_host()
    lines: tuple[str, ...] = profile.staleness(
        now=now if now is not None else datetime.now(UTC),
        kernel=here.kernel,
        kernel_config=here.kernel_config,
        cores=here.cores,
        cpu_model=here.cpu_model,
    )
    return lines
