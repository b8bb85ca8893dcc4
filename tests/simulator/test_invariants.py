"""Hypothesis properties of the kernel on random small programs.

Programs have 1–30 sandboxes drawn from 1–3 plan templates of 1–4 stages; steps
are CPU work, sleeps, zeroing, pooled steps and nested lock holds on up to 3
locks (mutexes, some spinning before they sleep, spinlocks and reader-writer
locks), taken in a fixed global order so that no program can deadlock; stages
may sit behind admission gates. Some templates do a ``Once`` at the top of a
stage (no lock held while waiting, so it cannot deadlock either): the first
sandbox there runs its body, the others wait for it. Machines have 1–8 cores and a memory bandwidth
that may bind; service times are jittered by a seeded generator.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bootstorm.simulator import (
    Cpu,
    GateSpec,
    Hold,
    LockKind,
    LockSpec,
    MachineSpec,
    Once,
    OpKind,
    Pooled,
    PoolSpec,
    Program,
    Result,
    SandboxPlan,
    Sleep,
    Stage,
    Step,
    Zero,
    compile_program,
    run_program,
)


def with_mutex_wake(locks: tuple[LockSpec, ...], wake_s: float) -> tuple[LockSpec, ...]:
    """``locks`` with every mutex handed over through a wake-up of ``wake_s``
    (Linux without the hand-off flag); spinlocks and rw locks as they were."""
    return tuple(replace(s, wake_s=wake_s) if s.kind is LockKind.MUTEX else s for s in locks)


def with_kernel_hand_over(
    locks: tuple[LockSpec, ...], dispatch_s: float, *, pinned: bool
) -> tuple[LockSpec, ...]:
    """``locks`` with every mutex handed over to a waiter that must first get
    a core (``dispatch_s``) and, if ``pinned``, held without time slicing."""
    return tuple(
        replace(s, dispatch_s=dispatch_s, holder_pinned=pinned) if s.kind is LockKind.MUTEX else s
        for s in locks
    )


SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
REL = 1e-9  # relative slack for sums of floats that the kernel accumulates in another order
# The kernel's resolution: a job counts as done once its clock is within
# 1e-12·max(1, clock) of its finish tag (``cpu._REL_EPS``), and every clock
# runs at most as fast as simulated time. So each CPU or zeroing job may get up
# to 1e-12·max(1, t_end) less than it asked for, and finish that much earlier;
# and every timed op (sleeps too) lands on a float time, off by an ulp of t_end,
# far less than that. Sums over ops are compared with ``_op_slack`` per op.
COMPLETION_EPS = 1e-12
ZERO_RATE = 10e9
_WORK_KINDS = [int(OpKind.CPU), int(OpKind.GUEST_CPU)]

# -- the generator -------------------------------------------------------------------------

# Amounts include exact ties (0, ¼, ½, 1) so that simultaneous events are common.
_amount = st.one_of(st.sampled_from([0.0, 0.25, 0.5, 1.0]), st.floats(0.0, 2.0, allow_nan=False))
_bytes = st.one_of(st.sampled_from([0.0, 2.5e9, 1e10]), st.floats(0.0, 3e10, allow_nan=False))


@dataclass(frozen=True)
class Case:
    """A generated program, before compilation, with the seed of its jitter."""

    plans: tuple[SandboxPlan, ...]
    machine: MachineSpec
    locks: tuple[LockSpec, ...]
    gates: tuple[GateSpec, ...]
    pools: tuple[PoolSpec, ...]
    arrival_s: tuple[float, ...]
    service_cv: float
    seed: int

    def compile(self) -> Program:
        return compile_program(
            self.plans,
            machine=self.machine,
            locks=self.locks,
            gates=self.gates,
            pools=self.pools,
            arrival_s=self.arrival_s,
            service_cv=self.service_cv,
            rng=np.random.default_rng(self.seed),
        )


def _steps(
    draw: st.DrawFn,
    locks: tuple[LockSpec, ...],
    pools: tuple[PoolSpec, ...],
    *,
    depth: int,
    next_lock: int,
    atomic: bool,
) -> tuple[Step, ...]:
    """0–3 steps. Holds only take locks of index >= ``next_lock`` (global order);
    under a spinlock (``atomic``) only CPU work, spinlocks and pools are allowed."""
    out: list[Step] = []
    for _ in range(draw(st.integers(0, 3 if depth == 0 else 2))):
        kinds = ["cpu"] if atomic else ["cpu", "sleep", "zero"]
        free = [
            j for j in range(next_lock, len(locks)) if not atomic or locks[j].kind is LockKind.SPIN
        ]
        if free and depth < 3:
            kinds += ["hold", "hold"]  # locks are what the kernel is about: twice as likely
        if pools and depth < 2:
            kinds.append("pooled")
        kind = draw(st.sampled_from(kinds))
        if kind == "cpu":
            # Outside spinlocks, some work is a guest's, held to its CPU quota.
            out.append(Cpu(draw(_amount), guest=not atomic and draw(st.booleans())))
        elif kind == "sleep":
            out.append(Sleep(draw(_amount)))
        elif kind == "zero":
            out.append(Zero(draw(_bytes)))
        elif kind == "hold":
            j = draw(st.sampled_from(free))
            spec = locks[j]
            body = _steps(
                draw,
                locks,
                pools,
                depth=depth + 1,
                next_lock=j + 1,
                atomic=atomic or spec.kind is LockKind.SPIN,
            )
            shared = spec.kind is LockKind.RW and draw(st.booleans())
            out.append(Hold(spec.name, body, shared=shared))
        else:
            pool = draw(st.sampled_from(pools))

            def branch() -> tuple[Step, ...]:
                return _steps(
                    draw, locks, pools, depth=depth + 1, next_lock=next_lock, atomic=atomic
                )

            out.append(Pooled(pool.name, create=branch(), fetch=branch()))
    return tuple(out)


@st.composite
def cases(draw: st.DrawFn, *, with_pools: bool = True) -> Case:
    n_stages = draw(st.integers(1, 4))
    stage_names = [f"s{i}" for i in range(n_stages)]
    locks: list[LockSpec] = []
    for j in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(list(LockKind)))
        spin_s = 0.0
        if kind is LockKind.MUTEX and draw(st.booleans()):
            spin_s = draw(st.sampled_from([0.1, 0.5, 3.0]))
        priority = tuple(
            (name, draw(st.integers(0, 2)))
            for name in draw(st.lists(st.sampled_from(stage_names), unique=True, max_size=n_stages))
        )
        locks.append(LockSpec(name=f"L{j}", kind=kind, stage_priority=priority, spin_s=spin_s))
    gates = tuple(
        GateSpec(name=f"g{i}", permits=draw(st.integers(1, 4)))
        for i in range(draw(st.integers(0, 2)))
    )
    pools: tuple[PoolSpec, ...] = ()
    if with_pools:
        pools = tuple(
            PoolSpec(name=f"p{i}", capacity=draw(st.integers(0, 6)), memory_mib_per_device=1.0)
            for i in range(draw(st.integers(0, 2)))
        )
    # A Once skips its body for all but one sandbox: not every op runs.
    with_once = with_pools and draw(st.booleans())
    stage_gate = {
        name: draw(st.sampled_from([None, *(g.name for g in gates)])) for name in stage_names
    }
    frozen_locks = tuple(locks)

    def stage_steps() -> tuple[Step, ...]:
        return _steps(draw, frozen_locks, pools, depth=0, next_lock=0, atomic=False)

    def once_steps() -> tuple[Step, ...]:
        steps = stage_steps()
        body = _steps(draw, frozen_locks, pools, depth=1, next_lock=0, atomic=False)
        after = _steps(draw, frozen_locks, pools, depth=1, next_lock=0, atomic=False)
        at = draw(st.integers(0, len(steps)))
        return (*steps[:at], Once("o", body=body, waiters=0, after=after), *steps[at:])

    templates = []
    for _ in range(draw(st.integers(1, 3))):
        once_stage = draw(st.integers(0, n_stages - 1)) if with_once and draw(st.booleans()) else -1
        templates.append(
            tuple(
                Stage(
                    name,
                    once_steps() if k == once_stage else stage_steps(),
                    gate=stage_gate[name],
                )
                for k, name in enumerate(stage_names)
            )
        )
    # Hypothesis favours its simplest choices (False, small integers): make the
    # simplest program a crowd, so that contention is the common case.
    n = draw(st.integers(1, 5)) if draw(st.booleans()) else draw(st.integers(8, 30))
    which = [draw(st.integers(0, len(templates) - 1)) for _ in range(n)]
    # Every sandbox of a template with the Once passes it once: the maker lets
    # all the others go.
    sharing = sum(1 for t in which if _has_once(templates[t]))
    templates = [_with_waiters(t, max(sharing - 1, 0)) for t in templates]
    plans = tuple(templates[t] for t in which)
    gates += (GateSpec(name="o", permits=0, signal=True),) if with_once else ()
    if with_once:
        pools += (PoolSpec(name="o", capacity=1, memory_mib_per_device=0.0, ticket=True),)
    if draw(st.booleans()):
        arrival = (0.0,) * n
    else:
        arrival = tuple(draw(st.lists(_amount.map(lambda x: 2.0 * x), min_size=n, max_size=n)))
    machine = MachineSpec(
        cores=draw(st.integers(1, 8)),
        zero_bytes_per_core_s=ZERO_RATE,
        memory_bandwidth_bytes_s=draw(st.sampled_from([5e9, 25e9, 100e9])),
        guest_cpu_quota=draw(st.sampled_from([1.0, 0.5, 0.25])),
    )
    return Case(
        plans=plans,
        machine=machine,
        locks=frozen_locks,
        gates=gates,
        pools=pools,
        arrival_s=arrival,
        service_cv=draw(st.sampled_from([0.0, 0.3, 1.0])),
        seed=draw(st.integers(0, 2**32 - 1)),
    )


def _has_once(plan: SandboxPlan) -> bool:
    return any(isinstance(step, Once) for stage in plan for step in stage.steps)


def _with_waiters(plan: SandboxPlan, waiters: int) -> SandboxPlan:
    return tuple(
        replace(
            stage,
            steps=tuple(
                replace(step, waiters=waiters) if isinstance(step, Once) else step
                for step in stage.steps
            ),
        )
        for stage in plan
    )


# -- helpers -------------------------------------------------------------------------------


def _sandbox_alone(program: Program, i: int, capacities: tuple[int, ...]) -> Program:
    """Sandbox ``i``'s compiled ops (jitter included) as a one-sandbox program.

    A signal it would wait for has happened already (the shortest wait)."""
    lo, hi = int(program.offsets[i]), int(program.offsets[i + 1])
    pools = tuple(
        replace(pool, capacity=c) for pool, c in zip(program.pools, capacities, strict=True)
    )
    gates = tuple(
        replace(gate, permits=program.n_sandboxes) if gate.signal else gate
        for gate in program.gates
    )
    return Program.from_flat(
        machine=program.machine,
        stage_names=program.stage_names,
        locks=program.locks,
        gates=gates,
        pools=pools,
        arrival_s=np.zeros(1),
        offsets=np.array([0, hi - lo], dtype=np.int64),
        op_kind=program.op_kind[lo:hi].copy(),
        op_arg=program.op_arg[lo:hi].copy(),
        op_amount=program.op_amount[lo:hi].copy(),
    )


def _uncontended_latency(program: Program, i: int) -> float:
    """The shortest time sandbox ``i`` can take: alone on the machine, over every
    path through its pooled steps that the full run could have taken.

    A pool only empties, so along one path a sandbox's tries of pool p succeed
    for some first j of them and fail from then on; running it alone with
    capacity j (for every j up to its tries, and up to the real capacity)
    reproduces each such path.
    """
    lo, hi = int(program.offsets[i]), int(program.offsets[i + 1])
    kinds, args = program.op_kind[lo:hi], program.op_arg[lo:hi]
    tries = [
        int(np.sum((kinds == OpKind.POOL_TRY) & (args == p))) for p in range(len(program.pools))
    ]
    options = [
        range(min(t, pool.capacity) + 1) for t, pool in zip(tries, program.pools, strict=True)
    ]
    return min(
        float(run_program(_sandbox_alone(program, i, caps)).finish_s[0])
        for caps in itertools.product(*options)
    )


def _op_slack(program: Program, result: Result, kinds: tuple[OpKind, ...], i: int = -1) -> float:
    """Twice the most that the kernel's resolution can take off ``kinds`` ops (of
    sandbox ``i``, or of all sandboxes): COMPLETION_EPS·max(1, t_end) each."""
    lo, hi = (0, program.n_ops) if i < 0 else (int(program.offsets[i]), int(program.offsets[i + 1]))
    jobs = int(np.isin(program.op_kind[lo:hi], [int(k) for k in kinds]).sum())
    return 2.0 * jobs * COMPLETION_EPS * max(1.0, float(result.finish_s.max()))


# -- properties ----------------------------------------------------------------------------


@SETTINGS
@given(case=cases())
def test_no_sandbox_lost_and_nobody_beats_running_alone(case: Case) -> None:
    """Every sandbox finishes, passes through every stage of its plan once, and
    takes at least as long as it would alone on the machine (sharing cores,
    waiting for locks, gates or the pool can only slow it down); so the makespan
    is at least the longest uncontended sandbox."""
    program = case.compile()
    result = run_program(program, record=True)
    finish, arrival = result.finish_s, result.arrival_s
    assert np.all(np.isfinite(finish))
    assert np.all(finish >= arrival)
    assert result.recording is not None
    spans = result.recording.stage_spans
    per_sandbox = np.bincount([s for s, _, _, _ in spans], minlength=program.n_sandboxes)
    assert per_sandbox.tolist() == [len(plan) for plan in case.plans]
    alone = np.array([_uncontended_latency(program, i) for i in range(program.n_sandboxes)])
    latency = result.startup_latency_s
    slack = np.array(
        [
            _op_slack(program, result, (OpKind.CPU, OpKind.GUEST_CPU, OpKind.ZERO, OpKind.SLEEP), i)
            for i in range(len(alone))
        ]
    )
    assert np.all(latency >= alone * (1.0 - REL) - slack), (latency, alone)
    assert result.makespan_s >= float(np.max(alone * (1.0 - REL) - slack))


@SETTINGS
@given(case=cases())
def test_cpu_accounting(case: Case) -> None:
    """Core-seconds add up and never exceed what the cores can give.

    busy = work + spin + zero, per stage as in total; busy ≤ cores × makespan;
    the locks' spin adds up to the CPU's; nothing spins unless a spinlock was
    contended or a mutex spins before sleeping; a spinlock waiter burns at most
    one core for as long as it waits (spin ≤ wait_s), a mutex waiter at most
    ``spin_s`` of it; zeroing n bytes takes at least n/c core-seconds.
    """
    program = case.compile()
    result = run_program(program)
    cpu = result.cpu
    assert cpu.busy_core_s == pytest.approx(
        cpu.work_core_s + cpu.spin_core_s + cpu.zero_core_s, rel=REL
    )
    assert cpu.busy_core_s <= program.machine.cores * result.makespan_s * (1.0 + REL) + 1e-12
    for reason, total in [
        ("work", cpu.work_core_s),
        ("spin", cpu.spin_core_s),
        ("zero", cpu.zero_core_s),
    ]:
        by_stage = sum(r[reason] for r in cpu.by_stage.values())
        assert by_stage == pytest.approx(total, rel=REL, abs=1e-12)
    lock_spin = sum(s.spin_core_s for s in result.locks.values())
    assert lock_spin == pytest.approx(cpu.spin_core_s, rel=REL, abs=1e-12)
    can_spin = False
    for spec in program.locks:
        stats = result.locks[spec.name]
        assert stats.spin_core_s >= 0.0
        if spec.kind is LockKind.SPIN:
            assert stats.spin_core_s <= stats.wait_s * (1.0 + REL) + 1e-12
            can_spin |= stats.contended > 0
        elif spec.kind is LockKind.MUTEX and spec.spin_s > 0.0:
            bound = min(stats.wait_s, stats.contended * spec.spin_s)
            assert stats.spin_core_s <= bound * (1.0 + REL) + 1e-12
            can_spin = True
        else:
            assert stats.spin_core_s == 0.0
    if not can_spin:
        assert cpu.spin_core_s == 0.0
    zero_bytes = program.op_amount[program.op_kind == OpKind.ZERO]
    cpu_work = program.op_amount[np.isin(program.op_kind, _WORK_KINDS)]
    if not program.pools:
        # Every op runs exactly once: CPU time is conserved.
        work_slack = _op_slack(program, result, (OpKind.CPU, OpKind.GUEST_CPU))
        assert cpu.work_core_s == pytest.approx(float(cpu_work.sum()), rel=REL, abs=work_slack)
        zero_slack = _op_slack(program, result, (OpKind.ZERO,))
        assert cpu.zero_core_s >= float(zero_bytes.sum()) / ZERO_RATE * (1.0 - REL) - zero_slack
    else:
        # Not every branch runs: bounded by all branches together.
        assert cpu.work_core_s <= float(cpu_work.sum()) * (1.0 + REL) + 1e-12


@SETTINGS
@given(case=cases(with_pools=False))
def test_cpu_time_is_conserved_without_pools(case: Case) -> None:
    """With no pooled steps every op runs once, so the work core-seconds are the
    sum of the program's CPU amounts (after jitter), however the cores were shared."""
    program = case.compile()
    result = run_program(program)
    cpu_work = float(program.op_amount[np.isin(program.op_kind, _WORK_KINDS)].sum())
    work_slack = _op_slack(program, result, (OpKind.CPU, OpKind.GUEST_CPU))
    assert result.cpu.work_core_s == pytest.approx(cpu_work, rel=REL, abs=work_slack)
    zero_bytes = float(program.op_amount[program.op_kind == OpKind.ZERO].sum())
    zero_slack = _op_slack(program, result, (OpKind.ZERO,))
    assert result.cpu.zero_core_s >= zero_bytes / ZERO_RATE * (1.0 - REL) - zero_slack


