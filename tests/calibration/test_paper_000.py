"""Seed 000's published figures against the calibrated ``paper-000`` model.

The rows that are one number (the fit rows S0-1 to S0-4, S0-5's eBPF part,
S0-6, S0-11's veth figure) are judged on their mean over the ten check seeds
1001-1010, which the fit (seeds 0-4, common random numbers) never used: the
rows ``bootstorm calibrate --check`` prints (``bootstorm.calibration.check``).
*fit* rows must hold within ±5%; *predict* rows within ±15% for a number, or
in direction and order for a trend (PAPER-TARGETS.md). Each test names the
rows it checks and so their kind (``checks_rows``); a row whose magnitude
needs a cost no independent source gives is labelled *fit*, with the reason,
in ``bootstorm.calibration.rows``. A miss is a strict xfail with
``raises=AssertionError`` whose reason comes from ``KNOWN_MISSES``.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest
from paper_rows import PaperRows

from bootstorm import Scenario, simulate
from bootstorm.calibration import CHECK_SEEDS, PREDICT_TOLERANCE, known_miss
from bootstorm.calibration.rows import checks_rows
from bootstorm.models import STAGES, compile_scenario
from bootstorm.simulator import Result, run_with

pytestmark = pytest.mark.slow

CNIS = ("veth", "ipvlan", "macvlan", "ipvtap", "macvtap", "tc-routing", "vhost-user", "ebpf")


def _storm(cni: str, **changes: object) -> Result:
    # dict arguments are not hashable: freeze them for the cache
    frozen = {k: tuple(sorted(v.items())) if isinstance(v, dict) else v for k, v in changes.items()}
    return _cached(cni, tuple(sorted(frozen.items())))


@cache
def _cached(cni: str, changes: tuple[tuple[str, object], ...]) -> Result:
    kw = {k: dict(v) if isinstance(v, tuple) else v for k, v in changes}
    return simulate(Scenario(cni=cni, sandboxes=400, profile="paper-000", **kw))  # type: ignore[arg-type]


@cache
def _at_seed(cni: str, seed: int) -> Result:
    scenario = Scenario(cni=cni, sandboxes=400, profile="paper-000")  # type: ignore[arg-type]
    return run_with(compile_scenario(scenario, seed=seed), "compiled")


# --- the rows that are one number, on the mean of ten unseen seeds ---------------


#: Checks that miss on the mean of seeds 1001-1010, with the registry entry.
ROWS = PaperRows(
    "paper-000",
    sandboxes=400,
    expected_miss={
        "S0-3/no-network:no-network RTNL contention": "S0-3/no-network",
        "S0-5/gap:ipvtap ahead of the second best": "S0-5/gap",
        "S0-11/veth:2 QoS rules per vPort, veth": "S0-11/veth",
    },
)


@pytest.mark.parametrize("key", ROWS.params())
@checks_rows(
    "S0-1",
    "S0-2",
    "S0-3/contention",
    "S0-3/no-network",
    "S0-3/acquisitions",
    "S0-4",
    "S0-5/ebpf",
    "S0-5/gap",
    "S0-6/cut",
    "S0-6/near-none",
    "S0-11/veth",
)
def test_row_on_the_mean_of_ten_unseen_seeds(key: str) -> None:
    ROWS.judge(key)


@checks_rows("S0-1", "S0-1/edge")
@pytest.mark.xfail(strict=True, raises=AssertionError, reason=known_miss("S0-1/edge").reason)
def test_s0_1_on_twenty_other_unseen_seeds() -> None:
    """S0-1 holds on 1001-1010 (+4.8%) and not on 1011-1030 (+5.2%): a fit
    row on its tolerance's edge is a known miss, and a what-if of the
    no-network storm says so. A mechanism that moves it inside will XPASS here."""
    makespans = [_at_seed("no-network", seed).makespan_s for seed in range(1011, 1031)]
    mean = float(np.mean(makespans))
    assert abs(mean - 10.0) <= 0.05 * 10.0, f"{mean:.3f} s against 10 s"


@checks_rows("S0-4")
def test_s0_4_ipvtap_share_is_above_59_percent() -> None:
    for seed in CHECK_SEEDS[:3]:
        lock = _at_seed("ipvtap", seed).locks["rtnl"]
        share = (
            lock.acquisitions_by_stage["AttachIf"] + lock.acquisitions_by_stage["StartVM"]
        ) / lock.acquisitions
        assert share > 0.59, seed


@checks_rows("S0-7")
def test_s0_7_pool_memory_for_400_vports_and_400x400_ipvtaps() -> None:
    """S0-7 (fit: costs.pool_device_mib was set from it): a storm of 400
    tenants with 400 pooled vPorts and 400 x 400 pooled ipvtaps reports about
    50 GB of pool memory. It goes through the scenario's compilation (per-kind
    pools, the profile's per-device memory), not the profile's numbers alone."""
    result = _storm("ipvtap", tenants=400, pools={"vport": 400, "ipvtap": 400 * 400})
    assert result.pool_memory_mib * 2**20 == pytest.approx(50e9, rel=0.05)


# --- predict rows -------------------------------------------------------------


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=known_miss("S0-5/order").reason)
@checks_rows("S0-5/order", "S0-5/slower-than-none")
def test_s0_5_ipvtap_and_macvtap_best_of_the_kernel_datapath_cnis() -> None:
    """S0-5 (a fit: costs.mutex_wake_s was chosen against it): every CNI is
    slower than no-network; ipvtap ≈ macvtap are the best. vhost-user is left
    out of the order: its OVS-DPDK port setup cost (costs.vhost_user_setup_s)
    has no source, so its place is not a prediction."""
    nonet = _storm("no-network").makespan_s
    spans = {cni: _storm(cni).makespan_s for cni in CNIS}
    assert all(m > nonet for m in spans.values()), spans
    assert spans["macvtap"] == pytest.approx(spans["ipvtap"], rel=0.05)
    for cni in ("veth", "ipvlan", "macvlan", "tc-routing", "ebpf"):
        assert spans["ipvtap"] < spans[cni], (cni, spans)


@checks_rows("S0-11/sharing")
def test_s0_11_qos_barely_touches_sharing_mode_cnis() -> None:
    """S0-11 (predict): 2 QoS rules per vPort cost the sharing-mode CNIs (one
    vPort per tenant), tc-routing (one vPort) and vhost-user (QoS in DPDK,
    no RTNL) less than +4%."""
    for cni in ("ipvlan", "ipvtap", "tc-routing", "vhost-user"):
        rise = _storm(cni, qos_rules=2).makespan_s / _storm(cni).makespan_s - 1.0
        assert rise < 0.04, (cni, rise)


@checks_rows("S0-11/veth-direction")
def test_s0_11_qos_on_veth_grows_the_storm() -> None:
    """S0-11, veth (predict), the direction: each pod's vPort carries its own
    rules, and every database change makes vswitchd re-send all of them
    (``experiments/bench_ovs_qos.py``), so QoS costs veth more than any
    sharing-mode CNI."""
    rise = {
        cni: _storm(cni, qos_rules=2).makespan_s / _storm(cni).makespan_s - 1.0
        for cni in ("veth", "ipvlan", "ipvtap", "tc-routing")
    }
    assert rise["veth"] > 0.05 and rise["veth"] == max(rise.values()), rise


TENANTS = (1, 50, 100, 200)


@checks_rows("S0-13/no-qos")
def test_s0_13_tenants_change_nothing_without_qos() -> None:
    """S0-13 (predict): 400 sandboxes spread evenly over 1 to 200 tenants
    change ipvlan's and ipvtap's storm by less than 4% (the bound S0-12's
    "no change" uses) when no QoS is set."""
    for cni in ("ipvlan", "ipvtap"):
        base = _storm(cni).makespan_s
        for tenants in TENANTS[1:]:
            change = _storm(cni, tenants=tenants).makespan_s / base - 1.0
            assert abs(change) < 0.04, (cni, tenants, change)


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason=known_miss("S0-13/qos-tenants").reason,
)
@checks_rows("S0-13/qos-tenants")
def test_s0_13_with_qos_tenants_grow_the_storm_past_tc_routing() -> None:
    """S0-13 (predict): with QoS, more tenants (one vPort each, with rules)
    grow ipvlan's and ipvtap's storm, past tc-routing's near 200 tenants."""
    tc_routing = _storm("tc-routing", qos_rules=2).makespan_s
    for cni in ("ipvlan", "ipvtap"):
        spans = [_storm(cni, tenants=t, qos_rules=2).makespan_s for t in TENANTS]
        assert spans == sorted(spans), (cni, spans)
        assert spans[-1] == pytest.approx(tc_routing, rel=PREDICT_TOLERANCE) or (
            spans[-1] > tc_routing
        ), (cni, spans, tc_routing)


