"""The kernel trace parser on text captured on this project's host (kernel 6.18, 2 cores).

``data/contention_sample.txt`` is an excerpt of a tracefs instance's ``trace``
file from a 20-sandbox testbed storm (``trace_clock=mono``,
``options/stacktrace``): every event of one sandbox thread (tid 10930) and
of a kworker (tid 26272) that both waited on RTNL.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from bootstorm.traces import StageSpan
from bootstorm.traces.kernel import (
    CGROUP_MUTEX,
    RTNL,
    LockNamer,
    join_contention,
    pair_contention,
    pair_softirqs,
    parse_events,
)

SAMPLE = Path(__file__).with_name("data") / "contention_sample.txt"
RTNL_ADDR = 0xFFFFFFFF831F59A0
SANDBOX_TID = 10930
KWORKER_TID = 26272


@pytest.fixture(scope="module")
def events() -> list:  # type: ignore[type-arg]
    with SAMPLE.open() as fh:
        return parse_events(fh)


def test_every_event_has_its_stack(events: list) -> None:  # type: ignore[type-arg]
    assert len(events) == 71
    assert all(ev.stack and ev.stack[0].startswith("trace_event_raw_event_") for ev in events)
    assert [ev.ts_s for ev in events] == sorted(ev.ts_s for ev in events)


def test_mutex_double_begin_is_one_sleeping_wait(events: list) -> None:  # type: ignore[type-arg]
    waits, unmatched = pair_contention(events)
    assert unmatched == 0
    ends = [ev for ev in events if ev.event == "contention_end"]
    begins = [ev for ev in events if ev.event == "contention_begin"]
    second = [ev for ev in begins if ev.flags == {"MUTEX"}]  # each follows a SPIN|MUTEX one
    assert len(waits) == len(ends) == len(begins) - len(second)
    first = next(w for w in waits if w.lock_addr == RTNL_ADDR and w.tid == SANDBOX_TID)
    # begin SPIN|MUTEX at .731357, begin MUTEX at .731370, end at .754700
    assert first.start_s == pytest.approx(6844.731357)
    assert first.end_s == pytest.approx(6844.754700)
    assert first.slept and not first.spin
    spun = next(w for w in waits if w.tid == KWORKER_TID)
    assert spun.spin  # won during the optimistic spin: a single begin


def test_locks_are_named_from_stacks(events: list) -> None:  # type: ignore[type-arg]
    waits, _ = pair_contention(events)
    namer = LockNamer({})  # as on this host: rtnl_mutex is not in /proc/kallsyms
    spans = join_contention(waits, [], namer=namer)
    names = Counter(s.lock for s in spans)
    assert names[RTNL] == sum(1 for w in waits if w.lock_addr == RTNL_ADDR)
    assert names[CGROUP_MUTEX] >= 1
    assert "spinlock@try_to_wake_up" in names
    # the kworker's addrconf_dad_work stack alone is ambiguous; its address was learned
    assert {s.lock for s in spans if s.tid == KWORKER_TID} == {RTNL}


def test_kallsyms_names_an_address(events: list) -> None:  # type: ignore[type-arg]
    waits, _ = pair_contention(events)
    spans = join_contention(waits, [], namer=LockNamer({RTNL_ADDR: "rtnl_mutex"}))
    assert Counter(s.lock for s in spans)[RTNL] >= 1


def test_join_by_tid_and_time(events: list) -> None:  # type: ignore[type-arg]
    waits, _ = pair_contention(events)
    stage = StageSpan(sandbox=7, stage="AddCNI", start_s=6844.73, end_s=6844.76, tid=SANDBOX_TID)
    joined = join_contention(waits, [stage])
    ours = [s for s in joined if s.sandbox == 7]
    assert ours and all(s.stage == "AddCNI" and s.tid == SANDBOX_TID for s in ours)
    assert all(6844.73 <= s.start_s <= 6844.76 for s in ours)
    assert all(s.sandbox is None for s in joined if s.tid == KWORKER_TID)


INTERLEAVED = """\
# tracer: nop
            ip-100   [000] ...1.  10.000001: contention_begin: ffffffff00000010 (flags=SPIN|MUTEX)
            ip-200   [001] ...1.  10.000002: contention_begin: ffffffff00000020 (flags=SPIN)
            ip-100   [000] ...1.  10.000003: <stack trace>
 => trace_event_raw_event_contention_begin
 => __mutex_lock.constprop.0
 => cgroup_kn_lock_live
 => cgroup_mkdir
            ip-200   [001] ...1.  10.000004: <stack trace>
 => trace_event_raw_event_contention_begin
 => __pv_queued_spin_lock_slowpath
 => _raw_spin_lock_irq
 => cgroup_post_fork
            ip-100   [000] d..2.  10.000005: contention_begin: ffffffff00000010 (flags=MUTEX)
            ip-200   [001] ...1.  10.000006: contention_end: ffffffff00000020 (ret=0)
