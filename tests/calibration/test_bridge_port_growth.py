"""A sandbox's start grows with the ports already on the bridge (the testbed
keeps every sandbox's port to its teardown): the bridge plugin's enslave
walks the bridge's ports under RTNL, and what a new link first sends is
flooded to every port and received in each port's namespace. ``measure-ops``
measures both with many ports held against none (``bridge_enslave_held``,
:class:`~bootstorm.traces.operations.BridgeFlood`); they become
``testbed.enslave_per_port_s`` and ``testbed.flood_per_port_cpu_s``, kept
as measured by a fit, and the CNI bridge's sandbox ``i`` pays them ``i``
times."""

from __future__ import annotations

import json

import numpy as np
import pytest
from ops_times import assert_rounds_checked, operation_times
from testbed_scenarios import one_at_a_time

from bootstorm import simulate
from bootstorm.calibration import trace_fit
from bootstorm.calibration.measured_ops import GROWTH_PATHS, testbed_costs_from
from bootstorm.models import Profile, Scenario
from bootstorm.traces.operations import BridgeFlood, OperationTimes

PORTS = 400
PER_PORT_S = 1.2e-6
FLOOD_PER_PORT_S = 12e-6
LINKS = 30


def _flood(per_round_s: tuple[float, ...] = (10e-6, 12e-6, 20e-6)) -> BridgeFlood:
    """Rounds whose CPU per link per port is exactly ``per_round_s``: the
    loaded bridge's extra work over the empty one's, idle windows apart."""
    n = len(per_round_s)
    return BridgeFlood(
        ports=PORTS,
        new_links=LINKS,
        window_s=8.0,
        loaded_busy_s=tuple(0.5 + x * LINKS * PORTS for x in per_round_s),
        loaded_idle_s=(0.1,) * n,
        empty_busy_s=(0.45,) * n,
        empty_idle_s=(0.05,) * n,
    )


def _times(**fields: object) -> OperationTimes:
    return operation_times(
        {
            "bridge_enslave": (0.6e-3,) * 3,
            "bridge_enslave_held": (0.6e-3 + PORTS * PER_PORT_S,) * 3,
        },
        held_ports=PORTS,
        **fields,
    )


def test_the_enslave_grows_by_the_held_less_alone_over_the_ports() -> None:
    growth = testbed_costs_from(_times())["testbed.enslave_per_port_s"]
    assert growth.value == pytest.approx(PER_PORT_S)
    assert f"{PORTS} sandbox ports" in growth.how


def test_the_flood_per_port_is_the_median_round_of_loaded_less_empty() -> None:
    flood = _flood()
    assert flood.per_round_s == pytest.approx((10e-6, 12e-6, 20e-6))
    cost = testbed_costs_from(_times(bridge_flood=flood))["testbed.flood_per_port_cpu_s"]
    assert cost.value == pytest.approx(12e-6)
    assert cost.low == pytest.approx(11e-6) and cost.high == pytest.approx(16e-6)
    assert f"{PORTS} ports" in cost.how


def test_a_flood_lost_in_noise_is_zero_not_negative() -> None:
    cost = testbed_costs_from(_times(bridge_flood=_flood((-3e-6, -1e-6, 2e-6))))
    flood = cost["testbed.flood_per_port_cpu_s"]
    assert flood.value == 0.0 and flood.low == 0.0 and "clipped at 0 s" in flood.how


def test_the_file_keeps_ports_and_flood_and_names_a_bad_field() -> None:
    times = _times(bridge_flood=_flood())
    back = OperationTimes.from_json(times.to_json())
    assert back.held_ports == PORTS and back.bridge_flood == times.bridge_flood
    data = json.loads(times.to_json())
    del data["held_ports"]
    with pytest.raises(ValueError, match="held_ports") as err:
        OperationTimes.from_json(json.dumps(data))
    assert "\n" not in str(err.value)
    assert_rounds_checked(times, "bridge_flood", "empty_idle_s", 0.05)
    data = json.loads(times.to_json())
    data["bridge_flood"]["ports"] = 2_000
    with pytest.raises(ValueError, match=r"ports.*2000"):
        OperationTimes.from_json(json.dumps(data))


def test_a_file_of_before_reads_with_neither() -> None:
    times = operation_times({"ipam_add": (2e-3,) * 3})
    back = OperationTimes.from_json(times.to_json())
    assert back.held_ports == 0 and back.bridge_flood is None
    assert "held_ports" not in times.to_json() and "bridge_flood" not in times.to_json()


def test_a_fit_keeps_both_as_measured_with_their_sources() -> None:
    costs = testbed_costs_from(_times(bridge_flood=_flood()))
    profile = trace_fit.testbed_template(
        cores=2, memory_mib=4096, service_cv=0.0, runtimes=("cni",), measured=costs
    )
    assert profile.testbed is not None
    assert profile.testbed.enslave_per_port_s == pytest.approx(PER_PORT_S)
    assert profile.testbed.flood_per_port_cpu_s == pytest.approx(12e-6)
    for path in GROWTH_PATHS[1:]:
        assert profile.sources[path].startswith("measured alone")


