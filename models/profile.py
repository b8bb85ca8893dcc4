"""Calibration profiles: the per-operation costs of one kind of node.

A profile is a versioned YAML file. Every number in it has a source, kept in
the ``sources`` map under the number's dotted path (``costs.vm_boot_cpu_s``);
a profile whose numbers lack a source does not load. Fitted numbers say which
paper rows they were fitted to and by which command.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..traces.operations import POOL_DEVICE_KINDS
from ._errors import ConfigError, format_validation_error, load_yaml_model_shared
from .dataplane import DataplaneCostTable
from .rdma import RdmaCostTable

__all__ = [
    "PROFILE_SCHEMA_VERSION",
    "CostEvidence",
    "CostTable",
    "FittedOn",
    "HostSpec",
    "Identification",
    "PredictionError",
    "Profile",
    "SriovCostTable",
    "TsorCostTable",
    "UnseenDirection",
    "available_profiles",
    "load_profile",
]

PROFILE_SCHEMA_VERSION = 1

# A profile is a file anyone can hand over, and its numbers are multiplied
# into every sandbox's plan: each has a range, with where it comes from. An
# infinite or 1e308 cost made every event land at t = inf (a DeadlockError
# traceback), an int of 10**9 ioctls a tuple of 10**9 steps before any check.

#: Longest cost of one operation, seconds (~31 years). The profiles' costs are
#: µs to seconds (the longest, a VM boot, ~1 s; a fit's range ends at 22.5 s);
#: an unseen direction moves a cost by e^±span_log with span_log ≤ ~16 (the
#: fits' bounds), and a what-if must not fail on that. Any finite bound keeps
#: the model's sums finite; this one is far past every real operation.
MAX_COST_S = 1e9
#: Largest memory amount, MiB (64 TiB: what x86-64's 46-bit physical
#: addresses reach); and the same in GiB for a host.
MAX_MEMORY_MIB = 64 * 1024 * 1024
MAX_MEMORY_GIB = 64 * 1024.0
#: CPUs of a host: Linux's NR_CPUS is at most 8 192 (x86-64 MAXSMP).
MAX_CORES = 8_192
#: Hardware threads per core: 8 on POWER8-10 (SMT8), the most of any CPU.
MAX_THREADS_PER_CORE = 8
#: Memory bandwidth of a node, GiB/s: HBM3e parts reach ~5 000 (per GPU);
#: ten times that. Zeroing rate of one core, GiB/s: the same bound.
MAX_BANDWIDTH_GIB_S = 50_000.0
#: Slowest of them, GiB/s (1 MiB/s, slower than any DRAM): a rate of 1e-308
#: made zeroing a guest take forever (a DeadlockError traceback).
MIN_BANDWIDTH_GIB_S = 1.0 / 1024
#: Least vCPUs of a sandbox (CPU quota in cores): cgroup v2's cpu.max takes a
#: quota of at least 1 000 µs per period of at most 1 s.
MIN_VCPUS = 0.001
#: VFs of an SR-IOV NIC. Seed 001 §1: the newest NICs (CX-7, Intel IPU)
#: announce 1K VFs; its profile's E810 has 256. FastIOV's per-VF devset locks
#: make its program grow as VFs²: 2 048 compile in 4.5 s, 4 096 in 18 s,
#: 10 000 took 84 s and 2.3 GB.
MAX_NIC_VFS = 2_048
#: Operations a sandbox repeats that a profile counts (a tap's ioctls, the
#: kworkers' RTNL ops): fitted values are under 20 (traces/data/plan/local.yaml:
#: 19 ioctls); each is a step in every sandbox's plan.
MAX_OPS_PER_SANDBOX = 1_000
#: How far an unseen direction reaches, in logs: the fits' bounds give ~16 at
#: most (the recorded plans: 6.2); e^50 is still a finite factor.
MAX_SPAN_LOG = 50.0

Seconds = Annotated[float, Field(ge=0.0, le=MAX_COST_S, allow_inf_nan=False)]
PositiveSeconds = Annotated[float, Field(gt=0.0, le=MAX_COST_S, allow_inf_nan=False)]
MiB = Annotated[float, Field(ge=0.0, le=MAX_MEMORY_MIB, allow_inf_nan=False)]
Bandwidth = Annotated[
    float, Field(ge=MIN_BANDWIDTH_GIB_S, le=MAX_BANDWIDTH_GIB_S, allow_inf_nan=False)
]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class HostSpec(_Frozen):
    """The node: cores the boot storm shares, memory, memory bandwidth, and the
    vCPUs (CPU quota, in cores) each sandbox got in the paper's runs."""

    cores: Annotated[int, Field(ge=1, le=MAX_CORES)]
    memory_gib: Annotated[float, Field(ge=1 / 1024, le=MAX_MEMORY_GIB, allow_inf_nan=False)]
    memory_bandwidth_gib_s: Bandwidth
    zero_gib_s_per_core: Bandwidth
    sandbox_vcpus: Annotated[float, Field(ge=MIN_VCPUS, le=MAX_CORES, allow_inf_nan=False)] = 1.0
    threads_per_core: Annotated[int, Field(ge=1, le=MAX_THREADS_PER_CORE)] | None = None
    """Hardware threads per physical core (2 with hyper-threading): ``cores``
    counts the CPUs the scheduler sees, threads included. ``None``: one."""
    smt_yield: Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)] | None = None
    """Throughput a busy sibling thread adds to a core, as a fraction of one
    thread's: siblings share the core's execution units and caches."""

    @property
    def core_work(self) -> float:
        """Threads' worth of work one physical core does with all its threads
        busy: ``1 + smt_yield × (threads - 1)`` (1 without SMT)."""
        return 1.0 + (self.smt_yield or 0.0) * ((self.threads_per_core or 1) - 1)

    def capacity_cores(self, cpus: int) -> float:
        """Core-equivalents of work ``cpus`` scheduler CPUs give when all are busy.

        A storm keeps more tasks runnable than there are CPUs, so every
        sibling is busy and a core gives :attr:`core_work` threads' worth of
        work, not ``threads``.
        """
        threads = self.threads_per_core or 1
        if threads == 1:
            return float(cpus)
        return cpus / threads * self.core_work


