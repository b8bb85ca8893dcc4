"""Programs of many sandboxes: checked in linear memory, built in slices, refused
up front when they would not fit.

``Program.validate`` groups tasks by a digest of their structure and walks
one of each group; these tests hold that a malformed task hidden among many
well-formed ones is still found (also when digests collide), that the check
and the build take memory small beside the program, that building in slices
gives the arrays of one pass, and that a storm too large for the machine is
refused in one line before anything per sandbox is allocated.
"""

from __future__ import annotations

import dataclasses
import tracemalloc

import numpy as np
import pytest

from bootstorm.models import (
    FollowRate,
    PoolRefill,
    Scenario,
    compile_scenario,
    estimate_memory,
)
from bootstorm.simulator import (
    Cpu,
    CyclicPlans,
    Hold,
    LockSpec,
    MachineSpec,
    MemoryEstimate,
    OpKind,
    Program,
    ProgramError,
    ProgramTooLargeError,
    Sleep,
    Stage,
    _memory,
    compile_program,
    steps,
)
from bootstorm.simulator._memory import check_fits, check_run_fits
from bootstorm.simulator.testing import assert_same_program, with_flat_ops


def _with_bad_release(program: Program, sandbox: int) -> Program:
    """``program`` with sandbox ``sandbox``'s first release pointing at another lock."""
    lo, hi = int(program.offsets[sandbox]), int(program.offsets[sandbox + 1])
    release = lo + int(np.flatnonzero(program.op_kind[lo:hi] == OpKind.RELEASE)[0])
    args = program.op_arg.copy()
    args[release] = (args[release] + 1) % len(program.locks)
    return with_flat_ops(program, op_arg=args)


def test_a_malformed_sandbox_among_many_good_ones_is_found() -> None:
    good = compile_scenario(Scenario(cni="veth", sandboxes=600))
    with pytest.raises(ProgramError, match=r"^sandbox 377 op \d+: release of lock"):
        _with_bad_release(good, 377)


def test_a_digest_collision_costs_a_walk_not_a_missed_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With every digest equal, every task is compared op by op with the first;
    the one that differs is walked on its own and rejected."""
    good = compile_scenario(Scenario(cni="ipvtap", sandboxes=50, tenants=3))

    def collide(self: Program, lengths: np.ndarray) -> np.ndarray:
        return np.zeros(self.n_tasks, dtype=np.uint64)

    monkeypatch.setattr(Program, "_task_digests", collide)
    dataclasses.replace(good, validated=False)  # still valid: nothing is rejected wrongly
    with pytest.raises(ProgramError, match="sandbox 41 op"):
        _with_bad_release(good, 41)


@pytest.mark.parametrize(
    ("cni", "profile", "changes"),
    [
        ("ipvtap", "paper-000", {"tenants": 3, "limits": {"AddCNI": 2}}),
        ("veth", "paper-000", {"pools": {"netns": 7}}),
        ("fastiov", "paper-001", {"sandboxes": 40}),
        ("sriov-vanilla", "paper-001", {"sandboxes": 30, "limits": {"cgroup": 4}}),
    ],
)
def test_compiled_programs_pass_the_full_check(
    cni: str, profile: str, changes: dict[str, object]
) -> None:
    """compile_program walks one task per template; the full check agrees."""
    program = compile_scenario(Scenario(cni=cni, profile=profile, **changes))
    dataclasses.replace(program, validated=False)


@pytest.mark.parametrize(
    ("cni", "profile", "changes"),
    [
        ("ipvtap", "paper-000", {"sandboxes": 300, "tenants": 4}),  # strided rows
        ("veth", "paper-000", {"sandboxes": 200}),  # growth per sandbox
        ("fastiov", "paper-001", {"sandboxes": 60}),  # branches, one plan per sandbox
        ("no-network", "paper-000", {"sandboxes": 90, "seed": 3}),
        # refill branches; a pool target per start beside jittered columns
        (
            "ipvtap",
            "paper-000",
            {
                "sandboxes": 120,
                "pools": {"netns": 3, "ipvtap": 2},
                "arrival_s": tuple(0.05 * i for i in range(120)),
                "pool_refill": PoolRefill(
                    concurrency=2, follow_rate=FollowRate(window_s=1.0, cover_s=0.5)
                ),
            },
        ),
    ],
)
def test_building_in_slices_gives_the_arrays_of_one_pass(
    monkeypatch: pytest.MonkeyPatch, cni: str, profile: str, changes: dict[str, object]
) -> None:
    """Slices of a few ops, and jitter drawn per slice, change no bit (the
    first compile draws its factors at once and keeps them)."""
    scenario = Scenario(cni=cni, profile=profile, **changes)
    whole = compile_scenario(scenario)
    monkeypatch.setattr(steps, "_CHUNK_OPS", 64)
    monkeypatch.setattr(steps, "_MEMO_DRAWS", 0)  # drawn per slice, not kept
    assert_same_program(whole, compile_scenario(scenario))


def test_a_compile_from_the_same_stream_takes_the_kept_factors_and_moves_it_alike(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A search compiles every trial from one seed: the second compile takes
    the factors the first drew, and leaves the generator where drawing them
    would have; a generator in another state draws its own."""
    plans = [_plan(1.0), _plan(2.0)] * 20
    kwargs = {"machine": MachineSpec(cores=2), "locks": (LockSpec(name="m"),), "service_cv": 0.3}
    first_rng, again_rng = np.random.default_rng(5), np.random.default_rng(5)
    first = compile_program(plans, rng=first_rng, **kwargs)  # type: ignore[arg-type]
    calls: list[object] = []
    original = steps._Jitter._draw
    monkeypatch.setattr(
        steps._Jitter, "_draw", lambda self, size: calls.append(size) or original(self, size)
    )
    again = compile_program(plans, rng=again_rng, **kwargs)  # type: ignore[arg-type]
    assert calls == []  # nothing drawn: kept
    assert_same_program(first, again)
    assert again_rng.bit_generator.state == first_rng.bit_generator.state
    assert again_rng.random() == first_rng.random()
    other = compile_program(plans, rng=np.random.default_rng(6), **kwargs)  # type: ignore[arg-type]
    assert calls and not np.array_equal(other.op_amount, first.op_amount)


