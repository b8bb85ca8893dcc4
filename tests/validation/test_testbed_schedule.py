"""Starts on a schedule, lifetimes and pool takes: the pieces that need no root."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import ValidationError

from bootstorm._params import format_validation_error
from bootstorm.traces import Arrival, PoolTake, ScenarioFacts, StageSpan, Trace, TraceHeader
from bootstorm.validation.testbed import LocalAdmission, StormOptions, summarize
from bootstorm.validation.testbed._namespaced import NamespacedRuntime, NamespacedSandbox
from bootstorm.validation.testbed.admission import PoolLevel, level_after_take
from bootstorm.validation.testbed.driver import (
    LATE_S,
    TIMED_STOPS,
    StartSchedule,
    _Reaper,
    _schedule_note,
    timed_stops,
)
from bootstorm.validation.testbed.options import MAX_SCHEDULE_S
from bootstorm.validation.testbed.runtime import Sandbox

STAGES = ("NetNS", "AddCNI", "Cgroup", "AttachIf", "StartVM")


@dataclass
class FakeTime:
    """A monotonic clock that moves only when waited on (or told to)."""

    now: float = 100.0
    stopped: bool = False
    waits: list[float] = field(default_factory=list)
    #: Stop the schedule once the clock reaches this (an interrupt mid-wait).
    stop_at: float | None = None

    def clock(self) -> float:
        return self.now

    def is_set(self) -> bool:
        return self.stopped

    def wait(self, timeout: float | None = None) -> bool:
        assert timeout is not None and timeout > 0
        self.waits.append(timeout)
        if self.stop_at is not None and self.now + timeout >= self.stop_at:
            self.now = self.stop_at
            self.stopped = True
            return True
        self.now += timeout
        return False


def test_schedule_starts_each_at_its_time_ahead_by_the_lead() -> None:
    fake = FakeTime()
    schedule = StartSchedule(
        arrival_s=(0.0, 0.5, 0.5, 2.0), stop=fake, lead_s=0.05, clock=fake.clock
    )
    seen = [(i, round(fake.now, 9)) for i in schedule.due(origin_s=100.05)]
    # origin + arrival - lead: the first on the origin's lead, two at once.
    assert seen == [(0, 100.0), (1, 100.5), (2, 100.5), (3, 102.0)]
    assert schedule.behind_s == 0.0 and schedule.started == 4


def test_late_starts_are_started_at_once_never_skipped_and_say_how_late() -> None:
    fake = FakeTime()
    schedule = StartSchedule(arrival_s=(0.0, 0.1, 0.2, 5.0), stop=fake, clock=fake.clock)
    seen = []
    for i in schedule.due(origin_s=100.0):
        seen.append((i, round(fake.now, 9)))
        if i == 0:
            fake.now += 0.35  # the host (or starting sandbox 0) ran past 1 and 2
    assert seen == [(0, 100.0), (1, 100.35), (2, 100.35), (3, 105.0)]
    assert schedule.behind_s == pytest.approx(0.25)  # sandbox 1: due at 100.1


def test_a_stopped_schedule_starts_no_more() -> None:
    fake = FakeTime(stop_at=101.0)
    schedule = StartSchedule(arrival_s=(0.0, 0.5, 2.0, 3.0), stop=fake, clock=fake.clock)
    assert list(schedule.due(origin_s=100.0)) == [0, 1]
    assert schedule.started == 2
    already = FakeTime(stopped=True)
    assert (
        list(StartSchedule(arrival_s=(0.0,), stop=already, clock=already.clock).due(origin_s=0.0))
        == []
    )


def test_schedule_on_the_real_clock_waits_on_the_event() -> None:
    stop = threading.Event()
    schedule = StartSchedule(arrival_s=(0.0, 0.05, 0.1), stop=stop)
    origin = time.monotonic()
    at = [time.monotonic() - origin for _ in schedule.due(origin_s=origin)]
    assert at[0] < 0.05 and 0.05 <= at[1] < 0.5 and 0.1 <= at[2] < 0.5
    stop.set()
    assert list(StartSchedule(arrival_s=(10.0,), stop=stop).due(origin_s=origin)) == []


def test_schedule_refuses_unsorted_times() -> None:
    with pytest.raises(ValueError, match="sorted"):
        StartSchedule(arrival_s=(1.0, 0.0), stop=threading.Event())


# -- options ------------------------------------------------------------------------


def _refusal(**kw: Any) -> str:
    with pytest.raises(ValidationError) as exc:
        StormOptions(**kw)
    return format_validation_error(exc.value)


def test_options_take_a_schedule_and_a_lifetime() -> None:
    options = StormOptions(sandboxes=3, arrival_s=(0, 0.5, 0.5), lifetime_s=30)
    assert options.arrival_s == (0.0, 0.5, 0.5) and options.lifetime_s == 30.0
    assert StormOptions().arrival_s is None and StormOptions().lifetime_s is None
    assert StormOptions(lifetime_s=0.0).lifetime_s == 0.0  # stopped as soon as it is up


@pytest.mark.parametrize(
    ("kw", "line"),
    [
        (
            {"sandboxes": 3, "arrival_s": (0.0, 1.0)},
            "arrival_s: must hold one time per sandbox, 3 (got 2 times)",
        ),
        (
            {"sandboxes": 3, "arrival_s": (0.0, 2.0, 1.0)},
            "arrival_s.2: must not be before the time before it (2.0): the times are sorted "
            "(got 1.0)",
        ),
        (
            {"sandboxes": 2, "arrival_s": (0.0, float("nan"))},
            "arrival_s.1: Input should be a finite number (got nan)",
        ),
        (
            {"sandboxes": 2, "arrival_s": (0.0, float("inf"))},
            "arrival_s.1: Input should be a finite number (got inf)",
        ),
        (
            {"sandboxes": 1, "arrival_s": (-0.5,)},
            "arrival_s.0: Input should be greater than or equal to 0 (got -0.5)",
        ),
        (
            {"sandboxes": 1, "arrival_s": (MAX_SCHEDULE_S * 2,)},
            "arrival_s.0: Input should be less than or equal to 31622400 (got 63244800.0)",
        ),
        ({"lifetime_s": float("nan")}, "lifetime_s: Input should be a finite number (got nan)"),
        ({"lifetime_s": -1.0}, "lifetime_s: Input should be greater than or equal to 0 (got -1.0)"),
    ],
)
def test_options_refuse_a_bad_schedule_in_one_line(kw: dict[str, Any], line: str) -> None:
    got = _refusal(**kw)
    assert got.startswith(line) and "\n" not in got


def test_a_long_schedule_of_the_wrong_length_is_not_echoed() -> None:
    got = _refusal(sandboxes=2, arrival_s=tuple(float(i) for i in range(5000)))
    assert got == "arrival_s: must hold one time per sandbox, 2 (got 5000 times)"


# -- pool levels and takes ----------------------------------------------------------


def test_local_admission_reports_the_level_each_take_left() -> None:
    adm = LocalAdmission(
        pools={"netns": ["a", "b"], "tap": []},
        pairs={"veth": [("h0", "p0")]},
    )
    assert adm.take("netns", "r/0") == "a"
    assert adm.level_after_take("netns", "r/0") == PoolLevel(ready=1, target=2)
    adm.take("netns", "r/1")
    adm.take("netns", "r/2")  # empty now
    assert adm.level_after_take("netns", "r/1") == PoolLevel(ready=0, target=2)
    assert adm.level_after_take("netns", "r/2") == PoolLevel(ready=0, target=2)
    assert adm.take_pair("veth", "r/0") == ("h0", "p0")
    assert adm.level_after_take("veth", "r/0") == PoolLevel(ready=0, target=1)
    # A kind made with no device, or not at all, is no pool: nothing to record.
    assert adm.take("tap", "r/0") is None and adm.level_after_take("tap", "r/0") is None
    assert adm.take_netns_veth("r/0") is None
    assert adm.level_after_take("netns-veth", "r/0") is None
    assert level_after_take(adm, "netns", "r/0") == PoolLevel(ready=1, target=2)


def test_an_admission_without_levels_still_has_its_takes_recorded() -> None:
    class Plain:  # an agent's admission of a build that reports no levels
        def take(self, kind: str, holder: str) -> str | None:
            return None

    assert level_after_take(Plain(), "netns", "r/0") == PoolLevel()  # type: ignore[arg-type]


def _took(admission: Any, sb: NamespacedSandbox, kind: str, got: Any) -> Any:
    """``NamespacedRuntime.took`` on a runtime that is only what it reads."""
    runtime = SimpleNamespace(admission=admission, holder=lambda s: f"run/{s.index}")
    return NamespacedRuntime.took(runtime, sb, kind, got)  # type: ignore[arg-type]


def test_takes_are_recorded_with_time_outcome_and_level() -> None:
    adm = LocalAdmission(pools={"netns": ["a"]})
    sb0, sb1 = NamespacedSandbox(index=0), NamespacedSandbox(index=1)
    before = time.monotonic()
    assert _took(adm, sb0, "netns", adm.take("netns", "run/0")) == "a"
    assert _took(adm, sb1, "netns", adm.take("netns", "run/1")) is None
    assert _took(adm, sb1, "tap", adm.take("tap", "run/1")) is None  # no tap pool: not recorded
    (t0,), (t1,) = sb0.takes, sb1.takes
    assert (t0.sandbox, t0.kind, t0.taken, t0.ready, t0.target) == (0, "netns", True, 0, 1)
    assert (t1.sandbox, t1.taken, t1.ready, t1.target) == (1, False, 0, 1)
    assert before <= t0.t_s <= t1.t_s <= time.monotonic()


# -- lifetimes --------------------------------------------------------------------------


def test_reaper_stops_each_vm_a_lifetime_after_it_came_up() -> None:
    stopped: list[tuple[int, float]] = []
    reaper = _Reaper(
        lifetime_s=0.1, stop_vm=lambda sb: stopped.append((sb.index, time.monotonic()))
    )
    now = time.monotonic()
    sandboxes = [Sandbox(index=i) for i in range(4)]
    reaper.add(sandboxes[1], up_s=now + 0.05)
    reaper.add(sandboxes[0], up_s=now)
    reaper.add(sandboxes[2], up_s=now + 0.05)
    deadline = time.monotonic() + 5.0
    while len(stopped) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    reaper.add(sandboxes[3], up_s=time.monotonic() + 60.0)  # outlives the storm
    reaper.close()
    assert [i for i, _ in stopped] == [0, 1, 2]  # in the order their lifetimes end
    assert stopped[0][1] >= now + 0.1 and stopped[1][1] >= now + 0.15
    assert reaper.stopped == 3 and reaper.peak == 3
    assert reaper.note() == (
        "lifetime 0.1 s: each VM stopped that long after it came up (3 during the storm, "
        "1 at its end; at most 3 up at once); network devices stay until the end of the run"
    )
    reaper.add(Sandbox(index=9), up_s=0.0)  # after close: teardown's, not the reaper's
    assert reaper.stopped == 3


def _up(index: int) -> Sandbox:
    """A sandbox whose five stages ran."""
    sb = Sandbox(index=index)
    sb.spans = [
        StageSpan(sandbox=index, stage=stage, start_s=float(k), end_s=float(k) + 0.5)
        for k, stage in enumerate(STAGES)
    ]
    return sb


def test_the_vms_still_up_are_stopped_one_at_a_time_and_timed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Up to TIMED_STOPS of them, in index order, none stopped twice (the
    reaper's), none that never came up; the busy CPU over them is the host's
    (/proc/stat), read before the first stop and after the last one's settle."""
    from bootstorm.validation.testbed import driver

    busy = iter([100.0, 100.25])
    monkeypatch.setattr(driver, "busy_core_s_now", lambda: next(busy))
    monkeypatch.setattr(driver, "STOPS_SETTLE_S", 0.0)
    failed = _up(1)
    failed.error = "StartVM: boom"
    half = Sandbox(index=2)  # never reached StartVM
    sandboxes = [_up(0), failed, half, _up(3), *(_up(i) for i in range(4, 4 + TIMED_STOPS + 5))]
    stopped: list[int] = []
    stops = timed_stops(lambda sb: stopped.append(sb.index), sandboxes, skip={3})
    assert stops is not None
    assert stopped == [0, *range(4, 4 + TIMED_STOPS - 1)] and len(stopped) == TIMED_STOPS
    assert stops.vms == TIMED_STOPS and stops.busy_core_s == pytest.approx(0.25)
    assert stops.per_vm_s == pytest.approx(0.25 / TIMED_STOPS) and stops.wall_s >= 0.0
    # None up (every VM stopped by its lifetime, or none came up): nothing timed.
    assert timed_stops(lambda sb: pytest.fail("stopped"), [half, _up(5)], skip={5}) is None


