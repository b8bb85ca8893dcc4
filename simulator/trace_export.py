"""Export a :class:`Recording` to Chrome trace-event JSON, for ui.perfetto.dev.

A recorded storm is thousands of overlapping spans; a timeline is the fastest
way to see *who* waited on *what*. The output is the "JSON Object Format" of
the Trace Event Format (``{"traceEvents": [...], "displayTimeUnit": "ms",
"metadata": {...}}``), which Perfetto and chrome://tracing both open:

- process ``cpu``: a counter ``cpu`` with ``busy_cores`` and ``spin_cores``;
- process ``locks``: one thread per lock with its hold spans. Holds that
  overlap (readers of a reader-writer lock) go to extra threads
  ``"<lock> #2"``, ``"<lock> #3"``... assigned greedily, because Perfetto
  only accepts properly nested complete events on one thread;
- process ``sandboxes``: one thread per sandbox with its stage spans and,
  nested inside them, its lock waits (``wait <lock>``) and admission-gate
  waits (``admit <gate>``).

Times are simulated seconds. Every span end point is rounded once to an
integer nanosecond and ``dur`` is the difference of two rounded end points:
rounding is monotone, so spans that nest (or touch) in the recording still
nest (or touch) exactly in the file, where independent float rounding of
``ts`` and ``dur`` could push a child a nanosecond past its parent. ``ts``
and ``dur`` are written in microseconds (the format's unit, whatever
``displayTimeUnit`` says) as ``ns / 1000``, whose shortest decimal form has
at most three decimals, so a reader multiplying by 1000 and rounding gets the
nanoseconds back.

Output is deterministic: the same recording gives the same bytes (no wall
clock, no temp-file names, a fixed gzip header).
"""

from __future__ import annotations

import contextlib
import gzip
import heapq
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeAlias

import numpy as np

from .recorder import Recording

__all__ = ["chrome_trace", "write_chrome_trace", "write_trace_file"]

Event: TypeAlias = dict[str, Any]

# Process ids; the sort index puts the overview (cpu, locks) above the
# hundreds of sandbox threads.
_PID_CPU = 1
_PID_LOCKS = 2
_PID_SANDBOXES = 3
_PROCESSES = ((_PID_CPU, "cpu"), (_PID_LOCKS, "locks"), (_PID_SANDBOXES, "sandboxes"))
# Thread ids are unique across processes and never equal a pid: Perfetto keys
# JSON threads by tid and would otherwise merge or re-parent them.
_TID_BASE = 1000
# Branches (work a sandbox does not wait for) get a track of their own next to
# their sandbox's: slices on one track must nest, and a branch overlaps its
# sandbox's later stages.
_TID_BRANCH_BASE = 1_000_000_000

# Rank of a span kind among spans of one thread with the same extent: the
# stage is the parent.
_RANK_STAGE = 0
_RANK_WAIT = 1

_BLOCK = 1 << 20
"""Characters per write: few calls into the file or the compressor, bounded memory."""

_GZIP_LEVEL = 6
"""Level 9 costs several times the CPU for a few percent on traces."""


def _ns(t_s: float) -> int:
    """Simulated seconds to integer nanoseconds (monotone, so nesting survives)."""
    return round(t_s * 1e9)


def _complete(
    name: str, cat: str, pid: int, tid: int, begin_ns: int, end_ns: int, args: dict[str, Any]
) -> Event:
    return {
        "name": name,
        "cat": cat,
        "ph": "X",
        "pid": pid,
        "tid": tid,
        "ts": begin_ns / 1000,
        "dur": (end_ns - begin_ns) / 1000,
        "args": args,
    }


def _metadata(name: str, pid: int, tid: int, value: str | int) -> Event:
    key = "sort_index" if name.endswith("_sort_index") else "name"
    return {"name": name, "ph": "M", "pid": pid, "tid": tid, "args": {key: value}}


def _stage_namer(recording: Recording) -> Callable[[int], str]:
    """Stage index to name; the executor files work outside any stage under ``-``."""
    names = recording.stage_names

    def name(i: int) -> str:
        return names[i] if 0 <= i < len(names) else "-"

    return name


