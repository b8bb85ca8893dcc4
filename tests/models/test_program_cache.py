"""ProgramCache gives the program compile_scenario would build, array for array."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bootstorm.models import (
    ConfigError,
    ProgramCache,
    Scenario,
    compile_scenario,
    scenario_pool_kinds,
    scenario_stages,
)
from bootstorm.simulator.testing import assert_same_program

BASES = {
    "ipvtap": Scenario(cni="ipvtap", sandboxes=40, tenants=4),
    "fastiov": Scenario(cni="fastiov", sandboxes=30, profile="paper-001"),
    "veth": Scenario(cni="veth", sandboxes=30, qos_rules=2),
}


@pytest.mark.parametrize("cni", sorted(BASES))
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_cached_program_equals_a_fresh_compile(cni: str, data: st.DataObject) -> None:
    base = BASES[cni]
    n = base.sandboxes
    stages = data.draw(st.lists(st.sampled_from(scenario_stages(cni)), unique=True))
    pool_kinds = scenario_pool_kinds(cni)  # SR-IOV pools nothing
    kinds = data.draw(st.lists(st.sampled_from(pool_kinds), unique=True)) if pool_kinds else []
    cache = ProgramCache()
    # One shape, several sizes: the first compiles, the others mostly reuse it
    # (a pool drawn empty is another shape: no pool-or-create branch).
    for _ in range(4):
        limits = {s: data.draw(st.integers(1, n)) for s in stages}
        pools = {k: data.draw(st.integers(0, n)) for k in kinds}
        scenario = base.replace(limits=limits, pools=pools)
        assert_same_program(cache.compile(scenario), compile_scenario(scenario))


def test_one_compile_per_shape() -> None:
    cache = ProgramCache()
    base = BASES["ipvtap"]
    for k in (1, 5, 40):
        cache.compile(base.replace(limits={"AddCNI": k}, pools={"netns": k}))
    assert (cache.misses, cache.hits) == (1, 2)
    cache.compile(base.replace(limits={"AddCNI": 3}, pools={"netns": 0}))  # no pooled netns: new
    cache.compile(base.replace(seed=1, limits={"AddCNI": 3}, pools={"netns": 4}))  # new seed
    assert (cache.misses, cache.hits) == (3, 2)


def test_least_recently_used_shape_is_dropped() -> None:
    cache = ProgramCache(max_programs=1)
    a, b = BASES["ipvtap"], BASES["ipvtap"].replace(seed=7)
    for scenario in (a, b, a):
        cache.compile(scenario)
    assert cache.misses == 3


def test_bad_size_is_refused() -> None:
    with pytest.raises(ConfigError, match="max_programs: must be >= 1, but got 0"):
        ProgramCache(max_programs=0)
