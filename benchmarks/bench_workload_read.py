"""Reading the public invocation traces at their published size.

The traces cannot be downloaded here, so this writes files of their size in
their exact layout (seeded, into a temporary directory) and times
``bootstorm workload FILE --json`` on them, each run a fresh process (its
wall time, its CPU time and its peak RSS from ``wait4``), interleaved with
the anchor, medians of ``--repeats``:

- **Azure Functions 2019, one day** (``invocations_per_function_md.anon.d01.csv``:
  HashOwner, HashApp, HashFunction, Trigger and 1 440 minute counts a row),
  46 413 functions with Poisson counts whose per-minute rates are
  log-uniform over 0.001-30 (most functions rare, a few hot, as the trace's
  paper describes): ~150 MB, ~200 million invocations. Read whole at a
  node share of 1 % (the loader's cap is 10 million invocations: a whole
  day is refused, naming the cap) and at a share of 10 % over its first
  ten minutes. Goal: under a minute and 1 GiB.
- **Azure Functions 2021, two weeks**
  (``AzureFunctionsInvocationTraceForTwoWeeksJan2021.txt``: app, func,
  end_timestamp, duration), 1 980 951 rows over 14 days. Goal: the same.

The anchor is the same command on the shipped 778-start workload: what a
planner waits for anyway (the interpreter, the imports).

Run: ``python benchmarks/bench_workload_read.py [--repeats N]``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _measure import Figure, paired_ratio, row, table_header

ROOT = Path(__file__).resolve().parent.parent
ANCHOR = ROOT / "traces" / "data" / "cni" / "traffic" / "workload-mmpp51.csv"
MINUTES = 1440
FUNCTIONS_2019 = 46_413
ROWS_2021 = 1_980_951
GIB = 1 << 30


def write_2019_day(path: Path, *, functions: int, seed: int = 0) -> int:
    """A day file in the 2019 layout; returns its invocations."""
    rng = np.random.default_rng(seed)
    header = ["HashOwner", "HashApp", "HashFunction", "Trigger", *map(str, range(1, MINUTES + 1))]
    total = 0
    with path.open("w") as f:
        f.write(",".join(header) + "\n")
        for i in range(functions):
            rate = 10 ** rng.uniform(-3.0, np.log10(30.0))
            counts = rng.poisson(rate, MINUTES)
            total += int(counts.sum())
            owner, app, func = (f"{k:064x}" for k in (i // 20, i // 3 + 10**6, i + 10**7))
            f.write(f"{owner},{app},{func},http," + ",".join(map(str, counts)) + "\n")
    return total


def write_2021(path: Path, *, rows: int, seed: int = 0) -> None:
    """Two weeks in the 2021 layout, rows in order of their end."""
    rng = np.random.default_rng(seed)
    apps = rng.integers(0, 119, rows)
    funcs = rng.integers(0, 424, rows)
    end = np.sort(rng.uniform(0.0, 14 * 86_400.0, rows))
    duration = rng.exponential(1.0, rows)
    with path.open("w") as f:
        f.write("app,func,end_timestamp,duration\n")
        for a, fn, e, d in zip(apps, funcs, end, duration, strict=True):
            f.write(f"{a:064x},{fn:064x},{e:.6f},{d:.6f}\n")


def _run(argv: list[str]) -> tuple[float, float, float]:
    """Wall s, CPU s and peak RSS bytes of one command in a fresh process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(argv)}: {proc.stderr.read().decode() if proc.stderr else ''}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    # The console script's own entry point, under this interpreter.
    bootstorm = [
        sys.executable,
        "-c",
        "import sys; from bootstorm.cli import main; sys.exit(main())",
    ]
    with tempfile.TemporaryDirectory(prefix="bench-workload-") as tmp:
        day = Path(tmp) / "invocations_per_function_md.anon.d01.csv"
        weeks = Path(tmp) / "AzureFunctionsInvocationTraceForTwoWeeksJan2021.txt"
        invocations = write_2019_day(day, functions=FUNCTIONS_2019)
        write_2021(weeks, rows=ROWS_2021)
        print(
            f"2019 day: {FUNCTIONS_2019:,} functions, {invocations:,} invocations, "
            f"{day.stat().st_size / 1e6:.0f} MB; 2021: {ROWS_2021:,} rows, "
            f"{weeks.stat().st_size / 1e6:.0f} MB\n"
        )
        runs = {
            "anchor": [*bootstorm, "workload", str(ANCHOR), "--json"],
            "2019 day, node share 1 %": [
                *bootstorm,
                "workload",
                str(day),
                "--node-share",
                "0.01",
                "--json",
            ],
            "2019 day, share 10 %, first 10 min": [
                *bootstorm,
                "workload",
                str(day),
                "--node-share",
                "0.1",
                "--window",
                "0:600",
                "--json",
            ],
            "2021 two weeks, whole": [*bootstorm, "workload", str(weeks), "--json"],
        }
        samples: dict[str, list[tuple[float, float, float]]] = {k: [] for k in runs}
        for _ in range(args.repeats):
            for name, argv in runs.items():
                samples[name].append(_run(argv))
    print(table_header())
    anchor = Figure(tuple(s[0] for s in samples["anchor"]))
    for name, got in samples.items():
        if name == "anchor":
            continue
        wall = Figure(tuple(s[0] for s in got))
        cpu = Figure(tuple(s[1] for s in got))
        rss = Figure(tuple(s[2] for s in got))
        print(
            row(
                f"{name}: wall (CPU {cpu.show(1.0, 's')}, peak RSS "
                f"{rss.show(1 / (1 << 20), 'MiB', 0)})",
                wall.show(1.0, "s"),
                "the shipped 778-start workload",
                anchor.show(1.0, "s"),
                paired_ratio(wall, anchor),
                "< 60 s, < 1 GiB" if rss.median < GIB and wall.median < 60 else "MISSED",
            )
        )


if __name__ == "__main__":
    main()
