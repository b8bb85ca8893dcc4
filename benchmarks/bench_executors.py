"""The SimPy reference against the compiled executor (and the plain-Python loop).

Run ``python benchmarks/bench_executors.py [--quick] [--repeat 3] [--no-memory]``.

Storms of the 400-sandbox kind (ipvtap on the paper-000 host, every sandbox
at once) of 100, 400 and 10 000 sandboxes, and 100 000 sandboxes arriving
over one day (Poisson, a busy node's day replayed). For each, in one run:

- the compile time (scenario to program, once, shared by every executor);
- per executor, the best of ``--repeat`` run times, the events it processed
  and its event rate, its speed-up over SimPy, and whether its finish times
  are SimPy's to the bit;
- the ratio of its time to a bare SimPy loop that schedules the same number
  of events (processes that only ``yield env.timeout``): below 1 means it is
  faster than SimPy can possibly be on this event count;
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
import gc
import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
from bench_storm import bare_simpy  # the sibling benchmark's bare SimPy loop

from bootstorm.models import Scenario, compile_scenario
from bootstorm.simulator import Program, Result, run_with

T = TypeVar("T")
EXECUTORS = ("simpy", "python", "compiled")
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


def best_of(repeat: int, run: Callable[[], T]) -> tuple[float, T]:
    best, result = float("inf"), None
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        result = run()
        best = min(best, time.perf_counter() - t0)
    assert result is not None
    return best, result


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
        f"{'executor':>9} {'ms/run':>10} {'events':>10} {'events/s':>11} {'x simpy':>8} "
        f"{'/ bare':>7} {'same':>5} {'KiB/sbx':>8}"
    )
    print(header)
    print("-" * len(header))
    reps = repeat if storm.n <= 1_000 else 1
    simpy_time: float | None = None
    reference: Result | None = None
    for name in EXECUTORS:
        if name != "compiled" and storm.n > simpy_max:
            print(f"{name:>9} {'skipped (--simpy-max)':>22}")
            continue
        t, result = best_of(reps, lambda name=name: run_with(program, name))  # type: ignore[misc]
        bare_s, _ = best_of(1, lambda events=result.events: bare_simpy(400, events))  # type: ignore[misc]
        if name == "simpy":
            simpy_time, reference = t, result
        speedup = f"{simpy_time / t:7.1f}x" if simpy_time and name != "simpy" else ""
        same = ""
        if reference is not None and name != "simpy":
            same = str(bool(np.array_equal(reference.finish_s, result.finish_s, equal_nan=True)))
        kib = f"{run_memory_kib(storm, name) / storm.n:8.2f}" if memory else "-"
        print(
            f"{name:>9} {t * 1e3:10.2f} {result.events:10d} {result.events / t:11.0f} "
            f"{speedup:>8} {t / bare_s:7.3f} {same:>5} {kib:>8}"
        )
        if name == "compiled":
            if storm.n == 400 and not storm.day:
                what = f"400 at once, compiled: {t * 1e3:.2f} ms"
                goals.append(_goal(what, t * 1e3, GOAL_400_MS))
            if storm.day and storm.n >= 100_000:
                goals.append(
                    _goal(f"{storm.label}, compiled: {t:.2f} s (+ compile)", t, GOAL_DAY_S)
                )


def _goal(what: str, value: float, goal: float) -> str:
    return f"{what} — goal < {goal:g}: {'met' if value < goal else 'NOT met'}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100, 400, 10 000 at once only")
    parser.add_argument("--repeat", type=int, default=5, help="runs per small storm (best of)")
    parser.add_argument(
        "--simpy-max",
        type=int,
        default=100_000,
        help="skip SimPy and the Python loop above this many sandboxes",
    )
    parser.add_argument("--no-memory", action="store_true", help="skip the RSS probes")
    args = parser.parse_args()
    storms = [Storm(100), Storm(400), Storm(10_000)]
    if not args.quick:
        storms.append(Storm(100_000, day=True))
    run_with(compile_scenario(Scenario(sandboxes=2)), "compiled")  # jit outside the timings
    print("executors: simpy (reference), python (plain heap loop), compiled (numba)")
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