CPU:0 [LOST 2 EVENTS]
            ip-100   [001] d..2.  10.000100: contention_end: ffffffff00000010 (ret=0)
            ip-300   [000] ...1.  10.000200: contention_begin: ffffffff00000030 (flags=SPIN)
          <idle>-0       [001] ..s1.  10.000300: softirq_entry: vec=3 [action=NET_RX]
          <idle>-0       [001] ..s1.  10.000310: softirq_exit: vec=3 [action=NET_RX]
"""


def test_stack_goes_to_the_last_event_of_its_cpu() -> None:
    events = parse_events(INTERLEAVED.splitlines())
    waits, unmatched = pair_contention(events)
    assert unmatched == 1  # ip-300's begin never ended
    by_tid = {w.tid: w for w in waits}
    # the sleeping waiter woke on another CPU: paired by task, not by CPU
    assert by_tid[100].start_s == pytest.approx(10.000001)
    assert by_tid[100].end_s == pytest.approx(10.0001) and by_tid[100].slept
    namer = LockNamer()
    assert namer.name(by_tid[100]) == CGROUP_MUTEX
    assert namer.name(by_tid[200]) == "css_set_lock"
    (run,) = pair_softirqs(events)
    assert (run.vec, run.cpu) == ("NET_RX", 1)
    assert run.end_s - run.start_s == pytest.approx(10e-6)


WITH_TGID = """\
# tracer: nop  (long lines: as tracefs prints them)
#           TASK-PID       TGID    CPU#  |||||  TIMESTAMP  FUNCTION
  bridge-501 (    500) [000] ...1.  20.000001: contention_begin: ffffffff00000010 (flags=MUTEX)
          bridge-501   (    500) [000] ...1.  20.000002: <stack trace>
 => trace_event_raw_event_contention_begin
 => __mutex_lock.constprop.0
 => rtnl_lock
  kworker/0-9 (-------) [001] ...1. 20.000003: contention_begin: ffffffff00000010 (flags=SPIN)
          bridge-501   (    500) [001] d..2.  20.000100: contention_end: ffffffff00000010 (ret=0)
       kworker/0-9     (-------) [001] ...1.  20.000200: contention_end: ffffffff00000010 (ret=0)
"""


def test_tgid_is_read_and_joins_a_multithreaded_process() -> None:
    """With ``options/record-tgid`` a Go plugin's thread 501 names its process
    500, whose ExecSpan (owner by pid) takes the wait; unknown tgids are None."""
    events = parse_events(WITH_TGID.splitlines())
    assert [(ev.tid, ev.tgid) for ev in events] == [(501, 500), (9, None), (501, 500), (9, None)]
    waits, unmatched = pair_contention(events)
    assert unmatched == 0
    by_tid = {w.tid: w for w in waits}
    assert by_tid[501].tgid == 500 and by_tid[9].tgid is None
    owners = {500: [(19.5, 20.5, 3, "AddCNI")]}
    joined = {s.tid: s for s in join_contention(waits, [], extra=owners)}
    assert (joined[501].sandbox, joined[501].stage, joined[501].tgid) == (3, "AddCNI", 500)
    assert joined[501].lock == RTNL
    assert joined[9].sandbox is None and joined[9].tgid is None
