"""The data-plane model: known answers for its math, invariants, validation,
and the background traffic that takes cores from a boot storm."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bootstorm import simulate
from bootstorm.models import ConfigError, Scenario, load_profile
from bootstorm.models.compile import background_cores, compile_scenario
from bootstorm.models.dataplane import (
    DATA_PATHS,
    IP_HEADER_BYTES,
    TCP_HEADER_BYTES,
    DataplaneCostTable,
    StageCost,
    Traffic,
    path_for_cni,
)
from bootstorm.models.softirq import (
    DataplaneResult,
    flow_costs,
    max_min_rates,
    solve_dataplane,
    solve_on_profile,
)
from bootstorm.simulator import Cpu, MachineSpec, ProgramError, Stage, compile_program, run_program

P004 = load_profile("paper-004")


def table(**stages: float) -> DataplaneCostTable:
    """A data plane where only the named stages cost anything (per packet)."""
    return DataplaneCostTable(
        link_gbps=1e6,
        mtu_bytes=1500,
        rx_queues=4,
        napi_budget=64,
        coalesce_frames=44,
        gro_max_bytes=65536,
        irq_s=0.0,
        copy_per_byte_s=0.0,
        syscall_s=0.0,
        user_per_byte_s=0.0,
        stages={
            name: StageCost(per_packet_s=stages.get(name, 0.0))
            for name in ("nic", "stack", "vxlan", "bridge", "veth")
        },
    )


# -- known answers -------------------------------------------------------------------


def test_one_flow_one_stage_udp_ceiling_is_packet_size_over_cost() -> None:
    """One stage of 2 µs per packet, 1000-byte datagrams (one fragment each):
    the core handles 500 000 packets/s, so 8000 bits x 5e5 = 4 Gbps."""
    r = solve_dataplane(
        table(nic=2e-6),
        Traffic(path="native", proto="udp", flows=1, message_bytes=1000, draws=1),
        cores=4,
    )
    assert r.per_flow_ceiling_gbps == pytest.approx(4.0, rel=1e-12)
    assert r.aggregate_gbps == pytest.approx(4.0, rel=1e-9)
    assert r.cpu_softirq_cores == pytest.approx(1.0, rel=1e-9)  # one core saturated


def test_gro_amortises_a_merged_stage_over_its_segments() -> None:
    """TCP: the stack sees GRO skbs of g = 65536 // mss segments, so a stack
    cost c gives a ceiling of 8 * mss * g / c."""
    mss = 1500 - IP_HEADER_BYTES - TCP_HEADER_BYTES
    g = 65536 // mss
    r = solve_dataplane(table(stack=10e-6), Traffic(path="native", flows=1, draws=1), cores=4)
    assert r.per_flow_ceiling_gbps == pytest.approx(8 * mss * g / 10e-6 / 1e9, rel=1e-12)


def test_overlay_stages_add_their_per_packet_costs() -> None:
    """UDP through the Docker overlay: NIC, VXLAN, bridge and veth each pay per
    fragment, so the per-packet costs add (1 µs each: 4 µs per packet)."""
    costs = table(nic=1e-6, vxlan=1e-6, bridge=1e-6, veth=1e-6)
    r = solve_dataplane(
        costs,
        Traffic(path="docker-overlay", proto="udp", flows=1, message_bytes=1000, draws=1),
        cores=4,
    )
    assert r.per_flow_ceiling_gbps == pytest.approx(8000 / 4e-6 / 1e9, rel=1e-12)


def test_flow_completion_time_is_size_over_the_flow_s_rate() -> None:
    """One flow at its 4 Gbps ceiling (the test above) carries 1 MB in 2 ms;
    without a size there is no completion time."""
    one = Traffic(path="native", proto="udp", flows=1, message_bytes=1000, draws=1)
    r = solve_dataplane(table(nic=2e-6), one.model_copy(update={"flow_bytes": 10**6}), cores=4)
    assert r.fct_p50_s == pytest.approx(2e-3, rel=1e-9)
    assert r.fct_p99_s == pytest.approx(2e-3, rel=1e-9)
    bare = solve_dataplane(table(nic=2e-6), one, cores=4)
    assert bare.fct_p50_s is None and bare.fct_p99_s is None
    assert bare.to_dict()["fct_p99_s"] is None


def test_flow_completion_tail_comes_from_the_pairs_unequal_shares() -> None:
    """Three bridged pairs pinned each to one core of two: pairs 0 and 2 share
    core 0 (2 Gbps each), pair 1 has core 1 (4 Gbps; the bridge costs 0.25
    core-s per Gbit of 64 KB skbs). 1 MB takes 4, 2 and 4 ms: the median and
    the p99 are the slow pairs' 4 ms, pooled over the draws alike."""
    cost = 0.25 * 8 * 65536 / 1e9
    for draws in (1, 3):
        traffic = Traffic(
            path="bridge-intra",
            flows=3,
            message_bytes=65536,
            placement="pinned-together",
            flow_bytes=10**6,
            draws=draws,
        )
        r = solve_dataplane(table(bridge=cost), traffic, cores=2)
        assert (r.flow_min_gbps, r.flow_max_gbps) == pytest.approx((2.0, 4.0), rel=1e-9)
        assert r.fct_p50_s == pytest.approx(4e-3, rel=1e-9)
        assert r.fct_p99_s == pytest.approx(4e-3, rel=1e-9)
    # Five pairs on five cores but one: p99 interpolates towards the slowest.
    five = Traffic(
        path="bridge-intra", flows=5, placement="pinned-together", flow_bytes=10**6, draws=1
    )
    r = solve_dataplane(table(bridge=cost), five, cores=4)
    fct = sorted(8e6 / (g * 1e9) for g in (2.0, 4.0, 4.0, 4.0, 2.0))
    assert r.fct_p99_s == pytest.approx(float(np.quantile(fct, 0.99)), rel=1e-9)
    assert r.fct_p50_s == pytest.approx(2e-3, rel=1e-9)