@checks_rows("S0-12/many-rules")
def test_s0_12_security_group_rules_grow_the_storm_once_they_dominate() -> None:
    """S0-12, 50 and 100 rules — a *fit* in part: the costs are measured
    (``experiments/bench_ovs_flows.py``: vswitchd 0.44 ms and the client 2.5 ms
    per ``ovs-ofctl add-flow``), but one call per rule, rather than a batch
    per pod, was chosen because seed 000 says these counts make the insertion
    dominate. 50 and 100 rules per pod make the storm longer, and AddCNI
    becomes the longest stage."""
    for cni in ("ipvlan", "ipvtap", "tc-routing"):
        base = _storm(cni).makespan_s
        at50, at100 = _storm(cni, sg_rules=50), _storm(cni, sg_rules=100)
        assert base < at50.makespan_s < at100.makespan_s, cni
        assert max(at100.stages, key=lambda s: at100.stages[s].mean_s) == "AddCNI"


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=known_miss("S0-12/ten-rules").reason)
@checks_rows("S0-12/ten-rules")
def test_s0_12_ten_rules_change_nothing() -> None:
    """S0-12: 0 → 10 security-group rules per pod: no change (within ±4%).

    Ten calls hold vswitchd 4.4 ms per pod (1.8 s over the storm) and cost the
    pod 25 ms of its own CPU: +1.9 to +3.5% (ipvtap the most). Narrowly: at the
    top of the measured range (0.48 ms, 2.8 ms) ipvtap is at +4.0%. With the
    former unsourced 1.5 ms per flow, the serialised inserts metered sandboxes
    into the RTNL-heavy stages and shortened the storm by 9-35%."""
    for cni in ("ipvlan", "ipvtap", "tc-routing"):
        change = _storm(cni, sg_rules=10).makespan_s / _storm(cni).makespan_s - 1.0
        assert abs(change) < 0.04, (cni, change)


