"""The flat, typed step program that every executor runs.

A scenario compiles once into a :class:`Program`: for each sandbox, an arrival
time and a sequence of *ops* (CPU work, sleep, lock acquire/release, memory
zeroing, stage boundaries, admission gates, pool fetches). The ops of all
sandboxes live in three parallel NumPy arrays in CSR layout (``offsets``), so
that a second, compiled executor can run the very same program.

The kernel knows nothing about networks: locks, gates and pools are numbered
resources with names, and stages are numbered spans with names.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from .._params import Check, Interval, NonEmpty, Rules
from ._errors import ProgramError

__all__ = [
    "GateSpec",
    "LockKind",
    "LockSpec",
    "MachineSpec",
    "OpKind",
    "PoolSpec",
    "Program",
    "ProgramError",
    "SharedOps",
    "check_rules",
]


def check_rules(obj: object) -> None:
    """:class:`ProgramError` naming the first of ``type(obj).__rules__`` that
    ``obj`` breaks, in :mod:`bootstorm._params`' one format (``field: rule (got
    value)``); a ProgramError, so that ``except ProgramError`` sees every
    refusal of the simulator's inputs."""
    problem = type(obj).__rules__.problem(obj)  # type: ignore[attr-defined]
    if problem is not None:
        raise ProgramError(problem)


_NONNEGATIVE = Interval(float, 0)
"""A finite amount, 0 or more (seconds, MiB)."""
_POSITIVE = Interval(float, 0, closed="right")


class OpKind(enum.IntEnum):
    """What one op does. ``arg`` and ``amount`` are read per kind."""

    CPU = 0
    """Run ``amount`` core-seconds of work on the shared cores."""
    SLEEP = 1
    """Sleep ``amount`` seconds off-CPU (waiting for a daemon or a device)."""
    ACQUIRE = 2
    """Take lock ``arg`` exclusively (for a reader-writer lock: as writer)."""
    ACQUIRE_SHARED = 3
    """Take reader-writer lock ``arg`` as a reader."""
    RELEASE = 4
    """Release lock ``arg`` (either mode)."""
    ZERO = 5
    """Zero ``amount`` bytes: CPU work at the per-core rate, capped by shared bandwidth."""
    STAGE_BEGIN = 6
    """Enter stage ``arg`` (for accounting and lock-grant priority)."""
    STAGE_END = 7
    """Leave stage ``arg``."""
    GATE_ENTER = 8
    """Wait for a permit of admission gate ``arg`` (a counting semaphore)."""
    GATE_EXIT = 9
    """Return the permit of gate ``arg`` (a signal gate: add ``amount`` permits, at least 1)."""
    POOL_TRY = 10
    """Take a device from pool ``arg`` if one is ready and jump ``amount`` ops ahead."""
    JUMP = 11
    """Jump ``amount`` ops ahead unconditionally."""
    SPAWN = 12
    """Start the sandbox's branch ``arg`` (its ``arg``-th) and go on without waiting."""
    GUEST_CPU = 13
    """Run ``amount`` core-seconds on the sandbox's vCPUs (within its CPU quota)."""
    POOL_ORDER = 14
    """Start making a device for pool ``arg`` if its ready devices plus those
    being made are below its target (being made +1); else jump ``amount`` ops
    ahead. A refill worker's decision (see :class:`~.steps.Refill`)."""
    POOL_PUT = 15
    """A device for pool ``arg`` is made: being made -1, ready +1; ready
    devices above the target are removed at once, unless the pool's refill
    turns remove them (it has ``POOL_TRIM`` ops)."""
    POOL_TARGET = 16
    """Set pool ``arg``'s target to ``amount`` devices (truncated); ready
    devices above it are removed at once, unless the pool's refill turns
    remove them (it has ``POOL_TRIM`` ops)."""
    POOL_TRIM = 17
    """If pool ``arg`` has more ready devices than its target, take one out
    (ready -1: a refill worker removes it, with the ops that follow); else
    jump ``amount`` ops ahead. A pool with these ops keeps a surplus until
    its workers remove it, one device at a time, as the node agent does."""
    BACK = 18
    """Jump ``amount`` ops back, to a ``POOL_TRIM``: a refill worker's next
    removal, until its pool has no surplus left (the only loop a program
    has; it ends because each pass removes a device)."""
    RCU_SYNC_ENTER = 19
    """Enter the write side of the rcu_sync that lock ``arg`` serialises (a
    percpu rwsem's, as cgroup_mutex serialises cgroup_threadgroup_rwsem's):
    if no writer is inside and none left it within the last ``amount``
    seconds (a grace period: its readers went back to their fast path),
    sleep ``amount`` (``rcu_sync_enter`` waits a grace period); else go on."""
    RCU_SYNC_EXIT = 20
    """Leave the rcu_sync of lock ``arg``: it stays entered for a grace
    period from now (``rcu_sync_exit``), so a writer that comes in that
    time waits for none."""


# Plain ints for the walks and the executors' loops: comparing with IntEnum
# members costs a method call per op.
_CPU = int(OpKind.CPU)
_SLEEP = int(OpKind.SLEEP)
_ACQUIRE = int(OpKind.ACQUIRE)
_ACQUIRE_SHARED = int(OpKind.ACQUIRE_SHARED)
_RELEASE = int(OpKind.RELEASE)
_ZERO = int(OpKind.ZERO)
_STAGE_BEGIN = int(OpKind.STAGE_BEGIN)
_STAGE_END = int(OpKind.STAGE_END)
_GATE_ENTER = int(OpKind.GATE_ENTER)
_GATE_EXIT = int(OpKind.GATE_EXIT)
_POOL_TRY = int(OpKind.POOL_TRY)
_JUMP = int(OpKind.JUMP)
_SPAWN = int(OpKind.SPAWN)
_GUEST_CPU = int(OpKind.GUEST_CPU)
_POOL_ORDER = int(OpKind.POOL_ORDER)
_POOL_PUT = int(OpKind.POOL_PUT)
_POOL_TARGET = int(OpKind.POOL_TARGET)
_POOL_TRIM = int(OpKind.POOL_TRIM)
_BACK = int(OpKind.BACK)
_RCU_SYNC_ENTER = int(OpKind.RCU_SYNC_ENTER)
_RCU_SYNC_EXIT = int(OpKind.RCU_SYNC_EXIT)
#: The ops that may jump ahead (their amount is the jump).
_JUMP_KINDS = (_POOL_TRY, _JUMP, _POOL_ORDER, _POOL_TRIM)


