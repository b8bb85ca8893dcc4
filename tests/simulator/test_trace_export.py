"""Chrome trace export: the file Perfetto opens must be valid, nested and complete.

Perfetto silently drops or mis-draws complete ("X") events that partially
overlap on one thread, so nesting is checked exactly, on the integer
nanoseconds the exporter writes, not by eye in the UI.
"""

from __future__ import annotations

import gzip
import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bootstorm.simulator import (
    Cpu,
    GateSpec,
    Hold,
    LockKind,
    LockSpec,
    MachineSpec,
    Program,
    Result,
    Sleep,
    Stage,
    compile_program,
    run_program,
)
from bootstorm.simulator.trace_export import _assign_lanes, chrome_trace, write_chrome_trace

N_SANDBOXES = 5
LOCKS = ("rtnl", "rw", "css_set_lock")

Event = dict[str, Any]


def _program() -> Program:
    """5 sandboxes, 2 stages; rtnl taken in both, rw taken shared, a gate of 2 permits.

    Two cores and a short spin make the mutex contended and the CPU counter
    move; the unguarded second stage lets up to five readers share ``rw``,
    so its holds overlap and need sub-tracks.
    """
    plan = (
        Stage(
            "setup",
            (
                Hold("rtnl", (Cpu(1e-3),)),
                Hold("css_set_lock", (Cpu(1e-4),)),
                Sleep(2e-3),
            ),
            gate="admit",
        ),
        Stage(
            "net",
            (
                Hold("rw", (Sleep(3e-3),), shared=True),
                Hold("rtnl", (Cpu(5e-4),)),
            ),
        ),
    )
    return compile_program(
        [plan] * N_SANDBOXES,
        machine=MachineSpec(cores=2),
        locks=[
            LockSpec(name="rtnl", spin_s=1e-4),
            LockSpec(name="rw", kind=LockKind.RW),
            LockSpec(name="css_set_lock", kind=LockKind.SPIN),
        ],
        gates=[GateSpec(name="admit", permits=2)],
        arrival_s=np.linspace(0.0, 1e-3, N_SANDBOXES),
        service_cv=0.3,
        rng=np.random.default_rng(1),
    )


@pytest.fixture(scope="module")
def result() -> Result:
    return run_program(_program(), record=True)


@pytest.fixture(scope="module")
def trace(result: Result) -> dict[str, Any]:
    assert result.recording is not None
    exported: dict[str, Any] = chrome_trace(result.recording, title="test")
    return exported


def _events(trace: dict[str, Any], ph: str, cat: str | None = None) -> list[Event]:
    return [
        e for e in trace["traceEvents"] if e["ph"] == ph and (cat is None or e.get("cat") == cat)
    ]


def _ns(us: float) -> int:
    return round(us * 1000)


def _threads(trace: dict[str, Any], process: str) -> dict[int, str]:
    """tid -> thread name within the process named ``process``."""
    (pid,) = (
        e["pid"]
        for e in _events(trace, "M")
        if e["name"] == "process_name" and e["args"]["name"] == process
    )
    return {
        e["tid"]: e["args"]["name"]
        for e in _events(trace, "M")
        if e["name"] == "thread_name" and e["pid"] == pid
    }


def test_top_level_is_the_json_object_format(trace: dict[str, Any]) -> None:
    assert list(trace) == ["traceEvents", "displayTimeUnit", "metadata"]
    assert trace["displayTimeUnit"] == "ms"
    assert trace["metadata"]["title"] == "test"
    assert trace["metadata"]["locks"] == list(LOCKS)
    # Only JSON types: a round trip through the encoder changes nothing.
    assert json.loads(json.dumps(trace, allow_nan=False)) == trace


def test_every_event_has_the_required_keys(trace: dict[str, Any]) -> None:
    required = {
        "M": {"name", "ph", "pid", "tid", "args"},
        "X": {"name", "cat", "ph", "pid", "tid", "ts", "dur", "args"},
        "C": {"name", "ph", "pid", "tid", "ts", "args"},
    }
    for e in trace["traceEvents"]:
        assert e["ph"] in required, e
        assert required[e["ph"]] <= e.keys(), e
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
        if "ts" in e:
            assert e["ts"] >= 0
            # Written as whole nanoseconds: a reader that rounds gets them back.
            assert abs(e["ts"] * 1000 - _ns(e["ts"])) < 1e-6
        if e["ph"] == "X":
            assert e["dur"] >= 0
            assert abs(e["dur"] * 1000 - _ns(e["dur"])) < 1e-6