class CostTable(_Frozen):
    """Per-operation costs. ``*_cpu_s`` and ``*_hold_s`` are core-seconds of
    CPU work (a hold is CPU work done while the lock is held); ``*_s`` alone
    is off-CPU waiting."""

    # Daemons and user space (off-CPU round trips).
    containerd_rpc_s: Seconds
    ipam_s: Seconds
    ovsdb_txn_s: Seconds
    ovs_port_add_s: Seconds
    ovs_flow_mod_s: Seconds
    ovs_qos_s: Seconds
    # Every change to OVS's database makes vswitchd reconfigure, and send the
    # tc configuration of every QoS rule on the bridge again: per rule there.
    ovs_qos_resend_s: Seconds = 0.0
    # The part of ovs_qos_resend_s the kernel spends under RTNL (the qdisc and
    # class messages), per rule: one RTNL hold per reconfiguration.
    ovs_qos_resend_rtnl_s: Seconds = 0.0
    # What every kernel-netdev port on the bridge, QoS or not, adds to each
    # of vswitchd's reconfigurations (one per database change): off RTNL.
    ovs_reconfigure_per_port_s: Seconds = 0.0
    ovs_dpdk_qos_s: Seconds
    pool_fetch_s: Seconds
    # The OpenFlow client a CNI runs per flow (ovs-ofctl: start, connect,
    # send), CPU on the sandbox's side; vswitchd's part is ovs_flow_mod_s.
    ovs_ofctl_cpu_s: Seconds = 0.0
    # RTNL-held kernel work, by kind of netlink/ioctl operation.
    rtnl_create_hold_s: dict[str, PositiveSeconds]
    rtnl_link_hold_s: PositiveSeconds
    rcu_grace_s: Seconds
    rtnl_tc_hold_s: PositiveSeconds
    rtnl_small_hold_s: PositiveSeconds
    netprio_hold_s: PositiveSeconds
    netprio_per_netdev_s: Seconds
    rtnl_spin_s: Seconds
    mutex_wake_s: Seconds
    # cgroup_mutex's own hand-over (benchmarks/bench_cgroup_lockstep.py);
    # 0 = as mutex_wake_s.
    cgroup_mutex_wake_s: Seconds = 0.0
    # Namespaces and cgroups.
    netns_create_cpu_s: Seconds
    cgroup_mkdir_cpu_s: Seconds
    cgroup_attach_cpu_s: Seconds
    css_set_hold_s: Seconds
    # eBPF (recompiled per sandbox, verified under a global mutex).
    bpf_compile_cpu_s: Seconds
    bpf_verify_hold_s: Seconds
    # The microVM.
    vm_boot_cpu_s: Seconds
    vm_boot_sleep_s: Seconds
    vhost_user_setup_s: Seconds
    virtiofs_cpu_s: Seconds = 0.0
    virtiofs_per_sandbox_s: Seconds = 0.0
    virtiofs_s: Seconds = 0.0
    # Guest memory written during boot, zeroed as it faults in when guest
    # memory is allocated lazily: what the VMM loads (firmware, kernel), what
    # the booting kernel touches, and its memmap (a fraction of guest memory).
    vmm_loaded_mib: MiB = 0.0
    guest_boot_touch_mib: MiB = 0.0
    guest_memmap_fraction: Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)] = 0.0
    # Memory cost of one pre-created device, by pool kind.
    pool_device_mib: dict[str, MiB]

    @model_validator(mode="after")
    def _resend_rtnl_is_part_of_resend(self) -> CostTable:
        rtnl_s, resend_s = self.ovs_qos_resend_rtnl_s, self.ovs_qos_resend_s
        if rtnl_s > resend_s:
            raise ValueError(
                "`ovs_qos_resend_rtnl_s <= ovs_qos_resend_s` must hold (the RTNL part of a "
                f"re-sent rule is part of it), but got ({rtnl_s=}, {resend_s=})"
            )
        return self


