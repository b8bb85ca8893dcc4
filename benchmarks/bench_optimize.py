"""How long does a search take, and which sampler gets there first?

Run ``python benchmarks/bench_optimize.py [--quick] [--skip-wall] [--skip-samplers]``.

1. Wall time of 300 TPE trials on the 400-sandbox ipvtap storm (the default
   space: limits 1..400 on seed 000's four stages) on the compiled executor
   with the study in memory, in a journal file (the CLI's default), in
   SQLite (its default before) and in a journal file with two worker
   processes; then in memory on SimPy, for the end-to-end speed-up; then
   both again with three storms (seeds) per trial, and with random search (a
   sampler that costs nothing). Each row splits a trial into the simulations
   (timed inside the run, around each evaluation) and the rest (sampler,
   storage): the rest is what is left of the same run, so it is never
   negative, whatever else the machine does (it was timed apart before, and
   came out negative under load).
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
from bootstorm.optimizers import Evaluator, StudySpec, optimize, run_worker

GOAL_300_TRIALS_S = 30.0
"""300 TPE trials on the 400 storm in under 30 s (issue "A compiled executor")."""
GOAL_300_TRIALS_S_SQLITE = 120.0
"""... and under 2 minutes with the study in a file (issue "Calibration and search")."""
GOAL_SPEEDUP = 10.0
"""The optimiser at least 10x faster end to end on the compiled executor than on SimPy."""
WITHIN = 0.02
STORM = Scenario(cni="ipvtap", sandboxes=400, profile="paper-000")


class EvaluationClock:
    """Seconds spent evaluating configs (simulating) in this process, summed
    around each :meth:`Evaluator.evaluate` call while it is installed."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._original = Evaluator.evaluate

    def __enter__(self) -> EvaluationClock:
        original, clock = self._original, self

        def timed(evaluator: Evaluator, config: object) -> object:
            t0 = time.perf_counter()
            try:
                return original(evaluator, config)  # type: ignore[arg-type]
            finally:
                clock.seconds += time.perf_counter() - t0

        Evaluator.evaluate = timed  # type: ignore[assignment,method-assign]
        return self

    def __exit__(self, *_: object) -> None:
        Evaluator.evaluate = self._original  # type: ignore[method-assign]


def wall_300(trials: int) -> None:
    print(f"{trials} TPE trials, 400 × ipvtap, limits on 4 stages")
    print(
        f"load average before: {os.getloadavg()[0]:.1f} (other work on the machine slows wall time)"
    )
    print(
        f"{'executor':>9} {'sampler':>7} {'storms':>6} {'storage':>8} {'jobs':>4} {'wall s':>7} "
        f"{'ms/trial':>9} {'eval ms':>8} {'rest ms':>8} {'best s':>7}"
    )
    walls: dict[tuple[str, str, int, str, int], float] = {}
    # Warm up: numba compiles the loop and TPE's log_ndtr on first use (tens of
    # seconds after an install or a change of the source, then cached on disk),
    # which would otherwise land in the first row.
    optimize(StudySpec(scenario=STORM, trials=3, study_name="bench-warm-up"))
    with tempfile.TemporaryDirectory() as tmp:
        runs = [
            ("compiled", "tpe", 1, "memory", None, 1),
            ("compiled", "tpe", 1, "journal", str(Path(tmp) / "a.log"), 1),
            ("compiled", "tpe", 1, "sqlite", f"sqlite:///{Path(tmp) / 'b.db'}", 1),
            ("compiled", "tpe", 1, "journal", str(Path(tmp) / "c.log"), 2),
            ("simpy", "tpe", 1, "memory", None, 1),
            ("compiled", "tpe", 3, "memory", None, 1),
            ("simpy", "tpe", 3, "memory", None, 1),
            ("compiled", "random", 1, "memory", None, 1),
            ("simpy", "random", 1, "memory", None, 1),
        ]
        for executor, sampler, n_seeds, label, url, jobs in runs:
            spec = StudySpec(
                scenario=STORM,
                trials=trials,
                sampler=sampler,
                storage=url,
                study_name=f"bench-{executor}-{sampler}-{n_seeds}",
                seeds=tuple(range(n_seeds)),
                executor=executor,
            )
            with EvaluationClock() as clock:
                t0 = time.perf_counter()
                result = optimize(spec, jobs=jobs)
                wall_s = time.perf_counter() - t0
            walls[(executor, sampler, n_seeds, label, jobs)] = wall_s
            per_trial = wall_s / trials * 1e3
            # The baseline's evaluation (read_study) is one more than the trials.
            eval_ms = clock.seconds / (trials + 1) * 1e3 if jobs == 1 else None
            rest = f"{per_trial - eval_ms:8.1f}" if eval_ms is not None else f"{'-':>8}"
            ev = f"{eval_ms:8.1f}" if eval_ms is not None else f"{'-':>8}"
            best = result.best[0].metrics.makespan_s
            print(
                f"{executor:>9} {sampler:>7} {n_seeds:6d} {label:>8} {jobs:4d} {wall_s:7.1f} "
                f"{per_trial:9.1f} {ev} {rest} {best:7.2f}"
            )
    compiled = walls[("compiled", "tpe", 1, "memory", 1)]
    print("  eval = simulating the trial's storms; rest = the sampler and the storage")
    what = f"{trials} TPE trials, compiled, in memory: {compiled:.1f} s"
    print(f"  {_goal(what, compiled, GOAL_300_TRIALS_S)}")
    journal = walls[("compiled", "tpe", 1, "journal", 1)]
    what = f"{trials} TPE trials, compiled, journal file (the CLI default): {journal:.1f} s"
    print(f"  {_goal(what, journal, GOAL_300_TRIALS_S_SQLITE)}")
    print(
        f"  journal / in memory: {journal / compiled:.2f}x (goal <= 1.5x); "
        f"SQLite / in memory: {walls[('compiled', 'tpe', 1, 'sqlite', 1)] / compiled:.2f}x"
    )
    for sampler, n_seeds in (("tpe", 1), ("tpe", 3), ("random", 1)):
        ratio = (
            walls[("simpy", sampler, n_seeds, "memory", 1)]
            / walls[("compiled", sampler, n_seeds, "memory", 1)]
        )
        ok = "met" if ratio >= GOAL_SPEEDUP else "NOT met"
        print(
            f"  end to end, {sampler}, {n_seeds} storm(s) per trial: compiled {ratio:.1f}x "
            f"faster than SimPy — goal >= {GOAL_SPEEDUP:g}x: {ok}"
        )
    print(f"  load average after: {os.getloadavg()[0]:.1f}\n")


def _goal(what: str, value: float, goal: float) -> str:
    return f"{what} — goal < {goal:g} s: {'met' if value < goal else 'NOT met'}"


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
