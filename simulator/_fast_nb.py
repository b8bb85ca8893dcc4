"""The compiled executor's loop (``FastExecutor``: "compiled" with numba, "python" interpreted).

The reference's algorithm (:mod:`.simpy_executor`, :mod:`.cpu`, :mod:`.locks`)
over flat NumPy arrays: the same events in the same order and the same
float operations in the same order, with other data structures where they
pop the same order faster. :func:`run_kernel` returns raw counters;
:mod:`.fast` has :func:`._build.build_result` assemble the :class:`Result`.
No ``fastmath``: the floats must round as the reference's do. The op and
lock codes are :class:`.program.OpKind`'s and :class:`.program.LockKind`'s.

The same source runs interpreted (``FastExecutor(jit=False)``, executor
"python"): :func:`.fast.kernel_module` executes this file a second time
with the decorators turned off, so a breakpoint here stops in the loop that
the compiled executor runs, on the same arrays.

Design
------
The event queue and the CPU's job heaps are binary heaps written out over
preallocated arrays, struct-of-arrays style (a float key, an int
tie-breaker, an int payload; one heap per row, see :func:`_push`). The keys
are the reference's: events order by ``(time, priority << 50 | seq)``, jobs
by ``(finish tag, cpu seq)``. Every key is unique, so any correct heap pops
the reference's order.

State is indexed by a task's *slot* wherever a task holds at most one of a
thing at a time. A sandbox takes a slot when it starts (at its arrival), a
branch when it is spawned, and each gives it back when it ends, so every
structure is bounded by the tasks under way at once, not by the task count:
a day of a million starts with refilling pools runs three million tasks (two
refill branches a start), a few hundred at a time, and per-task state (some
450 bytes) held for all of them was a gigabyte. The slot count is fixed
before the loop (nothing is allocated or grown per event); a run that needs
more starts again with four times as many (``run_kernel``), which changes
nothing in the result: slots never decide an order (keys do).

- the sandboxes' starts at time 0 come first, in sandbox order: a cursor
  stands for them instead of a heap of a million entries;
- a task has at most one pending event (start, arrival or resume) and at most
  one CPU job, so the queue and the four job heaps are rows of one
  ``5 × (slots + locks + 1)`` table (wake-ups add at most one per lock);
- most events are resumes due now (a finished CPU job, a granted lock, a
  passed gate), and each comes with a larger key than every other resume due
  now: they skip the heap for a FIFO ring beside it (one entry per slot), and
  the loop pops the least of the FIFO's head, the heap's root and the timer;
- only the CPU's newest timer is ever live (a later one supersedes it), so one
  slot holds it; a superseded timer is only counted as an event, since the
  reference numbers it as SimPy numbers a timeout and never runs it;
- a sandbox that arrives later is due at its arrival, with a key that grows
  with its index (the starts run in sandbox order at time 0): so the
  arrivals pop in the order of the sandboxes sorted by (time, index), read
  from that list by a cursor instead of waiting in the queue (a day of a
  million arrivals made the queue a million deep: 14% of that run);
- a task waits on at most one lock: a lock's queue is one FIFO per priority
  level, linked through the slots (the reference's ``(priority, seq)`` heap
  pops in that order);
- a lock's spin deadlines come in time order (now plus its constant
  ``spin_s``), so they are a list per lock, linked through the slots; a
  stopped spin leaves its list at once instead of being skipped later.

Reference counting shaped the code. A compiled function increfs and
decrefs every array it receives and every array it unpacks from a tuple, and
inlining a helper inlines those calls too: ten or more calls through a
pointer around every inlined helper, a third of the loop's time (perf, on
the 100 000-sandbox day). The loop allocates nothing, so it and its helpers
are compiled without numba's reference counting (``_nrt=False``; numba then
refuses any allocation in them at compile time); only :func:`run_kernel`,
which allocates the state, and :func:`_lock_levels` keep it. No function
here can raise (``error_model`` ``numpy``, no bounds that need checking).
The CPU's timer, settle, stop and grant are inlined into the loop
(``inline="always"``); the small helpers are left as calls (inlining them
too measured no faster and compiled slower).

Where it stands (this project's 2-core machine, 2026-11-25, medians of
interleaved runs; ``benchmarks/bench_planner.py``): the 400-sandbox ipvtap
storm's loop (35 048 events) takes ≈ 3.4 ms, ≈ 1.2x a bare numba heap loop
of as many events measured beside it (5.1 ms, 1.8x, with the reference
counting; the FIFO of resumes took it from 4.5 to 2.5 ms on a quieter day,
``heapq`` over lists was 12 ms); a day of 1 000 000 sandboxes ≈ 5.6 s of
loop. Compiling costs ≈ 30 s once per machine, ≈ 0.05 s to load from the
cache after numba's own start (≈ 0.4 s). A 4-ary heap measured no faster.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, cast

import numpy as np

from ._build import SPIN as _SPIN
from ._build import WORK as _WORK
from ._build import ZEROING as _ZEROING
from ._build import PoolEvent
from .program import LockKind, OpKind

# This file runs two ways. Imported as itself, it is numba's: every function
# below is compiled. :func:`.fast.kernel_module` also executes it a second
# time under the name below, where the decorators hand back the plain
# functions: the same source interpreted (executor "python"), for pdb and
# coverage, without numba.
INTERPRETED_NAME = "bootstorm.simulator._fast_nb_interpreted"
INTERPRETED = __name__ == INTERPRETED_NAME

# The codes the loop compares, read from the enums the programs are written
# with (numba freezes them into the compiled code; see :func:`compiled_codes`).
_CPU, _SLEEP = int(OpKind.CPU), int(OpKind.SLEEP)
_ACQUIRE, _ACQUIRE_SHARED, _RELEASE = (
    int(OpKind.ACQUIRE),
    int(OpKind.ACQUIRE_SHARED),
    int(OpKind.RELEASE),
)
_ZERO, _STAGE_BEGIN, _STAGE_END = int(OpKind.ZERO), int(OpKind.STAGE_BEGIN), int(OpKind.STAGE_END)
_GATE_ENTER, _GATE_EXIT = int(OpKind.GATE_ENTER), int(OpKind.GATE_EXIT)
_POOL_TRY, _JUMP = int(OpKind.POOL_TRY), int(OpKind.JUMP)
_SPAWN, _GUEST_CPU = int(OpKind.SPAWN), int(OpKind.GUEST_CPU)
_POOL_ORDER, _POOL_PUT, _POOL_TARGET, _POOL_TRIM, _BACK = (
    int(OpKind.POOL_ORDER),
    int(OpKind.POOL_PUT),
    int(OpKind.POOL_TARGET),
    int(OpKind.POOL_TRIM),
    int(OpKind.BACK),
)
_RCU_SYNC_ENTER, _RCU_SYNC_EXIT = int(OpKind.RCU_SYNC_ENTER), int(OpKind.RCU_SYNC_EXIT)
_TAKE, _MISS, _ORDERED, _MADE, _RETARGET, _TRIMMED = (int(e) for e in PoolEvent)
_MUTEX, _SPINLOCK, _RW = int(LockKind.MUTEX), int(LockKind.SPIN), int(LockKind.RW)
OP_CODES: dict[OpKind, int] = {
    OpKind.CPU: _CPU,
    OpKind.SLEEP: _SLEEP,
    OpKind.ACQUIRE: _ACQUIRE,
    OpKind.ACQUIRE_SHARED: _ACQUIRE_SHARED,
    OpKind.RELEASE: _RELEASE,
    OpKind.ZERO: _ZERO,
    OpKind.STAGE_BEGIN: _STAGE_BEGIN,
    OpKind.STAGE_END: _STAGE_END,
    OpKind.GATE_ENTER: _GATE_ENTER,
    OpKind.GATE_EXIT: _GATE_EXIT,
    OpKind.POOL_TRY: _POOL_TRY,
    OpKind.JUMP: _JUMP,
    OpKind.SPAWN: _SPAWN,
    OpKind.GUEST_CPU: _GUEST_CPU,
    OpKind.POOL_ORDER: _POOL_ORDER,
    OpKind.POOL_PUT: _POOL_PUT,
    OpKind.POOL_TARGET: _POOL_TARGET,
    OpKind.POOL_TRIM: _POOL_TRIM,
    OpKind.BACK: _BACK,
    OpKind.RCU_SYNC_ENTER: _RCU_SYNC_ENTER,
    OpKind.RCU_SYNC_EXIT: _RCU_SYNC_EXIT,
}
"""The code the loop reads for each op kind (each is ``int(kind)``)."""
LOCK_CODES: dict[LockKind, int] = {
    LockKind.MUTEX: _MUTEX,
    LockKind.SPIN: _SPINLOCK,
    LockKind.RW: _RW,
}
"""The code the loop reads for each lock kind."""

# Events are (time, priority << 50 | seq, x << 3 | what).
_URGENT_KEY, _NORMAL_KEY = 0, 1 << 50
_START, _ARRIVE, _RESUME, _TIMER, _WAKE = 0, 1, 2, 3, 4
_REL_EPS = 1e-12

# Rows of the heap table: the event queue and the CPU's four job heaps.
_QUEUE, _H_WORK, _H_PINNED, _H_GUEST, _H_ZERO = 0, 1, 2, 3, 4

# Float CPU state, c[...]: the clock, the four tier clocks, when they were
# advanced, the four rates, the pending timer's due time and event time.
_NOW, _S, _SP, _Z, _G, _LAST, _SH, _PSH, _ZSP, _GSH, _TIMER_AT, _TIMER_T = range(12)
# Int CPU state, ci[...]: event seq, cpu seq, spinners in each tier, the
# pending timer's key, superseded timers; the FIFO of resumes: head, length;
# the next of the arrivals in time order; the next sandbox to start at time
# 0; how many task slots are free.
(
    _EID,
    _CSEQ,
    _SPINNING,
    _PSPINNING,
    _TIMER_KEY,
    _STALE,
    _F_HEAD,
    _F_LEN,
    _A_HEAD,
    _S_HEAD,
    _FREE_N,
) = range(11)


_F = TypeVar("_F", bound=Callable[..., Any])


class _Decorator(Protocol):
    def __call__(self, func: _F, /) -> _F: ...


_jit: _Decorator
_inline: _Decorator
_entry: _Decorator

if INTERPRETED:

    def _plain(func: _F) -> _F:
        return func

    _jit = _inline = _entry = _plain

else:
    from numba import njit  # type: ignore[import-not-found,unused-ignore]

    # Compiled once per machine (``cache``); no ``fastmath``. Division by zero
    # follows NumPy (no Python exception paths). No reference counting
    # (``_nrt=False``): the loop allocates nothing, and the counting calls cost
    # a third of it (see the module's docstring).
    no_refcount: Any = {"_nrt": False}  # numba's private option: not in its type stubs
    _jit = cast(_Decorator, njit(cache=True, error_model="numpy", **no_refcount))
    _inline = cast(
        _Decorator, njit(cache=True, error_model="numpy", inline="always", **no_refcount)
    )
    # The entry point allocates the state (reference counted) and lets go of
    # the GIL: the loop touches no Python object, so a search simulates one
    # trial on a thread while its sampler, in Python, chooses the next point
    # (optimizers/_study.py), and threads run storms side by side.
    _entry = cast(_Decorator, njit(cache=True, error_model="numpy", nogil=True))


@_jit
def compiled_codes() -> Any:
    """The op and lock codes as this build of the loop reads them (in
    :data:`OP_CODES` then :data:`LOCK_CODES` order). numba's cache keeps the
    values a function was compiled with even when :mod:`.program` changes
    them, so :func:`.fast.kernel_module` compares these with the enums."""
    return (
        _CPU,
        _SLEEP,
        _ACQUIRE,
        _ACQUIRE_SHARED,
        _RELEASE,
        _ZERO,
        _STAGE_BEGIN,
        _STAGE_END,
        _GATE_ENTER,
        _GATE_EXIT,
        _POOL_TRY,
        _JUMP,
        _SPAWN,
        _GUEST_CPU,
        _POOL_ORDER,
        _POOL_PUT,
        _POOL_TARGET,
        _POOL_TRIM,
        _BACK,
        _RCU_SYNC_ENTER,
        _RCU_SYNC_EXIT,
        _MUTEX,
        _SPINLOCK,
        _RW,
    )


# -- heaps over arrays ---------------------------------------------------------------------
@_jit
def _push(ht: Any, hk: Any, hv: Any, sizes: Any, h: int, t: float, k: int, v: int) -> None:
    """Push ``(t, k) -> v`` on heap row ``h`` (sift the hole up, then fill it)."""
    i = sizes[h]
    sizes[h] = i + 1
    while i > 0:
        parent = (i - 1) >> 1
        pt = ht[h, parent]
        pk = hk[h, parent]
        if t < pt or (t == pt and k < pk):
            ht[h, i] = pt
            hk[h, i] = pk
            hv[h, i] = hv[h, parent]
            i = parent
        else:
            break
    ht[h, i] = t
    hk[h, i] = k
    hv[h, i] = v


@_jit
def _pop(ht: Any, hk: Any, hv: Any, sizes: Any, h: int) -> None:
    """Drop the root of heap row ``h``; read it (``[h, 0]``) before."""
    n = sizes[h] - 1
    sizes[h] = n
    if n == 0:
        return
    t = ht[h, n]
    k = hk[h, n]
    v = hv[h, n]
    i = 0
    while True:
        child = 2 * i + 1
        if child >= n:
            break
        ct = ht[h, child]
        ck = hk[h, child]
        right = child + 1
        if right < n:
            rt = ht[h, right]
            rk = hk[h, right]
            if rt < ct or (rt == ct and rk < ck):
                child = right
                ct = rt
                ck = rk
        if ct < t or (ct == t and ck < k):
            ht[h, i] = ct
            hk[h, i] = ck
            hv[h, i] = hv[h, child]
            i = child
        else:
            break
    ht[h, i] = t
    hk[h, i] = k
    hv[h, i] = v


# -- waiting lists linked through per-task arrays --------------------------------------------
@_jit
def _queue_head(q_head: Any, lk: int) -> int:
    """The next waiter lock ``lk`` grants to (-1: none): the oldest of the best level."""
    for level in range(q_head.shape[1]):
        if q_head[lk, level] >= 0:
            return int(q_head[lk, level])
    return -1


@_jit
def _queue_push(lq: Any, lk: int, level: int, task: int) -> None:
    """Append waiting ``task`` to lock ``lk``'s FIFO of priority ``level``."""
    q_head, q_tail, q_next, q_len = lq
    q_next[task] = -1
    tail = q_tail[lk, level]
    if tail < 0:
        q_head[lk, level] = task
    else:
        q_next[tail] = task
    q_tail[lk, level] = task
    q_len[lk] += 1


