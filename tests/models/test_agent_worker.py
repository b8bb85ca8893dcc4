"""The node agent's refill worker in the testbed's catalog: it makes a
device as a start that found its pool empty would, under the agent's own
GIL and with the agent's own work for it, and removes a surplus above a
target that fell, one device after another, as ``_pools.PoolManager``
does (``_trim``: a CNI DEL and the namespace's removal)."""

from __future__ import annotations

import pytest

from bootstorm import simulate
from bootstorm.calibration import trace_fit
from bootstorm.models import FollowRate, PoolRefill, Profile, Scenario
from bootstorm.models.testbed import (
    AGENT_MAKE_CPU_HERE_S,
    AGENT_REMOVE_CPU_HERE_S,
    TESTBED_CNIS,
    VETH_DELETE_CALL_S,
    agent_device_cautions,
    agent_own_make_s,
    agent_removals,
)
from bootstorm.simulator import Cpu, Hold, Sleep, Step


def _profile(**measured: float) -> Profile:
    base = trace_fit.testbed_template(
        cores=2, memory_mib=4096, service_cv=0.0, runtimes=("threads", "cni")
    )
    base = base.with_values(
        {"testbed.cni_exec_cpu_s": 0.003, "testbed.vm_boot_s": 0.05}, source="test"
    )
    assert base.testbed is not None
    return base.model_copy(update={"testbed": base.testbed.model_copy(update=measured)})


def _sums(steps: tuple[Step, ...]) -> tuple[float, float]:
    cpu = sleep = 0.0
    for step in steps:
        if isinstance(step, Cpu):
            cpu += step.work_s
        elif isinstance(step, Sleep):
            sleep += step.duration_s
        elif isinstance(step, Hold):
            c, s = _sums(step.body)
            cpu, sleep = cpu + c, sleep + s
    return cpu, sleep


def test_a_plumbed_namespace_s_removal_is_a_del_and_the_namespace_s_removal() -> None:
    """Worked from the catalog: the plugin's exec (its spawn, its start),
    the veth's deletion (its RTNL hold, the grace period's start inside it,
    the rest of the call after it), host-local's exec and lease release,
    the namespace's unmount and its loopback's unregister, and the agent's
    measured own CPU less the Python those steps price."""
    scenario = Scenario(cni="testbed-cni-bridge", sandboxes=1, profile="local")
    # Measured (4 ms of the agent's own), and not: this host's figure.
    bare = _profile(py_op_cpu_s=1e-4)  # Python small enough for the default to show
    for prof, agent_s in ((_profile(agent_remove_cpu_s=0.004), 0.004), (bare, None)):
        c = prof.testbed
        assert c is not None and c.cni_exec_cpu_s is not None and c.ipam_hold_s is not None
        assert c.spawn_cpu_s is not None
        removal = agent_removals(scenario, c, variant=TESTBED_CNIS["testbed-cni-bridge"])
        cpu, sleep = _sums(removal["netns-veth"])
        own_s = max(0.0, (agent_s or AGENT_REMOVE_CPU_HERE_S) - c.py_op_cpu_s - c.spawn_cpu_s)
        want_cpu = (
            c.spawn_cpu_s
            + 2 * c.cni_exec_cpu_s
            + c.rtnl_veth_hold_s
            + c.ipam_hold_s
            + c.py_op_cpu_s
            + c.rtnl_netns_hold_s
            + own_s
        )
        assert cpu == pytest.approx(want_cpu, rel=1e-12)
        # The deletion's call: its hold (with the grace period's start) and the wait after.
        assert sleep == pytest.approx(VETH_DELETE_CALL_S - c.rtnl_veth_hold_s, rel=1e-12)


def test_the_agent_s_own_work_is_the_profile_s_or_this_host_s_with_a_caution() -> None:
    variant = TESTBED_CNIS["testbed-cni-bridge"]
    scenario = Scenario(
        cni="testbed-cni-bridge",
        sandboxes=4,
        profile="local",
        arrival_s=(0.0, 1.0, 2.0, 3.0),
        pools={"netns-veth": 2},
        pool_refill=PoolRefill(concurrency=1),
    )
    bare, measured = _profile(), _profile(agent_make_cpu_s=0.01, agent_remove_cpu_s=0.01)
    for prof, make_s in ((bare, AGENT_MAKE_CPU_HERE_S), (measured, 0.01)):
        c = prof.testbed
        assert c is not None and c.spawn_cpu_s is not None
        steps_s = c.py_op_cpu_s + c.netns_create_cpu_s + c.rtnl_netns_hold_s + c.spawn_cpu_s
        own = agent_own_make_s(scenario, c, variant=variant)
        assert own == {"netns-veth": pytest.approx(max(0.0, make_s - steps_s))}
    (caution,) = agent_device_cautions(scenario, bare)
    assert "did not measure a node agent's own CPU" in caution
    assert agent_device_cautions(scenario, measured) == ()
    assert agent_device_cautions(scenario.replace(pool_refill=None), bare) == ()
    threads = agent_own_make_s(scenario, bare.testbed, variant=TESTBED_CNIS["testbed-veth"])  # type: ignore[arg-type]
    assert threads == {}


def test_a_target_that_falls_leaves_its_surplus_to_the_worker_who_removes_it() -> None:
    """A burst raises a rate-following target, a quiet start lowers it: the
    surplus stays ready (and memory held) until the worker removes it, one
    device after another; each removal is a DEL under RTNL in the refill
    stage. Before, the surplus went at once, for nothing."""
    burst = tuple(0.01 * i for i in range(30))
    scenario = Scenario(
        cni="testbed-cni-bridge",
        sandboxes=31,
        profile="local",
        arrival_s=(*burst, 100.0),
        pools={"netns-veth": 2},
        pool_refill=PoolRefill(
            concurrency=1, follow_rate=FollowRate(window_s=10.0, cover_s=3.0, max_devices=12)
        ),
    )
    r = simulate(scenario, profile=_profile())
    stats = r.pools["netns-veth"]
    line = r.pool_timelines["netns-veth"]
    assert stats.trimmed > 0
    # Ready devices: the first ones, those made, less those taken and removed.
    assert int(line.ready[-1]) == 2 + stats.made - stats.taken - stats.trimmed
    # The last start set the target back to its floor (2) and found more ready.
    last = max(i for i, t in enumerate(line.t_s.tolist()) if t >= 100.0)
    assert int(line.ready[last]) == 2
    assert r.branch_finish_s["pool-refill"].max() > 100.0 + VETH_DELETE_CALL_S
