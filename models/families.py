"""The CNI families: one registry of what each kind of network compiles to.

A scenario's ``cni`` names one network of one *family*: the seed-000
software CNIs (:mod:`.cni`), the no-network baseline, the SR-IOV variants of
seed 001 (:mod:`.sriov`) or the testbed's own runtimes (:mod:`.testbed`).
A family says, once, what its sandboxes pass through (stages), what they can
take from a pool (pool kinds), which locks the node has, and how a storm's
plans are built; :mod:`.compile`, the optimizer's search space and the
known-miss predicates all ask it (:func:`cni_family`) instead of testing the
CNI's name against copies of these sets.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar

from .._params import Check, NonEmpty, OneOf, Rules, format_problem, validate
from ..simulator import CyclicPlans, GateSpec, LockSpec, PoolSpec, Step
from ._errors import ConfigError
from .cni import SharedVport, cni_stages, lock_specs, pool_kinds, sandbox_plan
from .cni import vport_creators as software_vport_creators
from .profile import Profile
from .scenario import CNI_NAMES, Scenario
from .sriov import (
    SRIOV_STAGES,
    SRIOV_VARIANTS,
    sriov_lock_specs,
    sriov_plans,
    sriov_profile_costs,
)
from .testbed import (
    TESTBED_CNIS,
    TESTBED_STAGES,
    agent_own_make_s,
    agent_refill_work,
    agent_removals,
    testbed_costs,
    testbed_lock_specs,
    testbed_plan,
    uses_agent,
)
from .tsor import (
    TSOR_POOL_KINDS,
    TSOR_STAGES,
    TSOR_VARIANTS,
    tsor_lock_specs,
    tsor_plan,
    tsor_profile_costs,
)

__all__ = [
    "CNI_FAMILIES",
    "CniFamily",
    "FamilyPlans",
    "cni_family",
    "family_cnis",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class FamilyPlans:
    """A storm's plans, with the signal gates and ticket pools they use (a
    shared vPort's, :class:`~.cni.SharedVport`)."""

    plans: Sequence[Any]
    signals: tuple[GateSpec, ...] = ()
    tickets: tuple[PoolSpec, ...] = ()
    reserved_cores: float = 0.0
    """Host cores the family's own node service keeps from the storm (TSoR's
    service core)."""
    refill_work: Callable[[str, tuple[Step, ...]], tuple[Step, ...]] | None = None
    """How a refill worker makes a device of a kind, given the steps a start
    that found the pool empty runs (None: as that start runs them). The
    testbed's worker is its node agent's (:func:`~.testbed.agent_refill_work`)."""
    refill_remove: Mapping[str, tuple[Step, ...]] = field(default_factory=dict)
    """What a refill worker's removal of a surplus device costs, by pool
    kind (``Refill.remove``); a kind absent: its surplus goes at once, for
    nothing (the families whose node agent the papers do not describe)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CniFamily:
    """One family of CNIs and how a storm of one of them compiles.

    ``stages(cni)``: the stages a sandbox passes through (where limits and
    RTNL priorities may apply); ``pool_kinds(cni)``: the device kinds it can
    take from a pool; ``locks(scenario, profile)``: the node's locks, in the
    order the program numbers them; ``plans(scenario, profile)``: its
    sandboxes' plans. ``locks`` is called before ``plans``.
    """

    name: str
    cnis: tuple[str, ...]
    stages: Callable[[str], tuple[str, ...]]
    pool_kinds: Callable[[str], tuple[str, ...]]
    locks: Callable[[Scenario, Profile], list[LockSpec]]
    plans: Callable[[Scenario, Profile], FamilyPlans]

    __rules__: ClassVar[Rules] = Rules(
        name=NonEmpty(),
        cnis=NonEmpty(),
        checks=(
            Check(
                "cnis",
                lambda f: all(c in CNI_NAMES for c in f.cnis),
                "must all be names a scenario accepts (CNI_NAMES)",
            ),
        ),
    )

    def __post_init__(self) -> None:
        validate(self)

    def vport_creators(self, cni: str, tenants: int) -> int:
        """Shared vPorts a storm of ``cni`` makes (0: none, or one per pod)."""
        return software_vport_creators(cni, tenants) if self.name == "software" else 0


# -- the seed-000 software CNIs (and no-network, which compiles the same way) ------


def _software_locks(scenario: Scenario, prof: Profile) -> list[LockSpec]:
    return lock_specs(prof.boot_costs(), scenario.rtnl_priority)


def _software_plans(scenario: Scenario, prof: Profile) -> FamilyPlans:
    """The plans of a seed-000 CNI's sandboxes, and the signal gates and
    ticket pools of its shared vPorts (see :class:`SharedVport`).

    Sandbox i belongs to tenant i % tenants; a single-tenant sharing CNI has
    one vPort per tenant, tc-routing one for the node.
    """
    costs = prof.boot_costs()
    n = scenario.sandboxes
    n_shared = min(software_vport_creators(scenario.cni, scenario.tenants), n)
    if n_shared == 0:  # direct mode: every sandbox its own vPort
        return FamilyPlans(plans=CyclicPlans([sandbox_plan(scenario, costs)], sandboxes=n))
    shared = [
        SharedVport(name=f"vport/{t}", index=t, sandboxes=len(range(t, n, n_shared)))
        for t in range(n_shared)
    ]
    plans = [sandbox_plan(scenario, costs, shared_vport=v) for v in shared]
    return FamilyPlans(
        plans=CyclicPlans(plans, sandboxes=n),
        signals=tuple(GateSpec(name=v.name, permits=0, signal=True) for v in shared),
        tickets=tuple(
            PoolSpec(name=v.name, capacity=1, memory_mib_per_device=0.0, ticket=True)
            for v in shared
        ),
    )


# -- SR-IOV (seed 001) --------------------------------------------------------------


def _sriov_stages(cni: str) -> tuple[str, ...]:
    variant = SRIOV_VARIANTS[cni]
    stages = SRIOV_STAGES
    if variant.skip_image:
        stages = tuple(s for s in stages if s != "dma-image")
    if variant.async_vf:
        stages = tuple(s for s in stages if s != "vf-driver")  # a branch: no admission
    return stages


def _sriov_locks(scenario: Scenario, prof: Profile) -> list[LockSpec]:
    variant = SRIOV_VARIANTS[scenario.cni]
    # The software locks first, then the devset's: the program numbers them so.
    return lock_specs(prof.boot_costs(), scenario.rtnl_priority) + sriov_lock_specs(
        variant, scenario.sandboxes
    )


def _sriov_plans(scenario: Scenario, prof: Profile) -> FamilyPlans:
    variant = SRIOV_VARIANTS[scenario.cni]
    sriov = sriov_profile_costs(prof)
    vfs = scenario.nic_vfs or sriov.nic_vfs
    if scenario.sandboxes > vfs:
        raise ConfigError(
            f"sandboxes: each SR-IOV sandbox needs its own VF, but the NIC of profile "
            f"{prof.name!r} has {vfs} (got sandboxes={scenario.sandboxes}; set nic_vfs "
            "to model a larger NIC, e.g. 1024 for seed 001's CX-7 or IPU)"
        )
    hugepages = sriov.hugepages if scenario.hugepages is None else scenario.hugepages
    return FamilyPlans(
        plans=sriov_plans(scenario, prof.boot_costs(), sriov, variant, hugepages=hugepages)
    )


# -- TSoR (seed 003) -----------------------------------------------------------------


def _tsor_locks(scenario: Scenario, prof: Profile) -> list[LockSpec]:
    return tsor_lock_specs(prof.boot_costs(), scenario.rtnl_priority)


def _tsor_plans(scenario: Scenario, prof: Profile) -> FamilyPlans:
    tsor = tsor_profile_costs(prof)
    plan = tsor_plan(scenario, prof.boot_costs(), tsor, TSOR_VARIANTS[scenario.cni])
    return FamilyPlans(
        plans=CyclicPlans([plan], sandboxes=scenario.sandboxes),
        reserved_cores=tsor.service_cores,
    )


# -- the testbed's runtimes ----------------------------------------------------------


def _testbed_locks(scenario: Scenario, prof: Profile) -> list[LockSpec]:
    return testbed_lock_specs(testbed_costs(prof), agent=uses_agent(scenario))


def _testbed_plans(scenario: Scenario, prof: Profile) -> FamilyPlans:
    tb = testbed_costs(prof)
    variant = TESTBED_CNIS[scenario.cni]
    plan = testbed_plan(scenario, tb, variant=variant)
    return FamilyPlans(
        plans=CyclicPlans([plan], sandboxes=scenario.sandboxes),
        refill_work=functools.partial(
            agent_refill_work, own_s=agent_own_make_s(scenario, tb, variant=variant)
        ),
        refill_remove=agent_removals(scenario, tb, variant=variant),
    )


#: Every family, by name. ``software``: the seed-000 CNIs with a network;
#: ``no-network``: their baseline without one (two stages, nothing to pool);
#: ``sriov``: seed 001's variants (VFs are made once at boot: nothing to pool
#: per sandbox); ``testbed``: the testbed's runtimes.
CNI_FAMILIES: Mapping[str, CniFamily] = MappingProxyType(
    {
        f.name: f
        for f in (
            CniFamily(
                name="software",
                cnis=(
                    "veth",
                    "ipvlan",
                    "macvlan",
                    "ipvtap",
                    "macvtap",
                    "tc-routing",
                    "vhost-user",
                    "ebpf",
                ),
                stages=cni_stages,
                pool_kinds=pool_kinds,
                locks=_software_locks,
                plans=_software_plans,
            ),
            CniFamily(
                name="no-network",
                cnis=("no-network",),
                stages=cni_stages,
                pool_kinds=pool_kinds,
                locks=_software_locks,
                plans=_software_plans,
            ),
            CniFamily(
                name="sriov",
                cnis=tuple(SRIOV_VARIANTS),
                stages=_sriov_stages,
                pool_kinds=lambda cni: (),
                locks=_sriov_locks,
                plans=_sriov_plans,
            ),
            CniFamily(
                name="tsor",
                cnis=tuple(TSOR_VARIANTS),
                stages=lambda cni: TSOR_STAGES,
                pool_kinds=lambda cni: TSOR_POOL_KINDS,
                locks=_tsor_locks,
                plans=_tsor_plans,
            ),
            CniFamily(
                name="testbed",
                cnis=tuple(TESTBED_CNIS),
                stages=lambda cni: TESTBED_STAGES,
                pool_kinds=lambda cni: TESTBED_CNIS[cni].pool_kinds,
                locks=_testbed_locks,
                plans=_testbed_plans,
            ),
        )
    }
)

_BY_CNI: Mapping[str, CniFamily] = MappingProxyType(
    {cni: family for family in CNI_FAMILIES.values() for cni in family.cnis}
)
_KNOWN_CNIS = OneOf(tuple(_BY_CNI))


def cni_family(cni: str) -> CniFamily:
    """The family of ``cni``; :class:`ConfigError` if no family has it."""
    family = _BY_CNI.get(cni)
    if family is None:
        raise ConfigError(format_problem("cni", _KNOWN_CNIS.text(), cni))
    return family


def family_cnis(name: str) -> frozenset[str]:
    """The CNIs of the family ``name`` (``software``, ``no-network``, ``sriov``,
    ``tsor``, ``testbed``), for a predicate that asks which family a storm is of."""
    return frozenset(CNI_FAMILIES[name].cnis)
