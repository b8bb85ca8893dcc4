"""``bootstorm testbed measure-ops`` without root: the file, the cost mapping, the CLI's checks."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bootstorm.calibration.measured_ops import (
    CLIP_S,
    RTNL_NETNS_HOLD_DEFAULT_S,
    testbed_costs_from,
)
from bootstorm.traces import HostFacts
from bootstorm.traces.operations import (
    CNI_OPERATIONS,
    OPERATIONS,
    OperationTimes,
    OperationTiming,
)
from bootstorm.validation.testbed._errors import TestbedError
from bootstorm.validation.testbed.ops import measure_operations

HOST = HostFacts(kernel="6.1.0-test", cores=2, memory_mib=2048, hostname="h")
NOW = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)


def _ms(*xs: float) -> tuple[float, ...]:
    return tuple(x * 1e-3 for x in xs)


# Five samples each: numpy's linear quartiles fall on samples 2 and 4 (of 1..5).
SAMPLES = {
    "netlink_noop": _ms(0.1, 0.2, 0.3, 0.4, 0.5),  # median 0.3, q25 0.2, q75 0.4
    "netns_create": _ms(1.0, 1.2, 1.5, 1.6, 2.0),  # 1.5 (1.2, 1.6)
    "veth_in_netns": _ms(2.0, 2.1, 2.3, 2.5, 2.9),  # 2.3 (2.1, 2.5)
    "veth_on_host": _ms(2.0, 2.0, 2.0, 2.0, 2.0),
    "move_into_netns": _ms(15.0, 18.0, 19.0, 20.0, 30.0),  # 19 (18, 20)
    "link_up": _ms(0.5, 0.6, 0.7, 0.8, 0.9),  # 0.7 (0.6, 0.8)
    # pooled with link_up: 0.5 .. 1.4 in steps of 0.1 -> median 0.95, q25 0.725, q75 1.175
    "addr_add": _ms(1.0, 1.1, 1.2, 1.3, 1.4),
    "tap_create": _ms(0.3, 0.35, 0.4, 0.45, 0.5),  # 0.4 (0.35, 0.45)
    "tc_qdisc": _ms(0.6, 0.7, 0.8, 0.9, 1.0),  # 0.8 (0.7, 0.9)
    "tc_filter": _ms(1.2, 1.3, 1.4, 1.5, 1.6),  # 1.4 (1.3, 1.5)
    "cgroup_mkdir": _ms(0.1, 0.12, 0.13, 0.14, 0.2),  # 0.13 (0.12, 0.14)
    "cgroup_attach": _ms(0.15, 0.16, 0.17, 0.18, 0.19),  # 0.17 (0.16, 0.18)
    # The same after 100 ms idle: a grace period more, 7.83 (7.32, 8.34).
    "cgroup_attach_idle": _ms(7.0, 7.5, 8.0, 8.5, 9.0),
    "vm_spawn": _ms(0.5, 0.6, 0.7, 0.8, 0.9),  # 0.7 (0.6, 0.8)
    "vm_up": _ms(70.0, 72.0, 73.0, 75.0, 80.0),  # 73 (72, 75)
    # The CNI runtime's processes.
    "process_spawn": _ms(0.3, 0.35, 0.4, 0.45, 0.5),  # 0.4 (0.35, 0.45)
    "cni_exec": _ms(3.0, 3.2, 3.4, 3.6, 4.0),  # 3.4 (3.2, 3.6)
    "ipam_add": _ms(4.0, 4.5, 5.0, 5.5, 6.0),  # 5.0 (4.5, 5.5)
    "tc_exec": _ms(2.0, 2.2, 2.4, 2.6, 2.8),  # 2.4 (2.2, 2.6)
    "shim_start": _ms(40.0, 42.0, 44.0, 46.0, 50.0),  # 44 (42, 46)
    # host-local's ADD with HELD leases held: 9.0 (8.5, 9.5), 4 ms more than alone.
    "ipam_add_held": _ms(8.0, 8.5, 9.0, 9.5, 10.0),
    "bridge_enslave": _ms(0.5, 0.55, 0.6, 0.65, 0.7),  # 0.6 (0.55, 0.65)
    # The enslave with HELD ports on the bridge: 1.1 (1.05, 1.15), 0.5 ms more.
    "bridge_enslave_held": _ms(1.0, 1.05, 1.1, 1.15, 1.2),
}
HELD = 100


def _times(samples: dict[str, tuple[float, ...]] | None = None, **kw: Any) -> OperationTimes:
    samples = SAMPLES if samples is None else samples
    fields: dict[str, Any] = {
        "timings": tuple(OperationTiming(name=n, samples_s=s) for n, s in samples.items()),
        "host": HOST,
        "vm_mode": "qemu-microvm",
        "created_at": NOW,
        "repeats": 5,
        "warmup": 3,
        "run": "ab12",
        "notes": ("a note",),
        "held_leases": HELD,
        "held_ports": HELD,
    }
    fields.update(kw)
    return OperationTimes(**fields)


def test_operations_are_the_briefs_in_order() -> None:
    assert OPERATIONS[0] == "netlink_noop"
    assert OPERATIONS[11:13] == ("cgroup_attach", "cgroup_attach_idle")
    assert OPERATIONS[13:15] == ("vm_spawn", "vm_up")
    # The CNI runtime's processes come next, and only they need its plugins;
    # the enslave alone and with many ports held last, side by side.
    assert set(OPERATIONS[15:21]) == CNI_OPERATIONS
    assert OPERATIONS[21:] == ("bridge_enslave", "bridge_enslave_held")
    assert len(set(OPERATIONS)) == len(OPERATIONS) == 23
    assert tuple(SAMPLES) == OPERATIONS


def test_quartiles() -> None:
    t = OperationTiming(name="link_up", samples_s=_ms(0.5, 0.6, 0.7, 0.8, 0.9))
    assert t.median_s == pytest.approx(0.7e-3)
    assert t.q25_s == pytest.approx(0.6e-3)
    assert t.q75_s == pytest.approx(0.8e-3)
    one = OperationTiming(name="link_up", samples_s=(2e-3,))
    assert one.median_s == one.q25_s == one.q75_s == 2e-3


def test_json_round_trip() -> None:
    times = _times()
    back = OperationTimes.from_json(times.to_json())
    assert back == times
    assert back["vm_up"].samples_s == SAMPLES["vm_up"]
    assert "vm_up" in back and "nope" not in back
    with pytest.raises(KeyError, match="'nope' was not measured"):
        back["nope"]


def test_json_without_optional_fields() -> None:
    data = json.loads(_times().to_json())
    for key in ("run", "warmup", "notes"):
        del data[key]
    back = OperationTimes.from_json(json.dumps(data))
    assert back.run is None and back.warmup == 0 and back.notes == ()


def _broken(edit: Any) -> str:
    data = json.loads(_times().to_json())
    edit(data)
    return json.dumps(data)


@pytest.mark.parametrize(
    ("edit", "names"),
    [
        (lambda d: d.update(vm_mode="kvm"), ["vm_mode", "'kvm'"]),
        (lambda d: d.update(repeats=0), ["repeats", "0"]),
        (lambda d: d.update(repeats="5"), ["repeats", "'5'"]),
        (lambda d: d.update(warmup=-1), ["warmup", "-1"]),
        (lambda d: d.update(schema_version=9), ["schema_version", "9"]),
        (lambda d: d.update(created_at="yesterday"), ["created_at", "'yesterday'"]),
        (lambda d: d.update(created_at="2025-01-02T03:04:05"), ["created_at", "2025"]),
        (lambda d: d.pop("timings"), ["timings", "missing"]),
        (lambda d: d.update(timings={}), ["timings", "{}"]),
        (lambda d: d["host"].update(cores=0), ["host.cores", "0"]),
        (lambda d: d["host"].pop("kernel"), ["host.kernel", "missing"]),
        (lambda d: d.update(host=[]), ["host", "[]"]),
        (lambda d: d["timings"][2].update(name="teleport"), ["timings[2].name", "'teleport'"]),
        (lambda d: d["timings"][1]["samples_s"].__setitem__(3, -0.5),
         ["timings[1].samples_s[3]", "-0.5"]),
        (lambda d: d["timings"][0]["samples_s"].__setitem__(0, "fast"),
         ["timings[0].samples_s[0]", "'fast'"]),
        (lambda d: d["timings"][4]["samples_s"].pop(), ["move_into_netns.samples_s", "4"]),
        (lambda d: d["timings"].append(d["timings"][0]), ["netlink_noop", "twice"]),
        (lambda d: d.update(notes=[1]), ["notes[0]", "1"]),
    ],
)  # fmt: skip
def test_malformed_json_names_field_and_value(edit: Any, names: list[str]) -> None:
    with pytest.raises(ValueError) as info:
        OperationTimes.from_json(_broken(edit))
    message = str(info.value)
    for name in names:
        assert name in message, message


def test_not_json_or_not_an_object() -> None:
    with pytest.raises(ValueError, match="not JSON"):
        OperationTimes.from_json("{")
    with pytest.raises(ValueError, match=r"\(top level\): expected a JSON object"):
        OperationTimes.from_json("[1, 2]")
    # A key twice (a hand edit): json.loads kept the last, and a fit took it.
    text = _times().to_json().replace('"warmup":', '"warmup": 3, "warmup":', 1)
    with pytest.raises(ValueError, match=r"^\(top level\): 'warmup' is given twice in an object$"):
        OperationTimes.from_json(text)


def test_construction_checks() -> None:
    with pytest.raises(
        ValueError, match=r"^samples_s\[1\]: must be a finite number > 0 s \(got 0\.0\)$"
    ):
        OperationTiming(name="link_up", samples_s=(1e-3, 0.0))
    with pytest.raises(ValueError, match=r"^name: must be one of netlink_noop, .* \(got 'x'\)$"):
        OperationTiming(name="x", samples_s=(1e-3,))
    with pytest.raises(ValueError, match="created_at"):
        _times(created_at=datetime(2025, 1, 1))  # naive on purpose


def test_cost_mapping_gives_known_values() -> None:
    costs = testbed_costs_from(_times())
    expected = {  # path: (value, low, high) in ms
        "testbed.py_op_cpu_s": (0.3, 0.2, 0.4),
        "testbed.netns_create_cpu_s": (1.0, 0.7, 1.1),  # netns_create - 0.5 ms
        "testbed.rtnl_veth_hold_s": (2.0, 1.7, 2.3),  # 2.3 - 0.3; 2.1 - 0.4; 2.5 - 0.2
        "testbed.rtnl_small_hold_s": (0.65, 0.325, 0.975),  # pooled 0.95 (0.725, 1.175) - noop
        "testbed.rtnl_tap_hold_s": (0.4, 0.35, 0.45),
        "testbed.rtnl_tc_hold_s": (0.8, 0.6, 1.0),  # mean 1.1 (1.0, 1.2) - noop
        "testbed.rcu_grace_s": (18.3, 17.2, 19.4),  # 19 - 0.7; 18 - 0.8; 20 - 0.6
        "testbed.cgroup_mkdir_hold_s": (0.13, 0.12, 0.14),
        "testbed.cgroup_attach_hold_s": (0.17, 0.16, 0.18),
        "testbed.vm_spawn_cpu_s": (0.7, 0.6, 0.8),
        "testbed.spawn_cpu_s": (0.4, 0.35, 0.45),
        "testbed.cni_exec_cpu_s": (3.0, 2.75, 3.25),  # 3.4 - 0.4; 3.2 - 0.45; 3.6 - 0.35
        "testbed.ipam_hold_s": (1.6, 0.9, 2.3),  # 5.0 - 3.4; 4.5 - 3.6; 5.5 - 3.2
        "testbed.tc_exec_cpu_s": (2.0, 1.75, 2.25),  # 2.4 - 0.4
        "testbed.shim_start_cpu_s": (43.6, 41.55, 45.65),  # 44 - 0.4; 42 - 0.45; 46 - 0.35
        "testbed.vm_boot_total_s": (72.3, 71.2, 74.4),  # 73 - 0.7; 72 - 0.8; 75 - 0.6
        # (9.0 - 5.0; 8.5 - 5.5; 9.5 - 4.5) over the 100 leases held
        "testbed.ipam_per_lease_s": (0.04, 0.03, 0.05),
        # (1.1 - 0.6; 1.05 - 0.65; 1.15 - 0.55) over the 100 ports held
        "testbed.enslave_per_port_s": (0.005, 0.004, 0.006),
        # 8.0 - 0.17; 7.5 - 0.18; 8.5 - 0.16: a lone attach's grace period
        "testbed.cgroup_attach_grace_s": (7.83, 7.32, 8.34),
    }
    assert list(costs) == list(expected)
    for path, (value, low, high) in expected.items():
        c = costs[path]
        assert c.path == path
        got = (c.value * 1e3, c.low * 1e3, c.high * 1e3)
        assert got == pytest.approx((value, low, high), abs=1e-9), path
        assert "clipped" not in c.how
        assert "\n" not in c.how
    assert "veth_in_netns − netlink_noop" in costs["testbed.rtnl_veth_hold_s"].how
    assert "move_into_netns − link_up" in costs["testbed.rcu_grace_s"].how
    assert "synchronize_net" in costs["testbed.rcu_grace_s"].how
    assert "vm_up − vm_spawn" in costs["testbed.vm_boot_total_s"].how
    assert "qemu-microvm" in costs["testbed.vm_boot_total_s"].how
    assert f"{RTNL_NETNS_HOLD_DEFAULT_S:g}" in costs["testbed.netns_create_cpu_s"].how


def test_differences_are_clipped_and_say_so() -> None:
    samples = dict(SAMPLES)
    samples["move_into_netns"] = _ms(0.1, 0.2, 0.3, 0.4, 0.5)  # faster than link_up
    samples["tc_qdisc"] = _ms(0.2, 0.3, 0.35, 0.5, 0.6)  # 0.35 (0.3, 0.5)
    samples["tc_filter"] = _ms(0.1, 0.2, 0.25, 0.3, 0.4)  # 0.25 (0.2, 0.3)
    costs = testbed_costs_from(_times(samples))
    rcu = costs["testbed.rcu_grace_s"]
    assert (rcu.value, rcu.low, rcu.high) == (CLIP_S, CLIP_S, CLIP_S)
    assert "clipped at 1e-06 s" in rcu.how
    assert "value (was -0.0004 s)" in rcu.how
    tc = costs["testbed.rtnl_tc_hold_s"]  # mean 0.3 (0.25, 0.4) - noop 0.3 (0.2, 0.4)
    assert tc.value == CLIP_S  # 0 exactly is below the clip too
    assert tc.low == CLIP_S
    assert tc.high == pytest.approx(0.2e-3)
    assert "value" in tc.how and "low" in tc.how and "high (was" not in tc.how
    assert all(c.value >= CLIP_S and c.low >= CLIP_S for c in costs.values())


def test_costs_of_a_partial_measurement() -> None:
    samples = {n: SAMPLES[n] for n in ("netlink_noop", "link_up", "move_into_netns")}
    costs = testbed_costs_from(_times(samples))
    assert set(costs) == {"testbed.py_op_cpu_s", "testbed.rcu_grace_s"}


def test_netns_hold_default_is_the_fits_start_value() -> None:
    from bootstorm.calibration.trace_fit import testbed_template

    profile = testbed_template(cores=2, memory_mib=2048, service_cv=0.3)
    assert profile.testbed is not None
    assert profile.testbed.rtnl_netns_hold_s == RTNL_NETNS_HOLD_DEFAULT_S


def test_bad_arguments_name_themselves() -> None:
    with pytest.raises(ValueError, match=r"repeats: .* but got 0"):
        measure_operations(repeats=0)
    with pytest.raises(ValueError, match=r"warmup: .* but got -2"):
        measure_operations(warmup=-2)
    with pytest.raises(ValueError, match="ops: unknown operation 'fly'"):
        measure_operations(ops=("link_up", "fly"))


def test_needs_root(monkeypatch: pytest.MonkeyPatch) -> None:
    from bootstorm.validation.testbed import ops

    monkeypatch.setattr(ops.os, "geteuid", lambda: 1000)
    with pytest.raises(TestbedError, match="root"):
        measure_operations(repeats=1, warmup=0, vm=False)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from bootstorm.cli import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--repeats", "0"], ["repeats", "0"]),
        (["--warmup", "-1"], ["warmup", "-1"]),
        (["--output", "/nonexistent-dir-xyz/ops.json"], ["output", "/nonexistent-dir-xyz"]),
    ],
)
def test_cli_bad_options_exit_2_naming_them(args: list[str], names: list[str]) -> None:
    done = _cli("testbed", "measure-ops", *args)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    for name in names:
        assert name in lines[0]


def test_cli_help_lists_measure_ops(tmp_path: Path) -> None:
    done = _cli("testbed", "measure-ops", "--help")
    assert done.returncode == 0, done.stderr
    for option in ("--repeats", "--warmup", "--no-vm", "--output", "--json"):
        assert option in done.stdout