@_jit
def _queue_pop(lq: Any, lk: int, level: int) -> None:
    """Drop the head of lock ``lk``'s FIFO of ``level``."""
    q_head, q_tail, q_next, q_len = lq
    nxt = q_next[q_head[lk, level]]
    q_head[lk, level] = nxt
    if nxt < 0:
        q_tail[lk, level] = -1
    q_len[lk] -= 1


@_jit
def _earliest_deadline(dl: Any) -> int:
    """The spinning task whose deadline ``(time, cpu seq)`` comes first (-1: none)."""
    d_at, d_seq, d_head, spin_locks = dl[0], dl[1], dl[4], dl[6]
    best = -1
    for i in range(spin_locks.shape[0]):
        task = d_head[spin_locks[i]]
        if task >= 0 and (
            best < 0
            or d_at[task] < d_at[best]
            or (d_at[task] == d_at[best] and d_seq[task] < d_seq[best])
        ):
            best = task
    return best


@_jit
def _deadline_push(dl: Any, lk: int, task: int, at: float, seq: int) -> None:
    """Add ``task``'s spin deadline; a lock's deadlines come in time order
    (now plus its constant ``spin_s``), so its list stays sorted."""
    d_at, d_seq, d_next, d_prev, d_head, d_tail, _ = dl
    d_at[task] = at
    d_seq[task] = seq
    d_next[task] = -1
    tail = d_tail[lk]
    d_prev[task] = tail
    if tail < 0:
        d_head[lk] = task
    else:
        d_next[tail] = task
    d_tail[lk] = task


