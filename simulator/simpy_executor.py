"""The reference executor: one SimPy process per sandbox interpreting its ops.

It is the readable one: every op is a few lines below, resources are the
classes of :mod:`.cpu` and :mod:`.locks`, and with ``record=True`` it keeps
every span. A compiled executor must give the same :class:`Result`
(:class:`.testing.ExecutorContract`); both hand their counters to
:func:`._build.build_result`.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import numpy as np
import simpy

from ._build import SPIN as _SPIN
from ._build import WORK as _WORK
from ._build import ZEROING as _ZEROING
from ._build import PoolEvent, PoolLog, RunCounts, build_result, lock_priority_table
from ._errors import DeadlockError
from .cpu import ProcessorSharingCPU, TimerEnvironment
from .locks import Gate, Mutex, RWLock, SpinLock
from .program import (  # plain ints of OpKind, as the loops compare them
    _ACQUIRE,
    _ACQUIRE_SHARED,
    _BACK,
    _CPU,
    _GATE_ENTER,
    _GATE_EXIT,
    _GUEST_CPU,
    _JUMP,
    _POOL_ORDER,
    _POOL_PUT,
    _POOL_TARGET,
    _POOL_TRIM,
    _POOL_TRY,
    _RCU_SYNC_ENTER,
    _RCU_SYNC_EXIT,
    _RELEASE,
    _SLEEP,
    _SPAWN,
    _STAGE_BEGIN,
    _STAGE_END,
    _ZERO,
    LockKind,
    Program,
)
from .recorder import Recorder, Recording
from .result import Result

__all__ = ["DeadlockError", "SimPyExecutor", "run_program"]


class SimPyExecutor:
    """Runs a :class:`Program` on SimPy.

    Parameters
    ----------
    record:
        Keep every stage span, lock wait/hold span and CPU change in
        ``Result.recording``. Off, the hot path pays one ``is None`` test.
    """

    def __init__(self, *, record: bool = False) -> None:
        self.record = record

    def run(self, program: Program) -> Result:
        return _Run(program, self.record).run()


def run_program(program: Program, *, record: bool = False) -> Result:
    """Run ``program`` on the reference executor."""
    return SimPyExecutor(record=record).run(program)


class _Run:
    def __init__(self, program: Program, record: bool) -> None:
        self.p = program
        env = self.env = TimerEnvironment()
        self.rec = Recorder() if record else None
        n_stages = len(program.stage_names)
        # Slot n_stages collects CPU spent outside any stage.
        self.cpu_acc = [[0.0, 0.0, 0.0] for _ in range(n_stages + 1)]
        self.lock_spin = [0.0] * len(program.locks)
        m = program.machine
        self.cpu = ProcessorSharingCPU(
            env,
            # Softirqs run with preemption off: the storm shares what they leave.
            cores=m.cores - m.reserved_cores if m.reserved_cores else m.cores,
            zero_bytes_per_core_s=m.zero_bytes_per_core_s,
            memory_bandwidth_bytes_s=m.memory_bandwidth_bytes_s,
            guest_cap=m.guest_cpu_quota,
            background_jobs=m.background_jobs,
            on_change=self.rec.cpu_change if self.rec is not None else None,
        )
        self.account = [
            [self._accumulator(stage, reason) for reason in range(3)]
            for stage in range(n_stages + 1)
        ]
        self.locks: list[Any] = []
        priority = lock_priority_table(program).tolist()
        for i, spec in enumerate(program.locks):
            kw: dict[str, Any] = dict(
                index=i,
                priority_by_stage=priority[i],
                cpu=self.cpu,
                spin_account=[self._spin_accumulator(st, i) for st in range(n_stages + 1)],
                spans=self.rec.lock_span if self.rec is not None else None,
            )
            if spec.kind is LockKind.MUTEX:
                handed = dict(wake_s=spec.wake_s, dispatch_s=spec.dispatch_s)
                self.locks.append(Mutex(env, spin_s=spec.spin_s, **handed, **kw))
            elif spec.kind is LockKind.SPIN:
                self.locks.append(SpinLock(env, **kw))
            else:
                self.locks.append(RWLock(env, **kw))
        # Locks whose holder's CPU work is not preempted (spinlocks; mutexes held
        # in a kernel without preemption).
        self.pins_holder = [spec.pins_holder for spec in program.locks]
        self.gates = [Gate(env, g.permits) for g in program.gates]
        # Per pool: devices ready, being made, the target; the log of events.
        self.pool_left = [pool.capacity for pool in program.pools]
        self.pool_making = [0] * len(program.pools)
        self.pool_target = list(self.pool_left)
        # Each lock's rcu_sync (RCU_SYNC_ENTER/EXIT): writers inside, and
        # when the last one left (never: a grace period is due).
        self.sync_inside = [0] * len(program.locks)
        self.sync_left_at = [-np.inf] * len(program.locks)
        # A pool whose refill turns remove its surplus keeps it until then.
        trims = program.ops.arg[program.ops.kind == _POOL_TRIM]
        self.pool_trimmed = [bool(np.any(trims == p)) for p in range(len(program.pools))]
        self.pool_log: tuple[list[float], list[int], list[int], list[int], list[int], list[int]] = (
            [],
            [],
            [],
            [],
            [],
            [],
        )
        n = program.n_sandboxes
        self.n = n
        self.finish = np.full(n, np.nan)  # NaN until the sandbox's last op is done
        self.branch_finish = np.full(program.n_branches, np.nan)
        self.task_owner: list[int] = [*range(n), *program.branch_parent.tolist()]
        self.spawn_base: list[int] = program.spawn_base.tolist()  # type: ignore[union-attr]
        self.stage_durations: list[list[float]] = [[] for _ in range(n_stages)]
        # Time each sandbox (with its branches) spent in each stage.
        self.stage_time = np.zeros((n, n_stages))
        self.zeroed_bytes = 0.0
        self.kinds: list[int] = program.op_kind.tolist()
        self.args: list[int] = program.op_arg.tolist()
        self.amounts: list[float] = program.op_amount.tolist()
        self.offsets: list[int] = program.offsets.tolist()

    def _accumulator(self, stage: int, reason: int) -> Callable[[float], None]:
        acc = self.cpu_acc[stage]

        def add(core_s: float) -> None:
            acc[reason] += core_s

        return add

    def _spin_accumulator(self, stage: int, lock: int) -> Callable[[float], None]:
        acc = self.cpu_acc[stage]
        per_lock = self.lock_spin

        def add(core_s: float) -> None:
            acc[_SPIN] += core_s
            per_lock[lock] += core_s

        return add

    def _log(self, pool: int, event: PoolEvent, task: int) -> None:
        t_s, pools, events, ready, making, tasks = self.pool_log
        tasks.append(task)
        t_s.append(self.env.now)
        pools.append(pool)
        events.append(int(event))
        ready.append(self.pool_left[pool])
        making.append(self.pool_making[pool])

    def _sandbox(self, i: int, arrival: float) -> Generator[simpy.Event, Any, None]:
        """Task ``i``: a sandbox (``i < n``) or a branch (``n + b``); locks know it as ``i``."""
        env, cpu, locks, gates = self.env, self.cpu, self.locks, self.gates
        kinds, args, amounts = self.kinds, self.args, self.amounts
        account, rec = self.account, self.rec
        no_stage = len(self.stage_durations)
        stage = no_stage
        stage_stack: list[tuple[int, float]] = []
        pins_holder = self.pins_holder
        pinned_depth = 0  # pinning locks held: CPU work in there is not preempted
        if arrival > 0.0:
            yield env.timeout(arrival)
        pc, end = self.offsets[i], self.offsets[i + 1]
        while pc < end:
            kind = kinds[pc]
            if kind == _CPU:
                if amounts[pc] > 0.0:
                    yield cpu.run(amounts[pc], account[stage][_WORK], pinned=pinned_depth > 0)
            elif kind == _SLEEP:
                if amounts[pc] > 0.0:
                    yield env.timeout(amounts[pc])
            elif kind == _ACQUIRE:
                ev = locks[args[pc]].acquire(i, stage)
                if ev is not None:
                    yield ev
                if pins_holder[args[pc]]:
                    pinned_depth += 1
            elif kind == _RELEASE:
                locks[args[pc]].release(i)
                if pins_holder[args[pc]]:
                    pinned_depth -= 1
            elif kind == _STAGE_BEGIN:
                stage_stack.append((stage, env.now))
                stage = args[pc]
            elif kind == _STAGE_END:
                outer, began = stage_stack.pop()
                duration = env.now - began
                self.stage_durations[stage].append(duration)
                self.stage_time[self.task_owner[i], stage] += duration
                if rec is not None:
                    rec.stage_spans.append((i, stage, began, env.now))
                stage = outer
            elif kind == _GATE_ENTER:
                ev = gates[args[pc]].enter()
                if ev is not None:
                    t0 = env.now
                    yield ev
                    if rec is not None:
                        rec.gate_spans.append((args[pc], i, t0, env.now))
            elif kind == _GATE_EXIT:
                for _ in range(max(1, int(amounts[pc]))):  # a signal lets many go
                    gates[args[pc]].exit()
            elif kind == _ACQUIRE_SHARED:
                ev = locks[args[pc]].acquire_shared(i, stage)
                if ev is not None:
                    yield ev
            elif kind == _ZERO:
                if amounts[pc] > 0.0:
                    yield cpu.zero(amounts[pc], account[stage][_ZEROING])
                    self.zeroed_bytes += amounts[pc]
            elif kind == _POOL_TRY:
                pool = args[pc]
                if self.pool_left[pool] > 0:
                    self.pool_left[pool] -= 1
                    self._log(pool, PoolEvent.TAKE, i)
                    pc += int(amounts[pc])
                    continue
                self._log(pool, PoolEvent.MISS, i)
            elif kind == _POOL_ORDER:
                pool = args[pc]
                if self.pool_left[pool] + self.pool_making[pool] >= self.pool_target[pool]:
                    pc += int(amounts[pc])  # enough ready or on the way: nothing to make
                    continue
                self.pool_making[pool] += 1
                self._log(pool, PoolEvent.ORDERED, i)
            elif kind == _POOL_PUT:
                pool = args[pc]
                self.pool_making[pool] -= 1
                self.pool_left[pool] += 1
                if not self.pool_trimmed[pool]:
                    # A device made while the target fell is removed at once.
                    self.pool_left[pool] = min(self.pool_left[pool], self.pool_target[pool])
                self._log(pool, PoolEvent.MADE, i)
            elif kind == _POOL_TARGET:
                pool = args[pc]
                self.pool_target[pool] = int(amounts[pc])
                if not self.pool_trimmed[pool]:
                    self.pool_left[pool] = min(self.pool_left[pool], self.pool_target[pool])
                self._log(pool, PoolEvent.RETARGET, i)
            elif kind == _POOL_TRIM:
                pool = args[pc]
                if self.pool_left[pool] <= self.pool_target[pool]:
                    pc += int(amounts[pc])  # no surplus: nothing to remove this turn
                    continue
                self.pool_left[pool] -= 1
                self._log(pool, PoolEvent.TRIMMED, i)
            elif kind == _BACK:
                pc -= int(amounts[pc])  # the next removal, if the surplus lasts
                continue
            elif kind == _RCU_SYNC_ENTER:
                lock = args[pc]
                cold = self.sync_inside[lock] == 0 and (
                    env.now >= self.sync_left_at[lock] + amounts[pc]
                )
                self.sync_inside[lock] += 1
                if cold and amounts[pc] > 0.0:
                    yield env.timeout(amounts[pc])  # rcu_sync_enter: a grace period
            elif kind == _RCU_SYNC_EXIT:
                lock = args[pc]
                self.sync_inside[lock] -= 1
                self.sync_left_at[lock] = env.now
            elif kind == _JUMP:
                pc += int(amounts[pc])
                continue
            elif kind == _GUEST_CPU:
                if amounts[pc] > 0.0:
                    yield cpu.run(amounts[pc], account[stage][_WORK], guest=True)
            elif kind == _SPAWN:
                task = self.n + self.spawn_base[i] + args[pc]
                env.process(self._sandbox(task, 0.0))
            pc += 1
        if i < self.n:
            self.finish[i] = env.now
        else:
            self.branch_finish[i - self.n] = env.now

    def run(self) -> Result:
        p, env = self.p, self.env
        for i, arrival in enumerate(p.arrival_s.tolist()):
            env.process(self._sandbox(i, arrival))
        env.run()
        counters = [lock.stats for lock in self.locks] + [g.stats for g in self.gates]
        counts = RunCounts(
            finish=np.concatenate([self.finish, self.branch_finish]),
            cpu_acc=[core_s for acc in self.cpu_acc for core_s in acc],
            lock_spin=self.lock_spin,
            counts=[[c.acquisitions, c.contended, c.waiters, c.max_waiters] for c in counters],
            sums=[[c.wait_s, c.hold_s, c.contended_wall_s] for c in counters],
            acquisitions_by_stage=[lock.acquisitions_by_stage for lock in self.locks],
            wait_s_by_stage=[lock.wait_s_by_stage for lock in self.locks],
            pool_log=PoolLog.of(*self.pool_log),
            durations=[np.asarray(d) for d in self.stage_durations],
            stage_time=self.stage_time,
            zeroed_bytes=self.zeroed_bytes,
            events=env.events_numbered(),
        )
        return build_result(p, counts, recording=self._recording())

    def _recording(self) -> Recording | None:
        if self.rec is None:
            return None
        p, r = self.p, self.rec
        return Recording(
            n_sandboxes=p.n_sandboxes,
            stage_names=p.stage_names,
            lock_names=tuple(lk.name for lk in p.locks),
            gate_names=tuple(g.name for g in p.gates),
            cores=p.machine.cores,
            stage_spans=tuple(r.stage_spans),
            lock_spans=tuple(r.lock_spans),
            gate_spans=tuple(r.gate_spans),
            cpu_samples=tuple(r.cpu_samples),
            branch_parent=tuple(p.branch_parent.tolist()),
            signal_gates=frozenset(i for i, g in enumerate(p.gates) if g.signal),
        )