def _profile(*, enslave_s: float | None, flood_s: float | None) -> Profile:
    base = trace_fit.testbed_template(cores=2, memory_mib=4096, service_cv=0.0, runtimes=("cni",))
    base = base.with_values({"testbed.cni_exec_cpu_s": 0.003}, source="test")
    assert base.testbed is not None
    testbed = base.testbed.model_copy(
        update={"enslave_per_port_s": enslave_s, "flood_per_port_cpu_s": flood_s}
    )
    sources = {**base.sources, **dict.fromkeys(GROWTH_PATHS[1:], "test")}
    return base.model_copy(update={"testbed": testbed, "sources": sources})


N = 6
#: Sandboxes one at a time: nothing contends, so each growth shows exactly.
ALONE = one_at_a_time(N)


@pytest.mark.parametrize("executor", ["compiled", "simpy"])
def test_sandbox_i_holds_rtnl_i_ports_longer_to_enslave(executor: str) -> None:
    flat = simulate(ALONE, profile=_profile(enslave_s=None, flood_s=None), executor=executor)
    grown = simulate(ALONE, profile=_profile(enslave_s=1e-3, flood_s=None), executor=executor)
    extra = np.asarray(grown.startup_latency_s) - np.asarray(flat.startup_latency_s)
    assert extra == pytest.approx(1e-3 * np.arange(N), abs=1e-12)
    rtnl = grown.locks["rtnl"].hold_s - flat.locks["rtnl"].hold_s
    assert rtnl == pytest.approx(1e-3 * N * (N - 1) / 2)


@pytest.mark.parametrize("executor", ["compiled", "simpy"])
def test_sandbox_i_floods_i_ports_off_its_own_path(executor: str) -> None:
    """The flood is softirq work nobody waits for: the host does ``i``
    ports' worth for sandbox ``i``, and no start takes longer for it here."""
    flat = simulate(ALONE, profile=_profile(enslave_s=None, flood_s=None), executor=executor)
    flood = simulate(ALONE, profile=_profile(enslave_s=None, flood_s=1e-3), executor=executor)
    assert flood.cpu.busy_core_s - flat.cpu.busy_core_s == pytest.approx(1e-3 * N * (N - 1) / 2)
    assert flood.startup_latency_s == pytest.approx(flat.startup_latency_s, abs=1e-12)


def test_only_the_bridge_floods_its_ports() -> None:
    prof = _profile(enslave_s=1e-3, flood_s=1e-3)
    flat = _profile(enslave_s=None, flood_s=None)
    ptp = ALONE.replace(cni="testbed-cni-ptp")
    grown, plain = simulate(ptp, profile=prof), simulate(ptp, profile=flat)
    assert grown.cpu.busy_core_s == pytest.approx(plain.cpu.busy_core_s, abs=1e-12)
    assert grown.startup_latency_s == pytest.approx(plain.startup_latency_s, abs=1e-12)


def test_past_a_bridge_a_what_if_says_the_ports_growth_is_the_testbeds() -> None:
    from bootstorm.models.testbed import TESTBED_BRIDGE_PORTS, growth_cautions

    prof = _profile(enslave_s=1e-6, flood_s=12e-6)
    big = Scenario(cni="testbed-cni-bridge", sandboxes=TESTBED_BRIDGE_PORTS + 1, profile="local")
    (line,) = growth_cautions(big, prof)
    assert "floods a new link's first packets" in line and "12 µs of CPU" in line
    assert "not a node's" in line and "host-local" not in line
    assert growth_cautions(big.replace(sandboxes=TESTBED_BRIDGE_PORTS), prof) == ()
    # ptp has no bridge: nothing of it grows with the ports.
    assert growth_cautions(big.replace(cni="testbed-cni-ptp"), prof) == ()


def test_every_executor_runs_a_burst_with_the_ports_growth_to_the_bit() -> None:
    """The growths in a contended burst (20 at once, a netns-veth pool of 5
    whose empty-pool path makes the ADD): the reference and the compiled
    loop agree on every figure."""
    from bootstorm.models import compile_scenario
    from bootstorm.simulator import make_executor, run_program

    burst = Scenario(
        cni="testbed-cni-bridge", sandboxes=20, profile="local", pools={"netns-veth": 5}
    )
    busy = {}
    for name, prof in (
        ("grown", _profile(enslave_s=2e-4, flood_s=1e-3)),
        ("flat", _profile(enslave_s=None, flood_s=None)),
    ):
        program = compile_scenario(burst, profile=prof)
        ref, fast = run_program(program), make_executor("compiled").run(program)
        mine = {k: v for k, v in ref.to_dict().items() if k != "events"}
        assert mine == {k: v for k, v in fast.to_dict().items() if k != "events"}
        assert np.array_equal(ref.finish_s, fast.finish_s)
        busy[name] = ref.cpu.busy_core_s
    assert busy["grown"] > busy["flat"]
