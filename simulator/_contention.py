"""Contention counters shared by the SimPy locks and the fast executor's, in a
module without SimPy: the compiled executor does not load SimPy."""

from __future__ import annotations

__all__ = ["ContentionCounter"]


class ContentionCounter:
    """Acquisitions, waits and holds of one resource, with the wall-clock time
    during which at least one waiter was queued (``contended_wall_s``)."""

    __slots__ = (
        "_busy_since",
        "acquisitions",
        "contended",
        "contended_wall_s",
        "hold_s",
        "max_waiters",
        "wait_s",
        "waiters",
    )

    def __init__(self) -> None:
        self.acquisitions = 0
        self.contended = 0
        self.wait_s = 0.0
        self.hold_s = 0.0
        self.contended_wall_s = 0.0
        self.waiters = 0
        self.max_waiters = 0
        self._busy_since = 0.0

    def enqueue(self, now: float) -> None:
        self.contended += 1
        if self.waiters == 0:
            self._busy_since = now
        self.waiters += 1
        if self.waiters > self.max_waiters:
            self.max_waiters = self.waiters

    def dequeue(self, now: float, waited_s: float) -> None:
        self.waiters -= 1
        self.wait_s += waited_s
        if self.waiters == 0:
            self.contended_wall_s += now - self._busy_since