def _assign_lanes(spans: list[tuple[int, int]]) -> tuple[list[int], int]:
    """Greedy interval partitioning of ``(begin_ns, end_ns)`` spans sorted by begin.

    Each span takes the lowest-numbered lane that is free at its begin (a
    lane whose last span ended at or before it), so touching spans share a
    lane and the number of lanes is the largest number of spans overlapping
    at one instant: one lane for an exclusive lock.
    """
    busy: list[tuple[int, int]] = []  # (end, lane)
    free: list[int] = []
    lanes: list[int] = []
    n_lanes = 0
    for begin, end in spans:
        while busy and busy[0][0] <= begin:
            heapq.heappush(free, heapq.heappop(busy)[1])
        if free:
            lane = heapq.heappop(free)
        else:
            lane = n_lanes
            n_lanes += 1
        heapq.heappush(busy, (end, lane))
        lanes.append(lane)
    return lanes, n_lanes


def _lock_events(recording: Recording, tid0: int) -> tuple[list[Event], list[Event]]:
    """Thread metadata and hold events of the ``locks`` process."""
    stage = _stage_namer(recording)
    holds: list[list[tuple[int, int, int, int]]] = [[] for _ in recording.lock_names]
    for lock, sandbox, st, is_hold, begin, end in recording.lock_spans:
        if is_hold:
            holds[lock].append((_ns(begin), _ns(end), sandbox, st))
    meta: list[Event] = []
    events: list[Event] = []
    tid = tid0
    for lock, name in enumerate(recording.lock_names):
        spans = sorted(holds[lock])
        lanes, n_lanes = _assign_lanes([(b, e) for b, e, _, _ in spans])
        tids = list(range(tid, tid + max(n_lanes, 1)))
        for lane, lane_tid in enumerate(tids):
            meta.append(_metadata("thread_name", _PID_LOCKS, lane_tid, _lane_name(name, lane)))
            meta.append(_metadata("thread_sort_index", _PID_LOCKS, lane_tid, lane_tid - tid0))
        # Spans are sorted by begin, so every lane's events come out in order.
        for (begin, end, sandbox, st), lane in zip(spans, lanes, strict=True):
            events.append(
                _complete(
                    f"sandbox {sandbox} · {stage(st)}",
                    "lock-hold",
                    _PID_LOCKS,
                    tids[lane],
                    begin,
                    end,
                    {"lock": name, "sandbox": sandbox, "stage": stage(st)},
                )
            )
        tid += len(tids)
    events.sort(key=lambda ev: ev["tid"])  # stable: per-lane begin order is kept
    return meta, events


def _lane_name(lock: str, lane: int) -> str:
    return lock if lane == 0 else f"{lock} #{lane + 1}"


