"""What the kernel's kworkers do with RTNL behind a CNI storm's back, and when.

A sandbox's links brought up queue work for the kernel's workqueues:
``linkwatch_event`` (operstate and the qdisc, batched at most once a second),
``addrconf_dad_work`` (IPv6 duplicate address detection on each new link:
run at once, again after a random delay of up to ``rtr_solicit_delay`` (1 s),
and once more ``RetransTimer`` (1 s) later), ``io_ring_exit_work`` and, at a
stop, ``u32_delete_key_freepf_work``. Each of the first two takes RTNL. The
model (``models/testbed.py``, ``_kworker``) runs ``kworker_rtnl_ops`` short
RTNL holds at once, as a branch of the sandbox nobody waits for. This asks
the kernel how many such items a sandbox makes, how long each runs from its
start to its end (its wait for RTNL, its hold and anything else it does),
how much of that is RTNL wait (the testbed's own lock trace, joined by the
kworker's thread id), and when they run: how long after they were queued,
and how many run after the storm's last sandbox was up (work that would land
on the next burst's starts).

It runs ``bootstorm testbed run --runtime cni`` (its own kernel trace kept
for the RTNL waits) inside a tracefs instance of its own
(``instances/bstkwq-<pid>``, ``trace_clock=mono`` as the testbed stamps its
spans) with the ``workqueue`` events ``queue_work``, ``execute_start`` and
``execute_end``; the instance is removed on every exit path, and tracefs unmounted if this
script mounted it. It reads the
buffer once, after the storm, and waits ``--settle-s`` after the storm
before it stops the trace, so that delayed work is seen.

Run (root; QEMU and the CNI plugins as the testbed needs them):
``flock /tmp/testbed.lock python experiments/bench_kworker_rtnl.py
[--sandboxes 25 50] [--settle-s 4]``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bootstorm.traces.kernel import TRACE_LINE

TRACEFS = Path("/sys/kernel/tracing")
EVENTS = ("workqueue_queue_work", "workqueue_execute_start", "workqueue_execute_end")
#: The work functions this measurement follows (the ones a sandbox makes).
FUNCTIONS = (
    "addrconf_dad_work",
    "linkwatch_event",
    "io_ring_exit_work",
    "u32_delete_key_freepf_work",
)

_WORK = re.compile(r"work struct\s*=?\s*(?P<work>[0-9a-fx]+)")
_FUNCTION = re.compile(r"function\s*=?\s*(?P<fn>\w+)")


@dataclass(frozen=True)
class WorkRun:
    """One run of a work item on a kworker."""

    function: str
    tid: int
    queued_s: float | None
    start_s: float
    end_s: float

    @property
    def run_s(self) -> float:
        return self.end_s - self.start_s


def _write(path: Path, value: str) -> None:
    path.write_text(value)


def parse_runs(text: str) -> list[WorkRun]:
    """Pair each ``execute_start`` with its ``execute_end`` (same thread and
    work struct) and with the latest ``queue_work`` of that work struct."""
    queued: dict[str, float] = {}
    open_runs: dict[tuple[int, str], tuple[str, float, float | None]] = {}
    runs: list[WorkRun] = []
    for line in text.splitlines():
        m = TRACE_LINE.match(line)
        if m is None:
            continue
        event, body = m["event"], m["rest"]
        work = _WORK.search(body)
        if work is None:
            continue
        ts = float(m["ts"])
        key = work["work"]
        if event == "workqueue_queue_work":
            queued[key] = ts
        elif event == "workqueue_execute_start":
            fn = _FUNCTION.search(body)
            if fn is not None and fn["fn"] in FUNCTIONS:
                open_runs[(int(m["tid"]), key)] = (fn["fn"], ts, queued.pop(key, None))
        elif event == "workqueue_execute_end":
            started = open_runs.pop((int(m["tid"]), key), None)
            if started is not None:
                fn_name, start, queued_at = started
                runs.append(WorkRun(fn_name, int(m["tid"]), queued_at, start, ts))
    return runs


def read_storm(path: Path) -> tuple[list[tuple[int, float, float]], float, int]:
    """The storm's RTNL waits (tid, start, end), its last sandbox's end, its size."""
    waits: list[tuple[int, float, float]] = []
    last_end = 0.0
    sandboxes: set[int] = set()
    with gzip.open(path, "rt") as fh:
        for line in fh:
            rec = json.loads(line)
            kind = rec.get("record")
            if kind == "lock" and rec.get("what") == "wait" and "rtnl" in rec.get("lock", ""):
                waits.append((int(rec.get("tid", 0)), rec["start_s"], rec["end_s"]))
            elif kind == "span":
                last_end = max(last_end, rec["end_s"])
                sandboxes.add(int(rec["sandbox"]))
    return waits, last_end, len(sandboxes)


def rtnl_wait_in(run: WorkRun, waits_by_tid: dict[int, list[tuple[float, float]]]) -> float:
    """RTNL wait of the run's thread inside the run."""
    total = 0.0
    for start, end in waits_by_tid.get(run.tid, ()):
        lo, hi = max(start, run.start_s), min(end, run.end_s)
        if hi > lo:
            total += hi - lo
    return total