@_jit
def _deadline_unlink(dl: Any, lk: int, task: int) -> None:
    """Remove ``task``'s deadline from lock ``lk``'s list (its spin stopped)."""
    d_next, d_prev, d_head, d_tail = dl[2], dl[3], dl[4], dl[5]
    prev, nxt = d_prev[task], d_next[task]
    if prev < 0:
        d_head[lk] = nxt
    else:
        d_next[prev] = nxt
    if nxt < 0:
        d_tail[lk] = prev
    else:
        d_prev[nxt] = prev


# -- the CPU (as :class:`.cpu.ProcessorSharingCPU`) ----------------------------------------
@_jit
def _advance(c: Any) -> None:
    dt = c[_NOW] - c[_LAST]
    if dt > 0.0:
        c[_S] += c[_SH] * dt
        c[_SP] += c[_PSH] * dt
        c[_Z] += c[_ZSP] * dt
        c[_G] += c[_GSH] * dt
        c[_LAST] = c[_NOW]


@_inline
def _wake_delay(wake_s: float, dispatch_s: float, machine: Any, hn: Any, ci: Any) -> float:
    """How long a woken mutex waiter takes to run, as ``locks.Mutex``'s."""
    if dispatch_s <= 0.0:
        return wake_s
    runnable = (
        hn[_H_WORK] + hn[_H_GUEST] + hn[_H_ZERO] + ci[_SPINNING] + hn[_H_PINNED] + ci[_PSPINNING]
    ) + machine[2]
    cores = machine[0]
    return wake_s + dispatch_s * (runnable / cores if runnable > cores else 1.0)


@_inline
def _settle(c: Any, ci: Any, machine: Any, ht: Any, hn: Any, dl: Any) -> None:
    """Recompute the shares and re-arm the timer if the next completion moved earlier."""
    cores, guest_cap, bg, zero_rate, bandwidth = (
        machine[0],
        machine[1],
        machine[2],
        machine[3],
        machine[4],
    )
    n_work, n_pinned_jobs, n_guest, m = hn[_H_WORK], hn[_H_PINNED], hn[_H_GUEST], hn[_H_ZERO]
    n_pinned = n_pinned_jobs + ci[_PSPINNING]
    pinned_share = 1.0 if n_pinned <= cores else cores / n_pinned
    left = cores - n_pinned if n_pinned < cores else 0.0
    k = n_work + m + ci[_SPINNING]
    fair = 1.0 if k + n_guest + bg <= left else left / (k + n_guest + bg)
    if n_guest and fair > guest_cap:
        guest_share = guest_cap
        rest = left - n_guest * guest_cap
        share = 1.0 if k + bg <= rest else rest / (k + bg)
    else:
        guest_share = fair
        share = fair
    if m:
        cap = bandwidth / (m * zero_rate)
        zero_speed = share if share < cap else cap
    else:
        zero_speed = share
    c[_SH] = share
    c[_PSH] = pinned_share
    c[_ZSP] = zero_speed
    c[_GSH] = guest_share
    last = c[_LAST]
    due = math.inf
    if n_work and share > 0.0:
        due = last + (ht[_H_WORK, 0] - c[_S]) / share
    if n_pinned_jobs:
        t = last + (ht[_H_PINNED, 0] - c[_SP]) / pinned_share
        if t < due:
            due = t
    if n_guest and guest_share > 0.0:
        t = last + (ht[_H_GUEST, 0] - c[_G]) / guest_share
        if t < due:
            due = t
    if m and zero_speed > 0.0:
        t = last + (ht[_H_ZERO, 0] - c[_Z]) / zero_speed
        if t < due:
            due = t
    first = _earliest_deadline(dl)
    if first >= 0 and dl[0][first] < due:
        due = dl[0][first]
    if due < c[_TIMER_AT]:
        # A new timer; the pending one (if any) is superseded: the reference
        # numbered it and never runs it, so only its count is kept.
        if c[_TIMER_AT] < math.inf:
            ci[_STALE] += 1
        c[_TIMER_AT] = due
        delay = due - last
        ci[_EID] += 1
        c[_TIMER_T] = c[_NOW] + (delay if delay > 0.0 else 0.0)
        ci[_TIMER_KEY] = _NORMAL_KEY + ci[_EID]


@_jit
def _resume(c: Any, ci: Any, heaps: Any, task: int) -> None:
    """Schedule ``task`` to go on now, after what is already due now.

    The event goes to the FIFO beside the queue: resumes due now come with
    ever larger keys at the current time, so a FIFO holds them in the order
    the heap would pop them, without the heap's sifting."""
    ft, fk, fv = heaps[4], heaps[5], heaps[6]
    ci[_EID] += 1
    cap = ft.shape[0]
    tail = ci[_F_HEAD] + ci[_F_LEN]
    if tail >= cap:
        tail -= cap
    ft[tail] = c[_NOW]
    fk[tail] = _NORMAL_KEY + ci[_EID]
    fv[tail] = task * 8 + _RESUME
    ci[_F_LEN] += 1