def test_complete_events_nest_properly_per_thread(trace: dict[str, Any]) -> None:
    by_thread: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    for e in _events(trace, "X"):
        begin = _ns(e["ts"])
        by_thread[e["pid"], e["tid"]].append((begin, begin + _ns(e["dur"])))
    assert by_thread
    for thread, spans in by_thread.items():
        stack: list[int] = []  # ends of the open ancestors
        for begin, end in sorted(spans, key=lambda s: (s[0], -s[1])):
            while stack and stack[-1] <= begin:
                stack.pop()
            assert not stack or end <= stack[-1], f"partial overlap on {thread}"
            stack.append(end)


def test_one_thread_per_sandbox_sorted_numerically(trace: dict[str, Any]) -> None:
    threads = _threads(trace, "sandboxes")
    assert sorted(threads.values()) == sorted(f"sandbox {i}" for i in range(N_SANDBOXES))
    sort_index = {
        e["tid"]: e["args"]["sort_index"]
        for e in _events(trace, "M")
        if e["name"] == "thread_sort_index" and e["tid"] in threads
    }
    for tid, name in threads.items():
        # Even indices: a sandbox's branch track (if any) sorts right after it.
        assert sort_index[tid] == 2 * int(name.split()[1])
    stages = _events(trace, "X", "stage")
    assert len(stages) == 2 * N_SANDBOXES
    for e in stages:
        assert threads[e["tid"]] == f"sandbox {e['args']['sandbox']}"
        assert e["name"] in ("setup", "net")


def test_one_thread_per_lock_and_sub_tracks_for_overlapping_holds(
    trace: dict[str, Any],
) -> None:
    threads = _threads(trace, "locks")
    lanes: dict[str, list[str]] = defaultdict(list)
    for name in threads.values():
        lanes[name.split(" #")[0]].append(name)
    assert sorted(lanes) == sorted(LOCKS)
    # Exclusive locks never need a second track; concurrent readers do.
    assert lanes["rtnl"] == ["rtnl"]
    assert lanes["css_set_lock"] == ["css_set_lock"]
    assert len(lanes["rw"]) >= 2
    assert sorted(lanes["rw"]) == sorted(
        ["rw", *(f"rw #{k}" for k in range(2, len(lanes["rw"]) + 1))]
    )
    # Holds on the extra tracks are holds of that lock, and no track overlaps.
    for e in _events(trace, "X", "lock-hold"):
        assert threads[e["tid"]].split(" #")[0] == e["args"]["lock"]
        assert e["name"] == f"sandbox {e['args']['sandbox']} · {e['args']['stage']}"


def test_one_hold_event_per_lock_acquisition(trace: dict[str, Any], result: Result) -> None:
    holds = _events(trace, "X", "lock-hold")
    assert len(holds) == sum(s.acquisitions for s in result.locks.values())
    for name, stats in result.locks.items():
        assert sum(e["args"]["lock"] == name for e in holds) == stats.acquisitions
        hold_us = sum(e["dur"] for e in holds if e["args"]["lock"] == name)
        assert hold_us == pytest.approx(stats.hold_s * 1e6, abs=1e-3 * stats.acquisitions)


def test_waits_sit_on_the_sandbox_tracks(trace: dict[str, Any], result: Result) -> None:
    threads = _threads(trace, "sandboxes")
    waits = _events(trace, "X", "lock-wait")
    assert len(waits) == sum(s.contended for s in result.locks.values()) > 0
    admits = _events(trace, "X", "gate-wait")
    assert len(admits) == result.gates["admit"].waited > 0
    for e in waits:
        assert e["name"] == f"wait {e['args']['lock']}"
        assert threads[e["tid"]] == f"sandbox {e['args']['sandbox']}"
    for e in admits:
        assert e["name"] == "admit admit"
        assert threads[e["tid"]] == f"sandbox {e['args']['sandbox']}"


def test_cpu_counter(trace: dict[str, Any]) -> None:
    counters = _events(trace, "C")
    assert counters
    assert {e["name"] for e in counters} == {"cpu"}
    times = [e["ts"] for e in counters]
    assert times == sorted(times) and len(set(times)) == len(times)
    for e in counters:
        assert set(e["args"]) == {"busy_cores", "spin_cores", "zeroing_gib_s"}
        assert e["args"]["zeroing_gib_s"] >= 0
        assert 0 <= e["args"]["spin_cores"] <= e["args"]["busy_cores"] <= 2
    assert max(e["args"]["busy_cores"] for e in counters) == 2
    assert max(e["args"]["spin_cores"] for e in counters) > 0  # rtnl waiters spin
    assert counters[-1]["args"]["busy_cores"] == 0  # the run ends idle


