"""A second executor without SimPy: one heap of timed events, plain Python.

:class:`FastExecutor` runs the same :class:`Program` as the reference
:class:`~.executor.SimPyExecutor` and returns the same :class:`Result` (no
recording). The reference's semantics are the spec, down to the order of
simultaneous events: a lock grant, a gate hand-over or a finished CPU job
decides *who* goes next, so two events at one time must be processed in the
order SimPy would process them, or FIFO queues fill in another order and the
runs diverge. This executor therefore mirrors SimPy's event queue exactly:
entries ``(time, priority, seq, ...)`` where ``priority`` is 0 for a task's
start (SimPy's ``Initialize``, URGENT) and 1 for everything else (NORMAL), and
``seq`` is taken at the moment SimPy would schedule the event. Events SimPy
schedules that nobody waits for (a finished process) are left out; they only
shift later sequence numbers and never change their relative order.

The processor-sharing maths (share clocks, finish tags, the 1e-12 completion
slack and the one-ulp tick) is :mod:`.cpu`'s, line for line, and the locks
are :mod:`.locks`' (FIFO by ``(stage priority, arrival)``, ownership handed
to the next waiter on release; spinlock waiters spin pinned), so that the
floating-point sums are made in the same order and results agree to the bit
on every program the equivalence tests generate.

Implemented: every op kind (CPU, GUEST_CPU under the quota, SLEEP, ZERO
under the bandwidth cap, ACQUIRE/ACQUIRE_SHARED/RELEASE, STAGE_BEGIN/END,
GATE_ENTER/EXIT, POOL_TRY, JUMP, SPAWN); mutexes with FIFO or stage-priority
grant, optimistic spinning (``spin_s``: the CPU's spin deadlines) and the
wake-up hand-over (``wake_s``: a wake event, stealing, the hand-off flag);
spinlocks (pinned tier); fair reader-writer locks; ``background_jobs`` and
``reserved_cores``. Not implemented: recording (``Result.recording`` is
None; use the reference executor with ``record=True`` for spans).

Two loops run this algorithm. ``FastExecutor()`` is plain Python (this
module): about 1.5x SimPy, since the event count is the model's and a
hand-written heap costs about as much per event as SimPy's own loop.
``FastExecutor(jit=True)`` runs :mod:`._fast_nb`, the same algorithm over
preallocated arrays compiled by numba (a dependency; see its docstring
for the design): about 20–30x SimPy, ≈ 3 ms for the 400-sandbox
ipvtap storm end to end, ≈ 70 ms for 10 000 sandboxes. It compiles once
per machine (``cache=True``, ≈ 20 s). A search reads only the startup
figures (:meth:`FastExecutor.summarise`), which skips building the rest.
Both loops hand their counters to :func:`_assemble` (a :class:`_Raw`),
which builds the :class:`Result` as the reference does. Both are checked against the reference by
``tests/simulator/test_fast_equivalence.py`` and agree with it to the bit
on every generated program so far and on the paper storms, event counts
between them included.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._contention import ContentionCounter
from ._errors import DeadlockError
from .program import (  # plain ints of OpKind, as the loops compare them
    _ACQUIRE,
    _ACQUIRE_SHARED,
    _CPU,
    _GATE_ENTER,
    _GATE_EXIT,
    _GUEST_CPU,
    _JUMP,
    _POOL_TRY,
    _RELEASE,
    _SLEEP,
    _SPAWN,
    _STAGE_BEGIN,
    _STAGE_END,
    _ZERO,
    LockKind,
    Program,
)
from .result import (
    REASONS,
    CpuStats,
    GateStats,
    LockStats,
    PoolStats,
    Result,
    StageStats,
    StartupStats,
)

__all__ = ["FastExecutor", "StartupSummary", "run_program_fast", "summarise_fast"]


_WORK, _SPIN, _ZEROING = 0, 1, 2

# SimPy's priorities: a process start (Initialize) before anything else due then.
_URGENT, _NORMAL = 0, 1
# What an event does when it is popped.
_START, _ARRIVE, _RESUME, _TIMER, _WAKE = 0, 1, 2, 3, 4

_MUTEX, _SPINLOCK, _RW = int(LockKind.MUTEX), int(LockKind.SPIN), int(LockKind.RW)

# As in :mod:`.cpu`: completions this close (relative) to their tag are due.
_REL_EPS = 1e-12

# A CPU job: (finish tag, cpu seq, task, start clock, index into cpu_acc).
_Job = tuple[float, int, int, float, int]


class _Spin:
    """A spinning waiter (:class:`.cpu.SpinHandle`): its core-seconds go to
    ``cpu_acc[slot]`` and to lock ``lock``'s spin total."""

    __slots__ = ("active", "lock", "pinned", "slot", "start_share")

    def __init__(self, start_share: float, slot: int, lock: int, pinned: bool) -> None:
        self.start_share = start_share
        self.slot = slot
        self.lock = lock
        self.pinned = pinned
        self.active = True


