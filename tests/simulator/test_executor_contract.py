"""Every executor meets :class:`bootstorm.simulator.testing.ExecutorContract`.

The contract's checks (the reference problems' known answers, the
reference's result to the bit, deadlocks, repeatability) run once per
executor below; a new executor is one more subclass.
"""

from __future__ import annotations

import pytest

from bootstorm.simulator import Executor, FastExecutor, SimPyExecutor, make_executor
from bootstorm.simulator.testing import ExecutorContract


class TestSimPyExecutor(ExecutorContract):
    def make_executor(self) -> Executor:
        return SimPyExecutor()


class TestRecordingSimPyExecutor(ExecutorContract):
    """Recording must not change a number (and Fig. 13's grant order is checked)."""

    statistical = False  # the same numbers as without recording, checked to the bit

    def make_executor(self) -> Executor:
        return SimPyExecutor(record=True)


class TestCompiledExecutor(ExecutorContract):
    def make_executor(self) -> Executor:
        return make_executor("compiled")


class TestInterpretedExecutor(ExecutorContract):
    """The compiled executor's source run by the interpreter (executor "python")."""

    # Tens of thousands of customers interpreted take about a minute each; its
    # results are the compiled loop's to the bit (test_fast_equivalence).
    statistical = False

    def make_executor(self) -> Executor:
        return make_executor("python")


def test_the_names_make_the_contracted_executors() -> None:
    compiled, python = make_executor("compiled"), make_executor("python")
    assert isinstance(compiled, FastExecutor) and compiled.jit
    assert isinstance(python, FastExecutor) and not python.jit


def test_a_contract_class_must_make_its_executor() -> None:
    with pytest.raises(NotImplementedError, match="makes its executor"):
        ExecutorContract().make_executor()
