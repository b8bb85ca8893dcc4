"""The SimPy reference against the compiled executor.

Run ``python benchmarks/bench_executors.py [--quick] [--repeat 3] [--no-memory]``.

Storms of the 400-sandbox kind (ipvtap on the paper-000 host, every sandbox
at once) of 100, 400 and 10 000 sandboxes, and 100 000 sandboxes arriving
over one day (Poisson, a busy node's day replayed). For each, in one run:

- the compile time (scenario to program, once, shared by every executor);
- per executor, the median (and interquartile range) of ``--repeat`` run
  times interleaved with the other executors' and the anchor's (one of each
  in turn, so that all see the same load: a single sample of the 10 000 row
  read 198 ms under load and 72-79 ms quiet), the events it processed and
  its event rate, its speed-up over SimPy, and whether its finish times are
  SimPy's to the bit;
- the ratio of its time to a bare SimPy loop that schedules the same number
  of events (processes that only ``yield env.timeout``), taken within each
  repeat: below 1 means it is faster than SimPy can possibly be on this
  event count;
- the peak memory of one run per sandbox: the growth of the peak RSS of a
  fresh process during the run, the program already built (numba's arrays
  are not seen by tracemalloc); flat across sizes when memory is linear.

Goals (issue "A compiled executor") are printed beside the figures and
never asserted: timings depend on the machine, so this is a benchmark.
The executors count events differently (SimPy also counts each process's
end), so compare times, not event rates, across executors.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from _measure import interleaved, paired_ratio
from bench_storm import bare_simpy  # the sibling benchmark's bare SimPy loop

from bootstorm.models import Scenario, compile_scenario
from bootstorm.simulator import Program, Result, run_with

# "python" (the compiled executor's source interpreted, for debugging) is
# left out: it is about 100x slower than "compiled" and gives its numbers.
EXECUTORS = ("simpy", "compiled")
GOAL_400_MS = 1.0
"""The 400-sandbox ipvtap storm under 1 ms on the compiled executor."""
GOAL_DAY_S = 10.0
"""100 000 sandboxes (a day of arrivals) under 10 s, memory linear in sandboxes."""
DAY_S = 86_400.0


@dataclass(frozen=True)
class Storm:
    """One benchmarked storm: ``n`` sandboxes, all at once or over a day."""

    n: int
    day: bool = False

    @property
    def label(self) -> str:
        return f"{self.n} over a day" if self.day else f"{self.n} at once"

    def scenario(self) -> Scenario:
        if not self.day:
            return Scenario(cni="ipvtap", sandboxes=self.n, profile="paper-000")
        rng = np.random.default_rng(0)
        arrivals = np.sort(rng.uniform(0.0, DAY_S, self.n))  # Poisson, given the count
        return Scenario(
            cni="ipvtap", sandboxes=self.n, profile="paper-000", arrival_s=tuple(arrivals.tolist())
        )


_MEMORY_PROBE = """
import ctypes, gc, json, sys
import numpy as np
from bootstorm.models import Scenario, compile_scenario
from bootstorm.simulator import run_with

def status_kib(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))

n, day, executor = int(sys.argv[1]), sys.argv[2] == "1", sys.argv[3]
run_with(compile_scenario(Scenario(sandboxes=2)), executor)  # load (and compile) the loop
arrivals = None
if day:
    arrivals = tuple(np.sort(np.random.default_rng(0).uniform(0.0, 86400.0, n)).tolist())
