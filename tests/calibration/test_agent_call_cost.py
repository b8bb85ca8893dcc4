"""What a call to a node agent costs, from ``measure-ops`` into a testbed
profile: the file keeps it (and reads one without it), the derived costs
carry it as ``testbed.agent_call_cpu_s`` / ``agent_serve_cpu_s``, a fitted
profile holds them with their sources, and a bad field is one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ops_times import operation_times

from bootstorm.calibration import trace_fit
from bootstorm.calibration.measured_ops import AGENT_CALL_PATHS, testbed_costs_from
from bootstorm.traces.operations import AgentCallCost, OperationTimes

DATA = Path(__file__).resolve().parents[2] / "traces" / "data"
#: Written by measure-ops before it timed an agent's calls.
OLD_OPS = DATA / "plan" / "ops.json"

CALLS = AgentCallCost(
    calls_per_batch=100,
    # Per batch of 100: the median batch is 0.08 s of the caller's CPU.
    client_cpu_s=(0.07, 0.08, 0.09, 0.08, 0.10),
    agent_cpu_s=(0.04, 0.04, 0.05, 0.03, 0.04),
    wall_s=(0.15, 0.14, 0.16, 0.15, 0.15),
)


def _times(calls: AgentCallCost | None) -> OperationTimes:
    return operation_times({"netlink_noop": (3e-4, 2e-4, 4e-4)}, agent_calls=calls)


def test_per_call_figures_are_the_batch_medians_over_the_calls() -> None:
    assert CALLS.per_call_s("client_cpu_s") == pytest.approx(0.08 / 100)
    assert CALLS.per_call_s("agent_cpu_s") == pytest.approx(0.04 / 100)
    assert CALLS.per_call_s("client_cpu_s", 25.0) == pytest.approx(0.08 / 100)
    assert CALLS.per_call_s("client_cpu_s", 75.0) == pytest.approx(0.09 / 100)


def test_the_file_keeps_them_and_reads_one_of_before() -> None:
    times = _times(CALLS)
    again = OperationTimes.from_json(times.to_json())
    assert again.agent_calls == CALLS
    old = OperationTimes.from_json(OLD_OPS.read_text())
    assert old.agent_calls is None
    assert OperationTimes.from_json(_times(None).to_json()).agent_calls is None


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"calls_per_batch": 0}, "agent_calls.calls_per_batch"),
        ({"client_cpu_s": []}, "agent_calls.client_cpu_s"),
        ({"agent_cpu_s": [0.1, "x", 0.1, 0.1, 0.1]}, r"agent_calls.agent_cpu_s\[1\]"),
        ({"wall_s": [0.1, 0.1]}, "one sample per batch"),
    ],
)
def test_a_bad_field_is_one_line_naming_it(change: dict[str, object], message: str) -> None:
    data = json.loads(_times(CALLS).to_json())
    data["agent_calls"].update(change)
    with pytest.raises(ValueError, match=message) as err:
        OperationTimes.from_json(json.dumps(data))
    assert "\n" not in str(err.value)


def test_the_costs_and_the_profile_carry_them_with_their_sources() -> None:
    costs = testbed_costs_from(_times(CALLS))
    assert set(AGENT_CALL_PATHS) <= set(costs)
    client = costs["testbed.agent_call_cpu_s"]
    assert client.value == pytest.approx(8e-4) and client.low <= client.value <= client.high
    profile = trace_fit.testbed_template(cores=2, memory_mib=4096, service_cv=0.1, measured=costs)
    assert profile.testbed is not None
    assert profile.testbed.agent_call_cpu_s == pytest.approx(8e-4)
    assert profile.testbed.agent_serve_cpu_s == pytest.approx(4e-4)
    assert "measure-ops" in profile.sources["testbed.agent_serve_cpu_s"]
    # Without the measurement the profile prices no call.
    bare = trace_fit.testbed_template(cores=2, memory_mib=4096, service_cv=0.1)
    assert bare.testbed is not None and bare.testbed.agent_call_cpu_s is None