class SriovCostTable(_Frozen):
    """SR-IOV passthrough on the node: the NIC, DMA mapping and the VFIO devset
    (seed 001 §3). ``*_cpu_s`` is CPU work, ``*_s`` alone off-CPU waiting."""

    nic_vfs: Annotated[int, Field(ge=1, le=MAX_NIC_VFS)]
    hugepages: bool
    # The CNI configures the VF (VLAN, rate) through the PF: the NIC's admin
    # queue answers while the caller holds RTNL.
    vf_config_pf_s: Seconds
    # DMA mapping: page retrieving per page (a 4 KiB page, or a hugepage),
    # then pinning and IOMMU mapping per GiB; zeroing is the host's rate.
    page_retrieve_cpu_s: Seconds
    pin_map_cpu_s_per_gib: Seconds
    image_mib: MiB
    # FastIOV's instant-zeroing list: regions the VMM writes before boot.
    instant_zero_mib: MiB
    # Opening a VF under the devset lock: CPU work, then waiting for the device.
    vfio_open_cpu_s: Seconds
    vfio_open_s: Seconds
    # VF driver init: guest-side work, and the PF's service of the VF's
    # mailbox requests (one service task per PF serves every VF, and its
    # work grows with the VFs already active on the PF).
    vf_guest_init_s: Seconds
    vf_pf_service_s: Seconds
    vf_pf_service_per_vf_s: Seconds


class TsorCostTable(_Frozen):
    """A TSoR node's per-pod costs (seed 003, :mod:`~bootstorm.models.tsor`).

    ``service_cores``: host cores the TSoR Service keeps (seed 003 §7: one);
    its work for a pod runs there, one request at a time, so the ``*_s`` times
    are waits of the pod, not its CPU. The paper gives none of them.
    """

    service_cores: Annotated[float, Field(ge=0.0, le=MAX_CORES, allow_inf_nan=False)]
    #: The Client Manager makes a pod's shared-memory region (SQ/CQ, ring buffers).
    client_register_s: Seconds
    #: ``tsor-dynamic-ip``: the wait for a pod's IP to reach every node.
    ip_propagation_s: Seconds
    #: ``tsor-qp-per-pod``: one RDMA QP connection set up for the pod (create,
    #: exchange metadata over TCP, change its states).
    qp_setup_s: Seconds
    #: ``tsor-qp-per-pod``: registering (pinning) the pod's own memory region.
    mr_register_s: Seconds


