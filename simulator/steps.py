"""Steps, stages and the compiler that flattens them into a :class:`Program`.

A sandbox's start is a sequence of stages; a stage is a sequence of steps:

- :class:`Cpu` — work on a core (core-seconds at full speed);
- :class:`Sleep` — off-CPU waiting (a daemon round trip, a device);
- :class:`Hold` — a lock-held section around more steps (nestable);
- :class:`Zero` — clearing memory, at a per-core rate under shared bandwidth;
- :class:`Pooled` — take a pre-created device if the pool has one, else create it;
- :class:`Refill` — a refill worker makes a device for a pool if it is below target;
- :class:`Retarget` — set a pool's target (a rate-following pool, per sandbox);
- :class:`Async` — start a branch the sandbox does not wait for;
- :class:`Wait` / :class:`Signal` — wait for another sandbox to get somewhere;
- :class:`Once` — the first sandbox to get here does something, the others wait for it.

:func:`compile_program` turns one plan per sandbox into the flat op arrays,
drawing the service-time jitter from the generator it is given.
"""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeAlias, overload

import numpy as np
import numpy.typing as npt
from numpy.lib.stride_tricks import as_strided

from .._params import Interval, NonEmpty, OneOf, Rules, format_problem
from ._memory import MemoryEstimate, check_fits
from .program import (
    GateSpec,
    LockSpec,
    MachineSpec,
    OpKind,
    PoolSpec,
    Program,
    ProgramError,
    SharedOps,
    check_rules,
    pool_target_array,
)

__all__ = [
    "SERVICE_FAMILIES",
    "Async",
    "Cpu",
    "CyclicPlans",
    "Hold",
    "Once",
    "Pooled",
    "Refill",
    "Retarget",
    "SandboxPlan",
    "Signal",
    "Sleep",
    "Stage",
    "Step",
    "Wait",
    "Zero",
    "compile_program",
]

#: Families the service-time factors can be drawn from, each with mean 1 and
#: the given coefficient of variation. Lognormal is the default; gamma has the
#: lighter right tail (skewness 2·cv against lognormal's 3·cv + cv³).
SERVICE_FAMILIES: tuple[str, ...] = ("lognormal", "gamma")


_NONNEGATIVE = Interval(float, 0)
"""A finite amount, 0 or more: seconds of work or waiting, bytes."""
_LARGEST = sys.float_info.max


def _plain(*amounts: float) -> bool:
    """Whether every amount is a float the rules take (finite, 0 or more; NaN
    fails both comparisons). Models build thousands of steps per compile (one
    set per tenant): this test is a fifth of the rules' cost, and the rules
    still judge, and word the refusal of, anything else (an int, NumPy's
    numbers, a bad value)."""
    return all(type(x) is float and 0.0 <= x <= _LARGEST for x in amounts)


@dataclass(frozen=True, slots=True)
class Cpu:
    """``work_s`` core-seconds of work; ``label`` names it in traces.

    ``growth_s`` adds that much work per sandbox ahead of this one in the
    program (sandbox ``i`` does ``work_s + i * growth_s``): the cost of walking
    a structure every earlier sandbox has added to. ``guest``: the work runs
    inside the microVM, on vCPUs held to the sandbox's CPU quota.
    """

    work_s: float
    label: str = ""
    growth_s: float = 0.0
    guest: bool = False

    __rules__: ClassVar[Rules] = Rules(work_s=_NONNEGATIVE, growth_s=_NONNEGATIVE)

    def __post_init__(self) -> None:
        if not _plain(self.work_s, self.growth_s):
            check_rules(self)


@dataclass(frozen=True, slots=True)
class Sleep:
    """``duration_s`` seconds off-CPU.

    ``growth_s``: as for :class:`Cpu`, that much longer per sandbox ahead of
    this one in the program (another process's work that walks what every
    earlier sandbox has added, such as a daemon's reconfiguration).
    """

    duration_s: float
    label: str = ""
    growth_s: float = 0.0

    __rules__: ClassVar[Rules] = Rules(duration_s=_NONNEGATIVE, growth_s=_NONNEGATIVE)

    def __post_init__(self) -> None:
        if not _plain(self.duration_s, self.growth_s):
            check_rules(self)


@dataclass(frozen=True, slots=True)
class Zero:
    """Clear ``n_bytes`` of memory."""

    n_bytes: float
    label: str = ""

    __rules__: ClassVar[Rules] = Rules(n_bytes=_NONNEGATIVE)

    def __post_init__(self) -> None:
        if not _plain(self.n_bytes):
            check_rules(self)


@dataclass(frozen=True, slots=True)
class Hold:
    """Run ``body`` while holding ``lock`` (``shared``: as a reader of an rw lock)."""

    lock: str
    body: tuple[Step, ...]
    shared: bool = False


@dataclass(frozen=True, slots=True)
class RcuSync:
    """Run ``body`` inside the write side of the rcu_sync that ``lock``
    serialises (put it inside a :class:`Hold` of ``lock``, as the kernel
    takes it under the mutex): entering it waits ``grace_s`` (a
    grace period) unless a writer left it less than ``grace_s`` ago, so
    writers that come one after another pay once and a lone one every time
    (the kernel's ``percpu_down_write``; cgroup's ``cgroup.procs`` write
    under cgroup_mutex)."""

    lock: str
    grace_s: float
    body: tuple[Step, ...] = ()

    __rules__: ClassVar[Rules] = Rules(grace_s=Interval(float, 0, unit="s"))

    def __post_init__(self) -> None:
        check_rules(self)


