"""Where a testbed storm's CPU goes, by task: the processes each start
execs, and the kernel's threads that never exit.

The trace header's ``busy_core_s`` says how much CPU a storm took, not
whose. This runs one ``bootstorm testbed run`` (any of its options, after
``--``) and accounts for every task on the host meanwhile, two ways:

- **tasks that exit** (the plugins, the shim, QEMU's threads, the harness's
  threads): the kernel's taskstats exit events for every CPU (pyroute2's
  ``TaskStats.register_mask``), each task's own run time
  (``cpu_run_virtual_total``: ``sum_exec_runtime``, in nanoseconds; the
  tick-sampled ``ac_utime``/``ac_stime`` are 4-ms grains at HZ=250) and its
  run-queue wait (delay accounting), stamped on arrival and split into those
  that exited inside the storm's window (first arrival to last stage end,
  read from the trace) and after it (the teardown);
- **tasks that live through it** (kworkers, ksoftirqd, RCU, the host's own
  daemons): ``/proc/<pid>/task/<tid>/schedstat`` once a second, its first
  field the run time in nanoseconds, grouped by name (``kworker/0:1H`` as
  ``kworker``), inside the window (the samples that bracket it) and after.

Idle, this host's kworkers ran 0.12-0.15 ms a second; the figures each storm gave
are in the research log ("Where a stream's CPU goes", 2026-11-30). The
listener's own Python shows as a persisting ``python`` task.

Run (root; the testbed's QEMU and CNI plugins):
``flock /tmp/testbed.lock python experiments/bench_cpu_by_task.py --trace
T.jsonl.gz -- --runtime cni --sandboxes 133``.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from pyroute2 import TaskStats

#: ``SO_RCVBUFFORCE``: a burst of 133 starts exits ~2 700 tasks in seconds;
#: a default receive buffer would drop their events.
SO_RCVBUFFORCE = 33
RCVBUF_BYTES = 64 << 20
#: How often the tasks that live through the storm are read (each read is a
#: few milliseconds of CPU for ~1 000 tasks).
SAMPLE_S = 1.0
#: Kernel threads named per CPU or per pool, grouped by their stem.
_PER_CPU = re.compile(r"^(kworker|ksoftirqd|migration|rcu\w*|cpuhp|idle_inject)[/:].*")


def _run_times() -> dict[str, tuple[str, int]]:
    """Every task's name and run time (ns) by its ``/proc`` path."""
    out = {}
    for task in Path("/proc").glob("[0-9]*/task/[0-9]*"):
        try:
            run_ns = int((task / "schedstat").read_text().split()[0])
            name = (task / "comm").read_text().strip()
        except (OSError, ValueError, IndexError):
            continue  # it exited meanwhile
        out[str(task)] = (name, run_ns)
    return out