def test_max_min_fair_known_answers() -> None:
    # Two flows on one unit resource: half each.
    np.testing.assert_allclose(max_min_rates(np.ones((1, 2)), np.ones(1), np.full(2, np.inf)), 0.5)
    # A capped flow leaves the rest to the other.
    rates = max_min_rates(np.ones((1, 2)), np.ones(1), np.array([0.2, np.inf]))
    np.testing.assert_allclose(rates, [0.2, 0.8])
    # Flow 0 uses both resources, flow 1 only the second (capacities 1 and 3).
    rates = max_min_rates(
        np.array([[1.0, 0.0], [1.0, 1.0]]), np.array([1.0, 3.0]), np.full(2, np.inf)
    )
    np.testing.assert_allclose(rates, [1.0, 2.0])


def test_no_core_is_over_full_and_cpu_is_conserved() -> None:
    traffic = Traffic(path="docker-overlay", flows=12, draws=8)
    r = solve_on_profile(P004, traffic)
    per_gbit = flow_costs(P004.dataplane_costs(), DATA_PATHS["docker-overlay"], "tcp", 131072)
    switches = 2.0 * P004.dataplane_costs().context_switch_s * r.wakeups_per_s
    assert r.cpu_total_cores == pytest.approx(
        r.aggregate_gbps * per_gbit.core_s_per_gbit + switches, rel=1e-9
    )
    assert r.cpu_total_cores <= r.cores
    assert r.aggregate_gbps <= P004.dataplane_costs().link_gbps


def test_softirq_ratio_one_natively_three_when_overlay_cores_saturate() -> None:
    native = solve_on_profile(P004, Traffic(path="native", proto="udp", draws=1))
    assert native.softirq_per_s == pytest.approx(native.irq_per_s, rel=1e-12)
    overlay = solve_on_profile(P004, Traffic(path="docker-overlay", proto="udp", draws=1))
    assert overlay.softirq_per_s == pytest.approx(3.0 * overlay.irq_per_s, rel=1e-9)
    light = solve_on_profile(P004, Traffic(path="docker-overlay", flow_gbps=1.0, draws=1))
    assert light.irq_per_s < light.softirq_per_s < 3.0 * light.irq_per_s  # some merge


