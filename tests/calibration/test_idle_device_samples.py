"""Idle pooled device-seconds of a node agent's refilled pools, read from the
trace's ``pool_level`` samples step-wise (the takes alone do not tell)."""

from __future__ import annotations

import pytest

from bootstorm.calibration.trace_fit import idle_device_s_by_kind
from bootstorm.models import PoolRefill, TunedConfig
from bootstorm.traces import (
    Arrival,
    PoolLevelSample,
    PoolTake,
    ScenarioFacts,
    Trace,
    TraceHeader,
)

ORIGIN = 100.0


def _idle_device_s(trace: Trace, *, until_s: float) -> float | None:
    held = idle_device_s_by_kind(trace, until_s=until_s)
    return None if held is None else sum(held.values())


def _agent_trace(*levels: PoolLevelSample, refill: bool = True) -> Trace:
    """A storm through an agent: its config's netns pool (refilled), no pool
    made by the testbed, the first arrival at ``ORIGIN``."""
    config = TunedConfig(
        pools={"netns": 4, "veth": 2},
        pool_refill=PoolRefill(concurrency=2) if refill else None,
    )
    header = TraceHeader(
        source="testbed",
        origin_s=ORIGIN - 0.05,
        config=config,
        scenario=ScenarioFacts(sandboxes=2, cni="veth-peer-in-netns"),
    )
    return Trace(
        header=header,
        arrivals=(Arrival(sandbox=0, t_s=ORIGIN), Arrival(sandbox=1, t_s=ORIGIN + 1.0)),
        pool_takes=(
            PoolTake(sandbox=0, kind="netns", t_s=ORIGIN + 0.4, taken=True, ready=3, target=4),
            PoolTake(sandbox=1, kind="netns", t_s=ORIGIN + 1.1, taken=True, ready=2, target=4),
        ),
        pool_levels=levels,
    )


def _netns(at: float, ready: int) -> PoolLevelSample:
    return PoolLevelSample(kind="netns", t_s=ORIGIN + at, ready=ready, making=0, target=4)


def test_refilled_pools_integrate_their_samples_step_wise() -> None:
    trace = _agent_trace(
        _netns(-0.1, 4),  # before the first arrival: the level at it
        _netns(0.5, 2),
        _netns(1.0, 3),
        _netns(2.5, 4),
        _netns(3.5, 1),  # after until_s: not counted
        # A kind the config does not pool (an agent's of another config): left out.
        PoolLevelSample(kind="tap", t_s=ORIGIN + 0.2, ready=5, target=5),
    )
    # [0, 0.5) at 4, [0.5, 1) at 2, [1, 2.5) at 3, [2.5, 3] at 4.
    want = 4 * 0.5 + 2 * 0.5 + 3 * 1.5 + 4 * 0.5
    assert want == pytest.approx(9.5)
    assert idle_device_s_by_kind(trace, until_s=3.0) == {"netns": pytest.approx(want)}


def test_a_pooled_kind_no_sandbox_asked_for_still_holds_its_memory() -> None:
    """The config pools veth too; no sandbox takes one, but the agent keeps
    two ready all along: they are idle devices, counted."""
    trace = _agent_trace(
        _netns(0.0, 4), PoolLevelSample(kind="veth", t_s=ORIGIN, ready=2, target=2)
    )
    assert idle_device_s_by_kind(trace, until_s=3.0) == {
        "netns": pytest.approx(12.0),
        "veth": pytest.approx(6.0),
    }


def test_before_the_first_sample_the_level_is_the_first_samples() -> None:
    trace = _agent_trace(_netns(0.5, 2), _netns(2.0, 4))
    # [0, 2) at 2 (the first sample's, from the start), [2, 3] at 4.
    assert _idle_device_s(trace, until_s=3.0) == pytest.approx(2 * 2.0 + 4 * 1.0)
    assert _idle_device_s(trace, until_s=0.0) == 0.0


def test_an_agents_pools_without_refill_are_read_from_their_samples_too() -> None:
    # The agent made them (the testbed made none): the samples say their level.
    trace = _agent_trace(_netns(0.0, 4), _netns(1.0, 2), refill=False)
    assert _idle_device_s(trace, until_s=2.0) == pytest.approx(4 * 1.0 + 2 * 1.0)


def test_refilled_pools_without_samples_are_unknown() -> None:
    assert _idle_device_s(_agent_trace(), until_s=3.0) is None


def test_pools_made_before_the_storm_are_still_read_from_their_takes() -> None:
    """The testbed's own pools: level ``made``, one fewer at each take, exactly."""
    trace = _agent_trace(refill=False)
    header = trace.header.model_copy(
        update={
            "config": None,
            "scenario": trace.header.scenario.model_copy(update={"pools": {"netns": 4}}),
        }
    )
    made = Trace(header=header, arrivals=trace.arrivals, pool_takes=trace.pool_takes)
    # [0, 0.4) at 4, [0.4, 1.1) at 3, [1.1, 3] at 2.
    assert _idle_device_s(made, until_s=3.0) == pytest.approx(4 * 0.4 + 3 * 0.7 + 2 * 1.9)
