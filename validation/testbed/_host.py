"""The host around a testbed storm: how busy it is, its facts, and signals
held off during cleanup."""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator

__all__ = ["CpuMeter", "busy_core_s_now", "busy_cores", "settle", "signals_deferred"]

log = logging.getLogger(__name__)


def _cpu_ticks() -> tuple[int, int, int]:
    """The host's (busy, idle, steal) clock ticks since boot (/proc/stat's
    ``cpu`` line: user nice system idle iowait irq softirq steal)."""
    with open("/proc/stat", encoding="ascii") as fh:
        f = [int(x) for x in fh.readline().split()[1:9]]
    return f[0] + f[1] + f[2] + f[5] + f[6], f[3] + f[4], f[7]


def busy_core_s_now() -> float:
    """Core-seconds the host's CPUs have been busy since boot (/proc/stat;
    steal is time it did not run), in its 10-ms clock ticks."""
    return _cpu_ticks()[0] / os.sysconf("SC_CLK_TCK")


def busy_cores(window_s: float) -> float:
    """Cores kept busy by the rest of the host, over ``window_s`` (/proc/stat);
    time stolen by a hypervisor counts as busy (this host cannot use it)."""
    busy0, idle0, steal0 = _cpu_ticks()
    time.sleep(window_s)
    busy1, idle1, steal1 = _cpu_ticks()
    cores = os.cpu_count() or 1
    idle = idle1 - idle0
    elapsed = busy1 - busy0 + idle + steal1 - steal0
    return cores * (1.0 - idle / elapsed) if elapsed > 0 else 0.0


class CpuMeter:
    """The host's busy CPU time over a storm, sampled from /proc/stat.

    /proc/stat counts in clock ticks (10 ms), coarse against a storm of a few
    seconds, so a thread samples it every ``interval_s`` with the monotonic
    time of each sample, and :meth:`busy_core_s` interpolates between the two
    samples around each end of the window asked for (the storm's end is only
    known once its spans are in).
    """

    def __init__(self, *, interval_s: float = 0.02) -> None:
        self._interval_s = interval_s
        self._samples: list[tuple[float, float]] = []  # (monotonic s, busy core-s so far)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-meter", daemon=True)

    def _busy_now(self) -> float:
        return busy_core_s_now()

    def _run(self) -> None:
        while True:
            self._samples.append((time.monotonic(), self._busy_now()))
            if self._stop.wait(self._interval_s):
                self._samples.append((time.monotonic(), self._busy_now()))
                return

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Take the last sample and end the thread (again: nothing more)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def busy_core_s(self, start_s: float, end_s: float) -> float | None:
        """Busy core-seconds between two monotonic times; None if the samples
        do not cover them."""
        samples = list(self._samples)
        if len(samples) < 2 or samples[0][0] > start_s or samples[-1][0] < end_s:
            return None

        def at(t: float) -> float:
            for (t0, b0), (t1, b1) in itertools.pairwise(samples):
                if t0 <= t <= t1:
                    return b0 + (b1 - b0) * ((t - t0) / (t1 - t0) if t1 > t0 else 0.0)
            return samples[-1][1]

        return max(0.0, at(end_s) - at(start_s))


# Other work below this many cores counts as a quiet host.
_QUIET_CORES = 0.25


def settle(max_s: float) -> float:
    """Wait (at most ``max_s``) until the host is quiet — the kernel tears an
    earlier storm's namespaces down in kworkers for seconds after it ends —
    and return the cores other work keeps busy then."""
    deadline = time.monotonic() + max_s
    busy = busy_cores(0.5)
    while busy > _QUIET_CORES and time.monotonic() < deadline:
        busy = busy_cores(0.5)
    return busy


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGINT/SIGTERM off while cleaning up (a second Ctrl-C must not cut it short)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s in previous:
        signal.signal(s, lambda n, _f: got.append(n))
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if got:
            log.warning("signal %s arrived during cleanup; cleanup finished first", got[0])
