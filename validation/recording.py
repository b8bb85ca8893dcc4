"""Measured traces to and from the simulator's recording, and to Chrome trace-event JSON.

Here, above both, because it joins the bottom layer (``traces``) to the
simulator's recorder: ``traces`` depends on nothing of ours.

A measured storm becomes a :class:`~bootstorm.simulator.recorder.Recording`
(the simulator's recorder format) and goes through the simulator's own Chrome
exporter, so it draws exactly like a simulated one: process ``locks`` with
holds, process ``sandboxes`` with stage spans and the waits nested in them.
:func:`chrome_trace` puts a measured and a simulated storm in one file as two
process groups (``measured · …`` and ``simulated · …``) so they open side by
side in ui.perfetto.dev. Kernel spans that join no sandbox (other tasks'
contention, softirqs) go to a ``measured · kernel`` process, one track per CPU.
"""

from __future__ import annotations

import heapq
import json
import os
from collections.abc import Callable, Iterable
from typing import Any

from ..simulator.recorder import Recording
from ..simulator.trace_export import chrome_trace as recording_chrome_trace
from ..simulator.trace_export import write_trace_file
from ..traces.schema import AdmitSpan, LockSpan, ScenarioFacts, StageSpan, TraceHeader
from ..traces.trace import Trace

__all__ = ["chrome_trace", "from_recording", "to_recording", "write_chrome_trace"]

Event = dict[str, Any]

# Each group's pids and tids are shifted by these, so that the groups never
# share a pid or a tid (Perfetto keys JSON threads by tid).
_PID_STRIDE = 10
_TID_STRIDE = 1_000_000
_PID_KERNEL = 4  # after the simulator exporter's cpu (1), locks (2), sandboxes (3)


def _on_sandbox_thread(trace: Trace) -> Callable[[LockSpan], bool]:
    """Whether a lock span was waited by the thread that ran its sandbox's stage.

    Only those nest in the sandbox's track; waits joined to a sandbox through
    another task (its VMM process) overlap the thread's own and are drawn on
    the kernel tracks instead.
    """
    tids = {(s.sandbox, s.stage): s.tid for s in trace.spans}

    def own(lk: LockSpan) -> bool:
        if lk.sandbox is None:
            return False
        tid = tids.get((lk.sandbox, lk.stage)) if lk.stage is not None else None
        return tid is None or lk.tid is None or tid == lk.tid

    return own


def to_recording(trace: Trace) -> Recording:
    """The trace in the simulator's recorder format, times from the storm's t=0.

    Lock spans that joined no sandbox, or joined one through another task
    than its stage's thread, are left out (the recording files every span
    under a sandbox's track); a wait is clipped to its stage span so it nests.
    """
    own = _on_sandbox_thread(trace)
    origin = trace.header.origin_s
    stages = list(trace.header.stages)
    for span in trace.spans:
        if span.stage not in stages:
            stages.append(span.stage)
    stage_index = {name: i for i, name in enumerate(stages)}
    lock_names = sorted({lk.lock for lk in trace.locks if own(lk)})
    lock_index = {name: i for i, name in enumerate(lock_names)}
    gate_names = sorted({a.stage for a in trace.admits})
    gate_index = {name: i for i, name in enumerate(gate_names)}
    bounds = {(s.sandbox, s.stage): (s.start_s, s.end_s) for s in trace.spans}
    lock_spans = []
    for lk in trace.locks:
        if lk.sandbox is None or not own(lk):
            continue
        begin, end = lk.start_s, lk.end_s
        if lk.stage is not None and (lk.sandbox, lk.stage) in bounds:
            lo, hi = bounds[(lk.sandbox, lk.stage)]
            begin, end = min(max(begin, lo), hi), min(max(end, lo), hi)
        st = stage_index.get(lk.stage, -1) if lk.stage is not None else -1
        lock_spans.append(
            (lock_index[lk.lock], lk.sandbox, st, lk.what == "hold", begin - origin, end - origin)
        )
    n = max(
        [trace.header.scenario.sandboxes, *(s.sandbox + 1 for s in trace.spans)],
    )
    return Recording(
        n_sandboxes=n,
        stage_names=tuple(stages),
        lock_names=tuple(lock_names),
        gate_names=tuple(gate_names),
        cores=trace.header.host.cores if trace.header.host is not None else 1,
        stage_spans=tuple(
            (s.sandbox, stage_index[s.stage], s.start_s - origin, s.end_s - origin)
            for s in trace.spans
        ),
        lock_spans=tuple(lock_spans),
        gate_spans=tuple(
            (gate_index[a.stage], a.sandbox, a.start_s - origin, a.end_s - origin)
            for a in trace.admits
        ),
        cpu_samples=(),
    )


