"""The compiled executor gives the reference executor's :class:`Result`.

Both run the same programs: Hypothesis ones from the invariants' generator
(every lock kind, spinning mutexes, gates, pools, zeroing, guest quotas), the
same with mutexes handed over through a wake-up, on a node with background
jobs and reserved cores, programs with branches, and the paper profiles'
storms. The compiled executor runs each twice: compiled by numba
("compiled") and its same source interpreted ("python"). Every number of
the result is compared to 1e-9 relative (counts exactly); only ``events``
differs, since SimPy also counts events nobody waits for.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_invariants import SETTINGS, Case, cases, with_kernel_hand_over, with_mutex_wake

from bootstorm.models import compile_scenario
from bootstorm.models.scenario import CNI_NAMES, Scenario
from bootstorm.simulator import (
    Async,
    Cpu,
    DeadlockError,
    Hold,
    LockKind,
    LockSpec,
    MachineSpec,
    Program,
    Result,
    SandboxPlan,
    Sleep,
    Stage,
    compile_program,
    make_executor,
    run_program,
    summarise_with,
)
from bootstorm.simulator.reference_problems import deadlock_program

REL = 1e-9


def _same(a: Any, b: Any, where: str) -> None:
    if isinstance(a, Mapping):
        assert isinstance(b, Mapping) and set(a) == set(b), where
        for key in a:
            _same(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, float) or isinstance(b, float):
        assert math.isclose(a, b, rel_tol=REL, abs_tol=1e-12), (where, a, b)
    else:
        assert a == b, (where, a, b)


def _arrays_same(a: np.ndarray, b: np.ndarray, where: str) -> None:
    assert a.shape == b.shape, where
    np.testing.assert_allclose(a, b, rtol=REL, atol=1e-12, equal_nan=True, err_msg=where)


FAST = ("compiled", "python")
"""The executors compared with the reference: the compiled loop and its source interpreted."""


def assert_equivalent(program: Program) -> Result:
    """Run the executors on ``program`` and compare everything but ``events``
    (the compiled loop and its interpreted source count the same events: compare those)."""
    ref = run_program(program)
    events = set()
    for name in FAST:
        fast = make_executor(name).run(program)
        _assert_same_result(ref, fast)
        events.add(fast.events)
    assert len(events) == 1, events
    return ref


def _assert_same_result(ref: Result, fast: Result) -> None:
    assert fast.recording is None
    _same(
        {k: v for k, v in ref.to_dict().items() if k != "events"},
        {k: v for k, v in fast.to_dict().items() if k != "events"},
        "result",
    )
    _arrays_same(ref.finish_s, fast.finish_s, "finish_s")
    _arrays_same(ref.arrival_s, fast.arrival_s, "arrival_s")
    for field in ("stage_time_s", "branch_finish_s"):
        mine, theirs = getattr(ref, field), getattr(fast, field)
        assert set(mine) == set(theirs), field
        for name in mine:
            _arrays_same(mine[name], theirs[name], f"{field}[{name}]")


@SETTINGS
@given(case=cases())
def test_generated_programs(case: Case) -> None:
    assert_equivalent(case.compile())


@settings(SETTINGS, max_examples=60)
@given(
    case=cases(),
    background=st.sampled_from([0.0, 0.5, 3.0]),
    reserved=st.sampled_from([0.0, 0.25, 0.5]),
)
def test_generated_programs_on_a_busy_node(case: Case, background: float, reserved: float) -> None:
    machine = replace(
        case.machine, background_jobs=background, reserved_cores=reserved * case.machine.cores
    )
    assert_equivalent(replace(case, machine=machine).compile())


@settings(SETTINGS, max_examples=60)
@given(
    n=st.integers(1, 20),
    cores=st.integers(1, 4),
    work=st.lists(st.floats(0.0, 1.0), min_size=3, max_size=3),
)
def test_programs_with_branches(n: int, cores: int, work: list[float]) -> None:
    """Sandboxes spawn branches that contend for the sandboxes' lock."""
    locks = (LockSpec(name="L", kind=LockKind.MUTEX), LockSpec(name="S", kind=LockKind.SPIN))
    plan: SandboxPlan = (
        Stage(
            "a", (Cpu(work[0]), Async("nic", (Hold("L", (Cpu(work[1]),)), Sleep(0.1)), ready=True))
        ),
        Stage("b", (Hold("L", (Cpu(work[2]), Hold("S", (Cpu(0.01),)))), Sleep(work[0]))),
    )
    program = compile_program(
        [plan] * n,
        machine=MachineSpec(cores=cores),
        locks=locks,
    )
    assert program.n_branches == n
    assert_equivalent(program)


