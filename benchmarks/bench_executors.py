"""The reference (SimPy) executor against the fast one (plain and numba-compiled loop).

Run ``python benchmarks/bench_executors.py [--cni ipvtap] [--sizes 100 400 10000]
[--repeat 3]``.

For each storm size it compiles ``Scenario(cni=..., sandboxes=n)`` once and
prints, per executor, the best wall time of ``--repeat`` runs, the events it
processed and its event rate, the speed-up of the fast executor, whether both
gave the same finish times as SimPy, and the peak traced memory of one run
per sandbox (tracemalloc sees Python allocations; numba's arrays are NumPy's,
which it traces too). The jit loop is compiled before the timings.
The two executors count events differently (SimPy also counts the end of
every process), so compare times, not event rates, across executors.

Timings depend on the machine: this is a benchmark, nothing is asserted.
"""

from __future__ import annotations

import argparse
import gc
import time
import tracemalloc
from collections.abc import Callable

import numpy as np

from bootstorm.models import compile_scenario
from bootstorm.models.scenario import Scenario
from bootstorm.simulator import Program, Result, run_program
from bootstorm.simulator.fast import run_program_fast

Runner = Callable[[Program], Result]
EXECUTORS: dict[str, Runner] = {
    "simpy": run_program,
    "fast": run_program_fast,
    "fast-jit": lambda program: run_program_fast(program, jit=True),
}


def best_time(run: Runner, program: Program, repeat: int) -> tuple[float, Result]:
    best, result = float("inf"), None
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        result = run(program)
        best = min(best, time.perf_counter() - t0)
    assert result is not None
    return best, result


def peak_bytes(run: Runner, program: Program) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        run(program)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cni", default="ipvtap")
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 400, 10_000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-memory", action="store_true", help="skip the tracemalloc runs")
    args = parser.parse_args()
    header = (
        f"{'n':>6} {'executor':>8} {'ms/run':>10} {'events':>9} {'events/s':>11} "
        f"{'speed-up':>8} {'same':>5} {'KiB/sandbox':>12}"
    )
    print(f"storm: cni={args.cni}, profile paper-000; best of {args.repeat} runs")
    print(header)
    print("-" * len(header))
    # Compile (or load from numba's cache) the jit loop outside the timings.
    run_program_fast(compile_scenario(Scenario(cni=args.cni, sandboxes=2)), jit=True)
    for n in args.sizes:
        program = compile_scenario(Scenario(cni=args.cni, sandboxes=n))
        # The big storm is slow on SimPy: one run of each is enough there.
        repeat = args.repeat if n <= 1_000 else 1
        times: dict[str, float] = {}
        results: dict[str, Result] = {}
        for name, run in EXECUTORS.items():
            times[name], results[name] = best_time(run, program, repeat)
        ref = results["simpy"].finish_s
        for name, run in EXECUTORS.items():
            t, r = times[name], results[name]
            memory = "-" if args.no_memory else f"{peak_bytes(run, program) / n / 1024:.1f}"
            fast = name != "simpy"
            speedup = f"{times['simpy'] / t:.2f}x" if fast else ""
            same = str(bool(np.array_equal(ref, r.finish_s))) if fast else ""
            print(
                f"{n:>6} {name:>8} {t * 1e3:>10.1f} {r.events:>9} {r.events / t:>11.0f} "
                f"{speedup:>8} {same:>5} {memory:>12}"
            )


if __name__ == "__main__":
    main()