def test_jittered_amounts_are_the_base_times_the_factors_in_task_order() -> None:
    """Each jittered amount is its base times one factor (one rounding), the
    factors drawn in task order, op by op: written straight into the
    tasks' amounts, a run of columns at a time."""
    plans = [_plan(1.0)] * 50
    kwargs = {"machine": MachineSpec(cores=2), "locks": (LockSpec(name="m"),), "service_cv": 0.3}
    program = compile_program(plans, rng=np.random.default_rng(9), **kwargs)  # type: ignore[arg-type]
    ops = program.ops
    own = ops.slot >= 0
    base = ops.amount[own]
    sigma = float(np.sqrt(np.log1p(0.3**2)))
    factors = np.random.default_rng(9).lognormal(-0.5 * sigma * sigma, sigma, (50, base.size))
    want = base[None, :] * factors
    assert ops.own_amount.tobytes() == want.tobytes()


@pytest.mark.parametrize(
    ("mask", "runs"),
    [
        ([True, True], [(0, 2, 0, True)]),
        (
            [False, True, True, False, True],
            [(0, 1, 0, False), (1, 3, 0, True), (3, 4, 2, False), (4, 5, 2, True)],
        ),
        ([False], [(0, 1, 0, False)]),
    ],
)
def test_runs_of_columns(mask: list[bool], runs: list[tuple[int, int, int, bool]]) -> None:
    assert steps._runs(np.array(mask)) == runs


def _plan(work_s: float) -> tuple[Stage, ...]:
    return (Stage("s", (Cpu(work_s), Hold("m", (Sleep(0.5), Cpu(0.25))))),)


def test_cyclic_plans_compile_as_the_list_they_stand_for() -> None:
    plans = [_plan(1.0), _plan(2.0), _plan(1.0)]
    cyclic = CyclicPlans(plans, sandboxes=10)
    listed = [plans[i % 3] for i in range(10)]
    assert len(cyclic) == 10 and list(cyclic) == listed
    assert cyclic[-1] == listed[-1] and list(cyclic[2:5]) == listed[2:5]
    with pytest.raises(IndexError):
        cyclic[10]
    kw = {
        "machine": MachineSpec(cores=2),
        "locks": [LockSpec(name="m")],
        "service_cv": 0.3,
        "arrival_s": np.linspace(0.0, 1.0, 10),
    }
    assert_same_program(
        compile_program(cyclic, rng=np.random.default_rng(1), **kw),
        compile_program(listed, rng=np.random.default_rng(1), **kw),
    )