def test_reaper_closes_at_once_with_vms_still_up() -> None:
    reaper = _Reaper(lifetime_s=3600.0, stop_vm=lambda sb: pytest.fail("stopped early"))
    reaper.add(Sandbox(index=0), up_s=time.monotonic())
    start = time.monotonic()
    reaper.close()
    assert time.monotonic() - start < 1.0 and reaper.stopped == 0


# -- the trace: arrivals, the note, the summary ------------------------------------------


def test_schedule_note_says_how_far_behind_the_host_ran() -> None:
    options = StormOptions(sandboxes=3, arrival_s=(0.0, 1.0, 2.5))
    fake = FakeTime()
    schedule = StartSchedule(arrival_s=options.arrival_s or (), stop=fake, clock=fake.clock)
    list(schedule.due(origin_s=100.0))
    sandboxes = [Sandbox(index=i) for i in range(3)]
    sandboxes[0].began_s = 100.001
    sandboxes[1].began_s = 101.0 + 2 * LATE_S  # late
    note = _schedule_note(schedule, sandboxes, options, 100.0)  # sandbox 2 never began
    assert note.startswith(
        "scheduled starts: 3 of 3 over 2.500 s (arrival_s); sandboxes began their first "
        "stage up to 20.0 ms after their arrival (1 more than 10 ms late); the scheduler "
        "ran up to 0.0 ms behind"
    )
    assert "each arrival is the scheduled time" in note


