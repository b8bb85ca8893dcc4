"""Whether a holder of RTNL keeps its core is measured, not read off the
kernel's build: ``measure-ops`` times a holder's veth pairs from a witness on
another CPU, alone and with a CPU-bound process on the holder's core
(:class:`~bootstorm.traces.operations.HoldStretch`); the ratio becomes
``testbed.hold_stretch`` and decides the fit's ``kernel_holders_pinned``.
On this project's ``PREEMPT_NONE`` host the holds were 1.75-2.4x as long
shared (processor sharing: 1.75x for holds 75 % CPU): time-sliced, where the
build alone said pinned."""

from __future__ import annotations

import json

import pytest
from ops_times import assert_rounds_checked, operation_times

from bootstorm.calibration import trace_fit
from bootstorm.calibration.measured_ops import HOLD_STRETCH_PATH, testbed_costs_from
from bootstorm.traces.operations import TIME_SLICED_AT, HoldStretch, OperationTimes

NONE_BUILD = "PREEMPT_NONE PREEMPT_DYNAMIC HZ=250"


def _stretch(per_round: tuple[float, ...] = (2.4, 1.7, 2.1)) -> HoldStretch:
    """Rounds whose shared holds are ``per_round`` times the alone ones."""
    alone = tuple(0.060 + 0.01 * k for k in range(len(per_round)))
    return HoldStretch(
        requests=150,
        long_wait_s=50e-6,
        alone_waits=(140,) * len(per_round),
        alone_wait_s=alone,
        shared_waits=(150,) * len(per_round),
        shared_wait_s=tuple(a * r for a, r in zip(alone, per_round, strict=True)),
    )


def _times(stretch: HoldStretch | None) -> OperationTimes:
    return operation_times({"netlink_noop": (1e-5,) * 3}, hold_stretch=stretch)


def test_the_stretch_is_the_median_rounds_shared_holds_over_alone() -> None:
    stretch = _stretch()
    assert stretch.per_round == pytest.approx((2.4, 1.7, 2.1))
    assert stretch.ratio() == pytest.approx(2.1)
    assert stretch.time_sliced
    assert not _stretch((1.05, 1.2, 0.95)).time_sliced


def test_the_threshold_lies_between_a_pinned_and_a_shared_holder() -> None:
    """Pinned: a hold as long shared as alone (1x). Processor sharing with one
    CPU-bound task: 1 + its CPU share (2x for a hold all CPU). The threshold
    splits them for holds at least half CPU."""
    assert 1.0 < TIME_SLICED_AT < 2.0
    assert _stretch((TIME_SLICED_AT,) * 3).time_sliced
    assert not _stretch((TIME_SLICED_AT - 0.01,) * 3).time_sliced


def test_the_measured_cost_is_the_ratio_with_its_quartiles() -> None:
    cost = testbed_costs_from(_times(_stretch()))[HOLD_STRETCH_PATH]
    assert cost.value == pytest.approx(2.1) and cost.unit == "x"
    assert cost.low == pytest.approx(1.9) and cost.high == pytest.approx(2.25)
    assert "150 veth pairs" in cost.how and "3 rounds" in cost.how


@pytest.mark.parametrize(
    ("per_round", "pinned"),
    [
        ((2.4, 1.7, 2.1), False),
        ((1.1,) * 3, True),
        # At the threshold the fit and the value object agree (one rule).
        ((TIME_SLICED_AT,) * 3, False),
        ((TIME_SLICED_AT - 0.01,) * 3, True),
    ],
)
def test_a_fit_pins_holders_only_where_the_holds_did_not_stretch(
    per_round: tuple[float, ...], pinned: bool
) -> None:
    assert _stretch(per_round).time_sliced is not pinned
    costs = testbed_costs_from(_times(_stretch(per_round)))
    profile = trace_fit.testbed_template(
        cores=2,
        memory_mib=4096,
        service_cv=0.0,
        runtimes=("cni",),
        measured=costs,
        kernel_config=NONE_BUILD,
    )
    assert profile.testbed is not None
    assert profile.testbed.kernel_holders_pinned is pinned
    source = profile.sources["testbed.kernel_holders_pinned"]
    assert source.startswith("measured alone") and "as long with the holder's core shared" in source


def test_without_the_measurement_the_kernels_build_decides_and_says_so() -> None:
    for config, pinned in ((NONE_BUILD, True), ("PREEMPT_DYNAMIC PREEMPT HZ=1000", False)):
        profile = trace_fit.testbed_template(
            cores=2,
            memory_mib=4096,
            service_cv=0.0,
            runtimes=("cni",),
            measured=testbed_costs_from(_times(None)),
            kernel_config=config,
        )
        assert profile.testbed is not None
        assert profile.testbed.kernel_holders_pinned is pinned
        assert "not measured" in profile.sources["testbed.kernel_holders_pinned"]


def test_the_measured_stretch_is_no_cost_the_fit_frees_or_targets() -> None:
    """A ratio, not seconds: it must not become a fitted row or a start."""
    costs = testbed_costs_from(_times(_stretch()))
    free = trace_fit.CNI_FREE_PARAMETERS
    assert not [t for t in trace_fit._measurement_targets(costs, free) if "stretch" in t.label]
    for start in trace_fit._starts(costs, free):
        assert all(p.path != HOLD_STRETCH_PATH for p in start)


def test_the_file_keeps_the_stretch_and_names_a_bad_field() -> None:
    times = _times(_stretch())
    back = OperationTimes.from_json(times.to_json())
    assert back.hold_stretch == times.hold_stretch
    assert "hold_stretch" not in _times(None).to_json()
    assert OperationTimes.from_json(_times(None).to_json()).hold_stretch is None
    assert_rounds_checked(times, "hold_stretch", "shared_wait_s", 0.1)
    data = json.loads(times.to_json())
    data["hold_stretch"]["alone_waits"] = [140, 0, 140]
    with pytest.raises(ValueError, match=r"hold_stretch\.alone_waits\[1\]") as err:
        OperationTimes.from_json(json.dumps(data))
    assert "\n" not in str(err.value)
    data = json.loads(times.to_json())
    data["hold_stretch"]["long_wait_s"] = 0
    with pytest.raises(ValueError, match=r"hold_stretch\.long_wait_s.*0"):
        OperationTimes.from_json(json.dumps(data))
    del data["hold_stretch"]["requests"]
    with pytest.raises(ValueError, match=r"hold_stretch\.requests"):
        OperationTimes.from_json(json.dumps(data))