# The paper profiles' storms, over every network the models know. SR-IOV
# needs a profile with an ``sriov`` section (paper-001); the testbed CNIs need
# a profile fitted to a recorded storm, which no built-in profile has; paper-002
# and paper-004 describe data planes only.
_SRIOV = ("sriov", "fastiov", "prezero")
STORMS = [
    *(
        (cni, "paper-001" if cni.startswith(_SRIOV) else "paper-000")
        for cni in CNI_NAMES
        if not cni.startswith("testbed")
    ),
]


@pytest.mark.parametrize(("cni", "profile"), STORMS)
def test_paper_storms(cni: str, profile: str) -> None:
    assert_equivalent(compile_scenario(Scenario(cni=cni, profile=profile, sandboxes=100)))


KNOBS_400 = Scenario(
    cni="ipvtap",
    sandboxes=400,
    pools={"netns": 50, "ipvtap": 30},
    limits={"AddCNI": 16},
    rtnl_priority={"AddCNI": 0},
    background_load=2.0,
)
"""The 400 storm with every knob a planner turns: pools, a stage limit, RTNL
priority and background load (``test_kernel_source`` runs it too)."""


def test_paper_storms_with_knobs() -> None:
    """Pools, stage limits, RTNL priority and background load, 400 sandboxes."""
    assert_equivalent(compile_scenario(KNOBS_400))


@settings(SETTINGS, max_examples=100)
@given(case=cases(), wake_s=st.sampled_from([1e-3, 0.05, 0.3]))
def test_generated_programs_with_wake_up_hand_over(case: Case, wake_s: float) -> None:
    """Mutexes handed over through a wake-up: stealing and the hand-off flag."""
    assert_equivalent(replace(case, locks=with_mutex_wake(case.locks, wake_s)).compile())


def test_paper_storm_with_wake_up_hand_over() -> None:
    """The ipvtap storm with its mutexes handed over as Linux does without the
    hand-off flag (the profile's ``mutex_wake_s`` is 0: set it on the locks)."""
    program = compile_scenario(Scenario(cni="ipvtap", sandboxes=100))
    woken = replace(program, locks=with_mutex_wake(program.locks, 2e-5))
    assert run_program(woken).makespan_s != run_program(program).makespan_s
    assert_equivalent(woken)


@settings(SETTINGS, max_examples=100)
@given(
    case=cases(),
    dispatch_s=st.sampled_from([1e-3, 0.05]),
    pinned=st.booleans(),
    background=st.sampled_from([0.0, 2.5]),
)
def test_generated_programs_with_a_kernel_hand_over(
    case: Case, dispatch_s: float, pinned: bool, background: float
) -> None:
    """Mutexes handed to a waiter that must first get a core, their holders
    pinned or not, on a node with or without other runnable work."""
    machine = replace(case.machine, background_jobs=background)
    locks = with_kernel_hand_over(case.locks, dispatch_s, pinned=pinned)
    assert_equivalent(replace(case, machine=machine, locks=locks).compile())


def test_paper_storm_with_a_kernel_hand_over() -> None:
    """The ipvtap storm with its mutexes handed over to waiters that must get
    a core, their holders pinned: both change the storm, both executors agree."""
    program = compile_scenario(Scenario(cni="ipvtap", sandboxes=100))
    handed = replace(program, locks=with_kernel_hand_over(program.locks, 1e-4, pinned=True))
    assert run_program(handed).makespan_s != run_program(program).makespan_s
    assert_equivalent(handed)