def _wake_table(**changes: object) -> DataplaneCostTable:
    base = table(nic=1e-6).model_dump()
    return DataplaneCostTable(**{**base, "copy_per_byte_s": 1e-10, **changes})


def test_a_lone_receiver_pays_two_switches_per_poll_while_it_sleeps() -> None:
    """One UDP flow bound by its softirq CPU: the receiver (another CPU) does
    ``u`` of work and sleeps ``1 - u`` of the time, so ``(1 - u)`` of the
    flow's polls wake it. Fixed point: ``w = 2 c D (1 - r a) / (1 + 2 c D r)``
    core-s per Gbit with ``D`` polls per Gbit, ``a`` its work per Gbit."""
    c = 1.5e-6
    costs = _wake_table(context_switch_s=c)
    traffic = Traffic(path="native", proto="udp", message_bytes=1472, draws=1)
    r = solve_dataplane(costs, traffic, cores=4)
    fc = flow_costs(costs, DATA_PATHS["native"], "udp", 1472)
    rate, d, a = r.aggregate_gbps, fc.batches, fc.app_system + fc.app_user
    assert rate == pytest.approx(1.0 / fc.rx_softirq)  # the wake-ups do not move the ceiling
    w = 2 * c * d * (1 - rate * a) / (1 + 2 * c * d * rate)
    assert r.wakeups_per_s == pytest.approx(rate * w / (2 * c), rel=1e-6)
    assert r.cpu_system_cores == pytest.approx(rate * (fc.app_system + w), rel=1e-6)
    free = solve_dataplane(_wake_table(), traffic, cores=4)
    assert free.wakeups_per_s == 0.0
    assert free.aggregate_gbps == r.aggregate_gbps


def test_a_saturated_receiver_never_sleeps() -> None:
    """Native TCP on paper-004 is bound by its receiver's copy (S4-1)."""
    r = solve_on_profile(P004, Traffic(path="native", draws=1))
    assert r.wakeups_per_s == 0.0


def test_flows_sharing_a_queue_wake_their_receivers_more_often() -> None:
    """A poll of ``B`` frames from ``k`` equal flows holds frames of each with
    probability ``1 - (1 - 1/k)^B``: per frame, up to ``k`` times the lone flow's
    ``1/B`` wake-ups."""
    costs = _wake_table(context_switch_s=1.5e-6, rx_queues=1)
    one = solve_dataplane(costs, Traffic(path="native", proto="udp", flow_gbps=0.1), cores=8)
    four = solve_dataplane(
        costs, Traffic(path="native", proto="udp", flows=4, flow_gbps=0.1), cores=8
    )
    b = 44
    ratio = (four.wakeups_per_s / four.aggregate_gbps) / (one.wakeups_per_s / one.aggregate_gbps)
    # Receivers sleep a little less at four flows (their CPUs are busier).
    assert ratio == pytest.approx(4 * (1 - 0.75**b), rel=0.02)


def test_sriov_costs_the_host_nothing() -> None:
    r = solve_on_profile(P004, Traffic(path="sriov", flows=4, flow_gbps=2.0))
    assert r.cpu_total_cores == 0.0
    assert r.irq_per_s == 0.0
    assert r.aggregate_gbps == pytest.approx(8.0)


def test_aggregate_grows_with_flows_and_offered_load() -> None:
    agg = [
        solve_on_profile(P004, Traffic(path="docker-overlay", flows=n)).aggregate_gbps
        for n in (1, 2, 4, 6, 12)
    ]
    assert agg == sorted(agg)
    low = solve_on_profile(P004, Traffic(path="native", flows=4, flow_gbps=1.0))
    assert low.aggregate_gbps == pytest.approx(4.0)


def test_native_udp_flows_share_one_core() -> None:
    """Plain UDP is hashed on addresses only: every flow lands on one core (seed 004 §3.2)."""
    one = solve_on_profile(P004, Traffic(path="native", proto="udp", flows=1, draws=4))
    six = solve_on_profile(P004, Traffic(path="native", proto="udp", flows=6, draws=4))
    assert six.aggregate_gbps == pytest.approx(one.aggregate_gbps, rel=1e-9)