@pytest.mark.parametrize(
    "cni",
    ["veth", "ipvlan", "ipvtap", "tc-routing", "vhost-user", pytest.param("ebpf", id="ebpf")],
)
@checks_rows("S0-14", "S0-14/ebpf")
def test_s0_14_network_at_least_doubles_spinning(cni: str) -> None:
    """S0-14 (predict): spinlock spinning with network >= 2.05 x no-network, for
    every CNI, eBPF included. The no-network baseline is tiny (about 0.003
    core-s) and swings by 2x between seeds, so one seed's ratio says little: the
    ratio of the means over the ten check seeds is held, and the baseline must
    be measurably above zero at every seed."""
    base = [_at_seed("no-network", s).cpu.spin_core_s for s in CHECK_SEEDS]
    assert min(base) > 0.0
    spin = [_at_seed(cni, s).cpu.spin_core_s for s in CHECK_SEEDS]
    assert float(np.mean(spin)) >= 2.05 * float(np.mean(base)), (cni, spin, base)


# --- stage attribution (seed 000 §4.1.1 and §4.2, Fig. 6) ----------------------
# Not rows of PAPER-TARGETS.md but statements of the seed's text about its
# Fig. 6 (mean time per stage); never fitted, so they are predictions.


def _stage_s(cni: str, stage: str) -> float:
    stats = _storm(cni).stages.get(stage)
    return stats.mean_s if stats is not None else 0.0


