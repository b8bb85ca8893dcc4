"""The fast executor's loop compiled with numba (optional: ``pip install bootstorm[fast]``).

The same algorithm as :mod:`.fast`, statement for statement, in flat arrays:
task, waiter and spinner state are indexed arrays (every op runs at most once,
jumps only go forward, so ``n_ops`` bounds waiters and spinners), the event
queue and the CPU's job heaps are lists of tuples under :mod:`heapq`. The
kernel returns raw counters; :mod:`.fast` assembles the :class:`Result`.

No ``fastmath``: the floats must round as the reference's do.

Where it stands (2-core dev machine): ≈ 0.4 µs per event, 14–16 ms for the
400-sandbox ipvtap storm against ≈ 100 ms on SimPy, ≈ 0.4 s for 10 000
sandboxes against ≈ 5 s. Packing events into three fields gained ≈ 5%.
Not tried yet: a profile of the kernel (where do 0.4 µs per event go?),
typed lists instead of reflected ones for the per-lock queues, a jitclass
instead of the long argument lists, and waiter/spinner arrays sized by
the ACQUIRE ops rather than all ops (memory is ≈ 14 KiB per sandbox, over
twice the plain loop's, because of them and the locks × tasks hold table).
"""

from __future__ import annotations

import heapq
import math
from typing import Any

import numpy as np
from numba import njit  # type: ignore[import-not-found,unused-ignore]

_CPU, _SLEEP, _ACQUIRE, _ACQUIRE_SHARED, _RELEASE, _ZERO = 0, 1, 2, 3, 4, 5
_STAGE_BEGIN, _STAGE_END, _GATE_ENTER, _GATE_EXIT, _POOL_TRY, _JUMP = 6, 7, 8, 9, 10, 11
_SPAWN, _GUEST_CPU = 12, 13
_WORK, _SPIN, _ZEROING = 0, 1, 2
_URGENT, _NORMAL = 0, 1
# Events are (time, priority << 50 | seq, x << 3 | what): short tuples sort faster.
_URGENT_KEY, _NORMAL_KEY = 0, 1 << 50
_START, _ARRIVE, _RESUME, _TIMER, _WAKE = 0, 1, 2, 3, 4
_MUTEX, _SPINLOCK, _RW = 0, 1, 2
_REL_EPS = 1e-12

# Float CPU state, c[...]
_NOW, _S, _SP, _Z, _G, _LAST, _SH, _PSH, _ZSP, _GSH, _TIMER_AT = range(11)
# Int CPU state, ci[...]
_EID, _CSEQ, _GEN, _SPINNING, _PSPINNING = range(5)


@njit(cache=True)  # type: ignore[misc,unused-ignore]
def _advance(c: Any) -> None:
    dt = c[_NOW] - c[_LAST]
    if dt > 0.0:
        c[_S] += c[_SH] * dt
        c[_SP] += c[_PSH] * dt
        c[_Z] += c[_ZSP] * dt
        c[_G] += c[_GSH] * dt
        c[_LAST] = c[_NOW]


@njit(cache=True)  # type: ignore[misc,unused-ignore]
def _settle(
    c: Any,
    ci: Any,
    machine: Any,
    queue: Any,
    work: Any,
    pinned: Any,
    zeroing: Any,
    guest: Any,
    deadlines: Any,
    sp_active: Any,
) -> None:
    cores, guest_cap, bg, zero_rate, bandwidth = (
        machine[0],
        machine[1],
        machine[2],
        machine[3],
        machine[4],
    )
    n_pinned = len(pinned) + ci[_PSPINNING]
    pinned_share = 1.0 if n_pinned <= cores else cores / n_pinned
    left = cores - n_pinned if n_pinned < cores else 0.0
    m = len(zeroing)
    n_guest = len(guest)
    k = len(work) + m + ci[_SPINNING]
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
    if len(work) and share > 0.0:
        due = last + (work[0][0] - c[_S]) / share
    if len(pinned):
        t = last + (pinned[0][0] - c[_SP]) / pinned_share
        if t < due:
            due = t
    if len(guest) and guest_share > 0.0:
        t = last + (guest[0][0] - c[_G]) / guest_share
        if t < due:
            due = t
    if len(zeroing) and zero_speed > 0.0:
        t = last + (zeroing[0][0] - c[_Z]) / zero_speed
        if t < due:
            due = t
    while len(deadlines) and not sp_active[deadlines[0][2]]:
        heapq.heappop(deadlines)
    if len(deadlines) and deadlines[0][0] < due:
        due = deadlines[0][0]
    if due < c[_TIMER_AT]:
        c[_TIMER_AT] = due
        ci[_GEN] += 1
        delay = due - last
        ci[_EID] += 1
        at = c[_NOW] + (delay if delay > 0.0 else 0.0)
        heapq.heappush(queue, (at, _NORMAL_KEY + ci[_EID], ci[_GEN] * 8 + _TIMER))