def _storm_window(trace: Path) -> tuple[float, float]:
    """First arrival and last stage end (CLOCK_MONOTONIC) of a testbed trace."""
    first, last = float("inf"), 0.0
    with gzip.open(trace, "rt") as f:
        for line in f:
            record = json.loads(line)
            if record.get("record") == "arrival":
                first = min(first, record["t_s"])
            elif record.get("record") == "span":
                last = max(last, record["end_s"])
    return first, last


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", type=Path, required=True, help="the storm's trace (written)")
    parser.add_argument("--output", type=Path, help="every figure as JSON")
    parser.add_argument("testbed_args", nargs=argparse.REMAINDER, help="-- testbed run options")
    args = parser.parse_args()
    extra = [a for a in args.testbed_args if a != "--"]
    # The console script beside this interpreter: the package has no __main__.
    bootstorm = str(Path(sys.executable).parent / "bootstorm")
    command = [bootstorm, "testbed", "run", *extra, "--trace", str(args.trace)]

    stats = TaskStats()
    stats.bind()
    stats.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF_BYTES)
    stats.register_mask(f"0-{(os.cpu_count() or 1) - 1}")
    exits: list[tuple[float, str, int, int]] = []  # arrival, name, run ns, run-queue wait ns
    done = threading.Event()
    outcome: dict[str, object] = {}

    samples: list[tuple[float, dict[str, tuple[str, int]]]] = []

    def storm() -> None:
        with subprocess.Popen(command) as proc:
            # The living tasks once a second, stamped: their CPU inside the
            # storm's window apart from the teardown's after it.
            while proc.poll() is None:
                samples.append((time.monotonic(), _run_times()))
                time.sleep(SAMPLE_S)
            outcome["rc"] = proc.returncode
        time.sleep(2.0)  # the last exits' events
        samples.append((time.monotonic(), _run_times()))
        done.set()
        subprocess.call(["true"])  # one more exit wakes the listener

    runner = threading.Thread(target=storm)
    runner.start()
    try:
        while not done.is_set():
            for message in stats.get():
                for name, value in message["attrs"]:
                    if name != "TASKSTATS_TYPE_AGGR_PID":  # per task, not its group's sum
                        continue
                    s = dict(value["attrs"])["TASKSTATS_TYPE_STATS"]
                    comm = s["ac_comm"].split(b"\0")[0].decode(errors="replace")
                    exits.append(
                        (time.monotonic(), comm, s["cpu_run_virtual_total"], s["cpu_delay_total"])
                    )
    finally:
        runner.join()
        stats.close()
    if outcome["rc"] != 0:
        print(f"testbed run exited {outcome['rc']}", file=sys.stderr)
        return 1

    with gzip.open(args.trace, "rt") as f:
        header = json.loads(f.readline())
    starts = int(header["scenario"]["sandboxes"])
    first, last = _storm_window(args.trace)
    inside: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0.0])
    after: dict[str, float] = collections.defaultdict(float)
    for t, comm, run_ns, wait_ns in exits:
        if first <= t <= last:
            inside[comm][0] += 1
            inside[comm][1] += run_ns / 1e9
            inside[comm][2] += wait_ns / 1e9
        elif t > last:
            after[comm] += run_ns / 1e9
    # The samples that bracket the window (the first at or before its start,
    # the first at or after its end), and the last one.
    t0 = max((k for k, (t, _) in enumerate(samples) if t <= first), default=0)
    t1 = min((k for k, (t, _) in enumerate(samples) if t >= last), default=len(samples) - 1)
    living: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0])
    for (a, b), column in (((t0, t1), 0), ((t1, len(samples) - 1), 1)):
        early, late = samples[a][1], samples[b][1]
        for path, (name, run_ns) in early.items():
            if path in late:
                living[_PER_CPU.sub(r"\1", name)][column] += (late[path][1] - run_ns) / 1e9
    window_s = samples[t1][0] - samples[t0][0]
    ms = 1e3 / starts
    print(f"{starts} starts, window {last - first:.1f} s; trace busy "
          f"{header['busy_core_s'] * ms:.1f} ms a start")  # fmt: skip
    print("tasks that exited, ms a start: tasks, CPU inside the window, run-queue wait, CPU after")
    for comm, (n, run_s, wait_s) in sorted(inside.items(), key=lambda kv: -kv[1][1])[:10]:
        print(f"  {comm[:18]:18} {n / starts:6.2f} {run_s * ms:8.2f} {wait_s * ms:8.1f} "
              f"{after.get(comm, 0.0) * ms:8.2f}")  # fmt: skip
    print(f"tasks that lived through it, ms a start: inside the window ({window_s:.0f} s "
          "sampled; ms a second), after it")  # fmt: skip
    for name, (in_s, after_s) in sorted(living.items(), key=lambda kv: -kv[1][0])[:8]:
        print(
            f"  {name[:18]:18} {in_s * ms:8.2f} ({in_s / window_s * 1e3:6.2f}) {after_s * ms:8.2f}"
        )
    if args.output is not None:
        args.output.write_text(
            json.dumps(
                {
                    "starts": starts,
                    "window_s": last - first,
                    "busy_core_s": header["busy_core_s"],
                    "inside": inside,
                    "after": after,
                    "living": living,
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
