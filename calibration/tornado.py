"""How far each unidentified cost could move a what-if: a one-at-a-time sensitivity.

:func:`~bootstorm.calibration.identify.whatif_cautions` names the unseen
directions of a profile that move a what-if beyond the profile's own error;
a planner also asks *which* of them matters most, and by how many seconds.
:func:`tornado` answers with the data of a tornado chart: the what-if
simulated at both ends of each unseen direction (an assumption of a built-in
profile: its cost ÷ and × :data:`~bootstorm.calibration.identify.ASSUMPTION_FACTOR`;
a direction no calibration storm sees: its stated span), the other costs
held where the profile puts them, every storm on the same seed (common
random numbers, so that a bar is the cost's doing and not the draw's), and
its makespan, mean and p99 startup at each end, sorted by how far the
makespan swings.

The ends are the ones the cautions use, so a bar and a caution about the
same cost never disagree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..models import Profile, Scenario, UnseenDirection
from ..simulator import Result, StartupSummary
from .identify import DirectionRuns, direction_runs

__all__ = ["NEGLIGIBLE_S", "Tornado", "TornadoBar", "tornado"]

#: A direction that moves neither the makespan nor the p99 by more than this
#: (1 µs, far under any stage's time) moves nothing the what-if uses: it has
#: no bar (an SR-IOV cost in a software-CNI storm).
NEGLIGIBLE_S = 1e-6


@dataclass(frozen=True, kw_only=True, slots=True)
class TornadoBar:
    """One unseen direction's two ends: the what-if's figures at each, seconds.

    Each pair is (at the ``-`` end, at the ``+`` end): for an assumption,
    (the cost ÷ :attr:`factor`, the cost × :attr:`factor`)."""

    direction: UnseenDirection
    makespan_s: tuple[float, float]
    mean_s: tuple[float, float]
    p99_s: tuple[float, float]

    @property
    def costs(self) -> str:
        """The costs the direction moves, largest weight first."""
        return str(self.direction.label())

    @property
    def factor(self) -> float:
        """How far the direction moves its largest cost either way (×/÷)."""
        return math.exp(
            self.direction.span_log * max(abs(w) for w in self.direction.weights.values())
        )

    @property
    def by(self) -> str:
        """Why the cost is unidentified (its source, or the fit's reason)."""
        return str(self.direction.by)


@dataclass(frozen=True, kw_only=True, slots=True)
class Tornado:
    """The what-if's figures under the profile and at both ends of each
    unseen direction that moves them (:attr:`bars`, largest makespan swing first)."""

    makespan_s: float
    mean_s: float
    p99_s: float
    bars: tuple[TornadoBar, ...]
    error_rel: float
    """How far the profile misses its own calibration storms (relative): a
    bar inside it is within what the profile could not tell apart anyway."""

    def swing_s(self, bar: TornadoBar, metric: str = "makespan") -> float:
        """How far ``metric`` (``makespan``, ``mean`` or ``p99``) spreads over
        the bar's ends and the profile's own value, seconds: the bar's length."""
        base, (low, high) = self._of(bar, metric)
        return max(low, high, base) - min(low, high, base)

    def _of(self, bar: TornadoBar, metric: str) -> tuple[float, tuple[float, float]]:
        if metric == "makespan":
            return self.makespan_s, bar.makespan_s
        if metric == "mean":
            return self.mean_s, bar.mean_s
        if metric == "p99":
            return self.p99_s, bar.p99_s
        raise ValueError(f"metric: one of makespan, mean, p99, but got {metric!r}")


def tornado(
    scenario: Scenario,
    *,
    profile: Profile | None = None,
    seed: int | None = None,
    executor: str = "compiled",
    base: Result | StartupSummary | None = None,
    runs: DirectionRuns | None = None,
) -> Tornado:
    """``scenario`` at both ends of each unseen direction of ``profile``
    (default: the scenario's), one direction at a time.

    ``seed``: the service-time stream of every storm (default: the
    scenario's own); ``base``: the what-if already simulated with that seed
    (not run again). Two storms per direction, on the compiled executor by
    default: a built-in profile's 19 assumptions take under a second for a
    400-sandbox storm once the simulator is compiled. ``runs``: those storms
    already run (:func:`~.identify.direction_runs`, as a what-if's cautions
    ran them), read instead of running them again."""
    if runs is None:
        runs = direction_runs(scenario, profile=profile, seed=seed, executor=executor, base=base)
    ident, ref = runs.identification, runs.reference
    bars = []
    for direction, (low, high) in zip(ident.unseen, runs.ends, strict=True):
        bar = TornadoBar(
            direction=direction,
            makespan_s=(low.makespan_s, high.makespan_s),
            mean_s=(low.startup.mean, high.startup.mean),
            p99_s=(low.startup.p99, high.startup.p99),
        )
        moved = max(
            abs(x - y)
            for pair, y in ((bar.makespan_s, ref.makespan_s), (bar.p99_s, ref.startup.p99))
            for x in pair
        )
        if moved > NEGLIGIBLE_S:
            bars.append(bar)
    out = Tornado(
        makespan_s=ref.makespan_s,
        mean_s=ref.startup.mean,
        p99_s=ref.startup.p99,
        bars=(),
        error_rel=ident.error_rel,
    )
    # Largest makespan swing first; the p99's breaks a tie, then the name (stable).
    bars.sort(key=lambda b: (-out.swing_s(b), -out.swing_s(b, "p99"), b.costs))
    return Tornado(
        makespan_s=out.makespan_s,
        mean_s=out.mean_s,
        p99_s=out.p99_s,
        bars=tuple(bars),
        error_rel=out.error_rel,
    )
