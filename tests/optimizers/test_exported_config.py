"""The exported config is the one that was predicted.

Every writer of a tuned config — :meth:`OptimizeResult.tuned_config` after
:func:`optimize`, ``bootstorm optimize --output`` and ``bootstorm demo`` —
writes a config that a node takes on its own: loaded from its file and
applied to the bare storm (no pools, limits or RTNL priority of its own, as a
planner applies it to a node), it gives exactly the makespan and mean startup
stored in ``origin.predicted`` and printed by the writer. A searched storm
with pools, limits or an RTNL priority that are not searched parameters (the
demo pools every device, then searches limits) must carry them in the config.
"""

from __future__ import annotations

import io
import math
import re
from pathlib import Path

import pytest
from rich.console import Console

from bootstorm import Scenario, simulate
from bootstorm.cli import main
from bootstorm.models import TunedConfig
from bootstorm.optimizers import IntRange, OptimizeResult, SearchSpace, StudySpec, optimize

N = 40
POOLED = {"netns": N, "vport": 1, "ipvtap": N}
MIB = {"netns": 0.18, "vport": 0.3, "ipvtap": 0.3}


def _space(*, pools: dict[str, IntRange] | None = None) -> SearchSpace:
    return SearchSpace(
        cni="ipvtap",
        limits={"AddCNI": IntRange(low=1, high=N), "Cgroup": IntRange(low=1, high=N)},
        pools=pools or {},
        pool_device_mib=MIB,
    )


def _bare(scenario: Scenario) -> Scenario:
    """The storm as a node has it before any config: no pools, limits or RTNL order."""
    return scenario.replace(pools={}, limits={}, rtnl_priority={})


def _assert_reproduces(
    path: Path, bare: Scenario, *, executor: str = "compiled"
) -> dict[str, float]:
    """Apply the config file to ``bare`` and check it gives the config's own prediction."""
    config: TunedConfig = TunedConfig.from_yaml(path)
    assert config.origin is not None
    predicted: dict[str, float] = dict(config.origin.predicted)
    result = simulate(Scenario(**bare.model_dump(), config=path), executor=executor)
    assert result.makespan_s == pytest.approx(predicted["makespan_s"], rel=1e-9)
    assert result.startup.mean == pytest.approx(predicted["mean_s"], rel=1e-9)
    assert result.pool_memory_mib == pytest.approx(predicted["memory_mib"], rel=1e-9, abs=1e-12)
    return predicted


def _differs(a: float, b: float) -> bool:
    return not math.isclose(a, b, rel_tol=1e-9)


def _search(
    scenario: Scenario, space: SearchSpace, *, seeds: tuple[int, ...] = ()
) -> OptimizeResult:
    return optimize(StudySpec(scenario=scenario, space=space, trials=6, seeds=seeds))