def test_same_seed_same_result_other_seed_may_differ() -> None:
    t = Traffic(path="docker-overlay", flows=6, draws=4, seed=3)
    assert solve_on_profile(P004, t) == solve_on_profile(P004, t)


#: Every stage of the catalog priced, with IRQ, copy and syscall costs.
EVERY_STAGE = DataplaneCostTable(
    link_gbps=40.0,
    mtu_bytes=1500,
    rx_queues=16,
    napi_budget=64,
    coalesce_frames=44,
    gro_max_bytes=65536,
    irq_s=1e-6,
    copy_per_byte_s=3e-10,
    syscall_s=5e-7,
    user_per_byte_s=1e-11,
    context_switch_s=1.5e-6,
    stages={
        name: StageCost(per_packet_s=(i + 1) * 2e-7, per_byte_s=1e-12 * i)
        for i, name in enumerate(sorted({s.cost for p in DATA_PATHS.values() for s in p.stages}))
    },
)


@settings(max_examples=40, deadline=None)
@given(
    path=st.sampled_from(sorted(DATA_PATHS)),
    proto=st.sampled_from(["tcp", "udp"]),
    flows=st.integers(1, 40),
    cores=st.integers(1, 24),
    flow_gbps=st.one_of(st.none(), st.floats(0.05, 50.0)),
    placement=st.sampled_from(["random", "pinned-apart", "pinned-together"]),
    seed=st.integers(0, 2**16),
)
def test_invariants(
    path: str,
    proto: str,
    flows: int,
    cores: int,
    flow_gbps: float | None,
    placement: str,
    seed: int,
) -> None:
    """Whatever the load: no core over full, the link never over its goodput,
    CPU equals throughput times the per-Gbit cost, softirqs between 1x and
    k x the batches, and no flow above its ceiling or its offered load."""
    traffic = Traffic(
        path=path,  # type: ignore[arg-type]
        proto=proto,  # type: ignore[arg-type]
        flows=flows,
        cores=cores,
        flow_gbps=flow_gbps,
        placement=placement,  # type: ignore[arg-type]
        draws=2,
        seed=seed,
    )
    costs = EVERY_STAGE
    r = solve_dataplane(costs, traffic, cores=cores)
    fc = flow_costs(costs, DATA_PATHS[path], proto, traffic.message)
    assert r.cpu_total_cores <= cores * (1 + 1e-9)
    switches = 2.0 * costs.context_switch_s * r.wakeups_per_s
    assert r.cpu_total_cores == pytest.approx(
        r.aggregate_gbps * fc.core_s_per_gbit + switches, rel=1e-9
    )
    # At most one wake-up per frame (or skb) delivered, none for a guest.
    per_poll = costs.napi_budget if DATA_PATHS[path].intra_host else costs.coalesce_frames
    assert r.wakeups_per_s <= r.aggregate_gbps * fc.batches * per_poll * (1 + 1e-9)
    if not DATA_PATHS[path].host_receiver:
        assert r.wakeups_per_s == 0.0
    if not DATA_PATHS[path].intra_host:
        assert r.aggregate_gbps * fc.wire_gbit <= costs.link_gbps * (1 + 1e-9)
    assert r.flow_max_gbps <= r.per_flow_ceiling_gbps * (1 + 1e-9)
    assert r.irq_per_s <= r.softirq_per_s * (1 + 1e-9) or fc.softirqs_per_batch == 0
    k = fc.softirqs_per_batch
    assert r.softirq_per_s <= k * r.aggregate_gbps * fc.batches * (1 + 1e-9)


# -- validation ----------------------------------------------------------------------


def test_traffic_errors_name_field_and_value() -> None:
    with pytest.raises(ConfigError, match=r"traffic: flows: .*\(got 0\)"):
        Traffic(path="native", flows=0)
    with pytest.raises(ConfigError, match=r"traffic: path: .*'nope'"):
        Traffic(path="nope")  # type: ignore[arg-type]


def test_missing_stage_cost_is_named() -> None:
    costs = table().model_copy(update={"stages": {"nic": StageCost(per_packet_s=1e-6)}})
    with pytest.raises(ConfigError, match=r"dataplane.stages: no cost for stage 'stack'"):
        solve_dataplane(costs, Traffic(path="native"), cores=2)


