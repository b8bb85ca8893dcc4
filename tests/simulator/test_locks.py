"""Exact unit tests of locks, gates and pools on tiny programs.

Every expected number below is worked out by hand in the test's docstring.
Durations are Sleep-based wherever CPU sharing should not matter, and are
binary fractions (0.25, 0.5, ...) so that most times are exact in floating point.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Sequence

import numpy as np
import pytest

from bootstorm.simulator import (
    Cpu,
    DeadlockError,
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
    ProgramError,
    Result,
    SandboxPlan,
    Signal,
    Sleep,
    Stage,
    Step,
    Wait,
    Zero,
    compile_program,
    run_program,
)
from bootstorm.simulator.fast import run_program_fast
from bootstorm.simulator.testing import with_flat_ops

MANY_CORES = MachineSpec(cores=64)


def _run(
    plans: Sequence[SandboxPlan],
    *,
    locks: Sequence[LockSpec] = (),
    gates: Sequence[GateSpec] = (),
    pools: Sequence[PoolSpec] = (),
    arrival_s: Sequence[float] | None = None,
    machine: MachineSpec = MANY_CORES,
    record: bool = False,
) -> Result:
    program = compile_program(
        plans, machine=machine, locks=locks, gates=gates, pools=pools, arrival_s=arrival_s
    )
    return run_program(program, record=record)


def _one(stage: str, *steps: Step, gate: str | None = None) -> SandboxPlan:
    """A plan of one stage."""
    return (Stage(stage, tuple(steps), gate=gate),)


def _hold(lock: str, duration_s: float, *, shared: bool = False) -> SandboxPlan:
    """One stage ``s`` that holds ``lock`` while sleeping ``duration_s``."""
    return _one("s", Hold(lock, (Sleep(duration_s),), shared=shared))


# -- mutex ----------------------------------------------------------------------------------


def test_mutex_is_fifo_by_arrival_not_by_index() -> None:
    """Four sandboxes hold a mutex for 1 s each, arriving at 0.3, 0, 0.2, 0.1
    (sandbox 0 last). Grants go by arrival: 1 at [0,1], 3 at [1,2], 2 at [2,3],
    0 at [3,4]."""
    result = _run(
        [_hold("m", 1.0)] * 4,
        locks=[LockSpec(name="m")],
        arrival_s=[0.3, 0.0, 0.2, 0.1],
        record=True,
    )
    assert result.finish_s.tolist() == [4.0, 1.0, 3.0, 2.0]
    assert result.recording is not None
    holds = result.recording.lock_frame().query("what == 'hold'").sort_values("begin_s")
    assert holds["sandbox"].tolist() == [1, 3, 2, 0]
    stats = result.locks["m"]
    assert (stats.acquisitions, stats.contended, stats.max_waiters) == (4, 3, 3)
    # Waits: 3 from 0.1 to 1, 2 from 0.2 to 2, 0 from 0.3 to 3.
    assert stats.wait_s == pytest.approx(0.9 + 1.8 + 2.7, rel=1e-12)


def test_mutex_stage_priority() -> None:
    """Priority s2 → 0, s1 → 1, and ``s0`` unlisted → 0 (the default).

    A holder (stage s1) has the lock over [0, 1]. Waiters arrive: W1 (s1) at
    0.1, W2 (s2) at 0.2, W3 (s0) at 0.3, W4 (s1) at 0.4, W5 (s2) at 0.5. Priority
    0 first, FIFO among equals: W2, W3, W5, then W1, W4, one second each, so
    they finish at 2, 3, 4, 5, 6.
    """
    plans = [
        _one(stage, Hold("L", (Sleep(1.0),))) for stage in ("s1", "s1", "s2", "s0", "s1", "s2")
    ]
    lock = LockSpec(name="L", stage_priority=(("s2", 0), ("s1", 1)))
    result = _run(plans, locks=[lock], arrival_s=[0.0, 0.1, 0.2, 0.3, 0.4, 0.5])
    assert result.finish_s.tolist() == [1.0, 5.0, 2.0, 3.0, 6.0, 4.0]
    # FIFO without priorities: in arrival order.
    fifo = _run(plans, locks=[LockSpec(name="L")], arrival_s=[0.0, 0.1, 0.2, 0.3, 0.4, 0.5])
    assert fifo.finish_s.tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]


def test_stage_priority_naming_an_unknown_stage_is_rejected_when_built() -> None:
    lock = LockSpec(name="L", stage_priority=(("nope", 0),))
    with pytest.raises(ProgramError, match=r"unknown stages \['nope'\]"):
        compile_program([_hold("L", 1.0)], machine=MachineSpec(cores=1), locks=[lock])


def test_contention_wait_hold_and_wall_time_exact() -> None:
    """Mutex; A at 0 holds 2 s, B at 0.5 holds 1 s, C at 1 holds 1 s.

    A [0, 2], B waits [0.5, 2] then holds [2, 3], C waits [1, 3] then holds [3, 4].
    wait_s = 1.5 + 2 = 3.5; someone waits over [0.5, 3]: contended_wall_s = 2.5;
    hold_s = 2 + 1 + 1 = 4; two waiters at once at most.
    """
    plans = [_hold("m", 2.0), _hold("m", 1.0), _hold("m", 1.0)]
    result = _run(plans, locks=[LockSpec(name="m")], arrival_s=[0.0, 0.5, 1.0])
    stats = result.locks["m"]
    assert result.finish_s.tolist() == [2.0, 3.0, 4.0]
    assert stats.acquisitions == 3
    assert stats.contended == 2
    assert stats.max_waiters == 2
    assert stats.wait_s == 3.5
    assert stats.contended_wall_s == 2.5
    assert stats.hold_s == 4.0
    assert stats.spin_core_s == 0.0
    assert stats.kind == "mutex"


def test_contended_wall_time_sums_separate_episodes() -> None:
    """A holds [0, 1], B (at 0.25) waits [0.25, 1] and holds [1, 1.5]; C (at 2)
    holds [2, 3] uncontended; D (at 2.5) waits [2.5, 3]. Two separate contended
    episodes: 0.75 + 0.5 = 1.25 s of wall time, equal to the summed waits."""
    plans = [_hold("m", 1.0), _hold("m", 0.5), _hold("m", 1.0), _hold("m", 1.0)]
    result = _run(plans, locks=[LockSpec(name="m")], arrival_s=[0.0, 0.25, 2.0, 2.5])
    stats = result.locks["m"]
    assert result.finish_s.tolist() == [1.0, 1.5, 3.0, 4.0]
    assert stats.contended_wall_s == 1.25
    assert stats.wait_s == 1.25
    assert stats.max_waiters == 1
    assert stats.hold_s == 1.0 + 0.5 + 1.0 + 1.0


# -- spinlocks ------------------------------------------------------------------------------


def _spin_plans(n: int, work_s: float = 1.0) -> list[SandboxPlan]:
    return [_one("s", Hold("spin", (Cpu(work_s),)))] * n


def test_spinlock_waiters_burn_their_wait_with_plentiful_cores() -> None:
    """8 cores, 3 sandboxes each holding a spinlock for Cpu(1) from t=0.

    A holds [0,1], B spins [0,1] and holds [1,2], C spins [0,2] and holds [2,3].
    Nobody shares a core, so spin core-s = waiting time = 1 + 2 = 3.
    """
    result = _run(
        _spin_plans(3),
        locks=[LockSpec(name="spin", kind=LockKind.SPIN)],
        machine=MachineSpec(cores=8),
    )
    stats = result.locks["spin"]
    assert result.finish_s.tolist() == [1.0, 2.0, 3.0]
    assert stats.wait_s == 3.0
    assert stats.spin_core_s == 3.0
    assert result.cpu.spin_core_s == 3.0
    assert result.cpu.work_core_s == 3.0
    assert result.cpu.by_stage["s"] == {"work": 3.0, "spin": 3.0, "zero": 0.0}
    assert stats.kind == "spin"


def test_spinlock_spin_is_wait_times_share_when_cores_are_short() -> None:
    """2 cores, same three spinlock sandboxes.

    [0, 1.5]: A works, B and C spin: 3 runnable on 2 cores, share ⅔; A's 1 core-s
    takes 1.5 s; B and C spin 1.5·⅔ = 1 core-s each. [1.5, 2.5]: B works, C spins,
    2 on 2 cores, share 1: C spins 1 more. [2.5, 3.5]: C works.
    Finish 1.5, 2.5, 3.5; wait_s = 1.5 + 2.5 = 4 but spin core-s = 1 + 1 + 1 = 3.
    """
    result = _run(
        _spin_plans(3),
        locks=[LockSpec(name="spin", kind=LockKind.SPIN)],
        machine=MachineSpec(cores=2),
    )
    stats = result.locks["spin"]
    np.testing.assert_allclose(result.finish_s, [1.5, 2.5, 3.5], rtol=1e-12)
    assert stats.wait_s == pytest.approx(4.0, rel=1e-12)
    assert stats.spin_core_s == pytest.approx(3.0, rel=1e-12)
    assert result.cpu.busy_core_s == pytest.approx(6.0, rel=1e-12)
    assert result.cpu.utilisation == pytest.approx(6.0 / 7.0, rel=1e-12)


def test_spinning_starves_a_bystander_on_a_scarce_core() -> None:
    """A and B take a lock around Cpu(1), C is a plain Cpu(1); all at t=0.

    Spinlock code runs with preemption off: the holder's work and every spinning
    waiter are *pinned*, each owning a core (``min(1, N/P)`` of one when P pinned
    jobs outnumber the N cores); other work shares the cores left over.

    1 core, spinlock: A works and B spins, pinned, ½ a core each; nothing is left
    for C. A finishes at 2 (B has spun 1 core-s); B works pinned until 3, still
    leaving C nothing; C then runs alone until 4.
    1 core, mutex: B sleeps; A and C share ½ each and finish at 2; B works until 3.
    2 cores, spinlock: A and B own a core each, C starves; A is done at 1 (B spun
    1 core-s); then B and C run side by side until 2.
    2 cores, mutex: A and C run at once until 1; B works until 2.
    """
    plans = [*_spin_plans(2), _one("other", Cpu(1.0))]
    spinlock = [LockSpec(name="spin", kind=LockKind.SPIN)]
    mutex = [LockSpec(name="spin")]
    for cores, lock, finish, spun in [
        (1, spinlock, [2.0, 3.0, 4.0], 1.0),
        (1, mutex, [2.0, 3.0, 2.0], 0.0),
        (2, spinlock, [1.0, 2.0, 2.0], 1.0),
        (2, mutex, [1.0, 2.0, 1.0], 0.0),
    ]:
        result = _run(plans, locks=lock, machine=MachineSpec(cores=cores))
        np.testing.assert_allclose(result.finish_s, finish, rtol=1e-12)
        assert result.locks["spin"].spin_core_s == pytest.approx(spun, rel=1e-12)
        assert result.cpu.spin_core_s == pytest.approx(spun, rel=1e-12)
        assert result.cpu.work_core_s == pytest.approx(3.0, rel=1e-12)


def _within(seconds: int, fn: Callable[[], Result]) -> Result:
    """Run ``fn`` but fail, instead of hanging, if it takes more than ``seconds``."""

    def on_alarm(signum: int, frame: object) -> None:
        raise TimeoutError(f"still running after {seconds} s: the kernel livelocks")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        return fn()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("work_s", [0.1, 0.2, 0.3, 1.0 / 3.0])
def test_work_starved_for_a_long_time_still_finishes(work_s: float) -> None:
    """1 core; A runs 10⁵ core-s inside a spinlock (pinned: it owns the core), B is
    plain work of ``work_s``, starved until A is done at 10⁵, then alone: 10⁵ + w.

    B's share clock stood still for 10⁵ s, so at t ≈ 10⁵ (one ulp of time ≈ 1.5e-11 s)
    its tag can be missed by more than the 1e-12 completion slack while the time
    left rounds to zero: the kernel used to re-arm a zero-delay timer forever.
    """
    plans = [_one("s", Hold("spin", (Cpu(1e5),))), _one("s", Cpu(work_s))]
    program = compile_program(
        plans, machine=MachineSpec(cores=1), locks=[LockSpec(name="spin", kind=LockKind.SPIN)]
    )
    result = _within(10, lambda: run_program(program))
    np.testing.assert_allclose(result.finish_s, [1e5, 1e5 + work_s], rtol=1e-12)


def test_mutex_spins_at_most_spin_s_then_sleeps() -> None:
    """Plentiful cores; A holds a mutex 1 s from t=0, B waits from t=0.

    With spin_s = 0.25 B spins 0.25 core-s then sleeps; with spin_s = 5 it
    spins for its whole 1 s wait (the grant stops it); with spin_s = 0 it never spins.
    """
    plans = [_hold("m", 1.0), _hold("m", 1.0)]
    for spin_s, spun in [(0.25, 0.25), (5.0, 1.0), (0.0, 0.0)]:
        result = _run(plans, locks=[LockSpec(name="m", spin_s=spin_s)])
        assert result.finish_s.tolist() == [1.0, 2.0]
        assert result.locks["m"].wait_s == 1.0
        assert result.locks["m"].spin_core_s == spun
        assert result.cpu.spin_core_s == spun


def test_mutex_spin_on_a_scarce_core() -> None:
    """1 core, mutex with spin_s = 0.5; A and B take it around Cpu(1) at t=0.

    [0, 0.5]: A works and B spins at ½ each: A does 0.25, B burns 0.25 core-s,
    then B sleeps. A's remaining 0.75 run alone: A done at 1.25; B works until 2.25.
    """
    plans = [_one("s", Hold("m", (Cpu(1.0),)))] * 2
    result = _run(plans, locks=[LockSpec(name="m", spin_s=0.5)], machine=MachineSpec(cores=1))
    np.testing.assert_allclose(result.finish_s, [1.25, 2.25], rtol=1e-12)
    assert result.locks["m"].spin_core_s == pytest.approx(0.25, rel=1e-12)
    assert result.locks["m"].wait_s == pytest.approx(1.25, rel=1e-12)
    assert result.cpu.busy_core_s == pytest.approx(2.25, rel=1e-12)


# -- reader-writer locks --------------------------------------------------------------------

RW = LockSpec(name="rw", kind=LockKind.RW)


def test_rw_readers_hold_in_parallel() -> None:
    """Three readers holding 1 s from t=0 all finish at 1, none waits."""
    result = _run([_hold("rw", 1.0, shared=True)] * 3, locks=[RW])
    assert result.finish_s.tolist() == [1.0, 1.0, 1.0]
    stats = result.locks["rw"]
    assert (stats.acquisitions, stats.contended, stats.hold_s) == (3, 0, 3.0)
    assert stats.kind == "rw"


def test_rw_writer_is_exclusive() -> None:
    """W1 writes [0, 1]; R (at 0.25) reads after it, [1, 2]; W2 (at 0.5) writes
    after the reader, [2, 3]."""
    plans = [_hold("rw", 1.0), _hold("rw", 1.0, shared=True), _hold("rw", 1.0)]
    result = _run(plans, locks=[RW], arrival_s=[0.0, 0.25, 0.5])
    assert result.finish_s.tolist() == [1.0, 2.0, 3.0]
    assert result.locks["rw"].wait_s == 0.75 + 1.5


def test_rw_waiting_writer_is_not_starved_by_new_readers() -> None:
    """R1 reads [0, 2]; W (at 0.5) waits for it; R2 (at 1) could join R1 but queues
    behind the waiting writer: W writes [2, 3], R2 reads [3, 4]."""
    plans = [_hold("rw", 2.0, shared=True), _hold("rw", 1.0), _hold("rw", 1.0, shared=True)]
    result = _run(plans, locks=[RW], arrival_s=[0.0, 0.5, 1.0])
    assert result.finish_s.tolist() == [2.0, 3.0, 4.0]
    assert result.locks["rw"].max_waiters == 2


def test_rw_release_serves_leading_readers_together() -> None:
    """W1 writes [0, 1]; queued in order R1 (0.1), R2 (0.2), W2 (0.3), R3 (0.4).
    On release R1 and R2 read together [1, 2]; W2 writes [2, 3]; R3 reads [3, 4]."""
    plans = [
        _hold("rw", 1.0),
        _hold("rw", 1.0, shared=True),
        _hold("rw", 1.0, shared=True),
        _hold("rw", 1.0),
        _hold("rw", 1.0, shared=True),
    ]
    result = _run(plans, locks=[RW], arrival_s=[0.0, 0.1, 0.2, 0.3, 0.4])
    assert result.finish_s.tolist() == [1.0, 2.0, 2.0, 3.0, 4.0]
    stats = result.locks["rw"]
    assert stats.max_waiters == 4
    assert stats.contended_wall_s == pytest.approx(3.0 - 0.1, rel=1e-12)


# -- gates and pools ------------------------------------------------------------------------


def _max_concurrent(begin_s: Sequence[float], end_s: Sequence[float]) -> int:
    """Largest number of [begin, end) intervals open at one instant."""
    events = sorted([(e, -1) for e in end_s] + [(b, +1) for b in begin_s])
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    return peak


def test_gate_limits_concurrency_to_permits() -> None:
    """Gate of 2 permits, 5 sandboxes of one gated 1 s stage from t=0: they run in
    waves [0,1], [0,1], [1,2], [1,2], [2,3]. Waits: 1 + 1 + 2 = 4 s; somebody waits
    over [0, 2]. The stage spans exclude the wait at the gate."""
    plans = [_one("g", Sleep(1.0), gate="gate")] * 5
    result = _run(plans, gates=[GateSpec(name="gate", permits=2)], record=True)
    assert result.finish_s.tolist() == [1.0, 1.0, 2.0, 2.0, 3.0]
    assert result.recording is not None
    spans = result.recording.stage_frame()
    assert _max_concurrent(spans["begin_s"].tolist(), spans["end_s"].tolist()) == 2
    assert spans["duration_s"].tolist() == [1.0] * 5
    gate = result.gates["gate"]
    assert (gate.permits, gate.entries, gate.waited) == (2, 5, 3)
    assert gate.wait_s == 4.0
    assert gate.contended_wall_s == 2.0
    assert result.stages["g"].mean_s == 1.0


def test_signal_lets_dependents_go_when_it_comes() -> None:
    """Sandbox 0 signals 2 dependents after 1 s; one dependent arrives before
    (waits 0.8 s), one after (at 1.5 s: goes straight on). Exact in every
    executor, and a signal gate is not an admission gate in the result."""
    signal_gate = [GateSpec(name="ready", permits=0, signal=True)]
    plans = [
        _one("s", Sleep(1.0), Signal("ready", 2), Sleep(1.0)),
        _one("s", Wait("ready"), Sleep(0.5)),
        _one("s", Wait("ready"), Sleep(0.5)),
    ]
    program = compile_program(
        plans, machine=MANY_CORES, locks=[], gates=signal_gate, arrival_s=[0.0, 0.2, 1.5]
    )
    runs = [run_program(program)] + [run_program_fast(program, jit=j) for j in (False, True)]
    for result in runs:
        assert result.finish_s.tolist() == [2.0, 1.5, 2.0]
        assert result.gates == {}


def test_an_unsignalled_wait_is_a_deadlock_and_signals_are_checked() -> None:
    signal_gate = [GateSpec(name="ready", permits=0, signal=True)]
    program = compile_program(
        [_one("s", Wait("ready"))], machine=MANY_CORES, locks=[], gates=signal_gate
    )
    with pytest.raises(DeadlockError):
        run_program(program)
    with pytest.raises(ProgramError, match="need a signal gate, but 'g' is an admission gate"):
        compile_program(
            [_one("s", Wait("g"))],
            machine=MANY_CORES,
            locks=[],
            gates=[GateSpec(name="g", permits=1)],
        )
    with pytest.raises(ProgramError, match=r"^permits: must be an integer >= 0 \(got -1\)$"):
        GateSpec(name="ready", permits=-1, signal=True)
    with pytest.raises(ProgramError, match="Once needs a ticket pool, but 'ready' is a pool of"):
        compile_program(
            [_one("s", Once("ready", body=(), waiters=0))],
            machine=MANY_CORES,
            locks=[],
            gates=signal_gate,
            pools=[PoolSpec(name="ready", capacity=1, memory_mib_per_device=1.0)],
        )


def _once_program(arrival_s: Sequence[float], *, limit: int | None = None) -> Program:
    """Every sandbox: Once("x": 1 s, then 2 s after letting the others go), then 0.1 s."""
    n = len(arrival_s)
    step = Once("x", body=(Sleep(1.0),), waiters=n - 1, after=(Sleep(2.0),))
    plans = [_one("s", step, Sleep(0.1), gate="s" if limit else None)] * n
    gates = [GateSpec(name="x", permits=0, signal=True)]
    gates += [GateSpec(name="s", permits=limit)] if limit else []
    return compile_program(
        plans,
        machine=MANY_CORES,
        locks=[],
        gates=gates,
        pools=[PoolSpec(name="x", capacity=1, memory_mib_per_device=0.0, ticket=True)],
        arrival_s=arrival_s,
    )


def test_once_is_done_by_the_first_comer_and_the_others_wait_for_it() -> None:
    """Sandbox 1 comes first (t=0): it does the 1 s, lets the others go at 1.0,
    does its 2 s and ends at 3.1; sandbox 0 (t=0.5) waits until 1.0, ends at
    1.1; sandbox 2 (t=1.5) finds it done, ends at 1.6. Exact in every executor;
    the ticket and the signal are not in the result's pools and gates."""
    program = _once_program([0.5, 0.0, 1.5])
    runs = [run_program(program)] + [run_program_fast(program, jit=j) for j in (False, True)]
    for result in runs:
        assert result.finish_s.tolist() == pytest.approx([1.1, 3.1, 1.6], abs=1e-12)
        assert result.pools == {} and result.gates == {}


