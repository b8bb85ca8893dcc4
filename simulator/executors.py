"""Choosing an executor by name: the SimPy reference or the compiled loop.

Both run the same :class:`~.program.Program` and return the same
:class:`~.result.Result` (checked by ``tests/simulator/test_fast_equivalence.py``):

``simpy``
    :class:`~.executor.SimPyExecutor`, the reference: readable, extensible,
    and the only one that records spans (``record=True``).
``compiled``
    :class:`~.fast.FastExecutor` with ``jit=True``: the reference's algorithm
    compiled by numba; what search, sweeps and calibration use by default.
``python``
    :class:`~.fast.FastExecutor` without numba: the same loop in plain Python,
    the compiled one's readable twin (and a check on it).
"""

from __future__ import annotations

from typing import Literal, Protocol, get_args

from .executor import SimPyExecutor
from .fast import FastExecutor, StartupSummary
from .program import Program, ProgramError
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

ExecutorName = Literal["compiled", "simpy", "python"]
EXECUTOR_NAMES: tuple[str, ...] = get_args(ExecutorName)


class Executor(Protocol):
    """Runs a program to its :class:`Result`; one instance may run many programs."""

    def run(self, program: Program) -> Result: ...


def check_executor(name: str, *, record: bool = False) -> ExecutorName:
    """``name`` if it names an executor that can do what is asked, else a
    :class:`ProgramError` that shows the value."""
    if name not in EXECUTOR_NAMES:
        raise ProgramError(
            f"executor: expected one of {', '.join(EXECUTOR_NAMES)}, but got {name!r}"
        )
    if record and name != "simpy":
        raise ProgramError(f"executor: only 'simpy' records spans (record=True), but got {name!r}")
    return name  # type: ignore[return-value]


def make_executor(name: str, *, record: bool = False) -> Executor:
    """The executor called ``name`` (see the module docstring)."""
    match check_executor(name, record=record):
        case "simpy":
            return SimPyExecutor(record=record)
        case "compiled":
            return FastExecutor(jit=True)
        case _:
            return FastExecutor(jit=False)


def run_with(program: Program, executor: str, *, record: bool = False) -> Result:
    """Run ``program`` on the executor called ``executor``."""
    return make_executor(executor, record=record).run(program)


def summarise_with(program: Program, executor: str) -> StartupSummary:
    """Run ``program`` on the executor called ``executor``, keeping only the
    makespan, the startup statistics and the pools' memory (what a search
    reads): the compiled executor then skips building the rest of the result."""
    match check_executor(executor):
        case "simpy":
            return StartupSummary.of(SimPyExecutor().run(program))
        case "compiled":
            return FastExecutor(jit=True).summarise(program)
        case _:
            return FastExecutor(jit=False).summarise(program)
