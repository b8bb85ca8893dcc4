"""Speed where a planner waits: one table of figures, each held to an anchor.

Run ``python benchmarks/bench_planner.py [--quick] [--skip-scale] [--skip-search]
[--run-ten-million]``; it prints one Markdown table (``docs/speed.md`` holds
one run of it). Every figure is the median of repeats interleaved with its
anchor's (see ``_measure.py``): the spread is the interquartile range, and
the ratio is taken within each repeat. Goals are printed beside the figures
and never asserted: this is a benchmark, not a test.

- **A what-if**: the 400-sandbox ipvtap storm end to end through
  ``simulate(..., executor="compiled")`` against the kernel alone on the
  compiled program; the search's path (compile, then the four figures it
  reads) against the kernel's summary; the kernel against a bare event loop
  of the same event count in numba, C++ and SimPy (``_bare_loops.py``).
- **Scale**: a day of arrivals (Poisson) for 100 000, 300 000 and 1 000 000
  sandboxes, each in a fresh process: wall end to end, the kernel alone,
  peak RSS, and the slope of peak RSS in sandboxes; 10 000 000 sandboxes
  are sized and refused (or run with ``--run-ten-million``).
- **A search**: 300 TPE trials of the 400 storm in memory (each trial's
  simulation overlapping TPE's choice of the next point, against one thread
  doing both in turn), in a journal file (the default) and in SQLite; the
  whole ``bootstorm optimize --trials 300`` command.
- **Start-up**: ``import bootstorm`` and ``bootstorm --help`` against the
  interpreter's own start.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _bare_loops import CppLoop, bare_numba
from _measure import Figure, interleaved, paired_ratio, python_wall, row, table_header
from bench_storm import bare_simpy

from bootstorm import Scenario, simulate
from bootstorm.models import compile_scenario, estimate_memory
from bootstorm.simulator import FastExecutor, available_memory_bytes, summarise_with

DAY_S = 86_400.0
GIB = 1 << 30
MIB = 1 << 20

_SCALE_PROBE = """
import json, sys, time
import numpy as np
from bootstorm import Scenario, simulate
from bootstorm.models import compile_scenario
from bootstorm.simulator import FastExecutor

def kib(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))

n = int(sys.argv[1])
simulate(Scenario(sandboxes=2), executor="compiled")  # load the compiled loop
arrivals = tuple(np.sort(np.random.default_rng(0).uniform(0.0, 86400.0, n)).tolist())
scenario = Scenario(cni="ipvtap", sandboxes=n, arrival_s=arrivals)
base_kib = kib("VmRSS")
t0 = time.perf_counter()
result = simulate(scenario, executor="compiled")
wall_s = time.perf_counter() - t0
peak_kib = kib("VmHWM")
del result
program = compile_scenario(scenario)
t0 = time.perf_counter()
FastExecutor(jit=True).run(program)
kernel_s = time.perf_counter() - t0
print(json.dumps({"wall_s": wall_s, "kernel_s": kernel_s, "peak_kib": peak_kib,
                  "base_kib": base_kib, "ops": program.n_ops}))