@dataclass(frozen=True, slots=True)
class Pooled:
    """Fetch a device from ``pool`` if one is left (``fetch``), else ``create`` it.

    ``create_next`` and ``fetch_next``: a device whose making goes on into
    the next stage (a namespace made in NetNS, then plumbed by the CNI ADD in
    AddCNI, under AddCNI's gate): the steps that stage starts with on each
    path, before its own. Such a step must be one of its stage's own steps
    (not inside a hold, another pooled step or a branch), in a stage that
    has a next one; the steps after it in its stage run on both paths.
    """

    pool: str
    create: tuple[Step, ...]
    fetch: tuple[Step, ...] = ()
    create_next: tuple[Step, ...] = ()
    fetch_next: tuple[Step, ...] = ()

    @property
    def goes_on(self) -> bool:
        """Whether either path goes on into the next stage."""
        return bool(self.create_next or self.fetch_next)


@dataclass(frozen=True, slots=True)
class Refill:
    """A refill worker's turn for ``pool``: if the pool's ready devices plus
    those being made are below its target, make one (``create``, through the
    same locks and CPU as a start's) and put it in the pool; else nothing.
    ``copies``: that many turns in a row (room for a target that rose by
    more than one at a start).

    ``remove``: what removing a ready device costs the worker. With it, a
    surplus (ready devices above a target that fell) stays in the pool, and
    may be taken, until a turn removes it: each turn first removes surplus
    devices one after another while there are any, then makes one if the
    pool is short, as the node agent's workers do; without it (None), the
    surplus goes at once, for nothing. A pool that any turn trims keeps its
    surplus until one does."""

    pool: str
    create: tuple[Step, ...]
    copies: int = 1
    remove: tuple[Step, ...] | None = None

    __rules__: ClassVar[Rules] = Rules(copies=Interval(int, 1))

    def __post_init__(self) -> None:
        check_rules(self)


@dataclass(frozen=True, slots=True)
class Retarget:
    """Set ``pool``'s target. The number of devices is per sandbox, not per
    plan (plans stay shared): :meth:`~.program.Program.with_pool_targets`
    writes it into the compiled program."""

    pool: str


@dataclass(frozen=True, slots=True)
class Async:
    """Start ``steps`` as a branch of kind ``kind`` and go on without waiting.

    The branch runs concurrently with the rest of its sandbox (its own stages,
    locks and CPU work count as the sandbox's). ``ready``: the sandbox is not
    ready for use until the branch is done (a NIC initialised in the
    background); otherwise the branch is housekeeping nobody waits for.
    ``gate``: the branch runs inside that admission gate (a pool's refill
    workers: at most as many branches at once as it has permits).
    """

    kind: str
    steps: tuple[Step, ...]
    ready: bool = False
    gate: str | None = None

    __rules__: ClassVar[Rules] = Rules(kind=NonEmpty())

    def __post_init__(self) -> None:
        check_rules(self)


@dataclass(frozen=True, slots=True)
class Wait:
    """Wait until signal gate ``gate`` has a permit, and take it (see :class:`Signal`)."""

    gate: str


@dataclass(frozen=True, slots=True)
class Signal:
    """Let ``count`` waiters of signal gate ``gate`` go on (now or when they come).

    Declare the gate with ``GateSpec(signal=True, permits=0)``; each of the
    sandboxes that depend on this one has a :class:`Wait` on it.
    """

    gate: str
    count: int = 1

    __rules__: ClassVar[Rules] = Rules(count=Interval(int, 0))

    def __post_init__(self) -> None:
        check_rules(self)


@dataclass(frozen=True, slots=True)
class Once:
    """The first of the sandboxes that share ``name`` to get here runs
    ``body``, lets the ``waiters`` others go on, then runs ``after``; each of
    the others waits here until then (a device every pod of a tenant needs,
    made by whichever pod comes first).

    Declare ``GateSpec(name=name, permits=0, signal=True)`` and
    ``PoolSpec(name=name, capacity=1, memory_mib_per_device=0, ticket=True)``.
    """

    name: str
    body: tuple[Step, ...]
    waiters: int
    after: tuple[Step, ...] = ()

    __rules__: ClassVar[Rules] = Rules(waiters=Interval(int, 0))

    def __post_init__(self) -> None:
        check_rules(self)


Step: TypeAlias = (
    Cpu | Sleep | Zero | Hold | RcuSync | Pooled | Refill | Retarget | Async | Wait | Signal | Once
)


@dataclass(frozen=True, slots=True)
class Stage:
    """A named stage; ``gate`` names the admission gate that guards it, if any.

    ``admit`` and ``release``: work a guarded stage does with its permit held
    but outside its own span, as a node times it: ``admit`` after the gate
    lets the sandbox in and before the span begins, ``release`` after the
    span ends and before the permit returns (a permit leased from a node
    agent over HTTP: the testbed times the stage from the lease's answer to
    the body's return, ``validation/testbed/driver.py``). Both need a gate."""

    name: str
    steps: tuple[Step, ...]
    gate: str | None = None
    admit: tuple[Step, ...] = ()
    release: tuple[Step, ...] = ()

    def __post_init__(self) -> None:
        if (self.admit or self.release) and self.gate is None:
            raise ProgramError(
                f"stage {self.name!r}: admit and release steps need a gate (the permit they "
                "are done under), but gate is None"
            )


SandboxPlan: TypeAlias = tuple[Stage, ...]

# One flattened op before jitter: (kind, arg, base amount, jittered?, growth per index).
_Op: TypeAlias = tuple[int, int, float, bool, float]


