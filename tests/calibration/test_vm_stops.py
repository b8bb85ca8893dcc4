"""A sandbox's VM stops during a storm (``testbed run --lifetime-s``): its
VMM and shim exit and its tap goes under RTNL, on the CPU and the lock the
starts still running share. The testbed times what a stop costs alone after
each storm (the trace header's ``vm_stops``), a fit keeps it as measured
(``testbed.vm_stop_cpu_s``), and a scenario with ``lifetime_s`` runs each
VM's stop that long after it came up, as a branch nobody waits for."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from testbed_scenarios import one_at_a_time

from bootstorm import simulate
from bootstorm.calibration import trace_fit
from bootstorm.calibration.trace_fit import StormStats
from bootstorm.models import ConfigError, Profile, Scenario, compile_scenario
from bootstorm.models.testbed import STOP_RTNL_SLEEP_S
from bootstorm.simulator import make_executor, run_program
from bootstorm.traces import Trace, VmStops, read_trace, write_trace

DATA = Path(__file__).resolve().parents[2] / "traces" / "data"
RECORDED = DATA / "testbed-veth-qemu-25-netns-pool.jsonl.gz"

STOP_CPU_S = 5e-3
LIFETIME_S = 2.0
N = 6
#: Sandboxes one at a time, each stopped long before the next arrives:
#: nothing contends, so the stop's cost shows exactly.
ALONE = one_at_a_time(N, lifetime_s=LIFETIME_S)


def _profile(*, stop_cpu_s: float | None) -> Profile:
    base = trace_fit.testbed_template(
        cores=2,
        memory_mib=4096,
        service_cv=0.0,
        runtimes=("cni", "threads"),
        vm_stop_cpu_s=() if stop_cpu_s is None else (stop_cpu_s,),
    )
    return base.with_values({"testbed.cni_exec_cpu_s": 0.003}, source="test")


@pytest.mark.parametrize("executor", ["compiled", "simpy"])
@pytest.mark.parametrize("cni", ["testbed-cni-bridge", "testbed-veth"])
def test_a_stop_costs_its_measured_cpu_a_lifetime_after_the_vm_came_up(
    executor: str, cni: str
) -> None:
    prof = _profile(stop_cpu_s=STOP_CPU_S)
    assert prof.testbed is not None
    c = prof.testbed
    stopping = ALONE.replace(cni=cni)
    up = simulate(stopping.replace(lifetime_s=None), profile=prof, executor=executor)
    stops = simulate(stopping, profile=prof, executor=executor)
    # Every stop's CPU, all of it measured: the exits' and the tap's hold.
    assert stops.cpu.busy_core_s - up.cpu.busy_core_s == pytest.approx(N * STOP_CPU_S, rel=1e-9)
    # Nobody waits for a stop: each start takes as long as without it.
    assert stops.startup_latency_s == pytest.approx(up.startup_latency_s, abs=1e-12)
    # The stop ends a lifetime after the VM came up, once its exits ran and
    # the tap's unregister (synchronize_net inside it) held RTNL.
    done = stops.branch_finish_s["stop"] - stops.arrival_s - stops.startup_latency_s
    assert done == pytest.approx(LIFETIME_S + STOP_CPU_S + STOP_RTNL_SLEEP_S, abs=1e-9)
    rtnl = stops.locks["rtnl"].hold_s - up.locks["rtnl"].hold_s
    assert rtnl == pytest.approx(N * (c.rtnl_tap_hold_s + STOP_RTNL_SLEEP_S), rel=1e-9)


def test_a_stop_not_measured_costs_only_the_taps_hold() -> None:
    prof = _profile(stop_cpu_s=None)
    assert prof.testbed is not None and prof.testbed.vm_stop_cpu_s is None
    up = simulate(ALONE.replace(lifetime_s=None), profile=prof)
    stops = simulate(ALONE, profile=prof)
    extra = stops.cpu.busy_core_s - up.cpu.busy_core_s
    assert extra == pytest.approx(N * prof.testbed.rtnl_tap_hold_s, rel=1e-9)


def test_without_a_lifetime_the_stop_cost_changes_nothing() -> None:
    """The storms of before (VMs up to the end) compile to the same program
    whether the profile knows a stop's cost or not: no stop branch."""
    burst = Scenario(cni="testbed-cni-bridge", sandboxes=12, profile="local")
    with_cost = compile_scenario(burst, profile=_profile(stop_cpu_s=STOP_CPU_S))
    without = compile_scenario(burst, profile=_profile(stop_cpu_s=None))
    assert "stop" not in with_cost.branch_names
    a, b = run_program(with_cost), run_program(without)
    assert a.to_dict() == b.to_dict()


