"""A stale node profile brought back with one or two storms: ``calibrate --refresh``.

A node's speed drifts (this project's machine kind measured 30% slower from
one day to the next, docs/research-log.md "Drift") while what its plan
identified — which lock each operation takes, how the costs compare — does
not. A refresh keeps the fitted structure and rescales the drift: one
factor on every time cost of the profile's testbed table (CPU work, lock
holds, sleeps; counts and memory untouched), chosen so that the given
storms' makespan and mean startup fit best (least squares in log, a bounded
scalar search: one simulation per step). One or two storms pin a single
factor; they cannot tell which costs moved apart, for that refit the plan.

Measured on the recorded threads-runtime storms (docs/fidelity.md): the
plan's profile predicted ten held-out storms of another day 9-33% too fast
(median makespan error 21%); refreshed from one of them (×1.23), the other
nine's median makespan error is 5%, seven of nine within 10%.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from scipy.optimize import minimize_scalar

from ..models import Profile, TestbedCostTable
from ..traces import Trace
from .interval import headline_pairs

__all__ = ["MAX_SCALE", "Refresh", "StormError", "refresh_profile"]

#: The most a refresh rescales by, either way: a node more than twice as
#: slow or fast as at its fit has changed more than its speed (refit it).
MAX_SCALE = 2.0


@dataclass(frozen=True, kw_only=True, slots=True)
class StormError:
    """One refresh storm predicted before and after (relative errors)."""

    storm: str
    makespan_before: float
    makespan_after: float
    mean_before: float
    mean_after: float


@dataclass(frozen=True, kw_only=True, slots=True)
class Refresh:
    """The refreshed profile, the factor, and its storms before and after."""

    profile: Profile
    scale: float
    storms: tuple[StormError, ...]

    @property
    def at_bound(self) -> bool:
        """The factor hit :data:`MAX_SCALE`: more than speed changed."""
        return abs(math.log(self.scale)) >= math.log(MAX_SCALE) - 1e-3


def _scaled(profile: Profile, factor: float) -> Profile:
    table = profile.testbed
    assert table is not None
    values = table.model_dump()
    for name, value in values.items():
        if name.endswith("_s") and isinstance(value, float):
            values[name] = float(f"{value * factor:.6g}")
    return profile.model_copy(update={"testbed": TestbedCostTable(**values)})


def _errors(
    profile: Profile, groups: Sequence[Sequence[Trace]], seed: int, executor: str
) -> list[tuple[str, float, float]]:
    """Per storm: its name, and the makespan's and mean startup's relative errors."""
    from .trace_fit import storm_name

    out = []
    for runs in groups:
        stats, _, pairs = headline_pairs(runs, profile, seed=seed, executor=executor)
        (_, makespan, predicted_makespan), (_, mean, predicted_mean) = pairs[:2]
        out.append(
            (storm_name(stats), predicted_makespan / makespan - 1.0, predicted_mean / mean - 1.0)
        )
    return out


def refresh_profile(
    profile: Profile,
    traces: Sequence[Trace],
    *,
    seed: int = 0,
    executor: str = "compiled",
    now: datetime | None = None,
) -> Refresh:
    """``profile`` rescaled to the storms of ``traces`` (runs of one storm
    pooled). Raises ``ValueError`` for a profile without a testbed table (a
    paper's host: nothing of this node to refresh) or no storm."""
    from .trace_fit import fitted_on, group_storms

    if profile.testbed is None:
        raise ValueError(
            f"profile: {profile.name!r} has no testbed section (a published host's); "
            "refresh a node's fitted profile (calibrate --plan)"
        )
    groups = group_storms(traces)
    if not groups:
        raise ValueError("trace: give at least one recorded storm to refresh from")

    def loss(log_factor: float) -> float:
        errors = _errors(_scaled(profile, math.exp(log_factor)), groups, seed, executor)
        return sum(math.log1p(m) ** 2 + math.log1p(a) ** 2 for _, m, a in errors)

    bound = math.log(MAX_SCALE)
    found = minimize_scalar(loss, bounds=(-bound, bound), method="bounded", options={"xatol": 1e-3})
    factor = round(math.exp(float(found.x)), 4)
    refreshed = _scaled(profile, factor)
    when = (now or datetime.now(UTC)).strftime("%Y-%m-%d")
    note = f"; refreshed ×{factor:g} to {len(groups)} storm(s) by `calibrate --refresh` ({when})"
    table = refreshed.testbed
    assert table is not None
    sources = dict(refreshed.sources)
    for name, value in table.model_dump().items():
        path = f"testbed.{name}"
        if name.endswith("_s") and isinstance(value, float) and path in sources:
            sources[path] = sources[path] + note
    update: dict[str, object] = {
        "sources": sources,
        "fitted_on": fitted_on(traces) or profile.fitted_on,
    }
    if (ident := refreshed.identification) is not None:
        # The ranges a cost was identified within move with it.
        costs = {
            path: evidence.model_copy(
                update={"low": evidence.low * factor, "high": evidence.high * factor}
            )
            if path.startswith("testbed.") and path.endswith("_s")
            else evidence
            for path, evidence in ident.costs.items()
        }
        update["identification"] = ident.model_copy(update={"costs": costs})
    refreshed = refreshed.model_copy(update=update)
    refreshed = Profile(**refreshed.model_dump())  # validated again
    before = _errors(profile, groups, seed, executor)
    after = _errors(refreshed, groups, seed, executor)
    return Refresh(
        profile=refreshed,
        scale=factor,
        storms=tuple(
            StormError(
                storm=b[0],
                makespan_before=b[1],
                makespan_after=a[1],
                mean_before=b[2],
                mean_after=a[2],
            )
            for b, a in zip(before, after, strict=True)
        ),
    )
