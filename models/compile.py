"""Compile a :class:`Scenario` into the kernel's flat :class:`Program`."""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Sequence
from typing import cast

import numpy as np

from ..simulator import (
    GateSpec,
    MachineSpec,
    MemoryEstimate,
    PoolSpec,
    Program,
    ProgramTooLargeError,
    Result,
    available_memory_bytes,
    compile_programs,
    run_with,
    size_program,
)
from ._errors import ConfigError
from .dataplane import Traffic, path_for_cni
from .families import cni_family
from .profile import Profile, load_profile
from .refill import REFILL, pool_targets, refill_copies, with_refill
from .scenario import Scenario
from .softirq import DataplaneResult, solve_on_profile
from .testbed import TESTBED_POOL_KINDS

__all__ = [
    "MEMORY_MARGIN",
    "SIZED_FROM_SANDBOXES",
    "ProgramCache",
    "SeedLike",
    "background_cores",
    "background_traffic",
    "check_memory",
    "compile_scenario",
    "estimate_memory",
    "full_pools",
    "run_scenario",
    "run_scenario_seeds",
    "scenario_stages",
    "service_streams",
]

SeedLike = int | np.random.Generator | None

GIB = 1024**3


def service_streams(seed: SeedLike) -> tuple[np.random.Generator, np.random.Generator]:
    """Independent (arrivals, service times) generators from one seed."""
    if isinstance(seed, np.random.Generator):
        arrivals, service = seed.spawn(2)
        return arrivals, service
    children = np.random.SeedSequence(seed).spawn(2)
    return np.random.default_rng(children[0]), np.random.default_rng(children[1])


def _check_names(field: str, given: dict[str, int], allowed: tuple[str, ...], what: str) -> None:
    for name in given:
        if name not in allowed:
            raise ConfigError(
                f"{field}: unknown {what} {name!r}; "
                f"this CNI has {', '.join(allowed) if allowed else 'none'}"
            )


def scenario_stages(cni: str) -> tuple[str, ...]:
    """The stages a sandbox of ``cni`` passes through (where limits may apply)."""
    return cni_family(cni).stages(cni)


def scenario_pool_kinds(cni: str) -> tuple[str, ...]:
    """The device kinds a sandbox of ``cni`` can take from a pool."""
    return cni_family(cni).pool_kinds(cni)


def full_pools(cni: str, *, sandboxes: int, tenants: int) -> dict[str, int]:
    """Pools that hold every device a storm of ``cni`` makes (seed 000 §5.1):
    one of each kind per sandbox, vPorts as the CNI shares them."""
    family = cni_family(cni)
    full = {kind: sandboxes for kind in family.pool_kinds(cni)}
    if "vport" in full:
        shared = family.vport_creators(cni, tenants)
        full["vport"] = shared if shared else sandboxes  # direct mode: one per pod
    return full


def background_traffic(scenario: Scenario, profile: Profile) -> DataplaneResult | None:
    """The steady state of ``scenario``'s background traffic on ``profile``
    (``None`` without background flows), by the data-plane model."""
    if scenario.background_flows == 0:
        return None
    traffic = Traffic(
        path=scenario.background_path or path_for_cni(scenario.cni),
        flows=scenario.background_flows,
        flow_gbps=scenario.flow_gbps,
        cores=scenario.cores or profile.host.cores,
        seed=scenario.seed,
    )
    return solve_on_profile(profile, traffic)


def background_cores(scenario: Scenario, profile: Profile) -> float:
    """Host cores ``scenario``'s background traffic keeps busy (0 without it).

    Its IRQs and softirqs run with preemption off, so the storm never gets
    their cores; its threads (vhost-net, host receivers) each want far less
    than a fair share of a core, and processor sharing gives a job below its
    fair share all it wants — so they are taken from the storm too. The
    sandboxes' guest work on the traffic is not modelled.
    """
    result = background_traffic(scenario, profile)
    return 0.0 if result is None else result.cpu_total_cores


