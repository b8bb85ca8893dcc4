"""Sandboxes through a node agent (``Scenario.through_agent``): each lease of
a limited stage is two HTTP calls and each pool take one, at the profile's
measured call costs (the caller's CPU under the GIL, the agent's CPU)."""

from __future__ import annotations

import pytest

from bootstorm import simulate
from bootstorm.calibration import trace_fit
from bootstorm.models import Profile, Scenario
from bootstorm.traces import ScenarioFacts

CLIENT_S = 0.004
AGENT_S = 0.003


def _profile(*, measured: bool = True) -> Profile:
    base = trace_fit.testbed_template(
        cores=2, memory_mib=4096, service_cv=0.0, runtimes=("threads", "cni")
    )
    base = base.with_values(
        {"testbed.cni_exec_cpu_s": 0.003, "testbed.vm_boot_s": 0.05}, source="test"
    )
    if not measured:
        return base
    assert base.testbed is not None
    testbed = base.testbed.model_copy(
        update={"agent_call_cpu_s": CLIENT_S, "agent_serve_cpu_s": AGENT_S}
    )
    sources = {
        "testbed.agent_call_cpu_s": "test",
        "testbed.agent_serve_cpu_s": "test",
    }
    return base.model_copy(update={"testbed": testbed, "sources": {**base.sources, **sources}})


@pytest.mark.parametrize("cni", ["testbed-veth", "testbed-cni-bridge"])
def test_one_sandbox_pays_two_calls_per_limited_stage_and_one_per_take(cni: str) -> None:
    """Alone (no contention, no jitter) the calls add up exactly: two limited
    stages are four calls, one pooled kind one take."""
    prof = _profile()
    call_s = CLIENT_S + AGENT_S
    base = Scenario(cni=cni, sandboxes=1, profile="local", limits={"AddCNI": 4, "AttachIf": 4})
    pooled = base.replace(pools={"netns": 1})
    for scenario, calls in ((base, 4), (pooled, 5)):
        alone = simulate(scenario, profile=prof).startup.mean
        through = simulate(scenario.replace(through_agent=True), profile=prof).startup.mean
        assert through - alone == pytest.approx(calls * call_s, rel=1e-9)


def test_stages_without_a_limit_make_no_call() -> None:
    prof = _profile()
    bare = Scenario(cni="testbed-veth", sandboxes=3, profile="local")
    assert (
        simulate(bare.replace(through_agent=True), profile=prof).startup.mean
        == simulate(bare, profile=prof).startup.mean
    )


def test_the_callers_part_queues_on_the_gil() -> None:
    """Many sandboxes leasing at once: the callers' CPU is serialised on the
    GIL, so the calls cost a burst more than one sandbox's calls each."""
    prof = _profile()
    storm = Scenario(cni="testbed-veth", sandboxes=40, profile="local", limits={"AddCNI": 40})
    alone = Scenario(cni="testbed-veth", sandboxes=1, profile="local", limits={"AddCNI": 40})

    def extra(s: Scenario) -> float:
        through = simulate(s.replace(through_agent=True), profile=prof).makespan_s
        return through - simulate(s, profile=prof).makespan_s

    assert extra(storm) > 10 * extra(alone)


def test_without_measured_call_costs_the_agent_is_free() -> None:
    prof = _profile(measured=False)
    s = Scenario(cni="testbed-veth", sandboxes=2, profile="local", limits={"AddCNI": 1})
    assert (
        simulate(s.replace(through_agent=True), profile=prof).makespan_s
        == simulate(s, profile=prof).makespan_s
    )


def test_a_trace_of_before_reads_as_the_testbeds_own_admission() -> None:
    assert ScenarioFacts(sandboxes=2, cni="cni-bridge").through_agent is False


@pytest.mark.parametrize("cni", ["testbed-veth", "testbed-cni-bridge"])
def test_a_leased_stage_is_timed_from_the_lease_to_its_body_s_return(cni: str) -> None:
    """The testbed times a stage from the lease's answer to its body's
    return (``driver.Storm._stage``): the two calls are outside the span.
    Alone, without jitter, a leased stage lasts what it lasts unleased;
    before, the model put both calls in it (+2 calls: a stage limited to 1
    through an agent came 4-8x the node's)."""
    prof = _profile()
    s = Scenario(cni=cni, sandboxes=1, profile="local", limits={"Cgroup": 1, "AttachIf": 1})
    alone = simulate(s, profile=prof)
    through = simulate(s.replace(through_agent=True), profile=prof)
    for stage in ("Cgroup", "AttachIf"):
        assert through.stage_time_s[stage][0] == pytest.approx(
            alone.stage_time_s[stage][0], rel=1e-12, abs=1e-15
        )
    assert through.startup.mean - alone.startup.mean == pytest.approx(
        4 * (CLIENT_S + AGENT_S), rel=1e-9
    )


def test_the_agent_serves_one_call_at_a_time_under_its_own_gil() -> None:
    """Its HTTP loop is one thread: a burst of leases queues on the agent's
    GIL (``agent-gil``), apart from the testbed's (``gil``): where serving a
    call takes longer than making one, the calls wait for the agent."""
    base = _profile()
    assert base.testbed is not None
    serve_s = 5 * CLIENT_S
    prof = base.model_copy(
        update={"testbed": base.testbed.model_copy(update={"agent_serve_cpu_s": serve_s})}
    )
    s = Scenario(cni="testbed-veth", sandboxes=30, profile="local", limits={"AddCNI": 30})
    through = simulate(s.replace(through_agent=True), profile=prof)
    agent = through.locks["agent-gil"]
    assert agent.acquisitions == 2 * 30
    assert agent.wait_s > 0.0
    assert agent.hold_s >= 2 * 30 * serve_s * (1 - 1e-9)  # its CPU, on cores it shares
    assert "agent-gil" not in simulate(s, profile=prof).locks


def test_a_refill_worker_is_the_agent_it_calls_no_agent_and_takes_no_testbed_gil() -> None:
    """A device the agent's worker makes: the steps a start makes it with,
    with the Python under the agent's GIL and no call to the agent (the
    worker is the agent); before, it held the testbed's GIL and called
    itself over HTTP."""
    prof = _profile()
    s = Scenario(
        cni="testbed-cni-bridge",
        sandboxes=12,
        profile="local",
        pools={"netns-veth": 4},
        pool_refill={"concurrency": 1},
        through_agent=True,
        limits={"AddCNI": 2},
    )
    r = simulate(s, profile=prof)
    assert r.pools["netns-veth"].made > 0
    assert r.locks["gil"].acquisitions_by_stage.get("pool-refill", 0) == 0
    assert r.locks["agent-gil"].acquisitions_by_stage["pool-refill"] > 0
    # The starts' calls: a take each, two per limited stage; the workers' none.
    calls = s.sandboxes * (1 + 2)
    assert (
        r.locks["agent-gil"].acquisitions - calls
        == r.locks["agent-gil"].acquisitions_by_stage["pool-refill"]
    )