class _Flattener:
    def __init__(
        self,
        lock_ids: Mapping[str, int],
        gate_ids: Mapping[str, int],
        pool_ids: Mapping[str, int],
        *,
        signals: frozenset[str] = frozenset(),
        tickets: frozenset[str] = frozenset(),
    ) -> None:
        self.lock_ids = lock_ids
        self.gate_ids = gate_ids
        self.pool_ids = pool_ids
        self.signals = signals
        self.tickets = tickets
        self.stage_ids: dict[str, int] = {}
        self.branches: list[tuple[str, bool, list[_Op]]] = []
        self.in_branch = False

    def plan(self, plan: SandboxPlan) -> tuple[list[_Op], list[tuple[str, bool, list[_Op]]]]:
        """The sandbox's ops and its branches' (kind, ready, ops)."""
        self.branches = []
        ops: list[_Op] = []
        entered = False  # the stage was begun by the one before (a pooled step going on)
        for i, stage in enumerate(plan):
            if not entered:
                ops.extend(self._enter(stage))
            entered = False
            split = [j for j, s in enumerate(stage.steps) if isinstance(s, Pooled) and s.goes_on]
            if not split:
                self.steps(stage.steps, ops)
                ops.extend(self._leave(stage))
                continue
            if len(split) > 1 or i + 1 == len(plan):
                raise ProgramError(
                    f"stage {stage.name!r}: a pooled step that goes on into the next stage "
                    "must be its stage's only one, in a stage that has a next one"
                )
            j = split[0]
            pooled = stage.steps[j]
            assert isinstance(pooled, Pooled)
            self.steps(stage.steps[:j], ops)
            self._going_on(pooled, stage, plan[i + 1], stage.steps[j + 1 :], ops)
            entered = True
        return ops, self.branches

    def _enter(self, stage: Stage) -> list[_Op]:
        sid = self.stage_ids.setdefault(stage.name, len(self.stage_ids))
        ops: list[_Op] = []
        if stage.gate is not None:
            gid = self._lookup(self.gate_ids, stage.gate, "gate")
            if stage.gate in self.signals:
                raise ProgramError(
                    f"stage {stage.name!r} is guarded by {stage.gate!r}, a signal gate"
                )
            ops.append((OpKind.GATE_ENTER, gid, 0.0, False, 0.0))
            self.steps(stage.admit, ops)
        ops.append((OpKind.STAGE_BEGIN, sid, 0.0, False, 0.0))
        return ops

    def _leave(self, stage: Stage) -> list[_Op]:
        ops: list[_Op] = [(OpKind.STAGE_END, self.stage_ids[stage.name], 0.0, False, 0.0)]
        if stage.gate is not None:
            self.steps(stage.release, ops)
            ops.append((OpKind.GATE_EXIT, self.gate_ids[stage.gate], 0.0, False, 0.0))
        return ops

    def _going_on(
        self, step: Pooled, stage: Stage, following: Stage, rest: Sequence[Step], ops: list[_Op]
    ) -> None:
        """``step`` and the rest of ``stage`` into ``following``'s begin, on
        two paths: the make, or the fetch (the jump past the make). Each path
        crosses the stages' boundary (and gates) itself; they meet at
        ``following``'s own steps. The rest of ``stage`` is flattened once and
        laid on both paths, so a branch it starts is one branch, whichever
        path starts it."""
        pid = self._lookup(self.pool_ids, step.pool, "pool")
        tail: list[_Op] = []
        self.steps(rest, tail)
        crossing = [*tail, *self._leave(stage), *self._enter(following)]
        make: list[_Op] = []
        self.steps(step.create, make)
        make += crossing
        self.steps(step.create_next, make)
        fetch: list[_Op] = []
        self.steps(step.fetch, fetch)
        fetch += crossing
        self.steps(step.fetch_next, fetch)
        ops.append((OpKind.POOL_TRY, pid, float(len(make) + 2), False, 0.0))
        ops.extend(make)
        ops.append((OpKind.JUMP, 0, float(1 + len(fetch)), False, 0.0))
        ops.extend(fetch)

    def steps(self, steps: Sequence[Step], ops: list[_Op]) -> None:
        for step in steps:
            if isinstance(step, Cpu):
                kind = OpKind.GUEST_CPU if step.guest else OpKind.CPU
                ops.append((kind, 0, step.work_s, True, step.growth_s))
            elif isinstance(step, Sleep):
                ops.append((OpKind.SLEEP, 0, step.duration_s, True, step.growth_s))
            elif isinstance(step, Zero):
                ops.append((OpKind.ZERO, 0, step.n_bytes, False, 0.0))
            elif isinstance(step, Hold):
                lid = self._lookup(self.lock_ids, step.lock, "lock")
                kind = OpKind.ACQUIRE_SHARED if step.shared else OpKind.ACQUIRE
                ops.append((kind, lid, 0.0, False, 0.0))
                self.steps(step.body, ops)
                ops.append((OpKind.RELEASE, lid, 0.0, False, 0.0))
            elif isinstance(step, RcuSync):
                lid = self._lookup(self.lock_ids, step.lock, "lock")
                ops.append((OpKind.RCU_SYNC_ENTER, lid, step.grace_s, False, 0.0))
                self.steps(step.body, ops)
                ops.append((OpKind.RCU_SYNC_EXIT, lid, step.grace_s, False, 0.0))
            elif isinstance(step, Pooled):
                if step.goes_on:
                    raise ProgramError(
                        f"pool {step.pool!r}: a pooled step that goes on into the next stage "
                        "must be one of its stage's own steps (not in a hold, a pooled step "
                        "or a branch)"
                    )
                pid = self._lookup(self.pool_ids, step.pool, "pool")
                create: list[_Op] = []
                fetch: list[_Op] = []
                self.steps(step.create, create)
                self.steps(step.fetch, fetch)
                skip = 1 + len(create) + (1 if fetch else 0)
                ops.append((OpKind.POOL_TRY, pid, float(skip), False, 0.0))
                ops.extend(create)
                if fetch:
                    ops.append((OpKind.JUMP, 0, float(1 + len(fetch)), False, 0.0))
                    ops.extend(fetch)
            elif isinstance(step, Refill):
                pid = self._lookup(self.pool_ids, step.pool, "pool")
                make: list[_Op] = []
                self.steps(step.create, make)
                remove: list[_Op] = []
                if step.remove is not None:
                    self.steps(step.remove, remove)
                for _ in range(step.copies):
                    if step.remove is not None:
                        # A surplus first: remove a device and look again (BACK)
                        # until none is left, then on to the order.
                        ops.append((OpKind.POOL_TRIM, pid, float(len(remove) + 2), False, 0.0))
                        ops.extend(remove)
                        ops.append((OpKind.BACK, 0, float(len(remove) + 1), False, 0.0))
                    # Nothing to make: jump past this turn's work and its put.
                    ops.append((OpKind.POOL_ORDER, pid, float(len(make) + 2), False, 0.0))
                    ops.extend(make)
                    ops.append((OpKind.POOL_PUT, pid, 0.0, False, 0.0))
            elif isinstance(step, Retarget):
                pid = self._lookup(self.pool_ids, step.pool, "pool")
                ops.append((OpKind.POOL_TARGET, pid, 0.0, False, 0.0))
            elif isinstance(step, Wait):
                ops.append((OpKind.GATE_ENTER, self._signal(step.gate), 0.0, False, 0.0))
            elif isinstance(step, Signal):
                if step.count:  # one op, whatever the count: programs stay linear in sandboxes
                    gid = self._signal(step.gate)
                    ops.append((OpKind.GATE_EXIT, gid, float(step.count), False, 0.0))
            elif isinstance(step, Once):
                # Take the ticket and do it (the jump), or wait for whoever did.
                pid = self._lookup(self.pool_ids, step.name, "pool")
                if step.name not in self.tickets:
                    raise ProgramError(
                        f"Once needs a ticket pool, but {step.name!r} is a pool of devices"
                    )
                gid = self._signal(step.name)
                first: list[_Op] = []
                self.steps(step.body, first)
                if step.waiters:
                    first.append((OpKind.GATE_EXIT, gid, float(step.waiters), False, 0.0))
                self.steps(step.after, first)
                ops.append((OpKind.POOL_TRY, pid, 3.0, False, 0.0))
                ops.append((OpKind.GATE_ENTER, gid, 0.0, False, 0.0))
                ops.append((OpKind.JUMP, 0, float(1 + len(first)), False, 0.0))
                ops.extend(first)
            elif isinstance(step, Async):
                if self.in_branch:
                    raise ProgramError(f"a branch cannot start a branch, but got {step!r}")
                sid = self.stage_ids.setdefault(step.kind, len(self.stage_ids))
                body: list[_Op] = []
                gid = None
                if step.gate is not None:
                    gid = self._lookup(self.gate_ids, step.gate, "gate")
                    if step.gate in self.signals:
                        raise ProgramError(f"branch {step.kind!r} is guarded by a signal gate")
                    body.append((OpKind.GATE_ENTER, gid, 0.0, False, 0.0))
                body.append((OpKind.STAGE_BEGIN, sid, 0.0, False, 0.0))
                self.in_branch = True
                self.steps(step.steps, body)
                self.in_branch = False
                body.append((OpKind.STAGE_END, sid, 0.0, False, 0.0))
                if gid is not None:
                    body.append((OpKind.GATE_EXIT, gid, 0.0, False, 0.0))
                ops.append((OpKind.SPAWN, len(self.branches), 0.0, False, 0.0))
                self.branches.append((step.kind, step.ready, body))
            else:  # pragma: no cover - the type alias is closed
                raise ProgramError(f"unknown step {step!r}")

    def _signal(self, name: str) -> int:
        gid = self._lookup(self.gate_ids, name, "gate")
        if name not in self.signals:
            raise ProgramError(f"Wait/Signal need a signal gate, but {name!r} is an admission gate")
        return gid

    @staticmethod
    def _lookup(ids: Mapping[str, int], name: str, what: str) -> int:
        try:
            return ids[name]
        except KeyError:
            raise ProgramError(
                f"step refers to {what} {name!r}, but the program declares {sorted(ids)}"
            ) from None