class LockKind(enum.IntEnum):
    MUTEX = 0
    """Sleeping lock; waiters sleep (optionally after spinning for a while)."""
    SPIN = 1
    """Spinlock; waiters keep a core busy until they get the lock."""
    RW = 2
    """Sleeping reader-writer lock; readers share it, a writer is exclusive."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LockSpec:
    """A lock and how it hands itself out.

    ``stage_priority`` maps stage name to grant priority (lower is served
    first; FIFO among equals); stages absent from it get priority 0, so an
    empty map is plain FIFO. ``spin_s`` is the
    longest a mutex waiter spins on a core before it sleeps (Linux mutexes spin
    optimistically while the owner runs); 0 disables spinning.

    ``wake_s`` chooses how a mutex is handed over. 0: straight to the next
    waiter in grant order (a fair hand-off). > 0: as Linux mutexes do without
    the hand-off flag: the release frees the lock and wakes the next waiter,
    who needs ``wake_s`` to run; a running task that asks in between takes the
    lock (it steals it), and a woken waiter that finds it taken sets the
    hand-off flag, so that the next release goes to it directly.

    ``dispatch_s`` > 0 hands over the same way, but the woken waiter must
    first get a core: it runs ``wake_s + dispatch_s * max(1, R / N)`` after
    the release, where ``R`` is the node's runnable jobs at that moment
    (background ones too) and ``N`` its cores: its turn in a round of ``R``
    tasks on ``N`` cores, ``dispatch_s`` each. On a busy node the lock then
    idles between holders unless a running task steals it, and the queue is
    made of hand-overs, as the kernel's is.

    ``holder_pinned``: the holder's CPU work is not time-sliced (a mutex held
    in a kernel built without preemption, ``CONFIG_PREEMPT_NONE``: kernel
    code runs until it sleeps or returns), so it runs in the pinned tier, as
    a spinlock holder's does; unlike one, it may sleep.
    """

    name: str
    kind: LockKind = LockKind.MUTEX
    stage_priority: tuple[tuple[str, int], ...] = ()
    spin_s: float = 0.0
    wake_s: float = 0.0
    dispatch_s: float = 0.0
    holder_pinned: bool = False

    __rules__: ClassVar[Rules] = Rules(
        name=NonEmpty(),
        spin_s=_NONNEGATIVE,
        wake_s=_NONNEGATIVE,
        dispatch_s=_NONNEGATIVE,
        checks=(
            Check(
                "dispatch_s",
                lambda lock: not lock.dispatch_s or lock.kind is LockKind.MUTEX,
                lambda lock: (
                    "must be 0 unless kind is MUTEX: only a mutex hands over through a "
                    f"wake-up (lock {lock.name!r} is {lock.kind.name})"
                ),
            ),
            Check(
                "holder_pinned",
                lambda lock: not lock.holder_pinned or lock.kind is LockKind.MUTEX,
                lambda lock: (
                    "must be false unless kind is MUTEX: a spinlock's holder is pinned "
                    f"already, an rw lock's readers are not (lock {lock.name!r} is "
                    f"{lock.kind.name})"
                ),
            ),
            Check(
                "wake_s",
                lambda lock: not lock.wake_s or lock.kind is LockKind.MUTEX,
                lambda lock: (
                    "must be 0 unless kind is MUTEX: only a mutex hands over through a "
                    f"wake-up (lock {lock.name!r} is {lock.kind.name})"
                ),
            ),
            Check(
                "spin_s",
                lambda lock: not lock.spin_s or lock.kind is LockKind.MUTEX,
                lambda lock: (
                    "must be 0 unless kind is MUTEX: only a mutex spins before sleeping "
                    f"(lock {lock.name!r} is {lock.kind.name})"
                ),
            ),
        ),
    )

    def __post_init__(self) -> None:
        check_rules(self)

    @property
    def pins_holder(self) -> bool:
        """Whether the holder's CPU work runs pinned (not time-sliced): a
        spinlock's always, a mutex's with ``holder_pinned``."""
        return self.kind is LockKind.SPIN or self.holder_pinned


@dataclass(frozen=True, kw_only=True, slots=True)
class GateSpec:
    """An admission gate: at most ``permits`` sandboxes inside at once.

    ``signal``: an event between sandboxes instead. It starts with
    ``permits`` (0: not yet happened); a waiter's entry takes one permit for
    good, and every exit adds one — made by the sandbox that signals, never
    by the waiters. So entries and exits need not pair up in one sandbox.
    """

    name: str
    permits: int
    signal: bool = False

    __rules__: ClassVar[Rules] = Rules(
        permits=Interval(int, 0),
        checks=(
            Check(
                "permits",
                lambda gate: gate.signal or gate.permits >= 1,
                lambda gate: f"must be >= 1 for an admission gate (gate {gate.name!r})",
            ),
        ),
    )

    def __post_init__(self) -> None:
        check_rules(self)


@dataclass(frozen=True, kw_only=True, slots=True)
class PoolSpec:
    """Devices made ahead of the starts; each costs ``memory_mib_per_device``.

    ``capacity`` devices are ready at time 0, and the target is ``capacity``
    until a ``POOL_TARGET`` op sets another. Refill work (``POOL_ORDER`` and
    ``POOL_PUT``, and ``POOL_TRIM`` where the workers remove a surplus, see
    :class:`~.steps.Refill`) keeps it there; without any, the pool is what
    was made before the storm.

    ``ticket``: not devices but the right to do something once (the first
    sandbox to try takes it, see :class:`~bootstorm.simulator.Once`); left
    out of the result's pools.
    """

    name: str
    capacity: int
    memory_mib_per_device: float
    ticket: bool = False

    __rules__: ClassVar[Rules] = Rules(
        capacity=Interval(int, 0),
        memory_mib_per_device=_NONNEGATIVE,
    )

    def __post_init__(self) -> None:
        check_rules(self)

    @property
    def memory_mib(self) -> float:
        return self.capacity * self.memory_mib_per_device


@dataclass(frozen=True, kw_only=True, slots=True)
class MachineSpec:
    """The node the program runs on.

    ``zero_bytes_per_core_s`` is how fast one core clears memory;
    ``memory_bandwidth_bytes_s`` caps all zeroing running at one moment;
    ``guest_cpu_quota`` is each sandbox's CPU quota in cores (its vCPUs):
    guest work never runs faster than that; ``reserved_cores`` is capacity
    the program never gets; ``background_jobs`` is other work on the node:
    that many always-runnable tasks share the cores.
    """

    cores: int
    zero_bytes_per_core_s: float = 10e9
    memory_bandwidth_bytes_s: float = 100e9
    guest_cpu_quota: float = 1.0
    reserved_cores: float = 0.0
    """Capacity taken by work that preempts the program's (softirqs of
    background traffic): the program shares ``cores - reserved_cores``."""
    background_jobs: float = 0.0
    """Other work on the node: always-runnable tasks that share the cores."""

    __rules__: ClassVar[Rules] = Rules(
        cores=Interval(int, 1),
        zero_bytes_per_core_s=_POSITIVE,
        memory_bandwidth_bytes_s=_POSITIVE,
        guest_cpu_quota=_POSITIVE,
        reserved_cores=_NONNEGATIVE,
        background_jobs=_NONNEGATIVE,
        checks=(
            Check(
                "reserved_cores",
                lambda m: m.reserved_cores < m.cores,
                lambda m: f"must be < cores={m.cores}",
            ),
        ),
    )

    def __post_init__(self) -> None:
        check_rules(self)


_F64 = npt.NDArray[np.float64]
_I32 = npt.NDArray[np.int32]
_I64 = npt.NDArray[np.int64]
_I8 = npt.NDArray[np.int8]
# Where a path walk stands: (pc, held locks, open stages, open gates, spawned).
_PathState = tuple[int, tuple[int, ...], tuple[int, ...], tuple[int, ...], frozenset[int]]

_CHUNK_OPS = 1 << 18
"""Ops :meth:`Program.validate` reads at a time: its temporaries (a few
arrays of 8 bytes per op) stay near 10 MiB whatever the program's size."""