def test_result_refuses_negative_numbers() -> None:
    good = solve_on_profile(P004, Traffic(path="native", draws=1))
    fields = {k: getattr(good, k) for k in DataplaneResult.__slots__}
    with pytest.raises(ValueError, match=r"^aggregate_gbps: must be a finite number >= 0 \(got -1"):
        DataplaneResult(**{**fields, "aggregate_gbps": -1.0})


def test_data_plane_only_profile_cannot_run_a_storm() -> None:
    with pytest.raises(ConfigError, match=r"'paper-004' has no `costs` section"):
        simulate(Scenario(profile="paper-004", sandboxes=10))


def test_profile_without_dataplane_section_is_named() -> None:
    p000 = load_profile("paper-000")
    bare = p000.model_copy(update={"dataplane": None})
    with pytest.raises(ConfigError, match=r"no `dataplane` section"):
        bare.dataplane_costs()


# -- interference with a boot storm ---------------------------------------------------


def test_cni_paths() -> None:
    assert path_for_cni("ipvtap") == "kata-tap"
    assert path_for_cni("veth") == "kata-veth"
    assert path_for_cni("fastiov") == "sriov"
    with pytest.raises(ConfigError, match="no-network"):
        path_for_cni("no-network")


def test_reserved_cores_slow_processor_sharing_exactly() -> None:
    """3 jobs of 1 core-s on 2 cores of which 0.5 is reserved: each gets 0.5
    of a core, all finish at 2.0 s (1.5 s without the reservation)."""
    plans = [(Stage("job", (Cpu(1.0),)),) for _ in range(3)]
    for reserved, finish in ((0.0, 1.5), (0.5, 2.0)):
        program = compile_program(
            plans, machine=MachineSpec(cores=2, reserved_cores=reserved), locks=[]
        )
        np.testing.assert_allclose(run_program(program).finish_s, finish, rtol=1e-12)


def test_machine_refuses_reserving_every_core() -> None:
    with pytest.raises(ProgramError, match=r"^reserved_cores: must be < cores=2 \(got 2\.0\)$"):
        MachineSpec(cores=2, reserved_cores=2.0)


STORM = Scenario(cni="ipvtap", sandboxes=60, profile="paper-000", cores=8)


def test_zero_flows_is_the_storm_bit_for_bit() -> None:
    before = simulate(STORM)
    after = simulate(STORM.replace(background_flows=0, flow_gbps=5.0))
    assert after.makespan_s == before.makespan_s
    np.testing.assert_array_equal(after.startup_latency_s, before.startup_latency_s)
    assert after.cpu.busy_core_s == before.cpu.busy_core_s


def test_background_traffic_slows_the_storm_monotonically() -> None:
    flows = (0, 5, 20, 60)
    reserved = [
        background_cores(STORM.replace(background_flows=n), load_profile("paper-000"))
        for n in flows
    ]
    assert reserved[0] == 0.0
    assert all(a < b for a, b in itertools.pairwise(reserved))
    makespans = [simulate(STORM.replace(background_flows=n)).makespan_s for n in flows]
    assert all(a < b for a, b in itertools.pairwise(makespans))


def test_sriov_background_traffic_takes_no_core() -> None:
    s = Scenario(cni="sriov-vanilla", sandboxes=10, profile="paper-001", background_flows=50)
    assert background_cores(s, load_profile("paper-000")) == 0.0


def test_traffic_that_fills_every_core_is_refused() -> None:
    """With a free tap (no vhost work to share the core) and a link faster
    than one core's softirqs, they fill a one-core node: nothing is left."""
    p000 = load_profile("paper-000")
    free_tap = p000.with_values(
        {
            "dataplane.stages.tap.per_packet_s": 0.0,
            "dataplane.stages.tap.per_byte_s": 0.0,
            "dataplane.link_gbps": 1000.0,
        }
    )
    s = STORM.replace(cores=1, background_flows=200, flow_gbps=10.0)
    with pytest.raises(
        ConfigError,
        match=r"background_flows: 200 flows .* all the node has \(1 cores. worth of work "
        r"from 1 CPUs\)",
    ):
        compile_scenario(s, profile=free_tap)


