"""The host around a testbed storm: how busy it is, its facts, and signals
held off during cleanup."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator

from bootstorm.traces import HostFacts

__all__ = ["busy_cores", "host_facts", "settle", "signals_deferred"]

log = logging.getLogger(__name__)


def busy_cores(window_s: float) -> float:
    """Cores kept busy by the rest of the host, over ``window_s`` (/proc/stat)."""

    def sample() -> tuple[int, int]:
        with open("/proc/stat", encoding="ascii") as fh:
            fields = [int(x) for x in fh.readline().split()[1:]]
        idle = fields[3] + fields[4]  # idle + iowait
        return sum(fields[:8]), idle

    total0, idle0 = sample()
    time.sleep(window_s)
    total1, idle1 = sample()
    cores = os.cpu_count() or 1
    elapsed = total1 - total0
    return cores * (1.0 - (idle1 - idle0) / elapsed) if elapsed > 0 else 0.0


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


def host_facts() -> HostFacts:
    mem_kib = 0
    with contextlib.suppress(OSError), open("/proc/meminfo", encoding="utf-8") as fh:
        for line in fh:
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    return HostFacts(
        kernel=os.uname().release,
        cores=os.cpu_count() or 1,
        memory_mib=max(1, mem_kib // 1024),
        hostname=socket.gethostname(),
    )


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
