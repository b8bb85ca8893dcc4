"""A scenario compiled once for several seeds gives, at each seed, the program
and the result a compile at that seed alone gives, to the bit (what a fit's
seeds share: the plans flattened and checked once)."""

from __future__ import annotations

import numpy as np
import pytest

from bootstorm.models import (
    PoolRefill,
    Scenario,
    compile_scenario,
    run_scenario,
    run_scenario_seeds,
)
from bootstorm.models.compile import _compile_seeds, _refill
from bootstorm.models.profile import load_profile
from bootstorm.simulator import Program
from bootstorm.simulator.testing import assert_same_result

SEEDS = (3, 0, 11)


def _arrays(program: Program) -> dict[str, bytes]:
    ops = program.ops
    out = {
        name: getattr(ops, name).tobytes()
        for name in ("task_part", "offsets", "kind", "arg", "amount", "slot", "own_offsets")
    }
    out["own_amount"] = ops.own_amount.tobytes()
    for name in ("arrival_s", "branch_parent", "branch_kind", "spawn_base"):
        out[name] = getattr(program, name).tobytes()
    return out


SCENARIOS = {
    "ipvtap": Scenario(cni="ipvtap", sandboxes=60),
    "fastiov": Scenario(cni="fastiov", sandboxes=40, profile="paper-001"),
    "sriov-vanilla": Scenario(cni="sriov-vanilla", sandboxes=40, profile="paper-001"),
    "limits and pools": Scenario(
        cni="veth", sandboxes=50, limits={"AddCNI": 4}, pools={"netns": 20}
    ),
    "refilled, on a schedule": Scenario(
        cni="ipvtap",
        sandboxes=40,
        pools={"netns": 5},
        pool_refill=PoolRefill(concurrency=2),
        arrival_s=tuple(float(x) for x in np.linspace(0.0, 4.0, 40)),
    ),
}


@pytest.mark.parametrize("name", SCENARIOS)
def test_each_seeds_program_is_the_one_compiled_alone(name: str) -> None:
    scenario = SCENARIOS[name]
    profile = load_profile(scenario.profile)
    together = _compile_seeds(scenario, SEEDS, profile, _refill(scenario))
    for seed, program in zip(SEEDS, together, strict=True):
        alone = compile_scenario(scenario, seed=seed, profile=profile)
        assert _arrays(program) == _arrays(alone), seed
        assert program.locks == alone.locks and program.stage_names == alone.stage_names
    # They share what does not depend on the seed, which no program may change.
    assert together[1].ops.kind is together[0].ops.kind
    assert not together[1].ops.kind.flags.writeable
    assert together[1].ops.own_amount is not together[0].ops.own_amount


@pytest.mark.parametrize("name", ["ipvtap", "fastiov", "refilled, on a schedule"])
def test_each_seeds_result_is_the_one_run_alone(name: str) -> None:
    scenario = SCENARIOS[name]
    results = run_scenario_seeds(scenario, seeds=SEEDS)
    for seed, result in zip(SEEDS, results, strict=True):
        assert_same_result(run_scenario(scenario, seed=seed), result)
    assert len({r.makespan_s for r in results}) == len(SEEDS)  # the seeds differ