class TestbedCostTable(_Frozen):
    """The testbed's own sandboxes (``bootstorm testbed run``) on one host.

    Every operation is one Python call in the sandbox's thread (``py_op_cpu_s``
    under the GIL: pyroute2 building and parsing the message) and the kernel's
    work it asks for: ``*_hold_s`` is CPU work under the lock the operation
    takes (RTNL, cgroup_mutex), ``*_cpu_s`` work outside locks, ``*_s`` alone
    off-CPU waiting.
    """

    py_op_cpu_s: Seconds
    netns_create_cpu_s: Seconds
    rtnl_netns_hold_s: Seconds
    rtnl_veth_hold_s: Seconds
    rtnl_small_hold_s: Seconds
    rtnl_tap_hold_s: Seconds
    rtnl_tc_hold_s: Seconds
    rcu_grace_s: Seconds
    cgroup_mkdir_hold_s: Seconds
    cgroup_attach_hold_s: Seconds
    #: The grace period a ``cgroup.procs`` write waits inside cgroup_mutex
    #: when no other write came within one (``percpu_down_write`` of
    #: ``cgroup_threadgroup_rwsem``: its rcu_sync gone idle): an attach after
    #: 100 ms idle less one back to back, measured alone (``measure-ops``'
    #: ``cgroup_attach_idle``). None: not measured (every attach as one back
    #: to back, as profiles of before it).
    cgroup_attach_grace_s: Seconds | None = None
    vm_spawn_cpu_s: Seconds
    vm_tap_ioctls: Annotated[int, Field(ge=0, le=MAX_OPS_PER_SANDBOX)]
    # Work the kernel defers to kworkers per sandbox (linkwatch events,
    # addrconf DAD on the new links), each an RTNL hold like a small change.
    kworker_rtnl_ops: Annotated[int, Field(ge=0, le=MAX_OPS_PER_SANDBOX)] = 0
    vm_boot_cpu_s: Seconds
    vm_boot_s: Seconds
    # The CNI runtime (``testbed run --runtime cni``): processes instead of
    # the harness's Python calls. None in a profile fitted to thread storms
    # only: a what-if of the CNI runtime then needs a storm of it.
    #: One CNI plugin process: fork/exec, the Go runtime's start, its config
    #: and result JSON (CPU outside locks; its netlink requests are apart).
    cni_exec_cpu_s: Seconds | None = None
    #: host-local IPAM's allocation under its network's file lock (flock on
    #: the data dir: reserve, write the lease file, release).
    ipam_hold_s: Seconds | None = None
    #: host-local's allocation reads every lease file of its network (its
    #: disk store's ``GetByID``: no index by container) under the same file
    #: lock: this much more per lease held (``measure-ops``' ``ipam_add_held``
    #: against ``ipam_add``). A sandbox's lease stays until its DEL, at the
    #: testbed's teardown, so the sandbox ``i`` of a run finds ``i`` leases
    #: ahead of it. None: not measured (no growth, as profiles of before it).
    ipam_per_lease_s: Seconds | None = None
    #: The bridge plugin's enslave of the sandbox's host end (``master``,
    #: under RTNL) walks the bridge's ports (its features, its promiscuity,
    #: its id): this much longer per port on it (``measure-ops``'
    #: ``bridge_enslave_held`` against ``bridge_enslave``). The testbed keeps
    #: every sandbox's port to its teardown, so sandbox ``i`` finds ``i``.
    #: None: not measured (no growth, as profiles of before it).
    enslave_per_port_s: Seconds | None = None
    #: What a new sandbox link sends before the bridge has learnt anything
    #: (its duplicate-address probe, MLD reports, router solicitations) is
    #: flooded to every other port and received in each port's namespace:
    #: this many core-seconds per port, in softirq, after the start that
    #: made the link (``measure-ops``' bridge flood, its first 8 s). None:
    #: not measured (no flood, as profiles of before it).
    flood_per_port_cpu_s: Seconds | None = None
    #: A VM's stop at the end of its lifetime (``Scenario.lifetime_s``): the
    #: host's CPU over it, all of it (the VMM's and the shim's exits, the
    #: tap's unregister, the kernel's deferred frees), per VM, timed alone
    #: after each recorded storm (the trace header's ``vm_stops``). None: not
    #: measured (a stop then costs only its RTNL hold, priced from the tap's).
    vm_stop_cpu_s: Seconds | None = None
    #: One shim process's start (the interpreter, its job on stdin).
    shim_start_cpu_s: Seconds | None = None
    #: One ``tc`` process: fork/exec, its netlink socket and name lookups.
    tc_exec_cpu_s: Seconds | None = None
    #: The driver thread's Python work to spawn a process and read its
    #: answer (``subprocess``, under the GIL).
    spawn_cpu_s: Seconds | None = None
    #: Kernel memory one pooled device holds, MiB, by kind (the node agent's:
    #: netns, veth, tap, netns-veth): the drop of the memory available
    #: (MemAvailable with the per-CPU free lists) per device over a batch held
    #: (``bootstorm testbed measure-ops``). A kind not measured is absent, and
    #: a what-if prices its pool at 0 MiB.
    pool_device_mib: dict[str, MiB] = Field(default_factory=dict)
    #: One HTTP call to a node agent (a stage lease's acquire or release, a
    #: pool take), for storms whose sandboxes go through one
    #: (``Scenario.through_agent``): the caller's CPU, under the testbed's
    #: GIL, and the agent process's. None: not measured; such storms are
    #: simulated without the calls' cost.
    agent_call_cpu_s: Seconds | None = None
    agent_serve_cpu_s: Seconds | None = None
    #: A node agent's own CPU (its process's user + system, its CNI
    #: plugins' not) per plumbed namespace (``netns-veth``) its refill
    #: worker makes, and per one it removes, alone (``measure-ops``). None:
    #: not measured; a what-if then prices it as this project's host
    #: measured it (:data:`~.testbed.AGENT_MAKE_CPU_HERE_S`), with a caution.
    agent_make_cpu_s: Seconds | None = None
    agent_remove_cpu_s: Seconds | None = None
    #: The kernel's mutexes (RTNL, cgroup_mutex) hand over to a woken waiter
    #: that must first get a core: its turn among the node's runnable tasks,
    #: this much each (:class:`~bootstorm.simulator.LockSpec`'s ``dispatch_s``).
    #: None: straight to the next waiter, as profiles of before it.
    mutex_dispatch_s: Seconds | None = None
    #: The host's kernel does not preempt kernel code (``CONFIG_PREEMPT_NONE``):
    #: a mutex holder's work in the kernel is not time-sliced. None: not
    #: known (time-sliced, as profiles of before it).
    kernel_holders_pinned: bool | None = None

    @field_validator("pool_device_mib")
    @classmethod
    def _pooled_kinds(cls, value: dict[str, float]) -> dict[str, float]:
        unknown = sorted(set(value) - set(POOL_DEVICE_KINDS))
        if unknown:
            raise ValueError(
                f"unknown pool kind {unknown[0]!r}; a node pools {', '.join(POOL_DEVICE_KINDS)}"
            )
        return value