def test_once_under_a_stage_limit_cannot_deadlock() -> None:
    """Whoever is admitted first does it, so waiters inside the gated stage
    never wait for a sandbox the gate keeps out (the last comer first here)."""
    program = _once_program([0.4, 0.3, 0.2, 0.1, 0.0], limit=2)
    result = run_program(program)
    # Sandbox 4 (t=0) does it: 1 s, then 2 s; sandbox 3 waits and ends at 1.1,
    # letting 2 in, which finds it done; and so on, 0.1 s each.
    assert result.finish_s.tolist() == pytest.approx([1.4, 1.3, 1.2, 1.1, 3.1], abs=1e-12)


@pytest.mark.parametrize("permits", [1, 3, 7])
def test_gate_concurrency_with_staggered_arrivals(permits: int) -> None:
    """Random arrivals and durations: never more than ``permits`` inside the stage,
    and the limit is reached when enough sandboxes pile up."""
    rng = np.random.default_rng(7)
    n = 40
    durations = rng.uniform(0.5, 2.0, size=n)
    arrivals = np.sort(rng.uniform(0.0, 5.0, size=n))
    plans = [_one("g", Sleep(float(d)), gate="gate") for d in durations]
    result = _run(
        plans,
        gates=[GateSpec(name="gate", permits=permits)],
        arrival_s=arrivals.tolist(),
        record=True,
    )
    assert result.recording is not None
    spans = result.recording.stage_frame()
    assert _max_concurrent(spans["begin_s"].tolist(), spans["end_s"].tolist()) == permits
    np.testing.assert_allclose(spans.sort_values("sandbox")["duration_s"], durations, rtol=1e-9)


