"""What every executor shares around its loop: the lock-priority table going
in, and the deadlock check and the :class:`Result` coming out.

An executor runs a :class:`~.program.Program` and counts; it hands its
counters to :func:`build_result` as a :class:`RunCounts`, which checks that
every task ended and builds the result the same way for all of them (the
same float operations in the same order, so that two executors that counted
the same get the same result to the bit). A new executor needs only its
loop. Nothing here imports SimPy or numba.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ._errors import DeadlockError
from .program import Program
from .recorder import Recording
from .result import (
    REASONS,
    CpuStats,
    GateStats,
    LockStats,
    PoolEvent,
    PoolStats,
    PoolTimeline,
    Result,
    StageStats,
    StartupStats,
)

__all__ = [
    "PoolEvent",
    "PoolLog",
    "RunCounts",
    "StartupSummary",
    "build_result",
    "check_finished",
    "lock_priority_table",
    "startup_summary",
]

WORK, SPIN, ZEROING = 0, 1, 2
"""Why CPU was burnt: ``cpu_acc[3 * stage + reason]`` (the order of :data:`.result.REASONS`)."""


def lock_priority_table(p: Program) -> npt.NDArray[np.int64]:
    """``table[lock, stage]``: the grant priority of a waiter of ``stage``
    (lower is served first; stages a lock's ``stage_priority`` omits get 0).
    The last column is for tasks outside any stage: priority 0."""
    n_stages = len(p.stage_names)
    table = np.zeros((len(p.locks), n_stages + 1), dtype=np.int64)
    for i, spec in enumerate(p.locks):
        if spec.stage_priority:
            given = dict(spec.stage_priority)  # names checked by Program.validate
            table[i, :n_stages] = [given.get(name, 0) for name in p.stage_names]
    return table


@dataclass(frozen=True, kw_only=True, slots=True)
class PoolLog:
    """Every pool event of a run in the order it happened (:class:`PoolEvent`
    codes), with the pool's ready and being-made devices after it and the
    task whose op it was (a sandbox for a take or an empty pool)."""

    t_s: npt.NDArray[np.float64]
    pool: npt.NDArray[np.int32]
    event: npt.NDArray[np.int8]
    ready: npt.NDArray[np.int32]
    making: npt.NDArray[np.int32]
    task: npt.NDArray[np.int64]

    @classmethod
    def empty(cls) -> PoolLog:
        return cls.of([], [], [], [], [], [])

    @classmethod
    def of(
        cls,
        t_s: list[float],
        pool: list[int],
        event: list[int],
        ready: list[int],
        making: list[int],
        task: list[int],
    ) -> PoolLog:
        """A log from lists (the SimPy executor's)."""
        return cls(
            t_s=np.asarray(t_s, dtype=np.float64),
            pool=np.asarray(pool, dtype=np.int32),
            event=np.asarray(event, dtype=np.int8),
            ready=np.asarray(ready, dtype=np.int32),
            making=np.asarray(making, dtype=np.int32),
            task=np.asarray(task, dtype=np.int64),
        )

    def empty_starts(self, p: Program) -> npt.NDArray[np.int64]:
        """The sandboxes that found a device pool empty (any pool, once each)."""
        devices = np.array([not spec.ticket for spec in p.pools], dtype=bool)
        missed = (self.event == PoolEvent.MISS) & devices[self.pool]
        if not missed.any():
            return np.zeros(0, dtype=np.int64)
        tasks = self.task[missed]
        if tasks.min() < 0:  # pragma: no cover - executors log tasks, never below 0
            return np.unique(tasks)
        # np.unique's sort, by marks: a day's million misses in one pass.
        seen = np.zeros(int(tasks.max()) + 1, dtype=bool)
        seen[tasks] = True
        return np.flatnonzero(seen).astype(np.int64, copy=False)

    def timelines(self, p: Program, *, horizon_s: float) -> dict[str, PoolTimeline]:
        """Per device pool (tickets left out), its events and levels."""
        out = {}
        for i, spec in enumerate(p.pools):
            if spec.ticket:
                continue
            # The indices once, then a gather per column: a boolean mask
            # scanned per column took 0.4 s over a day's 7 M events.
            mine = np.flatnonzero(self.pool == i)
            out[spec.name] = PoolTimeline(
                initial=spec.capacity,
                memory_mib_per_device=spec.memory_mib_per_device,
                t_s=self.t_s.take(mine),
                event=self.event.take(mine),
                ready=self.ready.take(mine),
                making=self.making.take(mine),
                task=self.task.take(mine),
            )
        return out


def horizon(finish: npt.NDArray[np.float64], log: PoolLog) -> float:
    """When the run's last task ended (its last pool event, if later)."""
    end = float(finish.max()) if finish.size else 0.0
    return max(end, float(log.t_s.max())) if log.t_s.size else end


def pool_stats(timelines: dict[str, PoolTimeline], *, horizon_s: float) -> dict[str, PoolStats]:
    """:class:`PoolStats` of each pool over ``[0, horizon_s]``."""
    out = {}
    for name, line in timelines.items():
        mib_h = line.memory_mib_h(until_s=horizon_s)
        out[name] = PoolStats(
            capacity=line.initial,
            taken=line.count(PoolEvent.TAKE),
            memory_mib=line.initial * line.memory_mib_per_device,
            empty_starts=line.count(PoolEvent.MISS),
            made=line.count(PoolEvent.MADE),
            trimmed=line.count(PoolEvent.TRIMMED),
            peak_memory_mib=line.peak_ready * line.memory_mib_per_device,
            mean_memory_mib=mib_h * 3600.0 / horizon_s if horizon_s > 0 else 0.0,
            memory_mib_h=mib_h,
        )
    return out


@dataclass(frozen=True, kw_only=True, slots=True)
class RunCounts:
    """What a loop counted, in plain containers.

    ``finish``: per task (sandboxes, then branches), NaN if it never ended;
    ``cpu_acc``: core-seconds per ``3 * stage + reason`` (stage ``n_stages``
    is outside any stage); ``lock_spin``: core-seconds spun per lock;
    ``counts``/``sums``: per lock then gate, a
    :class:`._contention.ContentionCounter`'s ``acquisitions, contended,
    waiters, max_waiters`` and ``wait_s, hold_s, contended_wall_s``;
    ``acquisitions_by_stage`` and ``wait_s_by_stage`` (the waits' sums, by the
    stage each waiter was in): per lock, per stage slot; ``pool_log``: the
    pools' events; ``durations``: per stage, the durations in the order the stage
    ended (the order the sums are made in); ``stage_time``: sandbox × stage.
    """

    finish: npt.NDArray[np.float64]
    cpu_acc: list[float]
    lock_spin: list[float]
    counts: list[list[int]]
    sums: list[list[float]]
    acquisitions_by_stage: list[list[int]]
    wait_s_by_stage: list[list[float]]
    durations: list[npt.NDArray[np.float64]]
    stage_time: npt.NDArray[np.float64]
    zeroed_bytes: float
    events: int
    pool_log: PoolLog


def check_finished(p: Program, finish: npt.NDArray[np.float64]) -> None:
    """A :class:`DeadlockError` if a task (sandbox or branch) never ended:
    nothing was left to happen, yet some tasks were waiting."""
    stuck = np.flatnonzero(np.isnan(finish))
    if stuck.size:
        raise DeadlockError(
            f"deadlock: {stuck.size} tasks never finished (first: {stuck[:5].tolist()}; "
            f"tasks from {p.n_sandboxes} on are branches)"
        )


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
    #: What the idle pooled devices held on average over the run, MiB.
    pool_mean_memory_mib: float = 0.0
    #: Starts that found a pool empty.
    empty_starts: int = 0
    #: Whether refill workers made devices during the run.
    refilled: bool = False

    @property
    def held_memory_mib(self) -> float:
        """What the pools cost a node, MiB: made before the storm and held
        until it (:attr:`pool_memory_mib`), or, where they refill while
        starts go on, what the idle devices held on average over the run."""
        return self.pool_mean_memory_mib if self.refilled else self.pool_memory_mib

    @classmethod
    def of(cls, result: Result) -> StartupSummary:
        return cls(
            makespan_s=result.makespan_s,
            startup=result.startup,
            pool_memory_mib=result.pool_memory_mib,
            pool_mean_memory_mib=result.pool_mean_memory_mib,
            empty_starts=result.empty_starts,
            refilled=any(p.made for p in result.pools.values()),
        )


def startup_summary(
    p: Program, finish: npt.NDArray[np.float64], log: PoolLog | None = None
) -> StartupSummary:
    """The summary of a run whose tasks ended at ``finish`` (checked first), as
    :func:`build_result` computes those figures (the same operations in the same order)."""
    check_finished(p, finish)
    done = finish[: p.n_sandboxes]
    arrival = p.arrival_s
    pools: dict[str, PoolStats] = {}
    empty = 0
    if log is not None:
        horizon_s = horizon(finish, log)
        pools = pool_stats(log.timelines(p, horizon_s=horizon_s), horizon_s=horizon_s)
        empty = int(log.empty_starts(p).size)
    return StartupSummary(
        makespan_s=float(done.max() - arrival.min()),
        startup=StartupStats.of(done - arrival),
        pool_memory_mib=p.pool_memory_mib,
        pool_mean_memory_mib=float(sum(s.mean_memory_mib for s in pools.values())),
        empty_starts=empty,
        refilled=any(s.made for s in pools.values()),
    )


def build_result(p: Program, raw: RunCounts, *, recording: Recording | None = None) -> Result:
    """The :class:`Result` of a run that counted ``raw`` (a
    :class:`DeadlockError` if a task never ended)."""
    n = p.n_sandboxes
    check_finished(p, raw.finish)
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
            wait_s_by_stage={
                name: waited
                for name, waited in zip(names, raw.wait_s_by_stage[i], strict=True)
                if waited
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
    horizon_s = horizon(raw.finish, raw.pool_log)
    timelines = raw.pool_log.timelines(p, horizon_s=horizon_s)
    pools = pool_stats(timelines, horizon_s=horizon_s)
    cpu_acc = [raw.cpu_acc[3 * s : 3 * s + 3] for s in range(len(names))]
    by_stage = {
        names[s]: dict(zip(REASONS, acc, strict=True)) for s, acc in enumerate(cpu_acc) if any(acc)
    }
    work, spin, zero = (sum(acc[r] for acc in cpu_acc) for r in range(3))
    busy = work + spin + zero
    cores = p.machine.cores
    # The CPU's share of the whole run: background branches (a VM's stop, a
    # refill) may end after the last sandbox is up, and their work counts.
    span_s = max(makespan, horizon_s - float(arrival.min()))
    cpu = CpuStats(
        cores=cores,
        busy_core_s=busy,
        work_core_s=work,
        spin_core_s=spin,
        zero_core_s=zero,
        utilisation=busy / (cores * span_s) if span_s > 0 else 0.0,
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
        recording=recording,
        pool_timelines=timelines,
        horizon_s=horizon_s,
        empty_start_sandboxes=raw.pool_log.empty_starts(p),
    )


def _branch_finish(p: Program, done: npt.NDArray[np.float64]) -> dict[str, npt.NDArray[np.float64]]:
    """Per branch kind (in order of first appearance), per sandbox: when its
    last branch of that kind ended (NaN: it has none)."""
    out: dict[str, npt.NDArray[np.float64]] = {}
    if not done.size:
        return out
    for kind in _kinds_in_order(p.branch_kind):
        mine = np.flatnonzero(p.branch_kind == kind)
        col = np.full(p.n_sandboxes, np.nan)
        parent = p.branch_parent.take(mine)
        ends = done.take(mine)
        # fmax is exact and order-free: the same maxima as one branch at a time.
        if parent.size and not (parent[1:] < parent[:-1]).any():
            # Branches in sandbox order (as compile_program numbers them):
            # one reduction per run of a parent, not ufunc.at's slow scatter
            # (0.2 s over a day's 2 M refill branches).
            starts = np.flatnonzero(np.concatenate(([True], parent[1:] != parent[:-1])))
            col[parent[starts]] = np.fmax.reduceat(ends, starts)
        else:
            np.fmax.at(col, parent, ends)
        out[p.branch_names[kind]] = col
    return out


def _kinds_in_order(kind: npt.NDArray[np.int32]) -> list[int]:
    """The values of ``kind`` (branch kinds: a handful, from 0) in order of
    first appearance: what ``np.unique(kind, return_index=True)`` sorted by
    the index gives, without sorting two million branches."""
    if kind.min() < 0:  # pragma: no cover - kinds are numbered from 0
        values, first = np.unique(kind, return_index=True)
        return [int(v) for v in values[np.argsort(first)]]
    present = np.flatnonzero(np.bincount(kind)).tolist()
    return sorted(present, key=lambda k: int(np.argmax(kind == k)))