CostStatus = Literal["measured", "fitted", "unidentified"]


class CostEvidence(_Frozen):
    """What pins one cost of a profile down, and how far it could be.

    ``measured``: timed alone on the node (``bootstorm testbed measure-ops``),
    ``low``..``high`` its quartiles; ``fitted``: calibration storms see it
    (alone or with a measurement), ``low``..``high`` the fit's spread;
    ``unidentified``: nothing that was fitted or measured sees it (an
    assumption, or a direction of the costs no calibration storm moved),
    ``low``..``high`` its plausible range. ``by`` says which storms,
    measurement or assumption.
    """

    status: CostStatus
    # Shown, never simulated: a fit's spread may reach 1e22 (a cost the storms
    # do not pin down), so only finite.
    low: Annotated[float, Field(ge=0.0, allow_inf_nan=False)]
    high: Annotated[float, Field(ge=0.0, allow_inf_nan=False)]
    by: str

    @model_validator(mode="after")
    def _ordered(self) -> CostEvidence:
        if self.low > self.high:
            raise ValueError(f"`low <= high` must hold, but got low={self.low}, high={self.high}")
        return self


class UnseenDirection(_Frozen):
    """A direction in the costs that nothing fitted or measured sees.

    ``weights``: the direction, a unit vector over the costs' logarithms
    (a cost absent has weight 0). Along it the costs may move together by
    ``exp(±span_log × weight)`` each without the calibration storms noticing
    beyond the profile's error; ``by`` says why it is unseen.
    """

    weights: dict[str, Annotated[float, Field(ge=-1.0, le=1.0, allow_inf_nan=False)]]
    span_log: Annotated[float, Field(gt=0.0, le=MAX_SPAN_LOG, allow_inf_nan=False)]
    by: str

    def moved(self, values: Mapping[str, float], sign: float) -> dict[str, float]:
        """``values`` moved to one end of the direction (``sign`` ±1)."""
        import math

        return {
            path: values[path] * math.exp(sign * self.span_log * w)
            for path, w in self.weights.items()
            if path in values
        }

    def label(self) -> str:
        """The costs that make up the direction, largest first."""
        parts = sorted(self.weights.items(), key=lambda kv: -abs(kv[1]))
        return (
            " with ".join(f"{'' if w > 0 else '-'}{p}" for p, w in parts[:3] if abs(w) >= 0.2)
            or parts[0][0]
        )