@pytest.mark.parametrize(("capacity", "n"), [(0, 4), (2, 5), (5, 5), (7, 3)])
def test_pool_capacity_decides_the_fetch_path(capacity: int, n: int) -> None:
    """Pool of ``capacity``; every sandbox creates (5 s) or fetches (1 s) a device.

    At t=0 sandboxes run in index order, so the first min(capacity, n) fetch and
    finish at 1, the rest create and finish at 5.
    """
    plans = [_one("s", Pooled("p", create=(Sleep(5.0),), fetch=(Sleep(1.0),)))] * n
    pool = PoolSpec(name="p", capacity=capacity, memory_mib_per_device=2.5)
    result = _run(plans, pools=[pool])
    taken = min(capacity, n)
    assert result.pools["p"].taken == taken
    assert result.pools["p"].capacity == capacity
    assert result.pools["p"].memory_mib == 2.5 * capacity
    assert result.pool_memory_mib == 2.5 * capacity
    assert result.finish_s.tolist() == [1.0] * taken + [5.0] * (n - taken)


def test_pool_goes_to_the_first_arrivals_and_empty_fetch_is_free() -> None:
    """Capacity 2, no fetch steps: the two earliest arrivals (sandboxes 2 and 0)
    start with nothing to do; the others create (Cpu(1), plenty of cores)."""
    plans = [_one("s", Pooled("p", create=(Cpu(1.0),)))] * 4
    result = _run(
        plans,
        pools=[PoolSpec(name="p", capacity=2, memory_mib_per_device=1.0)],
        arrival_s=[1.0, 3.0, 0.0, 2.0],
    )
    assert result.startup_latency_s.tolist() == [0.0, 1.0, 0.0, 1.0]
    assert result.cpu.work_core_s == 2.0


