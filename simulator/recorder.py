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
        # (time, runnable jobs, spinning jobs) at every change
        self.cpu_samples: list[tuple[float, int, int]] = []

    def lock_span(
        self, lock: int, sandbox: int, stage: int, is_hold: bool, t0: float, t1: float
    ) -> None:
        self.lock_spans.append((lock, sandbox, stage, is_hold, t0, t1))

    def cpu_change(self, t: float, runnable: int, spinning: int) -> None:
        samples = self.cpu_samples
        if samples:
            last_t, last_runnable, last_spinning = samples[-1]
            if last_runnable == runnable and last_spinning == spinning:
                return  # nothing a reader could see has changed
            if last_t == t:
                samples[-1] = (t, runnable, spinning)  # the last change at an instant holds
                return
        samples.append((t, runnable, spinning))


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
    cpu_samples: tuple[tuple[float, int, int], ...] = field(repr=False)

    def _stage(self, i: int) -> str:
        return self.stage_names[i] if 0 <= i < len(self.stage_names) else "-"

    def stage_frame(self) -> Any:
        """One row per (sandbox, stage): ``sandbox, stage, begin_s, end_s, duration_s``."""
        import pandas as pd

        rows = [(s, self._stage(st), b, e, e - b) for s, st, b, e in self.stage_spans]
        return pd.DataFrame(rows, columns=["sandbox", "stage", "begin_s", "end_s", "duration_s"])

    def lock_frame(self) -> Any:
        """One row per wait or hold: ``lock, sandbox, stage, what, begin_s, end_s, duration_s``."""
        import pandas as pd

        rows = [
            (self.lock_names[lk], s, self._stage(st), "hold" if h else "wait", b, e, e - b)
            for lk, s, st, h, b, e in self.lock_spans
        ]
        return pd.DataFrame(
            rows, columns=["lock", "sandbox", "stage", "what", "begin_s", "end_s", "duration_s"]
        )

    def cpu_frame(self) -> Any:
        """The CPU timeline: busy and spinning cores (capped at ``cores``) after each change."""
        import pandas as pd

        rows = []
        for t, runnable, spinning in self.cpu_samples:
            share = 1.0 if runnable <= self.cores else self.cores / runnable
            rows.append((t, min(runnable, self.cores), spinning * share))
        frame = pd.DataFrame(rows, columns=["time_s", "busy_cores", "spin_cores"])
        # Several changes at one instant: the last one holds from there on.
        return frame.drop_duplicates("time_s", keep="last").reset_index(drop=True)
