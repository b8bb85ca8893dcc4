"""The SR-IOV catalog: variants, the devset locks, zeroing conservation and
the shared memory bandwidth."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bootstorm import simulate
from bootstorm.models import ConfigError, Scenario, compile_scenario, load_profile
from bootstorm.models.compile import scenario_stages
from bootstorm.models.sriov import (
    DEVSET_MUTEX,
    DEVSET_RWLOCK,
    SRIOV_VARIANTS,
    zeroing_ledger,
)
from bootstorm.simulator import (
    Cpu,
    Hold,
    LockKind,
    LockSpec,
    MachineSpec,
    Sleep,
    Stage,
    compile_program,
    run_program,
)

PAPER_001 = load_profile("paper-001")
assert PAPER_001.sriov is not None
SRIOV = PAPER_001.sriov
MIB = 1024 * 1024


@pytest.mark.parametrize("cni", sorted(SRIOV_VARIANTS))
def test_every_variant_compiles_and_runs(cni: str) -> None:
    r = simulate(Scenario(cni=cni, sandboxes=12, profile="paper-001"))  # type: ignore[arg-type]
    assert np.isfinite(r.finish_s).all()
    on_path = [name for name, step in r.steps.items() if step.on_path]
    assert on_path == list(scenario_stages(cni))
    variant = SRIOV_VARIANTS[cni]
    assert ("vf-driver" in r.branches) == variant.async_vf
    assert (r.ready is not None) == variant.async_vf
    if variant.async_vf:
        assert r.ready is not None and r.ready.mean >= r.startup.mean


def test_sriov_needs_a_profile_with_an_sriov_section() -> None:
    with pytest.raises(ConfigError, match="'paper-000' has no `sriov` section"):
        compile_scenario(Scenario(cni="fastiov", sandboxes=4, profile="paper-000"))


def test_one_vf_per_sandbox_and_the_nic_has_so_many() -> None:
    with pytest.raises(ConfigError, match=r"has 256 .*got sandboxes=300"):
        compile_scenario(Scenario(cni="fastiov", sandboxes=300, profile="paper-001"))
    program = compile_scenario(
        Scenario(cni="fastiov", sandboxes=300, profile="paper-001", nic_vfs=1024)
    )
    assert program.n_sandboxes == 300


def test_pools_and_unknown_stage_limits_are_refused_for_sriov() -> None:
    with pytest.raises(ConfigError, match="pools: unknown pool kind 'netns'"):
        compile_scenario(
            Scenario(cni="fastiov", sandboxes=4, profile="paper-001", pools={"netns": 4})
        )
    with pytest.raises(ConfigError, match="limits: unknown stage 'dma-image'"):
        # FastIOV skips the image region: there is no such stage to limit.
        compile_scenario(
            Scenario(cni="fastiov", sandboxes=4, profile="paper-001", limits={"dma-image": 2})
        )


def test_a_limit_on_an_sriov_stage_admits_that_many() -> None:
    base = Scenario(cni="sriov-vanilla", sandboxes=20, profile="paper-001")
    r = simulate(base.replace(limits={"dma-ram": 4}))
    assert r.gates["dma-ram"].permits == 4 and r.gates["dma-ram"].waited > 0


def test_vanilla_serialises_vf_opens_and_fastiov_opens_in_parallel() -> None:
    vanilla = simulate(Scenario(cni="sriov-vanilla", sandboxes=30, profile="paper-001"))
    fast = simulate(Scenario(cni="fastiov", sandboxes=30, profile="paper-001"))
    assert vanilla.locks[DEVSET_MUTEX].contended > 0
    assert fast.locks[DEVSET_RWLOCK].contended == 0  # readers share the parent
    assert DEVSET_RWLOCK not in vanilla.locks and DEVSET_MUTEX not in fast.locks
    assert fast.steps["vfio-devset"].mean_s < vanilla.steps["vfio-devset"].mean_s / 5


# -- FastIOV's parent-child lock, on the kernel's rwlock (seed 001 §4.2.1, Fig. 7) ----------


def _devset_run(ops: list[tuple[str, int | None]]) -> list[float]:
    """Run operations that all arrive at t=0 and take 1 s each: ("child", i) is an
    inter-child operation on VF i (parent read + child i's mutex), ("parent",
    None) an operation on the devset's global state (parent write)."""
    locks = [LockSpec(name="parent", kind=LockKind.RW)] + [
        LockSpec(name=f"child{i}") for i in range(3)
    ]
    plans = []
    for what, child in ops:
        body: tuple[Stage, ...]
        if what == "child":
            inner = Hold(f"child{child}", (Sleep(1.0),))
            body = (Stage("op", (Hold("parent", (inner,), shared=True),)),)
        else:
            body = (Stage("op", (Hold("parent", (Sleep(1.0),)),)),)
        plans.append(body)
    program = compile_program(plans, machine=MachineSpec(cores=4), locks=locks)
    return run_program(program).finish_s.tolist()


def test_inter_child_operations_run_in_parallel() -> None:
    assert _devset_run([("child", 0), ("child", 1), ("child", 2)]) == [1.0, 1.0, 1.0]


def test_intra_child_operations_are_serial() -> None:
    assert _devset_run([("child", 0), ("child", 0)]) == [1.0, 2.0]


def test_parent_operations_exclude_everything() -> None:
    # FIFO by arrival (the rwlock's stated policy): the writer waits for the
    # first reader, and the reader after the writer waits for the writer.
    assert _devset_run([("child", 0), ("parent", None), ("child", 1)]) == [1.0, 2.0, 3.0]


