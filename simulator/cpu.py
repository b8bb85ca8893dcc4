"""A pool of cores shared by egalitarian processor sharing, in O(log n) per event.

With ``k`` runnable jobs on ``N`` cores each job gets ``s = min(1, N/k)`` of a
core. Instead of updating every job's remaining work at every change, the pool
keeps a *share clock* ``S(t) = ∫ s dt``: a job of ``w`` core-seconds started
when the clock read ``S0`` finishes when it reads ``S0 + w`` (its finish tag),
so the next completion is the smallest tag in a heap.

Jobs come in two tiers:

- *pinned* jobs cannot be preempted — kernel code inside a spinlock, and a
  spinlock waiter, run with preemption disabled and own their core. With
  ``P`` of them each gets ``p = min(1, N/P)`` of a core (clock ``SP``);
- all other jobs share what is left: ``s = min(1, max(N - P, 0)/k)`` each.

Within the shared tier there are four kinds:

- *work*: progresses at ``s``;
- *guest work* (a sandbox's vCPUs): like work, but never faster than the
  sandbox's CPU quota ``q`` (CFS bandwidth control of its vCPU threads). Shares
  are water-filled: with ``k`` jobs of which ``g`` are guests, if ``left/k``
  exceeds ``q`` the guests get ``q`` and the others split what they leave;
  a clock ``G = ∫ g dt`` tracks the guests' rate;
- *zeroing*: also holds a core share ``s`` but progresses at
  ``z = min(s, B / (m·c))`` where ``m`` zeroing jobs share the memory bandwidth
  ``B`` and ``c`` is the per-core zeroing rate; a second clock ``Z = ∫ z dt``
  tracks its progress (a core stalled on memory is still busy);
- *spinning* (a mutex's optimistic spin, which yields when asked): holds a
  share until told to stop, never completes by itself.

Other work on the node (``background_jobs`` always-runnable tasks, e.g. the
load average of a shared host) takes shares in this tier like any job and is
neither accounted nor reported.

Every job's core-seconds are its tier clock's advance over its life, so CPU
accounting is exact and costs nothing per event. One timer is pending at a
time, in the :class:`TimerEnvironment`'s slot: a change that brings the next
completion forward replaces it, one that puts it off lets it fire early.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable

import simpy
from simpy.core import EmptySchedule, StopSimulation
from simpy.events import NORMAL, EventPriority

__all__ = ["ProcessorSharingCPU", "SpinHandle", "TimerEnvironment"]

# Completions within this relative distance of the clock count as due:
# the clock is advanced by products of floats and lands a few ulps off a tag.
_REL_EPS = 1e-12


def _finish_due(
    heap: list[tuple[float, int, simpy.Event, float, Callable[[float], None]]],
    progress: float,
    slack: float,
    cpu_clock: float,
) -> None:
    """Complete the jobs of ``heap`` whose finish tag the ``progress`` clock has
    reached; each is charged ``cpu_clock`` minus the reading it started at."""
    limit = progress + _REL_EPS * (progress if progress > 1.0 else 1.0) + slack
    pop = heapq.heappop
    while heap and heap[0][0] <= limit:
        _, _, ev, started, on_cpu = pop(heap)
        on_cpu(cpu_clock - started)
        ev.succeed()


class TimerEnvironment(simpy.Environment):
    """A SimPy environment with one timer slot beside its event heap.

    The one place that touches SimPy's internals (``_now``, ``_queue``,
    ``_eid``, ``Event._ok``/``_value``/``_defused``): SimPy is pinned to the
    4.1 series, and ``tests/simulator/test_timer_environment.py`` checks that
    what this class relies on is still there and still behaves.

    Every change that brings the CPU's next completion forward supersedes its
    timer. As SimPy timeouts, half of a storm's events were the CPU's timers
    (18 225 of 35 286 for 400 ipvtap sandboxes), 6 387 of them superseded,
    each still pushed, popped and ignored. The slot holds the timer's key in
    the heap's own order, ``(time, NORMAL, eid)``, and takes its eid as a
    timeout would, so events run, and are numbered, in exactly the order
    they were as timeouts (the compiled executors depend on it). With the
    fast path of the CPU's settle, the 400-sandbox storm went from 69 to 51
    ms (best of 25 runs); inlining :meth:`step` took it to 47 ms.
    """

    def __init__(self, initial_time: float = 0.0) -> None:
        super().__init__(initial_time)
        self._timer_at = math.inf
        self._timer_eid = 0
        self._timer_fire: Callable[[], None] | None = None

    def set_timer(self, delay: float, fire: Callable[[], None]) -> None:
        """Call ``fire()`` in ``delay`` seconds, in place of any pending timer."""
        self._timer_at = self._now + delay  # the sum a Timeout's schedule makes
        self._timer_eid = next(self._eid)
        self._timer_fire = fire

    def events_numbered(self) -> int:
        """How many events SimPy has numbered so far (timers included): the
        run's event count. It takes a number itself, so read it once, at the end."""
        return next(self._eid)

    def peek(self) -> float:
        head = self._queue[0][0] if self._queue else math.inf
        return self._timer_at if self._timer_at < head else head

    def step(self) -> None:
        at = self._timer_at
        queue = self._queue
        if at != math.inf:
            if queue:
                t, priority, eid, _ = queue[0]
                # The timer is (at, NORMAL, eid); NORMAL is the lowest priority.
                first = at < t or (at == t and priority == NORMAL and self._timer_eid < eid)
            else:
                first = True
            if first:
                self._now = at
                self._timer_at = math.inf
                fire = self._timer_fire
                assert fire is not None
                fire()
                return
        # simpy.Environment.step, inlined: this is the loop of every run.
        try:
            self._now, _, _, event = heapq.heappop(queue)
        except IndexError:
            raise EmptySchedule from None
        callbacks, event.callbacks = event.callbacks, None  # type: ignore[assignment]
        try:
            for callback in callbacks:
                callback(event)
        except StopSimulation:
            event.callbacks = callbacks[callbacks.index(callback) + 1 :]
            self.schedule(event, EventPriority(-1))
            raise
        if not event._ok and not hasattr(event, "_defused"):
            exc = type(event._value)(*event._value.args)
            exc.__cause__ = event._value
            raise exc


