"""SR-IOV passthrough sandboxes: vanilla, FastIOV, its ablations, pre-zeroing.

A sandbox with a passed-through VF starts in the steps of seed 001 §2.3 and
§3.2: ``vf-config`` (the network namespace and the CNI's VF configuration,
Fig. 3's t_config) → ``cgroup`` → ``dma-ram`` → ``dma-image`` →
``virtiofs`` → ``vfio-devset`` → ``vm-boot`` (the rest: the VMM's tasks,
the guest's boot, the agent) → ``vf-driver``. Table 1 names all but
``vf-config`` and ``vm-boot``, which are in its remainder.

QEMU maps every guest memory region for DMA when the VFIO container is
attached (RAM, then the image region), before it opens the device; the
virtiofs device connects to its daemon after that.

- **VF configuration** (§2.3): the CNI sets the VF's VLAN and rate through
  the PF driver (an ``RTM_SETLINK`` on the PF, under RTNL, that waits for the
  NIC's admin queue) and moves the VF's interface into the sandbox's namespace.

- **DMA mapping** (``dma-ram``, ``dma-image``; §3.2.3, Fig. 5): page
  retrieving (per page: hugepages make pages 512× fewer), zeroing (bytes at a
  per-core rate under the node's shared memory bandwidth), pinning and IOMMU
  mapping (per GiB).
- **VFIO devset** (§3.2.2): vanilla opens every VF of the devset under one
  global mutex; FastIOV (§4.2.1) takes the parent rwlock as a reader plus the
  VF's own mutex for the open (the parent as a writer is for devset-wide
  operations such as a bus reset, which a start does not do).
- **VF driver** (§3.2.4, §4.2.2): the guest driver's init and the PF's
  service of the VF's mailbox requests — one service task per PF serves all
  VFs, so concurrent inits queue there. Vanilla waits for it before the
  sandbox is up; FastIOV runs it in a branch, and the sandbox's *ready*
  latency (first network use) waits for it.
- **Zeroing** (§4.3.2, §5): vanilla zeroes all guest RAM while mapping it.
  FastIOV zeroes only the instant-zeroing list (what the VMM writes before the
  guest runs) while mapping; the guest's first touches zero the pages it
  writes while booting (EPT faults), and fastiovd's one background thread
  zeroes the rest, competing for cores and bandwidth. Skipping the image
  region (§4.3.1) removes its mapping; when it is mapped, the VMM has written
  it, so it is zeroed at once even under FastIOV. Pre-zeroing (HawkEye, §6.1)
  leaves a fraction of every region already zero.

Every byte of guest RAM is zeroed exactly once: see :func:`zeroing_ledger`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from .._params import Check, Interval, Rules, validate
from ..simulator import (
    Async,
    Cpu,
    CyclicPlans,
    Hold,
    LockKind,
    LockSpec,
    Sleep,
    Stage,
    Step,
    Zero,
)
from ._errors import ConfigError
from .cni import (
    MIB,
    RTNL,
    boot_steps,
    cgroup_steps,
    guest_touch_bytes,
    virtiofs_steps,
    vmm_start_steps,
)
from .profile import CostTable, Profile, SriovCostTable
from .scenario import Scenario

__all__ = [
    "DEVSET_MUTEX",
    "DEVSET_RWLOCK",
    "FASTIOVD",
    "PF_SERVICE",
    "SRIOV_STAGES",
    "SRIOV_VARIANTS",
    "VF_RELATED_STAGES",
    "SriovVariant",
    "ZeroingLedger",
    "sriov_lock_specs",
    "sriov_plan",
    "sriov_plans",
    "sriov_profile_costs",
    "vf_mutex",
    "zeroing_ledger",
]

SRIOV_STAGES: tuple[str, ...] = (
    "vf-config",
    "cgroup",
    "dma-ram",
    "dma-image",
    "virtiofs",
    "vfio-devset",
    "vm-boot",
    "vf-driver",
)
#: Table 1's VF-related steps (1, 3, 4, 5).
VF_RELATED_STAGES = ("dma-ram", "dma-image", "vfio-devset", "vf-driver")

DEVSET_MUTEX = "vfio_devset"
DEVSET_RWLOCK = "vfio_devset_rw"
PF_SERVICE = "pf_service"
FASTIOVD = "fastiovd_zero"

GIB = 1024**3
# Page sizes of x86-64: base pages and the 2 MiB hugepages seed 001 enables.
PAGE_BYTES = 4096
HUGEPAGE_BYTES = 2 * 1024 * 1024

DevsetLock = Literal["global", "parent-child"]


@dataclass(frozen=True, kw_only=True, slots=True)
class SriovVariant:
    """Which of FastIOV's four optimisations are on, and what is pre-zeroed.

    ``devset_lock``: ``global`` mutex (vanilla) or FastIOV's ``parent-child``
    rwlock + per-VF mutex (L). ``async_vf``: VF driver init overlapped with
    the rest of the start (A). ``skip_image``: no DMA mapping of the image
    region (S). ``lazy_zero``: zeroing decoupled from mapping (D).
    ``prezeroed``: fraction of memory already zero when the storm starts.
    """

    name: str
    devset_lock: DevsetLock
    async_vf: bool
    skip_image: bool
    lazy_zero: bool
    prezeroed: float = 0.0

    __rules__: ClassVar[Rules] = Rules(
        prezeroed=Interval(float, 0.0, 1.0),
        checks=(
            Check(
                "prezeroed",
                lambda v: not (v.prezeroed and v.lazy_zero),
                "must be 0 with lazy_zero (pre-zeroing is a baseline for eager zeroing)",
            ),
        ),
    )

    def __post_init__(self) -> None:
        validate(self)


_VANILLA = SriovVariant(
    name="sriov-vanilla",
    devset_lock="global",
    async_vf=False,
    skip_image=False,
    lazy_zero=False,
)
_FASTIOV = SriovVariant(
    name="fastiov", devset_lock="parent-child", async_vf=True, skip_image=True, lazy_zero=True
)


def _without(name: str, **change: Any) -> SriovVariant:
    """FastIOV with one optimisation switched off (seed 001 §6.1's FastIOV-X)."""
    return dataclasses.replace(_FASTIOV, name=name, **change)


def _prezero(percent: int) -> SriovVariant:
    return SriovVariant(
        name=f"prezero-{percent}",
        devset_lock="global",
        async_vf=False,
        skip_image=False,
        lazy_zero=False,
        prezeroed=percent / 100,
    )


#: Seed 001 §6.1's baselines, by the name a scenario's ``cni`` takes.
SRIOV_VARIANTS: dict[str, SriovVariant] = {
    v.name: v
    for v in (
        _VANILLA,
        _FASTIOV,
        _without("fastiov-no-lock", devset_lock="global"),  # FastIOV-L
        _without("fastiov-sync-vf", async_vf=False),  # FastIOV-A
        _without("fastiov-no-skip", skip_image=False),  # FastIOV-S
        _without("fastiov-eager-zero", lazy_zero=False),  # FastIOV-D
        _prezero(10),
        _prezero(50),
        _prezero(100),
    )
}


def vf_mutex(vf: int) -> str:
    """The name of VF ``vf``'s own mutex under FastIOV's parent-child lock."""
    return f"vfio_vf/{vf}"


def sriov_lock_specs(variant: SriovVariant, n_vfs: int) -> list[LockSpec]:
    """The devset locks (FastIOV: one mutex per VF in use), the PF's service
    task and fastiovd's background zeroing thread."""
    locks = [LockSpec(name=PF_SERVICE)]
    if variant.devset_lock == "global":
        locks.append(LockSpec(name=DEVSET_MUTEX))
    else:
        locks.append(LockSpec(name=DEVSET_RWLOCK, kind=LockKind.RW))
        locks += [LockSpec(name=vf_mutex(i)) for i in range(n_vfs)]
    if variant.lazy_zero:
        locks.append(LockSpec(name=FASTIOVD))
    return locks


def sriov_profile_costs(profile: Profile) -> SriovCostTable:
    if profile.sriov is None:
        raise ConfigError(
            f"profile: {profile.name!r} has no `sriov` section (NIC, DMA mapping, VFIO costs); "
            "SR-IOV variants need one, e.g. profile paper-001"
        )
    return profile.sriov


@dataclass(frozen=True, kw_only=True, slots=True)
class ZeroingLedger:
    """Who zeroes which bytes of one sandbox's memory, and when.

    Guest RAM is split into disjoint parts that add up to ``ram_bytes``:
    ``prezeroed`` (zero before the storm), ``at_map`` (while DMA mapping,
    before the guest runs), ``first_touch`` (as the booting guest writes it),
    ``background`` (fastiovd's thread, pages the guest has not touched) and
    ``untouched`` (zeroed on first touch after the start). The image region
    is ``image_at_map`` (zeroed while mapped) plus ``image_prezeroed``.
    """

    ram_bytes: float
    prezeroed: float
    at_map: float
    first_touch: float
    background: float
    untouched: float
    image_at_map: float
    image_prezeroed: float

    @property
    def zeroed_during_storm(self) -> float:
        """Bytes the storm itself zeroes (what the CPU model must clear)."""
        return self.at_map + self.first_touch + self.background + self.image_at_map


def zeroing_ledger(
    variant: SriovVariant | None, *, memory_mib: float, costs: CostTable, sriov: SriovCostTable
) -> ZeroingLedger:
    """The zeroing of one sandbox's memory under ``variant`` (``None``: no
    passthrough, guest memory allocated lazily)."""
    ram = memory_mib * MIB
    touched = guest_touch_bytes(costs, memory_mib)
    if variant is None:
        return ZeroingLedger(
            ram_bytes=ram,
            prezeroed=0.0,
            at_map=0.0,
            first_touch=touched,
            background=0.0,
            untouched=ram - touched,
            image_at_map=0.0,
            image_prezeroed=0.0,
        )
    image = 0.0 if variant.skip_image else sriov.image_mib * MIB
    image_at_map = image * (1.0 - variant.prezeroed)
    if not variant.lazy_zero:
        at_map = ram * (1.0 - variant.prezeroed)
        return ZeroingLedger(
            ram_bytes=ram,
            prezeroed=ram - at_map,
            at_map=at_map,
            first_touch=0.0,
            background=0.0,
            untouched=0.0,
            image_at_map=image_at_map,
            image_prezeroed=image - image_at_map,
        )
    instant = min(sriov.instant_zero_mib * MIB, ram)
    # What the VMM loads is on the instant list: the guest touches the rest.
    first_touch = max(min(touched, ram) - min(costs.vmm_loaded_mib * MIB, instant), 0.0)
    first_touch = min(first_touch, ram - instant)
    return ZeroingLedger(
        ram_bytes=ram,
        prezeroed=0.0,
        at_map=instant,
        first_touch=first_touch,
        background=ram - instant - first_touch,
        untouched=0.0,
        image_at_map=image_at_map,
        image_prezeroed=image - image_at_map,
    )


def _dma_map(
    sriov: SriovCostTable, *, region_bytes: float, zero_bytes: float, label: str
) -> tuple[Step, ...]:
    """VFIO_IOMMU_MAP_DMA of a region: retrieve, zero, pin, map (Fig. 5)."""
    page = HUGEPAGE_BYTES if sriov.hugepages else PAGE_BYTES
    pages = region_bytes / page
    steps: tuple[Step, ...] = (Cpu(pages * sriov.page_retrieve_cpu_s, f"{label} retrieve"),)
    if zero_bytes > 0.0:
        steps += (Zero(zero_bytes, f"{label} zero"),)
    return (*steps, Cpu(region_bytes / GIB * sriov.pin_map_cpu_s_per_gib, f"{label} pin+map"))


def _vf_driver(sriov: SriovCostTable) -> tuple[Step, ...]:
    pf_work = Cpu(sriov.vf_pf_service_s, "PF mailbox", growth_s=sriov.vf_pf_service_per_vf_s)
    return (Sleep(sriov.vf_guest_init_s, "guest VF init"), Hold(PF_SERVICE, (pf_work,)))


def sriov_plans(
    scenario: Scenario,
    costs: CostTable,
    sriov: SriovCostTable,
    variant: SriovVariant,
    *,
    hugepages: bool,
) -> Sequence[tuple[Stage, ...]]:
    """Every sandbox's :func:`sriov_plan`, sandbox ``i`` on VF ``i``.

    Only the parent-child devset lock names a sandbox's own VF (its mutex);
    every other stage is one object shared by all sandboxes, so the compiler
    flattens the rest once (it looks stages up by identity) and a storm of
    one plan is one :class:`~bootstorm.simulator.CyclicPlans` entry.
    """
    first = sriov_plan(scenario, costs, sriov, variant, vf=0, hugepages=hugepages)
    if variant.devset_lock == "global":
        one: Sequence[tuple[Stage, ...]] = CyclicPlans((first,), sandboxes=scenario.sandboxes)
        return one
    at = next(i for i, stage in enumerate(first) if stage.name == "vfio-devset")
    devset = first[at]
    plans = [first]
    for vf in range(1, scenario.sandboxes):
        own = Stage(devset.name, _devset_steps(sriov, variant, vf=vf), gate=devset.gate)
        plans.append((*first[:at], own, *first[at + 1 :]))
    return plans


def _devset_steps(sriov: SriovCostTable, variant: SriovVariant, *, vf: int) -> tuple[Step, ...]:
    open_vf = (Cpu(sriov.vfio_open_cpu_s, "vfio open"), Sleep(sriov.vfio_open_s, "VF enable"))
    if variant.devset_lock == "global":
        return (Hold(DEVSET_MUTEX, open_vf),)
    # An open is an inter-child operation: the parent as a reader, the VF's
    # own mutex. Parent operations (a devset-wide reset, at close) take the
    # parent as a writer; none happens while sandboxes start.
    return (Hold(DEVSET_RWLOCK, (Hold(vf_mutex(vf), open_vf),), shared=True),)


def sriov_plan(
    scenario: Scenario,
    costs: CostTable,
    sriov: SriovCostTable,
    variant: SriovVariant,
    *,
    vf: int,
    hugepages: bool,
) -> tuple[Stage, ...]:
    """The stages of the sandbox that gets VF ``vf``."""
    if hugepages != sriov.hugepages:
        sriov = sriov.model_copy(update={"hugepages": hugepages})
    c = costs
    ledger = zeroing_ledger(variant, memory_mib=scenario.memory_mib, costs=costs, sriov=sriov)
    rpc: tuple[Step, ...] = (Sleep(c.containerd_rpc_s, "containerd"),)

    dma_ram = _dma_map(sriov, region_bytes=ledger.ram_bytes, zero_bytes=ledger.at_map, label="ram")
    if ledger.background > 0.0:
        # Registered with fastiovd; its one thread zeroes sandboxes' pages in turn.
        dma_ram += (Async("bg-zero", (Hold(FASTIOVD, (Zero(ledger.background, "bg zero"),)),)),)

    dma_image: tuple[Step, ...] = ()
    if not variant.skip_image:
        dma_image = _dma_map(
            sriov,
            region_bytes=sriov.image_mib * MIB,
            zero_bytes=ledger.image_at_map,
            label="image",
        )

    devset = _devset_steps(sriov, variant, vf=vf)
    boot = (
        *vmm_start_steps(costs),
        *boot_steps(costs, touch_bytes=ledger.first_touch),
    )
    rtnl_link = Cpu(c.rtnl_link_hold_s, "link")
    vf_config = (
        *rpc,
        Cpu(c.netns_create_cpu_s, "setup_net"),
        Hold(RTNL, (rtnl_link,)),  # the namespace's loopback
        Hold(RTNL, (Cpu(c.rtnl_small_hold_s, "setlink vf"), Sleep(sriov.vf_config_pf_s, "PF AQ"))),
        Hold(RTNL, (rtnl_link, Sleep(c.rcu_grace_s, "synchronize_net"))),  # into the netns
    )
    stages: list[tuple[str, tuple[Step, ...]]] = [
        ("vf-config", vf_config),
        ("cgroup", rpc + cgroup_steps(costs, netdev_growth=False)),
        ("dma-ram", dma_ram),
        ("dma-image", dma_image),
        ("virtiofs", virtiofs_steps(costs)),
        ("vfio-devset", devset),
    ]
    if variant.async_vf:
        boot += (Async("vf-driver", _vf_driver(sriov), ready=True),)
        stages.append(("vm-boot", boot))
    else:
        stages += [("vm-boot", boot), ("vf-driver", _vf_driver(sriov))]
    return tuple(
        Stage(name, steps, gate=name if name in scenario.limits else None)
        for name, steps in stages
        if steps or name in scenario.limits
    )
