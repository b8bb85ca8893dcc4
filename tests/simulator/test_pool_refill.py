"""Pools that refill while starts go on: the kernel's POOL_ORDER, POOL_PUT and
POOL_TARGET ops, the pools' log, and what a result reads from it.

Known answers worked by hand, invariants over random programs (Hypothesis),
and the two executors to the bit. The statistical answer (Erlang B) is a
reference problem: :func:`bootstorm.simulator.reference_problems.refilled_pool`.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bootstorm.simulator import (
    Async,
    Cpu,
    GateSpec,
    Hold,
    LockSpec,
    MachineSpec,
    Pooled,
    PoolEvent,
    PoolSpec,
    ProgramError,
    Refill,
    Retarget,
    Sleep,
    Stage,
    compile_program,
    compile_programs,
    make_executor,
)
from bootstorm.simulator.reference_problems import erlang_b, refilled_pool_program
from bootstorm.simulator.testing import assert_same_result
from bootstorm.simulator.timeline import windows

TAKE, MISS, ORDERED, MADE, RETARGET, TRIMMED = (int(e) for e in PoolEvent)


def _run(program, executor: str = "compiled"):  # type: ignore[no-untyped-def]
    return make_executor(executor).run(program)


@pytest.mark.parametrize("executor", ["compiled", "simpy", "python"])
def test_a_taken_device_is_made_again_and_a_miss_orders_none(executor: str) -> None:
    """Pool of 1, refills of 1 s, starts at 0, 0.5 and 2 s: the first takes
    and orders one; the second finds none ready and one being made (ready +
    made = target) so it orders none; the device is ready at 1 s; the third
    takes it and orders one, ready at 3 s."""
    r = _run(refilled_pool_program([0.0, 0.5, 2.0], [1.0, 1.0, 1.0], pool=1), executor)
    line = r.pool_timelines["device"]
    assert line.t_s.tolist() == [0.0, 0.0, 0.5, 1.0, 2.0, 2.0, 3.0]
    assert line.event.tolist() == [TAKE, ORDERED, MISS, MADE, TAKE, ORDERED, MADE]
    assert line.ready.tolist() == [0, 0, 0, 1, 0, 0, 1]
    assert line.making.tolist() == [0, 1, 1, 0, 0, 1, 0]
    stats = r.pools["device"]
    assert (stats.taken, stats.empty_starts, stats.made) == (2, 1, 2)
    assert r.horizon_s == 3.0
    # Idle devices: one from 1 s to 2 s over a run of 3 s (1 MiB each).
    assert stats.mean_memory_mib == pytest.approx(1.0 / 3.0)
    assert stats.memory_mib_h == pytest.approx(1.0 / 3600.0)
    assert stats.peak_memory_mib == 1.0
    assert line.ready_at([0.0, 0.99, 1.0, 2.5, 3.0]).tolist() == [0, 0, 1, 0, 1]
    assert r.empty_starts == 1


def test_without_refill_a_pool_is_what_was_made_before() -> None:
    """The papers' pools: taken until empty, never made again."""
    plans = [(Stage("s", (Pooled("device", create=(Sleep(0.1),)),)),)] * 5
    program = compile_program(
        plans,
        machine=MachineSpec(cores=1),
        locks=[],
        pools=[PoolSpec(name="device", capacity=3, memory_mib_per_device=2.0)],
    )
    r = _run(program)
    stats = r.pools["device"]
    assert (stats.capacity, stats.taken, stats.empty_starts, stats.made) == (3, 3, 2, 0)
    assert stats.memory_mib == 6.0  # what was made before the storm


def test_refill_workers_are_a_gate() -> None:
    """Five takes at once, two workers, 1 s a device: made at 1, 1, 2, 2, 3 s."""
    r = _run(refilled_pool_program([0.0] * 5, [1.0] * 5, pool=5, workers=2))
    line = r.pool_timelines["device"]
    made = line.t_s[line.event == MADE]
    assert made.tolist() == [1.0, 1.0, 2.0, 2.0, 3.0]
    assert r.gates["refill"].entries == 5


def _follow_program(targets: list[int], *, copies: int, pool: int = 1):  # type: ignore[no-untyped-def]
    n = len(targets)
    plan = (
        Stage(
            "s",
            (
                Retarget("device"),
                Pooled("device", create=(Sleep(0.0),)),
                Async("refill", (Refill("device", create=(Sleep(1.0),), copies=copies),)),
            ),
        ),
    )
    program = compile_program(
        [plan] * n,
        machine=MachineSpec(cores=1),
        locks=[],
        pools=[PoolSpec(name="device", capacity=pool, memory_mib_per_device=1.0)],
        arrival_s=np.arange(n, dtype=np.float64) * 10.0,
    )
    return program.with_pool_targets({"device": np.asarray(targets)})


