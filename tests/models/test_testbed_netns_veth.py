"""The testbed's ``netns-veth`` pool: a namespace pooled with its veth peer inside.

Taking one is the whole endpoint: no unshare, no veth creation, no move of
the peer (``synchronize_net`` under RTNL), no rename of the host end.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest

from bootstorm import simulate
from bootstorm.calibration import trace_fit
from bootstorm.models import (
    ConfigError,
    Profile,
    ProgramCache,
    Scenario,
    compile_scenario,
    full_pools,
    scenario_pool_kinds,
)
from bootstorm.models import testbed as tb
from bootstorm.simulator import Async, Cpu, Hold, Pooled, Sleep, Step

N = 40


@pytest.fixture(scope="module")
def profile() -> Profile:
    base = trace_fit.testbed_template(cores=2, memory_mib=4096, service_cv=0.0, kworker_rtnl_ops=2)
    # A grace period the move waits out under RTNL: what pooling veth pairs costs.
    return base.with_values({"testbed.rcu_grace_s": 0.01}, source="test")


def _labels(steps: Sequence[Step], *, pool_full: bool) -> Iterator[str]:
    """Labels of the CPU work and sleeps a sandbox does: with every pool
    holding a device (``pool_full``), or with every pool empty."""
    for step in steps:
        if isinstance(step, Cpu | Sleep):
            yield step.label
        elif isinstance(step, Hold):
            yield from _labels(step.body, pool_full=pool_full)
        elif isinstance(step, Pooled):
            yield from _labels(step.fetch if pool_full else step.create, pool_full=pool_full)
        elif isinstance(step, Async):
            yield from _labels(step.steps, pool_full=pool_full)


def _stage_labels(scenario: Scenario, profile: Profile, *, pool_full: bool) -> dict[str, list[str]]:
    """Per stage, the labels along one path; a pooled step that goes on
    into the next stage starts that stage with its path's steps."""
    assert profile.testbed is not None
    plan = tb.testbed_plan(scenario, profile.testbed, variant=tb.TESTBED_CNIS[scenario.cni])
    out: dict[str, list[str]] = {}
    carried: list[str] = []
    for stage in plan:
        out[stage.name] = [*carried, *_labels(stage.steps, pool_full=pool_full)]
        going_on = [s for s in stage.steps if isinstance(s, Pooled) and s.goes_on]
        carried = [
            label
            for s in going_on
            for label in _labels(s.fetch_next if pool_full else s.create_next, pool_full=pool_full)
        ]
    return out


def test_the_kind_is_the_testbeds() -> None:
    assert "netns-veth" in tb.TESTBED_POOL_KINDS
    for cni in ("testbed-veth", "testbed-veth-moved"):
        assert "netns-veth" in scenario_pool_kinds(cni)
        assert full_pools(cni, sandboxes=7, tenants=1)["netns-veth"] == 7
    assert "netns-veth" not in scenario_pool_kinds("veth")


def test_a_taken_netns_veth_is_a_fetch_without_a_move(profile: Profile) -> None:
    scenario = Scenario(cni="testbed-veth", sandboxes=N, pools={"netns-veth": N})
    taken = _stage_labels(scenario, profile, pool_full=True)
    assert taken["NetNS"] == ["take netns+veth"]
    for labels in taken.values():
        assert not {"unshare", "veth pair", "move", "synchronize_net", "rename host end"} & set(
            labels
        )
    assert taken["AddCNI"] == [
        "netlink socket",
        "host end up",
        "host end up",
        "peer up",
        "peer up",
        "address",
        "address",
        "linkwatch/addrconf",
        "linkwatch/addrconf",
    ]
    # An empty pool: the namespace made in NetNS, the pair in AddCNI (under
    # its permit where it is limited), as the runtime makes them.
    made = _stage_labels(scenario, profile, pool_full=False)
    assert made["NetNS"][0] == "unshare" and "veth pair" not in made["NetNS"]
    assert made["AddCNI"][:2] == ["netlink socket", "veth pair"]
    moved = _stage_labels(scenario.replace(cni="testbed-veth-moved"), profile, pool_full=False)
    assert "synchronize_net" in moved["AddCNI"] and "synchronize_net" not in moved["NetNS"]