def compile_scenario(
    scenario: Scenario, *, seed: SeedLike = None, profile: Profile | None = None
) -> Program:
    """The program of ``scenario``: its sandboxes' plans on its profile's host.

    ``seed`` defaults to ``scenario.seed``; ``profile`` to the profile the
    scenario names (pass one to try a profile that is not on disk). A storm
    of :data:`SIZED_FROM_SANDBOXES` sandboxes or more is sized first
    (:func:`check_memory`) and refused in one line if this machine has not
    the memory to compile and run it.
    """
    scenario, prof, seed = resolve_inputs(scenario, profile, seed)
    refill = _refill(scenario)  # once: a day's rate-following targets take 0.1 s
    if scenario.sandboxes >= SIZED_FROM_SANDBOXES:
        _check_fits(scenario, seed, prof, refill, available_bytes=None)
    return _compile_seeds(scenario, (seed,), prof, refill)[0]


def resolve_inputs(
    scenario: object, profile: object, seed: object
) -> tuple[Scenario, Profile, SeedLike]:
    """The what-if's inputs as the compiler takes them, or a
    :class:`ConfigError` naming the one that is not: a :class:`Scenario`;
    a :class:`Profile`, a profile's name or YAML path (a notebook's likeliest
    slip: ``profile="paper-000"`` was an AttributeError deep in the compile),
    or None for the scenario's own; a seed that is None, an int in
    0..2**63-1 (as ``Scenario.seed``) or a ``numpy.random.Generator``."""
    import os

    if not isinstance(scenario, Scenario):
        raise ConfigError(
            f"scenario: expected a Scenario (bootstorm.Scenario(...)), but got "
            f"{type(scenario).__name__}"
        )
    if profile is None:
        prof = load_profile(scenario.profile)
    elif isinstance(profile, Profile):
        prof = profile
    elif isinstance(profile, str | os.PathLike):
        prof = load_profile(os.fspath(profile))
    else:
        raise ConfigError(
            f"profile: expected a Profile, a profile's name or a YAML path, but got "
            f"{type(profile).__name__}"
        )
    if not (
        seed is None
        or isinstance(seed, np.random.Generator)
        or (isinstance(seed, int | np.integer) and not isinstance(seed, bool) and 0 <= seed < 2**63)
    ):
        raise ConfigError(
            f"seed: expected None, an int in 0..2**63-1 or a numpy Generator, but got {seed!r}"
            if isinstance(seed, int | float)
            else f"seed: expected None, an int in 0..2**63-1 or a numpy Generator, but got "
            f"{type(seed).__name__}"
        )
    return scenario, prof, cast(SeedLike, seed)  # checked just above


#: Storms of fewer sandboxes are not sized before they are compiled: at ~2-3 KB
#: a sandbox they take tens of MiB, which any machine that runs Python has,
#: and compile_program still checks its own estimate when it is large.
SIZED_FROM_SANDBOXES = 10_000
#: What a command holds beyond :class:`MemoryEstimate`'s count (one program,
#: the kernel's state, the result), as a factor. ``simulate`` also runs the
#: what-if's caution storms (two per unidentified cost, as many at once as
#: cores, up to 8, each let go once summarised) beside its own. Peak RSS
#: growth of ``bootstorm simulate --executor compiled --json`` against the
#: estimate on 2 cores (benchmarks/bench_memory_estimate.py, 2026-11-28, the
#: ops shared as templates): ipvtap 2 674 B a sandbox at 10 000 and 2 516 B
#: at 100 000 (x2.61, x2.45), veth 3 230 and 2 832 B (x2.64, x2.32). 3.0
#: covers them and the allocator's slack; without a margin a storm estimated
#: just under the memory available was started and died in a MemoryError.
MEMORY_MARGIN = 3.0
MIB = 1 << 20