class _Waiter:
    __slots__ = ("shared", "since", "spin", "stage", "task")

    def __init__(self, task: int, stage: int, since: float, shared: bool) -> None:
        self.task = task
        self.stage = stage
        self.since = since
        self.shared = shared
        self.spin: _Spin | None = None


class FastExecutor:
    """Runs a :class:`Program` on a hand-written event heap (no recording).

    Parameters
    ----------
    jit:
        Run the loop compiled by numba (:mod:`._fast_nb`; needs numba). The
        first run on a machine compiles it (≈ 20 s; cached on disk after
        that, ≈ 0.5 s to load in a new process).
    """

    def __init__(self, *, jit: bool = False) -> None:
        self.jit = jit

    def run(self, program: Program) -> Result:
        return _run_jit(program) if self.jit else _FastRun(program).run()

    def summarise(self, program: Program) -> StartupSummary:
        """What :meth:`run` returns, cut to :class:`StartupSummary`'s figures."""
        if not self.jit:
            return StartupSummary.of(_FastRun(program).run())
        out = _kernel(program)[0]
        finish = out[0]
        _check_finished(program, finish)
        return _startup_summary(program, finish[: program.n_sandboxes])


def run_program_fast(program: Program, *, jit: bool = False) -> Result:
    """Run ``program`` on the fast executor."""
    return FastExecutor(jit=jit).run(program)


def summarise_fast(program: Program, *, jit: bool = False) -> StartupSummary:
    """Run ``program`` on the fast executor, keeping only the startup figures."""
    return FastExecutor(jit=jit).summarise(program)


@dataclass(frozen=True, kw_only=True, slots=True)
class StartupSummary:
    """The figures a search reads from a storm, without the rest of a :class:`Result`.

    A search evaluates hundreds of storms and reads four numbers of each;
    building the whole result (stage, lock and step statistics) cost the
    compiled executor about a tenth of its run. The figures are computed as
    :class:`Result`'s are, to the bit.
    """

    makespan_s: float
    startup: StartupStats
    pool_memory_mib: float

    @classmethod
    def of(cls, result: Result) -> StartupSummary:
        return cls(
            makespan_s=result.makespan_s,
            startup=result.startup,
            pool_memory_mib=result.pool_memory_mib,
        )


def _startup_summary(p: Program, finish: np.ndarray) -> StartupSummary:
    """As :func:`_assemble` computes them (the same operations in the same order)."""
    arrival = p.arrival_s
    return StartupSummary(
        makespan_s=float(finish.max() - arrival.min()),
        startup=StartupStats.of(finish - arrival),
        pool_memory_mib=p.pool_memory_mib,
    )


class _Lock:
    """One lock's state: the union of :mod:`.locks`' Mutex, SpinLock and RWLock."""

    __slots__ = (
        "acquisitions_by_stage",
        "handoff",
        "held_since",
        "kind",
        "owner",
        "priority",
        "queue",
        "readers",
        "seq",
        "spin_s",
        "stats",
        "wake_s",
        "waking",
    )

    def __init__(
        self,
        kind: int,
        priority: list[int] | None,
        n_stage_slots: int,
        spin_s: float,
        wake_s: float,
    ) -> None:
        self.kind = kind
        self.spin_s = spin_s
        self.wake_s = wake_s
        self.waking = False  # a wake-up is on its way to the head waiter
        self.handoff = False  # the head waiter lost a race once: hand to it directly
        self.priority = priority
        self.stats = ContentionCounter()
        self.queue: list[tuple[int, int, _Waiter]] = []
        self.seq = 0
        self.owner = -1  # the mutex holder, or the rw lock's writer; -1: none
        self.readers = 0
        self.held_since: dict[int, tuple[float, int]] = {}
        self.acquisitions_by_stage = [0] * n_stage_slots


class _Gate:
    __slots__ = ("free", "head", "queue", "stats")

    def __init__(self, permits: int) -> None:
        self.free = permits
        self.stats = ContentionCounter()
        self.queue: list[tuple[int, float]] = []  # (task, since), FIFO from ``head``
        self.head = 0


