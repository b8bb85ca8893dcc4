"""A calibration plan: the fewest real storms that identify every cost a search touches.

A storm of one size with no pools and no limits sees only some combinations
of the testbed's costs: the move into a namespace (``rcu_grace_s``) never
happens, the split of the VM's boot between CPU and waiting only shows once
the cores saturate. A what-if along such a combination is the fit's
starting point (:mod:`.identify`). The plan chooses storms from the catalog
— two sizes, each peer mode, each pool kind, a binding limit on each stage
— so that, fitted together (with any costs measured alone), no direction of
the costs stays unseen.

The choice is greedy on the linearised fit: each candidate storm's rows
(stage means, mean startup, makespan) are differentiated by the costs'
logarithms at the starting profile, and the storm that leaves the fewest
unseen directions (:func:`~.identify.unseen_directions_of`) is added until
none is left or no storm helps. The baseline storm is always in the plan.
Linearised at a start that is a guess, the plan is a design, not a proof:
the fit on its storms reports what is still unseen.

A CNI plugin is a mechanism too: when the search space includes another
plugin than the bridge (``plugins``), the plan runs a storm of it, so that
what its ADD costs apart from the bridge's is seen by a storm and not only
counted (``models/testbed.py``'s ``CNI_ADD_REQUESTS``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Literal

import numpy as np

from .._params import Depends, Interval, OneOf, Rules, short_repr, validate
from ..models import Profile, Scenario, TestbedCostTable, TunedConfig, run_scenario
from ..models.testbed import TESTBED_CNIS, TESTBED_STAGES
from ..simulator import Result
from ._fit import FreeParameter
from .identify import unseen_directions_of, visibility
from .measured_ops import MeasuredCost
from .trace_fit import (
    STORM_SIGMA,
    free_parameters,
    measurement_sigma,
    testbed_template,
)

__all__ = [
    "CalibrationPlan",
    "PlanStorm",
    "calibration_plan",
    "candidate_storms",
    "check_plan_names",
    "runtime_plugins",
    "runtime_pool_kinds",
    "runtime_variant",
]

Peer = Literal["in-netns", "moved"]
Runtime = Literal["threads", "cni"]
_VARIANT = {(v.runtime, v.peer, v.plugin): cni for cni, v in TESTBED_CNIS.items()}


def runtime_variant(runtime: Runtime, plugin: str = "bridge") -> str:
    """The catalog's ``cni`` for a storm of the testbed's ``runtime`` (default
    peer) with the CNI runtime's ``plugin``."""
    cni: str = _VARIANT[(runtime, "in-netns", plugin)]
    return cni


def runtime_plugins(runtime: Runtime) -> tuple[str, ...]:
    """The CNI plugins the catalog has a variant of for ``runtime``, bridge first."""
    return tuple(dict.fromkeys(p for r, _, p in _VARIANT if r == runtime))


def runtime_pool_kinds(runtime: Runtime) -> tuple[str, ...]:
    """The pool kinds the testbed's ``runtime`` takes from."""
    kinds: tuple[str, ...] = TESTBED_CNIS[runtime_variant(runtime)].pool_kinds
    return kinds