def run_scenario(
    scenario: Scenario,
    *,
    seed: SeedLike = None,
    profile: Profile | None = None,
    executor: str = "compiled",
    record: bool = False,
) -> Result:
    """``scenario`` compiled (:func:`compile_scenario`) and run by ``executor``
    (:func:`~bootstorm.simulator.run_with`): the one way every layer above
    simulates a what-if it does not need the program of. A profile fitted to
    a node's storms gives the result its interval (:attr:`Result.interval`)."""
    prof = profile if profile is not None else load_profile(scenario.profile)
    result = run_with(compile_scenario(scenario, seed=seed, profile=prof), executor, record=record)
    return with_interval(result, prof)


def run_scenario_seeds(
    scenario: Scenario,
    *,
    seeds: Sequence[int],
    profile: Profile | None = None,
    executor: str = "compiled",
) -> list[Result]:
    """:func:`run_scenario` at each of ``seeds``, the same results to the bit,
    the scenario compiled once (:func:`~bootstorm.simulator.compile_programs`):
    a fit evaluates every cost it tries over the same seeds, and flattening
    and checking the plans was most of its time (paper-001's FastIOV storm)."""
    prof = profile if profile is not None else load_profile(scenario.profile)
    refill = _refill(scenario)
    if scenario.sandboxes >= SIZED_FROM_SANDBOXES:
        # A program's size is its plans', whatever the seed: sized once.
        _check_fits(scenario, seeds[0], prof, refill, available_bytes=None)
    return [
        with_interval(run_with(program, executor), prof)
        for program in _compile_seeds(scenario, tuple(seeds), prof, refill)
    ]


def with_interval(result: Result, profile: Profile) -> Result:
    """``result`` with the interval ``profile`` gives its headline numbers
    (:func:`~.interval.headline_interval`); as it is if the profile records
    no prediction error (a published profile)."""
    if profile.prediction_error is None:
        return result
    from .interval import headline_interval

    interval = headline_interval(
        makespan_s=result.makespan_s,
        mean_s=result.startup.mean,
        p99_s=result.startup.p99,
        error=profile.prediction_error,
    )
    return dataclasses.replace(result, interval=interval)


def check_memory(
    scenario: Scenario,
    *,
    seed: SeedLike = None,
    profile: Profile | None = None,
    available_bytes: int | None = None,
) -> MemoryEstimate:
    """The estimate of ``scenario``'s memory (:func:`estimate_memory`), or
    :class:`~bootstorm.simulator.ProgramTooLargeError` (one line: how much it
    would need and how much this machine has) if that times
    :data:`MEMORY_MARGIN` exceeds the memory available (default: the kernel's
    ``MemAvailable``, capped by the cgroup's limit; unknown: pass)."""
    scenario, prof, seed = resolve_inputs(scenario, profile, seed)
    return _check_fits(scenario, seed, prof, _refill(scenario), available_bytes=available_bytes)


def _check_fits(
    scenario: Scenario,
    seed: SeedLike,
    prof: Profile,
    refill: _Refill | None,
    *,
    available_bytes: int | None,
) -> MemoryEstimate:
    estimate = size_program(lambda: _compile_seeds(scenario, (seed,), prof, refill))
    need = int(estimate.total_bytes * MEMORY_MARGIN)
    available = available_memory_bytes() if available_bytes is None else available_bytes
    if available is not None and need > available:
        raise ProgramTooLargeError(
            f"sandboxes: {scenario.sandboxes} sandboxes would need about {need / MIB:,.0f} MiB "
            f"to compile and run ({estimate.ops:,} ops), but this machine has "
            f"{available / MIB:,.0f} MiB available"
        )
    return estimate