class _FastRun:
    def __init__(self, program: Program) -> None:
        self.p = program
        m = program.machine
        n_stages = len(program.stage_names)
        self.no_stage = n_stages
        # cpu_acc[3 * stage + reason]; slot n_stages collects CPU outside any stage.
        self.cpu_acc = [0.0] * (3 * (n_stages + 1))
        self.lock_spin = [0.0] * len(program.locks)
        # -- the event queue (SimPy's, see the module docstring)
        self.now = 0.0
        self.queue: list[tuple[float, int, int, int, int]] = []
        self.eid = 0
        self.events = 0
        # -- the CPU (ProcessorSharingCPU's fields, same names without the underscore)
        self.cores = m.cores - m.reserved_cores if m.reserved_cores else m.cores
        self.guest_cap = m.guest_cpu_quota
        self.background_jobs = m.background_jobs
        self.zero_rate = m.zero_bytes_per_core_s
        self.bandwidth = m.memory_bandwidth_bytes_s
        self.share_clock = 0.0
        self.pinned_clock = 0.0
        self.zero_clock = 0.0
        self.guest_clock = 0.0
        self.last = 0.0
        self.share = 1.0
        self.pinned_share = 1.0
        self.zero_speed = 1.0
        self.guest_share = 1.0
        self.work: list[_Job] = []
        self.pinned: list[_Job] = []
        self.zeroing: list[_Job] = []
        self.guest: list[_Job] = []
        self.spinning = 0
        self.pinned_spinning = 0
        # Spinners that give up after a while: (deadline, cpu seq, spin); those
        # stopped earlier are dropped lazily, as in :mod:`.cpu`.
        self.spin_deadlines: list[tuple[float, int, _Spin]] = []
        self.cseq = 0
        self.timer_at = math.inf
        self.timer_gen = 0
        # -- resources
        self.locks: list[_Lock] = []
        for spec in program.locks:
            priority = None
            if spec.stage_priority:
                prio = dict(spec.stage_priority)
                priority = [prio.get(name, 0) for name in program.stage_names] + [0]
            self.locks.append(
                _Lock(int(spec.kind), priority, n_stages + 1, spec.spin_s, spec.wake_s)
            )
        self.gates = [_Gate(g.permits) for g in program.gates]
        self.pool_left = [pool.capacity for pool in program.pools]
        # -- tasks
        n = program.n_sandboxes
        self.n = n
        tasks = program.n_tasks
        self.finish = np.full(n, np.nan)
        self.branch_finish = np.full(program.n_branches, np.nan)
        self.task_owner: list[int] = [*range(n), *program.branch_parent.tolist()]
        self.spawn_base: list[int] = program.spawn_base.tolist()  # type: ignore[union-attr]
        self.arrival: list[float] = [*program.arrival_s.tolist(), *([0.0] * program.n_branches)]
        self.pc: list[int] = program.offsets[:-1].tolist()
        self.end: list[int] = program.offsets[1:].tolist()
        self.stage = [n_stages] * tasks
        self.stage_stack: list[list[tuple[int, float]]] = [[] for _ in range(tasks)]
        self.spin_depth = [0] * tasks
        self.stage_durations: list[list[float]] = [[] for _ in range(n_stages)]
        self.stage_time = np.zeros((n, n_stages))
        self.zeroed_bytes = 0.0
        self.kinds: list[int] = program.op_kind.tolist()
        self.args: list[int] = program.op_arg.tolist()
        self.amounts: list[float] = program.op_amount.tolist()

    # -- the event queue -------------------------------------------------------------------
    def _schedule(self, at: float, priority: int, what: int, x: int) -> None:
        self.eid += 1
        heapq.heappush(self.queue, (at, priority, self.eid, what, x))

    def run(self) -> Result:
        for task in range(self.n):
            self._schedule(0.0, _URGENT, _START, task)
        queue = self.queue
        pop = heapq.heappop
        kinds, amounts, locks, args = self.kinds, self.amounts, self.locks, self.args
        pcs, spin_depth, step = self.pc, self.spin_depth, self._step
        events = 0
        while queue:
            at, _, _, what, x = pop(queue)
            self.now = at
            events += 1
            if what == _RESUME:
                # The event the task waited on happened: finish its op, then go on.
                pc = pcs[x]
                kind = kinds[pc]
                if kind == _ACQUIRE and locks[args[pc]].kind == _SPINLOCK:
                    spin_depth[x] += 1
                elif kind == _ZERO:
                    self.zeroed_bytes += amounts[pc]
                step(x, pc + 1)
            elif what == _TIMER:
                if x == self.timer_gen:
                    self._on_timer()
            elif what == _ARRIVE:
                self._step(x, self.pc[x])
            elif what == _WAKE:
                self._woken(x)
            else:
                self._start(x)
        self.events = events
        return _assemble(self.p, self._raw())

    # -- tasks -----------------------------------------------------------------------------
    def _start(self, task: int) -> None:
        """SimPy's Initialize: sleep until the arrival, or run at once."""
        arrival = self.arrival[task]
        if arrival > 0.0:
            self._schedule(self.now + arrival, _NORMAL, _ARRIVE, task)
            return
        self._step(task, self.pc[task])

    def _step(self, task: int, pc: int) -> None:
        """Interpret ``task`` from ``pc`` until it waits or ends."""
        kinds, args, amounts = self.kinds, self.args, self.amounts
        end = self.end[task]
        stage = self.stage[task]
        while pc < end:
            kind = kinds[pc]
            if kind == _CPU:
                amount = amounts[pc]
                if amount > 0.0:
                    pinned = self.spin_depth[task] > 0
                    self._cpu_run(task, amount, 3 * stage + _WORK, pinned, False)
                    break
            elif kind == _SLEEP:
                amount = amounts[pc]
                if amount > 0.0:
                    self._schedule(self.now + amount, _NORMAL, _RESUME, task)
                    break
            elif kind == _ACQUIRE:
                lock = args[pc]
                if self._acquire(task, lock, stage, False):
                    break
                if self.locks[lock].kind == _SPINLOCK:
                    self.spin_depth[task] += 1
            elif kind == _RELEASE:
                lock = args[pc]
                self._release(task, lock)
                if self.locks[lock].kind == _SPINLOCK:
                    self.spin_depth[task] -= 1
            elif kind == _STAGE_BEGIN:
                self.stage_stack[task].append((stage, self.now))
                stage = self.stage[task] = args[pc]
            elif kind == _STAGE_END:
                outer, began = self.stage_stack[task].pop()
                duration = self.now - began
                self.stage_durations[stage].append(duration)
                self.stage_time[self.task_owner[task], stage] += duration
                stage = self.stage[task] = outer
            elif kind == _GATE_ENTER:
                if self._gate_enter(task, args[pc]):
                    break
            elif kind == _GATE_EXIT:
                for _ in range(max(1, int(amounts[pc]))):  # a signal lets many go
                    self._gate_exit(args[pc])
            elif kind == _ACQUIRE_SHARED:
                if self._acquire(task, args[pc], stage, True):
                    break
            elif kind == _ZERO:
                amount = amounts[pc]
                if amount > 0.0:
                    self._cpu_zero(task, amount, 3 * stage + _ZEROING)
                    break
            elif kind == _POOL_TRY:
                pool = args[pc]
                if self.pool_left[pool] > 0:
                    self.pool_left[pool] -= 1
                    pc += int(amounts[pc])
                    continue
            elif kind == _JUMP:
                pc += int(amounts[pc])
                continue
            elif kind == _GUEST_CPU:
                amount = amounts[pc]
                if amount > 0.0:
                    self._cpu_run(task, amount, 3 * stage + _WORK, False, True)
                    break
            elif kind == _SPAWN:
                branch = self.n + self.spawn_base[task] + args[pc]
                self._schedule(self.now, _URGENT, _START, branch)
            pc += 1
        self.pc[task] = pc
        if pc >= end:
            if task < self.n:
                self.finish[task] = self.now
            else:
                self.branch_finish[task - self.n] = self.now

    # -- locks (as :mod:`.locks`) ----------------------------------------------------------
    def _acquire(self, task: int, index: int, stage: int, shared: bool) -> bool:
        """Take lock ``index``; True if the task must wait for a grant."""
        lock = self.locks[index]
        if lock.kind == _RW:
            free = lock.owner < 0 and (not lock.queue if shared else lock.readers == 0)
            if free:
                if shared:
                    lock.readers += 1
                else:
                    lock.owner = task
                self._take(lock, task, stage)
                return False
        elif lock.owner < 0:
            lock.owner = task
            self._take(lock, task, stage)
            return False
        now = self.now
        waiter = _Waiter(task, stage, now, shared)
        prio = lock.priority[stage] if lock.priority is not None else 0
        lock.seq += 1
        heapq.heappush(lock.queue, (prio, lock.seq, waiter))
        lock.stats.enqueue(now)
        if lock.kind == _SPINLOCK:
            # A spinlock waiter owns a core (preemption off) until it is granted.
            waiter.spin = self._start_spin(3 * stage + _SPIN, index, True, -1.0)
        elif lock.spin_s > 0.0:
            waiter.spin = self._start_spin(3 * stage + _SPIN, index, False, lock.spin_s)
        return True

    def _take(self, lock: _Lock, task: int, stage: int) -> None:
        lock.stats.acquisitions += 1
        lock.acquisitions_by_stage[stage] += 1
        lock.held_since[task] = (self.now, stage)

    def _grant(self, index: int, lock: _Lock, waiter: _Waiter) -> None:
        now = self.now
        task, stage = waiter.task, waiter.stage
        spin = waiter.spin
        if spin is not None and spin.active:
            self._advance()
            self._stop(spin)
            self._settle()
        lock.stats.dequeue(now, now - waiter.since)
        self._take(lock, task, stage)
        self.eid += 1
        heapq.heappush(self.queue, (now, _NORMAL, self.eid, _RESUME, task))

    def _release(self, task: int, index: int) -> None:
        lock = self.locks[index]
        since, _ = lock.held_since.pop(task)
        lock.stats.hold_s += self.now - since
        queue = lock.queue
        if lock.kind != _RW:
            if not queue:
                lock.owner = -1
            elif lock.wake_s <= 0.0 or lock.handoff:
                lock.handoff = False
                waiter = heapq.heappop(queue)[2]
                lock.owner = waiter.task
                self._grant(index, lock, waiter)
            else:
                # Free the lock and wake the head waiter; until it runs, anyone
                # already running may take the lock (acquire's fast path).
                lock.owner = -1
                if not lock.waking:
                    lock.waking = True
                    self._schedule(self.now + lock.wake_s, _NORMAL, _WAKE, index)
            return
        if lock.owner == task:
            lock.owner = -1
        else:
            lock.readers -= 1
        if lock.readers or not queue:
            return
        head = queue[0][2]
        if not head.shared:
            heapq.heappop(queue)
            lock.owner = head.task
            self._grant(index, lock, head)
            return
        # Serve the leading readers, in queue order, up to the first writer.
        while queue and queue[0][2].shared:
            waiter = heapq.heappop(queue)[2]
            lock.readers += 1
            self._grant(index, lock, waiter)

    def _woken(self, index: int) -> None:
        """As ``locks.Mutex._woken``: the head of the queue now is served."""
        lock = self.locks[index]
        lock.waking = False
        if lock.owner < 0:
            waiter = heapq.heappop(lock.queue)[2]
            lock.owner = waiter.task
            self._grant(index, lock, waiter)
        else:
            lock.handoff = True  # stolen while it woke: the next release is the head's

    def _gate_enter(self, task: int, index: int) -> bool:
        gate = self.gates[index]
        gate.stats.acquisitions += 1
        if gate.free > 0:
            gate.free -= 1
            return False
        gate.queue.append((task, self.now))
        gate.stats.enqueue(self.now)
        return True

    def _gate_exit(self, index: int) -> None:
        gate = self.gates[index]
        if gate.head < len(gate.queue):
            task, since = gate.queue[gate.head]
            gate.head += 1
            now = self.now
            gate.stats.dequeue(now, now - since)
            self._schedule(now, _NORMAL, _RESUME, task)  # the permit passes straight on
        else:
            gate.free += 1

    # -- the CPU (as :class:`.cpu.ProcessorSharingCPU`) ------------------------------------
    def _advance(self) -> None:
        dt = self.now - self.last
        if dt > 0.0:
            self.share_clock += self.share * dt
            self.pinned_clock += self.pinned_share * dt
            self.zero_clock += self.zero_speed * dt
            self.guest_clock += self.guest_share * dt
            self.last = self.now

    def _cpu_run(self, task: int, work_s: float, acc: int, pinned: bool, guest: bool) -> None:
        now = self.now
        dt = now - self.last
        if dt > 0.0:  # _advance, inlined: this is the hottest call
            self.share_clock += self.share * dt
            self.pinned_clock += self.pinned_share * dt
            self.zero_clock += self.zero_speed * dt
            self.guest_clock += self.guest_share * dt
            self.last = now
        self.cseq += 1
        if pinned:
            clock = self.pinned_clock
            heapq.heappush(self.pinned, (clock + work_s, self.cseq, task, clock, acc))
        elif guest and self.guest_cap < 1.0:
            clock = self.guest_clock
            heapq.heappush(self.guest, (clock + work_s, self.cseq, task, clock, acc))
        else:
            clock = self.share_clock
            heapq.heappush(self.work, (clock + work_s, self.cseq, task, clock, acc))
        self._settle()

    def _cpu_zero(self, task: int, n_bytes: float, acc: int) -> None:
        self._advance()
        self.cseq += 1
        tag = self.zero_clock + n_bytes / self.zero_rate
        heapq.heappush(self.zeroing, (tag, self.cseq, task, self.share_clock, acc))
        self._settle()

    def _start_spin(self, slot: int, lock: int, pinned: bool, max_s: float) -> _Spin:
        """A waiter burns a core share until stopped, or for ``max_s`` if that is >= 0."""
        self._advance()
        if pinned:
            self.pinned_spinning += 1
            spin = _Spin(self.pinned_clock, slot, lock, True)
        else:
            self.spinning += 1
            spin = _Spin(self.share_clock, slot, lock, False)
        if max_s >= 0.0:
            self.cseq += 1
            heapq.heappush(self.spin_deadlines, (self.now + max_s, self.cseq, spin))
        self._settle()
        return spin

    def _stop(self, spin: _Spin) -> None:
        """Stop a spinner; the clocks must be current, the caller updates rates."""
        spin.active = False
        if spin.pinned:
            self.pinned_spinning -= 1
            spun = self.pinned_clock - spin.start_share
        else:
            self.spinning -= 1
            spun = self.share_clock - spin.start_share
        self.cpu_acc[spin.slot] += spun
        self.lock_spin[spin.lock] += spun

    def _settle(self) -> None:
        cores = self.cores
        pinned_jobs = self.pinned
        n_pinned = len(pinned_jobs) + self.pinned_spinning
        pinned_share = 1.0 if n_pinned <= cores else cores / n_pinned
        left = cores - n_pinned if n_pinned < cores else 0
        work, zeroing, guest = self.work, self.zeroing, self.guest
        m = len(zeroing)
        n_guest = len(guest)
        k = len(work) + m + self.spinning
        bg = self.background_jobs
        fair = 1.0 if k + n_guest + bg <= left else left / (k + n_guest + bg)
        cap = self.guest_cap
        if n_guest and fair > cap:
            guest_share = cap
            rest = left - n_guest * cap
            share = 1.0 if k + bg <= rest else rest / (k + bg)
        else:
            guest_share = share = fair
        if m:
            cap = self.bandwidth / (m * self.zero_rate)
            zero_speed = share if share < cap else cap
        else:
            zero_speed = share
        self.share = share
        self.pinned_share = pinned_share
        self.zero_speed = zero_speed
        self.guest_share = guest_share
        last = self.last
        due = math.inf
        if work and share > 0.0:
            due = last + (work[0][0] - self.share_clock) / share
        if pinned_jobs:
            t = last + (pinned_jobs[0][0] - self.pinned_clock) / pinned_share
            if t < due:
                due = t
        if guest and guest_share > 0.0:
            t = last + (guest[0][0] - self.guest_clock) / guest_share
            if t < due:
                due = t
        if zeroing and zero_speed > 0.0:
            t = last + (zeroing[0][0] - self.zero_clock) / zero_speed
            if t < due:
                due = t
        deadlines = self.spin_deadlines
        if deadlines:
            while deadlines and not deadlines[0][2].active:
                heapq.heappop(deadlines)
            if deadlines and deadlines[0][0] < due:
                due = deadlines[0][0]
        if due < self.timer_at:
            self.timer_at = due
            self.timer_gen += 1
            delay = due - last
            self._schedule(
                self.now + (delay if delay > 0.0 else 0.0), _NORMAL, _TIMER, self.timer_gen
            )

    def _on_timer(self) -> None:
        self.timer_at = math.inf
        self._advance()
        tick = math.ulp(self.last)
        share = self.share_clock
        self._finish_due(self.work, share, self.share * tick, share)
        if self.pinned:
            pinned = self.pinned_clock
            self._finish_due(self.pinned, pinned, self.pinned_share * tick, pinned)
        if self.guest:
            g = self.guest_clock
            self._finish_due(self.guest, g, self.guest_share * tick, g)
        if self.zeroing:
            self._finish_due(self.zeroing, self.zero_clock, self.zero_speed * tick, share)
        deadlines = self.spin_deadlines
        if deadlines:
            now = self.last
            limit = now + _REL_EPS * (now if now > 1.0 else 1.0)
            while deadlines and deadlines[0][0] <= limit:
                spin = heapq.heappop(deadlines)[2]
                if spin.active:
                    self._stop(spin)
        self._settle()

    def _finish_due(self, heap: list[_Job], progress: float, slack: float, clock: float) -> None:
        limit = progress + _REL_EPS * (progress if progress > 1.0 else 1.0) + slack
        pop = heapq.heappop
        push = heapq.heappush
        acc = self.cpu_acc
        now = self.now
        queue = self.queue
        eid = self.eid
        while heap and heap[0][0] <= limit:
            _, _, task, started, slot = pop(heap)
            acc[slot] += clock - started
            eid += 1
            push(queue, (now, _NORMAL, eid, _RESUME, task))
        self.eid = eid

    def _raw(self) -> _Raw:
        """This run's counters in the form both loops hand to :func:`_assemble`."""
        counters = [lock.stats for lock in self.locks] + [g.stats for g in self.gates]
        n_stages = len(self.p.stage_names)
        return _Raw(
            finish=np.concatenate([self.finish, self.branch_finish]),
            cpu_acc=self.cpu_acc,
            lock_spin=self.lock_spin,
            counts=[[c.acquisitions, c.contended, c.waiters, c.max_waiters] for c in counters],
            sums=[[c.wait_s, c.hold_s, c.contended_wall_s] for c in counters],
            acquisitions_by_stage=[lock.acquisitions_by_stage for lock in self.locks],
            pool_left=self.pool_left,
            durations=[np.asarray(self.stage_durations[s]) for s in range(n_stages)],
            stage_time=self.stage_time,
            zeroed_bytes=self.zeroed_bytes,
            events=self.events,
        )