def test_scenario_validates_the_new_fields() -> None:
    with pytest.raises(ConfigError, match=r"background_flows: .*\(got -1\)"):
        Scenario(background_flows=-1)
    with pytest.raises(ConfigError, match=r"flow_gbps: .*\(got 0.0\)"):
        Scenario(flow_gbps=0.0)


def test_aggregate_grows_with_cores_until_the_link() -> None:
    agg = [
        solve_on_profile(P004, Traffic(path="docker-overlay", flows=12, cores=c)).aggregate_gbps
        for c in (1, 2, 4, 20)
    ]
    assert agg == sorted(agg)
    # One core does everything: 1 / (all the work per Gbit).
    fc = flow_costs(P004.dataplane_costs(), DATA_PATHS["docker-overlay"], "tcp", 131072)
    assert agg[0] == pytest.approx(1.0 / fc.core_s_per_gbit, rel=1e-9)


# -- hyper-threads --------------------------------------------------------------------


def test_two_flows_on_sibling_threads_share_the_core_s_smt_throughput() -> None:
    """Known answer: UDP flows hashed to queues 0 and 2 on 4 CPUs (2 cores x
    2 threads: CPUs 0 and 2 are siblings). Alone each flow reaches 4 Gbps;
    together the core does 1.3 threads' work, so 2 x 4 x 1.3 / 2 Gbps."""
    udp = {"path": "linux-overlay", "proto": "udp", "message_bytes": 1000, "draws": 1}
    costs = table(nic=2e-6).model_copy(update={"rx_queues": 4})
    smt = {"threads_per_core": 2, "core_work": 1.3}
    one = solve_dataplane(costs, Traffic(flows=1, **udp), cores=4, **smt)
    assert one.aggregate_gbps == pytest.approx(4.0, rel=1e-9)
    # Every flow on the one physical core of a 2-CPU node: 1.3 cores in all.
    both = solve_dataplane(costs, Traffic(flows=8, cores=2, **udp), cores=2, **smt)
    assert both.aggregate_gbps == pytest.approx(4.0 * 1.3, rel=1e-9)
    no_smt = solve_dataplane(costs, Traffic(flows=8, cores=2, **udp), cores=2)
    assert no_smt.aggregate_gbps == pytest.approx(8.0, rel=1e-9)


def test_smt_with_full_gain_is_no_smt() -> None:
    # Pinned: the same draws with and without SMT (a random receiver's
    # placement depends on the siblings).
    t = Traffic(path="docker-overlay", flows=6, draws=4, placement="pinned-apart")
    full = solve_dataplane(table(nic=2e-6), t, cores=8, threads_per_core=2, core_work=2.0)
    assert full == solve_dataplane(table(nic=2e-6), t, cores=8)


def test_smt_gain_above_thread_count_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"core_work=2.5, threads_per_core=2"):
        solve_dataplane(table(), Traffic(path="native"), cores=4, threads_per_core=2, core_work=2.5)


def test_the_profile_s_host_gives_the_data_plane_its_hyper_threads() -> None:
    """paper-004's SMT is a host fact; the solver gets it from the profile."""
    t = Traffic(path="docker-overlay", flows=6)
    host = P004.host
    assert (host.threads_per_core, host.core_work) == (2, pytest.approx(1.3))
    direct = solve_dataplane(P004.dataplane_costs(), t, cores=20, threads_per_core=2, core_work=1.3)
    assert solve_on_profile(P004, t) == direct
    assert solve_on_profile(P004, t) != solve_dataplane(P004.dataplane_costs(), t, cores=20)


def test_woken_receiver_avoids_the_sibling_of_its_softirq_cpu() -> None:
    """seed 004's host: 20 CPUs, CPU c and c + 10 are siblings; a random
    receiver never shares a physical core with its flow's RSS CPU."""
    from bootstorm.models.softirq import _placement

    costs = P004.dataplane_costs()
    rng = np.random.default_rng(0)
    traffic = Traffic(path="native", flows=40)
    for _ in range(50):
        rss, recv, _send = _placement(traffic, DATA_PATHS["native"], costs, 20, 2, rng)
        assert not np.any(rss % 10 == recv % 10)
