"""Branches (work a sandbox starts and does not wait for) and guest CPU quotas:
known answers for each rule of the kernel."""

from __future__ import annotations

import numpy as np
import pytest

from bootstorm.simulator import (
    Async,
    Cpu,
    LockSpec,
    MachineSpec,
    OpKind,
    Program,
    ProgramError,
    Sleep,
    Stage,
    chrome_trace,
    compile_program,
    run_program,
)

ONE_CORE = MachineSpec(cores=1)


def _run(plans: list[tuple[Stage, ...]], machine: MachineSpec = ONE_CORE, record: bool = False):  # type: ignore[no-untyped-def]
    program = compile_program(plans, machine=machine, locks=[LockSpec(name="L")])
    return run_program(program, record=record)


def test_a_branch_is_not_waited_for_but_readiness_waits_for_it() -> None:
    plan = (Stage("start", (Sleep(1.0), Async("nic", (Sleep(5.0),), ready=True), Sleep(1.0))),)
    r = _run([plan])
    assert r.makespan_s == pytest.approx(2.0)
    assert r.startup.mean == pytest.approx(2.0)
    assert r.ready is not None and r.ready.mean == pytest.approx(6.0)  # spawned at 1, 5 s long
    assert r.branches["nic"].mean == pytest.approx(6.0)
    assert r.steps["nic"].on_path is False and r.steps["nic"].mean_share is None
    assert r.stage_time_s["nic"][0] == pytest.approx(5.0)  # counted for its sandbox


def test_housekeeping_branches_leave_readiness_alone() -> None:
    plan = (Stage("start", (Async("bg", (Sleep(9.0),)), Sleep(1.0))),)
    r = _run([plan])
    assert r.ready is None
    assert r.makespan_s == pytest.approx(1.0)
    assert r.branches["bg"].max == pytest.approx(9.0)


def test_a_branch_competes_for_cores_with_its_sandbox() -> None:
    # One core, two jobs of 1 core-s each from t=0: each gets half, both end at 2.
    plan = (Stage("start", (Async("bg", (Cpu(1.0),)), Cpu(1.0))),)
    r = _run([plan])
    assert r.makespan_s == pytest.approx(2.0)
    assert r.branches["bg"].mean == pytest.approx(2.0)
    assert r.cpu.work_core_s == pytest.approx(2.0)


def test_branches_may_take_the_locks_their_sandbox_holds_later() -> None:
    from bootstorm.simulator import Hold

    plan = (Stage("start", (Async("bg", (Hold("L", (Sleep(1.0),)),)), Hold("L", (Sleep(1.0),)))),)
    r = _run([plan])
    assert r.locks["L"].acquisitions == 2
    assert r.locks["L"].contended == 1
    assert max(r.makespan_s, r.branches["bg"].max) == pytest.approx(2.0)


def test_a_branch_cannot_start_a_branch() -> None:
    with pytest.raises(ProgramError, match="a branch cannot start a branch"):
        _run([(Stage("s", (Async("a", (Async("b", ()),)),)),)])


def test_raw_spawn_of_a_branch_that_does_not_exist_is_rejected() -> None:
    with pytest.raises(ProgramError, match="spawn of branch 1, but it has 1 branches"):
        Program.from_flat(
            machine=ONE_CORE,
            stage_names=(),
            locks=(),
            gates=(),
            pools=(),
            arrival_s=np.zeros(1),
            offsets=np.array([0, 2, 3], dtype=np.int64),
            op_kind=np.array([OpKind.SPAWN, OpKind.SPAWN, OpKind.SLEEP], dtype=np.int8),
            op_arg=np.array([0, 1, 0], dtype=np.int32),
            op_amount=np.array([0.0, 0.0, 1.0]),
            branch_names=("b",),
            branch_parent=np.zeros(1, dtype=np.int64),
            branch_kind=np.zeros(1, dtype=np.int32),
        )


def test_raw_branch_never_spawned_is_rejected() -> None:
    with pytest.raises(ProgramError, match="without spawning branches"):
        Program.from_flat(
            machine=ONE_CORE,
            stage_names=(),
            locks=(),
            gates=(),
            pools=(),
            arrival_s=np.zeros(1),
            offsets=np.array([0, 1, 2], dtype=np.int64),
            op_kind=np.array([OpKind.SLEEP, OpKind.SLEEP], dtype=np.int8),
            op_arg=np.array([0, 0], dtype=np.int32),
            op_amount=np.array([1.0, 1.0]),
            branch_names=("b",),
            branch_parent=np.zeros(1, dtype=np.int64),
            branch_kind=np.zeros(1, dtype=np.int32),
        )


def test_branches_get_a_track_next_to_their_sandbox_in_the_trace() -> None:
    plan = (Stage("start", (Sleep(1.0), Async("nic", (Sleep(2.0),), ready=True), Sleep(1.0))),)
    r = _run([plan, plan], record=True)
    assert r.recording is not None
    names = {
        e["args"]["name"]
        for e in chrome_trace(r.recording)["traceEvents"]
        if e.get("ph") == "M" and e["name"] == "thread_name"
    }
    assert {"sandbox 0", "sandbox 1", "sandbox 0 · nic", "sandbox 1 · nic"} <= names
    frame = r.spans()
    assert sorted(frame[frame.branch]["sandbox"].tolist()) == [0, 1]


# -- guest CPU quota ---------------------------------------------------------------


def _guest(work_s: float) -> tuple[Stage, ...]:
    return (Stage("boot", (Cpu(work_s, guest=True),)),)


def _plain(work_s: float) -> tuple[Stage, ...]:
    return (Stage("host", (Cpu(work_s),)),)


def test_guest_work_runs_no_faster_than_its_quota() -> None:
    r = _run([_guest(1.0)], MachineSpec(cores=4, guest_cpu_quota=0.5))
    assert r.makespan_s == pytest.approx(2.0)
    assert r.cpu.work_core_s == pytest.approx(1.0)


def test_quota_water_filling_gives_the_rest_to_host_work() -> None:
    # 2 cores: the guest is held to 0.5, the host job gets a whole core (not
    # 1.5: one job uses one core); when it ends at 1 s the guest still runs at 0.5.
    r = _run([_guest(1.0), _plain(1.0)], MachineSpec(cores=2, guest_cpu_quota=0.5))
    assert r.finish_s.tolist() == pytest.approx([2.0, 1.0])


def test_a_quota_above_the_fair_share_does_not_bind() -> None:
    # One core, three guests with quota 0.5: each gets a third (< 0.5).
    r = _run([_guest(1.0)] * 3, MachineSpec(cores=1, guest_cpu_quota=0.5))
    assert r.finish_s.tolist() == pytest.approx([3.0, 3.0, 3.0])


def test_busy_cores_count_what_quotas_let_run() -> None:
    r = _run([_guest(1.0)] * 2, MachineSpec(cores=4, guest_cpu_quota=0.5), record=True)
    assert r.recording is not None
    frame = r.recording.cpu_frame()
    assert frame["busy_cores"].max() == pytest.approx(1.0)


def test_quota_must_be_positive() -> None:
    with pytest.raises(ProgramError, match=r"^guest_cpu_quota: must be a finite number > 0 "):
        MachineSpec(cores=1, guest_cpu_quota=0.0)