def _scheduled_trace() -> Trace:
    """Three sandboxes arriving at 0, 1 and 3 s, each up 0.5 s later (the
    last only 0.2 s later), one of which found the netns pool empty."""
    origin = 1000.0
    arrivals = (0.0, 1.0, 3.0)
    spans = []
    for sb, at in enumerate(arrivals):
        t = origin + at
        step = 0.04 if sb == 2 else 0.1
        for stage in STAGES:
            spans.append(StageSpan(sandbox=sb, stage=stage, start_s=t, end_s=t + step))
            t += step
    return Trace(
        header=TraceHeader(
            source="testbed",
            origin_s=origin,
            scenario=ScenarioFacts(sandboxes=3, cni="veth-peer-in-netns"),
        ),
        spans=tuple(spans),
        arrivals=tuple(Arrival(sandbox=i, t_s=origin + a) for i, a in enumerate(arrivals)),
        pool_takes=(
            PoolTake(sandbox=0, kind="netns", t_s=origin, taken=True, ready=1, target=2),
            PoolTake(sandbox=1, kind="netns", t_s=origin + 1, taken=True, ready=0, target=2),
            PoolTake(sandbox=2, kind="netns", t_s=origin + 3, taken=False, ready=0, target=2),
        ),
    )


def test_summary_counts_startup_from_each_sandboxes_own_arrival() -> None:
    s = summarize(_scheduled_trace())
    assert s.completed == 3
    assert s.startup_mean_s == pytest.approx((0.5 + 0.5 + 0.2) / 3)
    assert s.startup_p50_s == pytest.approx(0.5)
    assert s.makespan_s == pytest.approx(3.2)  # origin to the last sandbox up
    assert s.schedule_span_s == pytest.approx(3.0)
    assert s.pool_takes == 3 and s.empty_pool_starts == 1


def test_summary_of_a_storm_at_once_has_no_schedule() -> None:
    trace = _scheduled_trace()
    at_once = Trace(
        header=trace.header,
        spans=trace.spans,
        arrivals=tuple(Arrival(sandbox=i, t_s=1000.0) for i in range(3)),
    )
    s = summarize(at_once)
    assert s.schedule_span_s == 0.0 and s.pool_takes == 0 and s.empty_pool_starts == 0