def test_pool_fetch_path_may_hold_locks() -> None:
    """Fetching takes lock ``f`` for 1 s, creating takes ``c`` for 2 s. Capacity 2, 4
    sandboxes from t=0: 0 and 1 fetch ([0,1], [1,2]); 2 and 3 create ([0,2], [2,4])."""
    plans = [
        _one(
            "s",
            Pooled("p", create=(Hold("c", (Sleep(2.0),)),), fetch=(Hold("f", (Sleep(1.0),)),)),
        )
    ] * 4
    result = _run(
        plans,
        locks=[LockSpec(name="c"), LockSpec(name="f")],
        pools=[PoolSpec(name="p", capacity=2, memory_mib_per_device=0.0)],
    )
    assert result.finish_s.tolist() == [1.0, 2.0, 2.0, 4.0]
    assert result.locks["f"].acquisitions == 2
    assert result.locks["c"].acquisitions == 2
    assert result.locks["f"].hold_s == 2.0
    assert result.locks["c"].hold_s == 4.0


# -- seed 000, Fig. 13: lock-grant order decides pipeline overlap ---------------------------


def _fig13(policy: str) -> Result:
    """3 sandboxes from t=0, two stages each:

    s1: hold L1 for 3 s;  s2: hold L2 { sleep 2 s; hold L1 for 1 s }.
    ``policy``: which stage's L1 waiters are served first ("s2", "s1" or "fifo").
    """
    plan = (
        Stage("s1", (Hold("L1", (Sleep(3.0),)),)),
        Stage("s2", (Hold("L2", (Sleep(2.0), Hold("L1", (Sleep(1.0),)))),)),
    )
    priority = {
        "s2": (("s2", 0), ("s1", 1)),
        "s1": (("s1", 0), ("s2", 1)),
        "fifo": (),
    }[policy]
    return _run(
        [plan] * 3,
        locks=[LockSpec(name="L1", stage_priority=priority), LockSpec(name="L2")],
        record=True,
    )