@njit(cache=True)  # type: ignore[misc,unused-ignore]
def _finish_due(
    c: Any,
    ci: Any,
    queue: Any,
    heap: Any,
    progress: float,
    slack: float,
    clock: float,
    cpu_acc: Any,
) -> None:
    limit = progress + _REL_EPS * (progress if progress > 1.0 else 1.0) + slack
    now = c[_NOW]
    while len(heap) and heap[0][0] <= limit:
        item = heapq.heappop(heap)
        cpu_acc[item[4]] += clock - item[3]
        ci[_EID] += 1
        heapq.heappush(queue, (now, _NORMAL_KEY + ci[_EID], item[2] * 8 + _RESUME))


@njit(cache=True)  # type: ignore[misc,unused-ignore]
def _stop(c: Any, ci: Any, s: int, sp: Any, cpu_acc: Any, lock_spin: Any) -> None:
    sp_active, sp_start, sp_slot, sp_lock, sp_pinned = sp
    sp_active[s] = False
    if sp_pinned[s]:
        ci[_PSPINNING] -= 1
        spun = c[_SP] - sp_start[s]
    else:
        ci[_SPINNING] -= 1
        spun = c[_S] - sp_start[s]
    cpu_acc[sp_slot[s]] += spun
    lock_spin[sp_lock[s]] += spun


@njit(cache=True)  # type: ignore[misc,unused-ignore]
def _grant(
    lk: int,
    w: int,
    c: Any,
    ci: Any,
    machine: Any,
    queue: Any,
    work: Any,
    pinned: Any,
    zeroing: Any,
    guest: Any,
    deadlines: Any,
    sp: Any,
    cpu_acc: Any,
    lock_spin: Any,
    cnt: Any,
    cnf: Any,
    acq_by_stage: Any,
    held_since: Any,
    waiters: Any,
) -> None:
    """Hand lock ``lk`` to waiter ``w`` (owner or readers already updated)."""
    w_task, w_stage, w_since, w_spin = waiters
    now = c[_NOW]
    s = w_spin[w]
    if s >= 0 and sp[0][s]:
        _advance(c)
        _stop(c, ci, s, sp, cpu_acc, lock_spin)
        _settle(c, ci, machine, queue, work, pinned, zeroing, guest, deadlines, sp[0])
    # ContentionCounter.dequeue, then the take
    cnt[lk, 2] -= 1
    cnf[lk, 0] += now - w_since[w]
    if cnt[lk, 2] == 0:
        cnf[lk, 2] += now - cnf[lk, 3]
    cnt[lk, 0] += 1
    acq_by_stage[lk, w_stage[w]] += 1
    held_since[lk, w_task[w]] = now
    ci[_EID] += 1
    heapq.heappush(queue, (now, _NORMAL_KEY + ci[_EID], w_task[w] * 8 + _RESUME))


