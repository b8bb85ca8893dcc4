"""The contract between the testbed driver and a runtime: :class:`StormRuntime`.

The driver (:mod:`.driver`) runs the storm: a run id and its names, one
thread per sandbox held at a barrier, each stage entered through admission
(:mod:`.admission`) and recorded as a span, the kernel collector, the trace.
What a sandbox's stages *do* is the runtime's: ``threads`` makes every
kernel object in-process through netlink (:mod:`.threads_runtime`), ``cni``
execs real CNI plugins and a shim per sandbox as containerd and Kata do
(:mod:`.cni_runtime`). A third (Firecracker, a real containerd) is a new
subclass registered by name (:func:`register_runtime`), not a branch in the
driver.

The hooks, in the order the driver calls them (every argument keyword-only,
except the one sandbox a stage body is given, as SimPy passes a process its
environment):

1. :meth:`StormRuntime.check_host` (a class method): before anything is made;
   raise a one-line :class:`~.TestbedError` if this host cannot run it.
2. ``__init__(context=...)``: the run's names, VM runner and notes; make
   nothing on the host yet.
3. :meth:`~StormRuntime.new_sandbox`, once per sandbox.
4. :meth:`~StormRuntime.prepare`: the run's network and pools; returns the
   admission the stages run under.
5. On each sandbox's thread: :meth:`~StormRuntime.setup_sandbox`, the
   barrier (or, on a schedule, the wait until the sandbox's start time),
   the five stage bodies in :data:`~.options.STAGES` order (each inside its
   admission gate), :meth:`~StormRuntime.end_sandbox`.
6. With ``StormOptions.lifetime_s``, on the driver's reaper thread once a
   sandbox's lifetime is over: :meth:`~StormRuntime.stop_vm`.
7. If the storm is interrupted: :meth:`~StormRuntime.interrupt`.
8. After a storm that ran: :meth:`~StormRuntime.finish` (the processes it
   ran, as exec spans), :meth:`~StormRuntime.kernel_owners`,
   :meth:`~StormRuntime.pools_made`.
9. Always, also after a failure or an interrupt:
   :meth:`~StormRuntime.teardown`.

What a runtime must record, clean up and report is checked by
:class:`bootstorm.validation.testbed.testing.StormRuntimeContract` against real storms.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Generic, TypeVar

from ...traces import AdmitSpan, ExecSpan, PoolTake, StageSpan
from ._leftovers import RunNames
from ._vm import VmRunner
from .admission import Admission
from .options import StormOptions

__all__ = [
    "Owner",
    "Sandbox",
    "StageBody",
    "Stamps",
    "StormContext",
    "StormRuntime",
    "admission_holder",
    "register_runtime",
    "runtime_class",
    "runtime_names",
]

#: A stage body's own span, when the time it spent is not its call's
#: (a shim's stamps): (start, end), CLOCK_MONOTONIC seconds.
Stamps = tuple[float, float]
#: Who a kernel wait belongs to, for a pid: (start_s, end_s, sandbox, stage).
Owner = tuple[float, float, int, str]


@dataclass(kw_only=True)
class Sandbox:
    """One sandbox as the driver records it; a runtime subclasses it with its
    own objects (its namespace, sockets, processes), which only it touches.

    The driver fills ``spans`` and ``admits`` around the stage bodies, sets
    ``began_s`` when the sandbox's first stage is asked for and ``error``
    when a body raises: a runtime leaves them alone. ``takes`` is the
    runtime's: each take from a pool, as it asked it
    (:meth:`._namespaced.NamespacedRuntime.took` records them).
    """

    index: int
    spans: list[StageSpan] = field(default_factory=list)
    admits: list[AdmitSpan] = field(default_factory=list)
    takes: list[PoolTake] = field(default_factory=list)
    #: CLOCK_MONOTONIC seconds its first stage was asked for (None: never).
    began_s: float | None = None
    error: str | None = None


def admission_holder(run: str, index: int) -> str:
    """Sandbox ``index`` of run ``run`` as admission calls name it (an
    agent's leases and pools): the driver's stage permits and a runtime's
    own calls (bootstorm-cni's, a pool's take) must agree on it."""
    return f"{run}/{index}"


S = TypeVar("S", bound=Sandbox)
StageBody = Callable[[S], "Stamps | None"]


@dataclass(frozen=True, kw_only=True)
class StormContext:
    """What the driver gives a runtime about its run."""

    options: StormOptions
    #: The run id, registered already: a sweep elsewhere spares what has its names.
    run: str
    names: RunNames
    #: How StartVM starts a VM (a QEMU microVM, or the fallback process).
    runner: VmRunner
    #: The trace header's notes, in order: a runtime appends what a reader
    #: of the trace must know (a fallback, a pool it could not use).
    notes: list[str]
    #: Set when the storm is being stopped (an interrupt).
    stop: threading.Event
    #: Whether the caller passed no admission: then the run's pools are the
    #: runtime's to make (a caller's admission, e.g. an agent's, has its own).
    own_admission: bool


class StormRuntime(abc.ABC, Generic[S]):
    """How one sandbox's five stages run on this host (see the module doc).

    A subclass sets :attr:`name` and implements the abstract hooks. The
    contract:

    - **Record**: the driver records a stage span per stage a sandbox
      completed (from the body's call, or the :data:`Stamps` it returns) and
      an admit span where it waited at a gated stage; a body that ran
      processes reports them from :meth:`finish` as exec spans.
    - **Clean up**: after :meth:`teardown` nothing with the run's names is
      left on the host (namespaces, links, cgroups, processes, CNI state),
      whether the storm succeeded, a sandbox failed or it was interrupted;
      what a sandbox took from a pool is removed like what it made.
    - **Report**: a stage body raises to fail its sandbox (the driver turns
      it into ``StormResult.failures``); it never fails the others.

    The runtime runs on many threads at once: stage bodies of different
    sandboxes run concurrently, so what they share (pools) goes through the
    admission, which is thread-safe.
    """

    #: The name ``StormOptions.runtime`` selects it by.
    name: ClassVar[str]

    @classmethod
    def check_host(cls, *, options: StormOptions) -> None:
        """Raise a one-line :class:`~.TestbedError` if this host cannot run
        ``options`` (a missing binary): called before anything is made, so a
        missing plugin is one line, not a half-made run. Default: nothing."""

    def __init__(self, *, context: StormContext) -> None:
        self.context = context
        self.options = context.options
        self.names = context.names
        self.runner = context.runner
        self.notes = context.notes

    @abc.abstractmethod
    def new_sandbox(self, *, index: int) -> S:
        """Sandbox ``index``'s record, with this runtime's objects unset."""

    @abc.abstractmethod
    def prepare(self, *, admission: Admission, cgroup_run: Path) -> Admission:
        """Before the storm, on the driver's thread: the run's network and
        pools (only when ``context.own_admission``). ``cgroup_run`` is the
        run's cgroup directory, made already. Returns the admission the
        stages run under: ``admission``, or one over the pools made here."""

    def setup_sandbox(self, *, sandbox: S) -> None:
        """On the sandbox's thread, before the barrier: what a sandbox holds
        before the storm (a daemon's socket). Raising fails the sandbox
        (``setup: ...``) without holding up the others. Default: nothing."""

    # -- the five stage bodies, in STAGES order ------------------------------------
    # Each runs on the sandbox's thread inside its admission gate; it returns
    # None (its span is its call) or the Stamps of the work it waited for.

    @abc.abstractmethod
    def netns(self, sandbox: S, /) -> Stamps | None:
        """NetNS: the sandbox's network namespace, made or taken from a pool."""

    @abc.abstractmethod
    def add_cni(self, sandbox: S, /) -> Stamps | None:
        """AddCNI: the sandbox's network endpoint inside its namespace."""

    @abc.abstractmethod
    def cgroup(self, sandbox: S, /) -> Stamps | None:
        """Cgroup: the sandbox's cgroup."""

    @abc.abstractmethod
    def attach_if(self, sandbox: S, /) -> Stamps | None:
        """AttachIf: the VM's NIC attached to the endpoint."""

    @abc.abstractmethod
    def start_vm(self, sandbox: S, /) -> Stamps | None:
        """StartVM: the VM started and up (its marker seen)."""

    def stage_bodies(self) -> tuple[StageBody[S], ...]:
        """The five bodies in :data:`~.options.STAGES` order."""
        return (self.netns, self.add_cni, self.cgroup, self.attach_if, self.start_vm)

    def end_sandbox(self, *, sandbox: S) -> None:
        """On the sandbox's thread after its stages, or after it failed:
        release what only its thread may hold (sockets). Must not raise."""

    def stop_vm(self, *, sandbox: S) -> None:
        """The sandbox's lifetime (``StormOptions.lifetime_s``) is over:
        stop its VM and what holds it, as its end would (the VMM, a shim, the
        VM's tap). Called once, only for a sandbox whose five stages all
        ran, never after :meth:`finish` or :meth:`teardown` began: on the
        driver's reaper thread at the end of the sandbox's lifetime, or on
        the driver's thread right after the storm for the stops it times
        (the trace header's ``vm_stops``); its namespace and devices stay for
        :meth:`teardown`. Must not raise. Default: nothing."""

    @abc.abstractmethod
    def interrupt(self, *, sandboxes: Sequence[S]) -> None:
        """The storm is being stopped (Ctrl-C): make every sandbox thread
        that waits on a process return at once (its reader gets EOF)."""

    def finish(self, *, sandboxes: Sequence[S]) -> tuple[ExecSpan, ...]:
        """After every sandbox thread ended, before the trace is written: stop
        what the sandboxes run and return the processes the run ran, in start
        order (the trace's exec spans). Default: none."""
        return ()

    def kernel_owners(
        self, *, sandboxes: Sequence[S], spans: Iterable[StageSpan], execs: Iterable[ExecSpan]
    ) -> Mapping[int, list[Owner]]:
        """Owners of kernel waits by pid, beyond the sandbox threads' own: a
        VMM's, a plugin's (see :func:`bootstorm.traces.kernel.join_contention`)."""
        return {}

    @abc.abstractmethod
    def pools_made(self) -> dict[str, int]:
        """Devices made for the run's pools, by kind (the trace header's
        ``pools``; kinds with none left out)."""

    @abc.abstractmethod
    def teardown(self, *, sandboxes: Sequence[S]) -> None:
        """Remove everything the runtime made or a sandbox took, whatever
        state the storm is in (signals are held off meanwhile). Each step runs
        whatever the previous one did; nothing raises. The driver removes the
        run's cgroup directory and work directory after it."""


_REGISTRY: dict[str, type[StormRuntime[Sandbox]]] = {}


def register_runtime(cls: type[StormRuntime[S]]) -> type[StormRuntime[S]]:
    """Class decorator: ``cls`` is the runtime ``StormOptions.runtime == cls.name`` picks."""
    name = cls.name
    if name in _REGISTRY and _REGISTRY[name] is not cls:
        raise ValueError(f"runtime: {name!r} is registered already ({_REGISTRY[name].__name__})")
    _REGISTRY[name] = cls  # type: ignore[assignment]
    return cls


def runtime_class(name: str) -> type[StormRuntime[Sandbox]]:
    """The runtime registered as ``name``; :class:`ValueError` naming the known ones."""
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY))
        raise ValueError(f"runtime: unknown runtime {name!r} (known: {known})") from None


def runtime_names() -> tuple[str, ...]:
    """The registered runtimes' names, sorted."""
    return tuple(sorted(_REGISTRY))