@SETTINGS
@given(case=cases())
def test_deterministic(case: Case) -> None:
    """Same program, same result, bit for bit; recording changes nothing; the same
    seed compiles to the same arrays."""
    program = case.compile()
    first = run_program(program)
    second = run_program(program)
    recorded = run_program(program, record=True)
    assert first.finish_s.tobytes() == second.finish_s.tobytes()
    assert first.to_json() == second.to_json()
    assert first.finish_s.tobytes() == recorded.finish_s.tobytes()
    assert first.to_json() == recorded.to_json()
    again = case.compile()
    for name in ("offsets", "op_kind", "op_arg", "op_amount", "arrival_s"):
        assert getattr(program, name).tobytes() == getattr(again, name).tobytes(), name
    assert program.stage_names == again.stage_names


@SETTINGS
@given(case=cases())
def test_locks_and_gates_keep_their_promises(case: Case) -> None:
    """From the recording: exclusive holds never overlap another hold of the lock,
    shared holds overlap only shared holds, no gate ever has more sandboxes inside
    than permits; the lock counters agree with the spans."""
    program = case.compile()
    result = run_program(program, record=True)
    rec = result.recording
    assert rec is not None
    holds: dict[int, list[tuple[float, float, int]]] = {}
    waits: dict[int, list[float]] = {}
    waits_in: dict[tuple[int, str], float] = {}
    names = [*program.stage_names, "-"]
    for lock, sandbox, stage, is_hold, t0, t1 in rec.lock_spans:
        assert t1 >= t0
        if is_hold:
            holds.setdefault(lock, []).append((t0, t1, sandbox))
        else:
            waits.setdefault(lock, []).append(t1 - t0)
            key = (lock, names[stage])
            waits_in[key] = waits_in.get(key, 0.0) + (t1 - t0)
    # The mode of a hold is not recorded: read it from the sandbox's ops when the
    # sandbox takes that lock in one mode only (else leave the pair unchecked).
    modes: dict[tuple[int, int], set[int]] = {}
    for i in range(program.n_sandboxes):
        lo, hi = int(program.offsets[i]), int(program.offsets[i + 1])
        ops = zip(program.op_kind[lo:hi].tolist(), program.op_arg[lo:hi].tolist(), strict=True)
        for k, a in ops:
            if k in (OpKind.ACQUIRE, OpKind.ACQUIRE_SHARED):
                modes.setdefault((i, a), set()).add(k)
    for index, spec in enumerate(program.locks):
        stats = result.locks[spec.name]
        spans = sorted(holds.get(index, []))
        assert stats.acquisitions == len(spans)
        hold_s = sum(t1 - t0 for t0, t1, _ in spans)
        assert stats.hold_s == pytest.approx(hold_s, rel=REL, abs=1e-12)
        assert stats.wait_s == pytest.approx(sum(waits.get(index, [])), rel=REL, abs=1e-12)
        # The waits by stage are the spans' waits by the stage the waiter was in.
        by_stage = {st: w for (lk, st), w in waits_in.items() if lk == index and w}
        assert stats.wait_s_by_stage == pytest.approx(by_stage, rel=REL, abs=1e-12)
        assert stats.contended == len(waits.get(index, []))
        assert stats.wait_s >= stats.contended_wall_s * (1.0 - REL) - 1e-12
        assert stats.contended_wall_s <= result.makespan_s * (1.0 + REL) + 1e-12
        for a, b in itertools.combinations(spans, 2):
            if b[0] >= a[1] or a[0] >= b[1]:
                continue  # disjoint (touching ends are a hand-over)
            # Overlapping holds: only readers of an rw lock may share it.
            assert spec.kind is LockKind.RW, (spec, a, b)
            mode_a, mode_b = modes[(a[2], index)], modes[(b[2], index)]
            assert mode_a != {OpKind.ACQUIRE} and mode_b != {OpKind.ACQUIRE}, (spec, a, b)
    frame: list[tuple[int, int, float, float]] = list(rec.stage_spans)
    plan_gate = [{stage.name: stage.gate for stage in plan} for plan in case.plans]
    for gate in program.gates:
        if gate.signal:
            continue  # a wait for another sandbox, not an admission
        inside = [
            (b, e)
            for sandbox, stage, b, e in frame
            if plan_gate[sandbox][program.stage_names[stage]] == gate.name
        ]
        events = sorted([(e, -1) for _, e in inside] + [(b, 1) for b, _ in inside])
        level = peak = 0
        for _, step in events:
            level += step
            peak = max(peak, level)
        assert peak <= gate.permits
        assert result.gates[gate.name].entries == len(inside)


def test_generator_covers_the_features() -> None:
    """The strategy does produce spinlocks, rw readers, zeroing, pools and gates
    (a guard against a generator that silently stops exercising something)."""
    seen: set[str] = set()

    def visit(steps: tuple[Step, ...]) -> None:
        for step in steps:
            seen.add(type(step).__name__)
            if isinstance(step, Hold):
                seen.add("shared" if step.shared else "exclusive")
                visit(step.body)
            elif isinstance(step, Pooled):
                visit(step.create)
                visit(step.fetch)
            elif isinstance(step, Once):
                visit(step.body)
                visit(step.after)

    @settings(max_examples=200, deadline=None, database=None)
    @given(case=cases())
    def collect(case: Case) -> None:
        for plan in case.plans:
            for stage in plan:
                if stage.gate:
                    seen.add("gate")
                visit(stage.steps)
        seen.update(spec.kind.name for spec in case.locks)

    collect()
    expected = {
        "Cpu",
        "Sleep",
        "Zero",
        "Hold",
        "Pooled",
        "shared",
        "exclusive",
        "gate",
        "SPIN",
        "RW",
        "Once",
    }
    assert expected <= seen, expected - seen
