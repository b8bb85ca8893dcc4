"""What a testbed storm is asked to do (:class:`StormOptions`) and what it
returns (:class:`StormResult`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from bootstorm.models.tuned import TunedConfig
from bootstorm.traces import Trace

__all__ = ["STAGES", "StormOptions", "StormResult"]

STAGES = ("NetNS", "AddCNI", "Cgroup", "AttachIf", "StartVM")


class StormOptions(BaseModel):
    """What to start, and how.

    Parameters
    ----------
    sandboxes:
        Sandboxes started at once.
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
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    sandboxes: int = Field(default=8, ge=1, le=9999)
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
        """The CNI-like variant a trace header names (``ScenarioFacts.cni``)."""
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
