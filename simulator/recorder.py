"""What a recorded run keeps: stage spans, lock spans, CPU timeline.

The executor appends plain tuples while it runs (nothing at all when
recording is off); :class:`Recording` freezes them with the names needed to
read them, and turns them into DataFrames or a Chrome trace for Perfetto.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Recorder", "Recording"]


class Recorder:
    """Appends spans as the executor emits them."""

    __slots__ = ("cpu_samples", "gate_spans", "lock_spans", "stage_spans")

    def __init__(self) -> None:
        # (sandbox, stage, begin, end)
        self.stage_spans: list[tuple[int, int, float, float]] = []
        # (lock, sandbox, stage, is_hold, begin, end)
        self.lock_spans: list[tuple[int, int, int, bool, float, float]] = []
        # (gate, sandbox, begin, end) for waits at admission gates
        self.gate_spans: list[tuple[int, int, float, float]] = []
        # (time, busy cores, spinning cores, zeroing bytes/s) at every change
        self.cpu_samples: list[tuple[float, float, float, float]] = []

    def lock_span(
        self, lock: int, sandbox: int, stage: int, is_hold: bool, t0: float, t1: float
    ) -> None:
        self.lock_spans.append((lock, sandbox, stage, is_hold, t0, t1))

    def cpu_change(self, t: float, busy: float, spinning: float, zero_bytes_s: float) -> None:
        samples = self.cpu_samples
        sample = (t, busy, spinning, zero_bytes_s)
        if samples:
            last = samples[-1]
            if last[1] == busy and last[2] == spinning and last[3] == zero_bytes_s:
                return  # nothing a reader could see has changed
            if last[0] == t:
                samples[-1] = sample  # the last change at an instant holds
                return
        samples.append(sample)


@dataclass(frozen=True, kw_only=True, eq=False)
class Recording:
    """A frozen record of one run, with the names of its stages, locks and gates."""

    n_sandboxes: int
    stage_names: tuple[str, ...]
    lock_names: tuple[str, ...]
    gate_names: tuple[str, ...]
    cores: int
    stage_spans: tuple[tuple[int, int, float, float], ...] = field(repr=False)
    lock_spans: tuple[tuple[int, int, int, bool, float, float], ...] = field(repr=False)
    gate_spans: tuple[tuple[int, int, float, float], ...] = field(repr=False)
    cpu_samples: tuple[tuple[float, float, float, float], ...] = field(repr=False)
    #: Spans name *tasks*: task ``n_sandboxes + b`` is branch ``b`` of sandbox
    #: ``branch_parent[b]``.
    branch_parent: tuple[int, ...] = field(default=(), repr=False)
    #: Gates that are signals between sandboxes (a wait there is for another
    #: sandbox, not for admission).
    signal_gates: frozenset[int] = field(default=frozenset(), repr=False)

    def sandbox_of(self, task: int) -> int:
        """The sandbox a task belongs to (itself, or a branch's parent)."""
        n = self.n_sandboxes
        return task if task < n else self.branch_parent[task - n]

    def _stage(self, i: int) -> str:
        return self.stage_names[i] if 0 <= i < len(self.stage_names) else "-"

    def stage_frame(self) -> Any:
        """One row per (sandbox, stage): ``sandbox, stage, begin_s, end_s, duration_s,
        branch`` (whether it ran in a branch the sandbox did not wait for)."""
        import pandas as pd

        n = self.n_sandboxes
        rows = [
            (self.sandbox_of(s), self._stage(st), b, e, e - b, s >= n)
            for s, st, b, e in self.stage_spans
        ]
        return pd.DataFrame(
            rows, columns=["sandbox", "stage", "begin_s", "end_s", "duration_s", "branch"]
        )

    def lock_frame(self) -> Any:
        """One row per wait or hold: ``lock, sandbox, stage, what, begin_s, end_s, duration_s``."""
        import pandas as pd

        rows = [
            (
                self.lock_names[lk],
                self.sandbox_of(s),
                self._stage(st),
                "hold" if h else "wait",
                b,
                e,
                e - b,
            )
            for lk, s, st, h, b, e in self.lock_spans
        ]
        return pd.DataFrame(
            rows, columns=["lock", "sandbox", "stage", "what", "begin_s", "end_s", "duration_s"]
        )

    def cpu_frame(self) -> Any:
        """The CPU timeline after each change: busy and spinning cores and the
        memory bandwidth all zeroing uses, GiB/s."""
        import pandas as pd

        rows = [(t, busy, spin, zero / 2**30) for t, busy, spin, zero in self.cpu_samples]
        frame = pd.DataFrame(rows, columns=["time_s", "busy_cores", "spin_cores", "zero_gib_s"])
        # Several changes at one instant: the last one holds from there on.
        return frame.drop_duplicates("time_s", keep="last").reset_index(drop=True)