# Odd 64-bit constants (from SplitMix64 and xxHash) that spread each field of
# an op over the whole digest; any odd constants would do, since a digest
# only groups tasks and the grouping is then checked op by op.
_MIX_KIND = np.uint64(0x9E3779B97F4A7C15)
_MIX_ARG = np.uint64(0xBF58476D1CE4E5B9)
_MIX_JUMP = np.uint64(0x94D049BB133111EB)
_MIX_POSITION = np.uint64(0xC2B2AE3D27D4EB4F)
_MIX_FINAL = np.uint64(0x165667B19E3779F9)
_MIX_LENGTH = np.uint64(0x27D4EB2F165667C5)
_MIX_SPAWNS = np.uint64(0x85EBCA77C2B2AE63)
_ONE = np.uint64(1)
_SHIFT = np.uint64(31)


def _jumps(kind: _I8, amount: _F64) -> _F64:
    """How far each op jumps as the executors read it (``int``, so truncated):
    the amount of a POOL_TRY, POOL_ORDER, POOL_TRIM, JUMP or BACK, 0 for the
    other kinds."""
    out = np.zeros(kind.shape[0])
    at = np.flatnonzero(np.isin(kind, (*_JUMP_KINDS, _BACK)))
    out[at] = np.trunc(amount[at])
    return out


def _first_not_finite_nonnegative(values: _F64) -> int:
    """The index of the first value that is NaN, infinite or negative; -1 if none."""
    for lo in range(0, values.shape[0], _CHUNK_OPS):
        part = values[lo : lo + _CHUNK_OPS]
        if not part.size or (part.min() >= 0.0 and part.max() < np.inf):
            continue  # two reductions; NaN fails both comparisons
        bad = np.flatnonzero(~(np.isfinite(part) & (part >= 0.0)))
        if bad.size:
            return lo + int(bad[0])
    return -1