# -- zeroing -----------------------------------------------------------------------


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cni=st.sampled_from([None, *sorted(SRIOV_VARIANTS)]),
    memory_mib=st.integers(32, 64 * 1024),
    touch_mib=st.floats(0.0, 512.0),
    loaded_mib=st.floats(0.0, 256.0),
)
def test_every_byte_of_guest_ram_is_zeroed_exactly_once(
    cni: str | None, memory_mib: int, touch_mib: float, loaded_mib: float
) -> None:
    costs = PAPER_001.costs.model_copy(
        update={"guest_boot_touch_mib": touch_mib, "vmm_loaded_mib": loaded_mib}
    )
    variant = None if cni is None else SRIOV_VARIANTS[cni]
    ledger = zeroing_ledger(variant, memory_mib=memory_mib, costs=costs, sriov=SRIOV)
    parts = [
        ledger.prezeroed,
        ledger.at_map,
        ledger.first_touch,
        ledger.background,
        ledger.untouched,
    ]
    assert min(parts) >= 0.0
    # A partition of guest RAM: every byte in exactly one part.
    assert sum(parts) == pytest.approx(memory_mib * MIB, rel=1e-12)
    image = 0.0 if variant is None or variant.skip_image else SRIOV.image_mib * MIB
    assert ledger.image_at_map + ledger.image_prezeroed == pytest.approx(image)
    # Before the guest reads it: every byte the boot touches is zero by then —
    # zeroed while mapping (before the guest runs), pre-zeroed, or zeroed on
    # the fault of its first touch; background and untouched bytes are ones
    # the guest has not touched.
    touched = min(loaded_mib + touch_mib + costs.guest_memmap_fraction * memory_mib, memory_mib)
    ready_before_read = ledger.prezeroed + ledger.at_map + ledger.first_touch
    assert ready_before_read >= touched * MIB * (1 - 1e-12)
    if variant is not None and not variant.lazy_zero:
        assert ledger.first_touch == 0.0 and ledger.background == 0.0  # all zeroed at map


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cni=st.sampled_from(["no-network", *sorted(SRIOV_VARIANTS)]),
    sandboxes=st.integers(1, 24),
    memory_mib=st.sampled_from([128, 512, 2048]),
    bandwidth_gib_s=st.sampled_from([5.0, 40.0, 400.0]),
)
def test_the_storm_zeroes_what_the_ledger_says_within_the_bandwidth(
    cni: str, sandboxes: int, memory_mib: int, bandwidth_gib_s: float
) -> None:
    profile = PAPER_001.with_values({"host.memory_bandwidth_gib_s": bandwidth_gib_s})
    scenario = Scenario(cni=cni, sandboxes=sandboxes, profile="paper-001", memory_mib=memory_mib)  # type: ignore[arg-type]
    r = simulate(scenario, profile=profile, record=True)
    variant = SRIOV_VARIANTS.get(cni)
    ledger = zeroing_ledger(variant, memory_mib=memory_mib, costs=profile.costs, sriov=SRIOV)
    assert r.cpu.zeroed_bytes == pytest.approx(sandboxes * ledger.zeroed_during_storm, rel=1e-9)
    assert r.recording is not None
    frame = r.recording.cpu_frame()
    assert frame["zero_gib_s"].max() <= bandwidth_gib_s * (1 + 1e-9)
    # Zeroing takes cores: never more than there are.
    assert frame["busy_cores"].max() <= profile.host.cores * (1 + 1e-9)


def test_prezeroing_removes_that_fraction_of_mapping_zeroing() -> None:
    full = zeroing_ledger(
        SRIOV_VARIANTS["sriov-vanilla"], memory_mib=512, costs=PAPER_001.costs, sriov=SRIOV
    )
    half = zeroing_ledger(
        SRIOV_VARIANTS["prezero-50"], memory_mib=512, costs=PAPER_001.costs, sriov=SRIOV
    )
    assert half.at_map == pytest.approx(full.at_map / 2)
    assert half.image_at_map == pytest.approx(full.image_at_map / 2)


def test_hugepages_cut_page_retrieving() -> None:
    base = Scenario(cni="sriov-vanilla", sandboxes=4, profile="paper-001")
    on = simulate(base.replace(hugepages=True))
    off = simulate(base.replace(hugepages=False))
    work = lambda r: r.cpu.by_stage["dma-ram"]["work"]  # noqa: E731
    # 512 MiB is 131 072 pages of 4 KiB or 256 hugepages to retrieve, each.
    expected = 4 * (131_072 - 256) * SRIOV.page_retrieve_cpu_s
    assert work(off) - work(on) == pytest.approx(expected, rel=0.15)  # 10% service jitter


def test_guest_cpu_quota_slows_the_boot() -> None:
    base = Scenario(cni="no-network", sandboxes=4, profile="paper-001")
    half = simulate(base.replace(vcpus=0.5))
    two = simulate(base.replace(vcpus=2.0))
    assert half.steps["StartVM"].mean_s > two.steps["StartVM"].mean_s


def test_cpu_work_accounting_matches_the_plan_on_an_idle_node() -> None:
    """One sandbox alone: its stages' CPU add up to the plan's amounts."""
    r = simulate(Scenario(cni="sriov-vanilla", sandboxes=1, profile="paper-001", seed=3))
    program = compile_scenario(
        Scenario(cni="sriov-vanilla", sandboxes=1, profile="paper-001", seed=3)
    )
    from bootstorm.simulator import OpKind

    planned = float(
        program.op_amount[np.isin(program.op_kind, [OpKind.CPU, OpKind.GUEST_CPU])].sum()
    )
    assert r.cpu.work_core_s == pytest.approx(planned, rel=1e-9)
    assert isinstance(Cpu(0.0), Cpu)