def _compile_seeds(
    scenario: Scenario, seeds: Sequence[SeedLike], prof: Profile, refill: _Refill | None
) -> list[Program]:
    """The programs of ``scenario`` at each of ``seeds``, its plans flattened
    once; ``refill`` is ``_refill(scenario)``."""
    cni = scenario.cni
    family = cni_family(cni)
    _check_names("pools", scenario.pools, family.pool_kinds(cni), "pool kind")
    # Memory of a pooled device: the profile's, or nothing known (a testbed host).
    pool_memory = (
        prof.costs.pool_device_mib
        if prof.costs is not None
        else {
            kind: prof.testbed.pool_device_mib.get(kind, 0.0) if prof.testbed is not None else 0.0
            for kind in TESTBED_POOL_KINDS
        }
    )
    _check_names("limits", scenario.limits, family.stages(cni), "stage")
    _check_names("rtnl_priority", scenario.rtnl_priority, family.stages(cni), "stage")
    for kind in scenario.pools:
        if kind not in pool_memory:
            raise ConfigError(
                f"pools: profile {prof.name!r} has no memory cost for pooled {kind!r} devices"
            )
    services = [service_streams(scenario.seed if seed is None else seed)[1] for seed in seeds]

    locks = family.locks(scenario, prof)
    built = family.plans(scenario, prof)
    plans = built.plans
    if refill is not None:
        plans = with_refill(
            plans,
            pooled=refill.targets.keys(),
            follow=refill.follow,
            copies=refill.copies,
            work=built.refill_work,
            remove=built.refill_remove,
        )

    host = prof.host
    cores = scenario.cores or host.cores
    reserved = background_cores(scenario, prof)
    capacity = host.capacity_cores(cores)
    if reserved >= capacity * (1.0 - 1e-9):  # a full core, up to rounding
        raise ConfigError(
            f"background_flows: {scenario.background_flows} flows of {scenario.flow_gbps} Gbps "
            f"keep {reserved:.3g} cores busy, all the node has ({capacity:.3g} cores' worth of "
            f"work from {cores} CPUs)"
        )
    # A family's own node service (TSoR's) keeps its cores besides.
    if built.reserved_cores > 0.0:
        if reserved + built.reserved_cores >= capacity * (1.0 - 1e-9):
            raise ConfigError(
                f"cores: {cni}'s node service keeps {built.reserved_cores:.3g} cores"
                + (f" and the background traffic {reserved:.3g}" if reserved else "")
                + f", all the node has ({capacity:.3g} cores' worth of work from {cores} CPUs)"
            )
        reserved += built.reserved_cores
    # Hyper-threads are CPUs to the scheduler but not cores' worth of work:
    # the capacity they lack is held back like the background's.
    smt_shortfall = cores - capacity
    machine = MachineSpec(
        cores=cores,
        reserved_cores=reserved + smt_shortfall,
        zero_bytes_per_core_s=host.zero_gib_s_per_core * GIB,
        memory_bandwidth_bytes_s=host.memory_bandwidth_gib_s * GIB,
        guest_cpu_quota=scenario.vcpus or host.sandbox_vcpus,
        background_jobs=scenario.background_load,
    )
    programs: list[Program] = compile_programs(
        plans,
        machine=machine,
        locks=locks,
        gates=[GateSpec(name=s, permits=k) for s, k in scenario.limits.items()]
        + list(built.signals)
        + ([] if refill is None else [refill.gate]),
        pools=[
            PoolSpec(name=k, capacity=n, memory_mib_per_device=pool_memory[k])
            for k, n in scenario.pools.items()
        ]
        + list(built.tickets),
        arrival_s=scenario.arrival_s,
        service_cv=prof.service_cv,
        service_family=prof.service_family or "lognormal",
        rngs=services,
        # A rate-following pool's targets, written as the amounts are.
        pool_targets=refill.targets if refill is not None and refill.follow else None,
    )
    return programs


@dataclasses.dataclass(frozen=True, slots=True)
class _Refill:
    """What a scenario's ``pool_refill`` puts in its program: the workers'
    gate, the turns per refill branch, and the targets per start (applied
    only where a pool follows the start rate)."""

    gate: GateSpec
    copies: int
    targets: dict[str, np.ndarray]
    follow: bool

    def apply(self, program: Program) -> Program:
        return program.with_pool_targets(dict(self.targets)) if self.follow else program