def test_deadlock_is_reported() -> None:
    """A lock-order cycle (A: a then b, B: b then a) raises in every loop,
    and in the summary path that builds no Result."""
    program = deadlock_program()
    for name in ("simpy", *FAST):
        with pytest.raises(DeadlockError, match="never finished"):
            make_executor(name).run(program)
        with pytest.raises(DeadlockError, match="never finished"):
            summarise_with(program, name)


def test_program_without_locks_gates_or_pools() -> None:
    plan: SandboxPlan = (Stage("s", (Cpu(1.0), Sleep(0.5), Cpu(0.25, guest=True))),)
    assert_equivalent(compile_program([plan] * 3, machine=MachineSpec(cores=2), locks=[]))


@pytest.mark.parametrize(("cni", "profile"), STORMS)
def test_paper_storms_bit_for_bit(cni: str, profile: str) -> None:
    """Beyond the 1e-9 tolerance: every loop repeats the reference's float
    operations in its order, so a storm's numbers are equal to the bit."""
    program = compile_scenario(Scenario(cni=cni, profile=profile, sandboxes=100))
    ref = run_program(program)
    summary = {k: v for k, v in ref.to_dict().items() if k != "events"}
    for name in FAST:
        fast = make_executor(name).run(program)
        assert {k: v for k, v in fast.to_dict().items() if k != "events"} == summary
        assert np.array_equal(fast.finish_s, ref.finish_s)
        for name, times in ref.stage_time_s.items():
            assert np.array_equal(fast.stage_time_s[name], times), name


def _raw(program: Program, spare_slots: int | None) -> list[Any]:
    from bootstorm.simulator.fast import KernelCall

    return list(KernelCall(program, spare_slots=spare_slots).outputs)


def _same_raw(a: list[Any], b: list[Any]) -> None:
    assert len(a) == len(b)
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), i
        else:
            assert x == y, i


@pytest.mark.parametrize("spare_slots", [0, 1, 5])
def test_running_out_of_task_slots_starts_again_to_the_same_bit(spare_slots: int) -> None:
    """A task holds a slot of state only while it runs; with too few to begin
    with (every sandbox here arrives after time 0, and refill branches wait at
    their gate), the run starts again with more and gives what a run with
    plenty gives, and the reference's result."""
    from bootstorm.models import PoolRefill

    arrivals = tuple(float(t) for t in np.linspace(0.01, 3.0, 60))
    program = compile_scenario(
        Scenario(
            cni="ipvtap",
            sandboxes=60,
            arrival_s=arrivals,
            pools={"netns": 3, "ipvtap": 3},
            pool_refill=PoolRefill(concurrency=1),
        )
    )
    assert program.n_branches == 120
    _same_raw(_raw(program, spare_slots), _raw(program, None))
    assert_equivalent(program)


@settings(SETTINGS, max_examples=40)
@given(case=cases())
def test_generated_programs_with_few_task_slots(case: Case) -> None:
    program = case.compile()
    _same_raw(_raw(program, 0), _raw(program, None))


@pytest.mark.parametrize(
    "order",
    ["sorted", "reversed", "ties and zeros", "one out of place"],
)
def test_arrivals_in_any_order_run_to_the_reference(order: str) -> None:
    """The loop reads arrivals already in time order as they are (a day's
    trace) and sorts any others (stably: ties in sandbox order)."""
    times = np.linspace(0.0, 2.0, 40)
    arrivals = {
        "sorted": times,
        "reversed": times[::-1],
        "ties and zeros": np.repeat([0.0, 0.0, 0.5, 1.0], 10),
        "one out of place": np.concatenate((times[:20], [0.1], times[21:])),
    }[order]
    program = compile_scenario(
        Scenario(cni="ipvtap", sandboxes=40, arrival_s=tuple(arrivals.tolist()))
    )
    assert_equivalent(program)
