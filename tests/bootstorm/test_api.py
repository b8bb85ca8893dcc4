"""The Python API notebooks use: the same objects as the CLI."""

from __future__ import annotations

import numpy as np
import pytest

from bootstorm import ConfigError, Scenario, simulate


def test_same_scenario_and_seed_same_result_bit_for_bit() -> None:
    s = Scenario(cni="veth", sandboxes=60)
    a, b = simulate(s, seed=7), simulate(s, seed=7)
    assert a.to_json() == b.to_json()
    assert np.array_equal(a.finish_s, b.finish_s)
    c = simulate(s, seed=8)
    assert c.makespan_s != a.makespan_s  # the seed reaches the service times


def test_scenario_seed_is_the_default() -> None:
    s = Scenario(cni="ipvtap", sandboxes=30, seed=3)
    assert simulate(s).to_json() == simulate(s, seed=3).to_json()


def test_spans_as_dataframe() -> None:
    r = simulate(Scenario(cni="ipvtap", sandboxes=20), record=True)
    frame = r.spans()
    assert len(frame) == 20 * 5
    assert set(frame.columns) >= {"sandbox", "stage", "begin_s", "end_s", "duration_s"}
    assert (frame.duration_s >= 0).all()
    # the stage means in the result are the frame's means
    for stage, mean in frame.groupby("stage").duration_s.mean().items():
        assert r.stages[stage].mean_s == pytest.approx(mean)
    with pytest.raises(ValueError, match="record=True"):
        simulate(Scenario(cni="ipvtap", sandboxes=5)).spans()


def test_result_fields() -> None:
    r = simulate(Scenario(cni="ipvtap", sandboxes=50))
    assert r.makespan_s == pytest.approx(r.finish_s.max())
    assert r.startup.p50 <= r.startup.p99 <= r.makespan_s
    assert r.cpu.busy_core_s == pytest.approx(
        r.cpu.work_core_s + r.cpu.spin_core_s + r.cpu.zero_core_s
    )
    assert r.locks["rtnl"].acquisitions == sum(r.locks["rtnl"].acquisitions_by_stage.values())


def test_keyword_only_and_validated() -> None:
    with pytest.raises(TypeError):
        Scenario("ipvtap")  # type: ignore[misc]
    with pytest.raises(ConfigError, match="sandboxes"):
        Scenario(sandboxes=0)


def test_compare_tabulates_each_what_if_with_its_known_misses() -> None:
    from bootstorm import compare

    base = Scenario(cni="ipvtap", sandboxes=30)
    table, results = compare({"ipvtap": base, "veth + QoS": base.replace(cni="veth", qos_rules=2)})
    assert list(table.index) == ["ipvtap", "veth + QoS"]
    assert table.loc["veth + QoS", "makespan_s"] == results["veth + QoS"].makespan_s
    assert list(table["caveats"]) == ["", "S0-11,S0-5"]


def test_dataplane_sweep_names_the_known_misses_of_each_load() -> None:
    from bootstorm import dataplane_sweep

    frame = dataplane_sweep("paper-002", "bridge-intra", [1, 48])
    assert frame.loc[48, "aggregate_gbps"] > frame.loc[1, "aggregate_gbps"]
    assert list(frame["caveats"]) == ["", "S2-2"]  # one flow has no spread to miss


