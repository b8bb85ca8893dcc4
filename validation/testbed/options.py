"""What a testbed storm is asked to do (:class:`StormOptions`) and what it
returns (:class:`StormResult`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..._params import format_problem
from ...models.tuned import TunedConfig
from ...traces import Trace

__all__ = [
    "CNI_POOLS",
    "MAX_BRIDGE_PORTS",
    "MAX_SCHEDULE_S",
    "STAGES",
    "StormOptions",
    "StormResult",
]

STAGES = ("NetNS", "AddCNI", "Cgroup", "AttachIf", "StartVM")
#: Pools the ``cni`` runtime makes: plain namespaces, and namespaces whose
#: CNI ADD was done before the storm.
CNI_POOLS = ("netns", "netns-veth")
#: Latest start of a schedule and longest lifetime, seconds: 366 days, the
#: longest published function trace (Azure's, 14 days) many times over; a
#: time past it is a unit mistake (milliseconds given as seconds), not a storm.
MAX_SCHEDULE_S = 366 * 86_400.0

#: One start time of a schedule: seconds after the storm's origin.
_StartTime = Annotated[float, Field(ge=0.0, le=MAX_SCHEDULE_S, allow_inf_nan=False)]


#: Ports one Linux bridge takes (``BR_MAX_PORTS`` is 1 024, port numbers 1..1023).
MAX_BRIDGE_PORTS = 1023


class StormOptions(BaseModel):
    """What to start, and how.

    Parameters
    ----------
    sandboxes:
        Sandboxes started: all at once, or one per time of ``arrival_s``.
    arrival_s:
        None: every sandbox starts at once, released by a barrier at the
        storm's origin. Else sandbox ``i`` starts ``arrival_s[i]`` seconds
        after the origin (one time per sandbox, sorted, finite, at least 0):
        a workload's schedule. Its trace's arrival is that time, late or
        not; startup counts from it.
    lifetime_s:
        How long a sandbox keeps its VM once StartVM ended (its VM up),
        after which the VM is stopped (the ``cni`` runtime's shim and VMM,
        the ``threads`` runtime's VMM and its tap): a long schedule then
        holds a bounded number of VMs. Its network devices stay until the
        end of the run. None: every VM stays until the storm ends.
    endpoint:
        What AddCNI makes for the sandbox: ``veth`` (a pair), ``tap`` (a
        persistent tap in the namespace) or ``macvtap`` (on the run's shared
        parent link, made on the host and moved in, keeping its host-unique
        ifindex and so its ``/dev/tapN``).
    peer:
        With a veth endpoint, ``in-netns``: the peer is created inside the
        namespace (one request); ``moved``: created on the host, then moved
        in (two).
    netprio_ifpriomap:
        Also write net_prio's ``ifpriomap`` in the Cgroup stage (needs a
        mounted v1 net_prio hierarchy; changes kernel-wide cgroup socket
        matching until reboot).
    vm:
        Boot a QEMU microVM in StartVM when qemu and /dev/kvm exist; else,
        or if False, the fallback process.
    vm_memory_mib, mem_prealloc:
        Guest memory, and whether QEMU zeroes it all up front.
    kernel_trace, softirqs, buffer_size_kb:
        Collect contention (and softirq) spans from a tracefs instance, with
        this per-CPU buffer (None: the collector's default).
    max_lock_spans:
        Keep at most this many kernel lock spans in the trace: spans of
        RTNL, cgroup_mutex and css_set_lock joined to a sandbox first, then
        the longest others (the header says how many were seen).
    config:
        A tuned config: its ``limits`` gate the stages, its ``pools.netns``
        namespaces (and ``pools.tap`` persistent taps for a tap endpoint,
        ``pools.veth`` pairs for a veth one) are created before the storm.
        With a veth endpoint, ``pools.netns-veth`` namespaces are made with
        their veth pair's peer inside (nothing to move at take time); a
        sandbox takes one first, and only when none is left the ``netns``
        and ``veth`` pools serve it (or it creates).
    settle_s:
        Wait up to this long for the host to be quiet before the storm (the
        kernel still tears down an earlier storm's namespaces for seconds).
    runtime:
        ``threads``: each sandbox's thread does the kernel operations itself
        (netlink in-process). ``cni``: as containerd and Kata do it — the
        thread execs real CNI plugins (ADD, CHECK, DEL through the CNI
        protocol) and one shim process per sandbox that makes the tap, runs
        ``tc`` and starts the VMM (:mod:`._cni_stages`). Its pools are
        ``netns`` and ``netns-veth`` (a namespace whose ADD was done before
        the storm).
    cni_bin_dir:
        Where the CNI plugins are; None: ``/usr/lib/cni``, else ``/opt/cni/bin``.
    cni_plugin:
        The main plugin (with host-local IPAM): ``bridge`` (on the run's own
        bridge), ``ptp``, ``macvlan`` or ``ipvlan`` (on a veth pair of the
        run's own as master; ipvlan needs the kernel module).
    cni_chain:
        Plugins chained after it, in order, as a conflist runs them:
        ``tuning`` (an MTU and a sysctl), ``bandwidth`` (ingress and egress
        shaping; needs a veth: bridge or ptp).
    cni_check:
        CHECK each sandbox's network after its ADD (in AddCNI).
    cni_wrapper:
        ``none``: the main plugin is exec'd itself. ``bootstorm-cni``: the
        network's first plugin is ``bootstorm-cni`` with the main plugin as
        its ``delegate``, as a node's conflist puts it in the startup path: it
        takes AddCNI's permit from the storm's node agent (needs one: ``--agent``)
        and the driver does not; the trace has the delegate's exec inside the
        plugin's (docs/agent.md, "In the node's startup path").
    cni_wrapper_every:
        With ``bootstorm-cni``: only every n-th sandbox (index 0, n, 2n, ...)
        goes through it; the others exec the main plugin themselves (the
        driver takes their AddCNI permit). 2 measures the plugin's cost
        against the plain plugin in the same storm, where storm-to-storm
        swings of the host cannot enter the ratio. 1: every sandbox.
    pool_sample_s:
        Through an admission whose pools refill during the storm (a node
        agent's: ``PoolSampling``), how often the driver samples every
        pool's level, seconds, from just before the first sandbox starts
        until the last is done (the trace's ``pool_level`` records). The
        testbed's own pools are not sampled: their takes tell their level.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    sandboxes: int = Field(default=8, ge=1, le=9999)
    arrival_s: tuple[_StartTime, ...] | None = None
    lifetime_s: float | None = Field(default=None, ge=0.0, le=MAX_SCHEDULE_S, allow_inf_nan=False)
    endpoint: Literal["veth", "tap", "macvtap"] = "veth"
    peer: Literal["in-netns", "moved"] = "in-netns"
    netprio_ifpriomap: bool = False
    vm: bool = True
    vm_memory_mib: int = Field(default=64, ge=16)
    mem_prealloc: bool = False
    kernel_trace: bool = True
    softirqs: bool = False
    buffer_size_kb: int | None = Field(default=None, ge=64)
    max_lock_spans: int | None = Field(default=None, ge=0)
    config: TunedConfig | None = None
    settle_s: float = Field(default=20.0, ge=0.0)
    runtime: Literal["threads", "cni"] = "threads"
    cni_bin_dir: Path | None = None
    cni_plugin: Literal["bridge", "ptp", "macvlan", "ipvlan"] = "bridge"
    cni_chain: tuple[Literal["tuning", "bandwidth"], ...] = ()
    cni_check: bool = False
    cni_wrapper: Literal["none", "bootstorm-cni"] = "none"
    cni_wrapper_every: int = Field(default=1, ge=1, le=9999)
    pool_sample_s: float = Field(default=0.2, ge=0.01, le=10.0, allow_inf_nan=False)

    @model_validator(mode="after")
    def _one_time_per_sandbox(self) -> StormOptions:
        times = self.arrival_s
        if times is None:
            return self
        if len(times) != self.sandboxes:
            # The count, not the times: a schedule may be thousands long.
            got = f"{len(times)} time{'' if len(times) == 1 else 's'}"
            raise ValueError(
                f"arrival_s: must hold one time per sandbox, {self.sandboxes} (got {got})"
            )
        for i in range(1, len(times)):
            if times[i] < times[i - 1]:
                raise ValueError(
                    format_problem(
                        f"arrival_s.{i}",
                        f"must not be before the time before it ({times[i - 1]!r}): "
                        "the times are sorted",
                        times[i],
                    )
                )
        return self

    @model_validator(mode="after")
    def _runtime_options(self) -> StormOptions:
        if self.runtime == "threads":
            cni: dict[str, tuple[object, object]] = {
                "cni_bin_dir": (self.cni_bin_dir, None),
                "cni_plugin": (self.cni_plugin, "bridge"),
                "cni_chain": (self.cni_chain, ()),
                "cni_check": (self.cni_check, False),
                "cni_wrapper": (self.cni_wrapper, "none"),
                "cni_wrapper_every": (self.cni_wrapper_every, 1),
            }
            for name, (value, default) in cni.items():
                if value != default:
                    raise ValueError(
                        f"{name}: {value!r} applies to runtime 'cni' only (runtime is 'threads')"
                    )
            return self
        threads_only: dict[str, tuple[object, object]] = {
            "endpoint": (self.endpoint, "veth"),
            "peer": (self.peer, "in-netns"),
            "netprio_ifpriomap": (self.netprio_ifpriomap, False),
        }
        for name, (value, default) in threads_only.items():
            if value != default:
                raise ValueError(
                    f"{name}: {value!r} applies to runtime 'threads' only (runtime is 'cni': "
                    "the CNI plugin makes the endpoint)"
                )
        if self.cni_wrapper == "none" and self.cni_wrapper_every != 1:
            raise ValueError(
                f"cni_wrapper_every: {self.cni_wrapper_every} picks the sandboxes that go "
                "through cni_wrapper, which is 'none'"
            )
        if len(set(self.cni_chain)) != len(self.cni_chain):
            raise ValueError(f"cni_chain: a plugin appears twice in {list(self.cni_chain)!r}")
        if "bandwidth" in self.cni_chain and self.cni_plugin not in ("bridge", "ptp"):
            raise ValueError(
                f"cni_chain: 'bandwidth' shapes the host end of a veth pair, which "
                f"cni_plugin {self.cni_plugin!r} does not make (use bridge or ptp)"
            )
        pools = self.config.pools if self.config is not None else {}
        for kind, n in pools.items():
            if n > 0 and kind not in CNI_POOLS:
                raise ValueError(
                    f"config.pools.{kind}: {n} does not apply to runtime 'cni' "
                    f"(its pools: {', '.join(CNI_POOLS)})"
                )
        if self.cni_plugin == "bridge":
            # Every sandbox's host end, and every namespace the run plumbs for
            # its own pool, is a port of the run's one bridge until the run
            # ends; the kernel refuses the 1 024th (BR_MAX_PORTS: "exchange full").
            ports = self.sandboxes + pools.get("netns-veth", 0)
            if ports > MAX_BRIDGE_PORTS:
                raise ValueError(
                    f"sandboxes: {self.sandboxes} sandboxes (and "
                    f"{pools.get('netns-veth', 0)} pooled namespaces) would be {ports} ports "
                    f"of the run's one bridge, more than the {MAX_BRIDGE_PORTS} Linux allows "
                    "(BR_MAX_PORTS); run fewer, or cni_plugin ptp"
                )
        return self

    @model_validator(mode="after")
    def _peer_of_a_veth(self) -> StormOptions:
        if self.peer != "in-netns" and self.endpoint != "veth":
            raise ValueError(
                f"peer: {self.peer!r} applies to the veth endpoint only "
                f"(endpoint is {self.endpoint!r})"
            )
        return self

    @property
    def variant(self) -> str:
        """The CNI-like variant a trace header names (``ScenarioFacts.cni``):
        ``cni-<plugin>`` and ``+<plugin>`` per chained one for the ``cni``
        runtime."""
        if self.runtime == "cni":
            # The wrapper is not in the variant: the pipeline the model prices is
            # the same plugins' (the plugin's own exec shows in the trace's execs).
            return "".join((f"cni-{self.cni_plugin}", *(f"+{p}" for p in self.cni_chain)))
        return f"veth-peer-{self.peer}" if self.endpoint == "veth" else f"{self.endpoint}-endpoint"

    @model_validator(mode="after")
    def _known_stages(self) -> StormOptions:
        for stage in self.config.limits if self.config is not None else {}:
            if stage not in STAGES:
                raise ValueError(
                    f"config.limits: unknown stage {stage!r}; the testbed's stages are "
                    f"{', '.join(STAGES)}"
                )
        return self


@dataclass(frozen=True)
class StormResult:
    """The recorded trace and the sandboxes that failed (``sandbox: reason``)."""

    trace: Trace
    failures: tuple[str, ...]
    run: str