def test_a_target_that_rises_orders_as_many_devices() -> None:
    """Target 1 → 3 at the second start: it takes one and its worker makes
    three, one after another (its own and two for the rise); with one turn a
    branch could make only one."""
    r = _run(_follow_program([1, 3], copies=3))
    line = r.pool_timelines["device"]
    later = line.t_s >= 10.0
    assert line.t_s[later].tolist() == [10.0, 10.0, 10.0, 11.0, 11.0, 12.0, 12.0, 13.0]
    assert line.event[later].tolist() == [
        RETARGET, TAKE, ORDERED, MADE, ORDERED, MADE, ORDERED, MADE
    ]  # fmt: skip
    assert int(line.ready[-1]) == 3
    short = _run(_follow_program([1, 3], copies=1))
    assert int(short.pool_timelines["device"].ready[-1]) == 1


def test_a_target_that_falls_removes_ready_devices() -> None:
    """Target 3, then 1: the surplus ready devices go at once (memory freed)."""
    r = _run(_follow_program([3, 1, 1], copies=3))
    line = r.pool_timelines["device"]
    at_fall = (line.t_s == 10.0) & (line.event == RETARGET)
    assert line.ready[at_fall].tolist() == [1]
    assert r.pools["device"].peak_memory_mib == 3.0


def test_pool_targets_are_checked() -> None:
    program = _follow_program([1, 2], copies=2)
    with pytest.raises(ProgramError, match="one entry per sandbox"):
        program.with_pool_targets({"device": np.array([1])})
    with pytest.raises(ProgramError, match="whole numbers"):
        program.with_pool_targets({"device": np.array([1.5, 2.0])})
    with pytest.raises(ProgramError, match="no target for pool 'device'"):
        program.with_pool_targets({})


@pytest.mark.parametrize("service_cv", [0.0, 0.3])
def test_targets_written_at_compile_are_the_targets_set_after(service_cv: float) -> None:
    """compile_programs(pool_targets=...) writes what with_pool_targets
    would, to the bit, jittered or not, for every seed's program; and it
    checks the targets the same way."""
    targets = np.random.default_rng(5).integers(0, 9, size=40)
    plan = (
        Stage(
            "s",
            (
                Retarget("device"),
                Pooled("device", create=(Sleep(0.2),)),
                Cpu(0.01),
                Async("refill", (Refill("device", create=(Sleep(1.0),), copies=2),)),
            ),
        ),
    )
    common = {
        "machine": MachineSpec(cores=2),
        "locks": [],
        "pools": [PoolSpec(name="device", capacity=3, memory_mib_per_device=1.0)],
        "arrival_s": np.arange(40, dtype=np.float64),
        "service_cv": service_cv,
    }
    written = compile_programs(
        [plan] * 40,
        rngs=[np.random.default_rng(1), np.random.default_rng(2)],
        pool_targets={"device": targets},
        **common,
    )
    after = [
        program.with_pool_targets({"device": targets})
        for program in compile_programs(
            [plan] * 40, rngs=[np.random.default_rng(1), np.random.default_rng(2)], **common
        )
    ]
    for mine, theirs in zip(written, after, strict=True):
        assert np.array_equal(mine.ops.own_amount, theirs.ops.own_amount)
        assert np.array_equal(mine.ops.amount, theirs.ops.amount)
        assert_same_result(_run(theirs), _run(mine))
    for bad, match in (
        ({"device": targets[:3]}, "one entry per sandbox"),
        ({"device": targets + 0.5}, "whole numbers"),
        ({}, "no target for pool 'device'"),
    ):
        with pytest.raises(ProgramError, match=match):
            compile_programs(
                [plan] * 40, rngs=[np.random.default_rng(1)], pool_targets=bad, **common
            )
    in_branch = (Stage("s", (Async("b", (Retarget("device"), Sleep(0.1))),)),)
    with pytest.raises(ProgramError, match="belong in sandboxes"):
        compile_programs(
            [in_branch] * 40,
            rngs=[None],
            pool_targets={"device": targets},
            **{**common, "service_cv": 0.0},
        )


def test_erlang_b_known_values() -> None:
    """B(1, a) = a/(1+a); B(2, 1) = 1/5 (tables: Kleinrock §3.6)."""
    assert erlang_b(1, 3.0) == pytest.approx(0.75)
    assert erlang_b(2, 1.0) == pytest.approx(0.2)
    assert erlang_b(0, 5.0) == 1.0