def test_the_default_executor_is_the_compiled_one_unless_the_run_records(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The CLI ran compiled and the API SimPy (~30x slower per event): a
    notebook's what-if took seconds where the same command took a blink."""
    import bootstorm._api as api

    used: list[str] = []
    real = api.run_with

    def spy(program: object, executor: str, **kwargs: object) -> object:
        used.append(executor)
        return real(program, executor, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(api, "run_with", spy)
    s = Scenario(cni="veth", sandboxes=20)
    plain, recorded = simulate(s), simulate(s, record=True)
    assert used == ["compiled", "simpy"]
    assert plain.makespan_s == pytest.approx(recorded.makespan_s, rel=1e-9)


def test_a_profile_by_name_is_taken_and_a_wrong_argument_is_one_line() -> None:
    """``simulate(S, profile="paper-000")`` was an AttributeError deep in the
    compile; a seed of "1", 1.5 or True a TypeError from numpy, or taken."""
    scenario = Scenario(sandboxes=10)
    assert simulate(scenario, profile="paper-000").makespan_s == simulate(scenario).makespan_s
    for kwargs, needle in (
        ({"profile": 3}, "profile: expected a Profile, a profile's name or a YAML path"),
        ({"seed": "1"}, "seed: expected None, an int in 0..2**63-1 or a numpy Generator"),
        ({"seed": 1.5}, "but got 1.5"),
        ({"seed": True}, "but got True"),
        ({"seed": 2**64}, "but got 18446744073709551616"),
    ):
        with pytest.raises(ConfigError) as info:
            simulate(scenario, **kwargs)  # type: ignore[arg-type]
        assert needle in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(ConfigError, match=r"^scenario: expected a Scenario"):
        simulate(None)  # type: ignore[arg-type]


def _one_line(call: object) -> str:
    with pytest.raises(ConfigError) as info:
        call()  # type: ignore[operator]
    text = str(info.value)
    assert "\n" not in text, text
    return text


def test_the_public_entry_points_refuse_a_wrong_type_in_one_line() -> None:
    """A notebook's slips were a KeyError from pandas (``compare({})``), an
    AttributeError (``recorded_trace(None)``, ``StudySpec(scenario=None)``)
    or a TypeError (``SweepGrid(sandboxes=5)``, ``workload(node_share="0.5")``)
    deep inside; each is now a line naming the argument and what it got."""
    from bootstorm import StudySpec, compare, dataplane_sweep, recorded_trace
    from bootstorm.optimizers import SweepGrid
    from bootstorm.workflows import workload

    s = Scenario(sandboxes=10)
    cases = [
        (lambda: compare({}), "scenarios: expected a mapping of labels to Scenarios, at least one"),
        (lambda: compare([s]), "scenarios: expected a mapping of labels to Scenarios"),
        (lambda: compare({1: s}), "scenarios: a label must be a str, but got 1"),
        (lambda: compare({"a": None}), "scenarios['a']: scenario: expected a Scenario"),
        (lambda: dataplane_sweep("paper-002", "bridge-intra", []), "flows: expected flow counts"),
        (lambda: dataplane_sweep("paper-002", "bridge-intra", 4), "flows: expected flow counts"),
        (lambda: dataplane_sweep(None, "bridge-intra", [1]), "profile: expected a Profile"),
        (lambda: recorded_trace(None), "name: expected a recorded trace's name (str), but got"),
        (lambda: StudySpec(scenario=None), "scenario: must be a Scenario (got a NoneType: None)"),
        (lambda: StudySpec(scenario=s, sizes=200), "sizes: must be a tuple of sandbox counts"),
        (lambda: StudySpec(scenario=s, seeds=(1, "2")), "seeds[1]: must be an integer"),
        (lambda: SweepGrid(sandboxes=5), "sandboxes: must be a tuple of sandbox counts"),
        (lambda: SweepGrid(base=None), "base: must be a Scenario"),
        (lambda: SweepGrid(cnis="veth"), "cnis: must be a tuple of CNI names"),
        (lambda: workload(node_share="0.5"), "node_share: must be a number (got a str: '0.5')"),
        (lambda: workload(window=(0, "9")), "window: must be (begin_s, end_s), two numbers"),
        (lambda: workload(seed=1.5), "seed: must be an int (got a float: 1.5)"),
        (lambda: workload(trace=3), "trace: must be a path (got an int: 3)"),
    ]
    for call, start in cases:
        assert _one_line(call).startswith(start), (start, _one_line(call))
    # What was taken stays taken: a range of flows, numpy ints, a list of sizes.
    assert list(dataplane_sweep("paper-002", "bridge-intra", range(1, 3)).index) == [1, 2]
    assert list(dataplane_sweep("paper-002", "bridge-intra", np.array([1, 2])).index) == [1, 2]
