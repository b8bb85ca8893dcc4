"""The testbed's CNI runtime in the catalog (models/testbed.py ``testbed-cni-bridge``)
and its fit (calibration/trace_fit.py, plan.py).

Known answers from the catalog's own structure (the bridge plugin's netlink
requests as strace counted them), and synthetic recordings: the catalog
simulated under a known "true" profile and fitted back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence

import pytest

from bootstorm.calibration import trace_fit
from bootstorm.calibration.identify import whatif_cautions
from bootstorm.calibration.plan import PlanStorm, calibration_plan, candidate_storms
from bootstorm.models import ConfigError, Profile, Scenario, compile_scenario
from bootstorm.models import testbed as tb
from bootstorm.simulator import Async, Cpu, Hold, Pooled, Sleep, Step, run_with
from bootstorm.traces import HostFacts, Trace
from bootstorm.validation.recording import from_recording

CNI = "testbed-cni-bridge"


def _holds(steps: Sequence[Step], lock: str, *, pool_full: bool = False) -> Iterator[str]:
    for step in steps:
        if isinstance(step, Hold):
            if step.lock == lock:
                yield next(s.label for s in step.body if isinstance(s, Cpu | Sleep))
            yield from _holds(step.body, lock, pool_full=pool_full)
        elif isinstance(step, Pooled):
            yield from _holds(step.fetch if pool_full else step.create, lock, pool_full=pool_full)
        elif isinstance(step, Async):
            pass  # the kworkers' work: nobody waits for it


def _labels(steps: Sequence[Step]) -> list[str]:
    out: list[str] = []
    for step in steps:
        if isinstance(step, Cpu | Sleep):
            out.append(step.label)
        elif isinstance(step, Hold):
            out += _labels(step.body)
        elif isinstance(step, Pooled):
            out += _labels(step.create)
    return out


def _stages(truth: Profile, **scenario: object) -> dict[str, tuple[Step, ...]]:
    assert truth.testbed is not None
    plan = tb.testbed_plan(
        Scenario(cni=CNI, sandboxes=8, **scenario),  # type: ignore[arg-type]
        truth.testbed,
        variant=tb.TESTBED_CNIS[CNI],
    )
    return {s.name: s.steps for s in plan}


def test_a_bridge_add_takes_rtnl_eight_times_and_the_ipam_lock_once(truth: Profile) -> None:
    """strace of one bridge ADD (plugins 1.1.1): seven changing requests
    besides the veth pair's creation, host-local's flock once, and no move
    (the peer is made on the host directly: no synchronize_net)."""
    add = _stages(truth)["AddCNI"]
    rtnl = list(_holds(add, "rtnl"))
    assert len(rtnl) == 8 and rtnl.count("veth pair") == 1
    assert list(_holds(add, tb.IPAM_LOCK)) == ["lease"]
    assert "synchronize_net" not in _labels(add)
    assert _labels(add).count("bridge start") == 1 and "host-local start" in _labels(add)


def test_the_shim_runs_tc_four_times_and_qemu_inherits_its_cgroup(truth: Profile) -> None:
    stages = _stages(truth)
    attach = _labels(stages["AttachIf"])
    assert attach.count("exec tc") == 4 and attach.count("tc") == 4
    assert attach[:2] == ["exec shim", "shim start"]
    # One attach to the cgroup (the shim's own); QEMU forks inside it.
    assert list(_holds(stages["StartVM"], "cgroup_mutex")) == ["shim joins cgroup"]


def test_a_plumbed_namespace_skips_the_add(truth: Profile) -> None:
    full = _stages(truth, pools={"netns-veth": 8})
    assert list(_holds(full["NetNS"], "rtnl", pool_full=True)) == []
    assert "bridge start" not in _labels(full["AddCNI"])
    (pooled,) = (s for s in full["NetNS"] if isinstance(s, Pooled))
    assert _labels(pooled.fetch_next) == ["plumbed already"]
    # An empty pool falls back to the namespace in NetNS and the whole ADD
    # at the start of AddCNI, under its permit, as the runtime does.
    assert "bridge start" not in _labels(full["NetNS"])
    assert _labels(pooled.create_next).count("bridge start") == 1
    assert list(_holds(pooled.create_next, "rtnl")).count("veth pair") == 1


def test_through_an_agent_an_empty_pool_s_add_waits_for_addcni_s_lease(truth: Profile) -> None:
    """Through a node agent with AddCNI limited, a sandbox takes the lease
    (a call) when it enters AddCNI, on either path (before the empty pool's
    ADD, before the plumbed namespace's nothing), and gives it back (a call)
    at AddCNI's end: both outside AddCNI's span, as the testbed times it
    (the stage's ``admit`` and ``release``). The agent's pool take is a
    call before the pooled step, in NetNS."""
    assert truth.testbed is not None
    plan = {
        s.name: s
        for s in tb.testbed_plan(
            Scenario(
                cni=CNI,
                sandboxes=8,
                pools={"netns-veth": 8},
                limits={"AddCNI": 2},
                through_agent=True,
            ),
            truth.testbed,
            variant=tb.TESTBED_CNIS[CNI],
        )
    }
    netns = _labels(plan["NetNS"].steps)
    (pooled,) = (s for s in plan["NetNS"].steps if isinstance(s, Pooled))
    assert netns[:2] == ["agent call", "agent serves"]  # the take
    made, taken = _labels(pooled.create_next), _labels(pooled.fetch_next)
    assert made[0] == "exec bridge" and taken == ["plumbed already"]
    add = plan["AddCNI"]
    assert add.gate == "AddCNI"
    assert _labels(add.admit) == _labels(add.release) == ["agent call", "agent serves"]
    assert "agent call" not in _labels(add.steps)
    assert plan["NetNS"].admit == plan["NetNS"].release == ()  # not limited: no lease


def test_the_runtime_pools_no_veth_pairs(truth: Profile) -> None:
    with pytest.raises(ConfigError, match=r"pools: unknown pool kind 'veth'"):
        compile_scenario(Scenario(cni=CNI, sandboxes=4, pools={"veth": 4}), profile=truth)


def test_a_profile_of_thread_storms_refuses_a_cni_what_if_naming_the_cost() -> None:
    threads_only = trace_fit.testbed_template(cores=2, memory_mib=2048, service_cv=0.05)
    with pytest.raises(ConfigError, match=r"testbed\.cni_exec_cpu_s is not set.*--runtime cni"):
        compile_scenario(Scenario(cni=CNI, sandboxes=4), profile=threads_only)


def test_free_parameters_follow_the_runtimes_fitted() -> None:
    threads = {p.path for p in trace_fit.free_parameters({"threads"})}
    cni = {p.path for p in trace_fit.free_parameters({"cni"})}
    both = {p.path for p in trace_fit.free_parameters({"threads", "cni"})}
    assert "testbed.rcu_grace_s" in threads and "testbed.rcu_grace_s" not in cni
    assert "testbed.cni_exec_cpu_s" in cni and "testbed.cni_exec_cpu_s" not in threads
    assert both == threads | cni


def test_the_cni_plan_has_no_peer_storms_and_its_own_pools() -> None:
    storms = candidate_storms(sandboxes=40, runtime="cni")
    assert all(s.runtime == "cni" and s.name.startswith("cni-") for s in storms)
    assert {k for s in storms for k in s.pools} == {"netns", "netns-veth"}
    with pytest.raises(ValueError, match=r"pool_kinds: unknown kind 'veth'.*cni runtime"):
        candidate_storms(sandboxes=40, runtime="cni", pool_kinds=["veth"])
    with pytest.raises(
        ValueError,
        match=r"^peer: must be one of the peers of the cni runtime: in-netns \(got 'moved'\)$",
    ):
        PlanStorm(sandboxes=40, runtime="cni", peer="moved")
    plan = calibration_plan(sandboxes=50, runtime="cni")
    assert plan.storms[0].name == "cni-50" and plan.unseen_after == ()


def recorded(truth: Profile, storm: PlanStorm, *, seed: int = 1) -> Trace:
    """The catalog's storm under ``truth``, as the CNI runtime would record it."""
    scenario = storm.scenario()
    result = run_with(compile_scenario(scenario, seed=seed, profile=truth), "simpy", record=True)
    assert result.recording is not None
    trace = from_recording(result.recording, cni=tb.TESTBED_CNIS[CNI].recorded)
    header = trace.header.model_copy(
        update={
            "source": "testbed",
            "host": HostFacts(kernel="6.1", cores=2, memory_mib=2048),
            "config": storm.config(),
            "scenario": trace.header.scenario.model_copy(update={"pools": dict(storm.pools)}),
        }
    )
    return dataclasses.replace(trace, header=header)


@pytest.mark.slow
def test_a_fit_to_cni_storms_predicts_a_held_out_one_and_cautions_a_threads_what_if(
    truth: Profile,
) -> None:
    """Fitted to the CNI plan's storms at 30, the profile predicts a held-out
    90-sandbox pooled + limited storm; it never saw the thread harness's move,
    so a what-if of that runtime with a moved peer is cautioned by name."""
    plan = calibration_plan(sandboxes=30, runtime="cni", start=truth)
    traces = [recorded(truth, s) for s in plan.storms]
    fitted = trace_fit.fit_storms(traces, executor="compiled").profile
    held_out = Scenario(
        cni=CNI, sandboxes=90, profile="local", pools={"netns": 90}, limits={"AttachIf": 6}
    )
    true_makespan = run_with(compile_scenario(held_out, profile=truth), "compiled").makespan_s
    predicted = run_with(compile_scenario(held_out, profile=fitted), "compiled").makespan_s
    assert predicted == pytest.approx(true_makespan, rel=0.10)
    ident = fitted.identification
    assert ident is not None
    assert ident.costs["testbed.rcu_grace_s"].status == "unidentified"
    moved = Scenario(cni="testbed-veth-moved", sandboxes=30, profile="local")
    cautions = whatif_cautions(moved, profile=fitted)
    assert any("rcu_grace_s" in c.line() for c in cautions)