class CyclicPlans(Sequence[SandboxPlan]):
    """``sandboxes`` plans taken from ``plans`` in turn: sandbox ``i`` gets
    ``plans[i % len(plans)]``, without a list of one plan per sandbox.

    What models hand :func:`compile_program` when their sandboxes share a few
    plans (one per tenant, say): it flattens each plan once and sizes the
    program before it allocates anything per sandbox, so that a storm too
    large for the machine is refused at once (:class:`ProgramTooLargeError`).
    """

    __slots__ = ("plans", "sandboxes")

    def __init__(self, plans: Sequence[SandboxPlan], *, sandboxes: int) -> None:
        for name, value, rule in (
            ("plans", plans, NonEmpty()),
            ("sandboxes", sandboxes, Interval(int, 0)),
        ):
            if not rule.holds(value):
                raise ProgramError(format_problem(name, rule.text(), value))
        self.plans = tuple(plans)
        self.sandboxes = sandboxes

    def __len__(self) -> int:
        return self.sandboxes

    @overload
    def __getitem__(self, index: int) -> SandboxPlan: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[SandboxPlan]: ...

    def __getitem__(self, index: int | slice) -> SandboxPlan | Sequence[SandboxPlan]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self.sandboxes))]
        if not -self.sandboxes <= index < self.sandboxes:
            raise IndexError(f"sandbox {index} of {self.sandboxes}")
        return self.plans[index % self.sandboxes % len(self.plans)]