@_inline
def _finish_due(
    c: Any,
    ci: Any,
    heaps: Any,
    h: int,
    progress: float,
    slack: float,
    clock: float,
    jobs: Any,
    cpu_acc: Any,
) -> None:
    """Complete the jobs of row ``h`` whose tag ``progress`` has reached."""
    ht, hk, hv, hn = heaps[0], heaps[1], heaps[2], heaps[3]
    job_start, job_slot = jobs
    limit = progress + _REL_EPS * (progress if progress > 1.0 else 1.0) + slack
    while hn[h] and ht[h, 0] <= limit:
        task = hv[h, 0]
        _pop(ht, hk, hv, hn, h)
        cpu_acc[job_slot[task]] += clock - job_start[task]
        _resume(c, ci, heaps, task)


@_inline
def _stop(c: Any, ci: Any, task: int, sp: Any, dl: Any, cpu_acc: Any, lock_spin: Any) -> None:
    """Stop ``task``'s spin; the clocks must be current, the caller settles."""
    sp_active, sp_start, sp_slot, sp_lock, sp_pinned = sp
    sp_active[task] = False
    if sp_pinned[task]:
        ci[_PSPINNING] -= 1
        spun = c[_SP] - sp_start[task]
    else:
        ci[_SPINNING] -= 1
        spun = c[_S] - sp_start[task]
        # The reference leaves a stopped spin's deadline to be skipped later;
        # dropping it now changes nothing but the work.
        _deadline_unlink(dl, sp_lock[task], task)
    cpu_acc[sp_slot[task]] += spun
    lock_spin[sp_lock[task]] += spun


@_inline
def _on_timer(
    c: Any,
    ci: Any,
    machine: Any,
    heaps: Any,
    dl: Any,
    jobs: Any,
    sp: Any,
    cpu_acc: Any,
    lock_spin: Any,
) -> None:
    """The CPU's timer: complete what is due, stop expired spins, re-arm."""
    ht, hn = heaps[0], heaps[3]
    c[_TIMER_AT] = math.inf
    _advance(c)
    tick = np.spacing(c[_LAST])
    share = c[_S]
    _finish_due(c, ci, heaps, _H_WORK, share, c[_SH] * tick, share, jobs, cpu_acc)
    if hn[_H_PINNED]:
        p = c[_SP]
        _finish_due(c, ci, heaps, _H_PINNED, p, c[_PSH] * tick, p, jobs, cpu_acc)
    if hn[_H_GUEST]:
        g = c[_G]
        _finish_due(c, ci, heaps, _H_GUEST, g, c[_GSH] * tick, g, jobs, cpu_acc)
    if hn[_H_ZERO]:
        _finish_due(c, ci, heaps, _H_ZERO, c[_Z], c[_ZSP] * tick, share, jobs, cpu_acc)
    first = _earliest_deadline(dl)
    if first >= 0:
        last = c[_LAST]
        limit = last + _REL_EPS * (last if last > 1.0 else 1.0)
        while first >= 0 and dl[0][first] <= limit:
            _stop(c, ci, first, sp, dl, cpu_acc, lock_spin)
            first = _earliest_deadline(dl)
    _settle(c, ci, machine, ht, hn, dl)


@_inline
def _grant(
    lk: int,
    task: int,
    c: Any,
    ci: Any,
    machine: Any,
    heaps: Any,
    dl: Any,
    sp: Any,
    cpu_acc: Any,
    lock_spin: Any,
    counters: Any,
    waiters: Any,
) -> None:
    """Hand lock ``lk`` to waiting ``task`` (owner or readers already updated)."""
    cnt, cnf, acq_by_stage, held_since, wait_by_stage = counters
    w_stage, w_since = waiters
    now = c[_NOW]
    if sp[0][task]:
        _advance(c)
        _stop(c, ci, task, sp, dl, cpu_acc, lock_spin)
        _settle(c, ci, machine, heaps[0], heaps[3], dl)
    # ContentionCounter.dequeue, then the take
    cnt[lk, 2] -= 1
    cnf[lk, 0] += now - w_since[task]
    if cnt[lk, 2] == 0:
        cnf[lk, 2] += now - cnf[lk, 3]
    cnt[lk, 0] += 1
    acq_by_stage[lk, w_stage[task]] += 1
    wait_by_stage[lk, w_stage[task]] += now - w_since[task]
    held_since[task, lk] = now
    _resume(c, ci, heaps, task)


@_jit
def _enqueue(cnt: Any, cnf: Any, row: int, now: float) -> None:
    """ContentionCounter.enqueue for lock or gate ``row``."""
    cnt[row, 1] += 1
    if cnt[row, 2] == 0:
        cnf[row, 3] = now
    cnt[row, 2] += 1
    if cnt[row, 2] > cnt[row, 3]:
        cnt[row, 3] = cnt[row, 2]


@_entry
def _lock_levels(lock_prio: Any) -> Any:
    """``level[lock, stage]``: how many stages the lock serves before this one's
    waiters (order-preserving, equal for equal priorities, below ``stages + 1``)."""
    n_locks, slots = lock_prio.shape
    level = np.zeros((n_locks, slots), dtype=np.int64)
    for lk in range(n_locks):
        for s in range(slots):
            for other in range(slots):
                if lock_prio[lk, other] < lock_prio[lk, s]:
                    level[lk, s] += 1
    return level


@_jit
def _depth_bounds(kinds: Any, offsets: Any, uses: Any) -> Any:
    """The most STAGE_BEGIN ops in one task (bounds its stage nesting), and
    the STAGE_END ops its tasks run in all (bounds the stage durations);
    ``uses[p]``: the tasks that run template ``p``."""
    deepest = 0
    ends = 0
    for part in range(offsets.shape[0] - 1):
        if uses[part] == 0:
            continue
        begins = 0
        part_ends = 0
        for pc in range(offsets[part], offsets[part + 1]):
            if kinds[pc] == _STAGE_BEGIN:
                begins += 1
            elif kinds[pc] == _STAGE_END:
                part_ends += 1
        ends += part_ends * uses[part]
        if begins > deepest:
            deepest = begins
    return deepest, ends


@_jit
def _pool_log(pools: Any, now: float, pool: int, what: int, task: int) -> None:
    """Append one pool event (of task ``task``) and the pool's state after it to the log."""
    left, making, _, ev_t, ev_pool, ev_kind, ev_level, ev_making, ev_n, ev_task, _ = pools
    i = ev_n[0]
    ev_n[0] = i + 1
    ev_t[i] = now
    ev_task[i] = task
    ev_pool[i] = pool
    ev_kind[i] = what
    ev_level[i] = left[pool]
    ev_making[i] = making[pool]


@_jit
def _pool_log_size(kinds: Any, offsets: Any, uses: Any, capacity: int) -> int:
    """The log's bound: the pool ops its tasks run, each at most once, but a
    removal's (``POOL_TRIM``), which loops (``BACK``): it removes at most the
    devices there were (``capacity``, the pools' at the start) and made."""
    size = 0
    puts = 0
    trims = False
    for part in range(offsets.shape[0] - 1):
        for pc in range(offsets[part], offsets[part + 1]):
            if kinds[pc] in (_POOL_TRY, _POOL_ORDER, _POOL_PUT, _POOL_TARGET, _POOL_TRIM):
                size += uses[part]
            if kinds[pc] == _POOL_PUT:
                puts += uses[part]
            elif kinds[pc] == _POOL_TRIM:
                trims = True
    if trims:
        size += capacity + puts
    return size


