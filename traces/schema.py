"""The trace schema: typed, frozen records of one boot storm, measured or simulated.

A trace file is JSON Lines: the first line is a :class:`TraceHeader`, every
other line one record, told apart by its ``record`` field:

- ``span``    — :class:`StageSpan`, a sandbox inside one pipeline stage;
- ``lock``    — :class:`LockSpan`, a wait for (or a hold of) a kernel lock;
- ``softirq`` — :class:`SoftirqSpan`, a softirq handler run on one CPU;
- ``admit``   — :class:`AdmitSpan`, a wait at an admission gate (stage limit);
- ``arrival`` — :class:`Arrival`, when a sandbox was asked to start;
- ``pool_take`` — :class:`PoolTake`, a sandbox asking a pool for a device
  made before the storm: handed one or found the pool empty;
- ``pool_level`` — :class:`PoolLevelSample`, a node agent's pool level
  sampled while the storm ran (its pools refill between takes);
- ``exec``    — :class:`ExecSpan`, a process a sandbox ran (a CNI plugin
  call, its shim, the shim's ``tc`` calls, its VMM): the ``cni`` runtime.

Times are seconds on one clock named in the header (``monotonic``: Linux
CLOCK_MONOTONIC, the clock ``trace_clock=mono`` stamps kernel events with, so
stage spans and kernel spans line up without conversion). ``origin_s`` is the
storm's t=0 on that clock (the barrier release); exports subtract it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ._config import AppliedConfig

__all__ = [
    "MAX_ABS_SECONDS",
    "MAX_CPUS",
    "MAX_PID",
    "MAX_TRACE_SANDBOXES",
    "TRACE_SCHEMA_VERSION",
    "AdmitSpan",
    "Arrival",
    "ExecSpan",
    "HostFacts",
    "KernelTraceFacts",
    "LockSpan",
    "PoolLevelSample",
    "PoolTake",
    "Record",
    "ScenarioFacts",
    "SoftirqSpan",
    "StageSpan",
    "TraceHeader",
    "VmStops",
]

TRACE_SCHEMA_VERSION = 1

# Bounds on what a trace file may say, each with where it comes from: a trace
# is read from a file anyone can hand over, and its numbers size arrays and
# index them (calibration allocates per sandbox, exports per CPU).

#: Times, seconds: a monotonic clock reads the time since boot, a simulated
#: one the storm's; 10¹² s is 31 700 years, and keeps end - start finite.
MAX_ABS_SECONDS = 1e12
#: Sandboxes of one traced storm: the largest anything here writes is a
#: simulated day of 1 000 000 arrivals (benchmarks/bench_planner.py); the
#: testbed's storms are hundreds (traces/data: at most 150).
MAX_TRACE_SANDBOXES = 1_000_000
#: CPUs of a host: Linux's NR_CPUS is at most 8 192 (x86-64 MAXSMP).
MAX_CPUS = 8_192
#: Thread and process ids: Linux's PID_MAX_LIMIT is 2²² (4 194 304).
MAX_PID = 1 << 22
#: Counters (events seen, spans written, kB of buffer): a signed 64-bit int.
MAX_COUNT = 2**63 - 1

Seconds = Annotated[float, Field(ge=-MAX_ABS_SECONDS, le=MAX_ABS_SECONDS, allow_inf_nan=False)]
NonNegativeInt = Annotated[int, Field(ge=0, le=MAX_COUNT)]
PositiveInt = Annotated[int, Field(ge=1, le=MAX_COUNT)]
SandboxIndex = Annotated[int, Field(ge=0, lt=MAX_TRACE_SANDBOXES)]
Cpu = Annotated[int, Field(ge=0, lt=MAX_CPUS)]
Pid = Annotated[int, Field(ge=0, le=MAX_PID)]
Name = Annotated[str, Field(min_length=1)]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class _Span(_Frozen):
    start_s: Seconds
    end_s: Seconds

    @model_validator(mode="after")
    def _ordered(self) -> _Span:
        if self.end_s < self.start_s:
            raise ValueError(
                f"end_s must not be before start_s, but got start_s={self.start_s!r}, "
                f"end_s={self.end_s!r}"
            )
        return self

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


class HostFacts(_Frozen):
    """The machine a storm ran on."""

    kernel: str
    cores: Annotated[int, Field(ge=1, le=MAX_CPUS)]
    #: MiB: 64 TiB, what x86-64's 46-bit physical addresses reach.
    memory_mib: Annotated[int, Field(ge=1, le=64 * 1024 * 1024)]
    hostname: str | None = None
    #: The CPU's model name (/proc/cpuinfo); added within schema version 1.
    cpu_model: Annotated[str, Field(max_length=256)] | None = None
    #: The kernel's preemption model and tick ("PREEMPT_NONE HZ=250"), from
    #: its build config; added within schema version 1.
    kernel_config: Annotated[str, Field(max_length=256)] | None = None


class ScenarioFacts(_Frozen):
    """What was started: how many sandboxes, with which network variant and VM.

    ``cni`` names the CNI-like variant the testbed emulates, e.g.
    ``veth-peer-in-netns`` (peer created in the namespace),
    ``veth-peer-moved`` (created on the host, then moved), ``tap-endpoint``
    or ``macvtap-endpoint`` (the endpoint is the VMM's NIC); ``vm`` says how
    StartVM ran: ``qemu-microvm`` under KVM, ``process`` (the fallback: a
    process spawned into the namespace), or ``none``.

    ``runtime`` says how the testbed started each sandbox: ``threads`` (one
    thread doing the kernel operations in-process through netlink) or
    ``cni`` (one thread exec'ing real CNI plugins and one shim process per
    sandbox, as containerd and Kata do); then ``cni`` is ``cni-<plugin>``
    and ``+<plugin>`` per chained plugin in order (``cni-bridge+bandwidth``).

    ``through_agent``: the sandboxes took their permits (of the config's
    limited stages) and pooled devices from a node agent over HTTP; False:
    from the testbed's own in-process admission. Added within schema
    version 1: a file without it reads as the testbed's own.
    """

    sandboxes: Annotated[int, Field(ge=1, le=MAX_TRACE_SANDBOXES)]
    cni: Name
    runtime: Literal["threads", "cni"] = "threads"
    vm: Literal["qemu-microvm", "process", "none", "simulated"] = "none"
    vm_memory_mib: NonNegativeInt | None = None
    mem_prealloc: bool = False
    netprio_ifpriomap: bool = False
    pools: dict[str, NonNegativeInt] = Field(default_factory=dict)
    through_agent: bool = False
    #: Each VM was stopped this long after it came up, during the storm
    #: (``testbed run --lifetime-s``); None: the VMs stayed up to its end.
    #: Added within schema version 1 (a file of before says it in a note).
    lifetime_s: Annotated[float, Field(ge=0.0, le=MAX_ABS_SECONDS, allow_inf_nan=False)] | None = (
        None
    )


class VmStops(_Frozen):
    """Some of the VMs still up at the storm's end, stopped one at a time
    after it (each as its lifetime's end stops it: its shim or VMM exits, its
    tap goes), with the host's busy CPU meanwhile: the CPU a stop costs,
    timed alone. Added within schema version 1."""

    #: VMs stopped (and timed).
    vms: PositiveInt
    #: Core-seconds the host's CPUs were busy over the stops (/proc/stat).
    busy_core_s: Annotated[float, Field(ge=0.0, le=MAX_ABS_SECONDS, allow_inf_nan=False)]
    #: Seconds from the first stop's start to the last one's end.
    wall_s: Annotated[float, Field(ge=0.0, le=MAX_ABS_SECONDS, allow_inf_nan=False)]

    @property
    def per_vm_s(self) -> float:
        """Core-seconds of the host's CPU a stop costs (the mean over the stops)."""
        return self.busy_core_s / self.vms


class KernelTraceFacts(_Frozen):
    """How the kernel spans were collected, and what was left out."""

    events: tuple[str, ...]
    buffer_size_kb: PositiveInt | None = None
    #: Events the kernel dropped (ring buffer overrun), as tracefs reported.
    overrun: NonNegativeInt = 0
    #: Contention spans seen / written (fewer when sampled to keep files small).
    lock_spans_seen: NonNegativeInt = 0
    lock_spans_written: NonNegativeInt = 0
    softirq_spans_seen: NonNegativeInt = 0
    softirq_spans_written: NonNegativeInt = 0
    #: Whether events carry their process id (tracefs ``record-tgid``), so
    #: waits of multi-threaded processes join by process (``LockSpan.tgid``).
    record_tgid: bool = False


class TraceHeader(_Frozen):
    """The first line of every trace file."""

    record: Literal["header"] = "header"
    schema_version: Literal[1] = 1  # TRACE_SCHEMA_VERSION
    kind: Literal["bootstorm/trace"] = "bootstorm/trace"
    source: Literal["testbed", "simulator"]
    clock: Literal["monotonic", "simulated"] = "monotonic"
    #: The storm's t=0 on ``clock`` (the barrier release), seconds.
    origin_s: Seconds = 0.0
    stages: tuple[Name, ...] = ("NetNS", "AddCNI", "Cgroup", "AttachIf", "StartVM")
    host: HostFacts | None = None
    #: The tuned settings in force (stage limits, pools), or none: a
    #: :class:`~bootstorm.models.TunedConfig` is one.
    config: AppliedConfig | None = None
    scenario: ScenarioFacts
    kernel_trace: KernelTraceFacts | None = None
    #: Core-seconds the host's CPUs were busy from ``origin_s`` until the last
    #: sandbox finished (/proc/stat: all of the host's work, the storm's and
    #: any other): the storm's total CPU work on a quiet host.
    busy_core_s: Annotated[float, Field(ge=0.0, le=MAX_ABS_SECONDS, allow_inf_nan=False)] | None = (
        None
    )
    #: The VMs stopped and timed after the storm (:class:`VmStops`), or none.
    vm_stops: VmStops | None = None
    created_at: datetime | None = None
    #: Free-text facts a reader must know (fallbacks taken, sampling done).
    notes: tuple[str, ...] = ()

    @field_validator("config", mode="before")
    @classmethod
    def _as_applied(cls, value: object) -> object:
        # A TunedConfig (the models' subclass, its rules the same) is kept as
        # the AppliedConfig it is, so that a header compares equal to itself
        # read back from its file.
        if isinstance(value, AppliedConfig) and type(value) is not AppliedConfig:
            return AppliedConfig.model_validate(value.model_dump())
        return value


class StageSpan(_Span):
    """One sandbox inside one stage, on the thread ``tid`` that ran it."""

    record: Literal["span"] = "span"
    sandbox: SandboxIndex
    stage: Name
    tid: Pid | None = None


class LockSpan(_Span):
    """A wait for a kernel lock (contention_begin → end) or a hold of it.

    ``sandbox`` and ``stage`` are those of the thread that waited, when the
    thread id joins to a stage span, or of the process that waited (its
    ``tgid``, the pid of an :class:`ExecSpan`) inside one of its sandbox's
    stage spans; ``None`` when another task contended.
    """

    record: Literal["lock"] = "lock"
    lock: Name
    what: Literal["wait", "hold"] = "wait"
    sandbox: SandboxIndex | None = None
    stage: Name | None = None
    cpu: Cpu | None = None
    tid: Pid | None = None
    #: The waiter's process (thread group) id, when the collector recorded it.
    tgid: Pid | None = None
    #: Whether the waiter spun (spinlock, optimistic mutex spin) or slept.
    spin: bool | None = None


class SoftirqSpan(_Span):
    """One softirq handler run (softirq_entry → softirq_exit) on ``cpu``."""

    record: Literal["softirq"] = "softirq"
    vec: Name
    cpu: Cpu


class AdmitSpan(_Span):
    """A sandbox waiting at the admission gate of ``stage``."""

    record: Literal["admit"] = "admit"
    sandbox: SandboxIndex
    stage: Name


class Arrival(_Frozen):
    """Sandbox ``sandbox`` asked to start at ``t_s``."""

    record: Literal["arrival"] = "arrival"
    sandbox: SandboxIndex
    t_s: Seconds


class PoolTake(_Frozen):
    """Sandbox ``sandbox`` asked pool ``kind`` (``netns``, ``veth``, ``tap``,
    ``netns-veth``) for a device made before the storm; ``t_s`` is when the
    answer came. ``taken``: it was handed one (False: the pool was empty,
    so the sandbox made its own on its critical path). ``ready``: devices
    left ready in the pool after this take, and ``target``: the level the
    pool is kept at (made to, or refilled to), where the pool says; None
    where it does not (an agent that does not report them).

    Added within schema version 1: a file without one reads as it always
    did; a reader older than this kind refuses a file with one in one line
    (``record: unknown record kind``) rather than misread it.
    """

    record: Literal["pool_take"] = "pool_take"
    sandbox: SandboxIndex
    kind: Name
    t_s: Seconds
    taken: bool
    ready: NonNegativeInt | None = None
    target: NonNegativeInt | None = None


class PoolLevelSample(_Frozen):
    """A node agent's pool ``kind`` as sampled while the storm ran
    (``GET /v1/pools``): ``ready`` devices in it at ``t_s`` (when the
    answer came, on the trace's clock, as a :class:`PoolTake`'s),
    ``making`` more being made by its refill workers, and ``target`` the
    level it is kept at; None where the agent does not say.

    An agent's pools refill between takes, so that the takes alone do not
    tell the pool's level over the storm: these samples do, step-wise (a
    level holds from its sample until the next), and with them the idle
    devices' memory held over the run.

    Added within schema version 1, as :class:`PoolTake` was: a file without
    one reads as it always did; a reader older than this kind refuses a file
    with one in one line (``record: unknown record kind``) rather than
    misread it.
    """

    record: Literal["pool_level"] = "pool_level"
    kind: Name
    t_s: Seconds
    ready: NonNegativeInt
    making: NonNegativeInt | None = None
    target: NonNegativeInt | None = None


class ExecSpan(_Span):
    """A process sandbox ``sandbox`` ran, from its start to its exit.

    ``program`` is the executable's base name (``bridge``, ``tuning``,
    ``shim.py``, ``tc``, ``qemu-system-x86_64``); ``command`` what it was
    asked: a CNI command (``ADD``, ``CHECK``, ``DEL``), ``shim``, ``tc`` or
    ``vmm``. ``stage`` is the stage it ran in, ``pool`` for a CNI ADD done
    before the storm for a pooled namespace (``sandbox`` then the one that
    took it, ``None`` if none did), ``teardown`` after the storm. ``rc`` is
    the exit status (negative: killed by that signal; ``None``: unknown).
    """

    record: Literal["exec"] = "exec"
    sandbox: SandboxIndex | None = None
    stage: Name
    program: Name
    command: Name
    pid: Pid
    #: An exit status (0..255) or minus a signal's number.
    rc: Annotated[int, Field(ge=-255, le=255)] | None = None


Record = Annotated[
    StageSpan
    | LockSpan
    | SoftirqSpan
    | AdmitSpan
    | Arrival
    | ExecSpan
    | PoolTake
    | PoolLevelSample,
    Field(discriminator="record"),
]
