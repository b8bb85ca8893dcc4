"""A scenario's ``pool_refill`` in its program: refill branches through the
same locks as the starts, targets that follow the start rate, and the
program cache that a search reuses."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bootstorm.models import (
    ConfigError,
    FollowRate,
    PoolRefill,
    Scenario,
    TunedConfig,
    compile_scenario,
    follow_rate_target,
    run_scenario,
)
from bootstorm.models.compile import ProgramCache
from bootstorm.models.refill import REFILL, follow_rate_targets, pool_targets, refill_copies
from bootstorm.simulator import OpKind
from bootstorm.simulator.testing import assert_same_program, assert_same_result


def _arrivals(n: int, span_s: float, seed: int = 1) -> tuple[float, ...]:
    return tuple(np.sort(np.random.default_rng(seed).uniform(0.0, span_s, n)).tolist())


def test_follow_rate_target_known_values() -> None:
    rule = FollowRate(window_s=60.0, cover_s=10.0, max_devices=5)
    # 12 starts a minute, 10 s of them: 2 devices; never under the floor or over the cap.
    assert follow_rate_target(starts=12, rule=rule, floor=1) == 2
    assert follow_rate_target(starts=0, rule=rule, floor=1) == 1
    assert follow_rate_target(starts=600, rule=rule, floor=1) == 5
    assert follow_rate_target(starts=600, rule=rule, floor=7) == 7
    # Exactly on a whole number: no rounding up past it.
    assert follow_rate_target(starts=6, rule=rule, floor=0) == 1


def test_pool_targets_count_starts_in_the_window() -> None:
    rule = PoolRefill(follow_rate=FollowRate(window_s=10.0, cover_s=10.0, max_devices=100))
    arrivals = (0.0, 1.0, 2.0, 15.0, 15.0, 30.0)
    targets = pool_targets(arrivals, sandboxes=6, pools={"netns": 1, "vport": 0}, refill=rule)
    # Starts in (t - 10, t], this one and those before it at the same time included.
    assert targets == {"netns": pytest.approx(np.array([1, 2, 3, 1, 2, 1]))}
    assert refill_copies(targets, arrival_s=arrivals, initial={"netns": 1}) == 2
    # Arrivals out of order: the same targets, per sandbox.
    shuffled = pool_targets(
        (15.0, 0.0, 30.0, 2.0, 1.0, 15.0), sandboxes=6, pools={"netns": 1}, refill=rule
    )
    assert shuffled["netns"].tolist() == [1, 1, 1, 3, 2, 2]
    static = pool_targets(arrivals, sandboxes=6, pools={"netns": 4}, refill=PoolRefill())
    assert static["netns"].tolist() == [4] * 6


def test_refills_take_the_locks_a_start_takes() -> None:
    """A refill worker makes a device with the steps a start that finds the
    pool empty runs: per device made, the RTNL holds that a start's own
    creation would have taken (the ipvtap device is made under RTNL)."""
    base = Scenario(cni="ipvtap", sandboxes=60, arrival_s=_arrivals(60, 30.0), pools={"ipvtap": 4})
    premade = run_scenario(base)
    refilled = run_scenario(base.replace(pool_refill=PoolRefill(concurrency=2)))
    assert premade.pools["ipvtap"].made == 0 and premade.empty_starts == 56
    made = refilled.pools["ipvtap"].made
    assert made == refilled.pools["ipvtap"].taken == 60 - refilled.empty_starts
    # Starts that made their own device did it in AddCNI; refills do it in theirs:
    # every device of the run was made under the same RTNL holds.
    unpooled = run_scenario(base.replace(pools={}))
    per_device = (unpooled.locks["rtnl"].acquisitions - premade.locks["rtnl"].acquisitions) / 4
    assert per_device > 0
    assert refilled.locks["rtnl"].acquisitions_by_stage[REFILL] == pytest.approx(made * per_device)
    assert refilled.gates[REFILL].permits == 2


def test_refill_policy_comes_with_a_config_and_compiles_the_same_through_the_cache() -> None:
    config = TunedConfig(
        pools={"netns": 2, "ipvtap": 3},
        pool_refill=PoolRefill(concurrency=3, follow_rate=FollowRate(window_s=5.0, cover_s=2.0)),
    )
    base = Scenario(cni="ipvtap", sandboxes=80, arrival_s=_arrivals(80, 20.0))
    tuned = base.replace(config=config)
    assert tuned.pool_refill == config.pool_refill
    program = compile_scenario(tuned)
    assert int(np.count_nonzero(program.op_kind == OpKind.POOL_TARGET)) == 2 * 80
    cache = ProgramCache()
    cache.compile(tuned.replace(pools={"netns": 5, "ipvtap": 1}))  # the shape, other numbers
    other = tuned.replace(
        pool_refill=PoolRefill(concurrency=1, follow_rate=FollowRate(cover_s=2.0))
    )
    assert_same_program(cache.compile(tuned), program)
    assert_same_program(cache.compile(other), compile_scenario(other))
    assert_same_result(run_scenario(tuned), run_scenario(tuned, executor="simpy"))


def test_nested_pools_refill_each_kind() -> None:
    """The testbed's netns-veth pool falls back to its netns and veth pools:
    a start may take from any of the three, so each gets a refill branch,
    and each branch makes its own kind only (a worker makes, never takes)."""
    from bootstorm.calibration import trace_fit

    profile = trace_fit.testbed_template(cores=2, memory_mib=4096, service_cv=0.0)
    scenario = Scenario(
        cni="testbed-veth",
        sandboxes=30,
        arrival_s=_arrivals(30, 5.0),
        pools={"netns-veth": 2, "netns": 2, "veth": 2},
        pool_refill=PoolRefill(concurrency=2),
    )
    program = compile_scenario(scenario, profile=profile)
    assert program.branch_names.count(REFILL) == 1
    assert program.branches_of(0) == 3  # one refill branch per kind
    refill_ops = program.op_kind[program.offsets[program.n_sandboxes] :]
    assert int(np.count_nonzero(refill_ops == OpKind.POOL_TRY)) == 0
    result = run_scenario(scenario, profile=profile)
    for kind in ("netns-veth", "netns", "veth"):
        stats = result.pools[kind]
        assert stats.made == stats.taken


def test_bad_refill_values_name_the_field() -> None:
    with pytest.raises(ConfigError, match=r"pool_refill\.concurrency"):
        TunedConfig(pool_refill={"concurrency": 0})
    with pytest.raises(ConfigError, match="window_s"):
        TunedConfig(pool_refill={"follow_rate": {"window_s": 0.5}})
    with pytest.raises(ConfigError, match=r"pool_refill\.concurrency"):
        Scenario(pool_refill={"concurrency": True})


@pytest.mark.parametrize(
    ("targets", "arrivals", "initial", "copies"),
    [
        ({"netns": [3, 3, 3], "ipvtap": [2, 2, 2]}, [0, 1, 2], {"netns": 3, "ipvtap": 2}, 1),
        ({"netns": [5, 5, 5]}, [0, 1, 2], {"netns": 3}, 3),  # the first start raises it by 2
        ({"netns": [3, 4, 6, 2]}, [0, 1, 2, 3], {"netns": 3}, 3),  # 4 -> 6 at the third start
        ({"netns": [3, 6, 4, 2]}, [0, 2, 1, 3], {"netns": 3}, 3),  # the same, listed out of order
        ({"netns": []}, [], {"netns": 3}, 1),
    ],
)
def test_refill_copies_count_the_largest_rise(
    targets: dict[str, list[int]], arrivals: list[float], initial: dict[str, int], copies: int
) -> None:
    """One turn for the taken device plus the largest rise of a target at one
    start, in time order; static targets (the pools' sizes) rise nowhere."""
    arrays = {k: np.array(v, dtype=np.int64) for k, v in targets.items()}
    assert refill_copies(arrays, arrival_s=arrivals, initial=initial) == copies


@settings(max_examples=150, deadline=None)
@given(
    arrivals=st.lists(st.integers(0, 30).map(lambda k: k * 0.5), min_size=1, max_size=60),
    window=st.sampled_from([1.0, 1.5, 4.0, 100.0]),
    floor=st.integers(1, 5),
)
def test_following_targets_as_by_the_rule_per_start(
    arrivals: list[float], window: float, floor: int
) -> None:
    """Each start's target is the rule applied to the starts in its window
    (itself and the starts before it at its time included, in start order)."""
    rule = PoolRefill(follow_rate=FollowRate(window_s=window, cover_s=2.0))
    got = pool_targets(arrivals, sandboxes=len(arrivals), pools={"netns": floor}, refill=rule)
    order = sorted(range(len(arrivals)), key=lambda i: (arrivals[i], i))
    want = np.empty(len(arrivals), dtype=np.int64)
    for rank, i in enumerate(order):
        starts = sum(1 for j in order[: rank + 1] if arrivals[j] > arrivals[i] - window)
        want[i] = follow_rate_target(starts=starts, rule=rule.follow_rate, floor=floor)
    assert got["netns"].dtype == want.dtype and got["netns"].tolist() == want.tolist()


@settings(max_examples=200, deadline=None)
@given(
    window_s=st.floats(min_value=1.0, max_value=3600.0),
    cover_s=st.floats(min_value=0.0, max_value=3600.0),
    max_devices=st.integers(min_value=0, max_value=1000),
    floor=st.integers(min_value=0, max_value=1000),
    starts=st.lists(st.integers(min_value=1, max_value=2_000_000), min_size=1, max_size=50),
)
def test_the_rule_on_arrays_is_the_agents_rule_on_each_count(
    window_s: float, cover_s: float, max_devices: int, floor: int, starts: list[int]
) -> None:
    """The model's targets per count are what the agent's scalar rule gives."""
    rule = FollowRate(window_s=window_s, cover_s=cover_s, max_devices=max_devices)
    got = follow_rate_targets(np.array(starts, dtype=np.int64), rule=rule, floor=floor)
    assert got.tolist() == [follow_rate_target(starts=n, rule=rule, floor=floor) for n in starts]


@pytest.mark.parametrize(
    ("build", "line"),
    [
        (
            lambda: PoolRefill(concurrency=0),
            "pool_refill.concurrency: Input should be greater than or equal to 1 (got 0)",
        ),
        (
            lambda: FollowRate(window_s=0),
            "follow_rate.window_s: Input should be greater than or equal to 1 (got 0)",
        ),
        (lambda: PoolRefill(workers=2), "pool_refill.workers: unknown field"),
    ],
)
def test_a_policy_built_by_hand_is_refused_in_one_line(build: object, line: str) -> None:
    # A notebook's PoolRefill(concurrency=0) raised pydantic's block of lines
    # (a ValidationError, its type and a URL), not the line a config file gets.
    with pytest.raises(ConfigError) as exc:
        build()  # type: ignore[operator]
    assert str(exc.value) == line


@pytest.mark.parametrize(
    ("refill", "line"),
    [
        (
            {"concurrency": 0},
            "config: pool_refill.concurrency: Input should be greater than or equal to 1 (got 0)",
        ),
        (
            {"follow_rate": {"window_s": 0}},
            "config: pool_refill.follow_rate.window_s: Input should be greater than or equal "
            "to 1 (got 0)",
        ),
    ],
)
def test_a_config_s_nested_policy_still_names_its_path(refill: object, line: str) -> None:
    with pytest.raises(ConfigError) as exc:
        TunedConfig(pool_refill=refill)
    assert str(exc.value) == line
