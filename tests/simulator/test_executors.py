"""Executors by name: the same numbers from each, clear errors for bad names."""

from __future__ import annotations

import numpy as np
import pytest

from bootstorm import Scenario, simulate
from bootstorm.models import compile_scenario
from bootstorm.simulator import (
    EXECUTOR_NAMES,
    FastExecutor,
    ProgramError,
    SimPyExecutor,
    StartupSummary,
    make_executor,
    run_with,
    summarise_with,
)

ONLY_SIMPY = "executor: must be 'simpy' to record spans (record=True)"


def test_names_make_the_documented_executors() -> None:
    assert EXECUTOR_NAMES == ("compiled", "simpy", "python")
    compiled, python = make_executor("compiled"), make_executor("python")
    assert isinstance(compiled, FastExecutor) and compiled.jit
    assert isinstance(python, FastExecutor) and not python.jit
    assert isinstance(make_executor("simpy", record=True), SimPyExecutor)


@pytest.mark.parametrize(
    ("name", "record", "message"),
    [
        ("numba", False, "executor: must be one of compiled, simpy, python (got 'numba')"),
        ("compiled", True, f"{ONLY_SIMPY} (got 'compiled')"),
        ("python", True, f"{ONLY_SIMPY} (got 'python')"),
    ],
)
def test_bad_choices_name_the_value(name: str, record: bool, message: str) -> None:
    with pytest.raises(ProgramError) as info:
        make_executor(name, record=record)
    assert str(info.value) == message


@pytest.mark.parametrize(
    "scenario",
    [
        Scenario(cni="ipvtap", sandboxes=120, limits={"AddCNI": 7}, pools={"netns": 60}),
        Scenario(cni="fastiov", sandboxes=40, profile="paper-001"),
    ],
    ids=["ipvtap-limits-pools", "fastiov"],
)
def test_every_executor_gives_the_reference_result(scenario: Scenario) -> None:
    program = compile_scenario(scenario)
    reference = run_with(program, "simpy")
    for name in ("compiled", "python"):
        r = run_with(program, name)
        assert np.array_equal(r.finish_s, reference.finish_s), name
        assert r.makespan_s == reference.makespan_s
        assert r.locks == reference.locks
        assert r.stages == reference.stages
        assert r.cpu == reference.cpu
        assert r.recording is None


@pytest.mark.parametrize(
    "scenario",
    [
        Scenario(cni="ipvtap", sandboxes=120, limits={"AddCNI": 7}, pools={"netns": 60}),
        Scenario(cni="fastiov", sandboxes=40, profile="paper-001"),
        Scenario(cni="ipvtap", sandboxes=50, arrival_s=tuple(0.01 * i for i in range(50))),
    ],
    ids=["ipvtap-limits-pools", "fastiov", "staggered"],
)
def test_summaries_are_the_results_figures(scenario: Scenario) -> None:
    program = compile_scenario(scenario)
    want = StartupSummary.of(run_with(program, "simpy"))
    for name in EXECUTOR_NAMES:
        got = summarise_with(program, name)
        assert got == want, name  # floats compared exactly
        assert got == StartupSummary.of(run_with(program, name)), name


def test_simulate_takes_an_executor_and_records_only_on_simpy() -> None:
    scenario = Scenario(sandboxes=30)
    fast = simulate(scenario, executor="compiled")
    assert fast.makespan_s == simulate(scenario).makespan_s
    assert simulate(scenario, record=True).recording is not None
    with pytest.raises(ProgramError, match="must be 'simpy' to record spans"):
        simulate(scenario, record=True, executor="compiled")
