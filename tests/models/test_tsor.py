"""Seed 003's TSoR as a CNI family: what a pod's start does, and what it costs.

The paper times none of it (its figures are the data plane's, tests/calibration/
test_paper_003.py): these tests hold the mechanisms it describes (§4.1.3,
§4.2.2, §4.5.2, §7) and that every assumed cost reaches the planner.
"""

from __future__ import annotations

import pytest

from bootstorm.calibration import caveats
from bootstorm.cli import main
from bootstorm.models import (
    ConfigError,
    Scenario,
    cni_family,
    compile_scenario,
    load_profile,
    run_scenario,
    scenario_pool_kinds,
    scenario_stages,
)
from bootstorm.models.tsor import TSOR_SERVICE, TSOR_VARIANTS

TSOR = tuple(TSOR_VARIANTS)
#: No service-time jitter: a variant's extra wait shows exactly.
STEADY = load_profile("paper-003").with_values({"service_cv": 0.0}, source="test")


def _run(cni: str, n: int = 50, **changes: object):  # type: ignore[no-untyped-def]
    scenario = Scenario(cni=cni, sandboxes=n, profile="paper-003").replace(**changes)
    return run_scenario(scenario, profile=STEADY, seed=0)


def test_the_family_and_its_stages() -> None:
    for cni in TSOR:
        assert cni_family(cni).name == "tsor"
        # No device to attach: seed 000's stages less AttachIf; only a namespace pools.
        assert scenario_stages(cni) == ("NetNS", "AddCNI", "Cgroup", "StartVM")
        assert scenario_pool_kinds(cni) == ("netns",)


@pytest.mark.parametrize("cni", TSOR)
def test_a_pod_makes_no_network_device(cni: str) -> None:
    """Static CIDR and node-level connections: RTNL only for the namespace's
    loopback and net_prio's two operations (ipvtap makes 15)."""
    result = _run(cni)
    assert result.locks["rtnl"].acquisitions == 3 * 50
    assert result.locks[TSOR_SERVICE].acquisitions == (50 if TSOR_VARIANTS[cni].shared_qp else 100)


def test_the_service_keeps_its_core() -> None:
    """Seed 003 §7: the TSoR Service costs one host core, held from the storm."""
    scenario = Scenario(cni="tsor", sandboxes=10, profile="paper-003")
    kept = compile_scenario(scenario).machine.reserved_cores
    none = compile_scenario(
        scenario, profile=load_profile("paper-003").with_values({"tsor.service_cores": 0.0})
    ).machine.reserved_cores
    assert kept - none == pytest.approx(1.0)
    with pytest.raises(ConfigError, match=r"^cores: tsor's node service keeps 1 cores"):
        compile_scenario(scenario.replace(cores=1))


def test_the_designs_the_paper_argues_against_cost_what_they_wait_for() -> None:
    """Without jitter, a dynamic IP adds its propagation to every start and a
    per-pod QP its setup and registration (one pod at a time: no queue)."""
    tsor = STEADY.tsor
    assert tsor is not None
    one = _run("tsor", 1).startup.mean
    assert _run("tsor-dynamic-ip", 1).startup.mean - one == pytest.approx(tsor.ip_propagation_s)
    qp = tsor.qp_setup_s + tsor.mr_register_s
    assert _run("tsor-qp-per-pod", 1).startup.mean - one == pytest.approx(qp)


def test_the_one_service_serves_pods_one_at_a_time() -> None:
    """At the assumed 0.6 ms a pod the service never queues: cgroup_mutex
    spaces the pods' arrival at StartVM further apart than that. A registration
    ten times the Cgroup stage's spacing makes them wait behind each other."""
    scenario = Scenario(cni="tsor-qp-per-pod", sandboxes=200, profile="paper-003")
    assert run_scenario(scenario, profile=STEADY).locks[TSOR_SERVICE].contended == 0
    slow = STEADY.with_values({"tsor.mr_register_s": 0.2}, source="test")
    waits = run_scenario(scenario, profile=slow).locks[TSOR_SERVICE]
    assert waits.contended > 0 and waits.wait_s > 0.0


def test_tsor_starts_a_storm_faster_than_ipvtap_on_seed_000s_host() -> None:
    """No device and no RTNL-heavy CNI: near no-network, well ahead of ipvtap."""
    spans = {
        cni: run_scenario(Scenario(cni=cni, sandboxes=200), seed=0).makespan_s
        for cni in ("tsor", "ipvtap", "no-network")
    }
    assert spans["no-network"] <= spans["tsor"] < spans["ipvtap"]


@pytest.mark.parametrize("cni", TSOR)
def test_the_executors_agree(cni: str) -> None:
    """The reference (SimPy) and the compiled executor, bit for bit
    (tests/simulator/test_fast_equivalence.py runs every CNI on paper-000)."""
    from bootstorm.simulator import run_program, run_program_fast

    program = compile_scenario(Scenario(cni=cni, sandboxes=40, profile="paper-003"))
    ref, fast = run_program(program), run_program_fast(program)
    assert fast.makespan_s == ref.makespan_s
    assert (fast.finish_s == ref.finish_s).all()


def test_a_profile_without_a_tsor_section_says_so() -> None:
    with pytest.raises(ConfigError, match=r"has no `tsor` section .* e\.g\. profile paper-000"):
        compile_scenario(Scenario(cni="tsor", sandboxes=4, profile="paper-001"))


def test_every_tsor_storm_names_its_assumed_costs() -> None:
    """The paper gives no startup number: each variant's assumptions reach the planner."""
    assert [m.key for m in caveats(Scenario(cni="tsor"))] == ["S3-M/assumed-costs"]
    assert [m.key for m in caveats(Scenario(cni="tsor-dynamic-ip"))] == [
        "S3-M/assumed-costs",
        "S3-M/dynamic-ip",
    ]
    assert [m.key for m in caveats(Scenario(cni="tsor-qp-per-pod"))] == [
        "S3-M/assumed-costs",
        "S3-M/qp-per-pod",
    ]
    said = " ".join(m.says for m in caveats(Scenario(cni="tsor-qp-per-pod")))
    for cost in ("tsor.client_register_s", "tsor.qp_setup_s", "tsor.mr_register_s"):
        assert cost in said


def test_simulate_tsor_prints_the_cautions(capsys: pytest.CaptureFixture[str]) -> None:
    """`bootstorm simulate --cni tsor --sandboxes 200` answers on the default
    profile and names the assumed costs."""
    try:
        main(["simulate", "--cni", "tsor", "--sandboxes", "200"])
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    assert code == 0, err
    flat = " ".join(out.split())
    assert "tsor_service" in flat
    assert "S3-M" in flat and "tsor.client_register_s" in flat