def _stage_gains(slower: str, faster: str) -> dict[str, float]:
    """How much shorter each stage is on average for ``faster`` than for ``slower``."""
    return {st: _stage_s(slower, st) - _stage_s(faster, st) for st in STAGES}


@checks_rows("S0-Fig6/ipvtap-addcni")
def test_fig6_ipvtap_addcni_is_longer_than_veths() -> None:
    """§4.1.1: "its AddCNI time is much larger compared with that of veth":
    an ipvtap device costs more to make than a veth pair, which outweighs
    making one vPort instead of one per pod."""
    assert _stage_s("ipvtap", "AddCNI") > 1.5 * _stage_s("veth", "AddCNI")


@pytest.mark.xfail(
    strict=True, raises=AssertionError, reason=known_miss("S0-Fig6/ipvtap-cgroup").reason
)
@checks_rows("S0-Fig6/ipvtap-cgroup")
def test_fig6_ipvtap_gains_on_veth_mainly_in_cgroup() -> None:
    """§4.1.1: "the superior performance of ipvtap mainly comes from the
    reduction of Cgroup time" (Fig. 6b against 6e): of the stages, Cgroup
    is the one ipvtap shortens most, and ipvtap starts faster."""
    gains = _stage_gains("veth", "ipvtap")
    assert _storm("ipvtap").startup.mean < _storm("veth").startup.mean
    assert gains["Cgroup"] > 0.0
    assert max(gains, key=gains.__getitem__) == "Cgroup", gains


@pytest.mark.xfail(
    strict=True, raises=AssertionError, reason=known_miss("S0-Fig6/ipvtap-cgroup").reason
)
@checks_rows("S0-Fig6/ipvtap-cgroup")
def test_fig6_ipvtap_shortens_cgroup_against_veth() -> None:
    """What does hold of the statement above: ipvtap's Cgroup is shorter than
    veth's, by at least a third of the mean startup's difference."""
    gains = _stage_gains("veth", "ipvtap")
    mean_gain = _storm("veth").startup.mean - _storm("ipvtap").startup.mean
    assert gains["Cgroup"] > mean_gain / 3.0 > 0.0, (gains, mean_gain)


@pytest.mark.xfail(
    strict=True, raises=AssertionError, reason=known_miss("S0-Fig6/ipvlan-cgroup").reason
)
@checks_rows("S0-Fig6/ipvlan-cgroup")
def test_fig6_ipvlan_grows_cgroup_the_most() -> None:
    """§4.2: "Compared with the no-network case in Fig. 6a, the use of ipvlan
    CNI in Fig. 6d greatly increases the Cgroup time and contributes the
    most to the time overhead": net_prio's RTNL take inside cgroup_mutex
    waits behind the other stages' RTNL work."""
    growth = {st: -gain for st, gain in _stage_gains("no-network", "ipvlan").items()}
    assert growth["Cgroup"] > 0.0, growth
    assert max(growth, key=growth.__getitem__) == "Cgroup", growth


@checks_rows("S0-Fig6/ebpf-addcni")
def test_fig6_ebpf_overhead_is_in_addcni() -> None:
    """§4.1.1: "poor startup performance of ebpf is caused by the enlarged
    AddCNI time". Not that AddCNI is eBPF's longest stage (the catalog puts the
    recompile there, so that is true by construction) but that the overhead
    over no network is AddCNI's: the other stages, which wait behind the
    verifier's hold and share the cores, together add less than a tenth of it."""
    growth = {st: _stage_s("ebpf", st) - _stage_s("no-network", st) for st in STAGES}
    total = _storm("ebpf").startup.mean - _storm("no-network").startup.mean
    others = sum(g for st, g in growth.items() if st != "AddCNI")
    assert total > 0.0 and others < 0.1 * total, (growth, total)


@checks_rows("S0-Fig6/vhost-startvm")
def test_fig6_vhost_user_startvm_grows_over_no_network() -> None:
    """§4.1.1: lock contention is "the underlying reason for the noticeable
    time increase in StartVM stage of vhostuser"."""
    assert _stage_s("vhost-user", "StartVM") > 1.05 * _stage_s("no-network", "StartVM")
