"""Published figures as typed targets, and how far a profile is from them.

Each :class:`PaperTarget` is one number of ``PAPER-TARGETS.md``: the scenario
that produces it, the metric read off the result, the published value, its
role (*fit* or *predict*) and tolerance. The fitting code uses only *fit*
targets; the tests hold the model to both.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from .._params import Check, Rules, validate
from ..models import Profile, Scenario, run_scenario, run_scenario_seeds
from ..simulator import Result
from .rows import RowKind

__all__ = [
    "CHECK_SEEDS",
    "FIT_SEEDS",
    "FIT_TOLERANCE",
    "PAPER_000_FIT",
    "PREDICT_TOLERANCE",
    "Metric",
    "PaperTarget",
    "SeedStorms",
    "TargetCheck",
    "check_targets",
    "check_targets_over",
    "makespan",
    "rtnl_acquisitions",
    "rtnl_contended_wall",
    "rtnl_share_in",
]

FIT_TOLERANCE = 0.05  # PAPER-TARGETS.md: fit rows within ±5%
PREDICT_TOLERANCE = 0.15  # PAPER-TARGETS.md: predict rows within ±15%

#: Seeds the paper fits average over (common random numbers: every evaluation
#: of the objective sees the same five storms' random draws).
FIT_SEEDS: tuple[int, ...] = (0, 1, 2, 3, 4)
#: Seeds ``bootstorm calibrate --check`` and the ten-seed tests hold a profile
#: to by default: disjoint from :data:`FIT_SEEDS`, so a fit row that holds
#: there holds beyond the draws it was fitted to.
CHECK_SEEDS: tuple[int, ...] = tuple(range(1001, 1011))


@dataclass(frozen=True, slots=True)
class Metric:
    """A named number read off a :class:`Result`."""

    name: str
    read: Callable[[Result], float]


makespan = Metric("makespan_s", lambda r: r.makespan_s)
rtnl_contended_wall = Metric("rtnl.contended_wall_s", lambda r: r.locks["rtnl"].contended_wall_s)
rtnl_acquisitions = Metric("rtnl.acquisitions", lambda r: float(r.locks["rtnl"].acquisitions))


def rtnl_share_in(*stages: str) -> Metric:
    """Share of RTNL acquisitions made inside ``stages``."""

    def read(r: Result) -> float:
        lock = r.locks["rtnl"]
        made = sum(lock.acquisitions_by_stage.get(s, 0) for s in stages)
        return float(made) / float(lock.acquisitions)

    return Metric(f"rtnl.share[{'+'.join(stages)}]", read)


@dataclass(frozen=True, kw_only=True, slots=True)
class PaperTarget:
    """One published number: a boot storm (``scenario`` and ``metric``) or,
    for a model that is not a simulation (the data plane), ``evaluate``,
    which computes the number on a profile (``None``: the built-in one)."""

    id: str
    role: RowKind
    label: str
    scenario: Scenario | None = None
    metric: Metric | None = None
    evaluate: Callable[[Profile | None], float] | None = None
    value: float
    source: str
    tolerance_rel: float = FIT_TOLERANCE
    weight: float = 1.0
    at_least: bool = False
    """The row is a lower bound ("> 93%"): anything above ``value`` holds."""
    row_key: str = ""
    """The check's key in :data:`~.rows.PAPER_ROWS` (default: ``id``)."""

    @property
    def key(self) -> str:
        """The check's key in :data:`~.rows.PAPER_ROWS`."""
        return self.row_key or self.id

    __rules__: ClassVar[Rules] = Rules(
        checks=(
            Check(
                "evaluate",
                lambda t: (
                    (t.scenario is None) == (t.metric is None)
                    and (t.scenario is None) == (t.evaluate is not None)
                ),
                lambda t: (
                    "must be given alone, or scenario and metric together "
                    f"(target {t.id!r}: scenario "
                    f"{'given' if t.scenario is not None else 'None'}, metric "
                    f"{'given' if t.metric is not None else 'None'})"
                ),
            ),
        ),
    )

    def __post_init__(self) -> None:
        validate(self)


