"""Search spaces are validated when built; errors name the field and the value."""

from __future__ import annotations

import pickle

import pytest

from bootstorm.models import ConfigError, load_profile
from bootstorm.optimizers import DEFAULT_STAGES, IntRange, SearchSpace


def test_range_refuses_low_above_high() -> None:
    with pytest.raises(ConfigError, match=r"^high: must be >= low=5 \(got 2\)$"):
        IntRange(low=5, high=2)


def test_log_range_refuses_zero() -> None:
    with pytest.raises(ConfigError, match=r"^low: must be >= 1 on a log scale.*\(got 0\)$"):
        IntRange(low=0, high=4)


def test_unknown_stage_names_the_stage_and_the_cni() -> None:
    with pytest.raises(
        ConfigError,
        match=r"^limits: each key must be one of the stages of cni 'ipvtap': .* \(got 'Boot'\)$",
    ):
        SearchSpace(cni="ipvtap", limits={"Boot": IntRange(low=1, high=4)})


def test_unknown_pool_kind_is_refused() -> None:
    with pytest.raises(
        ConfigError,
        match=r"^pools: each key must be one of the device kinds of cni 'ipvtap': .* "
        r"\(got 'veth'\)$",
    ):
        SearchSpace(
            cni="ipvtap",
            pools={"veth": IntRange(low=0, high=4, log=False)},
            pool_device_mib={"veth": 1.0},
        )


def test_empty_space_is_refused() -> None:
    with pytest.raises(
        ConfigError, match=r"^limits: must not be empty with no pools .* \(got \{\}\)$"
    ):
        SearchSpace(cni="ipvtap")


def test_default_space_is_seed_000s_four_stages() -> None:
    space = SearchSpace.default(cni="ipvtap", sandboxes=400, profile=load_profile("paper-000"))
    assert tuple(space.limits) == DEFAULT_STAGES
    assert all((r.low, r.high) == (1, 400) for r in space.limits.values())
    # no-network has no AddCNI or AttachIf: the default keeps the stages it has.
    none = SearchSpace.default(cni="no-network", sandboxes=10, profile=load_profile("paper-000"))
    assert tuple(none.limits) == ("Cgroup", "StartVM")


def test_config_and_memory_of_a_point() -> None:
    space = SearchSpace.default(
        cni="ipvtap",
        sandboxes=400,
        profile=load_profile("paper-000"),
        stages=("Cgroup",),
        pool_kinds_searched=("netns", "ipvtap"),
    )
    assert set(space.parameters) == {"limit:Cgroup", "pool:netns", "pool:ipvtap"}
    config = space.config_of({"limit:Cgroup": 40, "pool:netns": 400, "pool:ipvtap": 0})
    assert config.limits == {"Cgroup": 40}
    assert config.pools == {"netns": 400}  # an empty pool is no pool
    assert space.memory_mib(config) == pytest.approx(400 * 0.18)


def test_space_is_frozen_and_pickles() -> None:
    limits = {"Cgroup": IntRange(low=1, high=4)}
    space = SearchSpace(cni="ipvtap", limits=limits)
    limits["StartVM"] = IntRange(low=1, high=4)  # the caller's dict is not the space's
    assert set(space.limits) == {"Cgroup"}
    with pytest.raises(AttributeError):
        space.cni = "veth"  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(space)) == space


def test_a_search_of_a_storm_past_a_configs_bounds_writes_configs_a_node_accepts() -> None:
    """A million-sandbox what-if is searched with limits and pools a TunedConfig
    (and so a node agent) accepts: its ranges stop at the config's bounds."""
    from bootstorm.models.tuned import MAX_LIMIT, MAX_POOL_SIZE

    space = SearchSpace.default(
        cni="ipvtap",
        sandboxes=1_000_000,
        profile=load_profile("paper-000"),
        pool_kinds_searched=("ipvtap",),
    )
    assert {r.high for r in space.limits.values()} == {MAX_LIMIT}
    assert space.pools["ipvtap"].high == MAX_POOL_SIZE
    top = {name: r.high for name, r in space.parameters.items()}
    config = space.config_of(top)  # refused before: limits of 1 000 000
    assert set(config.limits.values()) == {MAX_LIMIT}