@_inline
def _amount(amounts: Any, slot: Any, own_amount: Any, own_base: int, pc: int) -> float:
    """Op ``pc``'s amount for the task whose own amounts start at ``own_base``."""
    j = slot[pc]
    return float(amounts[pc] if j < 0 else own_amount[own_base + j])


@_inline
def _take_slot(ci: Any, tasks: Any, offsets: Any, task_part: Any, task: int, outside: int) -> int:
    """A free slot for ``task``, set to its first op outside every stage
    (-1: none left, the run must start again with more)."""
    pcs, stage_of, spin_depth, depth = tasks[0], tasks[1], tasks[2], tasks[3]
    slot_task, free_slots = tasks[7], tasks[8]
    k = ci[_FREE_N]
    if k == 0:
        return -1
    k -= 1
    ci[_FREE_N] = k
    s = free_slots[k]
    slot_task[s] = task
    pcs[s] = offsets[task_part[task]]
    stage_of[s] = outside
    spin_depth[s] = 0
    depth[s] = 0
    return int(s)


@_jit
def _simulate(
    prog: Any,
    machine: Any,
    locks: Any,
    pools: Any,
    state: Any,
    tasks: Any,
    stage_log: Any,
    heaps: Any,
    jobs: Any,
    waiters: Any,
    lq: Any,
    sp: Any,
    dl: Any,
    lock_state: Any,
    counters: Any,
    gates: Any,
) -> Any:
    """The event loop, on the state :func:`run_kernel` allocated; returns how
    many stage durations it logged, the bytes zeroed and the events."""
    kinds, args, amounts, offsets, arrival, branch_parent, spawn_base = prog[:7]
    arrivals, arrival_key, slot, task_part, own_offsets, own_amount = prog[7:]
    lock_kind, lock_level, lock_spin_s, lock_wake_s, lock_dispatch_s, lock_pinned = locks
    c, ci, cpu_acc, lock_spin = state
    pcs, stage_of, spin_depth, depth, st_stage, st_began, finish, slot_task, free_slots = tasks
    stage_time, dur_stage, dur_val = stage_log
    ht, hk, hv, hn, ft, fk, fv = heaps
    job_start, job_slot = jobs
    w_stage, w_since, w_shared = waiters
    waiting = (w_stage, w_since)
    q_head, q_len = lq[0], lq[3]
    sp_active, sp_start, sp_slot, sp_lock, sp_pinned = sp
    l_owner, l_readers, l_waking, l_handoff = lock_state
    cnt, cnf, acq_by_stage, held_since, _ = counters
    g_free, g_task, g_since, g_head, g_len = gates
    pool_left, pool_making, pool_target = pools[0], pools[1], pools[2]
    pool_trimmed = pools[10]
    n = arrival.shape[0]
    n_locks = lock_kind.shape[0]
    n_stages = stage_time.shape[1]
    ring = g_task.shape[1]
    zeroed = 0.0
    n_dur = 0
    popped = 0
    # Every sandbox's start is due at time 0 in sandbox order, before
    # anything else (keys 1 .. n, urgent): a cursor stands for those events.
    ci[_EID] = n
    while True:
        # The next event: the first of the starts' cursor, the FIFO's head,
        # the queue's head, the timer and the arrivals, by (time, key).
        source = -1
        best_t = 0.0
        best_k = 0
        if ci[_S_HEAD] < n:
            source = 4
            best_k = _URGENT_KEY + ci[_S_HEAD] + 1
        if ci[_F_LEN]:
            t = ft[ci[_F_HEAD]]
            k = fk[ci[_F_HEAD]]
            if source < 0 or t < best_t or (t == best_t and k < best_k):
                source = 0
                best_t = t
                best_k = k
        if hn[_QUEUE]:
            t = ht[_QUEUE, 0]
            k = hk[_QUEUE, 0]
            if source < 0 or t < best_t or (t == best_t and k < best_k):
                source = 1
                best_t = t
                best_k = k
        if c[_TIMER_AT] < math.inf:
            t = c[_TIMER_T]
            if source < 0 or t < best_t or (t == best_t and ci[_TIMER_KEY] < best_k):
                source = 2
                best_t = t
                best_k = ci[_TIMER_KEY]
        if ci[_A_HEAD] < arrivals.shape[0]:
            a = arrivals[ci[_A_HEAD]]
            # Pending once its start has run (all starts come first: time 0, urgent).
            if arrival_key[a] >= 0:
                t = arrival[a]
                k = arrival_key[a]
                if source < 0 or t < best_t or (t == best_t and k < best_k):
                    source = 3
        if source == 0:
            head = ci[_F_HEAD]
            now = ft[head]
            what = fv[head] & 7
            x = fv[head] >> 3
            ci[_F_HEAD] = head + 1 if head + 1 < ft.shape[0] else 0
            ci[_F_LEN] -= 1
        elif source == 1:
            now = ht[_QUEUE, 0]
            what = hv[_QUEUE, 0] & 7
            x = hv[_QUEUE, 0] >> 3
            _pop(ht, hk, hv, hn, _QUEUE)
        elif source == 2:
            now = c[_TIMER_T]
            what = _TIMER
            x = 0
        elif source == 3:
            x = arrivals[ci[_A_HEAD]]
            now = arrival[x]
            what = _ARRIVE
            ci[_A_HEAD] += 1
        elif source == 4:
            x = ci[_S_HEAD]
            now = 0.0
            what = _START
            ci[_S_HEAD] += 1
        else:
            break
        c[_NOW] = now
        popped += 1
        if what == _TIMER:
            _on_timer(c, ci, machine, heaps, dl, jobs, sp, cpu_acc, lock_spin)
            continue
        if what == _WAKE:
            # As locks.Mutex._woken: the head of the queue now is served.
            lk = x
            l_waking[lk] = -1
            w = _queue_head(q_head, lk)
            if l_owner[lk] < 0:
                _queue_pop(lq, lk, lock_level[lk, w_stage[w]])
                l_owner[lk] = w
                _grant(lk, w, c, ci, machine, heaps, dl, sp, cpu_acc, lock_spin, counters, waiting)
            else:
                l_handoff[lk] = True  # stolen while it woke: the next release is its
            continue
        if source >= 3:
            # A sandbox's start or its arrival: x is the sandbox.
            task = x
            if source == 4 and arrival[task] > 0.0:
                # The reference's timeout(arrival) at time 0: due at the arrival
                # itself. It waits in ``arrivals`` (sorted by time, then task, the
                # order of these keys) instead of the queue, which would hold
                # every sandbox not yet arrived: a day's storm of a million
                # sandboxes would sift a heap of a million on every event.
                ci[_EID] += 1
                arrival_key[task] = _NORMAL_KEY + ci[_EID]
                continue
            s = _take_slot(ci, tasks, offsets, task_part, task, n_stages)
            if s < 0:
                return -1, zeroed, 0
        else:
            # A branch's start or a resume: x is the task's slot.
            s = x
            task = slot_task[s]
        pc = pcs[s]
        own_base = own_offsets[task]
        if what == _RESUME:
            kind = kinds[pc]
            if kind == _ACQUIRE and lock_pinned[args[pc]]:
                spin_depth[s] += 1
            elif kind == _ZERO:
                zeroed += _amount(amounts, slot, own_amount, own_base, pc)
            pc += 1
        end = offsets[task_part[task] + 1]
        stage = stage_of[s]
        while pc < end:
            kind = kinds[pc]
            blocked = False
            if kind in (_CPU, _GUEST_CPU):
                amount = _amount(amounts, slot, own_amount, own_base, pc)
                if amount > 0.0:
                    _advance(c)
                    ci[_CSEQ] += 1
                    if kind == _CPU and spin_depth[s] > 0:
                        h, clock = _H_PINNED, c[_SP]
                    elif kind == _GUEST_CPU and machine[1] < 1.0:
                        h, clock = _H_GUEST, c[_G]
                    else:
                        h, clock = _H_WORK, c[_S]
                    job_start[s] = clock
                    job_slot[s] = 3 * stage + _WORK
                    _push(ht, hk, hv, hn, h, clock + amount, ci[_CSEQ], s)
                    _settle(c, ci, machine, ht, hn, dl)
                    blocked = True
            elif kind == _SLEEP:
                amount = _amount(amounts, slot, own_amount, own_base, pc)
                if amount > 0.0:
                    ci[_EID] += 1
                    at = now + amount
                    _push(ht, hk, hv, hn, _QUEUE, at, _NORMAL_KEY + ci[_EID], s * 8 + _RESUME)
                    blocked = True
            elif kind in (_ACQUIRE, _ACQUIRE_SHARED):
                lk = args[pc]
                shared = kind == _ACQUIRE_SHARED
                if lock_kind[lk] == _RW:
                    if shared:
                        free = l_owner[lk] < 0 and q_len[lk] == 0
                    else:
                        free = l_owner[lk] < 0 and l_readers[lk] == 0
                else:
                    free = l_owner[lk] < 0
                if free:
                    if shared:
                        l_readers[lk] += 1
                    else:
                        l_owner[lk] = s
                    cnt[lk, 0] += 1
                    acq_by_stage[lk, stage] += 1
                    held_since[s, lk] = now
                    if lock_pinned[lk]:
                        spin_depth[s] += 1
                else:
                    w_stage[s] = stage
                    w_since[s] = now
                    w_shared[s] = shared
                    _queue_push(lq, lk, lock_level[lk, stage], s)
                    _enqueue(cnt, cnf, lk, now)
                    if lock_kind[lk] == _SPINLOCK or lock_spin_s[lk] > 0.0:
                        _advance(c)
                        sp_active[s] = True
                        sp_slot[s] = 3 * stage + _SPIN
                        sp_lock[s] = lk
                        if lock_kind[lk] == _SPINLOCK:
                            ci[_PSPINNING] += 1
                            sp_start[s] = c[_SP]
                            sp_pinned[s] = True
                        else:
                            ci[_SPINNING] += 1
                            sp_start[s] = c[_S]
                            sp_pinned[s] = False
                            ci[_CSEQ] += 1
                            _deadline_push(dl, lk, s, now + lock_spin_s[lk], ci[_CSEQ])
                        _settle(c, ci, machine, ht, hn, dl)
                    blocked = True
            elif kind == _RELEASE:
                lk = args[pc]
                cnf[lk, 1] += now - held_since[s, lk]
                grants = 0
                if lock_kind[lk] != _RW:
                    if lock_pinned[lk]:
                        spin_depth[s] -= 1
                    if q_len[lk] == 0:
                        l_owner[lk] = -1
                    elif (lock_wake_s[lk] <= 0.0 and lock_dispatch_s[lk] <= 0.0) or l_handoff[lk]:
                        l_handoff[lk] = False
                        grants = 1
                    else:
                        # Free the lock and wake the head; until it runs, a running
                        # task may take the lock (acquire's fast path).
                        l_owner[lk] = -1
                        if l_waking[lk] < 0:
                            l_waking[lk] = _queue_head(q_head, lk)
                            ci[_EID] += 1
                            at = now + _wake_delay(
                                lock_wake_s[lk], lock_dispatch_s[lk], machine, hn, ci
                            )
                            _push(
                                ht, hk, hv, hn, _QUEUE, at, _NORMAL_KEY + ci[_EID], lk * 8 + _WAKE
                            )
                else:
                    if l_owner[lk] == s:
                        l_owner[lk] = -1
                    else:
                        l_readers[lk] -= 1
                    if l_readers[lk] == 0 and q_len[lk]:
                        grants = 1 if not w_shared[_queue_head(q_head, lk)] else -1
                # grants: 1 = the head; -1 = the leading readers.
                while grants != 0 and q_len[lk]:
                    w = _queue_head(q_head, lk)
                    if grants == -1 and not w_shared[w]:
                        break
                    _queue_pop(lq, lk, lock_level[lk, w_stage[w]])
                    if w_shared[w]:
                        l_readers[lk] += 1
                    else:
                        l_owner[lk] = w
                    _grant(
                        lk, w, c, ci, machine, heaps, dl, sp, cpu_acc, lock_spin, counters, waiting
                    )
                    if grants == 1:
                        grants = 0
            elif kind == _STAGE_BEGIN:
                d = depth[s]
                st_stage[s, d] = stage
                st_began[s, d] = now
                depth[s] = d + 1
                stage = args[pc]
                stage_of[s] = stage
            elif kind == _STAGE_END:
                d = depth[s] - 1
                depth[s] = d
                duration = now - st_began[s, d]
                dur_stage[n_dur] = stage
                dur_val[n_dur] = duration
                n_dur += 1
                owner = task if task < n else branch_parent[task - n]
                stage_time[owner, stage] += duration
                stage = st_stage[s, d]
                stage_of[s] = stage
            elif kind == _GATE_ENTER:
                gi = args[pc]
                row = n_locks + gi
                cnt[row, 0] += 1
                if g_free[gi] > 0:
                    g_free[gi] -= 1
                else:
                    tail = g_head[gi] + g_len[gi]
                    if tail >= ring:
                        tail -= ring
                    g_task[gi, tail] = s
                    g_since[gi, tail] = now
                    g_len[gi] += 1
                    _enqueue(cnt, cnf, row, now)
                    blocked = True
            elif kind == _GATE_EXIT:
                gi = args[pc]
                row = n_locks + gi
                # A signal lets many go.
                permits = max(1, int(_amount(amounts, slot, own_amount, own_base, pc)))
                while permits > 0 and g_len[gi]:
                    permits -= 1
                    head = g_head[gi]
                    g_head[gi] = head + 1 if head + 1 < ring else 0
                    g_len[gi] -= 1
                    cnt[row, 2] -= 1
                    cnf[row, 0] += now - g_since[gi, head]
                    if cnt[row, 2] == 0:
                        cnf[row, 2] += now - cnf[row, 3]
                    _resume(c, ci, heaps, g_task[gi, head])  # the permit passes on
                g_free[gi] += permits
            elif kind == _ZERO:
                amount = _amount(amounts, slot, own_amount, own_base, pc)
                if amount > 0.0:
                    _advance(c)
                    ci[_CSEQ] += 1
                    job_start[s] = c[_S]
                    job_slot[s] = 3 * stage + _ZEROING
                    tag = c[_Z] + amount / machine[3]
                    _push(ht, hk, hv, hn, _H_ZERO, tag, ci[_CSEQ], s)
                    _settle(c, ci, machine, ht, hn, dl)
                    blocked = True
            elif kind == _POOL_TRY:
                pi = args[pc]
                if pool_left[pi] > 0:
                    pool_left[pi] -= 1
                    _pool_log(pools, now, pi, _TAKE, task)
                    pc += int(_amount(amounts, slot, own_amount, own_base, pc))
                    continue
                _pool_log(pools, now, pi, _MISS, task)
            elif kind == _POOL_ORDER:
                pi = args[pc]
                if pool_left[pi] + pool_making[pi] >= pool_target[pi]:
                    pc += int(_amount(amounts, slot, own_amount, own_base, pc))
                    continue
                pool_making[pi] += 1
                _pool_log(pools, now, pi, _ORDERED, task)
            elif kind == _POOL_PUT:
                pi = args[pc]
                pool_making[pi] -= 1
                pool_left[pi] += 1
                if not pool_trimmed[pi]:
                    pool_left[pi] = min(pool_left[pi], pool_target[pi])
                _pool_log(pools, now, pi, _MADE, task)
            elif kind == _POOL_TARGET:
                pi = args[pc]
                pool_target[pi] = int(_amount(amounts, slot, own_amount, own_base, pc))
                if not pool_trimmed[pi]:
                    pool_left[pi] = min(pool_left[pi], pool_target[pi])
                _pool_log(pools, now, pi, _RETARGET, task)
            elif kind == _POOL_TRIM:
                pi = args[pc]
                if pool_left[pi] <= pool_target[pi]:
                    pc += int(_amount(amounts, slot, own_amount, own_base, pc))
                    continue
                pool_left[pi] -= 1
                _pool_log(pools, now, pi, _TRIMMED, task)
            elif kind == _BACK:
                pc -= int(_amount(amounts, slot, own_amount, own_base, pc))
                continue
            elif kind == _RCU_SYNC_ENTER:
                # cnf[lock, 4]: when its rcu_sync's last writer left; [5]: inside.
                lk = args[pc]
                amount = _amount(amounts, slot, own_amount, own_base, pc)
                cold = cnf[lk, 5] == 0.0 and now >= cnf[lk, 4] + amount
                cnf[lk, 5] += 1.0
                if cold and amount > 0.0:
                    ci[_EID] += 1
                    _push(
                        ht,
                        hk,
                        hv,
                        hn,
                        _QUEUE,
                        now + amount,
                        _NORMAL_KEY + ci[_EID],
                        s * 8 + _RESUME,
                    )
                    blocked = True
            elif kind == _RCU_SYNC_EXIT:
                lk = args[pc]
                cnf[lk, 5] -= 1.0
                cnf[lk, 4] = now
            elif kind == _JUMP:
                pc += int(_amount(amounts, slot, own_amount, own_base, pc))
                continue
            elif kind == _SPAWN:
                ci[_EID] += 1
                branch = n + spawn_base[task] + args[pc]
                b = _take_slot(ci, tasks, offsets, task_part, branch, n_stages)
                if b < 0:
                    return -1, zeroed, 0
                _push(ht, hk, hv, hn, _QUEUE, now, _URGENT_KEY + ci[_EID], b * 8 + _START)
            if blocked:
                break
            pc += 1
        pcs[s] = pc
        if pc >= end:
            finish[task] = now
            free_slots[ci[_FREE_N]] = s
            ci[_FREE_N] += 1
    return n_dur, zeroed, popped + ci[_STALE]