def one_storm(sandboxes: int, settle_s: float, workdir: Path) -> None:
    instance = TRACEFS / "instances" / f"bstkwq-{os.getpid()}"
    trace_path = workdir / f"storm-{sandboxes}.jsonl.gz"
    instance.mkdir()
    try:
        _write(instance / "trace_clock", "mono")
        _write(instance / "buffer_size_kb", "8192")
        for event in EVENTS:
            _write(instance / "events" / "workqueue" / event / "enable", "1")
        _write(instance / "tracing_on", "1")
        subprocess.run(
            [
                str(Path(sys.executable).with_name("bootstorm")),
                "testbed",
                "run",
                "--runtime",
                "cni",
                "--sandboxes",
                str(sandboxes),
                "--trace",
                str(trace_path),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        time.sleep(settle_s)
        _write(instance / "tracing_on", "0")
        text = (instance / "trace").read_text()
    finally:
        instance.rmdir()
    runs = parse_runs(text)
    waits, last_end, started = read_storm(trace_path)
    waits_by_tid: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for tid, start, end in waits:
        waits_by_tid[tid].append((start, end))
    print(f"\n{sandboxes} sandboxes at once ({started} traced), work seen until {settle_s} s after")
    print(
        f"{'function':<28}{'per sbx':>8}{'run p50':>9}{'run p90':>9}{'max':>8}"
        f"{'rtnl wait':>10}{'q→run p50':>10}{'after end':>10}"
    )
    by_fn: dict[str, list[WorkRun]] = defaultdict(list)
    for run in runs:
        by_fn[run.function].append(run)
    for fn in FUNCTIONS:
        items = by_fn.get(fn, [])
        if not items:
            print(f"{fn:<28}{0:>8.1f}")
            continue
        run_ms = np.array([r.run_s for r in items]) * 1e3
        wait_ms = np.array([rtnl_wait_in(r, waits_by_tid) for r in items]) * 1e3
        delay_ms = np.array([r.start_s - r.queued_s for r in items if r.queued_s is not None]) * 1e3
        after = sum(1 for r in items if r.start_s > last_end)
        print(
            f"{fn:<28}{len(items) / max(started, 1):>8.1f}"
            f"{np.median(run_ms):>7.2f}ms{np.percentile(run_ms, 90):>7.2f}ms"
            f"{run_ms.max():>6.1f}ms{wait_ms.sum() / max(run_ms.sum(), 1e-9):>9.0%} "
            f"{(np.median(delay_ms) if delay_ms.size else float('nan')):>8.2f}ms{after:>10d}"
        )
    print("run: execute_start → execute_end (RTNL wait, hold and the rest);")
    print("rtnl wait: share of the runs' total time the thread waited on RTNL;")
    print("after end: runs that began after the storm's last sandbox was up.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sandboxes", type=int, nargs="+", default=[25, 50])
    parser.add_argument("--settle-s", type=float, default=4.0)
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("bench_kworker_rtnl: needs root (tracefs, the testbed)", file=sys.stderr)
        return 2
    mounted_here = not (TRACEFS / "instances").is_dir()
    if mounted_here:
        subprocess.run(["mount", "-t", "tracefs", "nodev", str(TRACEFS)], check=True)
    try:
        with tempfile.TemporaryDirectory(prefix="bstkwq-") as tmp:
            for n in args.sandboxes:
                one_storm(n, args.settle_s, Path(tmp))
    finally:
        if mounted_here:
            subprocess.run(["umount", str(TRACEFS)], check=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