# -- the compiled loop -------------------------------------------------------------------------
def _run_jit(p: Program) -> Result:
    """Run the numba kernel (:mod:`._fast_nb`) on ``p``."""
    out, pool_left = _kernel(p)
    finish, cpu_acc, lock_spin, cnt, cnf, by_stage, dur_stage, dur_val, stage_time = out[:9]
    zeroed, events = out[9:]
    n_stages = len(p.stage_names)
    return _assemble(
        p,
        _Raw(
            finish=finish,
            cpu_acc=cpu_acc.tolist(),
            lock_spin=lock_spin.tolist(),
            counts=cnt.tolist(),
            sums=cnf[:, :3].tolist(),
            acquisitions_by_stage=by_stage.tolist(),
            pool_left=pool_left.tolist(),
            durations=[dur_val[dur_stage == s] for s in range(n_stages)],
            stage_time=stage_time,
            zeroed_bytes=float(zeroed),
            events=int(events),
        ),
    )


def _kernel(p: Program) -> tuple[tuple[Any, ...], np.ndarray]:
    """The kernel's raw outputs for ``p`` and the pools' capacities left."""
    try:
        from ._fast_nb import run_kernel
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("FastExecutor(jit=True) needs numba: pip install numba") from exc
    m = p.machine
    n_stages = len(p.stage_names)
    prio = np.zeros((len(p.locks), n_stages + 1), dtype=np.int64)
    for i, spec in enumerate(p.locks):
        if spec.stage_priority:
            given = dict(spec.stage_priority)
            prio[i, :n_stages] = [given.get(name, 0) for name in p.stage_names]
    pool_left = np.array([pool.capacity for pool in p.pools], dtype=np.int64)
    out = run_kernel(
        p.op_kind,
        p.op_arg,
        p.op_amount,
        p.offsets,
        p.arrival_s,
        p.branch_parent,
        p.spawn_base,
        n_stages,
        np.array([int(spec.kind) for spec in p.locks], dtype=np.int64),
        prio,
        np.array([spec.spin_s for spec in p.locks], dtype=np.float64),
        np.array([spec.wake_s for spec in p.locks], dtype=np.float64),
        np.array([gate.permits for gate in p.gates], dtype=np.int64),
        pool_left,
        np.array(
            [
                float(m.cores - m.reserved_cores if m.reserved_cores else m.cores),
                m.guest_cpu_quota,
                m.background_jobs,
                m.zero_bytes_per_core_s,
                m.memory_bandwidth_bytes_s,
            ]
        ),
    )
    return out, pool_left