program = compile_scenario(Scenario(sandboxes=n, arrival_s=arrivals))
del arrivals
gc.collect()
ctypes.CDLL("libc.so.6").malloc_trim(0)
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # reset the peak RSS (VmHWM) to the current RSS
before = status_kib("VmRSS")
result = run_with(program, executor)
print(json.dumps({"kib": status_kib("VmHWM") - before}))
"""


def run_memory_kib(storm: Storm, executor: str) -> float:
    """Peak RSS growth (KiB) during one run in a fresh process (Linux: the peak
    is reset through ``/proc/self/clear_refs`` once the program is built)."""
    out = subprocess.run(
        [sys.executable, "-c", _MEMORY_PROBE, str(storm.n), "1" if storm.day else "0", executor],
        check=True,
        capture_output=True,
        text=True,
    )
    return float(json.loads(out.stdout.strip().splitlines()[-1])["kib"])


def bench_storm(
    storm: Storm, *, repeat: int, simpy_max: int, memory: bool, goals: list[str]
) -> None:
    t0 = time.perf_counter()
    program: Program = compile_scenario(storm.scenario())
    compile_ms = (time.perf_counter() - t0) * 1e3
    print(f"\n{storm.label}: {program.n_ops} ops, compiled in {compile_ms:.1f} ms")
    header = (
        f"{'executor':>9} {'ms/run: median (IQR)':>26} {'events':>10} {'events/s':>11} "
        f"{'x simpy':>8} {'/ bare':>7} {'same':>5} {'KiB/sbx':>8}"
    )
    print(header)
    print("-" * len(header))
    names = [n for n in EXECUTORS if n == "compiled" or storm.n <= simpy_max]
    for name in EXECUTORS:
        if name not in names:
            print(f"{name:>9} {'skipped (--simpy-max)':>26}")
    results: dict[str, Result] = {n: run_with(program, n) for n in names}
    events = results[names[0]].events
    runs: dict[str, Callable[[], object]] = {
        n: (lambda n=n: run_with(program, n))
        for n in names  # type: ignore[misc]
    }
    runs["bare"] = lambda: bare_simpy(400, events)
    reps = repeat if storm.n <= 10_000 else max(1, repeat // 3)
    timed = interleaved(runs, repeats=reps, warmup=0)
    reference = results.get("simpy")
    for name in names:
        t, result = timed[name], results[name]
        lo, hi = t.spread
        shown = f"{t.median * 1e3:.2f} ({lo * 1e3:.2f}-{hi * 1e3:.2f})"
        speedup = ""
        if "simpy" in timed and name != "simpy":
            speedup = f"{paired_ratio(timed['simpy'], t).median:7.1f}x"
        same = ""
        if reference is not None and name != "simpy":
            same = str(bool(np.array_equal(reference.finish_s, result.finish_s, equal_nan=True)))
        kib = f"{run_memory_kib(storm, name) / storm.n:8.2f}" if memory else "-"
        bare = paired_ratio(t, timed["bare"]).median
        print(
            f"{name:>9} {shown:>26} {result.events:10d} {result.events / t.median:11.0f} "
            f"{speedup:>8} {bare:7.3f} {same:>5} {kib:>8}"
        )
        if name == "compiled":
            if storm.n == 400 and not storm.day:
                what = f"400 at once, compiled: {t.median * 1e3:.2f} ms"
                goals.append(_goal(what, t.median * 1e3, GOAL_400_MS))
            if storm.day and storm.n >= 100_000:
                goals.append(
                    _goal(
                        f"{storm.label}, compiled: {t.median:.2f} s (+ compile)",
                        t.median,
                        GOAL_DAY_S,
                    )
                )


def _goal(what: str, value: float, goal: float) -> str:
    return f"{what} — goal < {goal:g}: {'met' if value < goal else 'NOT met'}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100, 400, 10 000 at once only")
    parser.add_argument(
        "--repeat", type=int, default=7, help="interleaved runs per storm (median and IQR)"
    )
    parser.add_argument(
        "--simpy-max",
        type=int,
        default=100_000,
        help="skip SimPy above this many sandboxes",
    )
    parser.add_argument("--no-memory", action="store_true", help="skip the RSS probes")
    args = parser.parse_args()
    storms = [Storm(100), Storm(400), Storm(10_000)]
    if not args.quick:
        storms.append(Storm(100_000, day=True))
    run_with(compile_scenario(Scenario(sandboxes=2)), "compiled")  # jit outside the timings
    print("executors: simpy (reference), compiled (numba)")
    print("'/ bare': time over a bare SimPy timeout loop of the same event count")
    goals: list[str] = []
    for storm in storms:
        bench_storm(
            storm,
            repeat=args.repeat,
            simpy_max=args.simpy_max,
            memory=not args.no_memory,
            goals=goals,
        )
    print("\ngoals:")
    for g in goals:
        print(f"  {g}")


if __name__ == "__main__":
    main()
