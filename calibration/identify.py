"""Which costs a what-if rests on were identified, and what the others could do to it.

A profile's costs come from three places: a direct measurement of the
operation alone, a fit to calibration storms that see the cost, or nothing
(an assumption, or a direction of the costs that no fitted storm moved). A
what-if answered along an unidentified cost is the fit's starting point, not
the node's answer: the testbed's pooled veth storm, predicted at −77% of the
measured makespan, rested on an assumed ``synchronize_net`` no calibration
storm had made.

:func:`whatif_cautions` moves the profile's costs to both ends of each
*unseen direction* (:class:`~bootstorm.models.UnseenDirection`: a
combination of costs the calibration storms cannot tell from the fitted
values at their own precision, found by :func:`unseen_directions_of` from
the fit's Jacobian; or one stated assumption of a built-in profile),
simulates the what-if at each end (same seed: common random numbers) and
reports the directions that move its makespan or mean startup by more than
the profile's own error, naming their costs. Along such a direction the
fitted storms stay put, to first order, so the what-if's move is what the
fit could not decide. :func:`decision_cautions` does the same for a choice
between configs: a candidate whose gain over the baseline changes sign at
an end of an unseen direction is a decision the profile cannot make.

The spans are stated, not estimated: an unseen direction of a fit spans its
costs' plausible range (:data:`PLAUSIBLE_FACTOR`), an assumption of a
built-in profile a factor :data:`ASSUMPTION_FACTOR` either way.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..models import (
    CostEvidence,
    Identification,
    Profile,
    Scenario,
    UnseenDirection,
    compile_scenario,
    load_profile,
    run_scenario,
)
from ..simulator import Result, StartupSummary, summarise_concurrently, summarise_with
from .targets import PaperTarget, check_targets

__all__ = [
    "ASSUMPTION_FACTOR",
    "DECISION_EVEN_REL",
    "DEFAULT_ERROR_REL",
    "PLAUSIBLE_FACTOR",
    "DecisionCaution",
    "DirectionRuns",
    "IdentificationCaution",
    "Sensitivity",
    "confirm_unseen",
    "decision_cautions",
    "direction_runs",
    "identification_of",
    "profile_numbers",
    "sensitivities",
    "unseen_directions_of",
    "visibility",
    "whatif_cautions",
]

ASSUMPTION_FACTOR = 2.0
"""How far a built-in profile's stated assumption may be off, either way: a
guess written down without a measurement ("one containerd round trip, 10 ms")
is taken as right within a factor of 2, no closer."""

PLAUSIBLE_FACTOR = 4.0
"""How far a fitted cost may be off along a direction no calibration storm
sees: the fit's starting points are guesses of the right order of magnitude,
no better, so an unseen direction spans a factor 4 either way on its largest
cost (and within the cost's bounds)."""

DEFAULT_ERROR_REL = 0.10
"""The error of a profile that states none: the ±10% a paper fit row is held to."""

# Numbers that are not operation times: a pool's memory does not move a
# storm's timing, and counts are structure, fitted or read off a trace.
_NOT_TIMES = ("pool_device_mib", "vm_tap_ioctls", "kworker_rtnl_ops", "cores", "threads_per_core")


def identification_of(profile: Profile) -> Identification:
    """The profile's own identification, or one derived from its sources: a
    number whose source is an ``assumption:`` is an unseen direction of its
    own, a factor :data:`ASSUMPTION_FACTOR` either way; every other number
    was measured or fitted by whoever wrote the profile."""
    if profile.identification is not None:
        return profile.identification
    costs: dict[str, CostEvidence] = {}
    unseen: list[UnseenDirection] = []
    values = profile_numbers(profile)
    for path, source in profile.sources.items():
        value = values.get(path)
        if value is None or not value > 0.0 or any(part in path for part in _NOT_TIMES):
            continue
        if source.startswith("assumption"):
            costs[path] = CostEvidence(
                status="unidentified",
                low=value / ASSUMPTION_FACTOR,
                high=value * ASSUMPTION_FACTOR,
                by=source,
            )
            unseen.append(
                UnseenDirection(
                    weights={path: 1.0}, span_log=math.log(ASSUMPTION_FACTOR), by=source
                )
            )
    return Identification(error_rel=DEFAULT_ERROR_REL, costs=costs, unseen=unseen)


def profile_numbers(profile: Profile) -> dict[str, float]:
    """Every float of the profile by dotted path (``testbed.rcu_grace_s``)."""
    out: dict[str, float] = {}

    def walk(prefix: str, node: object) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        elif isinstance(node, float):
            out[prefix] = node

    walk("", profile.model_dump(exclude={"sources", "identification"}))
    return out


def visibility(
    jacobian: np.ndarray, *, error_rel: float, plausible_factor: float = PLAUSIBLE_FACTOR
) -> np.ndarray:
    """Per direction of the costs (right singular vectors), how far the rows
    move over its plausible span, in units of ``error_rel`` (below 1: unseen)."""
    jac = np.atleast_2d(np.asarray(jacobian, dtype=np.float64))
    n = jac.shape[1]
    _, sing, vt = np.linalg.svd(jac, full_matrices=True)
    sing = np.concatenate([sing, np.zeros(n - len(sing))])
    reach = math.log(plausible_factor) / np.max(np.abs(vt), axis=1)
    return np.asarray(sing * reach / error_rel)


def unseen_directions_of(
    jacobian: np.ndarray,
    paths: Sequence[str],
    *,
    error_rel: float,
    bounds_log: Sequence[tuple[float, float]] | None = None,
    log_values: Sequence[float] | None = None,
    plausible_factor: float = PLAUSIBLE_FACTOR,
    by: str = "no calibration storm or measurement sees it",
) -> list[UnseenDirection]:
    """The directions in the costs that the fitted rows cannot see at their
    own precision.

    ``jacobian``: d(weighted relative residual)/d(log cost), rows by costs.
    A right singular vector ``v`` with singular value ``s`` moves the rows
    by ``s t`` (root sum of squares) when the costs move by ``t v``; its
    span ``t`` is where the largest cost has moved by ``plausible_factor``
    (or reached its bound, given ``bounds_log`` and ``log_values``). It is
    unseen when the rows move less than the profile's error over that span
    (``s t < error_rel``): no row, nor any combination of rows, would tell.

    A cost that no row sees at all (a zero column: an assumption no storm
    uses) is plausible anywhere within its bounds: ``bounds_log`` sets its
    span, not ``plausible_factor`` — a guess nothing has checked is no
    closer to the node than its bounds say.
    """
    jac = np.atleast_2d(np.asarray(jacobian, dtype=np.float64))
    n = jac.shape[1]
    if n != len(paths):
        raise ValueError(f"one column per path must hold, but got {jac.shape=}, {len(paths)=}")
    _, sing, vt = np.linalg.svd(jac, full_matrices=True)
    sing = np.concatenate([sing, np.zeros(n - len(sing))])
    blind = np.linalg.norm(jac, axis=0) == 0.0
    out = []
    for k in range(n):
        v = vt[k]
        v = v if v[np.argmax(np.abs(v))] > 0 else -v  # a sign convention: largest weight up
        reach = math.log(plausible_factor) / float(np.max(np.abs(v)))
        support = np.abs(v) >= 0.05
        if bounds_log is not None and log_values is not None and np.all(blind[support]):
            # Seen by nothing: anywhere within the bounds (the nearer one sets the span).
            reach = min(
                min(bounds_log[i][1] - log_values[i], log_values[i] - bounds_log[i][0])
                / abs(float(v[i]))
                for i in (int(j) for j in np.flatnonzero(support))
            )
        elif bounds_log is not None and log_values is not None:
            for i, w in enumerate(v):
                if abs(w) < 1e-9:
                    continue
                lo, hi = bounds_log[i]
                room = max(hi - log_values[i], log_values[i] - lo)
                reach = min(reach, max(room, 0.0) / abs(w)) if room > 0 else reach
        if sing[k] * reach >= error_rel:
            continue
        weights = {p: float(round(w, 4)) for p, w in zip(paths, v, strict=True) if abs(w) >= 0.05}
        if weights:
            out.append(UnseenDirection(weights=weights, span_log=float(reach), by=by))
    return out


def confirm_unseen(
    directions: Sequence[UnseenDirection],
    profile: Profile,
    rows: Sequence[PaperTarget],
    *,
    error_rel: float,
    seed: int = 0,
    executor: str = "compiled",
    halvings: int = 6,
) -> list[UnseenDirection]:
    """The directions whose ends leave the fitted ``rows`` within
    ``error_rel`` of where the fit put them, each span halved until they do
    (a simulation is far from linear over a factor 4). A direction whose
    smallest span still moves the rows is seen after all, and dropped."""
    fitted = [r for r in rows if r.weight > 0.0]
    nominal = np.array(
        [c.model for c in check_targets(fitted, profile, seed=seed, executor=executor)]
    )
    scale = np.array([r.value for r in fitted])
    out = []
    for d in directions:
        span = d.span_log
        for _ in range(halvings):
            trial = d.model_copy(update={"span_log": span})
            worst = 0.0
            for end in _ends(profile, trial):
                moved = np.array(
                    [c.model for c in check_targets(fitted, end, seed=seed, executor=executor)]
                )
                worst = max(worst, float(np.max(np.abs(moved - nominal) / scale)))
            if worst <= error_rel:
                out.append(trial)
                break
            span /= 2.0
    return out


@dataclass(frozen=True, kw_only=True, slots=True)
class Sensitivity:
    """How a what-if's headline numbers move at the two ends of one unseen direction."""

    direction: UnseenDirection
    headline_rel: tuple[float, float]
    """Relative change of the :attr:`headline` figure at the direction's ``-``
    and ``+`` end."""
    mean_rel: tuple[float, float]
    """The same for the mean startup."""
    headline: str = "makespan"
    """``makespan`` for a storm released at once; ``p99 startup`` for starts
    on a schedule, whose makespan is the schedule's span."""

    @property
    def moves_rel(self) -> float:
        """The largest relative move of the headline figure or the mean startup."""
        return max(abs(x) for x in (*self.headline_rel, *self.mean_rel))

    @property
    def costs(self) -> str:
        return str(self.direction.label())


@dataclass(frozen=True, kw_only=True, slots=True)
class IdentificationCaution:
    """An unseen direction that moves a what-if by more than the profile's error."""

    sensitivity: Sensitivity
    error_rel: float

    @property
    def costs(self) -> str:
        return self.sensitivity.costs

    def line(self) -> str:
        s = self.sensitivity
        lo_m, hi_m = s.headline_rel
        lo_a, hi_a = s.mean_rel
        d = s.direction
        factor = math.exp(d.span_log * max(abs(w) for w in d.weights.values()))
        return (
            f"{s.costs} is unidentified ({_kind_of(d.by)}): within its plausible range "
            f"(×/÷{factor:.2g}) "
            f"it moves the {s.headline} {min(lo_m, hi_m):+.0%}…{max(lo_m, hi_m):+.0%} and the mean "
            f"startup {min(lo_a, hi_a):+.0%}…{max(lo_a, hi_a):+.0%}, beyond the profile's "
            f"±{self.error_rel:.0%}"
        )

    def to_dict(self) -> dict[str, object]:
        s = self.sensitivity
        return {
            "costs": dict(s.direction.weights),
            "span_log": s.direction.span_log,
            "by": s.direction.by,
            "headline": s.headline,
            "headline_rel": list(s.headline_rel),
            "mean_rel": list(s.mean_rel),
            "error_rel": self.error_rel,
            "line": self.line(),
        }


def _kind_of(by: str) -> str:
    """What a direction rests on, whole, in a line: a source's kind
    (``assumption``) where it names one, the profile's ``sources`` holding the
    rest (and ``--json`` the full text). Cut to 70 characters, it ended a
    caution mid-word ("seed 000 gives on…")."""
    head, sep, _ = by.partition(": ")
    return head if sep and len(head) <= 40 else by


def _resolve(scenario: Scenario, profile: Profile | None) -> Profile:
    return profile if profile is not None else load_profile(scenario.profile)


def _run(scenario: Scenario, profile: Profile, seed: int | None, executor: str) -> Result:
    return run_scenario(scenario, seed=seed, profile=profile, executor=executor)


def _summaries(
    storms: Sequence[tuple[Scenario, Profile]], seed: int | None, executor: str
) -> list[StartupSummary]:
    """Each storm's makespan and startup figures. On the compiled executor the
    loops run on every core while this thread compiles the next storm: a
    caution's dozens of storms take a fraction of their time one by one."""
    programs = (compile_scenario(s, seed=seed, profile=p) for s, p in storms)
    if executor == "compiled":
        return list(summarise_concurrently(programs))
    return [summarise_with(program, executor) for program in programs]


def _rel(new: float, base: float) -> float:
    return (new - base) / base if base else 0.0


def _ends(profile: Profile, direction: UnseenDirection) -> tuple[Profile, Profile]:
    values = profile_numbers(profile)
    return (
        profile.with_values(direction.moved(values, -1.0), source="an end of an unseen direction"),
        profile.with_values(direction.moved(values, +1.0), source="an end of an unseen direction"),
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class DirectionRuns:
    """A what-if under its profile and at both ends of each unseen direction
    of it: what its cautions (:func:`sensitivities`) and its tornado chart
    (:func:`~.tornado.tornado`) read."""

    identification: Identification
    reference: Result | StartupSummary
    """The what-if under the profile itself."""
    ends: tuple[tuple[StartupSummary, StartupSummary], ...]
    """Per direction of ``identification.unseen``: the what-if at its low and high end."""


def direction_runs(
    scenario: Scenario,
    *,
    profile: Profile | None = None,
    seed: int | None = None,
    executor: str = "compiled",
    base: Result | StartupSummary | None = None,
) -> DirectionRuns:
    """Run ``scenario`` at both ends of each unseen direction of ``profile``
    (default: the scenario's), one direction at a time, on one service-time
    stream (``seed``); ``base``: the what-if already run with it (not run
    again)."""
    prof = _resolve(scenario, profile)
    ident = identification_of(prof)
    ends = [_ends(prof, direction) for direction in ident.unseen]
    storms = [(scenario, end) for pair in ends for end in pair]
    if base is None:
        storms.append((scenario, prof))
    ran = _summaries(storms, seed, executor)
    return DirectionRuns(
        identification=ident,
        reference=base if base is not None else ran[-1],
        ends=tuple((ran[2 * i], ran[2 * i + 1]) for i in range(len(ident.unseen))),
    )


def sensitivities(
    scenario: Scenario,
    *,
    profile: Profile | None = None,
    seed: int | None = None,
    executor: str = "compiled",
    base: Result | None = None,
    runs: DirectionRuns | None = None,
) -> tuple[Sensitivity, ...]:
    """The what-if at both ends of each unseen direction of ``profile``
    (default: the scenario's): how its makespan (its p99 startup where it
    starts on a schedule) and mean startup move, largest first. A direction
    the what-if does not use moves nothing and is left out. ``runs``: those
    storms already run (:func:`direction_runs`), read instead of running
    them again."""
    if runs is None:
        runs = direction_runs(scenario, profile=profile, seed=seed, executor=executor, base=base)
    ref = runs.reference
    scheduled = scenario.arrival_s is not None

    def headline(r: Result | StartupSummary) -> float:
        return float(r.startup.p99 if scheduled else r.makespan_s)

    out = []
    for direction, moved in zip(runs.identification.unseen, runs.ends, strict=True):
        m = tuple(_rel(headline(r), headline(ref)) for r in moved)
        a = tuple(_rel(r.startup.mean, ref.startup.mean) for r in moved)
        if max(abs(x) for x in (*m, *a)) < 1e-9:
            continue
        out.append(
            Sensitivity(
                direction=direction,
                headline_rel=(m[0], m[1]),
                mean_rel=(a[0], a[1]),
                headline="p99 startup" if scheduled else "makespan",
            )
        )
    return tuple(sorted(out, key=lambda s: -s.moves_rel))


def whatif_cautions(
    scenario: Scenario,
    *,
    profile: Profile | None = None,
    seed: int | None = None,
    executor: str = "compiled",
    base: Result | None = None,
    runs: DirectionRuns | None = None,
) -> tuple[IdentificationCaution, ...]:
    """The unseen directions that move this what-if's makespan or mean
    startup by more than the profile's own error (see :func:`sensitivities`;
    ``runs``: its storms already run)."""
    prof = _resolve(scenario, profile)
    error = identification_of(prof).error_rel
    found = sensitivities(
        scenario, profile=prof, seed=seed, executor=executor, base=base, runs=runs
    )
    return tuple(
        IdentificationCaution(sensitivity=s, error_rel=error) for s in found if s.moves_rel > error
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class DecisionCaution:
    """A candidate whose gain over the baseline changes sign at an end of an
    unseen direction."""

    candidate: str
    direction: UnseenDirection
    gain_rel: float
    """The candidate's figure (:attr:`figure`) over the baseline's, minus 1,
    under the profile."""
    gain_rel_moved: float
    """The same at the end of the direction that flips it."""
    figure: str = "makespan"
    """What the gain is of: ``makespan`` for a storm released at once,
    ``p99 startup`` for starts on a schedule (whose span the schedule sets)."""

    def line(self) -> str:
        return (
            f"{self.candidate}: {self.figure} {self.gain_rel:+.1%} against the baseline, but "
            f"{self.gain_rel_moved:+.1%} with {self.direction.label()} at an end of its plausible "
            f"range (unidentified: {_kind_of(self.direction.by)}): the profile cannot decide it"
        )


#: A gain within this of none is even: the sign of a gain this small decides
#: nothing, so a flip between two of them is no caution (a tuned config that
#: changes the figure by +0.0% at one end and -0.0% at the other, as limits
#: no schedule's bursts reach do, is even at both).
DECISION_EVEN_REL = 0.005


def decision_cautions(
    candidates: Mapping[str, Scenario],
    *,
    baseline: Scenario,
    profile: Profile,
    seed: int | None = None,
    executor: str = "compiled",
) -> tuple[DecisionCaution, ...]:
    """For each candidate, the unseen directions of ``profile`` at whose ends
    its gain over ``baseline`` changes sign: its makespan's for a storm
    released at once, its p99 startup's where the baseline starts on a
    schedule (the makespan is then the schedule's span, the same for all).
    A flip between two gains within :data:`DECISION_EVEN_REL` of none is
    not one: both are even."""
    ident = identification_of(profile)
    profiles = [profile] + [end for d in ident.unseen for end in _ends(profile, d)]
    names = list(candidates)
    storms = [(s, prof) for prof in profiles for s in (baseline, *candidates.values())]
    scheduled = baseline.arrival_s is not None
    figures = [
        r.startup.p99 if scheduled else r.makespan_s for r in _summaries(storms, seed, executor)
    ]
    per_profile = len(names) + 1

    def gains(k: int) -> dict[str, float]:
        """The candidates' gains under ``profiles[k]``."""
        ref, *theirs = figures[k * per_profile : (k + 1) * per_profile]
        return {n: _rel(m, ref) for n, m in zip(names, theirs, strict=True)}

    def flips(gain: float, moved: float) -> bool:
        even = max(abs(gain), abs(moved)) < DECISION_EVEN_REL
        return not even and (gain < 0.0) != (moved < 0.0)

    nominal = gains(0)
    out: list[DecisionCaution] = []
    for d, direction in enumerate(ident.unseen):
        flagged: set[str] = set()
        for e in (0, 1):
            moved = gains(1 + 2 * d + e)
            for name, gain in nominal.items():
                if name not in flagged and flips(gain, moved[name]):
                    flagged.add(name)
                    out.append(
                        DecisionCaution(
                            candidate=name,
                            direction=direction,
                            gain_rel=gain,
                            gain_rel_moved=moved[name],
                            figure="p99 startup" if scheduled else "makespan",
                        )
                    )
    return tuple(out)
