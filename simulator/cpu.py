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
time; a timer made stale by a later change is ignored when it fires.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable

import simpy

__all__ = ["ProcessorSharingCPU", "SpinHandle"]

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
        env: simpy.Environment,
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
        self._timer_at = math.inf
        self._timer_gen = 0

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

        The hot path of every run: one method, locals only.
        """
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
            self._timer_gen += 1
            gen = self._timer_gen
            delay = due - last
            timer = self.env.timeout(delay if delay > 0.0 else 0.0)
            timer.callbacks.append(lambda _ev: self._on_timer(gen))

    def _on_timer(self, gen: int) -> None:
        if gen != self._timer_gen:
            return
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