CASES = {
    # The demo's bug: every device pooled, only limits searched.
    "pools not searched": (Scenario(sandboxes=N, pools=POOLED), _space()),
    # A limit on a stage the search leaves alone, and an RTNL grant order.
    "limit and RTNL priority not searched": (
        Scenario(sandboxes=N, limits={"NetNS": 8}, rtnl_priority={"AddCNI": 0, "NetNS": 1}),
        _space(),
    ),
    # One pool kind searched on a storm that pools two: the searched size wins.
    "a searched pool over the storm's own": (
        Scenario(sandboxes=N, pools={"netns": N, "ipvtap": N}),
        _space(pools={"ipvtap": IntRange(low=1, high=N // 2, log=False)}),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_api_tuned_config_is_complete_and_reproduces_its_prediction(
    case: str, tmp_path: Path
) -> None:
    scenario, space = CASES[case]
    result = _search(scenario, space)
    chosen = result.best[0]
    config = result.tuned_config()
    path = tmp_path / "tuned.yaml"
    path.write_text(config.to_yaml())
    bare = _bare(scenario)
    predicted = _assert_reproduces(path, bare)
    # ... on the reference executor too (what `bootstorm simulate --config` runs).
    _assert_reproduces(path, bare, executor="simpy")
    assert predicted == chosen.metrics.as_dict()  # the search ran this very storm

    # The storm's own settings under the searched values (the searched values win).
    assert config.limits == {**scenario.limits, **chosen.config.limits}
    assert config.pools == {**scenario.pools, **chosen.config.pools}
    assert config.rtnl_priority == scenario.rtnl_priority
    # What the old config (the searched values alone) gives on that node: another
    # storm, so this case tells a complete config from an incomplete one.
    partial = simulate(bare.replace(config=chosen.config), executor="compiled")
    assert _differs(partial.makespan_s, predicted["makespan_s"])


def test_a_search_over_several_storms_predicts_the_named_one(tmp_path: Path) -> None:
    """With seeds 0 and 1 the trial's metrics are a mean; the config's origin names
    one storm (its size, the scenario's seed) and predicts that one."""
    scenario = Scenario(sandboxes=N, pools=POOLED)
    result = _search(scenario, _space(), seeds=(0, 1))
    config = result.tuned_config()
    path = tmp_path / "tuned.yaml"
    path.write_text(config.to_yaml())
    predicted = _assert_reproduces(path, _bare(scenario))
    assert config.origin is not None and config.origin.sandboxes == N
    assert predicted != result.best[0].metrics.as_dict()  # not the mean over both seeds


def _predicted_line(text: str) -> tuple[str, str]:
    # The line wraps at 80 columns (a piped run): read it as one.
    joined = " ".join(text.split())
    found = re.search(r"makespan (\d+\.\d\d) s, startup mean (\d+\.\d\d) s", joined)
    assert found is not None, text
    return found.group(1), found.group(2)


def _summary(config: TunedConfig) -> str:
    limits = ", ".join(f"{k}={v}" for k, v in config.limits.items())
    pools = ", ".join(f"{k}={v}" for k, v in config.pools.items())
    return f"tuned config: limits {limits}; pools {pools}"


def test_optimize_command_writes_the_config_it_predicted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    storm = tmp_path / "storm.yaml"
    storm.write_text(
        f"cni: ipvtap\nsandboxes: {N}\n"
        f"pools: {{netns: {N}, vport: 1, ipvtap: {N}}}\n"
        "limits: {NetNS: 8}\n"
        "rtnl_priority: {AddCNI: 0, NetNS: 1}\n"
    )
    out = tmp_path / "tuned.yaml"
    main(
        [
            "optimize",
            str(storm),
            "--limit-stage",
            "AddCNI,Cgroup",
            "--pool-kind",
            "ipvtap",
            "--trials",
            "6",
            "--storage",
            "memory",
            "--output",
            str(out),
        ]
    )
    printed = capsys.readouterr().out
    predicted = _assert_reproduces(out, Scenario(sandboxes=N))
    assert _predicted_line(printed) == (
        f"{predicted['makespan_s']:.2f}",
        f"{predicted['mean_s']:.2f}",
    )

    config = TunedConfig.from_yaml(out)
    assert config.limits["NetNS"] == 8 and set(config.limits) == {"NetNS", "AddCNI", "Cgroup"}
    assert config.pools["netns"] == N and config.pools["vport"] == 1
    assert config.rtnl_priority == {"AddCNI": 0, "NetNS": 1}
    assert _summary(config) in printed
    assert "RTNL priority AddCNI=0, NetNS=1" in printed


def test_demo_writes_the_config_of_its_tuned_storm(tmp_path: Path) -> None:
    from bootstorm._cli_demo import run_demo

    buffer = io.StringIO()
    console = Console(file=buffer, width=200, force_terminal=False)
    run_demo(console, sandboxes=N, trials=5, output_dir=tmp_path, report=False)
    printed = buffer.getvalue()

    bare = Scenario(cni="ipvtap", sandboxes=N, profile="paper-000")
    predicted = _assert_reproduces(tmp_path / "tuned.yaml", bare, executor="simpy")
    _assert_reproduces(tmp_path / "tuned.yaml", bare)
    config = TunedConfig.from_yaml(tmp_path / "tuned.yaml")
    assert config.pools == POOLED  # the pools the demo searched on, not only the limits
    assert set(config.limits) == {"AddCNI", "Cgroup", "AttachIf", "StartVM"}
    assert _summary(config) in printed

    # The before/after row of the tuned storm is the prediction the file holds.
    row = next(line for line in printed.splitlines() if "pooled + tuned limits" in line)
    cells = re.split(r"\s{2,}", row.strip())  # columns are two or more spaces apart
    assert cells[1] == f"{predicted['makespan_s']:.2f}"
    assert cells[3] == f"{predicted['mean_s']:.2f}"
    # Its caution is about limits on full pools (S0-9), not limits on a storm
    # that still makes devices (S0-8): the tuned storm is the pooled one.
    after = printed.split("before / after", 1)[1]
    assert "S0-9" in after and "S0-8" not in printed