@dataclass(frozen=True, kw_only=True)
class PlanStorm:
    """One storm of a plan: its size, its runtime, where the veth peer is made
    (the threads runtime), the CNI runtime's plugin, its pools and limits."""

    sandboxes: int
    peer: Peer = "in-netns"
    runtime: Runtime = "threads"
    pools: Mapping[str, int] = field(default_factory=dict)
    limits: Mapping[str, int] = field(default_factory=dict)
    why: str = ""
    plugin: str = "bridge"

    __rules__: ClassVar[Rules] = Rules(
        sandboxes=Interval(int, 2),
        runtime=OneOf(tuple(sorted({r for r, _, _ in _VARIANT}))),
        peer=Depends(
            lambda s: OneOf(
                tuple(sorted({p for r, p, _ in _VARIANT if r == s.runtime})),
                what=f"the peers of the {s.runtime} runtime",
            )
        ),
        plugin=Depends(
            lambda s: OneOf(
                runtime_plugins(s.runtime), what=f"the plugins of the {s.runtime} runtime"
            )
        ),
    )

    def __post_init__(self) -> None:
        validate(self)
        object.__setattr__(self, "pools", dict(self.pools))
        object.__setattr__(self, "limits", dict(self.limits))

    @property
    def name(self) -> str:
        """A file-safe name: ``50-moved-pool-netns-limit-AttachIf4`` (``cni-50-…``
        for the CNI runtime, ``cni-ptp-50-…`` for another plugin than the bridge)."""
        parts = [str(self.sandboxes)]
        if self.plugin != "bridge":
            parts.insert(0, self.plugin)
        if self.runtime == "cni":
            parts.insert(0, "cni")
        if self.peer == "moved":
            parts.append("moved")
        parts += [f"pool-{k}" for k in sorted(self.pools)]
        parts += [f"limit-{k}{v}" for k, v in sorted(self.limits.items())]
        return "-".join(parts)

    def config(self) -> TunedConfig | None:
        """The config the testbed runs it with (``None``: none)."""
        if not self.pools and not self.limits:
            return None
        return TunedConfig(pools=dict(self.pools), limits=dict(self.limits))

    def scenario(self, *, background_load: float = 0.0) -> Scenario:
        """The storm as the testbed catalog simulates it."""
        return Scenario(
            cni=_VARIANT[(self.runtime, self.peer, self.plugin)],
            sandboxes=self.sandboxes,
            profile="local",
            pools=dict(self.pools),
            limits=dict(self.limits),
            background_load=background_load,
        )


@dataclass(frozen=True, kw_only=True)
class CalibrationPlan:
    """The storms to run (``runs`` times each) and what stays unseen after them."""

    storms: tuple[PlanStorm, ...]
    runs: int
    unseen_after: tuple[str, ...]
    """Labels of the directions the plan's storms (with the measured costs)
    still leave unseen, linearised at the start: empty when it identifies all."""
    measured: tuple[str, ...] = ()
    """The costs measured alone that the plan counted on."""

    def describe(self) -> list[str]:
        return [f"{s.name}: {s.why}" for s in self.storms]


def check_plan_names(
    *,
    runtime: Runtime,
    pool_kinds: Sequence[str] | None,
    limit_stages: Sequence[str],
    plugins: Sequence[str] = (),
) -> None:
    """Refuse a pool kind the ``runtime`` does not pool, a stage the testbed
    does not have or a plugin its catalog has no variant of (``ValueError``,
    one line): checked before anything is measured, so that a typo does not
    cost the operations' timing first."""
    known = runtime_plugins(runtime)
    for plugin in plugins:
        if plugin not in known:
            raise ValueError(
                f"plugins: unknown plugin {short_repr(plugin)}; "
                f"the testbed's {runtime} runtime has {', '.join(known)}"
            )
    kinds = runtime_pool_kinds(runtime)
    for kind in pool_kinds or ():
        if kind not in kinds:
            raise ValueError(
                f"pool_kinds: unknown kind {short_repr(kind)}; "
                f"the testbed's {runtime} runtime pools {', '.join(kinds)}"
            )
    for stage in limit_stages:
        if stage not in TESTBED_STAGES:
            raise ValueError(
                f"limit_stages: unknown stage {short_repr(stage)}; "
                f"the testbed's are {', '.join(TESTBED_STAGES)}"
            )


