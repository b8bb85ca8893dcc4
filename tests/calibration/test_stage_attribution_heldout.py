"""Issue 38's stage attribution on the CNI runtime's held-out storms, with the
kernel's hand-over in the model (``plan/local-handover.yaml``: the plan's
storms refitted with ``mutex_dispatch_s`` free and mutex holders pinned, the
kernel being ``PREEMPT_NONE``) against the profile fitted without it
(``plan/local.yaml``).

*Predict*: no held-out storm was fitted. A stage share is a stage's mean over
the mean startup, compared relatively where it is at least 5% of the startup;
a lock-wait share is a kernel lock's wait over the time inside a stage, in
points. What holds is asserted; the issue's whole criterion (every share
within 20%, every lock-wait share within 10 points, on every storm) is a
strict xfail: a known miss (docs/testbed.md), which XPASSes when the model
gets there.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import pytest

from bootstorm.calibration.trace_fit import Comparison, fit_storms, predicted_vs_measured
from bootstorm.models import Profile
from bootstorm.traces import read_trace
from bootstorm.workflows.profile import load_measured

DATA = Path(__file__).resolve().parents[2] / "traces" / "data" / "cni"
HANDOVER = DATA / "plan" / "local-handover.yaml"
BEFORE = DATA / "plan" / "local.yaml"
#: Storms no limit holds back, and those a stage limit does.
UNLIMITED = ("baseline", "size100", "pool-netns", "pool-netns-veth")
LIMITED = ("limit-addcni8", "limit-attachif4-cgroup8")
MEANINGFUL = 0.05


def _storms() -> dict[str, list[Path]]:
    groups: dict[str, list[Path]] = defaultdict(list)
    for path in sorted((DATA / "heldout").glob("*-run*.jsonl.gz")):
        groups[re.sub(r"-run\d+\.jsonl\.gz$", "", path.name)].append(path)
    return dict(groups)


def _rows(storm: str, profile: Path) -> dict[str, Comparison]:
    traces = [read_trace(p) for p in _storms()[storm]]
    return {c.metric: c for c in predicted_vs_measured(traces, Profile.from_yaml(profile))}


def _share_errors(rows: dict[str, Comparison]) -> list[float]:
    return [
        abs(c.rel_error)
        for name, c in rows.items()
        if name.endswith(" share of startup") and c.measured >= MEANINGFUL
    ]


@pytest.mark.slow
def test_the_handover_profile_is_the_plans_refit_byte_for_byte() -> None:
    traces = [read_trace(p) for p in sorted((DATA / "plan").glob("*.jsonl.gz"))]
    report = fit_storms(
        traces,
        measured=load_measured(DATA / "plan" / "ops.json"),
        kernel_config="PREEMPT_NONE HZ=250",
    )
    assert report.profile.to_yaml() == HANDOVER.read_text()


def test_the_handover_profile_pins_holders_and_hands_over_through_a_core() -> None:
    tb = Profile.from_yaml(HANDOVER).testbed
    assert tb is not None and tb.kernel_holders_pinned is True
    assert tb.mutex_dispatch_s is not None and 1e-4 < tb.mutex_dispatch_s < 5e-3


def test_without_a_limit_the_stages_are_blamed_as_the_node_blames_them() -> None:
    """Four unlimited held-out storms: 8 of their 11 meaningful stage shares
    within 20% (2 of 11 without the hand-over), none beyond 35%."""
    after = [e for s in UNLIMITED for e in _share_errors(_rows(s, HANDOVER))]
    before = [e for s in UNLIMITED for e in _share_errors(_rows(s, BEFORE))]
    assert len(after) == len(before) == 11
    assert sum(e <= 0.20 for e in after) >= 8 > sum(e <= 0.20 for e in before)
    assert max(after) <= 0.35 < max(before)


def test_the_headline_figures_are_not_lost() -> None:
    """Makespan and mean startup of every held-out storm within 20% (the
    validate threshold), as without the hand-over."""
    for storm in (*UNLIMITED, *LIMITED):
        rows = _rows(storm, HANDOVER)
        assert abs(rows["makespan_s"].rel_error) <= 0.20, storm
        assert abs(rows["startup mean_s"].rel_error) <= 0.20, storm


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="known miss (issue 38, item 1): under a stage limit the stages after it are "
    "blamed up to +121% (AddCNI 8's StartVM), and RTNL waits in NetNS are +33 to +51 pts "
    "(the model queues the first namespaces on RTNL; the node spends their time elsewhere); "
    "cgroup_mutex's waits in Cgroup are missing (-11 to -30 pts): docs/testbed.md",
)
def test_every_share_within_20_percent_and_every_wait_within_10_points() -> None:
    for storm in (*UNLIMITED, *LIMITED):
        rows = _rows(storm, HANDOVER)
        assert max(_share_errors(rows)) <= 0.20, storm
        waits = [abs(c.rel_error) for c in rows.values() if c.points]
        assert max(waits) <= 0.10, storm


def test_the_runs_measured_every_figure_but_one_more_precisely_than_the_tolerance() -> None:
    """The node's own spread over five runs of each storm: every stage share
    and lock-wait share has a standard error within the criterion's
    tolerance, but RTNL's wait in the 150 baseline's NetNS (3-70% of NetNS
    over its runs: ±11 points), where a miss of 10 points is noise. The
    misses the xfail above names are not."""
    spread = []
    for storm in (*UNLIMITED, *LIMITED):
        for name, c in _rows(storm, HANDOVER).items():
            if not c.share:
                continue  # the headline figures and stage means: no spread computed
            assert c.measured_se is not None, (storm, name)
            tolerance = 0.10 if c.points else 0.20
            if (c.points or c.measured >= MEANINGFUL) and not c.testable(tolerance):
                spread.append((storm, name))
    assert spread == [("baseline", "rtnl wait in NetNS")]


@pytest.mark.slow
def test_holders_time_sliced_as_measured_blame_a_limited_storms_stages() -> None:
    """The same plan refitted with the hold stretch this host measured five
    days later (``traces/data/cni/traffic/plan/ops.json``: RTNL's holds 1.75x
    as long on a shared core, so holders time-sliced): the stage limit no
    longer crowds the stages after it (the worst share off 121% pinned, 46%
    time-sliced), every mean startup within 10% (16% pinned), and as many
    shares within 20% as pinned; the lock-wait shares stay as far off."""
    from bootstorm.calibration.measured_ops import HOLD_STRETCH_PATH

    traces = [read_trace(p) for p in sorted((DATA / "plan").glob("*.jsonl.gz"))]
    stretch = load_measured(DATA / "traffic" / "plan" / "ops.json")[HOLD_STRETCH_PATH]
    measured = {**load_measured(DATA / "plan" / "ops.json"), HOLD_STRETCH_PATH: stretch}
    report = fit_storms(traces, measured=measured, kernel_config="PREEMPT_NONE HZ=250")
    sliced = report.profile
    assert sliced.testbed is not None and sliced.testbed.kernel_holders_pinned is False
    pinned = Profile.from_yaml(HANDOVER)
    worst = {"sliced": 0.0, "pinned": 0.0}
    within = {"sliced": 0, "pinned": 0}
    for storm in (*UNLIMITED, *LIMITED):
        traces_of = [read_trace(p) for p in _storms()[storm]]
        for name, prof in (("sliced", sliced), ("pinned", pinned)):
            rows = {c.metric: c for c in predicted_vs_measured(traces_of, prof)}
            errors = _share_errors(rows)
            worst[name] = max(worst[name], *errors)
            within[name] += sum(e <= 0.20 for e in errors)
            if name == "sliced":
                assert abs(rows["startup mean_s"].rel_error) <= 0.10, storm
                assert abs(rows["makespan_s"].rel_error) <= 0.20, storm
    assert worst["sliced"] <= 0.50 < 1.0 < worst["pinned"]
    assert within["sliced"] >= within["pinned"] == 8