# -- the result (as :meth:`.executor._Run._result`, without the recording) -------------------
@dataclass(frozen=True, slots=True)
class _Raw:
    """What a loop counted, in plain containers.

    ``finish``: per task (sandboxes, then branches), NaN if it never ended;
    ``counts``/``sums``: per lock then gate, a :class:`.locks.ContentionCounter`'s
    ``acquisitions, contended, waiters, max_waiters`` and ``wait_s, hold_s,
    contended_wall_s``; ``durations``: per stage, the durations in the order
    the stage ended (the order the reference sums them in).
    """

    finish: np.ndarray
    cpu_acc: list[float]
    lock_spin: list[float]
    counts: list[list[int]]
    sums: list[list[float]]
    acquisitions_by_stage: list[list[int]]
    pool_left: list[int]
    durations: list[np.ndarray]
    stage_time: np.ndarray
    zeroed_bytes: float
    events: int


def _check_finished(p: Program, finish: np.ndarray) -> None:
    """A :class:`DeadlockError` if a task (sandbox or branch) never ended."""
    stuck = np.flatnonzero(np.isnan(finish))
    if stuck.size:
        raise DeadlockError(
            f"deadlock: {stuck.size} tasks never finished (first: {stuck[:5].tolist()}; "
            f"tasks from {p.n_sandboxes} on are branches)"
        )