def test_fig13_granting_l1_to_stage2_first_shortens_the_storm() -> None:
    """Seed 000, Fig. 13: giving Lock1 to stage 2 first overlaps the pipeline.

    Sandboxes A, B, C arrive at 0; all queue for L1 in s1, A first.

    Stage 2 first (L1 priority s2 < s1)::

        t=0   A takes L1 (s1) until 3; B, C wait (s1).
        t=3   A → B gets L1 until 6. A enters s2, takes L2, sleeps until 5.
        t=5   A asks for L1: waiters C (s1), A (s2).
        t=6   B releases: A (s2) goes first, L1 [6, 7]. B enters s2, waits for L2.
        t=7   A releases L1 → C, L1 [7, 10]; A releases L2 → B, sleeps until 9.
              A is done at 7.
        t=9   B asks for L1 (C has it).
        t=10  C releases L1 → B, [10, 11]. C enters s2, waits for L2.
        t=11  B releases L1, L2 → C takes L2, sleeps until 13. B done at 11.
        t=13  C takes L1 (free) [13, 14]. C done at 14.     makespan 14

    Stage 1 first (L1 priority s1 < s2), identical until t=6::

        t=6   B releases: C (s1) goes first, L1 [6, 9]. B enters s2, waits for L2.
        t=9   C releases L1 → A, [9, 10]. C enters s2, waits for L2 (behind B).
        t=10  A releases L1, L2 → B takes L2, sleeps until 12. A done at 10.
        t=12  B takes L1 [12, 13]; at 13 releases both → C takes L2, sleeps to 15.
        t=15  C takes L1 [15, 16]. C done at 16.            makespan 16

    FIFO serves C (queued at 0) before A (queued at 5): the same as stage 1 first.
    """
    s2_first = _fig13("s2")
    s1_first = _fig13("s1")
    fifo = _fig13("fifo")
    assert s2_first.finish_s.tolist() == [7.0, 11.0, 14.0]
    assert s1_first.finish_s.tolist() == [10.0, 13.0, 16.0]
    assert fifo.finish_s.tolist() == s1_first.finish_s.tolist()
    assert s2_first.makespan_s == 14.0
    assert s1_first.makespan_s == 16.0
    assert s2_first.makespan_s < s1_first.makespan_s
    # Holds: L1 3·3 s (s1) + 3·1 s (s2) under both policies; L2 is held from the
    # grant to the end of s2: A [3,7], B [7,11], C [11,14] vs A [3,10], B [10,13], C [13,16].
    assert s2_first.locks["L1"].hold_s == 12.0
    assert s1_first.locks["L1"].hold_s == 12.0
    assert s2_first.locks["L2"].hold_s == 4.0 + 4.0 + 3.0
    assert s1_first.locks["L2"].hold_s == 7.0 + 3.0 + 3.0
    # Waits for L2: B [6, 7], C [10, 11] vs B [6, 10], C [9, 13].
    assert s2_first.locks["L2"].wait_s == 2.0
    assert s1_first.locks["L2"].wait_s == 8.0
    # The recorded grant order of L1: A, B, A, C, B, C vs A, B, C, A, B, C.
    for result, order in [(s2_first, [0, 1, 0, 2, 1, 2]), (s1_first, [0, 1, 2, 0, 1, 2])]:
        assert result.recording is not None
        frame = result.recording.lock_frame()
        holds = frame[(frame["lock"] == "L1") & (frame["what"] == "hold")].sort_values("begin_s")
        assert holds["sandbox"].tolist() == order


# -- validation -----------------------------------------------------------------------------

Op = tuple[OpKind, int, float]


def _raw(
    *sandboxes: Sequence[Op],
    locks: Sequence[LockSpec] = (LockSpec(name="m"),),
    stages: Sequence[str] = ("s",),
    gates: Sequence[GateSpec] = (),
    pools: Sequence[PoolSpec] = (),
    arrival_s: Sequence[float] | None = None,
) -> Program:
    """A :class:`Program` built directly from (kind, arg, amount) ops per sandbox."""
    ops = [op for sandbox in sandboxes for op in sandbox]
    offsets = np.cumsum([0, *(len(s) for s in sandboxes)]).astype(np.int64)
    return Program.from_flat(
        machine=MachineSpec(cores=1),
        stage_names=tuple(stages),
        locks=tuple(locks),
        gates=tuple(gates),
        pools=tuple(pools),
        arrival_s=np.zeros(len(sandboxes)) if arrival_s is None else np.asarray(arrival_s, float),
        offsets=offsets,
        op_kind=np.array([int(k) for k, _, _ in ops], dtype=np.int8),
        op_arg=np.array([a for _, a, _ in ops], dtype=np.int32),
        op_amount=np.array([x for _, _, x in ops], dtype=np.float64),
    )