_CHUNK_OPS = 1 << 18
"""Ops written (and jittered) at a time: the scatter's temporaries stay a few
MiB however many sandboxes share a template."""


def compile_program(
    plans: Sequence[SandboxPlan],
    *,
    machine: MachineSpec,
    locks: Sequence[LockSpec],
    gates: Sequence[GateSpec] = (),
    pools: Sequence[PoolSpec] = (),
    arrival_s: Sequence[float] | np.ndarray | None = None,
    service_cv: float = 0.0,
    service_family: str = "lognormal",
    rng: np.random.Generator | None = None,
) -> Program:
    """Flatten one plan per sandbox into a :class:`Program`.

    Every CPU and sleep amount is multiplied by an independent factor of mean
    1 and coefficient of variation ``service_cv``, drawn from ``rng`` out of
    ``service_family`` (:data:`SERVICE_FAMILIES`; memory sizes are not
    jittered). Plans that are equal are flattened once, and each flattened
    template is checked once (:meth:`Program.validate`'s rules); a program
    that would not fit in the memory available is refused before it is
    built (:class:`ProgramTooLargeError`, one line saying how much it needs).
    """
    return compile_programs(
        plans,
        machine=machine,
        locks=locks,
        gates=gates,
        pools=pools,
        arrival_s=arrival_s,
        service_cv=service_cv,
        service_family=service_family,
        rngs=(rng,),
    )[0]