def test_every_executor_runs_a_stream_with_stops_to_the_bit() -> None:
    """Starts every 50 ms whose VMs stop 0.3 s after they came up: the stops
    contend with the starts still running for RTNL and the cores, and the
    reference and the compiled loop agree on every figure; the stops slow
    the starts they meet."""
    stream = Scenario(
        cni="testbed-cni-bridge",
        sandboxes=40,
        profile="local",
        arrival_s=tuple(0.05 * i for i in range(40)),
        lifetime_s=0.3,
        pools={"netns": 10},
    )
    prof = _profile(stop_cpu_s=0.02)
    program = compile_scenario(stream, profile=prof)
    ref, fast = run_program(program), make_executor("compiled").run(program)
    mine = {k: v for k, v in ref.to_dict().items() if k != "events"}
    assert mine == {k: v for k, v in fast.to_dict().items() if k != "events"}
    assert np.array_equal(ref.finish_s, fast.finish_s)
    up = run_program(compile_scenario(stream.replace(lifetime_s=None), profile=prof))
    assert ref.startup.mean > up.startup.mean


def test_only_the_testbeds_catalog_has_a_stop() -> None:
    with pytest.raises(ConfigError, match=r"lifetime_s.*testbed.*ipvtap.*lifetime_s=5") as err:
        Scenario(cni="ipvtap", sandboxes=4, lifetime_s=5.0)
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match=r"lifetime_s.*-1"):
        Scenario(cni="testbed-cni-bridge", sandboxes=4, profile="local", lifetime_s=-1.0)


def _with(trace: Trace, *, lifetime_s: float | None, stops: VmStops | None, notes=()) -> Trace:
    h = trace.header
    header = h.model_copy(
        update={
            "scenario": h.scenario.model_copy(update={"lifetime_s": lifetime_s}),
            "vm_stops": stops,
            "notes": (*h.notes, *notes),
        }
    )
    return dataclasses.replace(trace, header=header)


@pytest.fixture(scope="module")
def recorded() -> Trace:
    return read_trace(RECORDED)


def test_the_trace_keeps_the_lifetime_and_the_timed_stops(recorded: Trace, tmp_path: Path) -> None:
    stops = VmStops(vms=30, busy_core_s=0.15, wall_s=1.0)
    assert stops.per_vm_s == pytest.approx(5e-3)
    trace = _with(recorded, lifetime_s=LIFETIME_S, stops=stops)
    write_trace(trace, tmp_path / "t.jsonl.gz")
    back = read_trace(tmp_path / "t.jsonl.gz")
    assert back.header.vm_stops == stops and back.header.scenario.lifetime_s == LIFETIME_S
    # A file of before has neither.
    assert recorded.header.vm_stops is None and recorded.header.scenario.lifetime_s is None


def test_storm_stats_read_the_lifetime_and_the_stops(recorded: Trace) -> None:
    stats = StormStats.of(
        _with(recorded, lifetime_s=LIFETIME_S, stops=VmStops(vms=20, busy_core_s=0.1, wall_s=0.6))
    )
    assert stats.lifetime_s == LIFETIME_S and stats.vm_stop_cpu_s == pytest.approx((5e-3,))
    assert stats.scenario().lifetime_s == LIFETIME_S
    # A what-if of another size is the papers' storm: its VMs stay up.
    assert stats.scenario(sandboxes=10).lifetime_s is None
    # A trace of before the header had it says it in the testbed's note.
    noted = _with(
        recorded,
        lifetime_s=None,
        stops=None,
        notes=("lifetime 5 s: each VM stopped that long after it came up (3 during the storm)",),
    )
    assert StormStats.of(noted).lifetime_s == 5.0
    assert StormStats.of(recorded).lifetime_s is None