K = OpKind
ACQ, REL = K.ACQUIRE, K.RELEASE
POOL = (PoolSpec(name="p", capacity=1, memory_mib_per_device=0.0),)
GATE = (GateSpec(name="g", permits=2),)
TWO_LOCKS = (LockSpec(name="a"), LockSpec(name="b"))


def test_raw_program_that_is_balanced_runs() -> None:
    """The raw builder itself: stage { gate? no; lock m { cpu 1 } ; pool { } } runs."""
    program = _raw(
        [(K.STAGE_BEGIN, 0, 0), (ACQ, 0, 0), (K.CPU, 0, 1.0), (REL, 0, 0), (K.STAGE_END, 0, 0)],
        [(K.GATE_ENTER, 0, 0), (K.SLEEP, 0, 0.5), (K.GATE_EXIT, 0, 0)],
        gates=GATE,
    )
    result = run_program(program)
    assert result.finish_s.tolist() == [1.0, 0.5]


@pytest.mark.parametrize(
    ("sandbox", "kw", "message"),
    [
        pytest.param([(ACQ, 0, 0)], {}, "ends holding", id="acquire-without-release"),
        pytest.param([(REL, 0, 0)], {}, "release of lock", id="release-not-held"),
        pytest.param(
            [(ACQ, 0, 0), (ACQ, 1, 0), (REL, 0, 0), (REL, 1, 0)],
            {"locks": TWO_LOCKS},
            "LIFO",
            id="release-not-lifo",
        ),
        pytest.param(
            [(ACQ, 0, 0), (ACQ, 0, 0), (REL, 0, 0), (REL, 0, 0)],
            {},
            "taken twice",
            id="taken-twice",
        ),
        pytest.param(
            [(ACQ, 1, 0), (REL, 1, 0)], {}, r"index 1 not in \[0, 1\)", id="lock-out-of-range"
        ),
        pytest.param([(ACQ, -1, 0), (REL, -1, 0)], {}, "not in", id="lock-negative"),
        pytest.param([(K.STAGE_BEGIN, 0, 0)], {}, "inside stages", id="stage-left-open"),
        pytest.param([(K.STAGE_END, 0, 0)], {}, "not open", id="stage-end-not-open"),
        pytest.param(
            [(K.STAGE_BEGIN, 3, 0), (K.STAGE_END, 3, 0)], {}, "not in", id="stage-out-of-range"
        ),
        pytest.param([(K.GATE_ENTER, 0, 0)], {"gates": GATE}, "gates", id="gate-left-open"),
        pytest.param(
            [(K.GATE_EXIT, 0, 0)], {"gates": GATE}, "not entered", id="gate-exit-not-entered"
        ),
        pytest.param(
            [(K.GATE_ENTER, 0, 0), (K.GATE_EXIT, 0, 0)], {}, "not in", id="gate-out-of-range"
        ),
        pytest.param([(K.POOL_TRY, 0, 1.0)], {}, "not in", id="pool-out-of-range"),
        pytest.param(
            [(K.POOL_TRY, 0, 2.0)], {"pools": POOL}, "leaves the sandbox", id="pool-jump-out"
        ),
        pytest.param([(K.JUMP, 0, 0.0)], {}, "leaves the sandbox", id="jump-zero"),
        pytest.param([(K.JUMP, 0, 0.5)], {}, "leaves the sandbox", id="jump-fraction-below-one"),
        pytest.param([(K.CPU, 0, 1.0), (K.JUMP, 0, 5.0)], {}, "leaves the sandbox", id="jump-out"),
        pytest.param(
            # POOL_TRY +3 lands past the release: the fetch path ends holding m.
            [(ACQ, 0, 0), (K.POOL_TRY, 0, 3.0), (REL, 0, 0), (K.CPU, 0, 1.0)],
            {"pools": POOL},
            "ends holding",
            id="only-fetch-path-unbalanced",
        ),
        pytest.param(
            [(K.STAGE_BEGIN, 0, 0), (K.JUMP, 0, 2.0), (K.STAGE_END, 0, 0)],
            {},
            "inside stages",
            id="jump-over-stage-end",
        ),
        pytest.param(
            [(K.ACQUIRE_SHARED, 0, 0), (REL, 0, 0)],
            {},
            "shared acquire of non-rw",
            id="shared-on-mutex",
        ),
        pytest.param([(99, 0, 0)], {}, "unknown op kind", id="unknown-kind"),
        pytest.param(
            [(ACQ, 0, 0), (K.SLEEP, 0, 1.0), (REL, 0, 0)],
            {"locks": (LockSpec(name="s", kind=LockKind.SPIN),)},
            "sleep while holding a spinlock",
            id="sleep-in-spinlock",
        ),
        pytest.param([(K.CPU, 0, -1.0)], {}, "must be finite and >= 0", id="negative-amount"),
        pytest.param([(K.SLEEP, 0, float("nan"))], {}, "must be finite", id="nan-amount"),
        pytest.param([(K.SLEEP, 0, float("inf"))], {}, "must be finite", id="inf-amount"),
        pytest.param([], {"arrival_s": [-1.0]}, "arrival_s", id="negative-arrival"),
        pytest.param([], {"arrival_s": [float("inf")]}, "arrival_s", id="inf-arrival"),
    ],
)
def test_malformed_programs_are_rejected(
    sandbox: Sequence[Op], kw: dict[str, object], message: str
) -> None:
    with pytest.raises(ProgramError, match=message):
        _raw(sandbox, **kw)  # type: ignore[arg-type]


