"""Each CNI plugin the testbed runs is a catalog variant (models/testbed.py):
its ADD's RTNL-taking requests as strace counted them on one ADD
(``experiments/count_cni_netlink.py``), the bridge's unchanged step by step,
and what-ifs of the plugin on a profile fitted to bridge storms."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from bootstorm.calibration.plan import PlanStorm, calibration_plan, candidate_storms
from bootstorm.models import Profile, Scenario, run_scenario
from bootstorm.models import testbed as tb
from bootstorm.simulator import Async, Cpu, Hold, Pooled, Sleep, Step

ROOT = Path(__file__).resolve().parents[2]
CNI_PLAN = ROOT / "traces" / "data" / "cni" / "plan"
#: RTNL-taking requests of one ADD, counted with strace (2026-11-28, plugins 1.1.1).
COUNTED = {"bridge": 8, "ptp": 9, "macvlan": 4}


def _holds(steps: Sequence[Step], lock: str) -> Iterator[tuple[str, float]]:
    """(label, hold) of each hold of ``lock``, in order (a pool's creating path)."""
    for step in steps:
        if isinstance(step, Hold):
            if step.lock == lock:
                body = next(s for s in step.body if isinstance(s, Cpu | Sleep))
                yield body.label, body.duration_s if isinstance(body, Sleep) else body.work_s
            yield from _holds(step.body, lock)
        elif isinstance(step, Pooled):
            yield from _holds(step.create, lock)
        elif isinstance(step, Async):
            pass


def _add(truth: Profile, cni: str, **scenario: object) -> tuple[Step, ...]:
    assert truth.testbed is not None
    plan = tb.testbed_plan(
        Scenario(cni=cni, sandboxes=8, **scenario),
        truth.testbed,
        variant=tb.TESTBED_CNIS[cni],
    )
    return next(s.steps for s in plan if s.name == "AddCNI")


@pytest.mark.parametrize("plugin", ["bridge", "ptp", "macvlan"])
def test_each_plugin_is_a_variant_whose_add_holds_rtnl_as_counted(
    truth: Profile, plugin: str
) -> None:
    cni = f"testbed-cni-{plugin}"
    variant = tb.TESTBED_CNIS[cni]
    assert (variant.runtime, variant.plugin, variant.recorded) == ("cni", plugin, f"cni-{plugin}")
    holds = list(_holds(_add(truth, cni), "rtnl"))
    assert len(holds) == COUNTED[plugin]
    before, after = tb.CNI_ADD_REQUESTS[plugin]
    assert [label for label, _ in holds] == [*before, *after]
    assert [label for label, _ in _holds(_add(truth, cni), tb.IPAM_LOCK)] == ["lease"]


def test_the_bridge_add_is_unchanged_step_by_step(truth: Profile) -> None:
    """The steps the bridge's ADD was built of before the other plugins came
    (so every recorded bridge prediction stays bit-identical)."""
    c = truth.testbed
    assert c is not None and c.cni_exec_cpu_s is not None
    holds = list(_holds(_add(truth, "testbed-cni-bridge"), "rtnl"))
    small = c.rtnl_small_hold_s
    assert holds == [
        ("bridge (EEXIST)", small),
        ("bridge up", small),
        ("veth pair", c.rtnl_veth_hold_s),
        ("host end up", small),
        ("enslave", small),
        ("hairpin", small),
        ("address", small),
        ("eth0 up", small),
    ]
    add = _add(truth, "testbed-cni-bridge")
    labels = [s.label for s in add if isinstance(s, Cpu)]
    assert labels == ["bridge start", "host-local start"]
    assert isinstance(add[0], Hold) and add[0].lock == tb.GIL
    # the lease between the eighth request's predecessors and the address
    kinds = [s.lock if isinstance(s, Hold) else type(s).__name__ for s in add]
    assert kinds.index(tb.IPAM_LOCK) == 9 and len(kinds) == 12


def test_ptp_asks_for_its_address_first_and_macvlan_makes_one_netdev(truth: Profile) -> None:
    c = truth.testbed
    assert c is not None
    ptp = _add(truth, "testbed-cni-ptp")
    kinds = [s.lock if isinstance(s, Hold) else type(s).__name__ for s in ptp]
    assert kinds[:4] == [tb.GIL, "Cpu", "Cpu", tb.IPAM_LOCK]  # exec, start, host-local, lease
    macvlan = dict(_holds(_add(truth, "testbed-cni-macvlan"), "rtnl"))
    assert macvlan["macvlan link"] == pytest.approx(c.rtnl_veth_hold_s * tb.MACVLAN_PER_VETH_PAIR)
    assert 0 < tb.MACVLAN_PER_VETH_PAIR < 1


def test_a_plumbed_namespace_skips_each_plugins_add(truth: Profile) -> None:
    for plugin in ("ptp", "macvlan"):
        add = _add(truth, f"testbed-cni-{plugin}", pools={"netns-veth": 8})
        assert list(_holds(add, "rtnl")) == []


def test_fewer_requests_make_a_shorter_add(truth: Profile) -> None:
    """On one profile, macvlan's ADD (4 RTNL requests, one netdev) is shorter
    than the bridge's (8); ptp's (9, all after host-local's lease) differs.
    Not a monotone rule: where in the ADD the requests fall moves the queue
    they meet (docs/testbed.md, "Another plugin, predicted")."""
    add = {}
    for plugin in ("bridge", "ptp", "macvlan"):
        result = run_scenario(
            Scenario(cni=f"testbed-cni-{plugin}", sandboxes=40), seed=0, profile=truth
        )
        add[plugin] = float(result.stage_time_s["AddCNI"].mean())
    assert add["macvlan"] < add["bridge"] != add["ptp"]


def test_the_plan_runs_a_storm_of_each_plugin_the_search_may_switch_to() -> None:
    storms = candidate_storms(sandboxes=40, runtime="cni", plugins=("bridge", "ptp", "macvlan"))
    others = [s for s in storms if s.plugin != "bridge"]
    assert [(s.name, s.scenario().cni) for s in others] == [
        ("cni-ptp-40", "testbed-cni-ptp"),
        ("cni-macvlan-40", "testbed-cni-macvlan"),
    ]
    plan = calibration_plan(sandboxes=50, runtime="cni", plugins=("ptp",))
    assert "cni-ptp-50" in [s.name for s in plan.storms]
    assert all(s.plugin == "bridge" for s in calibration_plan(sandboxes=50, runtime="cni").storms)
    with pytest.raises(ValueError, match=r"^plugins: unknown plugin 'ipvlan'"):
        candidate_storms(sandboxes=40, runtime="cni", plugins=("ipvlan",))
    with pytest.raises(ValueError, match=r"^plugin: must be one of the plugins of the threads"):
        PlanStorm(sandboxes=40, runtime="threads", plugin="ptp")


def test_simulate_answers_a_ptp_what_if_on_the_bridge_fitted_profile() -> None:
    from typer.testing import CliRunner

    from bootstorm.cli import app

    argv = ["simulate", "--profile", str(CNI_PLAN / "local.yaml"), "--sandboxes", "30"]
    out = {}
    for plugin in ("bridge", "ptp", "macvlan"):
        res = CliRunner().invoke(app, [*argv, "--cni", f"testbed-cni-{plugin}", "--json"])
        assert res.exit_code == 0, res.output
        out[plugin] = json.loads(res.stdout)
    assert out["ptp"]["makespan_s"] != out["bridge"]["makespan_s"]
    assert out["macvlan"]["makespan_s"] > 0
    # The profile saw bridge storms only: a ptp what-if says it is a prediction.
    assert out["bridge"]["plugin_cautions"] == []
    ptp = out["ptp"]["plugin_cautions"]
    assert len(ptp) == 2 and "not AddCNI's share" in ptp[0]
    assert "fitted to no storm of cni-ptp" in ptp[1] and "--cni-plugin ptp" in ptp[1]


def test_a_profile_fitted_to_a_storm_of_the_plugin_drops_the_prediction_caution(
    truth: Profile,
) -> None:
    assert tb.plugin_cautions("testbed-cni-bridge", truth) == ()
    assert tb.plugin_cautions("veth", truth) == ()
    assert len(tb.plugin_cautions("testbed-cni-macvlan", truth)) == 2
    seen = truth.model_copy(
        update={"sources": {**truth.sources, "service_cv": "fit: 50 × testbed-cni-macvlan"}}
    )
    (line,) = tb.plugin_cautions("testbed-cni-macvlan", seen)
    assert line.startswith("testbed-cni-macvlan: its ADD is priced")
