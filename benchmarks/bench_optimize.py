"""How long does a search take, and which sampler gets there first?

Run ``python benchmarks/bench_optimize.py [--quick] [--skip-wall] [--skip-samplers]``.

1. Wall time of 300 TPE trials on the 400-sandbox ipvtap storm (the default
   space: limits 1..400 on seed 000's four stages), with the study in memory,
   in SQLite (the CLI's default) and in SQLite with two worker processes.
2. Each sampler against random search at an equal budget: for several
   sampler seeds, the number of trials until the best makespan so far is
   within 2% of the best any run found (the reference), and the best found.

Goals are printed beside the figures and never asserted: timings depend on
the machine, so this is a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import tempfile
import time
from pathlib import Path

import optuna

from bootstorm.models import Scenario
from bootstorm.optimizers import StudySpec, optimize, run_worker

GOAL_300_TRIALS_S = 120.0
"""300 TPE trials on the 400 storm in under 2 minutes on 2 cores."""
WITHIN = 0.02
STORM = Scenario(cni="ipvtap", sandboxes=400, profile="paper-000")


def wall_300(trials: int) -> None:
    print(f"{trials} TPE trials, 400 × ipvtap, limits on 4 stages")
    print(
        f"load average before: {os.getloadavg()[0]:.1f} (other work on the machine slows wall time)"
    )
    print(f"{'storage':>8} {'jobs':>4} {'wall s':>8} {'cpu s':>8} {'ms/trial':>9} {'best s':>7}")
    with tempfile.TemporaryDirectory() as tmp:
        runs = [
            ("memory", None, 1),
            ("sqlite", f"sqlite:///{Path(tmp) / 'a.db'}", 1),
            ("sqlite", f"sqlite:///{Path(tmp) / 'b.db'}", 2),
        ]
        goal = ""
        for label, url, jobs in runs:
            spec = StudySpec(scenario=STORM, trials=trials, storage=url, study_name="bench")
            t0, c0 = time.perf_counter(), time.process_time()
            result = optimize(spec, jobs=jobs)
            wall_s, cpu_s = time.perf_counter() - t0, time.process_time() - c0
            best = result.best[0].metrics.makespan_s
            cpu = f"{cpu_s:8.1f}" if jobs == 1 else f"{'-':>8}"  # helpers' CPU is not counted
            print(
                f"{label:>8} {jobs:4d} {wall_s:8.1f} {cpu} {wall_s / trials * 1e3:9.0f} {best:7.2f}"
            )
            if label == "sqlite" and jobs == 1:
                ok = "met" if wall_s < GOAL_300_TRIALS_S else "not met"
                goal = f"goal < {GOAL_300_TRIALS_S:.0f} s with the CLI's default storage: {ok}"
    print(f"  {goal}; load average after: {os.getloadavg()[0]:.1f}\n")


def compare_samplers(trials: int, seeds: tuple[int, ...]) -> None:
    samplers = ["random", "tpe", "cmaes", "nsga2"]
    if importlib.util.find_spec("torch") is not None:
        samplers.insert(2, "gp")
    else:
        print("(gp skipped: PyTorch is not installed; pip install 'bootstorm[gp]')")
    curves: dict[str, list[list[float]]] = {}
    for name in samplers:
        for seed in seeds:
            spec = StudySpec(scenario=STORM, trials=trials, sampler=name, sampler_seed=seed)
            study = spec.open_study()
            c0 = time.process_time()
            run_worker(spec, study=study)
            cpu_s = time.process_time() - c0
            values = [t.value for t in sorted(study.trials, key=lambda t: t.number)]
            best_so_far: list[float] = []
            for v in values:
                assert v is not None
                best_so_far.append(min(v, best_so_far[-1]) if best_so_far else v)
            curves.setdefault(name, []).append(best_so_far)
            print(f"  {name:>6} seed {seed}: best {best_so_far[-1]:.2f} s, {cpu_s:.0f} s CPU")
    reference = min(c[-1] for runs in curves.values() for c in runs)
    target = reference * (1 + WITHIN)
    print(
        f"\nreference: best makespan of all runs {reference:.2f} s; "
        f"target within {WITHIN:.0%}: {target:.2f} s; budget {trials} trials, "
        f"seeds {', '.join(map(str, seeds))}"
    )
    print(f"{'sampler':>7} {'reached':>8} {'median trials':>14} {'per seed':>22} {'best s':>7}")
    for name, runs in curves.items():
        hits = [next((i + 1 for i, v in enumerate(c) if v <= target), None) for c in runs]
        reached = [h for h in hits if h is not None]
        median = f"{statistics.median(reached):.0f}" if reached else "-"
        per_seed = ", ".join("-" if h is None else str(h) for h in hits)
        best = statistics.mean(c[-1] for c in runs)
        print(f"{name:>7} {len(reached):4d}/{len(runs):<3} {median:>14} {per_seed:>22} {best:7.2f}")
    print("(- = not within 2% of the reference inside the budget)\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer trials and seeds")
    parser.add_argument("--skip-wall", action="store_true")
    parser.add_argument("--skip-samplers", action="store_true")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if not args.skip_wall:
        wall_300(100 if args.quick else 300)
    if not args.skip_samplers:
        trials, seeds = (50, (0,)) if args.quick else (100, (0, 1, 2))
        compare_samplers(trials, seeds)


if __name__ == "__main__":
    main()
