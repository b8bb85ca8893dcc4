"""Join kernel spans to the sandbox and stage of the thread that waited.

The testbed records the thread id that ran each stage span, on the same
clock the kernel stamps events with (CLOCK_MONOTONIC), so a contention by
thread ``tid`` starting at ``t`` belongs to the stage span of ``tid`` that
contains ``t``. Processes a sandbox started (a CNI plugin, its shim, a
VMM: ``extra``, by pid) have their own thread ids — a Go plugin or QEMU
runs many threads — so their waits join by the process id the collector
recorded with each event (``tgid``), to the owner spans given for that pid;
without a tgid, only the process's main thread (tid == pid) joins. Other
tasks (kworkers tearing down namespaces, other processes on the host) keep
``sandbox=None``.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence

from ..schema import LockSpan, SoftirqSpan, StageSpan
from ._parse import Contention, LockNamer, SoftirqRun, iter_named

__all__ = ["join_contention", "softirq_spans"]

Owner = tuple[float, float, int, str]  # (start_s, end_s, sandbox, stage)


def _index(
    spans: Iterable[StageSpan], extra: Mapping[int, Sequence[Owner]]
) -> dict[int, list[Owner]]:
    by_tid: dict[int, list[Owner]] = {}
    for s in spans:
        if s.tid is not None:
            by_tid.setdefault(s.tid, []).append((s.start_s, s.end_s, s.sandbox, s.stage))
    for tid, owners in extra.items():
        by_tid.setdefault(tid, []).extend(owners)
    for owners in by_tid.values():
        owners.sort()
    return by_tid


def _owner(owners: list[Owner] | None, t: float) -> tuple[int, str] | None:
    if not owners:
        return None
    i = bisect.bisect_right(owners, (t, float("inf"))) - 1
    # Stage spans of one thread do not overlap; look one back for a zero-length neighbour.
    for j in (i, i - 1):
        if 0 <= j < len(owners) and owners[j][0] <= t <= owners[j][1]:
            return owners[j][2], owners[j][3]
    return None


def join_contention(
    contentions: Iterable[Contention],
    spans: Sequence[StageSpan],
    *,
    namer: LockNamer | None = None,
    extra: Mapping[int, Sequence[Owner]] | None = None,
) -> list[LockSpan]:
    """Wait spans named and joined to sandbox/stage; ``extra`` adds owners by
    pid (a VMM, a plugin, a shim), found by the waiter's tgid or, without
    one, its tid."""
    by_tid = _index(spans, extra or {})
    by_tgid = _index((), extra or {})
    out = []
    for name, c in iter_named(contentions, namer or LockNamer()):
        owner = _owner(by_tid.get(c.tid), c.start_s)
        if owner is None and c.tgid is not None:
            owner = _owner(by_tgid.get(c.tgid), c.start_s)
        out.append(
            LockSpan(
                lock=name,
                what="wait",
                sandbox=owner[0] if owner else None,
                stage=owner[1] if owner else None,
                cpu=c.cpu,
                tid=c.tid,
                tgid=c.tgid,
                spin=c.spin,
                start_s=c.start_s,
                end_s=c.end_s,
            )
        )
    return out


def softirq_spans(runs: Iterable[SoftirqRun]) -> list[SoftirqSpan]:
    return [SoftirqSpan(vec=r.vec, cpu=r.cpu, start_s=r.start_s, end_s=r.end_s) for r in runs]
