"""Choosing an executor by name: the SimPy reference or the compiled loop.

Two executors, three names; all run the same :class:`~.program.Program` and
return the same :class:`~.result.Result` (each passes
:class:`~.testing.ExecutorContract`, and ``tests/simulator/test_fast_equivalence.py``
compares them on generated programs):

``simpy``
    :class:`~.simpy_executor.SimPyExecutor`, the reference: readable, extensible,
    and the only one that records spans (``record=True``).
``compiled``
    :class:`~.fast.FastExecutor`: the reference's algorithm compiled by
    numba; what search, sweeps and calibration use by default.
``python``
    ``FastExecutor(jit=False)``: the compiled executor's own source run by
    the interpreter, for pdb and coverage (its result is the compiled one's
    to the bit; slow, about 100x the compiled loop).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from .._params import OneOf, format_problem
from ._memory import check_run_fits
from ._names import EXECUTOR_NAMES, ExecutorName
from .program import ProgramError

if TYPE_CHECKING:
    from .fast import StartupSummary
    from .program import Program
    from .result import Result

__all__ = [
    "EXECUTOR_NAMES",
    "Executor",
    "ExecutorName",
    "check_executor",
    "make_executor",
    "run_with",
    "summarise_with",
]


class Executor(Protocol):
    """Runs a program to its :class:`Result`; one instance may run many programs."""

    def run(self, program: Program) -> Result: ...


def check_executor(name: str, *, record: bool = False) -> ExecutorName:
    """``name`` if it names an executor that can do what is asked, else a
    :class:`ProgramError` that shows the value."""
    known = OneOf(EXECUTOR_NAMES)
    if not known.holds(name):
        raise ProgramError(format_problem("executor", known.text(), name))
    if record and name != "simpy":
        raise ProgramError(
            format_problem("executor", "must be 'simpy' to record spans (record=True)", name)
        )
    return name  # type: ignore[return-value]


def make_executor(name: str, *, record: bool = False) -> Executor:
    """The executor called ``name`` (see the module docstring)."""
    # Imported here: SimPy loads only for the reference.
    from .fast import FastExecutor

    match check_executor(name, record=record):
        case "simpy":
            from .simpy_executor import SimPyExecutor

            return SimPyExecutor(record=record)
        case "compiled":
            return FastExecutor(jit=True)
        case _:
            return FastExecutor(jit=False)


def run_with(program: Program, executor: str, *, record: bool = False) -> Result:
    """Run ``program`` on the executor called ``executor`` (refused in one line,
    :class:`~._memory.ProgramTooLargeError`, if that executor would not fit in
    the memory available)."""
    run = make_executor(executor, record=record)
    check_run_fits(sandboxes=program.n_sandboxes, ops=program.n_ops, executor=executor)
    return run.run(program)


def summarise_with(program: Program, executor: str) -> StartupSummary:
    """Run ``program`` on the executor called ``executor``, keeping only the
    makespan, the startup statistics and the pools' memory (what a search
    reads): the compiled executor then skips building the rest of the result."""
    from .fast import FastExecutor, StartupSummary

    check_run_fits(
        sandboxes=program.n_sandboxes, ops=program.n_ops, executor=check_executor(executor)
    )
    match check_executor(executor):
        case "simpy":
            from .simpy_executor import SimPyExecutor

            return StartupSummary.of(SimPyExecutor().run(program))
        case "compiled":
            return FastExecutor(jit=True).summarise(program)
        case _:
            return FastExecutor(jit=False).summarise(program)
