"""The contract every executor must meet, as a pytest base class.

``optuna.testing``'s sampler test case is the model: an executor's test
module subclasses :class:`ExecutorContract` and says how to make the
executor; pytest then runs every check below on it::

    from bootstorm.simulator.testing import ExecutorContract

    class TestMyExecutor(ExecutorContract):
        def make_executor(self) -> Executor:
            return MyExecutor()

The checks: every :mod:`.reference_problems` problem gives its known answer
(queueing theory, schedules worked by hand, the Fig. 13 lock order); on
each, the result equals the SimPy reference's to the bit (all but the event
count, which each executor counts its own way); a deadlock raises
:class:`DeadlockError`; a run leaves its program as it was and runs the same
twice. Needs pytest (the ``test`` extra).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import ClassVar

import numpy as np
import pytest

from ._errors import DeadlockError
from .executors import Executor
from .program import GateSpec, LockKind, LockSpec, MachineSpec, PoolSpec, Program, SharedOps
from .reference_problems import (
    ReferenceProblem,
    deadlock_program,
    exact_problems,
    fig13_lock_order,
    mg1_processor_sharing,
    mm1,
    mmc,
    refilled_pool,
)
from .result import Result
from .steps import (
    Async,
    Cpu,
    Hold,
    Pooled,
    Refill,
    Retarget,
    SandboxPlan,
    Sleep,
    Stage,
    Zero,
    compile_program,
)

__all__ = [
    "ExecutorContract",
    "assert_same_program",
    "assert_same_result",
    "with_flat_ops",
]


def assert_same_program(a: Program, b: Program) -> None:
    """``a`` and ``b`` are the same program: every array to the bit (dtype,
    shape, bytes), every spec equal. Read from :class:`Program`'s fields (and
    its :class:`SharedOps`'), so a field added there is compared too;
    ``validated`` is how it was built, not what it is."""
    _same_fields(a, b, Program)
    _same_fields(a.ops, b.ops, SharedOps)


def _same_fields(a: object, b: object, cls: type) -> None:
    for f in dataclasses.fields(cls):
        if f.name in ("validated", "ops"):
            continue
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            assert isinstance(x, np.ndarray) and isinstance(y, np.ndarray), f.name
            assert (x.dtype, x.shape) == (y.dtype, y.shape), (
                f"{f.name}: {x.dtype}{x.shape} against {y.dtype}{y.shape}"
            )
            assert x.tobytes() == y.tobytes(), f"{f.name}: not the same to the bit"
        else:
            assert x == y, f"{f.name}: {x!r} against {y!r}"


def with_flat_ops(program: Program, *, validated: bool = False, **arrays: np.ndarray) -> Program:
    """``program`` with some of its per-task op arrays (``offsets``,
    ``op_kind``, ``op_arg``, ``op_amount``) replaced, one template per task,
    and checked again unless ``validated``: how a test breaks a program."""
    flat = {
        name: arrays.get(name, getattr(program, name))
        for name in ("offsets", "op_kind", "op_arg", "op_amount")
    }
    ops = SharedOps.of_flat(
        offsets=flat["offsets"], kind=flat["op_kind"], arg=flat["op_arg"], amount=flat["op_amount"]
    )
    return dataclasses.replace(program, ops=ops, validated=validated)


def assert_same_result(reference: Result, result: Result) -> None:
    """``result`` is ``reference`` to the bit: every figure but the event count,
    the per-sandbox arrays and the per-stage, per-branch ones."""

    def summary(r: Result) -> dict[str, object]:
        return {k: v for k, v in r.to_dict().items() if k != "events"}

    assert summary(result) == summary(reference)
    assert np.array_equal(result.finish_s, reference.finish_s, equal_nan=True)
    assert np.array_equal(result.arrival_s, reference.arrival_s)
    for field in ("stage_time_s", "branch_finish_s"):
        want, got = getattr(reference, field), getattr(result, field)
        assert list(got) == list(want), field
        for name in want:
            assert np.array_equal(got[name], want[name], equal_nan=True), f"{field}[{name}]"
    assert np.array_equal(result.empty_start_sandboxes, reference.empty_start_sandboxes)
    assert list(result.pool_timelines) == list(reference.pool_timelines)
    for name, line in reference.pool_timelines.items():
        other = result.pool_timelines[name]
        for array in ("t_s", "event", "ready", "making", "task"):
            x, y = getattr(line, array), getattr(other, array)
            assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), f"pool {name}: {array}"


@functools.cache
def _statistical(name: str) -> ReferenceProblem:
    """A statistical problem, built once per process: building 40 000 distinct
    plans takes longer than most executors take to run them."""
    if name == "M/M/1":
        return mm1()
    if name == "M/M/c":
        return mmc()
    if name == "refilled pool":
        return refilled_pool(distribution="exponential")
    return mg1_processor_sharing(distribution="hyperexponential")


def _named(problems: list[ReferenceProblem]) -> list[object]:
    return [pytest.param(p, id=p.name) for p in problems]


def _mixed_storm() -> Program:
    """Every kind of step at once, small: CPU, sleeps, zeroing, guest CPU,
    locks with stage priority, a spinlock, a gated stage, branches."""
    plan: SandboxPlan = (
        Stage("boot", (Cpu(0.02), Zero(2e8), Hold("rtnl", (Cpu(0.01), Sleep(0.005))))),
        Stage(
            "net",
            (Hold("rtnl", (Cpu(0.004),)), Hold("spin", (Cpu(0.001),)), Cpu(0.01, guest=True)),
            gate="limit",
        ),
    )
    return compile_program(
        [plan] * 24,
        machine=MachineSpec(cores=4, guest_cpu_quota=0.5),
        locks=[
            LockSpec(name="rtnl", stage_priority=(("net", 0), ("boot", 1)), spin_s=1e-4),
            LockSpec(name="spin", kind=LockKind.SPIN),
        ],
        gates=[GateSpec(name="limit", permits=5)],
        arrival_s=np.linspace(0.0, 0.05, 24),
    )


def _refilling_storm(*, trimmed: bool = False) -> Program:
    """Two pools refilled by two workers under RTNL while starts go on, one
    of them with a target that moves per start (rises by up to two);
    ``trimmed``: its workers remove its surplus, each removal under RTNL."""
    make = (Hold("rtnl", (Cpu(0.003),)), Sleep(0.002))
    remove = (Hold("rtnl", (Cpu(0.002), Sleep(0.001))), Sleep(0.004)) if trimmed else None
    plan: SandboxPlan = (
        Stage(
            "net",
            (
                Retarget("netns"),
                Pooled("netns", create=make, fetch=(Sleep(0.0005),)),
                Async(
                    "refill",
                    (Refill("netns", create=make, copies=3, remove=remove),),
                    gate="workers",
                ),
                Pooled("tap", create=(Hold("rtnl", (Cpu(0.001),)),)),
                Async(
                    "refill",
                    (Refill("tap", create=(Hold("rtnl", (Cpu(0.001),)),)),),
                    gate="workers",
                ),
                Hold("rtnl", (Cpu(0.002),)),
            ),
        ),
    )
    n = 40
    program = compile_program(
        [plan] * n,
        machine=MachineSpec(cores=2),
        locks=[LockSpec(name="rtnl")],
        gates=[GateSpec(name="workers", permits=2)],
        pools=[
            PoolSpec(name="netns", capacity=3, memory_mib_per_device=0.5),
            PoolSpec(name="tap", capacity=2, memory_mib_per_device=0.25),
        ],
        arrival_s=np.sort(np.random.default_rng(7).uniform(0.0, 0.3, n)),
        service_cv=0.3,
        rng=np.random.default_rng(8),
    )
    targets = np.clip(np.arange(n) // 4 - np.arange(n) // 13, 0, None) + 1
    if trimmed:  # up to 5 and back to 1 every 8 starts: a surplus to remove
        targets = np.where(np.arange(n) // 8 % 2 == 0, 5, 1)
    return program.with_pool_targets({"netns": targets})


class ExecutorContract:
    """Subclass as ``Test...`` and override :meth:`make_executor`.

    ``statistical``: also run the statistical reference problems (tens of
    thousands of customers each: seconds on SimPy and compiled code; set it
    False for an executor so slow that they would take minutes).
    """

    statistical: ClassVar[bool] = True

    def make_executor(self) -> Executor:
        raise NotImplementedError("a contract test class makes its executor")

    def reference(self, program: Program) -> Result:
        """The SimPy reference's result, which every executor must reproduce."""
        from .simpy_executor import SimPyExecutor

        return SimPyExecutor().run(program)

    # -- known answers -------------------------------------------------------------------
    @pytest.mark.parametrize("problem", _named(exact_problems()))
    def test_exact_reference_problem(self, problem: ReferenceProblem) -> None:
        problem.check(self.make_executor().run(problem.program))

    @pytest.mark.slow
    @pytest.mark.parametrize("name", ["M/M/1", "M/M/c", "M/G/1-PS", "refilled pool"])
    def test_statistical_reference_problem(self, name: str) -> None:
        if not self.statistical:
            pytest.skip("statistical problems are off for this executor class")
        problem = _statistical(name)
        problem.check(self.make_executor().run(problem.program))

    # -- the reference's result, to the bit ----------------------------------------------
    @pytest.mark.parametrize(
        "program",
        [
            *(pytest.param(p.program, id=p.name) for p in exact_problems()),
            pytest.param(mm1(n=400).program, id="M/M/1 small"),
            pytest.param(mmc(n=400).program, id="M/M/c small"),
            pytest.param(
                mg1_processor_sharing(distribution="uniform", n=400).program, id="M/G/1-PS small"
            ),
            pytest.param(_mixed_storm(), id="every step kind"),
            pytest.param(_refilling_storm(), id="refilling pools"),
            pytest.param(_refilling_storm(trimmed=True), id="pools their workers trim"),
        ],
    )
    def test_gives_the_reference_result(self, program: Program) -> None:
        result = self.make_executor().run(program)
        assert_same_result(self.reference(program), result)
        assert result.events > 0

    # -- failures and hygiene ------------------------------------------------------------
    def test_deadlock_is_reported(self) -> None:
        """A lock-order cycle (A: a then b, B: b then a) never finishes."""
        with pytest.raises(DeadlockError, match="2 tasks never finished"):
            self.make_executor().run(deadlock_program())

    def test_runs_are_repeatable_and_leave_the_program_alone(self) -> None:
        program = fig13_lock_order("s2").program
        before = {name: getattr(program, name).copy() for name in _ARRAYS}
        executor = self.make_executor()
        first, second = executor.run(program), executor.run(program)
        assert_same_result(first, second)
        assert first.events == second.events
        for name, array in before.items():
            assert np.array_equal(getattr(program, name), array), name


_ARRAYS = ("arrival_s", "offsets", "op_kind", "op_arg", "op_amount")
