"""Published figures as typed targets, and how far a profile is from them.

Each :class:`PaperTarget` is one number of ``PAPER-TARGETS.md``: the scenario
that produces it, the metric read off the result, the published value, its
role (*fit* or *predict*) and tolerance. The fitting code uses only *fit*
targets; the tests hold the model to both.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from ..models import Profile, Scenario, compile_scenario
from ..simulator import Result, run_with

__all__ = [
    "FIT_TOLERANCE",
    "PAPER_000_FIT",
    "PREDICT_TOLERANCE",
    "Metric",
    "PaperTarget",
    "TargetCheck",
    "check_targets",
    "makespan",
    "rtnl_acquisitions",
    "rtnl_contended_wall",
    "rtnl_share_in",
]

FIT_TOLERANCE = 0.05  # PAPER-TARGETS.md: fit rows within ±5%
PREDICT_TOLERANCE = 0.15  # PAPER-TARGETS.md: predict rows within ±15%


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
    role: Literal["fit", "predict"]
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

    def __post_init__(self) -> None:
        simulated = self.scenario is not None and self.metric is not None
        if simulated == (self.evaluate is not None) or (
            (self.scenario is None) != (self.metric is None)
        ):
            raise ValueError(
                "a target needs `scenario` and `metric`, or `evaluate`, but got "
                f"({self.scenario=}, {self.metric=}, {self.evaluate=})"
            )


@dataclass(frozen=True, kw_only=True, slots=True)
class TargetCheck:
    target: PaperTarget
    model: float

    @property
    def rel_error(self) -> float:
        return (self.model - self.target.value) / self.target.value

    @property
    def within(self) -> bool:
        if self.target.at_least:
            return self.rel_error >= -self.target.tolerance_rel
        return abs(self.rel_error) <= self.target.tolerance_rel


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
    )


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
            results[key] = run_with(
                compile_scenario(t.scenario, seed=seed, profile=profile), executor
            )
        checks.append(TargetCheck(target=t, model=t.metric.read(results[key])))
    return checks