def _sandbox_events(recording: Recording, n: int) -> tuple[list[Event], list[Event]]:
    """Thread metadata and stage / wait events of the ``sandboxes`` process."""
    stage = _stage_namer(recording)
    # (sandbox, begin, -end, rank, seq): parents before children at equal begin.
    keyed: list[tuple[int, int, int, int, int, Event]] = []

    def add(sandbox: int, rank: int, begin_ns: int, end_ns: int, ev: Event) -> None:
        keyed.append((sandbox, begin_ns, -end_ns, rank, len(keyed), ev))

    def tid_of(task: int) -> int:
        return _TID_BASE + task if task < n else _TID_BRANCH_BASE + task

    branch_tracks: dict[int, str] = {}
    for task, st, begin, end in recording.stage_spans:
        b, e = _ns(begin), _ns(end)
        sandbox = recording.sandbox_of(task)
        if task >= n:
            branch_tracks.setdefault(task, stage(st))
        add(
            task,
            _RANK_STAGE,
            b,
            e,
            _complete(stage(st), "stage", _PID_SANDBOXES, tid_of(task), b, e, {"sandbox": sandbox}),
        )
    for lock, task, st, is_hold, begin, end in recording.lock_spans:
        if is_hold:
            continue
        b, e = _ns(begin), _ns(end)
        name = recording.lock_names[lock]
        sandbox = recording.sandbox_of(task)
        args = {"lock": name, "sandbox": sandbox, "stage": stage(st)}
        ev = _complete(f"wait {name}", "lock-wait", _PID_SANDBOXES, tid_of(task), b, e, args)
        add(task, _RANK_WAIT, b, e, ev)
    for gate, sandbox, begin, end in recording.gate_spans:
        b, e = _ns(begin), _ns(end)
        name = recording.gate_names[gate]
        tid = _TID_BASE + sandbox
        args = {"gate": name, "sandbox": sandbox}
        if gate in recording.signal_gates:  # another sandbox makes what it needs
            ev = _complete(f"wait for {name}", "signal-wait", _PID_SANDBOXES, tid, b, e, args)
        else:
            ev = _complete(f"admit {name}", "gate-wait", _PID_SANDBOXES, tid, b, e, args)
        add(sandbox, _RANK_WAIT, b, e, ev)
    keyed.sort(key=lambda k: k[:5])
    meta: list[Event] = []
    for sandbox in range(n):
        tid = _TID_BASE + sandbox
        meta.append(_metadata("thread_name", _PID_SANDBOXES, tid, f"sandbox {sandbox}"))
        meta.append(_metadata("thread_sort_index", _PID_SANDBOXES, tid, 2 * sandbox))
    for task, kind in sorted(branch_tracks.items()):
        tid, parent = tid_of(task), recording.sandbox_of(task)
        meta.append(_metadata("thread_name", _PID_SANDBOXES, tid, f"sandbox {parent} · {kind}"))
        meta.append(_metadata("thread_sort_index", _PID_SANDBOXES, tid, 2 * parent + 1))
    return meta, [k[5] for k in keyed]


def _cpu_events(recording: Recording) -> list[Event]:
    """The CPU counter, one event per change of its value.

    Samples that round to the same nanosecond keep the last one (it holds from
    there on), and samples equal to the previous value are dropped: the step
    function Perfetto draws is the same, with far fewer events in a storm.
    """
    if not recording.cpu_samples:
        return []
    frame = recording.cpu_frame()
    ns = np.rint(frame["time_s"].to_numpy(dtype=np.float64) * 1e9).astype(np.int64)
    busy = frame["busy_cores"].to_numpy()
    spin = frame["spin_cores"].to_numpy(dtype=np.float64)
    zero = frame["zero_gib_s"].to_numpy(dtype=np.float64)
    keep = np.ones(ns.shape, dtype=bool)
    keep[:-1] = ns[1:] != ns[:-1]  # the last sample of each nanosecond
    ns, busy, spin, zero = ns[keep], busy[keep], spin[keep], zero[keep]
    changed = np.ones(ns.shape, dtype=bool)
    changed[1:] = (busy[1:] != busy[:-1]) | (spin[1:] != spin[:-1]) | (zero[1:] != zero[:-1])
    return [
        {
            "name": "cpu",
            "cat": "cpu",
            "ph": "C",
            "pid": _PID_CPU,
            "tid": _PID_CPU,
            "ts": t / 1000,
            "args": {"busy_cores": b, "spin_cores": sp, "zeroing_gib_s": z},
        }
        for t, b, sp, z in zip(
            ns[changed].tolist(),
            busy[changed].tolist(),
            spin[changed].tolist(),
            zero[changed].tolist(),
            strict=True,
        )
    ]


def chrome_trace(recording: Recording, *, title: str = "bootstorm") -> dict[str, Any]:
    """The recording as a Chrome trace-event JSON object (see the module docstring).

    ``title`` goes into ``metadata``. The dict holds only JSON types, so
    ``json.dumps`` of it is the file :func:`write_chrome_trace` writes, up to
    whitespace.
    """
    n = recording.n_sandboxes
    meta: list[Event] = []
    for sort_index, (pid, name) in enumerate(_PROCESSES):
        meta.append(_metadata("process_name", pid, pid, name))
        meta.append(_metadata("process_sort_index", pid, pid, sort_index))
    lock_meta, lock_events = _lock_events(recording, _TID_BASE + n)
    sandbox_meta, sandbox_events = _sandbox_events(recording, n)
    events = [
        *meta,
        *lock_meta,
        *sandbox_meta,
        *_cpu_events(recording),
        *lock_events,
        *sandbox_events,
    ]
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "metadata": {
            "title": title,
            "generator": "bootstorm.simulator.trace_export",
            "time_unit": "ts and dur in microseconds of simulated time",
            "sandboxes": n,
            "cores": recording.cores,
            "stages": list(recording.stage_names),
            "locks": list(recording.lock_names),
            "gates": list(recording.gate_names),
        },
    }