class Identification(_Frozen):
    """Which costs of a profile were identified, and the profile's own error.

    ``error_rel``: how far the profile misses the storms it was fitted to
    (the largest relative error of a fitted headline row, floored at the
    run-to-run spread it was measured with): a what-if whose answer moves
    by more than this along an unidentified cost says so.
    """

    error_rel: Annotated[float, Field(gt=0.0, le=10.0, allow_inf_nan=False)]
    costs: dict[str, CostEvidence] = Field(default_factory=dict)
    unseen: list[UnseenDirection] = Field(default_factory=list)

    def unidentified(self) -> dict[str, CostEvidence]:
        return {p: e for p, e in self.costs.items() if e.status == "unidentified"}


#: Age past which a what-if on a fitted profile says so, seconds: on this
#: project's machine kind a host measured 30% slower from one day to the
#: next, and a day-old profile predicted the same storms 11-30% too fast
#: (docs/research-log.md, "Drift").
STALE_AFTER_S = 86_400.0


class FittedOn(_Frozen):
    """When and on what machine a profile's storms were recorded: what a
    what-if compares with the machine it runs on (:meth:`Profile.staleness`).
    Facts a trace did not record are None and compared with nothing."""

    #: When the newest storm of the fit was recorded (UTC).
    recorded_at: datetime | None = None
    kernel: Annotated[str, Field(min_length=1, max_length=256)]
    #: The preemption model and tick the kernel was built with.
    kernel_config: Annotated[str, Field(max_length=256)] | None = None
    cores: Annotated[int, Field(ge=1, le=MAX_CORES)]
    cpu_model: Annotated[str, Field(max_length=256)] | None = None
    hostname: Annotated[str, Field(max_length=256)] | None = None
    #: The testbed runtimes and variants its storms ran ("cni: cni-bridge").
    storms: tuple[Annotated[str, Field(max_length=256)], ...] = ()


class PredictionError(_Frozen):
    """How far the profile's predictions fall from the node's medians, on the
    storms it was fitted to: per headline metric, the root mean square of
    ``log(measured median / predicted)`` over ``storms`` storms (each the
    median of its runs against one simulated run, so the runs' spread and
    the seed's are in it). What a what-if's interval is made from
    (:func:`bootstorm.calibration.interval.prediction_interval`)."""

    storms: Annotated[int, Field(ge=2, le=10_000)]
    makespan_log_rms: Annotated[float, Field(ge=0.0, le=10.0, allow_inf_nan=False)]
    mean_log_rms: Annotated[float, Field(ge=0.0, le=10.0, allow_inf_nan=False)]
    p99_log_rms: Annotated[float, Field(ge=0.0, le=10.0, allow_inf_nan=False)]