@njit(cache=True)  # type: ignore[misc,unused-ignore]
def run_kernel(
    kinds: Any,
    args: Any,
    amounts: Any,
    offsets: Any,
    arrival: Any,
    task_owner: Any,
    spawn_base: Any,
    n: int,
    n_stages: int,
    lock_kind: Any,
    lock_prio: Any,
    lock_spin_s: Any,
    lock_wake_s: Any,
    gate_permits: Any,
    gate_cap: int,
    pool_left: Any,
    machine: Any,
    max_depth: int,
) -> Any:
    n_tasks = offsets.shape[0] - 1
    n_ops = kinds.shape[0]
    n_locks = lock_kind.shape[0]
    n_gates = gate_permits.shape[0]
    slots = n_stages + 1
    c = np.zeros(11)
    c[_SH] = 1.0
    c[_PSH] = 1.0
    c[_ZSP] = 1.0
    c[_GSH] = 1.0
    c[_TIMER_AT] = math.inf
    ci = np.zeros(5, dtype=np.int64)
    cpu_acc = np.zeros(3 * slots)
    lock_spin = np.zeros(n_locks)
    zeroed = 0.0
    # Heaps, seeded with one item for numba's type inference and emptied.
    queue = [(0.0, 0, 0)]
    queue.pop()
    work = [(0.0, 0, 0, 0.0, 0)]
    work.pop()
    pinned = [(0.0, 0, 0, 0.0, 0)]
    pinned.pop()
    zeroing = [(0.0, 0, 0, 0.0, 0)]
    zeroing.pop()
    guest = [(0.0, 0, 0, 0.0, 0)]
    guest.pop()
    deadlines = [(0.0, 0, 0)]
    deadlines.pop()
    lock_q = [[(0, 0, 0)] for _ in range(n_locks)]
    for q in lock_q:
        q.pop()
    # Tasks
    pcs = offsets[:-1].copy()
    stage_of = np.full(n_tasks, n_stages, dtype=np.int64)
    spin_depth = np.zeros(n_tasks, dtype=np.int64)
    depth = np.zeros(n_tasks, dtype=np.int64)
    st_stage = np.zeros((n_tasks, max_depth), dtype=np.int64)
    st_began = np.zeros((n_tasks, max_depth))
    finish = np.full(n_tasks, np.nan)
    stage_time = np.zeros((n, n_stages))
    dur_stage = np.zeros(n_ops, dtype=np.int64)
    dur_val = np.zeros(n_ops)
    n_dur = 0
    # Waiters and spinners: at most one per op.
    w_task = np.zeros(n_ops + 1, dtype=np.int64)
    w_stage = np.zeros(n_ops + 1, dtype=np.int64)
    w_since = np.zeros(n_ops + 1)
    w_shared = np.zeros(n_ops + 1, dtype=np.bool_)
    w_spin = np.full(n_ops + 1, -1, dtype=np.int64)
    waiters = (w_task, w_stage, w_since, w_spin)
    n_w = 0
    sp_active = np.zeros(n_ops + 1, dtype=np.bool_)
    sp_start = np.zeros(n_ops + 1)
    sp_slot = np.zeros(n_ops + 1, dtype=np.int64)
    sp_lock = np.zeros(n_ops + 1, dtype=np.int64)
    sp_pinned = np.zeros(n_ops + 1, dtype=np.bool_)
    sp = (sp_active, sp_start, sp_slot, sp_lock, sp_pinned)
    n_sp = 0
    # Locks: owner (-1 none), readers, seq; holds; counters.
    l_owner = np.full(n_locks, -1, dtype=np.int64)
    l_readers = np.zeros(n_locks, dtype=np.int64)
    l_seq = np.zeros(n_locks, dtype=np.int64)
    l_waking = np.full(n_locks, -1, dtype=np.int64)  # the woken waiter, not yet running
    l_handoff = np.zeros(n_locks, dtype=np.bool_)  # the head lost a race: hand to it
    held_since = np.zeros((n_locks, n_tasks))
    # Counters (locks then gates): acquisitions, contended, waiters, max_waiters;
    # wait_s, hold_s, contended_wall_s, busy_since.
    cnt = np.zeros((n_locks + n_gates, 4), dtype=np.int64)
    cnf = np.zeros((n_locks + n_gates, 4))
    acq_by_stage = np.zeros((n_locks, slots), dtype=np.int64)
    g_free = gate_permits.copy()
    g_task = np.zeros((n_gates, gate_cap), dtype=np.int64)
    g_since = np.zeros((n_gates, gate_cap))
    g_head = np.zeros(n_gates, dtype=np.int64)
    g_tail = np.zeros(n_gates, dtype=np.int64)
    events = 0
    for task in range(n):
        ci[_EID] += 1
        heapq.heappush(queue, (0.0, _URGENT_KEY + ci[_EID], task * 8 + _START))
    while len(queue):
        item = heapq.heappop(queue)
        now = item[0]
        what = item[2] & 7
        x = item[2] >> 3
        c[_NOW] = now
        events += 1
        if what == _TIMER:
            if x != ci[_GEN]:
                continue
            c[_TIMER_AT] = math.inf
            _advance(c)
            tick = np.spacing(c[_LAST])
            share = c[_S]
            _finish_due(c, ci, queue, work, share, c[_SH] * tick, share, cpu_acc)
            if len(pinned):
                p = c[_SP]
                _finish_due(c, ci, queue, pinned, p, c[_PSH] * tick, p, cpu_acc)
            if len(guest):
                g = c[_G]
                _finish_due(c, ci, queue, guest, g, c[_GSH] * tick, g, cpu_acc)
            if len(zeroing):
                _finish_due(c, ci, queue, zeroing, c[_Z], c[_ZSP] * tick, share, cpu_acc)
            if len(deadlines):
                last = c[_LAST]
                limit = last + _REL_EPS * (last if last > 1.0 else 1.0)
                while len(deadlines) and deadlines[0][0] <= limit:
                    s = heapq.heappop(deadlines)[2]
                    if sp_active[s]:
                        _stop(c, ci, s, sp, cpu_acc, lock_spin)
            _settle(c, ci, machine, queue, work, pinned, zeroing, guest, deadlines, sp_active)
            continue
        if what == _WAKE:
            lk = x
            w = l_waking[lk]
            l_waking[lk] = -1
            q = lock_q[lk]
            if len(q) == 0 or q[0][2] != w:
                continue  # only a higher-priority newcomer can overtake
            if l_owner[lk] < 0:
                heapq.heappop(q)
                l_owner[lk] = w_task[w]
                _grant(
                    lk,
                    w,
                    c,
                    ci,
                    machine,
                    queue,
                    work,
                    pinned,
                    zeroing,
                    guest,
                    deadlines,
                    sp,
                    cpu_acc,
                    lock_spin,
                    cnt,
                    cnf,
                    acq_by_stage,
                    held_since,
                    waiters,
                )
            else:
                l_handoff[lk] = True  # stolen while it woke: the next release is its
            continue
        task = x
        if what == _START:
            if arrival[task] > 0.0:
                ci[_EID] += 1
                heapq.heappush(
                    queue, (now + arrival[task], _NORMAL_KEY + ci[_EID], task * 8 + _ARRIVE)
                )
                continue
            pc = pcs[task]
        elif what == _ARRIVE:
            pc = pcs[task]
        else:
            pc = pcs[task]
            kind = kinds[pc]
            if kind == _ACQUIRE and lock_kind[args[pc]] == _SPINLOCK:
                spin_depth[task] += 1
            elif kind == _ZERO:
                zeroed += amounts[pc]
            pc += 1
        end = offsets[task + 1]
        stage = stage_of[task]
        while pc < end:
            kind = kinds[pc]
            blocked = False
            if kind in (_CPU, _GUEST_CPU):
                amount = amounts[pc]
                if amount > 0.0:
                    _advance(c)
                    ci[_CSEQ] += 1
                    slot = 3 * stage + _WORK
                    if kind == _CPU and spin_depth[task] > 0:
                        heapq.heappush(pinned, (c[_SP] + amount, ci[_CSEQ], task, c[_SP], slot))
                    elif kind == _GUEST_CPU and machine[1] < 1.0:
                        heapq.heappush(guest, (c[_G] + amount, ci[_CSEQ], task, c[_G], slot))
                    else:
                        heapq.heappush(work, (c[_S] + amount, ci[_CSEQ], task, c[_S], slot))
                    _settle(
                        c, ci, machine, queue, work, pinned, zeroing, guest, deadlines, sp_active
                    )
                    blocked = True
            elif kind == _SLEEP:
                amount = amounts[pc]
                if amount > 0.0:
                    ci[_EID] += 1
                    heapq.heappush(
                        queue, (now + amount, _NORMAL_KEY + ci[_EID], task * 8 + _RESUME)
                    )
                    blocked = True
            elif kind in (_ACQUIRE, _ACQUIRE_SHARED):
                lk = args[pc]
                shared = kind == _ACQUIRE_SHARED
                if lock_kind[lk] == _RW:
                    if shared:
                        free = l_owner[lk] < 0 and len(lock_q[lk]) == 0
                    else:
                        free = l_owner[lk] < 0 and l_readers[lk] == 0
                else:
                    free = l_owner[lk] < 0
                if free:
                    if shared:
                        l_readers[lk] += 1
                    else:
                        l_owner[lk] = task
                    cnt[lk, 0] += 1
                    acq_by_stage[lk, stage] += 1
                    held_since[lk, task] = now
                    if lock_kind[lk] == _SPINLOCK:
                        spin_depth[task] += 1
                else:
                    w = n_w
                    n_w += 1
                    w_task[w] = task
                    w_stage[w] = stage
                    w_since[w] = now
                    w_shared[w] = shared
                    l_seq[lk] += 1
                    heapq.heappush(lock_q[lk], (lock_prio[lk, stage], l_seq[lk], w))
                    # ContentionCounter.enqueue
                    cnt[lk, 1] += 1
                    if cnt[lk, 2] == 0:
                        cnf[lk, 3] = now
                    cnt[lk, 2] += 1
                    if cnt[lk, 2] > cnt[lk, 3]:
                        cnt[lk, 3] = cnt[lk, 2]
                    if lock_kind[lk] == _SPINLOCK or lock_spin_s[lk] > 0.0:
                        _advance(c)
                        s = n_sp
                        n_sp += 1
                        sp_active[s] = True
                        sp_slot[s] = 3 * stage + _SPIN
                        sp_lock[s] = lk
                        w_spin[w] = s
                        if lock_kind[lk] == _SPINLOCK:
                            ci[_PSPINNING] += 1
                            sp_start[s] = c[_SP]
                            sp_pinned[s] = True
                        else:
                            ci[_SPINNING] += 1
                            sp_start[s] = c[_S]
                            sp_pinned[s] = False
                            ci[_CSEQ] += 1
                            heapq.heappush(deadlines, (now + lock_spin_s[lk], ci[_CSEQ], s))
                        _settle(
                            c,
                            ci,
                            machine,
                            queue,
                            work,
                            pinned,
                            zeroing,
                            guest,
                            deadlines,
                            sp_active,
                        )
                    blocked = True
            elif kind == _RELEASE:
                lk = args[pc]
                cnf[lk, 1] += now - held_since[lk, task]
                q = lock_q[lk]
                grants = 0
                if lock_kind[lk] != _RW:
                    if lock_kind[lk] == _SPINLOCK:
                        spin_depth[task] -= 1
                    if len(q) == 0:
                        l_owner[lk] = -1
                    elif lock_wake_s[lk] <= 0.0 or l_handoff[lk]:
                        l_handoff[lk] = False
                        grants = 1
                    else:
                        # Free the lock and wake the head; until it runs, a running
                        # task may take the lock (acquire's fast path).
                        l_owner[lk] = -1
                        if l_waking[lk] < 0:
                            l_waking[lk] = q[0][2]
                            ci[_EID] += 1
                            at = now + lock_wake_s[lk]
                            heapq.heappush(queue, (at, _NORMAL_KEY + ci[_EID], lk * 8 + _WAKE))
                else:
                    if l_owner[lk] == task:
                        l_owner[lk] = -1
                    else:
                        l_readers[lk] -= 1
                    if l_readers[lk] == 0 and len(q):
                        grants = 1 if not w_shared[q[0][2]] else -1
                # grants: 1 = the head; -1 = the leading readers.
                while grants != 0 and len(q) and (grants == 1 or w_shared[q[0][2]]):
                    w = heapq.heappop(q)[2]
                    if w_shared[w]:
                        l_readers[lk] += 1
                    else:
                        l_owner[lk] = w_task[w]
                    _grant(
                        lk,
                        w,
                        c,
                        ci,
                        machine,
                        queue,
                        work,
                        pinned,
                        zeroing,
                        guest,
                        deadlines,
                        sp,
                        cpu_acc,
                        lock_spin,
                        cnt,
                        cnf,
                        acq_by_stage,
                        held_since,
                        waiters,
                    )
                    if grants == 1:
                        grants = 0
            elif kind == _STAGE_BEGIN:
                d = depth[task]
                st_stage[task, d] = stage
                st_began[task, d] = now
                depth[task] = d + 1
                stage = args[pc]
                stage_of[task] = stage
            elif kind == _STAGE_END:
                d = depth[task] - 1
                depth[task] = d
                duration = now - st_began[task, d]
                dur_stage[n_dur] = stage
                dur_val[n_dur] = duration
                n_dur += 1
                stage_time[task_owner[task], stage] += duration
                stage = st_stage[task, d]
                stage_of[task] = stage
            elif kind == _GATE_ENTER:
                gi = args[pc]
                row = n_locks + gi
                cnt[row, 0] += 1
                if g_free[gi] > 0:
                    g_free[gi] -= 1
                else:
                    g_task[gi, g_tail[gi]] = task
                    g_since[gi, g_tail[gi]] = now
                    g_tail[gi] += 1
                    cnt[row, 1] += 1
                    if cnt[row, 2] == 0:
                        cnf[row, 3] = now
                    cnt[row, 2] += 1
                    if cnt[row, 2] > cnt[row, 3]:
                        cnt[row, 3] = cnt[row, 2]
                    blocked = True
            elif kind == _GATE_EXIT:
                gi = args[pc]
                row = n_locks + gi
                if g_head[gi] < g_tail[gi]:
                    h = g_head[gi]
                    g_head[gi] += 1
                    cnt[row, 2] -= 1
                    cnf[row, 0] += now - g_since[gi, h]
                    if cnt[row, 2] == 0:
                        cnf[row, 2] += now - cnf[row, 3]
                    ci[_EID] += 1
                    heapq.heappush(
                        queue, (now, _NORMAL_KEY + ci[_EID], g_task[gi, h] * 8 + _RESUME)
                    )
                else:
                    g_free[gi] += 1
            elif kind == _ZERO:
                amount = amounts[pc]
                if amount > 0.0:
                    _advance(c)
                    ci[_CSEQ] += 1
                    tag = c[_Z] + amount / machine[3]
                    heapq.heappush(zeroing, (tag, ci[_CSEQ], task, c[_S], 3 * stage + _ZEROING))
                    _settle(
                        c, ci, machine, queue, work, pinned, zeroing, guest, deadlines, sp_active
                    )
                    blocked = True
            elif kind == _POOL_TRY:
                if pool_left[args[pc]] > 0:
                    pool_left[args[pc]] -= 1
                    pc += int(amounts[pc])
                    continue
            elif kind == _JUMP:
                pc += int(amounts[pc])
                continue
            elif kind == _SPAWN:
                ci[_EID] += 1
                branch = n + spawn_base[task] + args[pc]
                heapq.heappush(queue, (now, _URGENT_KEY + ci[_EID], branch * 8 + _START))
            if blocked:
                break
            pc += 1
        pcs[task] = pc
        if pc >= end:
            finish[task] = now
    return (
        finish,
        cpu_acc,
        lock_spin,
        cnt,
        cnf,
        acq_by_stage,
        pool_left,
        dur_stage[:n_dur],
        dur_val[:n_dur],
        stage_time,
        zeroed,
        events,
    )