@dataclass(frozen=True, kw_only=True, slots=True)
class TargetCheck:
    """The model's number for a target: one seed's, or the mean of ``per_seed``."""

    target: PaperTarget
    model: float
    per_seed: tuple[float, ...] = ()
    """The number at each seed checked (empty: one seed, or not a simulation)."""

    @property
    def rel_error(self) -> float:
        return (self.model - self.target.value) / self.target.value

    @property
    def within(self) -> bool:
        if self.target.at_least:
            return self.rel_error >= -self.target.tolerance_rel
        return abs(self.rel_error) <= self.target.tolerance_rel

    @property
    def seed_sd_rel(self) -> float:
        """Sample standard deviation across seeds, relative to the paper's value
        (0 for fewer than two seeds)."""
        n = len(self.per_seed)
        if n < 2:
            return 0.0
        mean = sum(self.per_seed) / n
        var = sum((x - mean) ** 2 for x in self.per_seed) / (n - 1)
        return math.sqrt(var) / abs(self.target.value)

    @property
    def se_rel(self) -> float:
        """Standard error of the mean across seeds, relative to the paper's value."""
        n = len(self.per_seed)
        return self.seed_sd_rel / math.sqrt(n) if n >= 2 else 0.0

    @property
    def testable(self) -> bool:
        """Whether the tolerance is at least the mean's own standard error: a
        row whose tolerance is below it can neither pass nor fail at this
        many seeds and this storm size."""
        return self.se_rel <= self.target.tolerance_rel


_CONTENTION_CNIS = ("veth", "ipvlan", "ipvtap", "tc-routing")
_ACQUISITION_CNIS = ("no-network", *_CONTENTION_CNIS)


def _storm(cni: str) -> Scenario:
    return Scenario(cni=cni, sandboxes=400, profile="paper-000")


def _fit(
    id_: str, label: str, cni: str, metric: Metric, value: float, source: str, weight: float = 1.0
) -> PaperTarget:
    return PaperTarget(
        id=id_,
        role="fit",
        label=label,
        scenario=_storm(cni),
        metric=metric,
        value=value,
        source=source,
        weight=weight,
        row_key=_S0_KEYS.get((id_, metric.name, cni), id_),
    )


_S0_KEYS = {
    ("S0-3", rtnl_contended_wall.name, "no-network"): "S0-3/no-network",
    **{("S0-3", rtnl_contended_wall.name, c): "S0-3/contention" for c in _CONTENTION_CNIS},
    **{("S0-3", rtnl_acquisitions.name, c): "S0-3/acquisitions" for c in _ACQUISITION_CNIS},
}


# Seed 000's fit rows (PAPER-TARGETS.md S0-1 … S0-4; S0-7 is a memory cost,
# fitted directly in the profile).
PAPER_000_FIT: tuple[PaperTarget, ...] = (
    _fit("S0-1", "no-network makespan", "no-network", makespan, 10.0, "seed 000 Fig. 5, §4.1.1"),
    # The headline number of the storm: weighted so that the fit does not
    # trade it for the contention rows.
    _fit("S0-2", "ipvtap makespan", "ipvtap", makespan, 20.7, "seed 000 Fig. 6e", weight=2.0),
    # Not reachable by any cost: in the no-network storm both RTNL
    # acquisitions of a sandbox are spaced out by cgroup_mutex, so no two
    # holders overlap. Reported (a known miss), not fitted.
    _fit(
        "S0-3",
        "no-network RTNL contention",
        "no-network",
        rtnl_contended_wall,
        0.162,
        "seed 000 Table 3",
        weight=0.0,
    ),
    _fit("S0-3", "veth RTNL contention", "veth", rtnl_contended_wall, 9.8, "seed 000 Table 3"),
    _fit("S0-3", "ipvlan RTNL contention", "ipvlan", rtnl_contended_wall, 11.7, "seed 000 Table 3"),
    _fit("S0-3", "ipvtap RTNL contention", "ipvtap", rtnl_contended_wall, 9.2, "seed 000 Table 3"),
    _fit(
        "S0-3",
        "tc-routing RTNL contention",
        "tc-routing",
        rtnl_contended_wall,
        14.6,
        "seed 000 Table 3",
    ),
    # Acquisition counts and where they are made follow from the CNI catalog
    # (models/cni.py RTNL_OPS), not from fitted costs: weight 0 for the fitter.
    _fit(
        "S0-3",
        "no-network RTNL acquisitions",
        "no-network",
        rtnl_acquisitions,
        803,
        "seed 000 Table 3",
        weight=0.0,
    ),
    _fit(
        "S0-3",
        "veth RTNL acquisitions",
        "veth",
        rtnl_acquisitions,
        19992,
        "seed 000 Table 3",
        weight=0.0,
    ),
    _fit(
        "S0-3",
        "ipvlan RTNL acquisitions",
        "ipvlan",
        rtnl_acquisitions,
        16542,
        "seed 000 Table 3",
        weight=0.0,
    ),
    _fit(
        "S0-3",
        "ipvtap RTNL acquisitions",
        "ipvtap",
        rtnl_acquisitions,
        6105,
        "seed 000 Table 3",
        weight=0.0,
    ),
    _fit(
        "S0-3",
        "tc-routing RTNL acquisitions",
        "tc-routing",
        rtnl_acquisitions,
        18859,
        "seed 000 Table 3",
        weight=0.0,
    ),
    _fit(
        "S0-4",
        "veth RTNL share in AttachIf+StartVM",
        "veth",
        rtnl_share_in("AttachIf", "StartVM"),
        0.623,
        "seed 000 §4.2.2",
        weight=0.0,
    ),
    _fit(
        "S0-4",
        "ipvlan RTNL share in AttachIf+StartVM",
        "ipvlan",
        rtnl_share_in("AttachIf", "StartVM"),
        0.747,
        "seed 000 §4.2.2",
        weight=0.0,
    ),
    _fit(
        "S0-4",
        "tc-routing RTNL share in AttachIf+StartVM",
        "tc-routing",
        rtnl_share_in("AttachIf", "StartVM"),
        0.697,
        "seed 000 §4.2.2",
        weight=0.0,
    ),
    # "> 59.0%": held as 59.0% with the usual tolerance, and the test also
    # checks the inequality.
    _fit(
        "S0-4",
        "ipvtap RTNL share in AttachIf+StartVM",
        "ipvtap",
        rtnl_share_in("AttachIf", "StartVM"),
        0.590,
        "seed 000 §4.2.2",
        weight=0.0,
    ),
)


