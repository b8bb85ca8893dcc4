"""A search over the testbed's pools: ``netns-veth`` is a kind it may size."""

from __future__ import annotations

import pytest

from bootstorm.calibration import trace_fit
from bootstorm.models import ConfigError, Scenario, compile_scenario
from bootstorm.optimizers import IntRange, SearchSpace


def test_the_space_accepts_netns_veth_for_the_testbed() -> None:
    space = SearchSpace(
        cni="testbed-veth",
        limits={"AddCNI": IntRange(low=1, high=50)},
        pools={"netns-veth": IntRange(low=0, high=50, log=False)},
        pool_device_mib={"netns-veth": 0.0},
    )
    assert set(space.parameters) == {"limit:AddCNI", "pool:netns-veth"}
    config = space.config_of({"limit:AddCNI": 8, "pool:netns-veth": 50})
    assert config.pools == {"netns-veth": 50} and space.memory_mib(config) == 0.0


def test_the_default_space_on_a_testbed_profile_searches_every_testbed_kind() -> None:
    """A testbed profile has no seed costs: its kinds cost no memory it knows of."""
    profile = trace_fit.testbed_template(cores=2, memory_mib=4096, service_cv=0.0)
    kinds = ("netns", "veth", "netns-veth")
    space = SearchSpace.default(
        cni="testbed-veth", sandboxes=20, profile=profile, pool_kinds_searched=kinds
    )
    assert tuple(space.pools) == kinds
    assert all((r.low, r.high) == (0, 20) for r in space.pools.values())
    # Any point compiles: netns-veth is taken first, the others serve the rest.
    limits = {p: 3 for p in space.parameters if p.startswith("limit:")}
    config = space.config_of(limits | {"pool:netns": 20, "pool:veth": 4, "pool:netns-veth": 10})
    scenario = Scenario(cni="testbed-veth", sandboxes=20, limits=config.limits, pools=config.pools)
    assert [p.name for p in compile_scenario(scenario, profile=profile).pools] == [
        "netns",
        "veth",
        "netns-veth",
    ]


def test_netns_veth_is_not_a_kind_of_the_seed_cnis() -> None:
    with pytest.raises(ConfigError, match=r"device kinds of cni 'veth': .* \(got 'netns-veth'\)"):
        SearchSpace(
            cni="veth",
            pools={"netns-veth": IntRange(low=0, high=4, log=False)},
            pool_device_mib={"netns-veth": 0.0},
        )