@dataclass(frozen=True, kw_only=True, eq=False)
class SharedOps:
    """Every task's ops, as templates that many tasks share.

    A day of a million sandboxes runs a handful of plans, and its refill
    branches two: task ``t`` runs template ``task_part[t]``, whose ops are
    ``kind``, ``arg`` and ``amount`` over ``offsets[p]:offsets[p + 1]``. The
    tasks of one template differ only in some amounts (service-time jitter,
    growth with the sandbox, a sandbox's own pool target): a template op whose
    ``slot`` is ``j >= 0`` takes task ``t``'s own amount
    ``own_amount[own_offsets[t] + j]`` instead of ``amount``. Each task then
    holds 8 bytes per amount of its own, not 13 per op (a million sandboxes
    of the ipvtap day: 103 ops each, 37 of them with an amount of their own).

    :meth:`of_flat` wraps one array per field, one template per task (a
    program built by hand); :meth:`flat` gives that layout back.
    """

    task_part: _I32
    offsets: _I64
    kind: _I8
    arg: _I32
    amount: _F64
    slot: _I32
    own_offsets: _I64
    own_amount: _F64

    def __post_init__(self) -> None:
        for name in (
            "task_part",
            "offsets",
            "kind",
            "arg",
            "amount",
            "slot",
            "own_offsets",
            "own_amount",
        ):
            getattr(self, name).setflags(write=False)

    @classmethod
    def of_flat(cls, *, offsets: _I64, kind: _I8, arg: _I32, amount: _F64) -> SharedOps:
        """One template per task: ``offsets``, ``kind``, ``arg``, ``amount`` as
        :class:`Program` documents them (no copy)."""
        n_tasks = max(int(offsets.shape[0]) - 1, 0)
        ops = cls(
            task_part=np.arange(n_tasks, dtype=np.int32),
            offsets=offsets,
            kind=kind,
            arg=arg,
            amount=amount,
            slot=np.full(kind.shape[0], -1, dtype=np.int32),
            own_offsets=np.zeros(n_tasks + 1, dtype=np.int64),
            own_amount=np.zeros(0),
        )
        ops.__dict__["flat"] = (offsets, kind, arg, amount)
        return ops

    @property
    def n_tasks(self) -> int:
        return int(self.task_part.shape[0])

    @cached_property
    def task_lengths(self) -> _I64:
        """Ops per task."""
        lengths: _I64 = np.diff(self.offsets)[self.task_part]
        return lengths

    @property
    def n_ops(self) -> int:
        """Ops over all tasks (as :meth:`flat` lays them out)."""
        return int(self.task_lengths.sum())

    def task_ops(self, task: int) -> tuple[_I8, _I32, _F64]:
        """Task ``task``'s kinds, arguments and amounts."""
        p = int(self.task_part[task])
        lo, hi = int(self.offsets[p]), int(self.offsets[p + 1])
        amount = self.amount[lo:hi].copy()
        slot = self.slot[lo:hi]
        own = slot >= 0
        amount[own] = self.own_amount[int(self.own_offsets[task]) + slot[own]]
        return self.kind[lo:hi], self.arg[lo:hi], amount

    @cached_property
    def flat(self) -> tuple[_I64, _I8, _I32, _F64]:
        """``(offsets, kind, arg, amount)`` with every task's ops in a row of
        its own (what a program built by hand holds): made on first use, as
        large as the program's ops (13 bytes each)."""
        lengths = self.task_lengths
        offsets = np.zeros(self.n_tasks + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        total = int(offsets[-1])
        index = np.repeat(self.offsets[self.task_part] - offsets[:-1], lengths)
        index += np.arange(total, dtype=np.int64)
        kind, arg, amount = self.kind[index], self.arg[index], self.amount[index]
        slot = self.slot[index]
        own = np.flatnonzero(slot >= 0)
        if own.size:
            base = np.repeat(self.own_offsets[:-1], lengths)[own]
            amount[own] = self.own_amount[base + slot[own]]
        for array in (offsets, kind, arg, amount):
            array.setflags(write=False)
        return offsets, kind, arg, amount


@dataclass(frozen=True, kw_only=True, eq=False)
class Program:
    """Everything an executor needs, and nothing about where it came from.

    The program runs *tasks*: first one per sandbox, then the *branches* —
    work a sandbox starts with a ``SPAWN`` op and does not wait for (a driver
    initialised in the background, pages zeroed by a helper thread). Ops of
    task ``t`` are ``op_*[offsets[t]:offsets[t + 1]]`` (held as templates the
    tasks share, :class:`SharedOps`; :meth:`from_flat` builds a program from
    those four arrays, as a test writes one by hand); branch ``b`` is task
    ``n_sandboxes + b``, belongs to sandbox ``branch_parent[b]`` and is of
    kind ``branch_names[branch_kind[b]]``. Sandbox ``i``'s ``SPAWN k`` starts
    branch ``spawn_base[i] + k``. A sandbox is *ready* when it is up and its
    branches of the kinds in ``ready_branches`` are done.

    Construction validates the structure (see :meth:`validate`), so an
    executor can trust it.
    """

    machine: MachineSpec
    stage_names: tuple[str, ...]
    locks: tuple[LockSpec, ...]
    gates: tuple[GateSpec, ...]
    pools: tuple[PoolSpec, ...]
    arrival_s: _F64
    ops: SharedOps
    branch_names: tuple[str, ...] = ()
    ready_branches: tuple[str, ...] = ()
    branch_parent: _I64 = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    branch_kind: _I32 = field(default_factory=lambda: np.zeros(0, dtype=np.int32))
    spawn_base: _I64 | None = None
    validated: bool = field(default=False, repr=False)

    def __post_init__(self) -> None:
        if self.spawn_base is None:
            object.__setattr__(
                self, "spawn_base", np.zeros(self.arrival_s.shape[0], dtype=np.int64)
            )
        for name in ("arrival_s", "branch_parent", "branch_kind", "spawn_base"):
            getattr(self, name).setflags(write=False)
        if not self.validated:
            self.validate()
            object.__setattr__(self, "validated", True)

    @classmethod
    def from_flat(
        cls, *, offsets: _I64, op_kind: _I8, op_arg: _I32, op_amount: _F64, **fields: Any
    ) -> Program:
        """A program whose task ``t`` runs ``op_*[offsets[t]:offsets[t + 1]]``
        (one template per task, the arrays kept as given)."""
        ops = SharedOps.of_flat(offsets=offsets, kind=op_kind, arg=op_arg, amount=op_amount)
        return cls(ops=ops, **fields)

    # Every task's ops in a row of its own: what a walk, the reference
    # executor or a test reads. A compiled program makes them on first use.
    @property
    def offsets(self) -> _I64:
        return self.ops.flat[0]

    @property
    def op_kind(self) -> _I8:
        return self.ops.flat[1]

    @property
    def op_arg(self) -> _I32:
        return self.ops.flat[2]

    @property
    def op_amount(self) -> _F64:
        return self.ops.flat[3]

    @property
    def n_sandboxes(self) -> int:
        return int(self.arrival_s.shape[0])

    @property
    def n_branches(self) -> int:
        return int(self.branch_parent.shape[0])

    @property
    def n_tasks(self) -> int:
        return self.n_sandboxes + self.n_branches

    def branches_of(self, sandbox: int) -> int:
        """How many branches sandbox ``sandbox`` spawns."""
        assert self.spawn_base is not None
        nxt = (
            int(self.spawn_base[sandbox + 1]) if sandbox + 1 < self.n_sandboxes else self.n_branches
        )
        return nxt - int(self.spawn_base[sandbox])

    @property
    def n_ops(self) -> int:
        return self.ops.n_ops

    @property
    def pool_memory_mib(self) -> float:
        return float(sum(p.memory_mib for p in self.pools))

    def with_pool_targets(self, targets: Mapping[str, npt.ArrayLike]) -> Program:
        """This program with each sandbox's ``POOL_TARGET`` ops set: sandbox
        ``i``'s target for pool ``name`` is ``targets[name][i]`` devices.

        A rate-following pool's target at each start depends on the arrivals
        before it, so it differs per sandbox, while the plans (and their
        templates) stay shared: the compiled ops get their amounts here. The
        structure is unchanged, so the copy is not walked again.
        """
        ops = self.ops
        at = np.flatnonzero(ops.kind == OpKind.POOL_TARGET)  # template ops
        part_of = np.searchsorted(ops.offsets, at, side="right") - 1
        # Tasks running each such template op, and the op's amount of its own.
        users = [np.flatnonzero(ops.task_part == p) for p in part_of.tolist()]
        if any(u.size and int(u.max()) >= self.n_sandboxes for u in users):
            raise ProgramError("POOL_TARGET ops belong in sandboxes, not in branches")
        # A program written op by op holds its amounts per op already.
        flat = ops.flat if at.size and bool((ops.slot[at] < 0).any()) else None
        amount = ops.own_amount.copy() if flat is None else flat[3].copy()
        for i, spec in enumerate(self.pools):
            mine = np.flatnonzero(ops.arg[at] == i)
            if not mine.size:
                continue
            given = pool_target_array(targets, spec.name, self.n_sandboxes)
            for k in mine.tolist():
                tasks = users[k]
                if flat is None:
                    amount[ops.own_offsets[tasks] + ops.slot[at[k]]] = given[tasks]
                else:
                    position = at[k] - ops.offsets[part_of[k]]
                    amount[flat[0][tasks] + position] = given[tasks]
        if flat is None:
            changed = dataclasses.replace(ops, own_amount=amount)
        else:
            changed = SharedOps.of_flat(offsets=flat[0], kind=flat[1], arg=flat[2], amount=amount)
        return dataclasses.replace(self, ops=changed, validated=True)

    def lock_index(self, name: str) -> int:
        for i, spec in enumerate(self.locks):
            if spec.name == name:
                return i
        raise KeyError(name)

    def validate(self) -> None:
        """Check the structure along every path of every sandbox.

        Rules: arrivals finite and >= 0; amounts finite and >= 0; indices in
        range; jumps land inside the sandbox; every path releases each lock it
        took, in LIFO order, and leaves every stage and gate it entered.

        Memory stays linear in the program and small beside it: the ops are
        read in slices of :data:`_CHUNK_OPS`, and each task is reduced to one
        64-bit digest of its structure (kinds, arguments, jumps), not to a row.
        """
        self._validate_arrays()
        ops = self.ops
        if ops.offsets.shape[0] - 1 == self.n_tasks and np.array_equal(
            ops.task_part, np.arange(self.n_tasks)
        ):
            self._validate_tasks()  # one template per task: grouped by digest
            return
        # Tasks of one template share its kinds, arguments and jumps: a walk
        # for each count of branches they spawn, unless a jump is a task's own.
        spawns = self._task_spawns()
        rules = self._sandbox_rules()
        jumps = np.isin(ops.kind, (*_JUMP_KINDS, _BACK))
        for part in np.unique(ops.task_part).tolist():
            lo, hi = int(ops.offsets[part]), int(ops.offsets[part + 1])
            users = np.flatnonzero(ops.task_part == part)
            if not bool((ops.slot[lo:hi][jumps[lo:hi]] >= 0).any()):
                users = users[np.unique(spawns[users], return_index=True)[1]]
            for t in users.tolist():
                self._validate_sandbox(t, int(spawns[t]), rules)

    def _validate_arrays(self) -> None:
        """The checks that need no walk: shapes, names, arrivals and amounts."""
        tasks = self.n_tasks
        ops = self.ops
        if ops.task_part.shape != (tasks,):
            raise ProgramError(
                f"`offsets` must have {tasks + 1} entries (one per sandbox and branch, "
                f"plus one), but got shape {(ops.task_part.shape[0] + 1,)}"
            )
        parts = ops.offsets.shape[0] - 1
        if parts < 0 or ops.offsets[0] != 0 or ops.offsets[-1] != ops.kind.shape[0]:
            raise ProgramError(
                f"`offsets` must run from 0 to {ops.kind.shape[0]} (the ops), "
                f"but got shape {ops.offsets.shape}"
            )
        self._validate_branches()
        if np.any(np.diff(ops.offsets) < 0):
            raise ProgramError("`offsets` must be non-decreasing")
        if tasks and not (int(ops.task_part.min()) >= 0 and int(ops.task_part.max()) < parts):
            raise ProgramError(f"`task_part` must index the {parts} templates")
        for spec in self.locks:
            unknown = sorted({name for name, _ in spec.stage_priority} - set(self.stage_names))
            if unknown:
                raise ProgramError(
                    f"lock {spec.name!r}: stage_priority names unknown stages {unknown}; "
                    f"the program has {list(self.stage_names)}"
                )
        if not (ops.kind.shape == ops.arg.shape == ops.amount.shape == ops.slot.shape):
            raise ProgramError("`op_kind`, `op_arg` and `op_amount` must have one shape")
        self._validate_own_amounts()
        i = _first_not_finite_nonnegative(self.arrival_s)
        if i >= 0:
            raise ProgramError(
                f"arrival_s[{i}] must be finite and >= 0, but got {self.arrival_s[i]}"
            )
        j = _first_not_finite_nonnegative(ops.amount)
        if j >= 0:
            raise ProgramError(f"op_amount[{j}] must be finite and >= 0, but got {ops.amount[j]}")
        j = _first_not_finite_nonnegative(ops.own_amount)
        if j >= 0:
            task = int(np.searchsorted(ops.own_offsets, j, side="right")) - 1
            raise ProgramError(
                f"task {task}'s own amount {j - int(ops.own_offsets[task])} must be finite "
                f"and >= 0, but got {ops.own_amount[j]}"
            )

    def _validate_own_amounts(self) -> None:
        """Each template's ops with an amount of their own are numbered 0 ..
        k - 1, and each task of it has k amounts of its own."""
        ops = self.ops
        parts = ops.offsets.shape[0] - 1
        own_per_part = np.zeros(parts, dtype=np.int64)
        for p in range(parts):
            slots = ops.slot[int(ops.offsets[p]) : int(ops.offsets[p + 1])]
            mine = np.sort(slots[slots >= 0])
            if not np.array_equal(mine, np.arange(mine.size)) or bool((slots < -1).any()):
                raise ProgramError(
                    f"template {p}: its own-amount slots must be 0 .. k - 1, once each"
                )
            own_per_part[p] = mine.size
        expected = np.zeros(self.n_tasks + 1, dtype=np.int64)
        np.cumsum(own_per_part[ops.task_part], out=expected[1:])
        if not np.array_equal(ops.own_offsets, expected) or ops.own_amount.shape != (
            int(expected[-1]),
        ):
            raise ProgramError("`own_offsets` must give each task its template's own amounts")

    def _task_spawns(self) -> _I64:
        """Branches each task must spawn: its own for a sandbox, -1 for a branch
        (which may not spawn)."""
        n = self.n_sandboxes
        assert self.spawn_base is not None
        spawns = np.full(self.n_tasks, -1, dtype=np.int64)
        spawns[:n] = np.diff(np.append(self.spawn_base, self.n_branches))
        return spawns

    def _validate_tasks(self) -> None:
        """Walk one task of each structure, and every task that only looks like one.

        Most programs are a handful of templates repeated over many sandboxes.
        Tasks are grouped by a digest of (length, spawns, kinds, arguments,
        jumps); each is then compared op by op with the first of its group,
        so that a digest collision costs a walk, never a missed check.
        Jumps are truncated (``int``) when walked and run: compared so.
        """
        lengths = np.diff(self.offsets)
        spawns = self._task_spawns()
        digest = self._task_digests(lengths)
        digest ^= lengths.astype(np.uint64) * _MIX_LENGTH
        digest ^= spawns.astype(np.uint64) * _MIX_SPAWNS
        _, first, group = np.unique(digest, return_index=True, return_inverse=True)
        representative = first[group.reshape(-1)]
        walk = np.union1d(first, np.flatnonzero(self._differs(representative, lengths, spawns)))
        rules = self._sandbox_rules()
        for t in walk.tolist():
            self._validate_sandbox(t, int(spawns[t]), rules)

    def _validate_templates(self, tasks: npt.ArrayLike) -> None:
        """Check a program whose every task repeats the ops of one of ``tasks``.

        :func:`~.steps.compile_program` builds each task by copying the kinds,
        arguments and jumps of one flattened template (only CPU and sleep
        amounts differ, by jitter and growth), so walking one task of each
        template is walking them all; the arrays are checked in full. A
        program built by hand gets :meth:`validate`.
        """
        self._validate_arrays()
        spawns = self._task_spawns()
        rules = self._sandbox_rules()
        for t in sorted(set(np.asarray(tasks, dtype=np.int64).tolist())):
            self._validate_sandbox(t, int(spawns[t]), rules)

    def _chunks(self) -> Iterator[tuple[int, int]]:
        """Runs of whole tasks ``[t, t2)`` of about :data:`_CHUNK_OPS` ops each."""
        offsets, tasks = self.offsets, self.n_tasks
        t = 0
        while t < tasks:
            t2 = int(np.searchsorted(offsets, offsets[t] + _CHUNK_OPS, side="right")) - 1
            t2 = min(max(t2, t + 1), tasks)
            yield t, t2
            t = t2

    def _structure(self, lo: int, hi: int) -> tuple[_I8, _I32, _F64]:
        """Ops ``lo:hi`` as the walk sees them: kinds, arguments, truncated jumps (0 elsewhere)."""
        kind = self.op_kind[lo:hi]
        return kind, self.op_arg[lo:hi], _jumps(kind, self.op_amount[lo:hi])

    def _structure_at(self, ops: _I64) -> tuple[_I8, _I32, _F64]:
        """:meth:`_structure` of the ops at ``ops``."""
        kind = self.op_kind[ops]
        return kind, self.op_arg[ops], _jumps(kind, self.op_amount[ops])

    def _uniform_length(self, t: int, t2: int, lengths: _I64) -> int:
        """The length every task in ``[t, t2)`` has, or -1 (the common case is one
        template back to back: its ops are then a ``(tasks, length)`` matrix)."""
        length = int(lengths[t])
        return length if bool((lengths[t:t2] == length).all()) else -1

    def _task_digests(self, lengths: _I64) -> npt.NDArray[np.uint64]:
        """A 64-bit digest of each task's ops (kind, argument, jump, position)."""
        offsets = self.offsets
        out = np.zeros(self.n_tasks, dtype=np.uint64)
        for t, t2 in self._chunks():
            lo, hi = int(offsets[t]), int(offsets[t2])
            if hi == lo:
                continue
            kind, arg, jump = self._structure(lo, hi)
            # Unsigned arithmetic wraps (mod 2**64) without a warning on arrays.
            code = kind.astype(np.uint64) * _MIX_KIND
            code += arg.astype(np.int64).view(np.uint64) * _MIX_ARG
            code += jump.view(np.uint64) * _MIX_JUMP
            length = self._uniform_length(t, t2, lengths)
            if length > 0:
                rows = code.reshape(t2 - t, length)
                rows ^= (np.arange(1, length + 1, dtype=np.uint64) * _MIX_POSITION)[None, :]
                rows *= _MIX_FINAL
                rows ^= rows >> _SHIFT
                out[t:t2] = rows.sum(axis=1, dtype=np.uint64)
                continue
            starts = offsets[t:t2] - lo
            position = np.arange(hi - lo, dtype=np.int64) - np.repeat(starts, lengths[t:t2])
            code ^= (position.view(np.uint64) + _ONE) * _MIX_POSITION
            code *= _MIX_FINAL
            code ^= code >> _SHIFT
            nonempty = lengths[t:t2] > 0
            out[t:t2][nonempty] = np.add.reduceat(code, starts[nonempty])
        return out

    def _differs(self, representative: _I64, lengths: _I64, spawns: _I64) -> npt.NDArray[np.bool_]:
        """Which tasks differ from their representative in length, spawns or any op."""
        offsets = self.offsets
        differs: npt.NDArray[np.bool_] = (lengths[representative] != lengths) | (
            spawns[representative] != spawns
        )
        last_op = max(self.n_ops - 1, 0)
        for t, t2 in self._chunks():
            lo, hi = int(offsets[t]), int(offsets[t2])
            rep = representative[t:t2]
            if hi == lo or (rep == np.arange(t, t2)).all():
                continue  # each its own representative: nothing to compare
            kind, arg, jump = self._structure(lo, hi)
            length = self._uniform_length(t, t2, lengths)
            if length > 0 and (rep == rep[0]).all() and lengths[rep[0]] == length:
                # One representative for the slice: compare rows with it, no gather.
                r = int(offsets[rep[0]])
                their_kind, their_arg, their_jump = self._structure(r, r + length)
                m = t2 - t
                unequal_rows = (
                    (kind.reshape(m, length) != their_kind).any(axis=1)
                    | (arg.reshape(m, length) != their_arg).any(axis=1)
                    | (jump.reshape(m, length) != their_jump).any(axis=1)
                )
                differs[t:t2] |= unequal_rows
                continue
            task = np.repeat(np.arange(t, t2, dtype=np.int64), lengths[t:t2])
            position = np.arange(lo, hi, dtype=np.int64) - np.repeat(offsets[t:t2], lengths[t:t2])
            # Clipped: a representative of another length is flagged above already.
            theirs = np.minimum(offsets[representative[task]] + position, last_op)
            their_kind, their_arg, their_jump = self._structure_at(theirs)
            unequal = (kind != their_kind) | (arg != their_arg) | (jump != their_jump)
            differs[np.unique(task[unequal])] = True
        return differs

    def _validate_branches(self) -> None:
        n, nb = self.n_sandboxes, self.n_branches
        assert self.spawn_base is not None
        if self.branch_kind.shape != (nb,):
            raise ProgramError(
                f"`branch_kind` must have one entry per branch ({nb}), "
                f"but got shape {self.branch_kind.shape}"
            )
        if self.spawn_base.shape != (n,):
            raise ProgramError(
                f"`spawn_base` must have one entry per sandbox ({n}), "
                f"but got shape {self.spawn_base.shape}"
            )
        n_kinds = len(self.branch_names)
        if nb and not (self.branch_kind.min() >= 0 and self.branch_kind.max() < n_kinds):
            raise ProgramError(
                f"`branch_kind` must index `branch_names` ({len(self.branch_names)} names)"
            )
        unknown = sorted(set(self.ready_branches) - set(self.branch_names))
        if unknown:
            raise ProgramError(
                f"ready_branches names unknown branch kinds {unknown}; "
                f"the program has {list(self.branch_names)}"
            )
        # Branches are numbered by sandbox: spawn_base is where each one's start.
        expected = np.searchsorted(self.branch_parent, np.arange(n))
        if nb and (
            np.any(np.diff(self.branch_parent) < 0)
            or self.branch_parent[0] < 0
            or self.branch_parent[-1] >= n
        ):
            raise ProgramError("`branch_parent` must be sorted sandbox indices in [0, n_sandboxes)")
        if not np.array_equal(self.spawn_base, expected):
            raise ProgramError("`spawn_base[i]` must be the index of sandbox i's first branch")

    def _sandbox_rules(self) -> _SandboxRules:
        """What :meth:`_validate_sandbox` checks every op against, worked out
        once per walk of the program: a FastIOV storm declares a lock per VF,
        and rebuilding these sets per task took a third of its compile."""
        n_locks, n_stages, n_gates = len(self.locks), len(self.stage_names), len(self.gates)
        n_pools = len(self.pools)
        return _SandboxRules(
            limits={
                int(OpKind.ACQUIRE): n_locks,
                int(OpKind.ACQUIRE_SHARED): n_locks,
                int(OpKind.RELEASE): n_locks,
                int(OpKind.STAGE_BEGIN): n_stages,
                int(OpKind.STAGE_END): n_stages,
                int(OpKind.GATE_ENTER): n_gates,
                int(OpKind.GATE_EXIT): n_gates,
                int(OpKind.POOL_TRY): n_pools,
                int(OpKind.POOL_ORDER): n_pools,
                int(OpKind.POOL_PUT): n_pools,
                int(OpKind.POOL_TARGET): n_pools,
                int(OpKind.POOL_TRIM): n_pools,
                int(OpKind.RCU_SYNC_ENTER): n_locks,
                int(OpKind.RCU_SYNC_EXIT): n_locks,
            },
            spin=frozenset(i for i, spec in enumerate(self.locks) if spec.kind is LockKind.SPIN),
            rw=frozenset(i for i, spec in enumerate(self.locks) if spec.kind is LockKind.RW),
            signal=frozenset(i for i, spec in enumerate(self.gates) if spec.signal),
        )

    def _validate_sandbox(
        self, sandbox: int, spawns: int = 0, rules: _SandboxRules | None = None
    ) -> None:
        kind, arg, amount = self.ops.task_ops(sandbox)
        kinds, args, amounts = kind.tolist(), arg.tolist(), amount.tolist()
        if rules is None:
            rules = self._sandbox_rules()
        limits, known, spin, signal = rules.limits, _KNOWN_KINDS, rules.spin, rules.signal
        for j, (k, a) in enumerate(zip(kinds, args, strict=True)):
            if k not in known:
                raise ProgramError(f"sandbox {sandbox} op {j}: unknown op kind {k}")
            limit = limits.get(k)  # an IntEnum hashes and compares as its int
            if limit is not None and not 0 <= a < limit:
                raise ProgramError(
                    f"sandbox {sandbox} op {j} ({OpKind(k).name}): index {a} not in [0, {limit})"
                )
            if k == _SPAWN and not 0 <= a < spawns:
                why = " (a branch cannot spawn)" if spawns < 0 else ""
                raise ProgramError(
                    f"sandbox {sandbox} op {j}: spawn of branch {a}, "
                    f"but it has {max(spawns, 0)} branches{why}"
                )
            if k == _ACQUIRE_SHARED and a not in rules.rw:
                raise ProgramError(
                    f"sandbox {sandbox} op {j}: "
                    f"shared acquire of non-rw lock {self.locks[a].name!r}"
                )
        # Walk every path: state = (pc, held locks, open stages, open gates, spawned).
        start: _PathState = (0, (), (), (), frozenset())
        todo = [start]
        visited = {start}
        end = len(kinds)
        while todo:
            pc, held, stages, gates, spawned = todo.pop()
            if pc == end:
                if held or stages or gates:
                    raise ProgramError(
                        f"sandbox {sandbox} ends holding locks {held}, "
                        f"inside stages {stages} and gates {gates}"
                    )
                if spawns > 0 and len(spawned) != spawns:
                    raise ProgramError(
                        f"sandbox {sandbox}: a path ends without spawning branches "
                        f"{sorted(set(range(spawns)) - spawned)}"
                    )
                continue
            k, a = kinds[pc], args[pc]
            nexts: tuple[int, ...] = (pc + 1,)
            # A spinlock holder runs with preemption off: it must not sleep (sleep,
            # sleeping lock, gate) nor wait for preemptible work (zeroing).
            if (
                held
                and (k in _SLEEPING_KINDS or (k == _ACQUIRE and a not in spin))
                and not spin.isdisjoint(held)
            ):
                raise ProgramError(
                    f"sandbox {sandbox} op {pc}: {OpKind(k).name.lower()} while holding a spinlock"
                )
            if k == _SPAWN:
                if a in spawned:
                    raise ProgramError(f"sandbox {sandbox} op {pc}: branch {a} spawned twice")
                spawned = spawned | {a}
            elif k in (_ACQUIRE, _ACQUIRE_SHARED):
                if a in held:
                    raise ProgramError(f"sandbox {sandbox} op {pc}: lock {a} taken twice")
                held = (*held, a)
            elif k == _RELEASE:
                if not held or held[-1] != a:
                    raise ProgramError(
                        f"sandbox {sandbox} op {pc}: release of lock {a} but held {held} (LIFO)"
                    )
                held = held[:-1]
            elif k == _STAGE_BEGIN:
                stages = (*stages, a)
            elif k == _STAGE_END:
                if not stages or stages[-1] != a:
                    raise ProgramError(f"sandbox {sandbox} op {pc}: end of stage {a} not open")
                stages = stages[:-1]
            elif k in (_GATE_ENTER, _GATE_EXIT) and a in signal:
                pass  # a wait or a signal: nothing to give back
            elif k == _GATE_ENTER:
                gates = (*gates, a)
            elif k == _GATE_EXIT:
                if a not in gates:
                    raise ProgramError(f"sandbox {sandbox} op {pc}: exit of gate {a} not entered")
                g = len(gates) - 1 - gates[::-1].index(a)  # one permit: the latest entry
                gates = gates[:g] + gates[g + 1 :]
            elif k in _JUMP_KINDS:
                step = int(amounts[pc])
                if step < 1 or pc + step > end:
                    raise ProgramError(
                        f"sandbox {sandbox} op {pc} ({OpKind(k).name}): "
                        f"jump {step} leaves the sandbox"
                    )
                nexts = (pc + step,) if k == _JUMP else (pc + 1, pc + step)
            elif k == _RCU_SYNC_ENTER and a not in held:
                raise ProgramError(
                    f"sandbox {sandbox} op {pc}: rcu_sync of lock {a} entered without "
                    "holding the lock (its writers are serialised by it)"
                )
            elif k == _BACK:
                step = int(amounts[pc])
                if step < 1 or pc - step < 0 or kinds[pc - step] != _POOL_TRIM:
                    raise ProgramError(
                        f"sandbox {sandbox} op {pc} (BACK): jump {step} back must land on "
                        "a POOL_TRIM of its task"
                    )
                nexts = (pc - step,)
            for nxt in nexts:
                state = (nxt, held, stages, gates, spawned)
                if state not in visited:
                    visited.add(state)
                    todo.append(state)


@dataclass(frozen=True)
class _SandboxRules:
    """Per program: each indexed op kind's bound, and the spin, rw and signal sets."""

    limits: dict[int, int]
    spin: frozenset[int]
    rw: frozenset[int]
    signal: frozenset[int]


_KNOWN_KINDS = frozenset(int(k) for k in OpKind)

# What a spinlock holder may not do: sleep or wait for preemptible work.
_SLEEPING_KINDS = frozenset(
    int(k)
    for k in (
        OpKind.SLEEP,
        OpKind.ZERO,
        OpKind.GATE_ENTER,
        OpKind.RCU_SYNC_ENTER,
        OpKind.ACQUIRE_SHARED,
        OpKind.GUEST_CPU,
    )
)


def pool_target_array(
    targets: Mapping[str, npt.ArrayLike], name: str, sandboxes: int
) -> np.ndarray:
    """``targets[name]`` checked as pool ``name``'s target at each of
    ``sandboxes`` starts (whole numbers of devices, >= 0), as float64 amounts."""
    if name not in targets:
        raise ProgramError(f"targets: no target for pool {name!r}")
    given = np.asarray(targets[name], dtype=np.float64)
    if given.shape != (sandboxes,):
        raise ProgramError(
            f"targets[{name!r}]: must have one entry per sandbox ({sandboxes}), "
            f"got shape {given.shape}"
        )
    if not np.all((given >= 0) & (given == np.floor(given))):
        raise ProgramError(f"targets[{name!r}]: must be whole numbers >= 0")
    return given
