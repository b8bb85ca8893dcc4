"""Locks and admission gates for the SimPy executor.

Every ``acquire`` takes the fast path without an event when the resource is
free (the caller just continues), and otherwise returns an event that
succeeds when the resource is handed over. Ownership is handed to the next
waiter on release, so a released lock cannot be stolen by a newcomer.

Grant order is a policy: each waiter carries a key ``(priority, seq)``; the
priority comes from the waiter's current stage (``stage_priority``), ``seq``
is arrival order, so equal priorities are served FIFO.

Only SimPy's public API is used here (its internals are :class:`.cpu.TimerEnvironment`'s).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import simpy

from ._contention import ContentionCounter
from .cpu import ProcessorSharingCPU, SpinHandle

__all__ = ["ContentionCounter", "Gate", "Mutex", "RWLock", "SpinLock"]

# (lock index, sandbox, stage, is_hold, begin, end)
SpanSink = Callable[[int, int, int, bool, float, float], None]


@dataclass(slots=True)
class _Waiter:
    event: simpy.Event
    owner: int
    stage: int
    since: float
    shared: bool = False
    spin: SpinHandle | None = None


class _QueuedLock:
    """Shared waiting-queue machinery of the lock kinds."""

    def __init__(
        self,
        env: simpy.Environment,
        *,
        index: int,
        priority_by_stage: Sequence[int],
        cpu: ProcessorSharingCPU,
        spin_account: Sequence[Callable[[float], None]],
        spans: SpanSink | None,
    ) -> None:
        self.env = env
        self.index = index
        self.stats = ContentionCounter()
        self._priority = priority_by_stage
        self._queue: list[tuple[int, int, _Waiter]] = []
        self._seq = 0
        self._cpu = cpu
        self._spin_account = spin_account
        self._spans = spans
        self._held_since: dict[int, tuple[float, int]] = {}
        self.acquisitions_by_stage = [0] * len(spin_account)
        self.wait_s_by_stage = [0.0] * len(spin_account)

    def _enqueue(self, owner: int, stage: int, shared: bool = False) -> _Waiter:
        now = self.env.now
        waiter = _Waiter(simpy.Event(self.env), owner, stage, now, shared)
        self._seq += 1
        heapq.heappush(self._queue, (self._priority[stage], self._seq, waiter))
        self.stats.enqueue(now)
        return waiter

    def _take(self, owner: int, stage: int) -> None:
        self.stats.acquisitions += 1
        self.acquisitions_by_stage[stage] += 1
        self._held_since[owner] = (self.env.now, stage)

    def _grant(self, waiter: _Waiter) -> None:
        now = self.env.now
        if waiter.spin is not None:
            self._cpu.stop_spin(waiter.spin)
        self.stats.dequeue(now, now - waiter.since)
        self.wait_s_by_stage[waiter.stage] += now - waiter.since
        if self._spans is not None:
            self._spans(self.index, waiter.owner, waiter.stage, False, waiter.since, now)
        self._take(waiter.owner, waiter.stage)
        waiter.event.succeed()

    def _drop(self, owner: int) -> None:
        now = self.env.now
        since, stage = self._held_since.pop(owner)
        self.stats.hold_s += now - since
        if self._spans is not None:
            self._spans(self.index, owner, stage, True, since, now)

    def _spin(self, waiter: _Waiter, *, pinned: bool = False, max_s: float | None = None) -> None:
        waiter.spin = self._cpu.start_spin(
            self._spin_account[waiter.stage], pinned=pinned, max_s=max_s
        )


class Mutex(_QueuedLock):
    """A sleeping lock; a waiter may spin up to ``spin_s`` before it sleeps."""

    def __init__(
        self,
        env: simpy.Environment,
        *,
        spin_s: float = 0.0,
        wake_s: float = 0.0,
        dispatch_s: float = 0.0,
        **kw: object,
    ) -> None:
        super().__init__(env, **kw)  # type: ignore[arg-type]
        self.spin_s = spin_s
        self.wake_s = wake_s
        self.dispatch_s = dispatch_s
        self.owner: int | None = None
        self._waking = False  # a wake-up is on its way to the head waiter
        self._handoff = False  # the head waiter lost a race once: hand to it directly

    def acquire(self, owner: int, stage: int) -> simpy.Event | None:
        if self.owner is None:
            self.owner = owner
            self._take(owner, stage)
            return None
        waiter = self._enqueue(owner, stage)
        self._wait(waiter)
        return waiter.event

    def _wait(self, waiter: _Waiter) -> None:
        """How a waiter waits: spin up to ``spin_s`` on a core, then sleep."""
        if self.spin_s > 0.0:
            self._spin(waiter, max_s=self.spin_s)

    def release(self, owner: int) -> None:
        self._drop(owner)
        if not self._queue:
            self.owner = None
        elif (self.wake_s <= 0.0 and self.dispatch_s <= 0.0) or self._handoff:
            self._handoff = False
            waiter = heapq.heappop(self._queue)[2]
            self.owner = waiter.owner
            self._grant(waiter)
        else:
            # Free the lock and wake the head waiter; until it runs, anyone
            # already running may take the lock (acquire's fast path).
            self.owner = None
            if not self._waking:
                self._waking = True
                timer = self.env.timeout(self._wake_delay())
                timer.callbacks.append(self._woken)

    def _wake_delay(self) -> float:
        """``wake_s``, and with ``dispatch_s`` the woken waiter's turn for a
        core among the jobs runnable now (LockSpec's rule)."""
        if self.dispatch_s <= 0.0:
            return self.wake_s
        cpu = self._cpu
        runnable = cpu.runnable + cpu.background_jobs
        cores = cpu.cores
        return self.wake_s + self.dispatch_s * (runnable / cores if runnable > cores else 1.0)

    def _woken(self, _event: simpy.Event) -> None:
        """The woken waiter runs. It is served as the head of the queue *now*:
        a higher-priority waiter that queued behind a stealer meanwhile goes
        first (the wake-up is the lock's, not the task's), so a free lock never
        keeps a queue."""
        self._waking = False
        if self.owner is None:
            waiter = heapq.heappop(self._queue)[2]
            self.owner = waiter.owner
            self._grant(waiter)
        else:
            self._handoff = True  # stolen while it woke: the next release is the head's


class SpinLock(Mutex):
    """A spinlock: every waiter owns a core (preemption off) until it gets the lock.

    The executor runs the holder's CPU work pinned as well.
    """

    def _wait(self, waiter: _Waiter) -> None:
        self._spin(waiter, pinned=True)


class RWLock(_QueuedLock):
    """A sleeping reader-writer lock, fair by arrival.

    Policy: a reader joins the readers inside only while nobody waits (so a
    waiting writer is never starved by a stream of readers); on release the
    head of the queue is served, and when the head is a reader, every reader
    up to the next writer in queue order is served with it.
    """

    def __init__(self, env: simpy.Environment, **kw: object) -> None:
        super().__init__(env, **kw)  # type: ignore[arg-type]
        self.readers = 0
        self.writer: int | None = None

    def acquire(self, owner: int, stage: int) -> simpy.Event | None:
        if self.writer is None and self.readers == 0:
            self.writer = owner
            self._take(owner, stage)
            return None
        return self._enqueue(owner, stage).event

    def acquire_shared(self, owner: int, stage: int) -> simpy.Event | None:
        if self.writer is None and not self._queue:
            self.readers += 1
            self._take(owner, stage)
            return None
        return self._enqueue(owner, stage, shared=True).event

    def release(self, owner: int) -> None:
        self._drop(owner)
        if self.writer == owner:
            self.writer = None
        else:
            self.readers -= 1
        if self.readers or not self._queue:
            return
        head = self._queue[0][2]
        if not head.shared:
            heapq.heappop(self._queue)
            self.writer = head.owner
            self._grant(head)
            return
        # Serve the leading readers, in queue order, up to the first writer.
        while self._queue and self._queue[0][2].shared:
            waiter = heapq.heappop(self._queue)[2]
            self.readers += 1
            self._grant(waiter)


class Gate:
    """An admission gate: a counting semaphore with a FIFO queue."""

    def __init__(self, env: simpy.Environment, permits: int) -> None:
        self.env = env
        self.free = permits
        self.stats = ContentionCounter()
        self._queue: list[tuple[simpy.Event, float]] = []
        self._head = 0

    def enter(self) -> simpy.Event | None:
        self.stats.acquisitions += 1
        if self.free > 0:
            self.free -= 1
            return None
        ev = simpy.Event(self.env)
        self._queue.append((ev, self.env.now))
        self.stats.enqueue(self.env.now)
        return ev

    def exit(self) -> None:
        if self._head < len(self._queue):
            ev, since = self._queue[self._head]
            self._head += 1
            now = self.env.now
            self.stats.dequeue(now, now - since)
            ev.succeed()  # the permit passes straight to the next in line
        else:
            self.free += 1