class Profile(_Frozen):
    """A named, versioned set of host facts and operation costs with sources."""

    schema_version: int
    name: str
    description: str
    host: HostSpec
    service_cv: Annotated[float, Field(ge=0.0, le=2.0, allow_inf_nan=False)]
    service_family: Literal["lognormal", "gamma"] | None = None
    """The family service times vary in (:data:`~bootstorm.simulator.SERVICE_FAMILIES`);
    ``None``: lognormal. Given, it needs a source like a number."""
    costs: CostTable | None = None
    """The seed-000 operation costs; ``None`` in a data-plane-only profile or a
    testbed host's."""
    sriov: SriovCostTable | None = None
    testbed: TestbedCostTable | None = None
    """The testbed's own sandboxes, fitted to a recorded storm."""
    dataplane: DataplaneCostTable | None = None
    """The receive data plane (softirq chains); ``None`` if never measured."""
    tsor: TsorCostTable | None = None
    """TSoR's per-pod startup costs (seed 003); ``None``: no TSoR storm here."""
    rdma: RdmaCostTable | None = None
    """TSoR's RDMA data plane (seed 003's rows); ``None`` if never fitted."""
    sources: dict[str, str]
    identification: Identification | None = None
    """Per cost: measured, fitted or unidentified, with its range
    (:mod:`bootstorm.calibration.identify`). ``None``: derived from
    ``sources`` (an ``assumption:`` is unidentified)."""
    fitted_on: FittedOn | None = None
    """When and on what machine the storms it was fitted to ran; ``None``: a
    published profile (a paper's host), or one fitted before it was recorded."""
    prediction_error: PredictionError | None = None
    """How far it misses the storms it was fitted to, per headline metric:
    what a what-if's interval is made of. ``None``: a published profile
    (fitted to a paper's rows, not to runs of a node), or one fitted before
    this was recorded: its what-ifs carry no interval."""

    def staleness(
        self,
        *,
        now: datetime,
        kernel: str | None = None,
        kernel_config: str | None = None,
        cores: int | None = None,
        cpu_model: str | None = None,
    ) -> tuple[str, ...]:
        """Why a what-if on this fitted profile may not be this node's now,
        one line each: the profile is older than :data:`STALE_AFTER_S`, or
        the machine given (the one the what-if runs on) has another kernel,
        kernel build, CPU count or CPU model. Nothing for a published
        profile, or for a fact either side lacks."""
        fitted = self.fitted_on
        if fitted is None:
            return ()
        lines = []
        if fitted.recorded_at is not None:
            at = fitted.recorded_at
            at = at if at.tzinfo is not None else at.replace(tzinfo=UTC)
            age_s = (now - at).total_seconds()
            if age_s > STALE_AFTER_S:
                lines.append(
                    f"profile {self.name!r} was fitted to storms recorded "
                    f"{age_s / 86_400:.1f} days ago ({at:%Y-%m-%d %H:%M} UTC); this machine "
                    "kind drifted 30% in a day: refresh it (sudo bootstorm calibrate --refresh "
                    "PROFILE -o NEW) or refit it (sudo bootstorm calibrate --plan) "
                    "before acting on this answer"
                )
        for what, then, here in (
            ("kernel", fitted.kernel, kernel),
            ("kernel build", fitted.kernel_config, kernel_config),
            ("CPUs", fitted.cores, cores),
            ("CPU model", fitted.cpu_model, cpu_model),
        ):
            if then is not None and here is not None and then != here:
                lines.append(
                    f"profile {self.name!r} was fitted on {what} {then}, this machine has "
                    f"{here}: its costs are that machine's"
                )
        return tuple(lines)

    @model_validator(mode="after")
    def _every_number_has_a_source(self) -> Profile:
        if self.schema_version != PROFILE_SCHEMA_VERSION:
            raise ValueError(
                f"schema_version must be {PROFILE_SCHEMA_VERSION}, but got {self.schema_version}"
            )
        missing = sorted(set(self.numeric_paths()) - set(self.sources))
        if missing:
            raise ValueError(f"numbers without a source in `sources`: {_listed(missing)}")
        unknown = sorted(set(self.sources) - set(self.numeric_paths()))
        if unknown:
            raise ValueError(f"sources for unknown numbers: {_listed(unknown)}")
        if self.identification is not None:
            known = set(self.numeric_paths())
            stray = sorted(set(self.identification.costs) - known)
            for direction in self.identification.unseen:
                stray += sorted(set(direction.weights) - known)
            if stray:
                raise ValueError(f"identification of unknown numbers: {_listed(stray)}")
        return self

    def numeric_paths(self) -> list[str]:
        # Optional host numbers (SMT) need a source only where they are given.
        paths = [f"host.{k}" for k in HostSpec.model_fields if getattr(self.host, k) is not None]
        paths.append("service_cv")
        if self.service_family is not None:
            paths.append("service_family")
        if self.costs is not None:
            for k in CostTable.model_fields:
                value = getattr(self.costs, k)
                if isinstance(value, dict):
                    paths += [f"costs.{k}.{kind}" for kind in value]
                else:
                    paths.append(f"costs.{k}")
        if self.sriov is not None:
            paths += [f"sriov.{k}" for k in SriovCostTable.model_fields]
        if self.tsor is not None:
            paths += [f"tsor.{k}" for k in TsorCostTable.model_fields]
        if self.rdma is not None:
            paths += [f"rdma.{k}" for k in RdmaCostTable.model_fields]
        if self.testbed is not None:
            # The CNI runtime's costs need a source only where they are set;
            # a pooled device's memory only for the kinds measured.
            for k in TestbedCostTable.model_fields:
                value = getattr(self.testbed, k)
                if isinstance(value, dict):
                    paths += [f"testbed.{k}.{kind}" for kind in value]
                elif value is not None:
                    paths.append(f"testbed.{k}")
        if self.dataplane is not None:
            for k in DataplaneCostTable.model_fields:
                if k == "stages":
                    paths += [
                        f"dataplane.stages.{name}.{field}"
                        for name in self.dataplane.stages
                        for field in ("per_packet_s", "per_byte_s")
                    ]
                else:
                    paths.append(f"dataplane.{k}")
        return paths

    def boot_costs(self) -> CostTable:
        """The ``costs`` section, or a :class:`ConfigError` naming its absence."""
        if self.costs is None:
            raise ConfigError(
                f"profile: {self.name!r} has no `costs` section (the seed-000 operations): "
                "it describes another kind of node (its `testbed`, `sriov` or `dataplane` "
                "section) and cannot run this storm"
            )
        return self.costs

    def dataplane_costs(self) -> DataplaneCostTable:
        """The ``dataplane`` section, or a :class:`ConfigError` naming its absence."""
        if self.dataplane is None:
            raise ConfigError(
                f"profile {self.name!r} has no `dataplane` section (the softirq-chain "
                "costs that background traffic needs): add one (paper-004.yaml shows "
                "its shape) or use a profile that has one, such as paper-000"
            )
        return self.dataplane

    def with_values(self, values: Mapping[str, float], *, source: str | None = None) -> Profile:
        """A validated copy with numbers replaced by dotted path (``costs.vm_boot_cpu_s``,
        ``costs.rtnl_create_hold_s.veth``); ``source`` replaces their sources."""
        data = self.model_dump()
        for path, value in values.items():
            *parents, leaf = path.split(".")
            node = data
            for key in parents:
                if not isinstance(node, dict) or key not in node:
                    raise ConfigError(f"profile: no number at {path!r}")
                node = node[key]
            if not isinstance(node, dict) or leaf not in node:
                raise ConfigError(f"profile: no number at {path!r}")
            node[leaf] = value
            data["sources"][path] = source if source is not None else f"changed from {self.name}"
        try:
            return Profile(**data)
        except ValidationError as exc:
            raise ConfigError(format_validation_error(exc, prefix="profile: ")) from None

    def to_yaml(self) -> str:
        data = self.model_dump(mode="json", exclude_none=True)
        return str(yaml.safe_dump(data, sort_keys=False, width=100))

    @classmethod
    def from_yaml(cls, path: str | Path) -> Profile:
        """The profile in ``path``. Every compile reads its profile, so a file
        already read is not parsed again while its bytes are unchanged: callers
        share the frozen object and must not mutate its dicts."""
        return load_yaml_model_shared(cls, Path(path))