def _chunks(trace: dict[str, Any]) -> Iterator[str]:
    """The trace as JSON text, one event per line.

    One line per event keeps the file greppable and lets the writer stream it
    without building one string of the whole trace; each event goes through
    the C encoder (``json.dump`` encodes in pure Python), with one encoder
    for all events (``json.dumps`` with options builds one per call).
    ``ensure_ascii=False`` writes names like ``sandbox 3 · netns`` as UTF-8:
    older Perfetto tokenizers reject ``\\u`` escapes.
    """
    encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
    yield '{"traceEvents":[\n'
    first = True
    for event in trace["traceEvents"]:
        yield ("" if first else ",\n") + encode(event)
        first = False
    yield "\n]"
    for key, value in trace.items():
        if key != "traceEvents":
            yield f",{encode(key)}:{encode(value)}"
    yield "}\n"


def _write_text(trace: dict[str, Any], write: Callable[[bytes], object]) -> None:
    """Stream the JSON text to ``write`` in UTF-8 blocks of about ``_BLOCK`` bytes."""
    block: list[str] = []
    size = 0
    for chunk in _chunks(trace):
        block.append(chunk)
        size += len(chunk)
        if size >= _BLOCK:
            write("".join(block).encode("utf-8"))
            block.clear()
            size = 0
    write("".join(block).encode("utf-8"))


def write_chrome_trace(
    recording: Recording, path: str | os.PathLike[str], *, title: str = "bootstorm"
) -> None:
    """Write :func:`chrome_trace` of ``recording`` to ``path``, atomically.

    The trace goes to a temporary file in the target's directory (same file
    system, so the final rename is atomic), is synced, then renamed over
    ``path``: a reader, or a crash, sees the old file or the complete new
    one, never half a trace. On any error the temporary file is removed and
    ``path`` is left as it was. A path ending in ``.gz`` is gzip-compressed
    (with a fixed header, so the bytes stay deterministic).
    """
    trace = chrome_trace(recording, title=title)
    write_trace_file(path, lambda write: _write_text(trace, write))


def write_trace_file(
    path: str | os.PathLike[str], emit: Callable[[Callable[[bytes], object]], None]
) -> None:
    """Write the bytes ``emit`` hands its argument to ``path``, atomically.

    A temporary file in the target's directory (same file system, so the
    rename is atomic) is written, synced, then renamed over ``path``; on any
    error it is removed and ``path`` is left as it was. A path ending in
    ``.gz`` is gzip-compressed with a fixed header (deterministic bytes).
    """
    target = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as exc:
        raise _cannot_write(target, exc) from None
    try:
        with os.fdopen(fd, "wb") as raw:
            if target.name.endswith(".gz"):
                with gzip.GzipFile(
                    filename="", mode="wb", fileobj=raw, compresslevel=_GZIP_LEVEL, mtime=0
                ) as gz:
                    emit(gz.write)
            else:
                emit(raw.write)
            raw.flush()
            os.fsync(raw.fileno())
        # mkstemp creates the file 0600; a trace is meant to be shared.
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            # A full disk, a quota, a read-only mount: the error names the
            # trace; the temporary file is gone and ``path`` is as it was.
            raise _cannot_write(target, exc) from None
        raise


def _cannot_write(target: Path, exc: OSError) -> OSError:
    """``exc`` naming ``target``: a full disk's ENOSPC comes from a write with
    no file name on it, and the command line says which file in one line only
    when the error names one."""
    return OSError(exc.errno, exc.strerror or str(exc), str(target))