def _sandbox_of(recording: Recording, task: int) -> int:
    """The sandbox of a task: newer recordings file branches as tasks >= n_sandboxes."""
    of = getattr(recording, "sandbox_of", None)
    return int(of(task)) if of is not None else task


def from_recording(recording: Recording, *, cni: str = "simulated") -> Trace:
    """A simulated run as a trace (source ``simulator``, clock ``simulated``)."""

    def stage(i: int) -> str | None:
        return recording.stage_names[i] if 0 <= i < len(recording.stage_names) else None

    header = TraceHeader(
        source="simulator",
        clock="simulated",
        stages=recording.stage_names,
        scenario=ScenarioFacts(sandboxes=recording.n_sandboxes, cni=cni, vm="simulated"),
    )
    spans = [
        StageSpan(
            sandbox=_sandbox_of(recording, sb), stage=recording.stage_names[st], start_s=b, end_s=e
        )
        for sb, st, b, e in recording.stage_spans
        if stage(st) is not None
    ]
    locks = [
        LockSpan(
            lock=recording.lock_names[lk],
            what="hold" if hold else "wait",
            sandbox=_sandbox_of(recording, sb),
            stage=stage(st),
            start_s=b,
            end_s=e,
        )
        for lk, sb, st, hold, b, e in recording.lock_spans
    ]
    admits = [
        AdmitSpan(
            sandbox=_sandbox_of(recording, sb), stage=recording.gate_names[g], start_s=b, end_s=e
        )
        for g, sb, b, e in recording.gate_spans
    ]
    return Trace(header=header, spans=tuple(spans), locks=tuple(locks), admits=tuple(admits))


def _lanes(spans: list[tuple[int, int]]) -> list[int]:
    """Greedy interval partitioning of spans sorted by begin: lowest free lane."""
    busy: list[tuple[int, int]] = []
    free: list[int] = []
    out: list[int] = []
    n = 0
    for begin, end in spans:
        while busy and busy[0][0] <= begin:
            heapq.heappush(free, heapq.heappop(busy)[1])
        lane = heapq.heappop(free) if free else n
        n = max(n, lane + 1)
        heapq.heappush(busy, (end, lane))
        out.append(lane)
    return out


def _kernel_events(trace: Trace, tid0: int) -> list[Event]:
    """Per-CPU tracks of softirqs and of contention by tasks outside any sandbox."""
    origin = trace.header.origin_s
    tracks: dict[str, list[tuple[int, int, str, str, dict[str, Any]]]] = {}
    for sirq in trace.softirqs:
        b, e = round((sirq.start_s - origin) * 1e9), round((sirq.end_s - origin) * 1e9)
        tracks.setdefault(f"cpu {sirq.cpu} softirq", []).append(
            (b, e, f"softirq {sirq.vec}", "softirq", {"cpu": sirq.cpu})
        )
    own = _on_sandbox_thread(trace)
    for lk in trace.locks:
        if own(lk):
            continue
        b, e = round((lk.start_s - origin) * 1e9), round((lk.end_s - origin) * 1e9)
        cpu = "?" if lk.cpu is None else str(lk.cpu)
        whose = "other tasks'" if lk.sandbox is None else "sandbox VMMs'"
        args = {"lock": lk.lock, "tid": lk.tid, "sandbox": lk.sandbox, "stage": lk.stage}
        tracks.setdefault(f"cpu {cpu} {whose} {lk.what}s", []).append(
            (b, e, f"{lk.what} {lk.lock}", f"lock-{lk.what}", args)
        )
    if not tracks:
        return []
    events: list[Event] = [
        _meta("process_name", _PID_KERNEL, _PID_KERNEL, "kernel"),
        _meta("process_sort_index", _PID_KERNEL, _PID_KERNEL, 3),
    ]
    tid = tid0
    for name in sorted(tracks):
        spans = sorted(tracks[name], key=lambda s: (s[0], -s[1]))
        lanes = _lanes([(b, e) for b, e, *_ in spans])
        for lane in range(max(lanes) + 1):
            label = name if lane == 0 else f"{name} #{lane + 1}"
            events.append(_meta("thread_name", _PID_KERNEL, tid + lane, label))
            events.append(_meta("thread_sort_index", _PID_KERNEL, tid + lane, tid + lane - tid0))
        for (b, e, label, cat, args), lane in zip(spans, lanes, strict=True):
            events.append(
                {
                    "name": label,
                    "cat": cat,
                    "ph": "X",
                    "pid": _PID_KERNEL,
                    "tid": tid + lane,
                    "ts": b / 1000,
                    "dur": (e - b) / 1000,
                    "args": args,
                }
            )
        tid += max(lanes) + 1
    return events


