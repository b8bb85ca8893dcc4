"""What a search minimises and what it must respect.

Objectives are named metrics of a storm, all minimised. Constraints follow
Optuna's convention: one value per constraint, feasible when ``<= 0``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import ClassVar, Literal, get_args

from .._params import Interval, Maybe, Rules, short_repr, validate
from ..models import ConfigError

__all__ = [
    "OBJECTIVES",
    "Constraints",
    "Metrics",
    "ObjectiveName",
    "check_objectives",
]

ObjectiveName = Literal["makespan", "mean", "p99", "memory"]
OBJECTIVES: tuple[str, ...] = get_args(ObjectiveName)


@dataclass(frozen=True, kw_only=True, slots=True)
class Metrics:
    """The figures one config gets on the search's storm(s).

    ``makespan_s``: time until the last sandbox is up; ``mean_s`` and
    ``p99_s``: per-sandbox startup latency; ``memory_mib``: what the pooled
    devices cost the node (made before the storm: all of them; refilled
    while starts go on: the idle ones' mean over the run).
    """

    makespan_s: float
    mean_s: float
    p99_s: float
    memory_mib: float

    def value(self, objective: str) -> float:
        return {
            "makespan": self.makespan_s,
            "mean": self.mean_s,
            "p99": self.p99_s,
            "memory": self.memory_mib,
        }[objective]

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def check_objectives(objectives: Sequence[str]) -> tuple[str, ...]:
    """The objectives as a tuple, refusing unknown names, repeats and more than two."""
    out = tuple(objectives)
    if not out:
        raise ConfigError(f"objective: give at least one of {', '.join(OBJECTIVES)}")
    for name in out:
        if name not in OBJECTIVES:
            raise ConfigError(
                f"objective: unknown objective {short_repr(name)}; known: {', '.join(OBJECTIVES)}"
            )
    if len(set(out)) != len(out):
        raise ConfigError(f"objective: each objective once, but got {', '.join(out)}")
    if len(out) > 2:
        # Pareto fronts of three storm metrics are hard to read and the
        # samplers need far more trials; two covers time against memory.
        raise ConfigError(f"objective: at most two objectives, but got {', '.join(out)}")
    return out


#: The largest memory budget a search takes: 1 PiB, in MiB.
MAX_MEMORY_BUDGET_MIB = float(1 << 30)
#: The longest p99 SLO a search takes: a day, s.
MAX_SLO_S = 86_400.0


@dataclass(frozen=True, kw_only=True, slots=True)
class Constraints:
    """Limits a config must respect to be chosen.

    ``memory_budget_mib``: pooled memory at most this; ``p99_slo_s``: p99
    startup latency at most this. ``None`` leaves it free.
    """

    memory_budget_mib: float | None = None
    p99_slo_s: float | None = None

    # Bounded where no node reaches: a budget past 1 PiB or an SLO past a
    # day (a typo of units, 5h for 5s) constrains nothing and would pass as
    # a constraint met.
    __rules__: ClassVar[Rules] = Rules(
        memory_budget_mib=Maybe(
            Interval(float, 0, MAX_MEMORY_BUDGET_MIB, closed="right", unit="MiB")
        ),
        p99_slo_s=Maybe(Interval(float, 0, MAX_SLO_S, closed="right", unit="s")),
    )

    def __post_init__(self) -> None:
        validate(self)

    @property
    def active(self) -> bool:
        return self.memory_budget_mib is not None or self.p99_slo_s is not None

    def named_values(self, metrics: Metrics) -> dict[str, float]:
        """Constraint values by name: each ``<= 0`` when it holds (else the excess)."""
        out: dict[str, float] = {}
        if self.memory_budget_mib is not None:
            out["memory_mib"] = metrics.memory_mib - self.memory_budget_mib
        if self.p99_slo_s is not None:
            out["p99_s"] = metrics.p99_s - self.p99_slo_s
        return out

    def values(self, metrics: Metrics) -> tuple[float, ...]:
        return tuple(self.named_values(metrics).values())

    def feasible(self, metrics: Metrics) -> bool:
        return all(v <= 0.0 for v in self.values(metrics))
