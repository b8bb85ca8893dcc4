"""Two costs ``measure-ops`` measures alone and a fit keeps as measured: a
node agent's own CPU per plumbed namespace its refill worker makes and
removes (``agent_devices``: ``testbed.agent_make_cpu_s`` /
``agent_remove_cpu_s``), and the grace period a lone ``cgroup.procs``
write waits inside cgroup_mutex (``cgroup_attach_idle`` less
``cgroup_attach``: ``testbed.cgroup_attach_grace_s``). The file keeps
them and reads one without them, a bad field is one line, and a profile
holds them with their sources."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ops_times import operation_times

from bootstorm import simulate
from bootstorm.calibration import trace_fit
from bootstorm.calibration.measured_ops import AGENT_DEVICE_PATHS, GRACE_PATH, testbed_costs_from
from bootstorm.models import Scenario
from bootstorm.traces.operations import AgentDeviceCost, OperationTimes

OLD_OPS = Path(__file__).resolve().parents[2] / "traces" / "data" / "plan" / "ops.json"

#: Three rounds of 10 devices: per round, seconds over the round.
DEVICES = AgentDeviceCost(
    plugin="bridge",
    devices=10,
    make_wall_s=(0.12, 0.13, 0.14),
    make_user_s=(0.01, 0.01, 0.02),
    make_system_s=(0.01, 0.02, 0.01),
    make_children_s=(0.09, 0.10, 0.11),
    remove_wall_s=(0.33, 0.35, 0.34),
    remove_user_s=(0.02, 0.02, 0.03),
    remove_system_s=(0.01, 0.01, 0.01),
    remove_children_s=(0.08, 0.09, 0.08),
)


def _times(devices: AgentDeviceCost | None = DEVICES) -> OperationTimes:
    return operation_times(
        {
            "netlink_noop": (3e-4, 2e-4, 4e-4),
            "cgroup_attach": (1e-4, 2e-4, 1e-4),
            "cgroup_attach_idle": (8e-3, 8.1e-3, 7.9e-3),
        },
        agent_devices=devices,
    )


def test_per_device_figures_are_the_round_medians_over_the_devices() -> None:
    assert DEVICES.per_device_s("make", ("user_s", "system_s")) == pytest.approx(0.003)
    assert DEVICES.per_device_s("remove", ("user_s", "system_s")) == pytest.approx(0.003)
    assert DEVICES.per_device_s("remove", ("wall_s",)) == pytest.approx(0.034)
    assert DEVICES.rounds == 3


def test_the_file_keeps_them_and_reads_one_of_before() -> None:
    again = OperationTimes.from_json(_times().to_json())
    assert again.agent_devices == DEVICES
    assert OperationTimes.from_json(OLD_OPS.read_text()).agent_devices is None
    assert OperationTimes.from_json(_times(None).to_json()).agent_devices is None


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"devices": 0}, "agent_devices.devices"),
        ({"plugin": 3}, "agent_devices.plugin"),
        ({"make_user_s": []}, "agent_devices.make_user_s"),
        ({"remove_wall_s": [0.1, -1.0, 0.1]}, r"agent_devices.remove_wall_s\[1\]"),
        ({"make_wall_s": [0.1, 0.1]}, "one sample per round"),
    ],
)
def test_a_bad_field_is_one_line_naming_it(change: dict[str, object], message: str) -> None:
    data = json.loads(_times().to_json())
    data["agent_devices"].update(change)
    with pytest.raises(ValueError, match=message) as err:
        OperationTimes.from_json(json.dumps(data))
    assert "\n" not in str(err.value)


def test_the_costs_and_the_profile_carry_them_with_their_sources() -> None:
    costs = testbed_costs_from(_times())
    assert set(AGENT_DEVICE_PATHS) | {GRACE_PATH} <= set(costs)
    assert costs["testbed.agent_make_cpu_s"].value == pytest.approx(0.003)
    assert "wall 13 ms" in costs["testbed.agent_make_cpu_s"].how
    assert costs[GRACE_PATH].value == pytest.approx(8e-3 - 1e-4)
    profile = trace_fit.testbed_template(cores=2, memory_mib=4096, service_cv=0.0, measured=costs)
    assert profile.testbed is not None
    assert profile.testbed.agent_make_cpu_s == pytest.approx(0.003)
    assert profile.testbed.agent_remove_cpu_s == pytest.approx(0.003)
    assert profile.testbed.cgroup_attach_grace_s == pytest.approx(7.9e-3)
    for path in (*AGENT_DEVICE_PATHS, GRACE_PATH):
        assert "measure-ops" in profile.sources[path]
    bare = trace_fit.testbed_template(cores=2, memory_mib=4096, service_cv=0.0)
    assert bare.testbed is not None and bare.testbed.cgroup_attach_grace_s is None


def test_a_lone_attach_waits_a_grace_period_and_one_right_after_it_does_not() -> None:
    """With the grace measured, one VM's start pays it once in StartVM (its
    shim's attach); a second started within a grace period of the first's
    attach does not; a profile without it pays none (as before)."""
    grace_s = 0.05
    costs = testbed_costs_from(_times())
    base = trace_fit.testbed_template(
        cores=2, memory_mib=4096, service_cv=0.0, runtimes=("threads", "cni"), measured=costs
    )
    base = base.with_values(
        {"testbed.cni_exec_cpu_s": 0.003, "testbed.vm_boot_s": 0.05}, source="test"
    )
    assert base.testbed is not None
    with_grace = base.model_copy(
        update={"testbed": base.testbed.model_copy(update={"cgroup_attach_grace_s": grace_s})}
    )
    without = base.model_copy(
        update={"testbed": base.testbed.model_copy(update={"cgroup_attach_grace_s": None})}
    )
    one = Scenario(cni="testbed-cni-bridge", sandboxes=1, profile="local")
    alone = simulate(one, profile=with_grace).stage_time_s["StartVM"][0]
    before = simulate(one, profile=without).stage_time_s["StartVM"][0]
    assert alone - before == pytest.approx(grace_s, rel=1e-9)
    # Apart by more than a start: each pays; a moment apart: only the first.
    far = one.replace(sandboxes=2, arrival_s=(0.0, 5.0))
    near = one.replace(sandboxes=2, arrival_s=(0.0, 0.0001))
    far_s = simulate(far, profile=with_grace).locks["cgroup_mutex"].hold_s
    near_s = simulate(near, profile=with_grace).locks["cgroup_mutex"].hold_s
    assert far_s - near_s == pytest.approx(grace_s, rel=1e-6)