def test_runs_of_other_lifetimes_are_not_one_storm(recorded: Trace) -> None:
    with pytest.raises(ValueError, match="same storm"):
        StormStats.pooled(
            [
                _with(recorded, lifetime_s=1.0, stops=None),
                _with(recorded, lifetime_s=2.0, stops=None),
            ]
        )
    pooled = StormStats.pooled(
        [
            _with(recorded, lifetime_s=None, stops=VmStops(vms=10, busy_core_s=0.04, wall_s=0.3)),
            _with(recorded, lifetime_s=None, stops=VmStops(vms=10, busy_core_s=0.06, wall_s=0.3)),
        ]
    )
    assert pooled.vm_stop_cpu_s == pytest.approx((4e-3, 6e-3))


def test_a_fit_keeps_the_median_stop_as_measured_with_its_source() -> None:
    prof = trace_fit.testbed_template(
        cores=2, memory_mib=4096, service_cv=0.0, vm_stop_cpu_s=(4e-3, 7e-3, 5e-3)
    )
    assert prof.testbed is not None and prof.testbed.vm_stop_cpu_s == pytest.approx(5e-3)
    source = prof.sources["testbed.vm_stop_cpu_s"]
    assert source.startswith("the recorded storms") and "median of 3 run(s)" in source
    assert "4..7 ms" in source
    bare = trace_fit.testbed_template(cores=2, memory_mib=4096, service_cv=0.0)
    assert bare.testbed is not None and bare.testbed.vm_stop_cpu_s is None
    assert "testbed.vm_stop_cpu_s" not in bare.sources


def test_the_cpus_share_is_over_the_run_the_stops_included() -> None:
    """The last VM stops after the last sandbox is up: the CPU's share is
    its busy time over the cores and the run until that stop ended (never
    more than the cores), the makespan's where nothing outlasts it."""
    prof = _profile(stop_cpu_s=STOP_CPU_S)
    stops = simulate(ALONE, profile=prof)
    span_s = stops.horizon_s - float(stops.arrival_s.min())
    assert span_s > stops.makespan_s + LIFETIME_S
    assert stops.cpu.utilisation == pytest.approx(stops.cpu.busy_core_s / (2 * span_s))
    assert 0.0 < stops.cpu.utilisation <= 1.0


def test_the_stops_grace_period_is_the_start_a_cni_fit_keeps_and_says_so() -> None:
    """No storm of a CNI plan moves a peer, so its fit never sets
    ``rcu_grace_s``, which a stop holds under RTNL: its source says it was
    kept (it said "replaced by the fit"), and a threads fit's still says
    replaced. The measured move's grace period is not a stop's (a deletion
    held RTNL ~1 ms of 17, witnessed; a move all 16 ms)."""
    cni = trace_fit.testbed_template(cores=2, memory_mib=4096, service_cv=0.0, runtimes=("cni",))
    threads = trace_fit.testbed_template(cores=2, memory_mib=4096, service_cv=0.0)
    assert "kept: no storm" in cni.sources["testbed.rcu_grace_s"]
    assert "replaced by the fit" in threads.sources["testbed.rcu_grace_s"]
    assert "replaced by the fit" in cni.sources["testbed.rtnl_tap_hold_s"]
    assert cni.testbed is not None and cni.testbed.rcu_grace_s == pytest.approx(5e-4)


@pytest.mark.parametrize("cni", ["testbed-cni-bridge", "testbed-veth"])
def test_a_stops_rtnl_hold_is_the_witnessed_deletions_not_a_moves_grace_period(
    cni: str,
) -> None:
    """A move holds RTNL through its whole grace period (``rcu_grace_s``,
    16 ms witnessed); a deletion only starts one under it (~1 ms of 17,
    witnessed). The stop priced its hold with ``rcu_grace_s``: a threads fit
    (which sets it to the move's) made every stop hold RTNL 17x too long, and
    a CNI stream's answer hung on a cost no CNI plan sees. Now the stop's
    hold is the same whatever ``rcu_grace_s`` is."""
    prof = _profile(stop_cpu_s=STOP_CPU_S)
    stopping = ALONE.replace(cni=cni)
    short = simulate(stopping, profile=prof)
    moved = simulate(
        stopping, profile=prof.with_values({"testbed.rcu_grace_s": 0.0136}, source="t")
    )
    if cni == "testbed-cni-bridge":  # the CNI runtime moves nothing: nothing changes
        assert moved.locks["rtnl"].hold_s == pytest.approx(short.locks["rtnl"].hold_s, rel=1e-12)
    stop_s = [r.branch_finish_s["stop"] - r.arrival_s - r.startup_latency_s for r in (short, moved)]
    np.testing.assert_allclose(stop_s[0], stop_s[1], atol=1e-9)
