"""The CNI-family registry: one place that says how each CNI compiles.

The registry replaced three if/elif chains in ``models/compile.py``; the old
chains are kept here, verbatim but for names, as the reference the registry
must match: same stages, same pool kinds, and a program identical array for
array for every built-in CNI (a compile through the old chain, patched in,
against one through the registry).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

import bootstorm.models.compile as compile_module
from bootstorm.calibration import trace_fit
from bootstorm.models import (
    CNI_NAMES,
    ConfigError,
    Profile,
    Scenario,
    compile_scenario,
    load_profile,
    scenario_pool_kinds,
    scenario_stages,
)
from bootstorm.models import testbed as tb
from bootstorm.models.cni import (
    SharedVport,
    cni_stages,
    lock_specs,
    pool_kinds,
    sandbox_plan,
    vport_creators,
)
from bootstorm.models.families import CNI_FAMILIES, CniFamily, FamilyPlans, cni_family
from bootstorm.models.sriov import (
    SRIOV_STAGES,
    SRIOV_VARIANTS,
    sriov_lock_specs,
    sriov_plan,
    sriov_profile_costs,
)
from bootstorm.simulator import CyclicPlans, GateSpec, LockSpec, PoolSpec
from bootstorm.simulator.testing import assert_same_program

# -- the dispatch as it was before the registry ----------------------------------------


def _old_stages(cni: str) -> tuple[str, ...]:
    if cni in tb.TESTBED_CNIS:
        return tb.TESTBED_STAGES
    variant = SRIOV_VARIANTS.get(cni)
    if variant is None:
        return cni_stages(cni)
    stages = SRIOV_STAGES
    if variant.skip_image:
        stages = tuple(s for s in stages if s != "dma-image")
    if variant.async_vf:
        stages = tuple(s for s in stages if s != "vf-driver")
    return stages


def _old_pool_kinds(cni: str) -> tuple[str, ...]:
    if cni in tb.TESTBED_CNIS:
        return tb.TESTBED_CNIS[cni].pool_kinds
    if cni in SRIOV_VARIANTS:
        return ()
    return pool_kinds(cni)


def _old_software_plans(
    scenario: Scenario, costs: Any
) -> tuple[CyclicPlans, list[GateSpec], list[PoolSpec]]:
    n = scenario.sandboxes
    n_shared = min(vport_creators(scenario.cni, scenario.tenants), n)
    if n_shared == 0:
        return CyclicPlans([sandbox_plan(scenario, costs)], sandboxes=n), [], []
    shared = [
        SharedVport(name=f"vport/{t}", index=t, sandboxes=len(range(t, n, n_shared)))
        for t in range(n_shared)
    ]
    plans = [sandbox_plan(scenario, costs, shared_vport=v) for v in shared]
    signals = [GateSpec(name=v.name, permits=0, signal=True) for v in shared]
    tickets = [
        PoolSpec(name=v.name, capacity=1, memory_mib_per_device=0.0, ticket=True) for v in shared
    ]
    return CyclicPlans(plans, sandboxes=n), signals, tickets


def _old_locks_and_plans(
    scenario: Scenario, prof: Profile
) -> tuple[list[LockSpec], Sequence[Any], list[GateSpec], list[PoolSpec]]:
    cni = scenario.cni
    variant = SRIOV_VARIANTS.get(cni)
    signals: list[GateSpec] = []
    tickets: list[PoolSpec] = []
    plans: Sequence[Any]
    if cni in tb.TESTBED_CNIS:
        plan = tb.testbed_plan(scenario, tb.testbed_costs(prof), variant=tb.TESTBED_CNIS[cni])
        plans = CyclicPlans([plan], sandboxes=scenario.sandboxes)
        locks = tb.testbed_lock_specs()
    elif variant is not None:
        locks = lock_specs(prof.boot_costs(), scenario.rtnl_priority)
        sriov = sriov_profile_costs(prof)
        vfs = scenario.nic_vfs or sriov.nic_vfs
        assert scenario.sandboxes <= vfs
        hugepages = sriov.hugepages if scenario.hugepages is None else scenario.hugepages
        plans = [
            sriov_plan(scenario, prof.boot_costs(), sriov, variant, vf=i, hugepages=hugepages)
            for i in range(scenario.sandboxes)
        ]
        locks += sriov_lock_specs(variant, scenario.sandboxes)
    else:
        costs = prof.boot_costs()
        locks = lock_specs(costs, scenario.rtnl_priority)
        plans, signals, tickets = _old_software_plans(scenario, costs)
    return locks, plans, signals, tickets


class _OldChain:
    """A stand-in for the registry that answers with the old chains."""

    def __init__(self, cni: str) -> None:
        self.cni = cni
        self._cache: dict[int, tuple[Any, ...]] = {}

    def stages(self, cni: str) -> tuple[str, ...]:
        return _old_stages(cni)

    def pool_kinds(self, cni: str) -> tuple[str, ...]:
        return _old_pool_kinds(cni)

    def locks(self, scenario: Scenario, prof: Profile) -> list[LockSpec]:
        self._cache[id(scenario)] = _old_locks_and_plans(scenario, prof)
        return self._cache[id(scenario)][0]

    def plans(self, scenario: Scenario, prof: Profile) -> FamilyPlans:
        _, plans, signals, tickets = self._cache.pop(id(scenario))
        return FamilyPlans(plans=plans, signals=tuple(signals), tickets=tuple(tickets))


# -- profiles and storms ---------------------------------------------------------------


@pytest.fixture(scope="module")
def testbed_profile() -> Profile:
    base = trace_fit.testbed_template(cores=2, memory_mib=4096, service_cv=0.0, kworker_rtnl_ops=2)
    # The CNI runtime's costs, so that testbed-cni-bridge compiles too.
    return base.with_values(
        {
            "testbed.cni_exec_cpu_s": 4e-3,
            "testbed.shim_start_cpu_s": 15e-3,
            "testbed.tc_exec_cpu_s": 1.5e-3,
            "testbed.ipam_hold_s": 1e-3,
            "testbed.spawn_cpu_s": 2e-3,
        },
        source="test",
    )


def _profile_for(cni: str, testbed_profile: Profile) -> Profile:
    if cni in tb.TESTBED_CNIS:
        return testbed_profile
    return load_profile("paper-001" if cni in SRIOV_VARIANTS else "paper-000")


def _storms(cni: str, profile: Profile) -> list[Scenario]:
    stages = _old_stages(cni)
    kinds = _old_pool_kinds(cni)
    base = Scenario(cni=cni, sandboxes=12, profile=profile.name, seed=7)
    storms = [base, base.replace(tenants=3, qos_rules=2, sg_rules=2)]
    if kinds:
        storms.append(base.replace(pools={k: 5 for k in kinds}))
    storms.append(base.replace(limits={stages[-1]: 4, stages[0]: 2}, rtnl_priority={stages[0]: 1}))
    return storms


# -- the tests -------------------------------------------------------------------------

#: The CNIs the old dispatch knew: every family but those added after the
#: registry (seed 003's TSoR, tests/models/test_tsor.py), which it never had.
_OLD_CNIS = tuple(c for c in CNI_NAMES if cni_family(c).name != "tsor")


def test_every_cni_a_scenario_accepts_is_in_exactly_one_family() -> None:
    seen = [cni for family in CNI_FAMILIES.values() for cni in family.cnis]
    assert sorted(seen) == sorted(CNI_NAMES)
    assert len(seen) == len(set(seen))
    for cni in CNI_NAMES:
        assert cni in cni_family(cni).cnis


@pytest.mark.parametrize("cni", _OLD_CNIS)
def test_stages_and_pool_kinds_are_the_old_dispatchs(cni: str) -> None:
    assert scenario_stages(cni) == _old_stages(cni)
    assert scenario_pool_kinds(cni) == _old_pool_kinds(cni)


@pytest.mark.parametrize("cni", _OLD_CNIS)
def test_every_cni_compiles_to_the_same_program_as_before(
    cni: str, testbed_profile: Profile, monkeypatch: pytest.MonkeyPatch
) -> None:
    profile = _profile_for(cni, testbed_profile)
    for storm in _storms(cni, profile):
        new = compile_scenario(storm, profile=profile)
        with monkeypatch.context() as patch:
            patch.setattr(compile_module, "cni_family", _OldChain)
            old = compile_scenario(storm, profile=profile)
        assert_same_program(new, old)


def test_an_unknown_cni_is_one_line_naming_the_field() -> None:
    with pytest.raises(ConfigError, match=r"^cni: must be one of .*veth.* \(got 'wireguard'\)$"):
        cni_family("wireguard")


def test_a_family_is_a_validated_value() -> None:
    software = CNI_FAMILIES["software"]
    with pytest.raises(ConfigError, match=r"^cnis: must all be names a scenario accepts"):
        CniFamily(
            name="x",
            cnis=("wireguard",),
            stages=software.stages,
            pool_kinds=software.pool_kinds,
            locks=software.locks,
            plans=software.plans,
        )