def candidate_storms(
    *,
    sandboxes: int,
    pool_kinds: Sequence[str] | None = None,
    limit_stages: Sequence[str] = ("AddCNI", "Cgroup", "AttachIf", "StartVM"),
    peers: Sequence[Peer] = ("in-netns", "moved"),
    runtime: Runtime = "threads",
    plugins: Sequence[str] = (),
) -> list[PlanStorm]:
    """Every storm a plan may choose from: the baseline at two sizes, each peer
    mode (the threads runtime), each other CNI plugin in ``plugins`` (the CNI
    runtime: the baseline storm of it), each pool kind (full; default: every
    kind the runtime pools), a binding limit on each stage."""
    check_plan_names(
        runtime=runtime, pool_kinds=pool_kinds, limit_stages=limit_stages, plugins=plugins
    )
    kinds = runtime_pool_kinds(runtime)
    half = max(2, sandboxes // 2)
    # A limit binds when it admits a small share of the storm: an eighth
    # leaves the stage uncontended inside, which is what shows its own time.
    limit = max(2, sandboxes // 8)
    out = [
        PlanStorm(
            sandboxes=sandboxes,
            runtime=runtime,
            why="the baseline: the storm the search starts from",
        ),
        PlanStorm(sandboxes=half, runtime=runtime, why="a second size: what grows with the storm"),
    ]
    if runtime == "threads":
        out += [
            PlanStorm(sandboxes=sandboxes, peer=p, why=f"peer {p}: where the veth peer is made")
            for p in peers
            if p != "in-netns"
        ]
    out += [
        PlanStorm(
            sandboxes=sandboxes,
            runtime=runtime,
            plugin=p,
            why=f"plugin {p}: its ADD's requests, in place of the bridge's",
        )
        for p in dict.fromkeys(plugins)
        if p != "bridge"
    ]
    for kind in kinds if pool_kinds is None else pool_kinds:
        pools = {kind: sandboxes}
        if kind == "veth":
            pools["netns"] = sandboxes  # as a node pools them: a pair is moved into a namespace
        out.append(
            PlanStorm(
                sandboxes=sandboxes,
                runtime=runtime,
                pools=pools,
                why=f"pool {kind}: what taking one costs",
            )
        )
    for stage in limit_stages:
        out.append(
            PlanStorm(
                sandboxes=sandboxes,
                runtime=runtime,
                limits={stage: limit},
                why=f"limit {stage}={limit}: the stage's own time when it is not contended",
            )
        )
    return out


def _mechanisms(storm: PlanStorm) -> set[str]:
    """What a storm exercises beyond the baseline: its peer mode, plugin, pools,
    limits, size."""
    out = {f"size:{storm.sandboxes}"}
    if storm.peer != "in-netns":
        out.add(f"peer:{storm.peer}")
    if storm.plugin != "bridge":
        out.add(f"plugin:{storm.plugin}")
    out |= {f"pool:{k}" for k in storm.pools}
    out |= {f"limit:{k}" for k in storm.limits}
    return out


def _rows(result: Result) -> np.ndarray:
    means = [float(result.stage_time_s[s].mean()) for s in TESTBED_STAGES]
    return np.log(np.maximum([*means, result.startup.mean, result.makespan_s], 1e-9))


def _jacobian(
    storm: PlanStorm,
    profile: Profile,
    params: Sequence[FreeParameter],
    seed: int,
    executor: str,
) -> np.ndarray:
    """d log(row) / d log(cost) for the storm's rows, by forward differences."""
    step = 0.1
    scenario = storm.scenario()
    base = _rows(run_scenario(scenario, seed=seed, profile=profile, executor=executor))
    assert profile.testbed is not None
    cols = []
    for p in params:
        leaf = p.path.split(".", 1)[1]
        moved = profile.with_values({p.path: getattr(profile.testbed, leaf) * math.exp(step)})
        rows = _rows(run_scenario(scenario, seed=seed, profile=moved, executor=executor))
        cols.append((rows - base) / step)
    return np.array(cols).T


def calibration_plan(
    *,
    sandboxes: int = 50,
    runs: int = 3,
    pool_kinds: Sequence[str] | None = None,
    limit_stages: Sequence[str] = ("AddCNI", "Cgroup", "AttachIf", "StartVM"),
    peers: Sequence[Peer] = ("in-netns", "moved"),
    runtime: Runtime = "threads",
    plugins: Sequence[str] = (),
    cores: int = 2,
    start: Profile | None = None,
    measured: Mapping[str, MeasuredCost] | None = None,
    seed: int = 0,
    executor: str = "compiled",
    cover_mechanisms: bool = True,
) -> CalibrationPlan:
    """The fewest candidate storms (:func:`candidate_storms`) that, fitted
    together with the ``measured`` costs, leave no direction of the testbed's
    costs unseen, linearised at ``start`` (default: the fit's starting point
    on a host of ``cores``); with ``cover_mechanisms``, then every peer mode,
    CNI plugin (``plugins``: those the search may switch to), pool kind and
    stage limit the search may use that those storms do not run, and a
    second size."""
    if runs < 1:
        raise ValueError(f"runs: must be at least 1, but got {runs}")
    # The fit's own starting point, the measured costs at their measurement:
    # a storm shows a cost only near where it really is (a 0.5 ms move hides
    # behind the GIL's queue, a 13.5 ms one does not). Memory and service_cv
    # do not enter a testbed storm's linearisation: any value serves.
    profile = start or testbed_template(
        cores=cores, memory_mib=1024, service_cv=0.1, runtimes=(runtime,)
    )
    params = free_parameters((runtime,))
    known = {
        p: m.value
        for p, m in (measured or {}).items()
        if start is None and p.split(".", 1)[-1] in TestbedCostTable.model_fields and m.value > 0
    }
    if known:
        profile = profile.with_values(known, source="measured alone (testbed measure-ops)")
    candidates = candidate_storms(
        sandboxes=sandboxes,
        pool_kinds=pool_kinds,
        limit_stages=limit_stages,
        peers=peers,
        runtime=runtime,
        plugins=plugins,
    )
    paths = [p.path for p in params]
    prior_rows = []
    for path, m in (measured or {}).items():
        if path in paths and m.value > 0:
            row = np.zeros(len(paths))
            row[paths.index(path)] = STORM_SIGMA / measurement_sigma(m)
            prior_rows.append(row)
        elif path == "testbed.vm_boot_total_s" and m.value > 0 and profile.testbed is not None:
            t = profile.testbed
            row = np.zeros(len(paths))
            total = t.vm_boot_cpu_s + t.vm_boot_s
            w = STORM_SIGMA / measurement_sigma(m)
            row[paths.index("testbed.vm_boot_cpu_s")] = w * t.vm_boot_cpu_s / total
            row[paths.index("testbed.vm_boot_s")] = w * t.vm_boot_s / total
            prior_rows.append(row)
    jacobians = [_jacobian(s, profile, params, seed, executor) for s in candidates]
    error = STORM_SIGMA / 2

    def stacked(chosen: list[int]) -> np.ndarray:
        blocks = [jacobians[i] for i in chosen]
        if prior_rows:
            blocks.append(np.array(prior_rows))
        return np.vstack(blocks)

    def score(chosen: list[int]) -> float:
        # Each direction counts up to 1 as it becomes seen: a storm that half
        # shows two directions is worth as much as one that shows one.
        return float(np.sum(np.minimum(visibility(stacked(chosen), error_rel=error), 1.0)))

    chosen = [0]
    while len(chosen) < len(candidates):
        now = score(chosen)
        if now >= len(paths) - 1e-9:
            break
        gain, _, best = max(
            (score([*chosen, i]) - now, -candidates[i].sandboxes, i)
            for i in range(len(candidates))
            if i not in chosen
        )
        if gain < 0.05:  # no storm left shows anything new
            break
        chosen.append(best)
    left = [d.label() for d in unseen_directions_of(stacked(chosen), paths, error_rel=error)]
    if cover_mechanisms:
        # A cost timed alone says nothing of how the storm queues around it
        # (the GIL, RTNL's hand-over): every mechanism the search may use is
        # run once, at the plan's size, and a second size shows what grows.
        for i, storm in enumerate(candidates):
            covered = any(_mechanisms(candidates[j]) >= _mechanisms(storm) for j in chosen)
            if i not in chosen and not covered:
                chosen.append(i)
    return CalibrationPlan(
        storms=tuple(candidates[i] for i in chosen),
        runs=runs,
        unseen_after=tuple(left),
        measured=tuple(sorted((measured or {}).keys())),
    )