@_entry
def run_kernel(
    kinds: Any,
    args: Any,
    amounts: Any,
    offsets: Any,
    slot: Any,
    task_part: Any,
    own_offsets: Any,
    own_amount: Any,
    arrival: Any,
    branch_parent: Any,
    spawn_base: Any,
    n_stages: int,
    lock_kind: Any,
    lock_prio: Any,
    lock_spin_s: Any,
    lock_wake_s: Any,
    lock_dispatch_s: Any,
    lock_pinned: Any,
    gate_permits: Any,
    pool_left: Any,
    machine: Any,
    spare_slots: int,
) -> Any:
    """Run the program; ``pool_left`` (ready devices per pool, the capacities
    to begin with) is updated in place. ``spare_slots``: task slots beyond
    those the time-0 starts need, to begin with (:data:`._memory.SPARE_SLOTS`).

    Tasks ``0 .. n - 1`` are the sandboxes (``n = len(arrival)``), the others
    branches; ``lock_prio[lock, stage]`` is a waiter's grant priority. This
    allocates the state and owns it while :func:`_simulate` runs on views.
    """
    n = arrival.shape[0]
    n_tasks = task_part.shape[0]
    n_locks = lock_kind.shape[0]
    n_gates = gate_permits.shape[0]
    slots = n_stages + 1
    uses = np.zeros(offsets.shape[0] - 1, dtype=np.int64)
    for t in range(n_tasks):
        uses[task_part[t]] += 1
    max_depth, n_stage_ends = _depth_bounds(kinds, offsets, uses)
    lock_level = _lock_levels(lock_prio)
    spin_locks = np.flatnonzero((lock_kind != _SPINLOCK) & (lock_spin_s > 0.0))
    # The sandboxes' starts and their branches all hold a slot from time 0
    # where they are due then (a storm), beside the spare ones.
    at_zero = 0
    for i in range(n):
        if arrival[i] <= 0.0:
            nxt = spawn_base[i + 1] if i + 1 < n else n_tasks - n
            at_zero += 1 + nxt - spawn_base[i]
    capacity = min(n_tasks, at_zero + spare_slots)
    initial_pools = pool_left.copy()
    # Sandboxes that arrive after time 0, by (time, task): the order of their
    # arrival events, whose keys grow with the task (starts run in task order).
    # A day's arrivals come sorted: then the stable order is the identity,
    # found in one pass (the sort took 0.1 s of a million).
    in_order = True
    for i in range(1, n):
        if not arrival[i] >= arrival[i - 1]:  # NaN too: left to the sort
            in_order = False
            break
    by_time = np.arange(n) if in_order else np.argsort(arrival, kind="mergesort")
    arrivals = by_time[np.searchsorted(arrival[by_time], 0.0, side="right") :]
    while True:
        # CPU state and accounts
        c = np.zeros(12)
        c[_SH] = 1.0
        c[_PSH] = 1.0
        c[_ZSP] = 1.0
        c[_GSH] = 1.0
        c[_TIMER_AT] = math.inf
        ci = np.zeros(11, dtype=np.int64)
        arrival_key = np.full(n, -1, dtype=np.int64)
        cpu_acc = np.zeros(3 * slots)
        lock_spin = np.zeros(n_locks)
        # The event queue and the job heaps: one pending event per slot (start,
        # arrival or resume) and one wake-up per lock at most; one job per slot.
        cap = capacity + n_locks + 1
        ht = np.empty((5, cap))
        hk = np.empty((5, cap), dtype=np.int64)
        hv = np.empty((5, cap), dtype=np.int64)
        hn = np.zeros(5, dtype=np.int64)
        # Resumes due now, beside the queue (see _resume): one per slot at most.
        ft = np.empty(capacity)
        fk = np.empty(capacity, dtype=np.int64)
        fv = np.empty(capacity, dtype=np.int64)
        job_start = np.empty(capacity)
        job_slot = np.empty(capacity, dtype=np.int64)
        # Slots: whose (task), where it is, its stage stack; the free ones (a
        # stack, slot 0 on top); when each task finished.
        slot_task = np.empty(capacity, dtype=np.int64)
        free_slots = np.arange(capacity - 1, -1, -1, dtype=np.int64)
        ci[_FREE_N] = capacity
        pcs = np.empty(capacity, dtype=np.int64)
        stage_of = np.empty(capacity, dtype=np.int64)
        spin_depth = np.zeros(capacity, dtype=np.int64)
        depth = np.zeros(capacity, dtype=np.int64)
        st_stage = np.empty((capacity, max_depth), dtype=np.int64)
        st_began = np.empty((capacity, max_depth))
        finish = np.full(n_tasks, np.nan)
        stage_time = np.zeros((n, n_stages))
        dur_stage = np.empty(n_stage_ends, dtype=np.int64)
        dur_val = np.empty(n_stage_ends)
        # A waiting task's record; lock queues are FIFOs per lock and priority
        # level, linked through the slots (head, tail, next, length).
        w_stage = np.zeros(capacity, dtype=np.int64)
        w_since = np.zeros(capacity)
        w_shared = np.zeros(capacity, dtype=np.bool_)
        q_head = np.full((n_locks, slots), -1, dtype=np.int64)
        q_tail = np.full((n_locks, slots), -1, dtype=np.int64)
        q_next = np.empty(capacity, dtype=np.int64)
        q_len = np.zeros(n_locks, dtype=np.int64)
        # A spinning task's record; spin deadlines are lists per lock, linked
        # through the slots (time, cpu seq, next, previous; head and tail per lock).
        sp_active = np.zeros(capacity, dtype=np.bool_)
        sp_start = np.zeros(capacity)
        sp_slot = np.zeros(capacity, dtype=np.int64)
        sp_lock = np.zeros(capacity, dtype=np.int64)
        sp_pinned = np.zeros(capacity, dtype=np.bool_)
        d_at = np.empty(capacity)
        d_seq = np.empty(capacity, dtype=np.int64)
        d_next = np.empty(capacity, dtype=np.int64)
        d_prev = np.empty(capacity, dtype=np.int64)
        d_head = np.full(n_locks, -1, dtype=np.int64)
        d_tail = np.full(n_locks, -1, dtype=np.int64)
        # Locks: owner's slot (-1 none), readers; a wake-up on its way to the
        # head (-1 none); whether the head lost a race (the next release is its).
        l_owner = np.full(n_locks, -1, dtype=np.int64)
        l_readers = np.zeros(n_locks, dtype=np.int64)
        l_waking = np.full(n_locks, -1, dtype=np.int64)
        l_handoff = np.zeros(n_locks, dtype=np.bool_)
        held_since = np.zeros((capacity, n_locks))
        # Counters (locks then gates): acquisitions, contended, waiters, max_waiters;
        # wait_s, hold_s, contended_wall_s, busy_since.
        cnt = np.zeros((n_locks + n_gates, 4), dtype=np.int64)
        # Columns: wait, hold, contended wall, contended since; for a lock,
        # its rcu_sync's last exit (none yet: -inf) and writers inside.
        cnf = np.zeros((n_locks + n_gates, 6))
        cnf[:, 4] = -np.inf
        acq_by_stage = np.zeros((n_locks, slots), dtype=np.int64)
        wait_by_stage = np.zeros((n_locks, slots))
        # Gates: FIFO rings of slots; a task waits at one gate at most.
        g_free = gate_permits.copy()
        g_task = np.empty((n_gates, capacity), dtype=np.int64)
        g_since = np.empty((n_gates, capacity))
        g_head = np.zeros(n_gates, dtype=np.int64)
        g_len = np.zeros(n_gates, dtype=np.int64)
        # Pools: being made and the target (the capacity until a POOL_TARGET);
        # the log of their events, bounded by their ops.
        pool_left[:] = initial_pools
        n_pools = pool_left.shape[0]
        pool_making = np.zeros(n_pools, dtype=np.int64)
        pool_target = pool_left.copy()
        # A pool whose refill turns remove its surplus keeps it until then.
        pool_trimmed = np.zeros(n_pools, dtype=np.bool_)
        for pc in range(kinds.shape[0]):
            if kinds[pc] == _POOL_TRIM:
                pool_trimmed[args[pc]] = True
        log_size = _pool_log_size(kinds, offsets, uses, int(initial_pools.sum()))
        ev_t = np.empty(log_size)
        ev_pool = np.empty(log_size, dtype=np.int32)
        ev_kind = np.empty(log_size, dtype=np.int8)
        ev_level = np.empty(log_size, dtype=np.int32)
        ev_making = np.empty(log_size, dtype=np.int32)
        ev_task = np.empty(log_size, dtype=np.int64)
        ev_n = np.zeros(1, dtype=np.int64)
        pools = (
            pool_left,
            pool_making,
            pool_target,
            ev_t,
            ev_pool,
            ev_kind,
            ev_level,
            ev_making,
            ev_n,
            ev_task,
            pool_trimmed,
        )
        n_dur, zeroed, events = _simulate(
            (
                kinds,
                args,
                amounts,
                offsets,
                arrival,
                branch_parent,
                spawn_base,
                arrivals,
                arrival_key,
                slot,
                task_part,
                own_offsets,
                own_amount,
            ),
            machine,
            (lock_kind, lock_level, lock_spin_s, lock_wake_s, lock_dispatch_s, lock_pinned),
            pools,
            (c, ci, cpu_acc, lock_spin),
            (pcs, stage_of, spin_depth, depth, st_stage, st_began, finish, slot_task, free_slots),
            (stage_time, dur_stage, dur_val),
            (ht, hk, hv, hn, ft, fk, fv),
            (job_start, job_slot),
            (w_stage, w_since, w_shared),
            (q_head, q_tail, q_next, q_len),
            (sp_active, sp_start, sp_slot, sp_lock, sp_pinned),
            (d_at, d_seq, d_next, d_prev, d_head, d_tail, spin_locks),
            (l_owner, l_readers, l_waking, l_handoff),
            (cnt, cnf, acq_by_stage, held_since, wait_by_stage),
            (g_free, g_task, g_since, g_head, g_len),
        )
        if n_dur >= 0:
            break
        # More tasks were under way at once than there were slots: again,
        # from the start, with four times as many.
        capacity = min(n_tasks, 4 * capacity + 1)
    return (
        finish,
        cpu_acc,
        lock_spin,
        cnt,
        cnf,
        acq_by_stage,
        dur_stage[:n_dur],
        dur_val[:n_dur],
        stage_time,
        zeroed,
        events,
        ev_t[: ev_n[0]],
        ev_pool[: ev_n[0]],
        ev_kind[: ev_n[0]],
        ev_level[: ev_n[0]],
        ev_making[: ev_n[0]],
        ev_task[: ev_n[0]],
        wait_by_stage,
    )
