"""The CNI catalog: what each sandbox does, counted without timing."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from bootstorm.models import (
    CNI_NAMES,
    RTNL_OPS,
    ConfigError,
    Scenario,
    cni_stages,
    compile_scenario,
    load_profile,
    ovs_reconfigure_s,
    pool_kinds,
    qos_resend_s,
    vport_creators,
)
from bootstorm.models.sriov import SRIOV_VARIANTS
from bootstorm.simulator import run_program

# Table 3 of seed 000 divided by 400 sandboxes, and the 2 net_prio acquisitions.
PER_SANDBOX_RTNL = {"no-network": 2, "veth": 50, "ipvlan": 41, "ipvtap": 15, "tc-routing": 47}


def _rtnl_acquires_per_sandbox(scenario: Scenario) -> np.ndarray:
    """RTNL holds each sandbox made in a run (a program also holds the paths
    it did not take: the shared vPort's, which only its maker runs)."""
    r = run_program(compile_scenario(scenario), record=True)
    assert r.recording is not None
    locks = r.recording.lock_frame()
    held = locks[(locks.lock == "rtnl") & (locks.what == "hold")]
    return np.bincount(held.sandbox.to_numpy(dtype=int), minlength=scenario.sandboxes)


@pytest.mark.parametrize(("cni", "expected"), sorted(PER_SANDBOX_RTNL.items()))
def test_rtnl_operations_per_sandbox_follow_table_3(cni: str, expected: int) -> None:
    counts = _rtnl_acquires_per_sandbox(Scenario(cni=cni, sandboxes=10, tenants=1))  # type: ignore[arg-type]
    # All but the vPort's maker (whichever of the tenant comes first) make
    # exactly the per-sandbox count; direct-mode CNIs create a vPort each.
    if cni in ("veth", "no-network"):
        assert counts.tolist() == [expected] * 10
    else:
        assert sorted(counts.tolist()) == [expected] * 9 + [expected + 1]  # its link


def test_macv_variants_mirror_ipv_ones() -> None:
    for a, b in (("macvlan", "ipvlan"), ("macvtap", "ipvtap")):
        assert [o.total for o in RTNL_OPS[a].values()] == [o.total for o in RTNL_OPS[b].values()]


def test_every_software_cni_compiles_and_runs() -> None:
    for cni in CNI_NAMES:
        if cni in SRIOV_VARIANTS or cni.startswith(("testbed", "tsor")):
            continue  # tests/models/test_sriov.py, test_trace_fit.py, test_tsor.py
        r = run_program(compile_scenario(Scenario(cni=cni, sandboxes=20)))  # type: ignore[arg-type]
        assert np.isfinite(r.finish_s).all()
        assert list(r.stages) == list(cni_stages(cni))


def test_pools_replace_creation_and_cost_memory() -> None:
    base = Scenario(cni="ipvtap", sandboxes=20)
    pooled = base.replace(pools={"netns": 20, "vport": 1, "ipvtap": 20})
    r0, r1 = run_program(compile_scenario(base)), run_program(compile_scenario(pooled))
    assert r1.pools["ipvtap"].taken == 20 and r1.pools["netns"].taken == 20
    assert r1.locks["rtnl"].acquisitions < r0.locks["rtnl"].acquisitions
    assert r1.pool_memory_mib > 0 and r0.pool_memory_mib == 0
    # A pool smaller than the storm serves the first comers, the rest create.
    partial = run_program(compile_scenario(base.replace(pools={"ipvtap": 5})))
    assert partial.pools["ipvtap"].taken == 5


def test_unknown_pool_or_stage_names_the_field() -> None:
    with pytest.raises(ConfigError, match="pools: unknown pool kind 'veth'"):
        compile_scenario(Scenario(cni="ipvtap", pools={"veth": 3}))
    with pytest.raises(ConfigError, match="limits: unknown stage 'AttachIf'"):
        compile_scenario(Scenario(cni="no-network", limits={"AttachIf": 3}))
    assert pool_kinds("no-network") == ()


def test_stage_limit_caps_concurrency() -> None:
    s = Scenario(cni="ipvlan", sandboxes=60, limits={"AttachIf": 4})
    r = run_program(compile_scenario(s), record=True)
    assert r.recording is not None
    spans = r.recording.stage_frame()
    att = spans[spans.stage == "AttachIf"]
    events = sorted([(b, 1) for b in att.begin_s] + [(e, -1) for e in att.end_s])
    inside = np.cumsum([d for _, d in events])
    assert inside.max() <= 4
    assert r.gates["AttachIf"].waited > 0


def test_tenants_create_one_vport_each() -> None:
    r = run_program(compile_scenario(Scenario(cni="ipvlan", sandboxes=40, tenants=8)))
    assert r.locks["ovs-vswitchd"].acquisitions == 8
    r = run_program(compile_scenario(Scenario(cni="tc-routing", sandboxes=40, tenants=8)))
    assert r.locks["ovs-vswitchd"].acquisitions == 1
    r = run_program(compile_scenario(Scenario(cni="veth", sandboxes=40, tenants=8)))
    assert r.locks["ovs-vswitchd"].acquisitions == 40


def test_netprio_walk_grows_with_host_netdevs_for_veth_only() -> None:
    """cgrp_css_online walks init_net's netdevs: veth leaves one per pod there,
    ipvtap moves its device into the pod's namespace. (paper-000's walk is
    the measured 15 ns per netdev, too small to see: here it costs as much
    as the rest of the hold.)"""
    base = load_profile("paper-000")
    assert base.costs is not None
    profile = base.with_values(
        {"costs.netprio_per_netdev_s": base.costs.netprio_hold_s}, source="a test"
    )

    def netprio_holds(cni: str) -> list[float]:
        scenario = Scenario(cni=cni, sandboxes=30)
        r = run_program(compile_scenario(scenario, profile=profile), record=True)
        assert r.recording is not None
        locks = r.recording.lock_frame()
        held = locks[(locks.lock == "rtnl") & (locks.what == "hold") & (locks.stage == "Cgroup")]
        return held.sort_values("sandbox").duration_s.tolist()

    veth, ipvtap = netprio_holds("veth"), netprio_holds("ipvtap")
    assert len(veth) == len(ipvtap) == 30
    assert veth[-1] > 2 * veth[0]  # the 30th walks 29 more netdevs than the first
    assert max(ipvtap) < 2 * min(ipvtap)


@pytest.mark.parametrize(("wake_s", "lockstep"), [(0.0, True), (35e-6, False)])
def test_cgroup_mutex_hand_over_decides_the_lockstep(wake_s: float, lockstep: bool) -> None:
    """FIFO (``cgroup_mutex_wake_s`` 0, as ``mutex_wake_s``) queues every
    attach behind every mkdir; the Linux-style wake-up lets the releaser take
    cgroup_mutex again for its attach (benchmarks/bench_cgroup_lockstep.py)."""
    base = load_profile("paper-000")
    profile = base.with_values({"costs.cgroup_mutex_wake_s": wake_s}, source="a test")
    recorded = run_program(
        compile_scenario(Scenario(cni="no-network", sandboxes=30), profile=profile), record=True
    ).recording
    assert recorded is not None
    locks = recorded.lock_frame()
    holds = locks[(locks.lock == "cgroup_mutex") & (locks.what == "hold")].sort_values("end_s")
    owners = holds.sandbox.to_numpy()
    # Hand-overs to the same sandbox (its attach right after its mkdir): at
    # most every other one, 0.5; FIFO gives none.
    back_to_back = float((owners[1:] == owners[:-1]).mean())
    if lockstep:
        assert back_to_back < 0.05, back_to_back
    else:
        assert back_to_back > 0.4, back_to_back


def test_resent_qos_rules_hold_rtnl_once_per_reconfiguration() -> None:
    """Each OVS database change (the vPort, then each rule) re-sends the rules
    of every vPort ahead: its kernel part is one RTNL hold growing with them."""
    base = load_profile("paper-000")
    assert base.costs is not None
    costs = base.costs.model_copy(
        update={"ovs_qos_resend_s": 2e-3, "ovs_qos_resend_rtnl_s": 1e-3, "rtnl_tc_hold_s": 0.5}
    )
    profile = base.model_copy(update={"costs": costs, "service_cv": 0.0})

    def addcni_rtnl(qos_rules: int) -> dict[int, list[float]]:
        scenario = Scenario(cni="veth", sandboxes=20, qos_rules=qos_rules)
        r = run_program(compile_scenario(scenario, profile=profile), record=True)
        assert r.recording is not None
        locks = r.recording.lock_frame()
        held = locks[(locks.lock == "rtnl") & (locks.what == "hold") & (locks.stage == "AddCNI")]
        return {int(s): sorted(g.duration_s) for s, g in held.groupby("sandbox")}

    plain, qos = addcni_rtnl(0), addcni_rtnl(2)
    for sandbox in range(20):
        added = Counter(round(d, 9) for d in qos[sandbox])
        added.subtract(Counter(round(d, 9) for d in plain[sandbox]))
        # Per change (the vPort, each of 2 rules) one re-send hold of the
        # rules ahead, 2 rules x 1 ms each; the rules' own tc changes, 2 each.
        expected = Counter({round(sandbox * 2 * 1e-3, 9): 3, 0.5: 2 * 2})
        assert +added == +expected, sandbox


@pytest.mark.parametrize(
    ("cni", "tenants", "pools"),
    [
        ("veth", 1, {}),
        ("veth", 1, {"vport": 4}),
        ("ipvtap", 6, {}),
        ("tc-routing", 6, {}),
        ("vhost-user", 1, {}),
    ],
)
def test_ovs_reconfigure_s_is_the_vswitchd_work_the_storm_does(
    cni: str, tenants: int, pools: dict[str, int]
) -> None:
    """With sandboxes apart (nothing contended), vswitchd's holds are its
    fixed work per vPort and rule plus exactly :func:`ovs_reconfigure_s`
    (the walk over the ports ahead, and :func:`qos_resend_s` within it)."""
    base = load_profile("paper-000")
    assert base.costs is not None
    # The walk's measured cost (paper-000 leaves it at 0; see its source).
    c = base.costs.model_copy(update={"ovs_reconfigure_per_port_s": 37e-6})
    profile = base.model_copy(update={"service_cv": 0.0, "costs": c})
    scenario = Scenario(
        cni=cni,  # type: ignore[arg-type]
        sandboxes=12,
        tenants=tenants,
        qos_rules=2,
        pools=pools,
        arrival_s=[30.0 * i for i in range(12)],
    )
    r = run_program(compile_scenario(scenario, profile=profile))
    vports = 12 if cni in ("veth", "vhost-user") else vport_creators(cni, tenants)
    created = vports - pools.get("vport", 0)
    if cni == "vhost-user":  # QoS in DPDK, and each pod's vhost-user socket in StartVM
        fixed = created * c.ovs_port_add_s + vports * (2 * c.ovs_dpdk_qos_s + c.vhost_user_setup_s)
    else:
        fixed = created * c.ovs_port_add_s + vports * 2 * (c.ovs_qos_s + 2 * c.rtnl_tc_hold_s)
    growth = ovs_reconfigure_s(scenario, c)
    # tc-routing's one vPort has none ahead; DPDK ports are not walked.
    assert (growth > 0.0) == (vports > 1 and cni != "vhost-user")
    assert (qos_resend_s(scenario, c) > 0.0) == (vports > 1 and cni != "vhost-user")
    assert r.locks["ovs-vswitchd"].hold_s == pytest.approx(fixed + growth, rel=1e-9)


def test_ovs_reconfigure_s_walks_the_ports_ahead_without_qos_too() -> None:
    paper = load_profile("paper-000").costs
    assert paper is not None
    assert paper.ovs_reconfigure_per_port_s == 37e-6  # measured, used as measured (its source)
    costs = paper
    veth = Scenario(cni="veth", sandboxes=400)
    # 37 us per port ahead at each pod's one change: 3 s at 400 pods.
    assert ovs_reconfigure_s(veth, costs) == pytest.approx(37e-6 * 400 * 399 / 2)
    assert ovs_reconfigure_s(Scenario(cni="ipvtap", sandboxes=400), costs) == 0.0  # one vPort
    assert ovs_reconfigure_s(Scenario(cni="no-network", sandboxes=400), costs) == 0.0
    with_qos = Scenario(cni="veth", sandboxes=400, qos_rules=2)
    walk = 37e-6 * (2 + 1) * 400 * 399 / 2  # the port and its 2 rules, each a change
    assert ovs_reconfigure_s(with_qos, costs) == pytest.approx(walk + qos_resend_s(with_qos, costs))


def test_qos_resend_s_grows_as_the_square_of_vports() -> None:
    costs = load_profile("paper-000").costs
    assert costs is not None
    at = {
        n: qos_resend_s(Scenario(cni="veth", sandboxes=n, qos_rules=2), costs) for n in (200, 400)
    }
    assert at[400] / at[200] == pytest.approx(400 * 399 / (200 * 199))
    assert at[400] == pytest.approx(21e-6 * 2 * 3 * 400 * 399 / 2)  # 10 s at 400 pods
    assert qos_resend_s(Scenario(cni="vhost-user", sandboxes=400, qos_rules=2), costs) == 0.0
    assert qos_resend_s(Scenario(cni="veth", sandboxes=400), costs) == 0.0


@pytest.mark.parametrize(("cni", "tenants"), [("ipvtap", 1), ("tc-routing", 4), ("ipvlan", 50)])
def test_programs_stay_linear_in_sandboxes(cni: str, tenants: int) -> None:
    """A shared vPort's maker lets all its dependants go in one op: the
    program of N sandboxes has O(N) ops, not one per dependant in every
    sandbox's copy of the maker's path (O(N²): 10 000 sandboxes took 4.6 GiB)."""
    ops = {
        n: len(compile_scenario(Scenario(cni=cni, sandboxes=n, tenants=tenants)).op_kind)  # type: ignore[arg-type]
        for n in (500, 2000)
    }
    assert ops[2000] <= 4.05 * ops[500], ops