def check_targets(
    targets: Iterable[PaperTarget],
    profile: Profile | None = None,
    *,
    seed: int = 0,
    executor: str = "compiled",
    cache: dict[str, Result] | None = None,
) -> list[TargetCheck]:
    """Simulate each distinct scenario once and read every target's metric.

    ``executor``: ``compiled`` (default) or ``simpy``; both give the same numbers
    (see :mod:`bootstorm.simulator.executors`), the compiled one faster.
    """
    results = cache if cache is not None else {}
    checks = []
    for t in targets:
        if t.evaluate is not None:
            checks.append(TargetCheck(target=t, model=t.evaluate(profile)))
            continue
        assert t.scenario is not None and t.metric is not None  # checked when built
        key = t.scenario.model_dump_json()
        if key not in results:
            results[key] = run_scenario(t.scenario, seed=seed, profile=profile, executor=executor)
        checks.append(TargetCheck(target=t, model=t.metric.read(results[key])))
    return checks


@dataclass(kw_only=True)
class SeedStorms:
    """Storms run at every one of ``seeds``, each distinct scenario compiled
    once for them all (:func:`~bootstorm.models.run_scenario_seeds`: its
    plans flattened once, each seed's draws its own; the same results as a
    compile per seed, to the bit), kept by scenario."""

    profile: Profile | None
    seeds: tuple[int, ...]
    executor: str = "compiled"
    _runs: dict[str, list[Result]] = field(default_factory=dict)

    def results(self, scenario: Scenario) -> list[Result]:
        """``scenario``'s result at each seed, run the first time it is asked for."""
        key = scenario.model_dump_json()
        if key not in self._runs:
            self._runs[key] = run_scenario_seeds(
                scenario, seeds=self.seeds, profile=self.profile, executor=self.executor
            )
        return self._runs[key]

    def at(self, index: int) -> dict[str, Result]:
        """The storms run so far, at ``seeds[index]``, by scenario (JSON)."""
        return {key: runs[index] for key, runs in self._runs.items()}


def check_targets_over(
    targets: Iterable[PaperTarget],
    profile: Profile | None = None,
    *,
    seeds: Sequence[int],
    executor: str = "compiled",
) -> list[TargetCheck]:
    """:func:`check_targets` at each of ``seeds``: each check's model number is
    the mean over the seeds and ``per_seed`` holds them (common random numbers:
    the same seeds give every profile the same draws)."""
    seeds = tuple(seeds)
    if not seeds:
        raise ValueError("`seeds` must not be empty")
    targets = list(targets)
    storms = SeedStorms(profile=profile, seeds=seeds, executor=executor)
    for t in targets:
        if t.evaluate is None and t.scenario is not None:
            storms.results(t.scenario)
    caches = [storms.at(index) for index in range(len(seeds))]
    by_seed = [
        check_targets(targets, profile, seed=s, executor=executor, cache=cache)
        for s, cache in zip(seeds, caches, strict=True)
    ]
    out = []
    for i, t in enumerate(targets):
        values = tuple(checks[i].model for checks in by_seed)
        out.append(TargetCheck(target=t, model=sum(values) / len(values), per_seed=values))
    return out