def test_a_veth_pool_moves_the_peer_and_renames(profile: Profile) -> None:
    scenario = Scenario(cni="testbed-veth", sandboxes=N, pools={"netns": N, "veth": N})
    taken = _stage_labels(scenario, profile, pool_full=True)
    assert {"move", "synchronize_net", "rename host end"} <= set(taken["AddCNI"])


def test_netns_veth_comes_first_then_the_other_pools(profile: Profile) -> None:
    """With all three kinds pooled, a sandbox takes a netns-veth; one that
    finds it empty takes a namespace and a pair from the other pools."""
    scenario = Scenario(
        cni="testbed-veth", sandboxes=N, pools={"netns-veth": 5, "netns": N, "veth": N}
    )
    assert profile.testbed is not None
    (outer,) = tb.testbed_plan(scenario, profile.testbed, variant=tb.TESTBED_CNIS["testbed-veth"])[
        0
    ].steps
    assert isinstance(outer, Pooled) and outer.pool == "netns-veth"
    inner = [s.pool for s in (*outer.create, *outer.create_next) if isinstance(s, Pooled)]
    assert inner == ["netns", "veth"]


@pytest.mark.parametrize("cni", ["testbed-veth", "testbed-veth-moved"])
def test_a_netns_veth_pooled_storm_beats_a_veth_pooled_one(profile: Profile, cni: str) -> None:
    def makespan(pools: dict[str, int]) -> float:
        scenario = Scenario(cni=cni, sandboxes=N, pools=pools)
        return float(simulate(scenario, profile=profile, executor="compiled").makespan_s)

    none = makespan({})
    veth = makespan({"netns": N, "veth": N})
    netns_veth = makespan({"netns-veth": N})
    assert netns_veth < veth
    assert netns_veth < none
    if cni == "testbed-veth":  # the in-netns peer: pooled veth pairs are slower than none
        assert veth > none
    # Half of it pooled: between the two.
    assert netns_veth < makespan({"netns-veth": N // 2}) < none
    # The same under the reference executor (SimPy).
    reference = simulate(
        Scenario(cni=cni, sandboxes=N, pools={"netns-veth": N}), profile=profile
    ).makespan_s
    assert reference == pytest.approx(netns_veth)


def test_without_a_grace_period_the_move_costs_less(profile: Profile) -> None:
    """The gap to a veth pool is mostly the grace period the move waits out."""
    no_grace = profile.with_values({"testbed.rcu_grace_s": 0.0}, source="test")

    def gap(p: Profile) -> float:
        veth, nv = (
            simulate(
                Scenario(cni="testbed-veth", sandboxes=N, pools=pools),
                profile=p,
                executor="compiled",
            ).makespan_s
            for pools in ({"netns": N, "veth": N}, {"netns-veth": N})
        )
        return float(veth - nv)

    assert gap(no_grace) < gap(profile)


def test_the_program_cache_serves_netns_veth_sizes(profile: Profile) -> None:
    cache = ProgramCache(profile=profile)
    base = Scenario(cni="testbed-veth", sandboxes=N)
    for k in (1, 10, N):
        scenario = base.replace(pools={"netns-veth": k}, limits={"AddCNI": k})
        cached = cache.compile(scenario)
        fresh = compile_scenario(scenario, profile=profile)
        assert cached.pools == fresh.pools
        assert (cached.op_kind == fresh.op_kind).all()
        assert (cached.op_amount == fresh.op_amount).all()
    assert (cache.misses, cache.hits) == (1, 2)


def test_netns_veth_is_refused_where_the_cni_has_no_such_kind() -> None:
    with pytest.raises(ConfigError, match=r"pools: unknown pool kind 'netns-veth'"):
        compile_scenario(Scenario(cni="veth", sandboxes=3, pools={"netns-veth": 3}))