def _meta(name: str, pid: int, tid: int, value: str | int) -> Event:
    key = "sort_index" if name.endswith("_sort_index") else "name"
    return {"name": name, "ph": "M", "pid": pid, "tid": tid, "args": {key: value}}


def _group(events: Iterable[Event], label: str, group: int) -> list[Event]:
    """Shift a group's pids and tids and prefix its process names with ``label``."""
    out = []
    for ev in events:
        ev = dict(ev, pid=ev["pid"] + group * _PID_STRIDE, tid=ev["tid"] + group * _TID_STRIDE)
        if ev.get("ph") == "M" and ev["name"] == "process_name":
            ev["args"] = {"name": f"{label} · {ev['args']['name']}"}
        if ev.get("ph") == "M" and ev["name"] == "process_sort_index":
            ev["args"] = {"sort_index": ev["args"]["sort_index"] + group * _PID_STRIDE}
        out.append(ev)
    return out


def _measured_events(trace: Trace) -> list[Event]:
    base = recording_chrome_trace(to_recording(trace))["traceEvents"]
    return [*base, *_kernel_events(trace, tid0=_TID_STRIDE // 2)]


def chrome_trace(
    trace: Trace,
    *,
    simulated: Recording | Trace | None = None,
    title: str = "bootstorm",
) -> dict[str, Any]:
    """``trace`` (and ``simulated``, if given) as one Chrome trace-event JSON object.

    Each storm is its own group of processes, named after its source
    (``measured`` for the testbed, ``simulated`` for the simulator).
    """
    storms: list[tuple[str, list[Event]]] = []
    for item in (trace, simulated):
        if item is None:
            continue
        if isinstance(item, Recording):
            storms.append(("simulated", recording_chrome_trace(item)["traceEvents"]))
        elif item.header.source == "simulator":
            storms.append(("simulated", recording_chrome_trace(to_recording(item))["traceEvents"]))
        else:
            storms.append(("measured", _measured_events(item)))
    events: list[Event] = []
    for group, (label, evs) in enumerate(storms):
        events.extend(_group(evs, label, group))
    # Metadata first, as the simulator's exporter does.
    events.sort(key=lambda ev: ev.get("ph") != "M")
    header = trace.header
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "metadata": {
            "title": title,
            "generator": "bootstorm.validation.recording",
            "time_unit": "ts and dur in microseconds since each storm's t=0",
            "groups": [label for label, _ in storms],
            "sandboxes": header.scenario.sandboxes,
            "cni": header.scenario.cni,
            "host": header.host.model_dump(mode="json") if header.host is not None else None,
            "notes": list(header.notes),
        },
    }


def write_chrome_trace(
    path: str | os.PathLike[str],
    trace: Trace,
    *,
    simulated: Recording | Trace | None = None,
    title: str = "bootstorm",
) -> None:
    """Write :func:`chrome_trace` to ``path`` atomically (gzip if it ends in ``.gz``)."""
    data = json.dumps(
        chrome_trace(trace, simulated=simulated, title=title),
        ensure_ascii=False,
        separators=(",", ":"),
        allow_nan=False,
    ).encode("utf-8")
    write_trace_file(path, lambda write: write(data))
