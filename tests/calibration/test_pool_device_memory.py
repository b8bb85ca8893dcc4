"""The memory a pooled device holds, from ``measure-ops`` into a testbed profile.

The measurement's file keeps it (and reads a file without it), the derived
costs carry it as ``testbed.pool_device_mib.<kind>``, a testbed profile
holds it with its source, and a what-if on the node prices its pools with it.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bootstorm.calibration import trace_fit
from bootstorm.calibration.measured_ops import (
    POOL_MEMORY_PATH,
    MeasuredCost,
    pool_memory_of,
    testbed_costs_from,
)
from bootstorm.models import ConfigError, Profile, Scenario, run_scenario
from bootstorm.optimizers import SearchSpace
from bootstorm.traces.operations import OperationTimes, OperationTiming, PoolDeviceMemory
from bootstorm.traces.schema import HostFacts

DATA = Path(__file__).resolve().parents[2] / "traces" / "data"
#: Written by measure-ops before it measured memory.
OLD_OPS = DATA / "plan" / "ops.json"
#: A testbed profile written before profiles held memory.
OLD_PROFILE = DATA / "plan" / "local.yaml"


def _memory(kind: str, held_kib: tuple[int, ...], *, devices: int = 200) -> PoolDeviceMemory:
    n = len(held_kib)
    return PoolDeviceMemory(
        kind=kind,
        devices=devices,
        warmup=1,
        # Half of it seen by MemAvailable, half taken off the per-CPU lists.
        mem_available_drop_kib=tuple(h // 2 for h in held_kib),
        pcp_growth_kib=tuple(h // 2 - h for h in held_kib),
        slab_growth_kib=held_kib,
        sunreclaim_growth_kib=held_kib,
        percpu_growth_kib=(0,) * n,
    )


def _times(*memory: PoolDeviceMemory) -> OperationTimes:
    return OperationTimes(
        timings=(OperationTiming(name="netlink_noop", samples_s=(3e-4, 2e-4, 4e-4)),),
        host=HostFacts(kernel="6.18", cores=2, memory_mib=24_000, hostname="node"),
        vm_mode="process",
        created_at=datetime(2026, 11, 28, 12, 0, tzinfo=UTC),
        repeats=3,
        run="abcd",
        pool_memory=memory,
    )


# 200 devices: per device 160, 170, 180, 190, 200 KiB.
NETNS = _memory("netns", (32_000, 34_000, 36_000, 38_000, 40_000))
# A tap: 40 KiB each, but other work freed memory in two of the rounds.
TAP = _memory("tap", (8_000, -2_000, 8_000, -4_000, 8_000))


def test_the_costs_carry_the_median_per_device_in_mib() -> None:
    costs = testbed_costs_from(_times(NETNS, TAP))
    netns = costs[f"{POOL_MEMORY_PATH}netns"]
    assert netns.path == "testbed.pool_device_mib.netns"
    assert (netns.value, netns.low, netns.high) == pytest.approx(
        (180 / 1024, 170 / 1024, 190 / 1024)
    )
    assert "median of 5 rounds (after 1 discarded)" in netns.how
    assert "MemAvailable alone 0.08789 MiB" in netns.how  # 90 KiB: half of it
    assert "\n" not in netns.how
    tap = costs[f"{POOL_MEMORY_PATH}tap"]
    # Per device: −20, −10, 40, 40, 40 KiB: median and q75 40, q25 −10 → 0.
    assert (tap.value, tap.high) == pytest.approx((40 / 1024, 40 / 1024))
    assert tap.low == 0.0
    assert "clipped at 0 MiB: low (was -0.00977 MiB)" in tap.how
    # The timings' costs are as before, and no memory is a time.
    assert "testbed.py_op_cpu_s" in costs
    assert {c.unit for c in (netns, tap)} == {"MiB"}
    assert {c.unit for p, c in costs.items() if not p.startswith(POOL_MEMORY_PATH)} == {"s"}
    assert pool_memory_of(costs) == {"netns": netns, "tap": tap}


def test_a_measurement_without_memory_gives_no_memory_cost() -> None:
    costs = testbed_costs_from(_times())
    assert not any(p.startswith(POOL_MEMORY_PATH) for p in costs)
    assert pool_memory_of(costs) == {}


def test_the_file_round_trips_with_and_without_the_memory_part() -> None:
    with_memory = _times(NETNS, TAP)
    text = with_memory.to_json()
    assert OperationTimes.from_json(text) == with_memory
    assert [m["kind"] for m in json.loads(text)["pool_memory"]] == ["netns", "tap"]
    without = _times()
    assert OperationTimes.from_json(without.to_json()) == without
    # A file written before the memory was measured has no such key at all.
    data = json.loads(without.to_json())
    del data["pool_memory"]
    assert OperationTimes.from_json(json.dumps(data)).pool_memory == ()


def test_a_recorded_measurement_of_before_still_reads() -> None:
    old = OperationTimes.from_json(OLD_OPS.read_text())
    assert "pool_memory" not in json.loads(OLD_OPS.read_text())
    assert old.pool_memory == () and old.memory_of("netns") is None
    assert len(old.timings) > 0


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda m: m.update(kind="macvtap"), r"^pool_memory\[0\]\.kind: unknown pool kind"),
        (lambda m: m.update(devices=0), r"^pool_memory\[0\]\.devices: expected an integer"),
        (lambda m: m.pop("pcp_growth_kib"), r"^pool_memory\[0\]\.pcp_growth_kib: missing$"),
        (
            lambda m: m.update(slab_growth_kib=[1, 2]),
            r"^pool_memory\[0\]\.slab_growth_kib: expected 5 rounds",
        ),
        (
            lambda m: m.update(mem_available_drop_kib=[1.5] * 5),
            r"^pool_memory\[0\]\.mem_available_drop_kib\[0\]: expected an integer of KiB",
        ),
        (
            lambda m: m.update(percpu_growth_kib=[10**15] * 5),
            r"^pool_memory\[0\]\.percpu_growth_kib\[0\]: expected an integer of KiB",
        ),
    ],
)
def test_a_malformed_memory_part_names_its_field(change: object, message: str) -> None:
    data = json.loads(_times(NETNS).to_json())
    change(data["pool_memory"][0])  # type: ignore[operator]
    with pytest.raises(ValueError, match=message):
        OperationTimes.from_json(json.dumps(data))


def test_a_kind_measured_twice_is_refused() -> None:
    data = json.loads(_times(NETNS).to_json())
    data["pool_memory"].append(data["pool_memory"][0])
    with pytest.raises(ValueError, match=r"^pool_memory\[1\]\.kind: 'netns' measured twice$"):
        OperationTimes.from_json(json.dumps(data))
    with pytest.raises(ValueError, match=r"^pool_memory: must measure each kind once"):
        _times(NETNS, NETNS)


def _measured() -> dict[str, MeasuredCost]:
    return testbed_costs_from(_times(NETNS, TAP))


@pytest.fixture(scope="module")
def profile() -> Profile:
    return trace_fit.testbed_template(
        cores=2, memory_mib=4096, service_cv=0.0, measured=_measured()
    )


def test_the_template_takes_the_measured_memory_with_its_source(profile: Profile) -> None:
    assert profile.testbed is not None
    assert profile.testbed.pool_device_mib == pytest.approx({"netns": 180 / 1024, "tap": 40 / 1024})
    source = profile.sources["testbed.pool_device_mib.netns"]
    assert source.startswith("measured alone (bootstorm testbed measure-ops): drop of")
    assert source.endswith("0.166..0.1855 MiB")
    # The timings are not the template's to set: the fit weighs them.
    assert profile.testbed.py_op_cpu_s == 2e-3
    bare = trace_fit.testbed_template(cores=2, memory_mib=4096, service_cv=0.0)
    assert bare.testbed is not None and bare.testbed.pool_device_mib == {}
    assert not any("pool_device_mib" in p for p in bare.sources)


def test_the_profile_yaml_round_trips_with_and_without_the_field(
    profile: Profile, tmp_path: Path
) -> None:
    path = tmp_path / "local.yaml"
    path.write_text(profile.to_yaml())
    assert Profile.from_yaml(path) == profile
    # A profile of before, without the field: it loads, with none measured.
    old = Profile.from_yaml(OLD_PROFILE)
    assert old.testbed is not None and old.testbed.pool_device_mib == {}
    assert "pool_device_mib" not in OLD_PROFILE.read_text()
    again = tmp_path / "old.yaml"
    again.write_text(old.to_yaml())
    assert Profile.from_yaml(again) == old


def test_a_kind_needs_its_source_and_a_known_name(profile: Profile, tmp_path: Path) -> None:
    data = profile.model_dump(mode="json", exclude_none=True)
    del data["sources"]["testbed.pool_device_mib.tap"]
    with pytest.raises(ValueError, match=r"numbers without a source.*testbed.pool_device_mib.tap"):
        Profile(**data)
    data = profile.model_dump(mode="json", exclude_none=True)
    data["testbed"]["pool_device_mib"]["macvtap"] = 0.3
    data["sources"]["testbed.pool_device_mib.macvtap"] = "test"
    with pytest.raises(ValueError, match="unknown pool kind 'macvtap'; a node pools netns, veth"):
        Profile(**data)
    for bad in (-0.1, float("inf"), 1e12):
        data = profile.model_dump(mode="json", exclude_none=True)
        data["testbed"]["pool_device_mib"]["tap"] = bad
        with pytest.raises(ValueError, match="pool_device_mib"):
            Profile(**data)
    path = tmp_path / "bad.yaml"
    path.write_text(profile.to_yaml().replace("tap: 0.0390625", "tap: -1"))
    with pytest.raises(ConfigError, match=r"testbed\.pool_device_mib\.tap"):
        Profile.from_yaml(path)


def test_with_values_keeps_the_memory_and_moves_a_kind(profile: Profile) -> None:
    moved = profile.with_values({"testbed.rcu_grace_s": 0.01}, source="test")
    assert moved.testbed is not None and profile.testbed is not None
    assert moved.testbed.pool_device_mib == profile.testbed.pool_device_mib
    assert (
        moved.sources["testbed.pool_device_mib.netns"]
        == (profile.sources["testbed.pool_device_mib.netns"])
    )
    bigger = profile.with_values({"testbed.pool_device_mib.tap": 0.5}, source="test")
    assert bigger.testbed is not None and bigger.testbed.pool_device_mib["tap"] == 0.5


def test_a_what_if_on_the_node_prices_its_pools_with_the_measured_memory(
    profile: Profile,
) -> None:
    n, veth = 12, 5
    result = run_scenario(
        Scenario(cni="testbed-veth", sandboxes=n, pools={"netns": n, "veth": veth}),
        profile=profile,
        seed=0,
    )
    assert result.pools["netns"].memory_mib == pytest.approx(n * 180 / 1024)
    # No measurement of veth pairs: priced at 0, as before.
    assert result.pools["veth"].memory_mib == 0.0
    assert result.pool_memory_mib == pytest.approx(n * 180 / 1024)


def test_the_default_search_space_takes_the_measured_memory(profile: Profile) -> None:
    space = SearchSpace.default(
        cni="testbed-veth",
        sandboxes=20,
        profile=profile,
        pool_kinds_searched=("netns", "veth", "netns-veth"),
    )
    assert space.pool_device_mib == pytest.approx(
        {"netns": 180 / 1024, "veth": 0.0, "netns-veth": 0.0}
    )
    config = space.config_of(
        {p: 2 for p in space.parameters if p.startswith("limit:")}
        | {"pool:netns": 10, "pool:veth": 3, "pool:netns-veth": 0}
    )
    assert space.memory_mib(config) == pytest.approx(10 * 180 / 1024)


@pytest.mark.slow
def test_a_fit_keeps_the_measured_memory(profile: Profile) -> None:
    """A refit from the profile (a bootstrap's warm start) moves the times only."""
    from bootstorm.calibration.trace_fit import fit_trace
    from bootstorm.traces import read_trace

    trace = read_trace(DATA / "testbed-veth-qemu-25.jsonl.gz")
    refit = fit_trace(trace, start=profile, max_evaluations=3).profile
    assert refit.testbed is not None and profile.testbed is not None
    assert refit.testbed.pool_device_mib == profile.testbed.pool_device_mib
    assert (
        refit.sources["testbed.pool_device_mib.netns"]
        == (profile.sources["testbed.pool_device_mib.netns"])
    )
    # dataclasses.replace keeps a measurement's memory too (a file rewritten).
    times = dataclasses.replace(_times(NETNS), notes=("rewritten",))
    assert times.memory_of("netns") == NETNS