def test_same_program_same_bytes(tmp_path: Path) -> None:
    first, second = (run_program(_program(), record=True).recording for _ in range(2))
    assert first is not None and second is not None
    assert json.dumps(chrome_trace(first)) == json.dumps(chrome_trace(second))
    for name in ("a.json", "b.json", "a.json.gz", "b.json.gz"):
        write_chrome_trace(first if name.startswith("a") else second, tmp_path / name)
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    assert (tmp_path / "a.json.gz").read_bytes() == (tmp_path / "b.json.gz").read_bytes()


def test_writer_leaves_only_the_target(tmp_path: Path, result: Result) -> None:
    assert result.recording is not None
    path = tmp_path / "storm.trace.json"
    path.write_text("old")
    write_chrome_trace(result.recording, path, title="t")
    assert os.listdir(tmp_path) == ["storm.trace.json"]
    text = path.read_text(encoding="utf-8")
    assert "sandbox 0 · setup" in text  # UTF-8, not \u escapes
    assert json.loads(text) == chrome_trace(result.recording, title="t")
    assert path.stat().st_mode & 0o777 == 0o644


def test_writer_gzips_a_gz_path(tmp_path: Path, result: Result) -> None:
    assert result.recording is not None
    path = tmp_path / "storm.json.gz"
    write_chrome_trace(result.recording, path)
    assert os.listdir(tmp_path) == ["storm.json.gz"]
    raw = path.read_bytes()
    assert raw[:2] == b"\x1f\x8b"
    assert json.loads(gzip.decompress(raw)) == chrome_trace(result.recording)


@pytest.mark.parametrize("name", ["storm.json", "storm.json.gz"])
@pytest.mark.parametrize("existing", [False, True])
def test_a_write_that_fails_half_way_leaves_nothing(
    tmp_path: Path, result: Result, monkeypatch: pytest.MonkeyPatch, name: str, existing: bool
) -> None:
    assert result.recording is not None
    path = tmp_path / name
    if existing:
        path.write_bytes(b"previous trace")
    real_encode = json.JSONEncoder.encode
    calls = 0

    def failing_encode(self: json.JSONEncoder, o: Any) -> str:
        nonlocal calls
        calls += 1
        if calls == 20:
            # Half-way: the temporary file is there, the target untouched.
            assert any(p.name.endswith(".tmp") for p in tmp_path.iterdir())
            raise OSError("disk full")
        return real_encode(self, o)

    monkeypatch.setattr(json.JSONEncoder, "encode", failing_encode)
    with pytest.raises(OSError, match="disk full"):
        write_chrome_trace(result.recording, path)
    assert calls == 20
    if existing:
        assert os.listdir(tmp_path) == [name]
        assert path.read_bytes() == b"previous trace"
    else:
        assert os.listdir(tmp_path) == []


def test_missing_directory_raises_without_residue(tmp_path: Path, result: Result) -> None:
    assert result.recording is not None
    with pytest.raises(FileNotFoundError):
        write_chrome_trace(result.recording, tmp_path / "nope" / "t.json")
    assert os.listdir(tmp_path) == []


@given(
    st.lists(
        st.tuples(st.integers(0, 50), st.integers(0, 20)).map(lambda t: (t[0], t[0] + t[1])),
        max_size=40,
    )
)
def test_lanes_never_overlap_and_are_as_few_as_possible(spans: list[tuple[int, int]]) -> None:
    spans.sort()
    lanes, n_lanes = _assign_lanes(spans)
    assert len(lanes) == len(spans)
    last_end: dict[int, int] = {}
    for (begin, end), lane in zip(spans, lanes, strict=True):
        assert 0 <= lane < n_lanes
        assert last_end.get(lane, begin) <= begin  # touching is fine, overlap is not
        last_end[lane] = end
    # Optimal: as many lanes as the largest set of pairwise-conflicting spans,
    # where an earlier span conflicts with a later one that begins before it ends.
    depth = max(
        (1 + sum(e > spans[j][0] for _, e in spans[:j]) for j in range(len(spans))), default=0
    )
    assert n_lanes == depth


def test_a_wait_for_a_shared_vport_reads_as_one() -> None:
    """Sandboxes waiting for their tenant's vPort (a signal) are labelled as
    waiting for it, not as waiting for admission."""
    from bootstorm.models import Scenario, compile_scenario

    program = compile_scenario(Scenario(cni="ipvlan", sandboxes=20, tenants=2))
    result = run_program(program, record=True)
    assert result.recording is not None
    trace = chrome_trace(result.recording)
    signal_waits = _events(trace, "X", "signal-wait")
    assert signal_waits and not _events(trace, "X", "gate-wait")
    assert {e["name"] for e in signal_waits} <= {"wait for vport/0", "wait for vport/1"}