def _refill(scenario: Scenario) -> _Refill | None:
    """The refill of ``scenario``'s pools (None: no refill or nothing pooled)."""
    policy = scenario.pool_refill
    if policy is None or not scenario.refills:
        return None
    targets = pool_targets(
        scenario.arrival_s, sandboxes=scenario.sandboxes, pools=scenario.pools, refill=policy
    )
    return _Refill(
        gate=GateSpec(name=REFILL, permits=policy.concurrency),
        copies=refill_copies(targets, arrival_s=scenario.arrival_s, initial=scenario.pools),
        targets=targets,
        follow=policy.follow_rate is not None,
    )


def estimate_memory(
    scenario: Scenario, *, seed: SeedLike = None, profile: Profile | None = None
) -> MemoryEstimate:
    """The memory compiling and running ``scenario`` on the compiled executor
    would take (program, kernel state, result), sized from its plans without
    building the program: a storm of any size is sized in milliseconds.
    :func:`compile_scenario` refuses one that exceeds the memory available
    (:class:`~bootstorm.simulator.ProgramTooLargeError`)."""
    scenario, prof, seed = resolve_inputs(scenario, profile, seed)
    return size_program(lambda: _compile_seeds(scenario, (seed,), prof, _refill(scenario)))


class ProgramCache:
    """Compiles scenarios that differ only in limit and pool *sizes* once.

    A search tries hundreds of configs on the same storms. Limits and pools
    shape a program only by which stages are gated and which device kinds
    are pooled at all (a gate op, a pool-or-create branch); their sizes are
    the gates' permits and the pools' capacities. So the cache keeps one
    compiled program per shape — the scenario without those sizes, and the
    seed — and gives every other config of that shape a copy with its own
    gates and pools: the same program :func:`compile_scenario` would build,
    array for array (``tests/models/test_program_cache.py``), in microseconds.

    Parameters
    ----------
    profile:
        The profile every scenario runs on (default: the one each names).
    max_programs:
        Shapes kept, least recently used dropped first.
    """

    def __init__(self, *, profile: Profile | None = None, max_programs: int = 32) -> None:
        if max_programs < 1:
            raise ConfigError(f"max_programs: must be >= 1, but got {max_programs}")
        self.profile = profile
        self.max_programs = max_programs
        self._programs: OrderedDict[str, Program] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def compile(self, scenario: Scenario, *, seed: int | None = None) -> Program:
        """What ``compile_scenario(scenario, seed=seed, profile=profile)`` returns."""
        key = self._shape(scenario, scenario.seed if seed is None else seed)
        template = self._programs.get(key)
        if template is None:
            self.misses += 1
            program = compile_scenario(scenario, seed=seed, profile=self.profile)
            self._programs[key] = program
            if len(self._programs) > self.max_programs:
                self._programs.popitem(last=False)
            return program
        self.hits += 1
        self._programs.move_to_end(key)
        memory = {p.name: p.memory_mib_per_device for p in template.pools}
        limits = tuple(GateSpec(name=s, permits=k) for s, k in scenario.limits.items())
        refill = _refill(scenario)
        rest = template.gates[len(limits) :]
        if refill is not None:  # the refill workers' gate comes last, as compiled
            rest = (*rest[:-1], refill.gate)
        program = dataclasses.replace(
            template,
            # The limits' gates come first; the vPorts' signal gates follow, as compiled.
            gates=limits + rest,
            pools=tuple(
                PoolSpec(name=k, capacity=n, memory_mib_per_device=memory[k])
                for k, n in scenario.pools.items()
            )
            + template.pools[len(scenario.pools) :],  # the shared vPorts' tickets
        )
        return refill.apply(program) if refill is not None else program

    @staticmethod
    def _shape(scenario: Scenario, seed: int) -> str:
        rest = scenario.model_dump_json(exclude={"limits", "pools", "seed", "pool_refill"})
        gated = list(scenario.limits)
        # Order matters too: it numbers the gates and pools the ops refer to.
        pooled = [(k, n > 0) for k, n in scenario.pools.items()]
        # A refill's shape: whether pools refill, whether targets move, and
        # the turns per branch; its workers and targets are numbers in the copy.
        refill = _refill(scenario)
        shape = None if refill is None else (refill.follow, refill.copies)
        return f"{rest}|{gated}|{pooled}|{shape}|{seed}"
