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

import enum
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

__all__ = [
    "GateSpec",
    "LockKind",
    "LockSpec",
    "MachineSpec",
    "OpKind",
    "PoolSpec",
    "Program",
    "ProgramError",
]


class ProgramError(ValueError):
    """A program violates a structural rule; the message names the sandbox and op."""


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
    """Take a device from pool ``arg`` if one is left and jump ``amount`` ops ahead."""
    JUMP = 11
    """Jump ``amount`` ops ahead unconditionally."""
    SPAWN = 12
    """Start the sandbox's branch ``arg`` (its ``arg``-th) and go on without waiting."""
    GUEST_CPU = 13
    """Run ``amount`` core-seconds on the sandbox's vCPUs (within its CPU quota)."""


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
    """

    name: str
    kind: LockKind = LockKind.MUTEX
    stage_priority: tuple[tuple[str, int], ...] = ()
    spin_s: float = 0.0
    wake_s: float = 0.0

    def __post_init__(self) -> None:
        if not self.name:
            raise ProgramError(f"`LockSpec.name` must be non-empty, but got {self.name=}")
        if not (self.spin_s >= 0.0):
            raise ProgramError(f"`spin_s >= 0` must hold, but got {self.name=} {self.spin_s=}")
        if not (self.wake_s >= 0.0):
            raise ProgramError(f"`wake_s >= 0` must hold, but got {self.name=} {self.wake_s=}")
        if self.wake_s and self.kind is not LockKind.MUTEX:
            raise ProgramError(
                "only a mutex hands over through a wake-up, "
                f"but got {self.name=} kind={self.kind.name}"
            )
        if self.spin_s and self.kind is not LockKind.MUTEX:
            raise ProgramError(
                f"only a mutex spins before sleeping, but got {self.name=} kind={self.kind.name}"
            )


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

    def __post_init__(self) -> None:
        if self.permits < (0 if self.signal else 1):
            bound = 0 if self.signal else 1
            raise ProgramError(
                f"`permits >= {bound}` must hold, but got {self.name=} {self.permits=}"
            )


@dataclass(frozen=True, kw_only=True, slots=True)
class PoolSpec:
    """Devices created before the storm; each costs ``memory_mib_per_device``.

    ``ticket``: not devices but the right to do something once (the first
    sandbox to try takes it, see :class:`~bootstorm.simulator.Once`); left
    out of the result's pools.
    """

    name: str
    capacity: int
    memory_mib_per_device: float
    ticket: bool = False

    def __post_init__(self) -> None:
        if self.capacity < 0:
            raise ProgramError(f"`capacity >= 0` must hold, but got {self.name=} {self.capacity=}")
        if not (self.memory_mib_per_device >= 0.0):
            raise ProgramError(
                f"`memory_mib_per_device >= 0` must hold, "
                f"but got {self.name=} {self.memory_mib_per_device=}"
            )

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

    def __post_init__(self) -> None:
        if self.cores < 1:
            raise ProgramError(f"`cores >= 1` must hold, but got {self.cores=}")
        if not (0.0 <= self.reserved_cores < self.cores):
            raise ProgramError(
                "`0 <= reserved_cores < cores` must hold, "
                f"but got ({self.reserved_cores=}, {self.cores=})"
            )
        if not (self.zero_bytes_per_core_s > 0.0):
            raise ProgramError(
                f"`zero_bytes_per_core_s > 0` must hold, but got {self.zero_bytes_per_core_s=}"
            )
        if not (self.memory_bandwidth_bytes_s > 0.0):
            raise ProgramError(
                "`memory_bandwidth_bytes_s > 0` must hold, "
                f"but got {self.memory_bandwidth_bytes_s=}"
            )
        if not (self.background_jobs >= 0.0 and np.isfinite(self.background_jobs)):
            raise ProgramError(f"`background_jobs >= 0` must hold, but got {self.background_jobs=}")
        if not (self.guest_cpu_quota > 0.0 and np.isfinite(self.guest_cpu_quota)):
            raise ProgramError(f"`guest_cpu_quota > 0` must hold, but got {self.guest_cpu_quota=}")


_F64 = npt.NDArray[np.float64]
_I32 = npt.NDArray[np.int32]
_I64 = npt.NDArray[np.int64]
_I8 = npt.NDArray[np.int8]
# Where a path walk stands: (pc, held locks, open stages, open gates, spawned).
_PathState = tuple[int, tuple[int, ...], tuple[int, ...], tuple[int, ...], frozenset[int]]


@dataclass(frozen=True, kw_only=True, eq=False)
class Program:
    """Everything an executor needs, and nothing about where it came from.

    The program runs *tasks*: first one per sandbox, then the *branches* —
    work a sandbox starts with a ``SPAWN`` op and does not wait for (a driver
    initialised in the background, pages zeroed by a helper thread). Ops of
    task ``t`` are ``op_*[offsets[t]:offsets[t + 1]]``; branch ``b`` is task
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
    offsets: _I64
    op_kind: _I8
    op_arg: _I32
    op_amount: _F64
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
        for name in (
            "arrival_s",
            "op_amount",
            "op_kind",
            "op_arg",
            "offsets",
            "branch_parent",
            "branch_kind",
            "spawn_base",
        ):
            getattr(self, name).setflags(write=False)
        if not self.validated:
            self.validate()
            object.__setattr__(self, "validated", True)

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
        return int(self.op_kind.shape[0])

    @property
    def pool_memory_mib(self) -> float:
        return float(sum(p.memory_mib for p in self.pools))

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
        """
        n = self.n_sandboxes
        tasks = self.n_tasks
        if (
            self.offsets.shape != (tasks + 1,)
            or self.offsets[0] != 0
            or self.offsets[-1] != self.n_ops
        ):
            raise ProgramError(
                f"`offsets` must have {tasks + 1} entries (one per sandbox and branch, "
                f"plus one) from 0 to {self.n_ops}, but got shape {self.offsets.shape}"
            )
        self._validate_branches()
        if np.any(np.diff(self.offsets) < 0):
            raise ProgramError("`offsets` must be non-decreasing")
        for spec in self.locks:
            unknown = sorted({name for name, _ in spec.stage_priority} - set(self.stage_names))
            if unknown:
                raise ProgramError(
                    f"lock {spec.name!r}: stage_priority names unknown stages {unknown}; "
                    f"the program has {list(self.stage_names)}"
                )
        if not (self.op_kind.shape == self.op_arg.shape == self.op_amount.shape):
            raise ProgramError("`op_kind`, `op_arg` and `op_amount` must have one shape")
        bad = np.flatnonzero(~np.isfinite(self.arrival_s) | (self.arrival_s < 0))
        if bad.size:
            i = int(bad[0])
            raise ProgramError(
                f"arrival_s[{i}] must be finite and >= 0, but got {self.arrival_s[i]}"
            )
        bad = np.flatnonzero(~np.isfinite(self.op_amount) | (self.op_amount < 0))
        if bad.size:
            j = int(bad[0])
            raise ProgramError(
                f"op_amount[{j}] must be finite and >= 0, but got {self.op_amount[j]}"
            )
        # Sandboxes that share an op sequence share the check: most programs
        # are a handful of templates repeated over hundreds of sandboxes, so
        # tasks are grouped by length and deduplicated as rows of a matrix.
        # Jumps are truncated (``int``) when walked and run: compare them so.
        jumps = np.trunc(self.op_amount * (self.op_kind >= OpKind.POOL_TRY))
        lengths = np.diff(self.offsets)
        spawns = np.full(tasks, -1.0)  # a branch may not spawn; a sandbox spawns its own once
        assert self.spawn_base is not None
        spawns[:n] = np.diff(np.append(self.spawn_base, self.n_branches))
        for length in np.unique(lengths).tolist():
            members = np.flatnonzero(lengths == length)
            ops = self.offsets[members][:, None] + np.arange(length)[None, :]
            rows = np.hstack(
                [spawns[members, None], self.op_kind[ops], self.op_arg[ops], jumps[ops]]
            )
            # One opaque bytes value per row: unique on those, not column by column.
            keys = np.ascontiguousarray(rows).view(np.dtype((np.void, rows.shape[1] * 8)))
            _, first = np.unique(keys[:, 0], return_index=True)
            for i in sorted(members[first].tolist()):
                lo = int(self.offsets[i])
                self._validate_sandbox(i, lo, lo + length, int(spawns[i]))

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

    def _validate_sandbox(self, sandbox: int, lo: int, hi: int, spawns: int = 0) -> None:
        kinds = self.op_kind[lo:hi].tolist()
        args = self.op_arg[lo:hi].tolist()
        amounts = self.op_amount[lo:hi].tolist()
        limits = {
            OpKind.ACQUIRE: len(self.locks),
            OpKind.ACQUIRE_SHARED: len(self.locks),
            OpKind.RELEASE: len(self.locks),
            OpKind.STAGE_BEGIN: len(self.stage_names),
            OpKind.STAGE_END: len(self.stage_names),
            OpKind.GATE_ENTER: len(self.gates),
            OpKind.GATE_EXIT: len(self.gates),
            OpKind.POOL_TRY: len(self.pools),
        }
        for j, (k, a) in enumerate(zip(kinds, args, strict=True)):
            try:
                kind = OpKind(k)
            except ValueError:
                raise ProgramError(f"sandbox {sandbox} op {j}: unknown op kind {k}") from None
            limit = limits.get(kind)
            if limit is not None and not 0 <= a < limit:
                raise ProgramError(
                    f"sandbox {sandbox} op {j} ({kind.name}): index {a} not in [0, {limit})"
                )
            if kind is OpKind.SPAWN and not 0 <= a < spawns:
                why = " (a branch cannot spawn)" if spawns < 0 else ""
                raise ProgramError(
                    f"sandbox {sandbox} op {j}: spawn of branch {a}, "
                    f"but it has {max(spawns, 0)} branches{why}"
                )
            if kind is OpKind.ACQUIRE_SHARED and self.locks[a].kind is not LockKind.RW:
                raise ProgramError(
                    f"sandbox {sandbox} op {j}: "
                    f"shared acquire of non-rw lock {self.locks[a].name!r}"
                )
        # Walk every path: state = (pc, held locks, open stages, open gates, spawned).
        start: _PathState = (0, (), (), (), frozenset())
        todo = [start]
        visited = {start}
        end = hi - lo
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
            kind, a = OpKind(kinds[pc]), args[pc]
            nexts = [pc + 1]
            # A spinlock holder runs with preemption off: it must not sleep (sleep,
            # sleeping lock, gate) nor wait for preemptible work (zeroing).
            if any(self.locks[h].kind is LockKind.SPIN for h in held) and (
                kind
                in (
                    OpKind.SLEEP,
                    OpKind.ZERO,
                    OpKind.GATE_ENTER,
                    OpKind.ACQUIRE_SHARED,
                    OpKind.GUEST_CPU,
                )
                or (kind is OpKind.ACQUIRE and self.locks[a].kind is not LockKind.SPIN)
            ):
                raise ProgramError(
                    f"sandbox {sandbox} op {pc}: {kind.name.lower()} while holding a spinlock"
                )
            if kind is OpKind.SPAWN:
                if a in spawned:
                    raise ProgramError(f"sandbox {sandbox} op {pc}: branch {a} spawned twice")
                spawned = spawned | {a}
            if kind in (OpKind.ACQUIRE, OpKind.ACQUIRE_SHARED):
                if a in held:
                    raise ProgramError(f"sandbox {sandbox} op {pc}: lock {a} taken twice")
                held = (*held, a)
            elif kind is OpKind.RELEASE:
                if not held or held[-1] != a:
                    raise ProgramError(
                        f"sandbox {sandbox} op {pc}: release of lock {a} but held {held} (LIFO)"
                    )
                held = held[:-1]
            elif kind is OpKind.STAGE_BEGIN:
                stages = (*stages, a)
            elif kind is OpKind.STAGE_END:
                if not stages or stages[-1] != a:
                    raise ProgramError(f"sandbox {sandbox} op {pc}: end of stage {a} not open")
                stages = stages[:-1]
            elif kind in (OpKind.GATE_ENTER, OpKind.GATE_EXIT) and self.gates[a].signal:
                pass  # a wait or a signal: nothing to give back
            elif kind is OpKind.GATE_ENTER:
                gates = (*gates, a)
            elif kind is OpKind.GATE_EXIT:
                if a not in gates:
                    raise ProgramError(f"sandbox {sandbox} op {pc}: exit of gate {a} not entered")
                k = len(gates) - 1 - gates[::-1].index(a)  # one permit: the latest entry
                gates = gates[:k] + gates[k + 1 :]
            elif kind in (OpKind.POOL_TRY, OpKind.JUMP):
                step = int(amounts[pc])
                if step < 1 or pc + step > end:
                    raise ProgramError(
                        f"sandbox {sandbox} op {pc} ({kind.name}): jump {step} leaves the sandbox"
                    )
                nexts = [pc + step] if kind is OpKind.JUMP else [pc + 1, pc + step]
            for nxt in nexts:
                state = (nxt, held, stages, gates, spawned)
                if state not in visited:
                    visited.add(state)
                    todo.append(state)
