"""The kernel collector: lock contention (and softirqs) from a dedicated tracefs instance.

It never touches the global trace buffer: it makes
``instances/bootstorm-<pid>``, sets ``trace_clock=mono`` (CLOCK_MONOTONIC,
the clock the testbed stamps its stage spans with), turns off pointer
hashing so lock addresses can be looked up, turns on ``options/stacktrace``
so each event carries its call stack (the lock's name comes from it), turns
on ``options/record-tgid`` where the kernel has it (each event then names
its process too: a multi-threaded plugin's waits join by process), and
enables ``lock:contention_begin/end`` (and ``irq:softirq_entry/exit`` on
request).

It reads the buffer once, at the end, rather than ``trace_pipe`` during the
run: on a 2-core host a reader thread parsing text in Python would compete
for the cores (and the GIL) with the very storm it measures. The buffer is
made large instead (``buffer_size_kb`` per CPU; by default 64 MiB in all,
at least 4 MiB per CPU: a 100-sandbox storm on 2 cores writes a few MiB of
events with stacks, so this leaves a wide margin) and set to
``overwrite=0``, so if it ever fills the *newest* events are dropped and
counted (``overrun`` in the trace header) rather than silently losing the
storm's start.

The instance is removed on every exit path: the context manager's exit,
an ``atexit`` hook (a normal interpreter exit after an exception), and the
CLI turns SIGINT/SIGTERM into exceptions that unwind through the exit. A
SIGKILLed run's instance is removed by :func:`sweep_instances` (its pid is
dead). tracefs is mounted at /sys/kernel/tracing if it is not, and
unmounted afterwards only if this collector mounted it.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from .._names import TRACEFS_INSTANCE_PREFIX
from ._parse import (
    Contention,
    KernelEvent,
    SoftirqRun,
    pair_contention,
    pair_softirqs,
    parse_events,
)

__all__ = [
    "KernelCapture",
    "KernelCollector",
    "TracefsError",
    "default_buffer_size_kb",
    "sweep_instances",
]

log = logging.getLogger(__name__)

TRACEFS = Path("/sys/kernel/tracing")
#: ``<pid>`` files of collectors that mounted tracefs, so that the sweep can
#: unmount what a SIGKILLed collector mounted (and nothing else).
MOUNT_MARKERS = Path("/run/bootstorm-tracefs-mounts")
DEFAULT_BUFFER_TOTAL_KB = 64 * 1024
MIN_BUFFER_PER_CPU_KB = 4 * 1024


def default_buffer_size_kb() -> int:
    """Per-CPU buffer: 64 MiB over all CPUs, at least 4 MiB each."""
    return max(MIN_BUFFER_PER_CPU_KB, DEFAULT_BUFFER_TOTAL_KB // (os.cpu_count() or 1))


LOCK_EVENTS = ("lock/contention_begin", "lock/contention_end")
SOFTIRQ_EVENTS = ("irq/softirq_entry", "irq/softirq_exit")
_UMOUNT_FLAGS = 0  # no MNT_DETACH: a busy mount stays, and we say so


class TracefsError(RuntimeError):
    """tracefs or the events needed are not available."""


def _is_mounted(path: Path) -> bool:
    with open("/proc/self/mounts", encoding="utf-8") as fh:
        return any(line.split()[1] == str(path) and line.split()[2] == "tracefs" for line in fh)


def _mount(path: Path) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(b"nodev", bytes(path), b"tracefs", 0, None) != 0:
        err = ctypes.get_errno()
        raise TracefsError(f"cannot mount tracefs on {path}: {os.strerror(err)}")


def _umount(path: Path) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.umount2(bytes(path), _UMOUNT_FLAGS) != 0:
        log.warning("tracefs left mounted on %s: %s", path, os.strerror(ctypes.get_errno()))


def _write(path: Path, value: str) -> None:
    path.write_text(value + "\n")


@dataclass(frozen=True)
class KernelCapture:
    """What one collection saw."""

    contentions: tuple[Contention, ...]
    softirqs: tuple[SoftirqRun, ...]
    events: int
    unmatched: int
    overrun: int
    buffer_size_kb: int
    event_names: tuple[str, ...]
    #: Whether events carry their process id (``options/record-tgid``).
    record_tgid: bool = False


def _overrun(instance: Path) -> int:
    """Events lost to a full buffer, summed over CPUs (``per_cpu/cpuN/stats``)."""
    total = 0
    for stats in sorted(instance.glob("per_cpu/cpu*/stats")):
        with contextlib.suppress(OSError):
            for line in stats.read_text().splitlines():
                m = re.match(r"(overrun|dropped events):\s*(\d+)", line)
                if m:
                    total += int(m.group(2))
    return total


def _remove_instance(instance: Path) -> None:
    """Disable what is enabled and remove the instance directory."""
    with contextlib.suppress(OSError):
        _write(instance / "tracing_on", "0")
    for event in (*LOCK_EVENTS, *SOFTIRQ_EVENTS):
        with contextlib.suppress(OSError):
            _write(instance / "events" / event / "enable", "0")
    with contextlib.suppress(OSError):  # the kernel's pid→tgid map is freed when no one asks
        _write(instance / "options" / "record-tgid", "0")
    try:
        instance.rmdir()
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("cannot remove tracefs instance %s: %s", instance, exc.strerror)


class KernelCollector:
    """Collect contention (and softirq) events around a block of code.

    >>> with KernelCollector(softirqs=False) as kc:   # doctest: +SKIP
    ...     run_storm()
    >>> capture = kc.capture                           # doctest: +SKIP
    """

    def __init__(
        self,
        *,
        softirqs: bool = False,
        buffer_size_kb: int | None = None,
        tracefs: Path = TRACEFS,
    ) -> None:
        if buffer_size_kb is None:
            buffer_size_kb = default_buffer_size_kb()
        if buffer_size_kb < 64:
            raise ValueError(f"buffer_size_kb: must be at least 64, but got {buffer_size_kb}")
        self.softirqs = softirqs
        self.buffer_size_kb = buffer_size_kb
        self.tracefs = tracefs
        self.instance = tracefs / "instances" / f"{TRACEFS_INSTANCE_PREFIX}{os.getpid()}"
        self._events = LOCK_EVENTS + (SOFTIRQ_EVENTS if softirqs else ())
        self.capture: KernelCapture | None = None
        self.record_tgid = False

    def __enter__(self) -> KernelCollector:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if exc_type is None and self.capture is None:
                self.stop()
        finally:
            self.close()

    def start(self) -> None:
        if os.geteuid() != 0:
            raise TracefsError("the kernel collector needs root")
        if not _is_mounted(self.tracefs):
            _mount(self.tracefs)
            MOUNT_MARKERS.mkdir(parents=True, exist_ok=True)
            (MOUNT_MARKERS / str(os.getpid())).touch()
        atexit.register(self.close)
        try:
            if self.instance.exists():  # our pid's, from an earlier collector: stale
                _remove_instance(self.instance)
            self.instance.mkdir()
            for event in self._events:
                if not (self.instance / "events" / event / "enable").exists():
                    raise TracefsError(f"tracefs has no event {event.replace('/', ':')}")
            _write(self.instance / "tracing_on", "0")
            _write(self.instance / "buffer_size_kb", str(self.buffer_size_kb))
            _write(self.instance / "trace_clock", "mono")
            _write(self.instance / "options" / "overwrite", "0")
            _write(self.instance / "options" / "stacktrace", "1")
            with contextlib.suppress(OSError, FileNotFoundError):
                _write(self.instance / "options" / "hash-ptr", "0")  # raw lock addresses
            try:  # an instance has the option since Linux 4.13-ish; without it, tids only
                _write(self.instance / "options" / "record-tgid", "1")
                self.record_tgid = True
            except OSError:
                self.record_tgid = False
            for event in self._events:
                _write(self.instance / "events" / event / "enable", "1")
            _write(self.instance / "tracing_on", "1")
        except BaseException:
            self.close()
            raise

    def stop(self) -> KernelCapture:
        """Stop tracing, read and parse the buffer; the instance stays until close()."""
        _write(self.instance / "tracing_on", "0")
        overrun = _overrun(self.instance)
        with open(self.instance / "trace", encoding="utf-8", errors="replace") as fh:
            events: list[KernelEvent] = parse_events(fh)
        contentions, unmatched = pair_contention(events)
        softirqs = pair_softirqs(events) if self.softirqs else []
        self.capture = KernelCapture(
            contentions=tuple(contentions),
            softirqs=tuple(softirqs),
            events=len(events),
            unmatched=unmatched,
            overrun=overrun,
            buffer_size_kb=self.buffer_size_kb,
            event_names=tuple(e.replace("/", ":") for e in self._events),
            record_tgid=self.record_tgid,
        )
        if overrun:
            log.warning("kernel trace buffer overran: %d events lost", overrun)
        return self.capture

    def close(self) -> None:
        """Remove the instance (and unmount tracefs if we mounted it); idempotent."""
        with contextlib.suppress(Exception):
            atexit.unregister(self.close)
        if self.instance.exists():
            _remove_instance(self.instance)
        if _is_mounted(self.tracefs):
            _release_mounts(self.tracefs, own_pid=os.getpid())


def _release_mounts(tracefs: Path, *, own_pid: int | None = None) -> bool:
    """Unmount tracefs that this collector or a dead one mounted, once no instance needs it.

    While any ``bootstorm-*`` instance exists the markers stay, so whichever
    collector (or sweep) finishes last unmounts; a mount nobody marked (it
    was there before us) is never touched.
    """
    try:
        markers = [
            m
            for m in MOUNT_MARKERS.iterdir()
            if m.name.isdigit() and (int(m.name) == own_pid or not _pid_alive(int(m.name)))
        ]
    except FileNotFoundError:
        return False
    if not markers or list((tracefs / "instances").glob(f"{TRACEFS_INSTANCE_PREFIX}*")):
        return False
    _umount(tracefs)
    for marker in markers:
        marker.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        MOUNT_MARKERS.rmdir()
    return True


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_instances(tracefs: Path = TRACEFS) -> list[str]:
    """Remove ``bootstorm-<pid>`` instances whose process is gone; their names.

    If tracefs is not mounted it is mounted for the sweep (instances outlive
    the mount) and unmounted again.
    """
    if os.geteuid() != 0:
        return []
    mounted_here = False
    removed: list[str] = []
    try:
        if not _is_mounted(tracefs):
            try:
                _mount(tracefs)
            except TracefsError:
                return []
            mounted_here = True
        prefix = TRACEFS_INSTANCE_PREFIX
        for inst in sorted((tracefs / "instances").glob(f"{prefix}*")):
            pid = inst.name[len(prefix) :]
            if pid.isdigit() and not _pid_alive(int(pid)):
                _remove_instance(inst)
                removed.append(inst.name)
        # tracefs that a killed collector mounted: unmounted once nobody uses it.
        if _release_mounts(tracefs):
            mounted_here = False
    finally:
        if mounted_here:
            _umount(tracefs)
    return removed