"""


def what_if(repeats: int) -> list[str]:
    """The 400 storm: end to end and the search's path against the kernel,
    the kernel against bare event loops of its event count."""
    scenario = Scenario(cni="ipvtap", sandboxes=400)
    program = compile_scenario(scenario)
    kernel = FastExecutor(jit=True)
    events = kernel.run(program).events
    cpp = CppLoop.build()
    runs = {
        "kernel": lambda: kernel.run(program),
        "simulate": lambda: simulate(scenario, executor="compiled"),
        "kernel summary": lambda: kernel.summarise(program),
        "search path": lambda: summarise_with(compile_scenario(scenario), "compiled"),
        "numba loop": lambda: bare_numba(400, events),
        "simpy loop": lambda: bare_simpy(400, events),
    }
    if cpp is not None:
        runs["c++ loop"] = lambda: cpp.run_s(400, events)
    f = interleaved(runs, repeats=repeats, self_timed=frozenset({"c++ loop"}))
    k = f["kernel"]
    rows = [
        row(
            "400 × ipvtap: `simulate(..., executor='compiled')` end to end",
            f["simulate"].show(),
            "the kernel alone (`FastExecutor(jit=True).run`)",
            k.show(),
            paired_ratio(f["simulate"], k),
            "≤ 1.5x (was 5.4x)",
        ),
        row(
            "400 × ipvtap: compile + `summarise` (the search's path)",
            f["search path"].show(),
            "the kernel's summary alone",
            f["kernel summary"].show(),
            paired_ratio(f["search path"], f["kernel summary"]),
            "≤ 1.5x",
        ),
        row(
            f"400 × ipvtap: the kernel ({events} events)",
            k.show(),
            "bare numba heap loop, same events",
            f["numba loop"].show(),
            paired_ratio(k, f["numba loop"]),
            "-",
        ),
    ]
    if cpp is not None:
        rows.append(
            row(
                "400 × ipvtap: the kernel",
                k.show(),
                "bare C++ heap loop (g++ -O2), same events",
                f["c++ loop"].show(),
                paired_ratio(k, f["c++ loop"]),
                "-",
            )
        )
    rows.append(
        row(
            "400 × ipvtap: the kernel",
            k.show(),
            "bare SimPy loop, same events",
            f["simpy loop"].show(),
            paired_ratio(k, f["simpy loop"]),
            "-",
        )
    )
    return rows


def ten_thousand(repeats: int) -> list[str]:
    scenario = Scenario(cni="ipvtap", sandboxes=10_000)
    program = compile_scenario(scenario)
    kernel = FastExecutor(jit=True)
    events = kernel.run(program).events
    f = interleaved(
        {
            "kernel": lambda: kernel.run(program),
            "simulate": lambda: simulate(scenario, executor="compiled"),
            "numba loop": lambda: bare_numba(10_000, events),
        },
        repeats=repeats,
    )
    return [
        row(
            "10 000 × ipvtap at once: `simulate(compiled)` end to end",
            f["simulate"].show(),
            "the kernel alone",
            f["kernel"].show(),
            paired_ratio(f["simulate"], f["kernel"]),
            "-",
        ),
        row(
            f"10 000 × ipvtap at once: the kernel ({events} events)",
            f["kernel"].show(),
            "bare numba heap loop, same events",
            f["numba loop"].show(),
            paired_ratio(f["kernel"], f["numba loop"]),
            "-",
        ),
    ]


def _probe(n: int) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", _SCALE_PROBE, str(n)], check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def scale(repeats: int, *, run_ten_million: bool) -> list[str]:
    """A day of arrivals at three sizes, each run in a fresh process."""
    sizes = (100_000, 300_000, 1_000_000)
    runs: dict[int, list[dict[str, float]]] = {n: [] for n in sizes}
    for _ in range(repeats):
        for n in sizes:
            runs[n].append(_probe(n))
    big = runs[1_000_000]
    wall = Figure(tuple(r["wall_s"] for r in big))
    kernel = Figure(tuple(r["kernel_s"] for r in big))
    peak = Figure(tuple(r["peak_kib"] * 1024.0 for r in big))
    # Slope of peak RSS in sandboxes (least squares over the sizes' medians).
    xs = np.array(sizes, dtype=float)
    ys = np.array([np.median([r["peak_kib"] for r in runs[n]]) for n in sizes])
    slope_kib, intercept_kib = np.polyfit(xs, ys, 1)
    fit = np.polyval([slope_kib, intercept_kib], xs)
    worst_dev = float(np.max(np.abs(ys - fit) / ys))
    program_kib = big[0]["ops"] * 13 / 1_000_000 / 1024
    rows = [
        row(
            "1 000 000 × ipvtap over a day: `simulate(compiled)` end to end",
            wall.show(scale=1.0, unit="s"),
            "the kernel alone on its program",
            kernel.show(scale=1.0, unit="s"),
            paired_ratio(wall, kernel),
            "< 10 s",
        ),
        row(
            "1 000 000 × ipvtap over a day: peak RSS",
            peak.show(scale=1.0 / MIB, unit="MiB", digits=0),
            "2 GiB",
            "2048 MiB",
            Figure(tuple(p / (2 * GIB) for p in peak.samples)),
            "< 2 GiB",
        ),
        row(
            "peak RSS per sandbox (slope over 100k, 300k, 1M; "
            f"worst point {worst_dev:.1%} off the line; {intercept_kib / 1024:.0f} MiB at 0)",
            f"{slope_kib:.2f} KiB",
            "the program's own arrays per sandbox",
            f"{program_kib:.2f} KiB",
            f"{slope_kib / program_kib:.2f}x",
            "linear",
        ),
    ]
    rows.append(_ten_million(run=run_ten_million))
    return rows


def _ten_million(*, run: bool) -> str:
    """10 000 000 sandboxes over a day: run (``--run-ten-million``), or sized
    against the memory available, as ``compile_scenario`` does before it
    builds anything (and refuses it in one line if it does not fit)."""
    n = 10_000_000
    if run:
        r = _probe(n)
        return row(
            "10 000 000 × ipvtap over a day: `simulate(compiled)`",
            f"{r['wall_s']:.0f} s, peak {r['peak_kib'] / 1024:,.0f} MiB",
            "the kernel alone",
            f"{r['kernel_s']:.0f} s",
            f"{r['wall_s'] / r['kernel_s']:.2f}x",
            "runs within memory, or refused up front",
        )
    t0 = time.perf_counter()
    need = estimate_memory(Scenario(cni="ipvtap", sandboxes=n)).total_bytes
    took = time.perf_counter() - t0
    available = available_memory_bytes()
    verdict = "runs" if available is None or need <= available else "refused up front"
    return row(
        "10 000 000 × ipvtap: memory it needs (sized from its plans, "
        f"in {took * 1e3:.0f} ms): {verdict}",
        f"{need / MIB:,.0f} MiB",
        "memory available",
        f"{available / MIB:,.0f} MiB" if available is not None else "unknown",
        f"{need / available:.2f}x" if available else "-",
        "runs within memory, or refused up front",
    )


def search(repeats: int) -> list[str]:
    import optuna

    from bootstorm.optimizers import StudySpec, optimize, run_worker

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storm = Scenario(cni="ipvtap", sandboxes=400)
    # numba compiles TPE's log_ndtr on first use: outside the timings.
    optimize(StudySpec(scenario=storm, trials=3, study_name="warm-up"))
    tmp = tempfile.TemporaryDirectory(prefix="bootstorm-bench-")
    counter = iter(range(1_000_000))

    def run(kind: str) -> None:
        i = next(counter)
        storage = {
            "memory": None,
            "journal": f"{tmp.name}/s{i}.log",
            "sqlite": f"sqlite:///{tmp.name}/s{i}.db",
        }[kind]
        optimize(StudySpec(scenario=storm, trials=300, storage=storage, study_name=f"s{i}"))

    def one_thread() -> None:
        # The search as it ran before: each trial simulated before the next is chosen.
        spec = StudySpec(scenario=storm, trials=300, study_name=f"s{next(counter)}")
        run_worker(spec, study=spec.open_study(), overlap=False)

    def command() -> None:
        workdir = Path(tmp.name) / f"cli{next(counter)}"
        workdir.mkdir()
        subprocess.run(
            [
                sys.executable,
                "-c",
                "from bootstorm.cli import main; main()",
                "optimize",
                "--trials",
                "300",
                "--output",
                "tuned.yaml",
            ],
            cwd=workdir,
            env={**os.environ, "XDG_STATE_HOME": str(workdir)},  # its default journal
            check=True,
            capture_output=True,
        )

    f = interleaved(
        {
            "memory": lambda: run("memory"),
            "one thread": one_thread,
            "journal": lambda: run("journal"),
            "sqlite": lambda: run("sqlite"),
            "command": command,
        },
        repeats=repeats,
        warmup=0,
    )
    mem = f["memory"]
    return [
        row(
            "300 TPE trials, 400 × ipvtap, in memory (a trial simulated while TPE picks the next)",
            mem.show(scale=1.0, unit="s"),
            "the same, each trial simulated before the next is picked",
            f["one thread"].show(scale=1.0, unit="s"),
            paired_ratio(mem, f["one thread"]),
            "-",
        ),
        row(
            "300 TPE trials, 400 × ipvtap, journal file (the default storage)",
            f["journal"].show(scale=1.0, unit="s"),
            "the same study in memory",
            mem.show(scale=1.0, unit="s"),
            paired_ratio(f["journal"], mem),
            "≤ 1.5x",
        ),
        row(
            "300 TPE trials, 400 × ipvtap, SQLite (the storage before)",
            f["sqlite"].show(scale=1.0, unit="s"),
            "the same study in memory",
            mem.show(scale=1.0, unit="s"),
            paired_ratio(f["sqlite"], mem),
            "-",
        ),
        row(
            "`bootstorm optimize --trials 300` (journal; start-up and report included)",
            f["command"].show(scale=1.0, unit="s"),
            "300 trials in memory, in-process",
            mem.show(scale=1.0, unit="s"),
            paired_ratio(f["command"], mem),
            "< 3 s wall on 2 cores",
        ),
    ]


def start_up(repeats: int) -> list[str]:
    f = interleaved(
        {
            "python": python_wall("pass"),
            "import": python_wall("import bootstorm"),
            "help": python_wall(
                "from bootstorm.cli import main\ntry: main(['--help'])\nexcept SystemExit: pass"
            ),
            "typer": python_wall("import typer, rich.console"),
            "model": python_wall("from bootstorm import Scenario, simulate"),
            "numpy": python_wall("import numpy"),
        },
        repeats=repeats,
    )
    return [
        row(
            "`python -c 'import bootstorm'`",
            f["import"].show(),
            "`python -c pass`",
            f["python"].show(),
            paired_ratio(f["import"], f["python"]),
            "< 150 ms",
        ),
        row(
            "`bootstorm --help`",
            f["help"].show(),
            "`python -c 'import typer, rich.console'`",
            f["typer"].show(),
            paired_ratio(f["help"], f["typer"]),
            "< 300 ms",
        ),
        row(
            "`from bootstorm import Scenario, simulate`",
            f["model"].show(),
            "`python -c 'import numpy'`",
            f["numpy"].show(),
            paired_ratio(f["model"], f["numpy"]),
            "-",
        ),
    ]


def compile_bytecode() -> None:
    """Write the package's bytecode, as ``pip install .`` does: an editable
    install under ``PYTHONDONTWRITEBYTECODE`` (this project's machine sets it)
    compiles every module from source at every start, which a user's
    installed package does not (about 60 ms of ``bootstorm optimize``)."""
    import compileall

    root = Path(__file__).resolve().parent.parent
    for package in (
        "bootstorm",
        "simulator",
        "models",
        "calibration",
        "optimizers",
        "validation",
        "traces",
    ):
        compileall.compile_dir(root / package, quiet=2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    parser.add_argument("--skip-scale", action="store_true")
    parser.add_argument("--skip-search", action="store_true")
    parser.add_argument("--run-ten-million", action="store_true")
    args = parser.parse_args()
    quick = args.quick
    simulate(Scenario(sandboxes=2), executor="compiled")  # numba loads outside the timings
    print(
        f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; "
        "median (interquartile range) of interleaved repeats; ratios within repeats"
    )
    compile_bytecode()
    rows = what_if(10 if quick else 40)
    rows += ten_thousand(3 if quick else 9)
    if not args.skip_scale:
        rows += scale(1 if quick else 3, run_ten_million=args.run_ten_million)
    if not args.skip_search:
        rows += search(1 if quick else 3)
    rows += start_up(5 if quick else 15)
    print(table_header())
    for r in rows:
        print(r)
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