def _assemble(p: Program, raw: _Raw) -> Result:
    n = p.n_sandboxes
    _check_finished(p, raw.finish)
    arrival = p.arrival_s.copy()
    finish = raw.finish[:n].copy()
    makespan = float(finish.max() - arrival.min())
    latencies = finish - arrival
    stages = {}
    for name, d in zip(p.stage_names, raw.durations, strict=True):
        stages[name] = StageStats(
            mean_s=float(d.mean()) if d.size else 0.0,
            p99_s=float(np.percentile(d, 99.0)) if d.size else 0.0,
            total_s=float(d.sum()),
        )
    names = [*p.stage_names, "-"]
    locks = {}
    for i, spec in enumerate(p.locks):
        acquisitions, contended, _, max_waiters = raw.counts[i]
        wait_s, hold_s, contended_wall_s = raw.sums[i]
        locks[spec.name] = LockStats(
            kind=spec.kind.name.lower(),
            acquisitions=acquisitions,
            contended=contended,
            wait_s=wait_s,
            contended_wall_s=contended_wall_s,
            hold_s=hold_s,
            max_waiters=max_waiters,
            spin_core_s=raw.lock_spin[i],
            acquisitions_by_stage={
                name: count
                for name, count in zip(names, raw.acquisitions_by_stage[i], strict=True)
                if count
            },
        )
    gates = {}
    for g, gate in enumerate(p.gates):
        if gate.signal:
            continue  # events between sandboxes, not admission
        entries, waited, _, _ = raw.counts[len(p.locks) + g]
        wait_s, _, contended_wall_s = raw.sums[len(p.locks) + g]
        gates[gate.name] = GateStats(
            permits=gate.permits,
            entries=entries,
            waited=waited,
            wait_s=wait_s,
            contended_wall_s=contended_wall_s,
        )
    pools = {
        spec.name: PoolStats(
            capacity=spec.capacity, taken=spec.capacity - left, memory_mib=spec.memory_mib
        )
        for spec, left in zip(p.pools, raw.pool_left, strict=True)
        if not spec.ticket  # a right to do something once, not devices
    }
    cpu_acc = [raw.cpu_acc[3 * s : 3 * s + 3] for s in range(len(names))]
    by_stage = {
        names[s]: dict(zip(REASONS, acc, strict=True)) for s, acc in enumerate(cpu_acc) if any(acc)
    }
    work, spin, zero = (sum(acc[r] for acc in cpu_acc) for r in range(3))
    busy = work + spin + zero
    cores = p.machine.cores
    cpu = CpuStats(
        cores=cores,
        busy_core_s=busy,
        work_core_s=work,
        spin_core_s=spin,
        zero_core_s=zero,
        utilisation=busy / (cores * makespan) if makespan > 0 else 0.0,
        by_stage=by_stage,
        zeroed_bytes=raw.zeroed_bytes,
    )
    stage_time = {name: raw.stage_time[:, s] for s, name in enumerate(p.stage_names)}
    branch_finish = _branch_finish(p, raw.finish[n:])
    branches = {}
    for name, done in branch_finish.items():
        have = ~np.isnan(done)
        branches[name] = StartupStats.of(done[have] - arrival[have])
    ready = None
    if p.ready_branches:
        ready_at = finish.copy()
        for name in p.ready_branches:
            ready_at = np.fmax(ready_at, branch_finish[name])
        ready = StartupStats.of(ready_at - arrival)
    return Result(
        n_sandboxes=n,
        makespan_s=makespan,
        startup=StartupStats.of(latencies),
        stages=stages,
        locks=locks,
        gates=gates,
        pools=pools,
        cpu=cpu,
        pool_memory_mib=p.pool_memory_mib,
        events=raw.events,
        arrival_s=arrival,
        finish_s=finish,
        steps=Result.step_stats(stage_time, latencies, frozenset(p.branch_names)),
        ready=ready,
        branches=branches,
        stage_time_s=stage_time,
        branch_finish_s=branch_finish,
        recording=None,
    )


def _branch_finish(p: Program, done: np.ndarray) -> dict[str, np.ndarray]:
    """Per branch kind (in order of first appearance), per sandbox: when its
    last branch of that kind ended (NaN: it has none)."""
    out: dict[str, np.ndarray] = {}
    if not done.size:
        return out
    kinds, first = np.unique(p.branch_kind, return_index=True)
    for kind in kinds[np.argsort(first)].tolist():
        mine = p.branch_kind == kind
        col = np.full(p.n_sandboxes, np.nan)
        # fmax is exact and order-free: the same maxima as one branch at a time.
        np.fmax.at(col, p.branch_parent[mine], done[mine])
        out[p.branch_names[kind]] = col
    return out