def _peak_bytes(run: object) -> int:
    tracemalloc.start()
    try:
        run()  # type: ignore[operator]
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _program_bytes(p: Program) -> int:
    """The bytes of the program's arrays (every array field)."""
    values = [getattr(p, f.name) for f in dataclasses.fields(p)]
    values += [getattr(p.ops, f.name) for f in dataclasses.fields(p.ops)]
    return sum(v.nbytes for v in values if isinstance(v, np.ndarray))


def test_checking_and_building_take_little_beside_the_program() -> None:
    """The check used to build a float row per op (820 MiB at 100 000 sandboxes
    for a 121 MiB program); now a few bytes per task and fixed-size slices."""
    scenario = Scenario(cni="ipvtap", sandboxes=30_000)
    program = compile_scenario(scenario)
    size = _program_bytes(program)
    unchecked = dataclasses.replace(program, validated=True)
    check = _peak_bytes(unchecked.validate)
    build = _peak_bytes(lambda: compile_scenario(scenario))
    assert check < 0.4 * size, (check, size)
    assert build < 1.5 * size, (build, size)


def test_a_storm_too_large_for_the_machine_is_refused_in_one_line() -> None:
    with pytest.raises(ProgramTooLargeError) as info:
        compile_scenario(Scenario(cni="ipvtap", sandboxes=10**9))
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("sandboxes: 1000000000 sandboxes would need about ")
    assert "MiB" in message and "available" in message


def test_the_estimate_is_checked_against_what_is_available() -> None:
    estimate = MemoryEstimate.of(
        sandboxes=1000,
        branches=0,
        ops=97_000,
        locks=5,
        gates=1,
        stages=5,
        stage_ends=5000,
        max_depth=1,
    )
    # An amount of its own is 8 bytes (every op, unless told), plus a few per sandbox.
    assert 97_000 * 8 < estimate.program_bytes < 97_000 * 8 + 1000 * 64
    check_fits(estimate, available_bytes=estimate.total_bytes)
    with pytest.raises(ProgramTooLargeError, match="1000 sandboxes would need about 1 MiB"):
        check_fits(estimate, available_bytes=estimate.total_bytes - 1)


def test_the_estimate_covers_a_compiled_program() -> None:
    program = compile_scenario(Scenario(cni="ipvtap", sandboxes=2000))
    seen: list[MemoryEstimate] = []
    real_check = _memory.check_fits

    def spy(estimate: MemoryEstimate, *, available_bytes: int | None = None) -> None:
        seen.append(estimate)
        real_check(estimate, available_bytes=available_bytes)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(steps, "check_fits", spy)
        compile_scenario(Scenario(cni="ipvtap", sandboxes=2000))
    (estimate,) = seen
    assert estimate.ops == program.n_ops
    assert estimate.program_bytes >= _program_bytes(program)


def test_a_storm_of_any_size_is_sized_without_being_built() -> None:
    """``estimate_memory`` stops at the size check: a billion sandboxes, sized."""
    estimate = estimate_memory(Scenario(cni="ipvtap", sandboxes=10**9))
    program = compile_scenario(Scenario(cni="ipvtap", sandboxes=1000))
    assert estimate.ops == program.n_ops * 10**6
    assert estimate_memory(Scenario(cni="ipvtap", sandboxes=1000)).ops == program.n_ops


def test_a_storm_too_large_for_the_python_executors_is_refused_before_compiling(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """SimPy holds ~80 bytes an op where the compiled kernel holds a few: a storm
    that fits compiled may not fit on SimPy, and is refused before compiling."""
    from bootstorm import simulate

    monkeypatch.setattr(_memory, "available_memory_bytes", lambda: 200 * 2**20)
    storm = Scenario(cni="ipvtap", sandboxes=30_000)  # ~2.9 M ops: ~250 MiB on SimPy
    with pytest.raises(ProgramTooLargeError, match="to run on the simpy executor") as info:
        simulate(storm, executor="simpy")
    assert "\n" not in str(info.value) and "--executor compiled" in str(info.value)
    check_run_fits(sandboxes=10, ops=10**9, executor="compiled", available_bytes=1)  # passes