def _listed(paths: list[str], *, shown: int = 5) -> str:
    """The first ``shown`` paths and how many more: one readable line, where a
    profile cut short lists all its hundred numbers."""
    more = len(paths) - shown
    return ", ".join(paths[:shown]) + (f" and {more} more" if more > 0 else "")


def _builtin_dir() -> Any:
    return resources.files("bootstorm.models").joinpath("profiles")


@functools.lru_cache(maxsize=64)
def _builtin_ref(name: str) -> Any:
    """Built-in profile ``name`` as a file of the package (``None``: no such
    profile). The package's files stay where they are while it runs; every
    compile used to look the name up again (≈ 25 µs)."""
    ref = _builtin_dir().joinpath(f"{name}.yaml") if _BUILTIN_NAME.fullmatch(name) else None
    return ref if ref is not None and ref.is_file() else None


def available_profiles() -> list[str]:
    return sorted(
        p.name[: -len(".yaml")] for p in _builtin_dir().iterdir() if p.name.endswith(".yaml")
    )


_BUILTIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
"""A built-in profile's name: a file name in the package, never a path."""


def load_profile(name_or_path: str | Path) -> Profile:
    """A built-in profile by name (``paper-000``) or a profile YAML file by path."""
    path = Path(name_or_path)
    try:
        on_disk = path.suffix in (".yaml", ".yml") or path.exists()
    except (OSError, ValueError) as exc:
        # A name longer than the file system takes (ENAMETOOLONG), a NUL byte:
        # neither a path nor a built-in name.
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(
            f"profile: not a built-in profile nor a usable path ({reason}): "
            f"{_shown_name(name_or_path)}"
        ) from None
    if on_disk:
        return Profile.from_yaml(path)
    name = str(name_or_path)
    ref = _builtin_ref(name)
    if ref is None:
        raise ConfigError(
            f"profile: unknown profile {_shown_name(name_or_path)}; "
            f"built-in profiles are {', '.join(available_profiles())}, "
            "or give a path to a YAML file"
        )
    if isinstance(ref, Path):  # an installed package's file: its own path
        return Profile.from_yaml(ref)
    with resources.as_file(ref) as real:  # a zipped package's: a copy while read
        return Profile.from_yaml(real)


def _shown_name(name_or_path: str | Path) -> str:
    text = repr(str(name_or_path))
    return text if len(text) <= 80 else f"{text[:60]}…' ({len(str(name_or_path))} characters)"
