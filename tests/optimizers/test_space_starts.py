"""A search space's point of a config (``params_of``), the limits a
workload's search leaves out (``unbound_limit``), and the configs a study
tries first (``StudySpec.starts_from``)."""

from __future__ import annotations

import dataclasses

from bootstorm.models import FollowRate, PoolRefill, Scenario, TunedConfig
from bootstorm.optimizers import IntRange, RefillSpace, SearchSpace, StudySpec, optimize


def _space(**kw: object) -> SearchSpace:
    return SearchSpace(
        cni="ipvtap",
        limits={"AddCNI": IntRange(low=1, high=50), "StartVM": IntRange(low=1, high=50)},
        pools={"netns": IntRange(low=1, high=40, log=True)},
        pool_device_mib={"netns": 0.5},
        refill=RefillSpace(),
        **kw,  # type: ignore[arg-type]
    )


def test_params_of_is_the_inverse_of_config_of_within_the_ranges() -> None:
    space = _space()
    config = TunedConfig(
        limits={"AddCNI": 7, "StartVM": 50},
        pools={"netns": 12},
        pool_refill=PoolRefill(
            concurrency=3, follow_rate=FollowRate(window_s=60.0, cover_s=9.0, max_devices=40)
        ),
    )
    assert space.config_of(space.params_of(config)) == config


def test_params_of_clamps_what_the_space_cannot_hold() -> None:
    space = _space()
    params = space.params_of(TunedConfig(pools={"netns": 500}))
    assert params["pool:netns"] == 40  # the range's top
    assert params["limit:AddCNI"] == 50  # not set: no limit, the high end
    assert params["refill:workers"] == 1 and params["refill:follow"] == 0


def test_a_limit_at_the_unbound_size_is_left_out_of_the_config() -> None:
    space = _space(unbound_limit=50)
    params = space.params_of(TunedConfig(limits={"AddCNI": 7}, pools={"netns": 3}))
    config = space.config_of(params)
    assert config.limits == {"AddCNI": 7}  # StartVM at 50 binds nothing: not written
    assert _space().config_of(params).limits == {"AddCNI": 7, "StartVM": 50}


def test_a_study_tries_its_starting_configs_right_after_the_storm_as_it_is() -> None:
    base = Scenario(cni="ipvtap", sandboxes=30, profile="paper-000")
    space = dataclasses.replace(_space(), refill=None)
    start = TunedConfig(limits={"AddCNI": 3}, pools={"netns": 20})
    spec = StudySpec(scenario=base, space=space, trials=4, sampler="random", starts_from=(start,))
    result = optimize(spec)
    assert result.study is not None
    first, second = result.study.trials[:2]
    assert first.params == spec.baseline_params()
    assert second.params == space.params_of(start)
    assert space.config_of(second.params).pools == start.pools