def test_malformed_program_arrays_are_rejected() -> None:
    """Offsets and op arrays that do not fit together."""
    good = _raw([(K.CPU, 0, 1.0)], [(K.CPU, 0, 1.0)])
    bad_offsets = {
        "too-short": np.array([0, 2], dtype=np.int64),
        "not-from-zero": np.array([1, 1, 2], dtype=np.int64),
        "not-to-n-ops": np.array([0, 1, 1], dtype=np.int64),
        "decreasing": np.array([0, 3, 2], dtype=np.int64),
    }
    for offsets in bad_offsets.values():
        with pytest.raises(ProgramError, match="offsets"):
            with_flat_ops(good, offsets=offsets)
    with pytest.raises(ProgramError, match="one shape"):
        with_flat_ops(good, op_amount=np.array([1.0, 1.0, 1.0]))


def test_validation_checks_every_sandbox_not_just_one_per_template() -> None:
    """Two sandboxes that differ only in a jump's fractional amount: 1.6 jumps 1
    op (harmless), 2.4 jumps 2 ops and skips the release. The executor truncates
    (``int``); the validator must judge the second sandbox by the same rule."""
    fine = [(ACQ, 0, 0), (K.POOL_TRY, 0, 1.6), (REL, 0, 0), (K.CPU, 0, 1.0)]
    skips_release = [(ACQ, 0, 0), (K.POOL_TRY, 0, 2.4), (REL, 0, 0), (K.CPU, 0, 1.0)]
    _raw(fine, pools=POOL)
    with pytest.raises(ProgramError, match="ends holding"):
        _raw(fine, skips_release, pools=POOL)


def test_gate_entered_twice_must_be_exited_twice() -> None:
    """A gate is a counting semaphore: enter, enter, exit, exit is balanced; enter,
    enter, exit leaks a permit and must be rejected."""
    program = _raw(
        [(K.GATE_ENTER, 0, 0), (K.GATE_ENTER, 0, 0), (K.GATE_EXIT, 0, 0), (K.GATE_EXIT, 0, 0)],
        gates=GATE,
    )
    assert run_program(program).gates["g"].entries == 2
    with pytest.raises(ProgramError, match="gates"):
        _raw([(K.GATE_ENTER, 0, 0), (K.GATE_ENTER, 0, 0), (K.GATE_EXIT, 0, 0)], gates=GATE)


SPIN_LOCKS = [
    LockSpec(name="s", kind=LockKind.SPIN),
    LockSpec(name="s2", kind=LockKind.SPIN),
    LockSpec(name="m"),
    LockSpec(name="rw", kind=LockKind.RW),
]


@pytest.mark.parametrize(
    ("body", "what"),
    [
        pytest.param((Sleep(1.0),), "sleep", id="sleep"),
        pytest.param((Cpu(1.0), Hold("s2", (Cpu(1.0), Sleep(1.0)))), "sleep", id="sleep-nested"),
        pytest.param((Pooled("p", create=(Sleep(1.0),)),), "sleep", id="sleep-in-create"),
        pytest.param((Zero(1e9),), "zero", id="zero"),
        pytest.param((Hold("m", (Cpu(1.0),)),), "acquire", id="mutex"),
        pytest.param((Hold("rw", (Cpu(1.0),)),), "acquire", id="rw-writer"),
        pytest.param((Hold("rw", (Cpu(1.0),), shared=True),), "acquire_shared", id="rw-reader"),
    ],
)
def test_spinlock_holder_must_not_sleep_or_be_preempted(body: tuple[Step, ...], what: str) -> None:
    """Inside a spinlock only CPU work, nested spinlocks and pool look-ups are allowed.

    Anything that sleeps (a sleep, a sleeping lock) or is preemptible (zeroing)
    could wait on work that the pinned spinners starve: with ``Zero`` inside, one
    core, and one spinning waiter, the holder's zeroing gets no core and the run
    used to end silently with every sandbox "finished" at t=0.
    """
    pools = [PoolSpec(name="p", capacity=9, memory_mib_per_device=0.0)]
    with pytest.raises(ProgramError, match=f"{what} while holding a spinlock"):
        compile_program(
            [_one("x", Hold("s", body))],
            machine=MachineSpec(cores=1),
            locks=SPIN_LOCKS,
            pools=pools,
        )


def test_spinlock_holder_must_not_enter_a_gate() -> None:
    """Waiting for a gate permit sleeps too (only a raw program can do it: plans
    put gates around whole stages, outside any lock)."""
    with pytest.raises(ProgramError, match="gate_enter while holding a spinlock"):
        _raw(
            [(ACQ, 0, 0), (K.GATE_ENTER, 0, 0), (K.GATE_EXIT, 0, 0), (REL, 0, 0)],
            locks=SPIN_LOCKS,
            gates=GATE,
        )


def test_spinlock_may_nest_spinlocks_and_pool_lookups() -> None:
    """Allowed inside a spinlock: CPU work, a nested spinlock, a pooled CPU step."""
    body = (Cpu(0.5), Hold("s2", (Cpu(0.5),)), Pooled("p", create=(Cpu(1.0),), fetch=(Cpu(0.25),)))
    result = _run(
        [_one("x", Hold("s", body))] * 2,
        locks=SPIN_LOCKS,
        pools=[PoolSpec(name="p", capacity=1, memory_mib_per_device=0.0)],
    )
    # First holder: 0.5 + 0.5 + 0.25 (fetch) = 1.25; second: 0.5 + 0.5 + 1 = 2 more.
    np.testing.assert_allclose(result.finish_s, [1.25, 3.25], rtol=1e-12)
    assert result.locks["s"].spin_core_s == pytest.approx(1.25, rel=1e-12)


def test_compile_rejects_bad_plans() -> None:
    """Errors raised while compiling plans and building specs."""
    machine = MachineSpec(cores=1)
    with pytest.raises(ProgramError, match="declares"):
        compile_program([_hold("nope", 1.0)], machine=machine, locks=[LockSpec(name="m")])
    with pytest.raises(ProgramError, match="non-rw"):
        compile_program([_hold("m", 1.0, shared=True)], machine=machine, locks=[LockSpec(name="m")])
    with pytest.raises(ProgramError, match="declared twice"):
        compile_program([_hold("m", 1.0)], machine=machine, locks=[LockSpec(name="m")] * 2)
    with pytest.raises(ProgramError, match="rng"):
        compile_program([_one("x", Cpu(1.0))], machine=machine, locks=[], service_cv=0.5)
    with pytest.raises(ProgramError, match="arrival_s"):
        compile_program([_one("x", Cpu(1.0))], machine=machine, locks=[], arrival_s=[0.0, 1.0])
    with pytest.raises(ProgramError, match="at least one sandbox"):
        compile_program([], machine=machine, locks=[])
    with pytest.raises(ProgramError, match="work_s"):
        Cpu(-1.0)
    with pytest.raises(ProgramError, match="duration_s"):
        Sleep(float("nan"))
    with pytest.raises(ProgramError, match="permits"):
        GateSpec(name="g", permits=0)
    with pytest.raises(ProgramError, match="only a mutex spins"):
        LockSpec(name="s", kind=LockKind.SPIN, spin_s=1.0)
    with pytest.raises(ProgramError, match="cores"):
        MachineSpec(cores=0)
    with pytest.raises(ProgramError, match="capacity"):
        PoolSpec(name="p", capacity=-1, memory_mib_per_device=0.0)