def test_windows_read_startups_pools_and_memory() -> None:
    r = _run(refilled_pool_program([0.0, 0.5, 2.0], [1.0, 1.0, 1.0], pool=1, make_s=0.25))
    ws = windows(r, window_s=1.5)
    assert [(w.start_s, w.end_s, w.starts) for w in ws] == [(0.0, 1.5, 2), (1.5, 2.0, 1)]
    assert ws[0].empty_starts == 1 and ws[0].made == 1
    assert ws[0].p99_s == pytest.approx(np.percentile([0.0, 0.25], 99))
    # One ready device from 1.0 to 1.5 of the first 1.5 s: a third of 1 MiB.
    assert ws[0].memory_mib == pytest.approx(1.0 / 3.0)
    # Refills that end after the last arrival count in the last window.
    assert ws[1].made == 1
    assert math.isnan(windows(r, window_s=0.2)[5].p99_s)  # no start in [1.0, 1.2)
    with pytest.raises(ProgramError, match="window_s"):
        windows(r, window_s=0.0)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    arrivals=st.lists(st.floats(0.0, 5.0), min_size=1, max_size=25),
    refill_s=st.floats(0.01, 3.0),
    pool=st.integers(0, 6),
    workers=st.one_of(st.none(), st.integers(1, 3)),
)
def test_pool_invariants_and_executors_agree(
    arrivals: list[float], refill_s: float, pool: int, workers: int | None
) -> None:
    """Every start takes or misses; nothing is made that was not ordered;
    ready devices never pass the target; everything ordered is made by the
    end; the two executors agree to the bit."""
    times = np.sort(np.asarray(arrivals))
    program = refilled_pool_program(times, [refill_s] * len(times), pool=pool, workers=workers)
    r = _run(program)
    line = r.pool_timelines["device"]
    stats = r.pools["device"]
    assert stats.taken + stats.empty_starts == len(times)
    assert stats.made == line.count(PoolEvent.ORDERED) == stats.taken
    assert int(line.ready.max(initial=0)) <= pool
    assert np.all(line.ready + line.making <= pool)
    assert np.all(np.diff(line.t_s) >= 0)
    assert int(line.making[-1]) == 0 if line.making.size else True
    assert_same_result(_run(program, "simpy"), r)


def test_refill_log_is_in_the_memory_estimate() -> None:
    from bootstorm.simulator import size_program

    def build(refill: bool):  # type: ignore[no-untyped-def]
        steps = [Pooled("device", create=(Sleep(1.0),))]
        if refill:
            steps.append(Async("refill", (Refill("device", create=(Sleep(1.0),)),), gate="w"))
        return lambda: compile_program(
            [(Stage("s", tuple(steps)),)] * 1000,
            machine=MachineSpec(cores=1),
            locks=[],
            gates=[GateSpec(name="w", permits=1)],
            pools=[PoolSpec(name="device", capacity=1, memory_mib_per_device=1.0)],
        )

    plain, refilled = size_program(build(False)), size_program(build(True))
    # Per sandbox: the branch's task and ops, and three more pool events logged.
    assert refilled.run_bytes - plain.run_bytes >= 1000 * 3 * 58


def test_a_pooled_step_goes_on_only_from_its_stages_own_steps() -> None:
    """A making that goes on into the next stage must stand in its stage
    (not in a hold, a branch or another pooled step) and have a next stage:
    anything else is one clear refusal at compile, not a wrong program."""
    going_on = Pooled("dev", create=(Sleep(1.0),), create_next=(Sleep(1.0),))
    pools = [PoolSpec(name=n, capacity=1, memory_mib_per_device=1.0) for n in ("dev", "outer")]

    def compile_(*plan: Stage) -> None:
        compile_program(
            [plan], machine=MachineSpec(cores=1), locks=[LockSpec(name="L")], pools=pools
        )

    with pytest.raises(ProgramError, match="in a stage that has a next one"):
        compile_(Stage("only", (going_on,)))
    with pytest.raises(ProgramError, match="must be its stage's only one"):
        compile_(Stage("a", (going_on, going_on)), Stage("b", ()))
    for nested in (
        Hold("L", (going_on,)),
        Pooled("outer", create=(going_on,)),
        Async("branch", (going_on,)),
    ):
        with pytest.raises(ProgramError, match="must be one of its stage's own steps"):
            compile_(Stage("a", (nested,)), Stage("b", ()))
    compile_(Stage("a", (going_on,)), Stage("b", ()))  # where it belongs


def test_a_stage_s_admit_and_release_need_its_gate() -> None:
    from bootstorm.simulator import ProgramError, Stage

    with pytest.raises(ProgramError, match=r"stage 'x': admit and release steps need a gate"):
        Stage("x", (), admit=(Sleep(1.0),))


def test_an_rcu_sync_is_entered_only_under_its_lock() -> None:
    from bootstorm.simulator import LockSpec, MachineSpec, ProgramError, RcuSync, Stage
    from bootstorm.simulator import compile_program as build

    def program(steps: tuple) -> None:  # type: ignore[type-arg]
        build(
            [(Stage("s", steps),)],
            machine=MachineSpec(cores=1),
            locks=[LockSpec(name="m")],
            arrival_s=(0.0,),
        )

    program((Hold("m", (RcuSync("m", 0.01, (Sleep(0.1),)),)),))
    with pytest.raises(ProgramError, match=r"rcu_sync of lock 0 entered without holding"):
        program((RcuSync("m", 0.01, (Sleep(0.1),)),))
    with pytest.raises(ProgramError, match=r"grace_s"):
        RcuSync("m", -1.0)