class SpinHandle:
    """A spinning job; pass it back to :meth:`ProcessorSharingCPU.stop_spin`."""

    __slots__ = ("account", "active", "pinned", "start_share")

    def __init__(self, start_share: float, account: Callable[[float], None], pinned: bool) -> None:
        self.start_share = start_share
        self.account = account
        self.pinned = pinned
        self.active = True


class ProcessorSharingCPU:
    """``cores`` cores shared by all runnable jobs.

    ``run`` and ``zero`` return events that succeed when the job is done;
    ``on_cpu(core_s)`` is called with the core-seconds the job received, for
    accounting by whoever submitted it.
    """

    def __init__(
        self,
        env: TimerEnvironment,
        *,
        cores: float,
        zero_bytes_per_core_s: float,
        memory_bandwidth_bytes_s: float,
        guest_cap: float = 1.0,
        background_jobs: float = 0.0,
        on_change: Callable[[float, float, float, float], None] | None = None,
    ) -> None:
        self.env = env
        self.cores = cores
        self.guest_cap = guest_cap
        self.background_jobs = background_jobs
        self.zero_rate = zero_bytes_per_core_s
        self.bandwidth = memory_bandwidth_bytes_s
        self._on_change = on_change
        self._share_clock = 0.0  # S(t)
        self._pinned_clock = 0.0  # SP(t)
        self._zero_clock = 0.0  # Z(t), in core-seconds of zeroing at full speed
        self._guest_clock = 0.0  # G(t)
        self._last = 0.0
        self._share = 1.0  # s
        self._pinned_share = 1.0  # p
        self._zero_speed = 1.0  # z
        self._guest_share = 1.0  # g
        # Heaps of (finish tag, seq, event, start clock, on_cpu).
        self._work: list[tuple[float, int, simpy.Event, float, Callable[[float], None]]] = []
        self._pinned: list[tuple[float, int, simpy.Event, float, Callable[[float], None]]] = []
        self._zeroing: list[tuple[float, int, simpy.Event, float, Callable[[float], None]]] = []
        self._guest: list[tuple[float, int, simpy.Event, float, Callable[[float], None]]] = []
        self._spinning = 0
        self._pinned_spinning = 0
        # Spinners that give up after a while: (deadline, seq, handle). Kept
        # here, not as SimPy timers, so a spin costs no event of its own;
        # handles stopped earlier are dropped lazily.
        self._spin_deadlines: list[tuple[float, int, SpinHandle]] = []
        self._seq = 0
        self._timer_at = math.inf  # when the pending timer fires (inf: none)
        self._fire = self._on_timer

    # -- state -----------------------------------------------------------
    @property
    def runnable(self) -> int:
        return (
            len(self._work)
            + len(self._guest)
            + len(self._zeroing)
            + self._spinning
            + len(self._pinned)
            + self._pinned_spinning
        )

    @property
    def spinning(self) -> int:
        return self._spinning + self._pinned_spinning

    def _advance(self) -> None:
        now = self.env.now
        dt = now - self._last
        if dt > 0.0:
            self._share_clock += self._share * dt
            self._pinned_clock += self._pinned_share * dt
            self._zero_clock += self._zero_speed * dt
            self._guest_clock += self._guest_share * dt
            self._last = now

    def _settle(self) -> None:
        """After a change in the job set: new rates, and a timer for the next due event.

        The hot path of every run: locals only, and most changes find plain
        work and spinners alone, for which :meth:`_rates` reduces to one share
        (the same floats: with no other tier its sums add only zeros).
        """
        work = self._work
        if (
            self._pinned
            or self._pinned_spinning
            or self._zeroing
            or self._guest
            or self.background_jobs
            or self._on_change is not None
        ):
            due = self._rates()
        else:
            cores = self.cores
            k = len(work) + self._spinning
            share = 1.0 if k <= cores else cores / k
            self._share = self._zero_speed = self._guest_share = share
            self._pinned_share = 1.0
            due = math.inf
            if work and share > 0.0:
                due = self._last + (work[0][0] - self._share_clock) / share
        deadlines = self._spin_deadlines
        if deadlines:
            while deadlines and not deadlines[0][2].active:
                heapq.heappop(deadlines)
            if deadlines and deadlines[0][0] < due:
                due = deadlines[0][0]
        # A pending timer that fires early is harmless (it finds nothing due
        # and reschedules); only an earlier completion needs a new timer.
        if due < self._timer_at:
            self._timer_at = due
            delay = due - self._last
            self.env.set_timer(delay if delay > 0.0 else 0.0, self._fire)

    def _rates(self) -> float:
        """Every tier's rate after a change; returns when the next job is due."""
        cores = self.cores
        pinned_jobs = self._pinned
        n_pinned = len(pinned_jobs) + self._pinned_spinning
        pinned_share = 1.0 if n_pinned <= cores else cores / n_pinned
        left = cores - n_pinned if n_pinned < cores else 0
        work = self._work
        zeroing = self._zeroing
        guest = self._guest
        m = len(zeroing)
        n_guest = len(guest)
        k = len(work) + m + self._spinning
        # Other work on the node: always-runnable tasks that take their share too.
        bg = self.background_jobs
        fair = 1.0 if k + n_guest + bg <= left else left / (k + n_guest + bg)
        cap = self.guest_cap
        if n_guest and fair > cap:
            # The guests are held to their quota; the others split the rest.
            guest_share = cap
            rest = left - n_guest * cap
            share = 1.0 if k + bg <= rest else rest / (k + bg)
        else:
            guest_share = share = fair
        if m:
            # Bandwidth cap per zeroing job, in cores' worth of zeroing speed.
            cap = self.bandwidth / (m * self.zero_rate)
            zero_speed = share if share < cap else cap
        else:
            zero_speed = share
        self._share = share
        self._pinned_share = pinned_share
        self._zero_speed = zero_speed
        self._guest_share = guest_share
        last = self._last
        if self._on_change is not None:
            self._on_change(
                last,
                n_pinned * pinned_share + k * share + n_guest * guest_share,
                self._pinned_spinning * pinned_share + self._spinning * share,
                m * zero_speed * self.zero_rate,
            )
        due = math.inf
        if work and share > 0.0:
            due = last + (work[0][0] - self._share_clock) / share
        if pinned_jobs:
            t = last + (pinned_jobs[0][0] - self._pinned_clock) / pinned_share
            if t < due:
                due = t
        if guest and guest_share > 0.0:
            t = last + (guest[0][0] - self._guest_clock) / guest_share
            if t < due:
                due = t
        if zeroing and zero_speed > 0.0:
            t = last + (zeroing[0][0] - self._zero_clock) / zero_speed
            if t < due:
                due = t
        return due

    def _on_timer(self) -> None:
        self._timer_at = math.inf
        self._advance()
        # Also due: what is left below a clock's gain over one ulp of time; no
        # timer can land before that, so waiting would re-fire at once, forever.
        tick = math.ulp(self._last)
        share = self._share_clock
        _finish_due(self._work, share, self._share * tick, share)
        if self._pinned:
            pinned = self._pinned_clock
            _finish_due(self._pinned, pinned, self._pinned_share * tick, pinned)
        if self._guest:
            g = self._guest_clock
            _finish_due(self._guest, g, self._guest_share * tick, g)
        if self._zeroing:
            _finish_due(self._zeroing, self._zero_clock, self._zero_speed * tick, share)
        pop = heapq.heappop
        deadlines = self._spin_deadlines
        if deadlines:
            now = self._last
            limit = now + _REL_EPS * (now if now > 1.0 else 1.0)
            while deadlines and deadlines[0][0] <= limit:
                handle = pop(deadlines)[2]
                if handle.active:
                    self._stop(handle)
        self._settle()

    # -- jobs ------------------------------------------------------------
    def run(
        self,
        work_s: float,
        on_cpu: Callable[[float], None],
        *,
        pinned: bool = False,
        guest: bool = False,
    ) -> simpy.Event:
        """Run ``work_s`` core-seconds; the event succeeds when it is done.

        ``pinned``: the work cannot be preempted (it runs under a spinlock).
        ``guest``: the work runs on a sandbox's vCPUs, within its CPU quota.
        """
        ev = simpy.Event(self.env)
        if work_s <= 0.0:
            ev.succeed()
            return ev
        self._advance()
        self._seq += 1
        if pinned:
            clock = self._pinned_clock
            heapq.heappush(self._pinned, (clock + work_s, self._seq, ev, clock, on_cpu))
        elif guest and self.guest_cap < 1.0:
            # A quota of a core or more never binds a single thread: plain work.
            clock = self._guest_clock
            heapq.heappush(self._guest, (clock + work_s, self._seq, ev, clock, on_cpu))
        else:
            clock = self._share_clock
            heapq.heappush(self._work, (clock + work_s, self._seq, ev, clock, on_cpu))
        self._settle()
        return ev

    def zero(self, n_bytes: float, on_cpu: Callable[[float], None]) -> simpy.Event:
        """Clear ``n_bytes``; the event succeeds when the last byte is zero."""
        ev = simpy.Event(self.env)
        if n_bytes <= 0.0:
            ev.succeed()
            return ev
        self._advance()
        self._seq += 1
        tag = self._zero_clock + n_bytes / self.zero_rate
        heapq.heappush(self._zeroing, (tag, self._seq, ev, self._share_clock, on_cpu))
        self._settle()
        return ev

    def start_spin(
        self,
        on_cpu: Callable[[float], None],
        *,
        pinned: bool = False,
        max_s: float | None = None,
    ) -> SpinHandle:
        """Start a job that burns a core share until :meth:`stop_spin`, or for
        at most ``max_s`` seconds (a mutex waiter that then goes to sleep).

        ``pinned``: a spinlock waiter, which owns its core (preemption off).
        """
        self._advance()
        if pinned:
            self._pinned_spinning += 1
            start = self._pinned_clock
        else:
            self._spinning += 1
            start = self._share_clock
        handle = SpinHandle(start, on_cpu, pinned)
        if max_s is not None:
            self._seq += 1
            heapq.heappush(self._spin_deadlines, (self.env.now + max_s, self._seq, handle))
        # A spinner only slows the others, except that its deadline may be
        # the next thing due: settle (rates, and a timer if one is needed).
        self._settle()
        return handle

    def stop_spin(self, handle: SpinHandle) -> None:
        if not handle.active:
            return
        self._advance()
        self._stop(handle)
        self._settle()

    def _stop(self, handle: SpinHandle) -> None:
        """Stop a spinner; the clocks must be current, the caller updates rates."""
        handle.active = False
        if handle.pinned:
            self._pinned_spinning -= 1
            handle.account(self._pinned_clock - handle.start_share)
        else:
            self._spinning -= 1
            handle.account(self._share_clock - handle.start_share)

    def __repr__(self) -> str:
        return f"ProcessorSharingCPU(cores={self.cores}, runnable={self.runnable})"