def test_deadlock_is_reported_not_hidden() -> None:
    """A takes a then b, B takes b then a (both after 1 s of sleep): a lock-order
    cycle that no validator can see. The run used to end quietly with both
    sandboxes "finished" at t=0 (and makespan 0); it must raise instead."""
    plans = [
        _one("x", Hold("a", (Sleep(1.0), Hold("b", (Sleep(1.0),))))),
        _one("x", Hold("b", (Sleep(1.0), Hold("a", (Sleep(1.0),))))),
    ]
    program = compile_program(plans, machine=MachineSpec(cores=1), locks=TWO_LOCKS)
    with pytest.raises(DeadlockError, match="never finished"):
        run_program(program)


def test_cpu_growth_adds_work_per_earlier_sandbox() -> None:
    """``Cpu(work_s, growth_s=g)``: sandbox i does work_s + i*g (a walk over a
    structure every earlier sandbox added to), resolved at compile time."""
    from bootstorm.simulator import Cpu, MachineSpec, OpKind, Stage, compile_program, run_program

    plan = (Stage("s", (Cpu(1.0, growth_s=0.5),)),)
    program = compile_program([plan] * 4, machine=MachineSpec(cores=4), locks=[])
    work = program.op_amount[program.op_kind == OpKind.CPU]
    assert work.tolist() == [1.0, 1.5, 2.0, 2.5]
    assert run_program(program).finish_s.tolist() == [1.0, 1.5, 2.0, 2.5]


def test_sleep_growth_lengthens_a_held_wait_per_earlier_sandbox() -> None:
    """``Sleep(d, growth_s=g)`` under a lock (a daemon's main loop that walks
    every earlier sandbox's port): sandbox i holds it d + i*g, so the four
    finish at 1, 1+1.5, 2.5+2 and 4.5+2.5, in both executors."""
    from bootstorm.simulator import MachineSpec, OpKind, Stage, compile_program, run_program

    plan = (Stage("s", (Hold("L", (Sleep(1.0, growth_s=0.5),)),)),)
    locks = [LockSpec(name="L")]
    program = compile_program([plan] * 4, machine=MachineSpec(cores=4), locks=locks)
    assert program.op_amount[program.op_kind == OpKind.SLEEP].tolist() == [1.0, 1.5, 2.0, 2.5]
    expected = [1.0, 2.5, 4.5, 7.0]
    assert run_program(program).finish_s.tolist() == expected
    assert run_program_fast(program).finish_s.tolist() == expected
    with pytest.raises(ProgramError, match="growth_s"):
        Sleep(1.0, growth_s=-0.1)


def test_linux_style_wake_lets_a_running_task_steal_then_hands_off() -> None:
    """``wake_s > 0``: a release wakes the head waiter, who needs ``wake_s`` to
    run. A, still running, re-takes the lock at t=1 (a steal); B, woken at
    1.01, finds it taken and sets the hand-off flag, so A's next release goes
    to B. With ``wake_s = 0`` the lock goes straight to B at t=1."""
    plan_a = (Stage("s", (Hold("L", (Sleep(1.0),)), Hold("L", (Sleep(1.0),)))),)
    plan_b = (Stage("s", (Sleep(0.5), Hold("L", (Sleep(1.0),)))),)

    def run(wake_s: float) -> Result:
        lock = LockSpec(name="L", wake_s=wake_s)
        return _run([plan_a, plan_b], locks=[lock])

    fair, steal = run(0.0), run(0.01)
    assert fair.finish_s.tolist() == [3.0, 2.0]
    assert steal.finish_s.tolist() == [2.0, 3.0]
    assert (fair.locks["L"].contended, steal.locks["L"].contended) == (2, 1)
    assert steal.locks["L"].wait_s == pytest.approx(1.5)  # B waits 0.5 → 2.0


def test_wake_up_serves_a_higher_priority_waiter_that_queued_meanwhile() -> None:
    """A regression (CI found it: a deadlock). Priorities s1 = 0 before s0 = 1,
    ``wake_s`` = 0.25. A holds L 0 → 1 while W (s0) queues at 0.125; A's
    release wakes the head, W, for 1.25. S steals the free lock at 1.0625 and
    releases it at 1.125; H (s1) queues at 1.09375, ahead of W. At 1.25 the
    lock is free and H heads the queue: H gets it (to 1.75), then a new
    wake-up serves W at 2.0 (to 2.5). Before the fix the wake-up went to W
    only, found it overtaken, and left a free lock with a queue."""
    hold = lambda s: (Hold("L", (Sleep(s),)),)  # noqa: E731
    in_s0 = lambda s: (Stage("s0", hold(s)), Stage("s1", ()))  # noqa: E731
    plan_h = (Stage("s0", ()), Stage("s1", hold(0.5)))
    lock = LockSpec(name="L", wake_s=0.25, stage_priority=(("s1", 0), ("s0", 1)))
    program = compile_program(
        [in_s0(1.0), in_s0(0.5), in_s0(0.0625), plan_h],
        machine=MANY_CORES,
        locks=[lock],
        arrival_s=[0.0, 0.125, 1.0625, 1.09375],
    )
    expected = [1.0, 2.5, 1.125, 1.75]
    assert run_program(program).finish_s.tolist() == expected
    for jit in (False, True):
        assert run_program_fast(program, jit=jit).finish_s.tolist() == expected


def test_wake_s_is_for_mutexes_only() -> None:
    with pytest.raises(ProgramError, match="only a mutex hands over through a wake-up"):
        LockSpec(name="S", kind=LockKind.SPIN, wake_s=0.1)