def compile_programs(
    plans: Sequence[SandboxPlan],
    *,
    machine: MachineSpec,
    locks: Sequence[LockSpec],
    gates: Sequence[GateSpec] = (),
    pools: Sequence[PoolSpec] = (),
    arrival_s: Sequence[float] | np.ndarray | None = None,
    service_cv: float = 0.0,
    service_family: str = "lognormal",
    rngs: Sequence[np.random.Generator | None],
    pool_targets: Mapping[str, npt.ArrayLike] | None = None,
) -> list[Program]:
    """:func:`compile_program` once per generator of ``rngs``: the same plans
    with each generator's service-time draws (a fit's seeds). The plans are
    flattened, the program sized and its tasks walked once; each program is
    the one :func:`compile_program` gives with that generator, to the bit.

    ``pool_targets`` (pool name: one target per sandbox) sets the sandboxes'
    :class:`Retarget` amounts as they are written: the program
    :meth:`~.program.Program.with_pool_targets` would give, without the copy
    of every amount it makes (a rate-following day's 0.5 s and 400 MiB).
    """

    n = len(plans)
    if n < 1:
        raise ProgramError(f"a program needs at least one sandbox, but got {n=}")
    for name, value, rule in (
        ("service_cv", service_cv, _NONNEGATIVE),
        ("service_family", service_family, OneOf(SERVICE_FAMILIES)),
    ):
        if not rule.holds(value):
            raise ProgramError(format_problem(name, rule.text(), value))
    if not rngs:
        raise ProgramError("`rngs` must hold at least one generator")
    if service_cv > 0.0 and any(rng is None for rng in rngs):
        raise ProgramError("`rng` is required when `service_cv > 0`")
    if arrival_s is not None and len(arrival_s) != n:
        raise ProgramError(
            f"`arrival_s` must have one entry per sandbox ({n}), got ({len(arrival_s)},)"
        )

    def ids(specs: Sequence[LockSpec] | Sequence[GateSpec] | Sequence[PoolSpec]) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in specs:
            if s.name in out:
                raise ProgramError(f"name {s.name!r} declared twice")
            out[s.name] = len(out)
        return out

    templates = _Templates(
        _Flattener(
            ids(locks),
            ids(gates),
            ids(pools),
            signals=frozenset(g.name for g in gates if g.signal),
            tickets=frozenset(p.name for p in pools if p.ticket),
        )
    )
    which: np.ndarray | None
    if isinstance(plans, CyclicPlans):
        cycle = np.array([templates.of(plan) for plan in plans.plans], dtype=np.int64)
        # How many sandboxes take each place of the cycle, then each template.
        per_place = np.full(cycle.size, n // cycle.size, dtype=np.int64)
        per_place[: n % cycle.size] += 1
        counts = np.bincount(cycle, weights=per_place, minlength=templates.count)
        which = None  # built once the program is known to fit
    else:
        which = np.empty(n, dtype=np.int64)
        for i, plan in enumerate(plans):
            which[i] = templates.of(plan)
        counts = np.bincount(which, minlength=templates.count)
    at_zero = None
    given: np.ndarray | None = None
    if arrival_s is not None:
        given = np.asarray(arrival_s, dtype=np.float64)  # once: a day's tuple takes 50 ms
        at_zero = int(np.count_nonzero(~(given > 0.0))) if given.shape == (n,) else None
    check_fits(
        templates.estimate(
            counts.astype(np.int64),
            locks=len(locks),
            gates=len(gates),
            sandboxes=n,
            at_zero=at_zero,
        )
    )
    if which is None:
        assert isinstance(plans, CyclicPlans)
        # Repeats the cycle (np.resize, without its Python-level concatenation).
        which = cycle[np.arange(n) % cycle.size] if cycle.size > 1 else np.full(n, cycle[0])
    arrivals = np.zeros(n) if given is None else given
    if arrivals.shape != (n,):
        raise ProgramError(
            f"`arrival_s` must have one entry per sandbox ({n}), got {arrivals.shape}"
        )

    # Tasks: every sandbox, then every branch in sandbox order.
    parts = templates.parts
    main_part, branch_table, n_branches = templates.tables()
    n_branch = n_branches[which]
    spawn_base = np.zeros(n, dtype=np.int64)
    np.cumsum(n_branch[:-1], out=spawn_base[1:])
    branch_parent = np.repeat(np.arange(n, dtype=np.int64), n_branch)
    nth = np.arange(branch_parent.size, dtype=np.int64) - spawn_base[branch_parent]
    branch_part = branch_table[which[branch_parent], nth]
    task_part = np.concatenate([main_part[which], branch_part])
    del which, n_branch, nth
    part_kind = np.array([templates.part_kind.get(p, -1) for p in range(len(parts))], np.int64)
    branch_kind = part_kind[branch_part].astype(np.int32)
    # The templates (each part's ops once) and, per task, the amounts that
    # differ between the tasks of one part: jittered service times, growth
    # with the sandbox, a sandbox's own pool target (SharedOps).
    jittering = service_cv > 0.0
    part_offsets = np.zeros(len(parts) + 1, dtype=np.int64)
    np.cumsum([len(ops) for ops in parts], out=part_offsets[1:])
    total = int(part_offsets[-1])
    t_kind = np.empty(total, dtype=np.int8)
    t_arg = np.empty(total, dtype=np.int32)
    t_amount = np.empty(total, dtype=np.float64)
    t_slot = np.full(total, -1, dtype=np.int32)
    columns: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
    retargets: list[list[tuple[int, np.ndarray]]] = []
    checked: dict[str, np.ndarray] = {}

    def targets_of(name: str) -> np.ndarray:
        assert pool_targets is not None
        if name not in checked:
            checked[name] = pool_target_array(pool_targets, name, n)
        return checked[name]

    own_count = np.zeros(len(parts), dtype=np.int64)
    for part, ops in enumerate(parts):
        lo, hi = int(part_offsets[part]), int(part_offsets[part + 1])
        k = np.array([o[0] for o in ops], dtype=np.int8)
        base = np.array([o[2] for o in ops], dtype=np.float64)
        jit = np.array([o[3] for o in ops], dtype=bool) & jittering
        growth = np.array([o[4] for o in ops], dtype=np.float64)
        own = jit | (growth != 0.0) | (k == OpKind.POOL_TARGET)
        t_kind[lo:hi] = k
        t_arg[lo:hi] = np.array([o[1] for o in ops], dtype=np.int32)
        t_amount[lo:hi] = base
        t_slot[lo:hi][own] = np.arange(int(own.sum()), dtype=np.int32)
        own_count[part] = int(own.sum())
        columns.append((base[own], growth[own], jit[own], jit))
        if pool_targets is not None:
            # Each Retarget's column among the part's own amounts, and its targets.
            is_target = k[own] == OpKind.POOL_TARGET
            pool_of = t_arg[lo:hi][own]
            retargets.append(
                [
                    (int(col), targets_of(pools[int(pool_of[col])].name))
                    for col in np.flatnonzero(is_target)
                ]
            )
    own_offsets = np.zeros(task_part.size + 1, dtype=np.int64)
    np.cumsum(own_count[task_part], out=own_offsets[1:])
    # Fill per part, a slice of its tasks at a time (one jitter draw per
    # slice, in task order: the same stream as one draw for them all); tasks
    # grouped by part in one sort, not one scan per part.
    order = np.argsort(task_part, kind="stable")
    bounds = np.searchsorted(task_part[order], np.arange(len(parts) + 1))
    draws = sum(
        int(bounds[part + 1] - bounds[part]) * sum(1 for o in ops if o[3])
        for part, ops in enumerate(parts)
    )
    stage_names = tuple(sorted(templates.flat.stage_ids, key=templates.flat.stage_ids.__getitem__))
    branch_names = templates.branch_names
    # The programs share the template arrays and the per-task tables (a
    # program's arrays are read-only); each has its own amounts.
    programs: list[Program] = []
    for rng in rngs:
        own_amount = np.empty(int(own_offsets[-1]), dtype=np.float64)
        first_tasks: list[int] = []
        jitter = None
        if jittering:
            assert rng is not None
            jitter = _Jitter(rng, family=service_family, cv=service_cv, draws=draws)
        for part, ops in enumerate(parts):
            members = order[bounds[part] : bounds[part + 1]]
            if not ops or not members.size:
                continue
            first_tasks.append(int(members[0]))
            base, growth, jit, jit_all = columns[part]
            width = int(own_count[part])
            if not width:
                continue
            mine = retargets[part] if retargets else []
            if mine and int(members.max()) >= n:
                raise ProgramError("POOL_TARGET ops belong in sandboxes, not in branches")
            grows = np.flatnonzero(growth)  # adding 0 elsewhere would change nothing
            jittered = bool(jit.any())
            # Without growth, an amount is its base times its factor (one
            # rounding, as multiplying the base in place): written straight into
            # the task's amounts, a run of columns at a time, instead of the base
            # first and the factors through a gather and a scatter (a third of
            # a day's compile).
            runs = _runs(jit) if jittered and not grows.size else None
            rows_per_slice = max(1, _CHUNK_OPS // len(ops))
            for lo in range(0, members.size, rows_per_slice):
                rows = members[lo : lo + rows_per_slice]
                amounts, write_back = _own_rows(own_amount, own_offsets[rows], width)
                if runs is not None:
                    assert jitter is not None
                    factors = jitter.next((rows.size, int(jit_all.sum())))
                    for a, b, drawn, is_jit in runs:
                        if is_jit:
                            np.multiply(
                                base[a:b], factors[:, drawn : drawn + b - a], out=amounts[:, a:b]
                            )
                        else:
                            amounts[:, a:b] = base[a:b]
                    for col, targets in mine:
                        amounts[:, col] = targets[rows]
                    if write_back is not None:
                        write_back()
                    continue
                amounts[...] = base
                if grows.size:
                    owner = rows.copy()
                    branch = owner >= n
                    owner[branch] = branch_parent[owner[branch] - n]
                    amounts[:, grows] += owner[:, None].astype(np.float64) * growth[grows][None, :]
                if jittered:
                    assert jitter is not None
                    amounts[:, jit] *= jitter.next((rows.size, int(jit_all.sum())))
                for col, targets in mine:
                    amounts[:, col] = targets[rows]
                if write_back is not None:
                    write_back()
        program = Program(
            machine=machine,
            stage_names=stage_names,
            locks=tuple(locks),
            gates=tuple(gates),
            pools=tuple(pools),
            arrival_s=arrivals,
            ops=SharedOps(
                task_part=task_part.astype(np.int32),
                offsets=part_offsets,
                kind=t_kind,
                arg=t_arg,
                amount=t_amount,
                slot=t_slot,
                own_offsets=own_offsets,
                own_amount=own_amount,
            ),
            branch_names=tuple(sorted(branch_names, key=branch_names.__getitem__)),
            ready_branches=tuple(sorted(templates.ready)),
            branch_parent=branch_parent,
            branch_kind=branch_kind,
            spawn_base=spawn_base,
            # Every task runs its part's kinds, arguments and jumps: one walk per
            # part checks them all (the arrays are checked in full).
            validated=True,
        )
        if jitter is not None:
            jitter.done()
        if programs:
            # The same kinds, arguments and jumps as the first: its walks hold.
            program._validate_arrays()
        else:
            program._validate_templates(first_tasks)
        programs.append(program)
    del order, bounds, columns
    return programs


def _runs(mask: np.ndarray) -> list[tuple[int, int, int, bool]]:
    """``mask``'s runs of equal values: ``(start, end, trues before, value)``."""
    out = []
    start = drawn = 0
    for i in range(1, mask.size + 1):
        if i == mask.size or mask[i] != mask[start]:
            value = bool(mask[start])
            out.append((start, i, drawn, value))
            drawn += (i - start) if value else 0
            start = i
    return out


class _Jitter:
    """The service-time factors of one compile, in the order they are drawn.

    Drawn from ``rng`` a slice at a time (bounded temporaries), or, for a
    program of at most :data:`_MEMO_DRAWS` factors, all at once and kept:
    the next compile that starts from the same generator state with the same
    family, CV and count (a search compiles every trial from the same seed,
    a notebook its what-if again) takes the same numbers without drawing
    them, and leaves the generator where drawing them would have. One draw of
    ``n`` values is the stream of ``n`` draws of one value, so the factors
    are the same either way (``tests/simulator/test_program_scale.py``).
    """

    def __init__(self, rng: np.random.Generator, *, family: str, cv: float, draws: int) -> None:
        self._rng = rng
        self._family = family
        self._cv = cv
        self._all: np.ndarray | None = None
        self._end_state: Any = None
        self._pos = 0
        if draws > _MEMO_DRAWS:
            return
        key = (_frozen(rng.bit_generator.state), family, cv, draws)
        with _memo_lock:
            hit = _memo.get(key)
            if hit is not None:
                _memo.move_to_end(key)
        if hit is not None:
            self._all, self._end_state = hit
            return
        drawn = self._draw(draws)
        drawn.flags.writeable = False  # shared by every compile that hits it
        self._all = drawn
        with _memo_lock:
            _memo[key] = (drawn, rng.bit_generator.state)
            while len(_memo) > _MEMO_ENTRIES:
                _memo.popitem(last=False)

    def next(self, size: tuple[int, int]) -> np.ndarray:
        """The factors of the next slice, ``size`` (rows, jittered ops)."""
        if self._all is None:
            return self._draw(size)
        n = size[0] * size[1]
        out = self._all[self._pos : self._pos + n].reshape(size)
        self._pos += n
        return out

    def _draw(self, size: int | tuple[int, int]) -> np.ndarray:
        rng, cv = self._rng, self._cv
        if self._family == "gamma":
            shape = 1.0 / cv**2
            return rng.gamma(shape, 1.0 / shape, size=size)
        sigma = float(np.sqrt(np.log1p(cv**2)))
        return rng.lognormal(-0.5 * sigma * sigma, sigma, size=size)

    def done(self) -> None:
        """Leave the generator where drawing the factors would have."""
        if self._end_state is not None:
            self._rng.bit_generator.state = self._end_state


def _frozen(value: Any) -> Any:
    """A generator's state (nested dicts of ints and strings) as a hashable key."""
    if isinstance(value, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    if isinstance(value, np.ndarray):
        return (value.dtype.str, value.tobytes())
    return value


_MEMO_DRAWS = 1 << 18
"""Programs of at most this many factors (2 MiB; some 7 000 sandboxes of a
software CNI) are drawn at once and kept, :data:`_MEMO_ENTRIES` of them."""
_MEMO_ENTRIES = 4
_memo: OrderedDict[Any, tuple[np.ndarray, Any]] = OrderedDict()
_memo_lock = threading.Lock()


class _Templates:
    """The distinct plans of a program, flattened once each into *parts*: a
    template's own ops (its first part) and one part per branch it spawns."""

    def __init__(self, flat: _Flattener) -> None:
        self.flat = flat
        self.parts: list[list[_Op]] = []
        self.template_parts: list[list[int]] = []  # per template: part ids, sandbox's first
        self.branch_names: dict[str, int] = {}
        self.ready: set[str] = set()
        self.part_kind: dict[int, int] = {}  # branch part -> branch kind
        self._of_plan: dict[SandboxPlan, int] = {}
        # Models hand the same Stage objects to many sandboxes: look those up by
        # identity first, since hashing a plan walks every step of it.
        self._of_ids: dict[tuple[int, ...], int] = {}

    @property
    def count(self) -> int:
        return len(self.template_parts)

    def of(self, plan: SandboxPlan) -> int:
        """The template of ``plan``, flattened on first sight."""
        stage_ids = tuple(map(id, plan))
        t = self._of_ids.get(stage_ids)
        if t is None:
            t = self._of_plan.get(plan)
        if t is None:
            t = self._of_plan[plan] = len(self.template_parts)
            main, branches = self.flat.plan(plan)
            part_ids = [len(self.parts)]
            self.parts.append(main)
            for kind, is_ready, body in branches:
                self.part_kind[len(self.parts)] = self.branch_names.setdefault(
                    kind, len(self.branch_names)
                )
                if is_ready:
                    self.ready.add(kind)
                part_ids.append(len(self.parts))
                self.parts.append(body)
            self.template_parts.append(part_ids)
        self._of_ids[stage_ids] = t
        return t

    def tables(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per template: its main part, its branch parts (padded with -1) and
        how many branches it spawns."""
        main = np.array([ids[0] for ids in self.template_parts], dtype=np.int64)
        n_branches = np.array([len(ids) - 1 for ids in self.template_parts], dtype=np.int64)
        table = np.full((self.count, max(int(n_branches.max()), 1)), -1, dtype=np.int64)
        for t, ids in enumerate(self.template_parts):
            table[t, : len(ids) - 1] = ids[1:]
        return main, table, n_branches

    def estimate(
        self,
        counts: np.ndarray,
        *,
        locks: int,
        gates: int,
        sandboxes: int,
        at_zero: int | None = None,
    ) -> MemoryEstimate:
        """What the program takes when template ``t`` serves ``counts[t]``
        sandboxes, ``at_zero`` of them starting at time 0 (None: all)."""
        ops = branches = stage_ends = pool_ops = own = 0
        depth = 1
        for t, ids in enumerate(self.template_parts):
            times = int(counts[t])
            branches += times * (len(ids) - 1)
            for p in ids:
                part = self.parts[p]
                ops += times * len(part)
                # An upper bound of the amounts each task holds of its own
                # (jittered ones only if the storm jitters: see compile_program).
                own += times * sum(1 for o in part if o[3] or o[4] or o[0] in _OWN_KINDS)
                ends = sum(1 for o in part if o[0] == OpKind.STAGE_END)
                stage_ends += times * ends
                pool_ops += times * sum(1 for o in part if o[0] in _POOL_KINDS)
                if any(o[0] == OpKind.POOL_TRIM for o in part):
                    # A removal loops: at most the devices made (and the
                    # pools' first ones, a few hundred: left out of a bound).
                    pool_ops += times * sum(1 for o in part if o[0] == OpKind.POOL_PUT)
                depth = max(depth, _stage_depth(part))
        return MemoryEstimate.of(
            own_amounts=own,
            template_ops=sum(len(part) for part in self.parts),
            templates=len(self.parts),
            at_zero=at_zero,
            sandboxes=sandboxes,
            branches=branches,
            ops=ops,
            locks=locks,
            gates=gates,
            stages=len(self.flat.stage_ids),
            stage_ends=stage_ends,
            max_depth=depth,
            pool_ops=pool_ops,
        )


#: Ops that write the pools' log (one record each at most).
_POOL_KINDS = frozenset(
    (OpKind.POOL_TRY, OpKind.POOL_ORDER, OpKind.POOL_PUT, OpKind.POOL_TARGET, OpKind.POOL_TRIM)
)
#: Ops whose amount is always a task's own (a sandbox's pool target).
_OWN_KINDS = frozenset((OpKind.POOL_TARGET,))


def _stage_depth(ops: Sequence[_Op]) -> int:
    depth = deepest = 0
    for o in ops:
        if o[0] == OpKind.STAGE_BEGIN:
            depth += 1
            deepest = max(deepest, depth)
        elif o[0] == OpKind.STAGE_END:
            depth -= 1
    return deepest


def _own_rows(
    own_amount: np.ndarray, starts: np.ndarray, width: int
) -> tuple[np.ndarray, Callable[[], None] | None]:
    """The amounts ``starts[i] + j`` (``j < width``) as a ``(rows, width)``
    array to fill, and what puts it in place afterwards (``None``: a view,
    written in place, where the rows are evenly spaced)."""
    m = starts.size
    stride = int(starts[1] - starts[0]) if m > 1 else width
    if stride >= width and (m < 3 or bool((np.diff(starts) == stride).all())):
        view = as_strided(
            own_amount[int(starts[0]) :],
            shape=(m, width),
            strides=(stride * own_amount.itemsize, own_amount.itemsize),
            writeable=True,
        )
        return view, None
    index = starts[:, None] + np.arange(width)[None, :]
    amounts = np.empty(index.shape, dtype=own_amount.dtype)

    def write_back() -> None:
        own_amount[index] = amounts

    return amounts, write_back
